"""An example serving-engine connector on top of kvtier (numpy arrays stand in for the
GPU KV cache). The real connectors, loaded by the engines themselves and checked against
their code, are kvtier.engines.vllm_connector, .lmcache_adapter and .sglang_backend
(docs/engines.md). This example shows where a Python engine's KV-connector hooks (vLLM's
KVConnector, SGLang's HiCache storage, LMCache's remote backend) map onto the client:

  new request     keys = prefix_keys(token ids); lookup(keys, lease_ms) -> matched
                  tokens, kept loadable by the lease until the load (vLLM's contract:
                  the matched tokens it reports must really load)
  load            get_blocks_into(the engine's KV pages for the matched blocks, RAW,
                  lease_id: the Get ends the lease)
  after prefill   put_blocks(the new full blocks, RAW, parent keys chained, with their
                  token ids for KV-aware routers' events)

The engine's paged KV pool lives in the client's shared region when the server is on this
host (allocate_shared_buffer), so loads and saves copy nothing on the client; otherwise it
is ordinary memory and payloads go over TCP.

  python3 examples/python/engine_adapter.py --server 127.0.0.1:50051
"""

import argparse
import dataclasses
import sys

import numpy as np

import kvtier


@dataclasses.dataclass
class Request:
    token_ids: np.ndarray
    keys: list = dataclasses.field(default_factory=list)
    matched_blocks: int = 0
    lease_id: int = 0  # the lookup's lease (0: none granted)
    pages: list = dataclasses.field(default_factory=list)  # page index per block


class PagedKvPool:
    """The engine's KV cache: `num_pages` pages, one kvtier block each, shape
    block_shape(layout); in the shared region when possible."""

    def __init__(self, client, layout, num_pages):
        self.shape = kvtier.block_shape(layout)
        nbytes = kvtier.bytes_per_block(layout) * num_pages
        try:
            self.memory = client.allocate_shared_buffer(nbytes)
            self.shared = True
        except kvtier.KvtierError:
            self.memory = np.zeros(nbytes, np.uint8)
            self.shared = False
        self.pages = self.memory.view(kvtier.numpy_dtype(layout)).reshape((num_pages,) + self.shape)
        self.free = list(range(num_pages))

    def allocate(self, n):
        taken, self.free = self.free[:n], self.free[n:]
        return taken


class KvtierConnector:
    LEASE_MS = 30000  # longer than a request waits between scheduling and its load

    def __init__(self, address, namespace, layout, codec="int8", tenant="", num_pages=64):
        self.ns = namespace
        self.tenant = tenant
        self.block_tokens = layout.tokens_per_block
        spec = kvtier.make_namespace(namespace, layout, codec=codec, tenant=tenant)
        self.client = kvtier.Client(address, namespace=spec)
        self.pool = PagedKvPool(self.client, layout, num_pages)

    def close(self):
        self.client.close()

    # Hook 1: scheduling a new request. Returns the number of tokens kvtier can supply.
    def get_num_matched_tokens(self, req):
        req.keys = kvtier.prefix_keys(req.token_ids, self.ns, tenant=self.tenant,
                                      tokens_per_block=self.block_tokens)
        req.pages = self.pool.allocate(len(req.keys))
        if not req.keys:
            return 0
        found = self.client.lookup(self.ns, req.keys, lease_ms=self.LEASE_MS)
        req.matched_blocks = found.leased_blocks  # what stays loadable until the load
        req.lease_id = found.blocks[0].lease_id if found.leased_blocks else 0
        return req.matched_blocks * self.block_tokens

    # Hook 2: before the forward pass, load the matched blocks into the request's pages.
    def load(self, req):
        n = req.matched_blocks
        if n == 0:
            return 0
        bufs = [self.pool.pages[p] for p in req.pages[:n]]
        infos = self.client.get_blocks_into(self.ns, req.keys[:n], bufs, format=kvtier.RAW,
                                            lease_id=req.lease_id)
        req.lease_id = 0
        loaded = 0
        for info in infos:  # leased, so all found; without a lease a miss ends the prefix
            if not info.found:
                break
            loaded += 1
        req.matched_blocks = loaded
        return loaded

    # Hook 3: after prefill, save the full blocks kvtier did not have.
    def save(self, req):
        new = range(req.matched_blocks, len(req.keys))
        t = self.block_tokens
        blocks = [kvtier.PutBlock(req.keys[i], self.pool.pages[req.pages[i]],
                                  req.keys[i - 1] if i else b"", i,
                                  token_ids=req.token_ids[i * t:(i + 1) * t]) for i in new]
        if blocks:
            self.client.put_blocks(self.ns, blocks, format=kvtier.RAW)
        return len(blocks)


def fake_prefill(pool, req, start_block, seed):
    """Stands in for the model: writes KV for blocks [start_block, ...) of the request."""
    for b in range(start_block, len(req.keys)):
        rng = np.random.default_rng([seed, *req.token_ids[:(b + 1) * pool.shape[3]].tolist()])
        pool.pages[req.pages[b]][...] = rng.standard_normal(pool.shape).astype(np.float16)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--server", required=True)
    p.add_argument("--namespace", default="example-engine")
    args = p.parse_args(argv)
    layout = kvtier.make_layout(num_layers=4, num_kv_heads=2, head_dim=64, tokens_per_block=16)
    conn = KvtierConnector(args.server, args.namespace, layout, codec="fp16")
    try:
        rng = np.random.default_rng(0)
        system_prompt = rng.integers(0, 128000, 48)
        a = Request(np.concatenate([system_prompt, rng.integers(0, 128000, 20)]))
        b = Request(np.concatenate([system_prompt, rng.integers(0, 128000, 40)]))
        report = {}
        for name, req in (("a", a), ("b", b)):
            matched = conn.get_num_matched_tokens(req)
            loaded = conn.load(req)
            fake_prefill(conn.pool, req, loaded, seed=1)
            saved = conn.save(req)
            report[name] = (matched, loaded, saved)
            print("request %s: %d tokens, %d matched in kvtier, %d blocks loaded, %d saved "
                  "(shared memory: %s)" % (name, len(req.token_ids), matched, loaded, saved,
                                           conn.pool.shared))
        # b's first three blocks came from a's KV: the same bytes.
        same = all(np.array_equal(conn.pool.pages[a.pages[i]], conn.pool.pages[b.pages[i]])
                   for i in range(3))
        print("shared prefix KV identical: %s" % same)
        leases = conn.client.stats(conn.ns).leases.active
        print("leases in force after the loads: %d" % leases)  # each Get ended its lease
        return 0 if same and report["b"][1] == 3 and leases == 0 else 1
    finally:
        conn.close()


if __name__ == "__main__":
    sys.exit(main())
