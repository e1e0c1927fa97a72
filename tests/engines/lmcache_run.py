"""One LMCache in-process engine (lmcache 0.5.6, its real LMCacheEngine, StorageManager,
LocalCPUBackend and RemoteBackend) with kvtier as its remote_storage_plugins adapter, for
tests/engines/test_lmcache.py. LMCache reads its config from the YAML file (the documented
LMCACHE_CONFIG_FILE form). The serving engine's paged KV cache is a CPU tensor
[layers, 2, slots, kv_heads, head_dim]; PagedCpuKv moves chunks between it and LMCache's
memory objects ([2, layers, tokens, kv_heads*head_dim]) as LMCache's GPU connectors do.

  lmcache_run.py store    --config F --tokens N --seed S --out J --kvtier A   store N tokens of
                                                                   seeded KV
  lmcache_run.py retrieve --config F --tokens N --seed S --out J   lookup + retrieve into a
                                                                   zeroed cache, compare
  --salt X tags every request with lmcache.tag.cache_salt=X (kvtier tenant X).
"""

import argparse
import json
import sys
import time

import torch

LAYERS, HEADS, HEAD_DIM, SLOTS = 4, 2, 32, 512
MODEL = "kvtier-test/tiny-llama"


class PagedCpuKv:
    """A GPUConnectorInterface over one CPU paged KV tensor; kwargs slot_mapping (one slot
    per token of the request)."""

    def __init__(self, kv):
        from lmcache.v1.gpu_connector import GPUConnectorInterface  # noqa: F401
        self.kv = kv

    def _slots(self, kwargs, start, end):
        return kwargs["slot_mapping"][start:end].long()

    def from_gpu(self, memory_obj, start, end, **kwargs):
        s = self._slots(kwargs, start, end)
        t = self.kv[:, :, s]                        # [L, 2, T, H, D]
        memory_obj.tensor.copy_(t.permute(1, 0, 2, 3, 4).reshape(2, LAYERS, end - start, -1))

    def to_gpu(self, memory_obj, start, end, **kwargs):
        s = self._slots(kwargs, start, end)
        t = memory_obj.tensor.reshape(2, LAYERS, end - start, HEADS, HEAD_DIM)
        self.kv[:, :, s] = t.permute(1, 0, 2, 3, 4)

    def batched_from_gpu(self, memory_objs, starts, ends, **kwargs):
        for m, s, e in zip(memory_objs, starts, ends):
            self.from_gpu(m, s, e, **kwargs)

    def batched_to_gpu(self, memory_objs=None, starts=None, ends=None, **kwargs):
        for m, s, e in zip(memory_objs, starts, ends):
            self.to_gpu(m, s, e, **kwargs)

    def get_shape(self, num_tokens):
        return torch.Size([2, LAYERS, num_tokens, HEADS * HEAD_DIM])


def make_connector_class():
    from lmcache.v1.gpu_connector import GPUConnectorInterface

    class Connector(PagedCpuKv, GPUConnectorInterface):
        pass
    return Connector


def build_engine(config_file, kv):
    from lmcache.v1.cache_engine import LMCacheEngineBuilder
    from lmcache.v1.config import LMCacheEngineConfig
    from lmcache.v1.metadata import LMCacheMetadata
    config = LMCacheEngineConfig.from_file(config_file)
    metadata = LMCacheMetadata(model_name=MODEL, world_size=1, local_world_size=1, worker_id=0,
                               local_worker_id=0, kv_dtype=torch.bfloat16,
                               kv_shape=(LAYERS, 2, config.chunk_size, HEADS, HEAD_DIM),
                               chunk_size=config.chunk_size, role="worker")
    engine = LMCacheEngineBuilder.get_or_create(
        "kvtier-test", config, metadata, make_connector_class()(kv),
        lambda t, src: None, lambda o, src: o)
    engine.post_init()  # builds the StorageManager, as LMCache's integrations do
    return engine


def seeded(seed, n):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, 32000, (n,), generator=g)
    kv = torch.randn(LAYERS, 2, n, HEADS, HEAD_DIM, generator=g).to(torch.bfloat16)
    return tokens, kv


def wait_for_puts(address, chunks, timeout=20.0):
    """Blocks stored in kvtierd's lmcache namespaces once they reach `chunks` or the time
    is up (a down kvtierd: 0 after the timeout)."""
    import kvtier
    end, got = time.monotonic() + timeout, 0
    while time.monotonic() < end:
        try:
            with kvtier.Client(address, connect_timeout=1.0, timeout=2.0) as c:
                got = sum(s.puts for s in c.stats().namespaces if s.name.startswith("lmcache/"))
        except kvtier.KvtierError:
            got = 0
        if got >= chunks:
            break
        time.sleep(0.2)
    return got


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["store", "retrieve"])
    p.add_argument("--config", required=True)
    p.add_argument("--tokens", type=int, default=53)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--salt", default="")
    p.add_argument("--kvtier", required=True, help="the kvtierd of the config (to wait for puts)")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    tokens, want = seeded(args.seed, args.tokens)
    n = args.tokens
    kv = torch.zeros(LAYERS, 2, SLOTS, HEADS, HEAD_DIM, dtype=torch.bfloat16)
    # The request's tokens sit at scattered slots of the paged cache, as in a real engine.
    slots = torch.randperm(SLOTS, generator=torch.Generator().manual_seed(args.seed + 7))[:n]
    engine = build_engine(args.config, kv)
    extra = {"request_configs": {"lmcache.tag.cache_salt": args.salt}} if args.salt else {}
    report = {}
    t0 = time.perf_counter()
    if args.mode == "store":
        kv[:, :, slots] = want
        engine.store(tokens, slot_mapping=slots, **extra)
        report["store_s"] = time.perf_counter() - t0
        # LMCache puts in the background: wait (bounded) until kvtierd holds the full
        # chunks before closing the engine (its close frees the chunks' memory).
        remote = [b for name, b in engine.storage_manager.storage_backends.items()
                  if name.startswith("RemoteBackend")]
        report["stored_chunks"] = wait_for_puts(args.kvtier, n // engine.config.chunk_size)
        report["backends"] = list(engine.storage_manager.storage_backends)
        report["put_failed"] = remote[0].put_failed_count if remote else None
    else:
        looked = engine.lookup(tokens, request_configs=extra.get("request_configs"))
        report["lookup"] = looked
        mask = engine.retrieve(tokens, slot_mapping=slots, **extra)
        got = int(mask.sum())
        report["retrieved"] = got
        report["retrieve_s"] = time.perf_counter() - t0
        report["byte_exact"] = bool(got > 0 and torch.equal(
            kv[:, :, slots[:got]].view(torch.int16), want[:, :, :got].view(torch.int16)))
        report["rest_untouched"] = bool((kv[:, :, slots[got:]] == 0).all())
    report["chunk_size"] = engine.config.chunk_size
    with open(args.out, "w") as f:
        json.dump(report, f)
    print(json.dumps(report), flush=True)
    from lmcache.v1.cache_engine import LMCacheEngineBuilder
    LMCacheEngineBuilder.destroy("kvtier-test")
    return 0


if __name__ == "__main__":
    sys.exit(main())
