"""One SGLang HiCache storage process (sglang 0.5.23's own code) with kvtier as its L3 backend,
for tests/engines/test_sglang.py. The backend is built by SGLang's StorageBackendFactory from
the documented --hicache-storage-backend-extra-config JSON; pages live in SGLang's real CPU
host pool (MHATokenToKVPoolHost over an MHATokenToKVPool on device "cpu"), page keys come
from SGLang's own get_hash_str chain. SGLang cannot serve on CPU here (docs/engines.md), so
store/load drive the backend as the cache controller's v1 path does (batch_set_v1 on backup,
batch_exists then batch_get_v1 on prefetch, token-level host indices), and backup/prefetch
run the real controller's threads.

  sglang_run.py store --kvtier A --layouts L,... --out J   fill pages with seeded KV, back
                                                            them up; J: per-page digests
  sglang_run.py load  --kvtier A --layouts L,... --out J   a zeroed pool at other slots:
                                                            exists + get, digests of what came
  sglang_run.py backup   --kvtier A --out J   the real HiCacheController's backup thread
  sglang_run.py prefetch --kvtier A --out J   its prefetch and IO threads (run_controller)
  --model M --tp-rank R --tp-size N --seed S name the deployment and the tokens.
"""

import argparse
import hashlib
import json
import sys
import time

import torch

LAYERS, HEADS, HEAD_DIM, PAGE, PAGES = 3, 2, 8, 4, 6
DTYPE = torch.bfloat16


def config_line(address):
    """The documented extra config (docs/engines.md), as SGLang receives it."""
    return json.dumps({"backend_name": "kvtier", "module_path": "kvtier.engines.sglang_backend",
                       "class_name": "KvtierHiCacheStorage", "interface_v1": 1,
                       "hicache_storage_pass_prefix_keys": True, "kvtier_address": address,
                       "kvtier_timeout_s": 2, "kvtier_connect_timeout_s": 2})


def host_pool(layout, slots, with_device=False):
    """SGLang's own host pool for `layout` over a CPU device pool, built as its
    hybrid_pool_assembler builds the primary MHA host pool (host = 2x device)."""
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
    from sglang.srt.mem_cache.pool_host.mha import get_mha_host_pool_cls
    device = MHATokenToKVPool(size=slots, page_size=PAGE, dtype=DTYPE, head_num=HEADS,
                              head_dim=HEAD_DIM, layer_num=LAYERS, device="cpu",
                              enable_memory_saver=False)
    info = device.get_device_pool_infos()[0].buffer_info
    pool = get_mha_host_pool_cls(info)(
        info, 2.0, 0, PAGE, layout, pin_memory=False, device="cpu",
        device_capacity_tokens=device.size, start_layer=device.start_layer,
        end_layer=device.end_layer)
    return (pool, device) if with_device else pool


def storage_config(args, pool):
    """HiCacheStorageConfig as HiCacheController._generate_storage_config fills it."""
    from sglang.srt.managers.cache_controller import storage_model_name
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig
    extra = json.loads(config_line(args.kvtier))
    # SGLang pops its own keys before the backend sees extra_config.
    extra.pop("hicache_storage_pass_prefix_keys")
    return HiCacheStorageConfig(tp_rank=args.tp_rank, tp_size=args.tp_size, pp_rank=0,
                                pp_size=1, attn_cp_rank=0, attn_cp_size=1, is_mla_model=False,
                                enable_storage_metrics=False,
                                is_page_first_layout=pool.layout == "page_first",
                                model_name=storage_model_name(args.model, pool),
                                extra_config=extra)


def tokens_of(seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 50000, (PAGES * PAGE,), generator=g).tolist()


def page_keys(seed):
    from sglang.srt.mem_cache.utils import get_hash_str
    tokens = tokens_of(seed)
    keys, prior = [], None
    for p in range(PAGES):
        prior = get_hash_str(tokens[p * PAGE:(p + 1) * PAGE], prior_hash=prior)
        keys.append(prior)
    return keys


def page_digests(pool, indices):
    return [hashlib.sha256(pool.get_data_page(indices[p * PAGE], flat=True).contiguous()
                           .view(torch.uint8).numpy().tobytes()).hexdigest()
            for p in range(len(indices) // PAGE)]


def run_layout(args, layout):
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorageExtraInfo
    from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory
    pool = host_pool(layout, 64)
    pool.kv_buffer.zero_()
    t0 = time.monotonic()
    # As HiCacheController.attach_storage_backend: create, register the host pool, signal.
    backend = StorageBackendFactory.create_backend("dynamic", storage_config(args, pool), pool)
    backend.register_mem_pool_host(pool)
    backend.on_host_pools_registered()
    out = {"backend": type(backend).__module__ + "." + type(backend).__name__,
           "namespace": backend.identity.namespace if backend.identity else None,
           "regions": backend.regions_per_page, "region_bytes": backend.region_bytes}
    keys = page_keys(args.seed)
    if args.mode == "store":
        idx = pool.alloc(PAGES * PAGE)
        g = torch.Generator().manual_seed(args.seed * 7919 + len(layout) + 1000 * args.tp_rank)
        pool.kv_buffer.view(torch.int16).copy_(
            torch.randint(-30000, 30000, pool.kv_buffer.shape, dtype=torch.int16, generator=g))
        out["digests"] = page_digests(pool, idx)
        half = PAGES // 2  # two calls: the second names the first's pages as its prefix
        r1 = backend.batch_set_v1(keys[:half], idx[:half * PAGE])
        r2 = backend.batch_set_v1(keys[half:], idx[half * PAGE:],
                                  HiCacheStorageExtraInfo(prefix_keys=keys[:half]))
        out["set"] = list(r1) + list(r2)
    else:
        pool.alloc(5 * PAGE)  # other slots than the storing process used
        idx = pool.alloc(PAGES * PAGE)
        before = pool.kv_buffer.clone()
        out["exists"] = backend.batch_exists(keys)
        out["get"] = list(backend.batch_get_v1(keys, idx))
        out["digests"] = page_digests(pool, idx)
        mask = torch.ones(pool.size, dtype=torch.bool)
        mask[idx] = False
        if layout == "layer_first":
            rest_same = torch.equal(pool.kv_buffer[:, :, mask], before[:, :, mask])
        elif layout == "page_first":
            rest_same = torch.equal(pool.kv_buffer[:, mask], before[:, mask])
        else:  # the page-major layouts: whole pages
            pages = mask.view(-1, PAGE).all(dim=1)
            rest_same = torch.equal(pool.kv_buffer[:, pages], before[:, pages])
        out["rest_untouched"] = bool(rest_same)
    out["wall_s"] = time.monotonic() - t0
    backend.close()
    return out


def run_controller(args):
    """SGLang's real HiCacheController (page_first pool, write_through, direct IO) with the
    backend attached by its own attach_storage_backend from the extra config: "backup" queues
    write_storage and waits for its backup thread's ack; "prefetch" queues prefetch, takes
    the hit from its prefetch thread, does the scheduler's part (allocate host slots, hand
    the operation to the IO thread) and waits for the TP-reduced acks. The parallel state a
    launched server publishes is stated with get_parallel().override_permanently (TP 1)."""
    import threading
    from sglang.srt.managers.cache_controller import HiCacheController
    from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator
    from sglang.srt.runtime_context import get_parallel
    get_parallel().override_permanently(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1,
                                        attn_dcp_size=1, attn_dcp_rank=0)
    pool, device = host_pool("page_first", 64, with_device=True)
    pool.kv_buffer.zero_()
    allocator = TokenToKVPoolAllocator(64, DTYPE, "cpu", device, False)
    cc = HiCacheController(allocator, pool, PAGE, None, threading.Event(),
                           write_policy="write_through", io_backend="direct",
                           storage_backend="dynamic", model_name=args.model,
                           storage_backend_extra_config=json.loads(config_line(args.kvtier)))
    out = {"backend": type(cc.storage_backend).__name__, "set_func": cc.page_set_func.__name__,
           "get_func": cc.page_get_func.__name__}
    tokens, keys = tokens_of(args.seed), page_keys(args.seed)
    t0 = time.monotonic()
    if args.mode == "backup":
        idx = pool.alloc(PAGES * PAGE)
        g = torch.Generator().manual_seed(args.seed * 7919)
        pool.kv_buffer.view(torch.int16).copy_(
            torch.randint(-30000, 30000, pool.kv_buffer.shape, dtype=torch.int16, generator=g))
        out["digests"] = page_digests(pool, idx)
        op_id = cc.write_storage(idx, tokens, hash_value=keys, prefix_keys=[])
        op = cc.ack_backup_queue.get(timeout=60)
        out["acked"] = op.id == op_id
        out["completed_tokens"] = op.completed_tokens
    else:
        pool.alloc(5 * PAGE)
        op = cc.prefetch("req-1", tokens, None, prefix_keys=[])
        hit = cc.prefetch_hit_queue.get(timeout=60)
        out["hit_tokens"] = hit.storage_hit_count
        idx = pool.alloc(hit.storage_hit_count) if hit.storage_hit_count else None
        out["completed_tokens"] = 0
        if idx is not None:
            hit.host_indices = idx
            cc.prefetch_buffer.put(hit)
            while True:
                ack = cc.ack_prefetch_queue.get(timeout=60)
                if ack.completed_tokens is not None:
                    out["completed_tokens"] = max(out["completed_tokens"], ack.completed_tokens)
                if ack.completed_req:
                    break
            out["digests"] = page_digests(pool, idx)
        out["hash_values"] = list(hit.hash_value)
        out["keys_match"] = list(hit.all_hash_values or []) == keys
    out["wall_s"] = time.monotonic() - t0
    cc.storage_stop_event.set()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["store", "load", "backup", "prefetch"])
    ap.add_argument("--kvtier", required=True)
    ap.add_argument("--layouts", default="layer_first,page_first,page_first_direct,page_head")
    ap.add_argument("--model", default="kvtier-test/tiny-llama")
    ap.add_argument("--tp-rank", type=int, default=0)
    ap.add_argument("--tp-size", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import sglang
    res = {"sglang": sglang.__version__, "keys": page_keys(args.seed), "layouts": {}}
    if args.mode in ("backup", "prefetch"):
        res["controller"] = run_controller(args)
    else:
        for layout in args.layouts.split(","):
            res["layouts"][layout] = run_layout(args, layout)
    with open(args.out, "w") as f:
        json.dump(res, f)


if __name__ == "__main__":
    sys.exit(main())
