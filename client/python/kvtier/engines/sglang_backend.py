"""kvtier as an SGLang HiCache (L3) storage backend, built by SGLang's own factory:

  --enable-hierarchical-cache --hicache-storage-backend dynamic
  --hicache-storage-backend-extra-config '{"backend_name":"kvtier","module_path":
    "kvtier.engines.sglang_backend","class_name":"KvtierHiCacheStorage","interface_v1":1,
    "hicache_storage_pass_prefix_keys":true,"kvtier_address":"127.0.0.1:50051"}'

Zero-copy v1: batch_set_v1 / batch_get_v1 move pages between kvtierd and the host pool's
own page buffers (mem_pool_host.get_page_buffer_meta: raw addresses and sizes), with no
staging in this module. Each buffer region of a page is one kvtier block (K and V for the
page-first layouts, K and V of every layer for layer_first), stored byte for byte (identity
codec); region r of page key p has key derive(identity, p + "#" + r). batch_exists counts
the leading pages all of whose regions kvtierd holds. Puts carry the parent chain: page i's
blocks name page i-1's (from extra_info.prefix_keys for the first page of a call) and
block_index = its position in the sequence.

Identity (namespace): the served model name with the host pool's storage tag, SGLang
version, KV dtype, page size, layer / head geometry, host layout, region sizes, TP size and
rank (not for MLA, whose ranks hold the same KV), PP, attention-CP and DCP ranks. SGLang's page
keys carry none of these. A down, slow or refusing kvtierd makes every call a miss within
kvtier_timeout_s (SGLang then computes); nothing raises into SGLang's threads.

extra_config keys (besides SGLang's own): kvtier_address (required), kvtier_timeout_s (2),
kvtier_connect_timeout_s (2), kvtier_retry_s (5), kvtier_tenant (""), kvtier_model_id ("").
Checked against sglang 0.5.23's own code (tests/engines/test_sglang.py, docs/engines.md):
built by StorageBackendFactory from the config line above, then registered on SGLang's real
CPU host pool (MHATokenToKVPoolHost) as HiCacheController.attach_storage_backend does; pages
round-trip byte-exact across processes in layer_first, page_first, page_first_direct and
page_head; other models / TP ranks miss; a down kvtierd is a bounded miss; SGLang's real
HiCacheController attaches it (attach_storage_backend, v1 path), its backup thread stores and
its prefetch + IO threads find and load the pages in another process. NOT checked: MLA host
pools, heterogeneous TP (should_split_heads), TP > 1 collectives, clear(), serving (SGLang
cannot serve on CPU here; a GPU check is to come).
"""

import ctypes
import logging

import numpy as np

import kvtier
from kvtier.engines import common

from sglang.srt.mem_cache.hicache_storage import HiCacheStorage

log = logging.getLogger("kvtier.engines.sglang")

class KvtierHiCacheStorage(HiCacheStorage):
    """See the module docstring. Constructed as cls(storage_config, kwargs) by SGLang's
    StorageBackendFactory; usable once register_mem_pool_host has run."""

    def __init__(self, storage_config, kwargs=None):
        self.config = storage_config
        self.extra = dict(storage_config.extra_config or {}) if storage_config else {}
        self.link = None
        self.identity = None
        self.region_bytes = 0
        self.regions_per_page = 0
        self.is_writer = getattr(storage_config, "is_storage_writer", True)

    # -- set up

    def register_mem_pool_host(self, mem_pool_host):
        super().register_mem_pool_host(mem_pool_host)
        import sglang
        c, pool = self.config, mem_pool_host
        page = pool.page_size
        ptrs, sizes = pool.get_page_buffer_meta(_first_page(pool))
        if len(set(sizes)) != 1:
            raise ValueError("kvtier: host pool regions of unequal sizes %s" % sorted(set(sizes)))
        self.regions_per_page, self.region_bytes = len(ptrs), sizes[0]
        mla = bool(c.is_mla_model)
        fields = {"model": c.model_name, "sglang": getattr(sglang, "__version__", ""),
                  "dtype": str(pool.dtype), "page_size": page,
                  "layer_num": getattr(pool, "layer_num", None),
                  "head_num": getattr(pool, "head_num", None),
                  "head_dim": getattr(pool, "head_dim", None),
                  "layout": pool.layout, "regions": self.regions_per_page,
                  "region_bytes": self.region_bytes, "mla": mla,
                  "tp_size": None if mla else c.tp_size, "tp_rank": None if mla else c.tp_rank,
                  "pp_size": c.pp_size, "pp_rank": c.pp_rank,
                  "attn_cp_size": c.attn_cp_size, "attn_cp_rank": c.attn_cp_rank,
                  "dcp_size": getattr(c, "dcp_size", 1), "dcp_rank": getattr(c, "dcp_rank", 0),
                  "split_heads": bool(getattr(c, "should_split_heads", False)),
                  "model_id": self.extra.get("kvtier_model_id", "")}
        self.identity = common.Identity("sglang", c.model_name or "model", fields)
        spec = kvtier.make_namespace(self.identity.namespace,
                                     common.opaque_layout(self.region_bytes), codec="fp16",
                                     tenant=self.extra.get("kvtier_tenant", ""),
                                     model_id=self.identity.label)
        self.link = common.Link(self.extra.get("kvtier_address", "127.0.0.1:50051"), spec,
                                timeout_s=float(self.extra.get("kvtier_timeout_s", 2.0)),
                                connect_timeout_s=float(self.extra.get("kvtier_connect_timeout_s",
                                                                       2.0)),
                                retry_s=float(self.extra.get("kvtier_retry_s", 5.0)))
        log.info("kvtier HiCache backend: %s", self.identity.describe())

    # -- keys and buffers

    def _keys(self, page_keys):
        """kvtier keys, regions_per_page per page, page-major."""
        r = self.regions_per_page
        return common.derive_keys(self.identity,
                                  ["%s#%d" % (k, i) for k in page_keys for i in range(r)])

    def _views(self, host_indices):
        ptrs, sizes = self.mem_pool_host.get_page_buffer_meta(host_indices)
        return [np.ctypeslib.as_array((ctypes.c_uint8 * n).from_address(p))
                for p, n in zip(ptrs, sizes)]

    # -- v1 (zero copy)

    def batch_exists(self, keys, extra_info=None):
        if not keys or self.link is None:
            return 0
        kk = self._keys(keys)
        resp = self.link.call("lookup", lambda c: c.lookup(self.link.ns, kk), None)
        if resp is None:
            return 0
        r = self.regions_per_page
        for page in range(len(keys)):
            if any(resp.blocks[page * r + i].tier == kvtier.pb.TIER_NONE for i in range(r)):
                return page
        return len(keys)

    def batch_get_v1(self, keys, host_indices, extra_info=None):
        if not keys or self.link is None:
            return [False] * len(keys)
        views, kk = self._views(host_indices), self._keys(keys)
        infos = self.link.call("get", lambda c: c.get_blocks_into(self.link.ns, kk, views,
                                                                  format=kvtier.RAW), None)
        r = self.regions_per_page
        out = []
        for page in range(len(keys)):
            ok = infos is not None and all(
                infos[page * r + i].found and infos[page * r + i].size == self.region_bytes
                for i in range(r))
            out.append(bool(ok) and (not out or out[-1]))  # success is a prefix
        return out

    def batch_set_v1(self, keys, host_indices, extra_info=None):
        if not keys or self.link is None:
            return [False] * len(keys)
        if not self.is_writer:
            return [True] * len(keys)  # an MLA replica: the writer rank stores these pages
        views, kk = self._views(host_indices), self._keys(keys)
        prefix = list(extra_info.prefix_keys or []) if extra_info is not None else []
        base = len(prefix)
        parent = self._keys(prefix[-1:])[0] if prefix else b""
        r = self.regions_per_page
        blocks = []
        for page in range(len(keys)):
            for i in range(r):
                j = page * r + i
                blocks.append(kvtier.PutBlock(kk[j], views[j], parent, base + page))
            parent = kk[page * r]
        res = self.link.call("put", lambda c: c.put_blocks(self.link.ns, blocks,
                                                           format=kvtier.RAW), None)
        ok = res is not None and res.blocks_stored == len(blocks)
        return [ok] * len(keys)

    # -- the generic (copying) interface SGLang still declares abstract

    def exists(self, key):
        return self.batch_exists([key]) == 1

    def get(self, key, target_location=None, target_sizes=None):
        return None  # interface_v1 is required: see the module docstring

    def batch_get(self, keys, target_locations=None, target_sizes=None):
        return [None] * len(keys)

    def set(self, key, value=None, target_location=None, target_sizes=None):
        return False

    def batch_set(self, keys, values=None, target_locations=None, target_sizes=None):
        return False

    def clear(self):
        if self.link is not None:
            self.link.call("evict", lambda c: c.evict(self.link.ns, drop=True), 0)

    def close(self):
        if self.link is not None:
            self.link.close()


def _first_page(pool):
    import torch
    return torch.arange(pool.page_size, dtype=torch.int64)
