"""kvtier as LMCache storage (checked against lmcache 0.5.6, tests/engines/test_lmcache.py):

1. In-process engine (LMCache inside vLLM / SGLang): a remote_storage_plugins adapter.
     local_cpu: true
     remote_storage_plugins: ["kvtier"]
     extra_config: {"remote_storage_plugin.kvtier.module_path": "kvtier.engines.lmcache_adapter",
                    "remote_storage_plugin.kvtier.class_name": "KvtierConnectorAdapter",
                    "remote_storage_plugin.kvtier.address": "127.0.0.1:50051"}
   LMCache builds KvtierConnectorAdapter() and asks it for a RemoteConnector. Each full chunk
   (the MemoryObj's bytes, [2, layers, tokens, heads*head_dim]) is one kvtier block, stored
   byte for byte (identity codec); the namespace is the engine's identity (model, world
   size, worker, KV dtype and shape, chunk size, format) and the key is derived from the
   whole CacheEngineKey string. A key tagged lmcache.tag.cache_salt (or .tenant) goes to
   that tenant's namespace. Partial chunks (save_unfull_chunk) are not stored: a miss.
   exists_sync returns a bool; every call runs with a deadline, and a down kvtierd is a
   miss (exists False, get None, put dropped and logged).

2. `lmcache server` (multiprocess mode): the L2 native_plugin client.
     lmcache server ... --l2-adapter '{"type":"native_plugin","module_path":
       "kvtier.engines.lmcache_adapter","class_name":"KvtierL2Client",
       "adapter_params":{"address":"127.0.0.1:50051"}}'
   Keys "<model>@<kv_rank:08x>@<group:x>@<chunk_hash hex>[@<cache_salt>]": the namespace is
   (model, kv_rank, group), its tenant the cache_salt, its block size the objects' size
   (registered by the first store; a restarted server finds it by name); objects are
   stored byte for byte. Calls run on a worker thread; completions are signalled on one eventfd.

Thread-safe as LMCache uses them.
"""

import asyncio
import collections
import concurrent.futures
import hashlib
import logging
import os
import threading

import numpy as np

import kvtier
from kvtier.engines import common

from lmcache.v1.storage_backend.connector import ConnectorAdapter, extract_plugin_type
from lmcache.v1.storage_backend.connector.base_connector import RemoteConnector

log = logging.getLogger("kvtier.engines.lmcache")

PLUGIN_TYPE = "kvtier"
_TENANT_TAGS = ("cache_salt", "tenant")
_DTYPES = {"torch.float16": "fp16", "torch.bfloat16": "bf16"}


def _link_options(get):
    return dict(timeout_s=float(get("timeout_s", 2.0)),
                connect_timeout_s=float(get("connect_timeout_s", 2.0)),
                retry_s=float(get("retry_s", 5.0)))


def _tenant_ns(base, tenant):
    """Namespace name of `tenant`'s share of base (names are global; tenants own them)."""
    if not tenant:
        return base
    return "%s/t-%s" % (base, hashlib.sha256(tenant.encode()).hexdigest()[:16])


class KvtierRemoteConnector(RemoteConnector):
    """LMCache RemoteConnector over kvtierd (see the module docstring)."""

    def __init__(self, context):
        config, metadata = context.config, context.metadata
        super().__init__(config, metadata)
        self.loop = context.loop
        self.local_cpu_backend = context.local_cpu_backend
        name = context.plugin_name or PLUGIN_TYPE
        extra = dict(config.extra_config or {}) if config is not None else {}

        def get(k, default=None):
            return extra.get("remote_storage_plugin.%s.%s" % (name, k), default)

        self.address = get("address") or context.url.split("://", 1)[-1]
        self._conn = common.Connection(self.address, **_link_options(get))
        self.default_tenant = get("tenant", "")
        import lmcache
        shapes = [list(s) for s in self.meta_shapes]
        fields = {"model": metadata.model_name, "world_size": metadata.world_size,
                  "worker_id": metadata.worker_id, "kv_dtype": str(metadata.kv_dtype),
                  "kv_shape": list(metadata.kv_shape), "chunk_size": metadata.chunk_size,
                  "use_mla": bool(metadata.use_mla), "fmt": str(self.meta_fmt),
                  "shapes": shapes, "dtypes": [str(d) for d in self.meta_dtypes],
                  "serde": getattr(config, "remote_serde", None),
                  "model_id": get("model_id", ""),
                  "lmcache": getattr(lmcache, "__version__", "")}
        self.identity = common.Identity("lmcache", metadata.model_name, fields)
        self.chunk_bytes = self.full_chunk_size_bytes
        kv = metadata.kv_shape  # (layers, 2, chunk, kv_heads, head_size)
        dtype = _DTYPES.get(str(metadata.kv_dtype))
        if (dtype and not metadata.use_mla and len(kv) == 5 and
                4 * kv[0] * kv[3] * kv[4] * metadata.chunk_size == self.chunk_bytes):
            self.layout = common.block_layout(kv[0], kv[3], kv[4], metadata.chunk_size, dtype)
            self.codec = dtype
        else:
            self.layout = common.opaque_layout(self.chunk_bytes)
            self.codec = "fp16"
        self._links = {}
        self._lock = threading.Lock()
        self._pool = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="kvtier-lmc")
        log.info("kvtier LMCache connector: %s", self.identity.describe())

    # -- keys and namespaces

    def _tenant(self, key):
        for k, v in (key.tags or ()):
            if k in _TENANT_TAGS:
                return str(v)
        return self.default_tenant

    def _link(self, tenant):
        with self._lock:
            link = self._links.get(tenant)
            if link is None:
                spec = kvtier.make_namespace(_tenant_ns(self.identity.namespace, tenant),
                                             self.layout, codec=self.codec, tenant=tenant,
                                             model_id=self.identity.label)
                link = self._links[tenant] = common.Link(self._conn, spec)
            return link

    def _kvkey(self, key):
        return common.derive_keys(self.identity, [key.to_string()])[0]

    def _groups(self, keys):
        """[(link, [index...])] grouping keys by tenant, in first-seen order."""
        groups = collections.OrderedDict()
        for i, k in enumerate(keys):
            groups.setdefault(self._tenant(k), []).append(i)
        return [(self._link(t), idx) for t, idx in groups.items()]

    # -- synchronous cores (run on the pool from the async API)

    def _present(self, keys):
        """Per key: stored in kvtier (False when kvtierd is unreachable)."""
        out = [False] * len(keys)
        for link, idx in self._groups(keys):
            kk = [self._kvkey(keys[i]) for i in idx]
            resp = link.call("lookup", lambda c: c.lookup(link.ns, kk), None)
            if resp is None:
                continue
            for j, i in enumerate(idx):
                out[i] = resp.blocks[j].tier != kvtier.pb.TIER_NONE
        return out

    def _get_many(self, keys):
        objs = [None] * len(keys)
        for link, idx in self._groups(keys):
            bufs, got = [], []
            for i in idx:
                obj = self.local_cpu_backend.allocate(self.meta_shapes, self.meta_dtypes,
                                                      self.meta_fmt)
                if obj is None:
                    break
                got.append((i, obj))
                bufs.append(np.frombuffer(obj.byte_array, dtype=np.uint8))
            kk = [self._kvkey(keys[i]) for i, _ in got]
            infos = link.call("get", lambda c: c.get_blocks_into(link.ns, kk, bufs,
                                                                format=kvtier.RAW), None)
            for j, (i, obj) in enumerate(got):
                if infos is not None and infos[j].found and infos[j].size == self.chunk_bytes:
                    objs[i] = obj
                else:
                    obj.ref_count_down()
        return objs

    def _put_many(self, keys, objs):
        """Stores the full chunks; releases LMCache's reference to every object (its
        serializer took one for the put)."""
        try:
            return self._put_chunks(keys, objs)
        finally:
            for obj in objs:
                obj.ref_count_down()

    def _put_chunks(self, keys, objs):
        by_link = {}
        for link, idx in self._groups(keys):
            blocks = []
            for i in idx:
                data = objs[i].byte_array
                if len(data) != self.chunk_bytes:
                    continue  # a partial chunk: kvtier blocks are whole chunks
                blocks.append(kvtier.PutBlock(self._kvkey(keys[i]), data))
            if blocks:
                by_link[link] = blocks
        stored = 0
        for link, blocks in by_link.items():
            r = link.call("put", lambda c: c.put_blocks(link.ns, blocks, format=kvtier.RAW),
                          None)
            stored += r.blocks_stored if r is not None else 0
        return stored

    async def _run(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    # -- RemoteConnector

    async def exists(self, key):
        return (await self._run(self._present, [key]))[0]

    def exists_sync(self, key):
        return bool(self._present([key])[0])

    def support_batched_contains(self):
        return True

    def batched_contains(self, keys):
        n = 0
        for present in self._present(list(keys)):
            if not present:
                break
            n += 1
        return n

    async def batched_async_contains(self, lookup_id, keys, pin=False):
        return await self._run(self.batched_contains, list(keys))

    async def get(self, key):
        return (await self._run(self._get_many, [key]))[0]

    def support_batched_get(self):
        return True

    async def batched_get(self, keys):
        return await self._run(self._get_many, list(keys))

    async def batched_get_non_blocking(self, lookup_id, keys):
        objs = await self._run(self._get_many, list(keys))
        out = []
        for i, obj in enumerate(objs):
            if obj is None:
                for rest in objs[i + 1:]:
                    if rest is not None:
                        rest.ref_count_down()
                break
            out.append(obj)
        return out

    async def put(self, key, memory_obj):
        await self._run(self._put_many, [key], [memory_obj])

    def support_batched_put(self):
        return True

    async def batched_put(self, keys, memory_objs):
        await self._run(self._put_many, list(keys), list(memory_objs))

    async def list(self):
        return []  # kvtierd lists namespaces, not keys

    async def close(self):
        self._pool.shutdown(wait=True)
        self._conn.close()

    def remove_sync(self, key):
        link = self._link(self._tenant(key))
        return bool(link.call("delete", lambda c: c.delete(link.ns, [self._kvkey(key)]), 0))


class KvtierConnectorAdapter(ConnectorAdapter):
    """What LMCache's remote_storage_plugins loader builds (no arguments); it claims
    plugin://kvtier[.<instance>] and kvtier://host:port URLs."""

    def __init__(self):
        super().__init__("kvtier://")

    def can_parse(self, url):
        if url.startswith(self.schema):
            return True
        return url.startswith("plugin://") and \
            extract_plugin_type(url[len("plugin://"):]) == PLUGIN_TYPE

    def create_connector(self, context):
        return KvtierRemoteConnector(context)


class KvtierL2Client:
    """The native_plugin L2 client of `lmcache server` (duck-typed; see the module
    docstring). adapter_params: address (required), timeout_s, connect_timeout_s, retry_s,
    model_id (added to every namespace's identity)."""

    def __init__(self, address, timeout_s=2.0, connect_timeout_s=2.0, retry_s=5.0,
                 model_id=""):
        self.address = address
        self._conn = common.Connection(address, timeout_s=float(timeout_s),
                                       connect_timeout_s=float(connect_timeout_s),
                                       retry_s=float(retry_s))
        self.model_id = model_id
        self._fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kvtier-l2")
        self._lock = threading.Lock()
        self._done = []
        self._next = 0
        self._links = {}

    def event_fd(self):
        return self._fd

    def _submit(self, fn, *args):
        with self._lock:
            self._next += 1
            fid = self._next

        def run():
            try:
                ok, err, bools = True, "", fn(*args)
            except Exception as e:  # noqa: BLE001 - reported as a failed completion
                ok, err, bools = False, str(e), None
            with self._lock:
                self._done.append((fid, ok, err, bools))
            os.eventfd_write(self._fd, 1)
        self._pool.submit(run)
        return fid

    def drain_completions(self):
        try:
            os.eventfd_read(self._fd)
        except BlockingIOError:
            pass
        with self._lock:
            out, self._done = self._done, []
        return out

    def _link(self, key):
        """The Link of key's namespace: (model, kv_rank, group, cache_salt as tenant)."""
        parts = key.split("@")
        if len(parts) < 4:
            raise ValueError("key '%s' is not <model>@<rank>@<group>@<hash>[@<salt>]" % key)
        ident = (parts[0], parts[1], parts[2], parts[4] if len(parts) > 4 else "")
        with self._lock:
            link = self._links.get(ident)
            if link is None:
                identity = common.Identity("lmcache-l2", ident[0], {
                    "kv_rank": ident[1], "group": ident[2], "model_id": self.model_id})
                link = common.Link(self._conn, None,
                                   name=_tenant_ns(identity.namespace, ident[3]))
                link.identity, link.tenant = identity, ident[3]
                self._links[ident] = link
            return link

    def _groups(self, keys):
        groups = collections.OrderedDict()
        for i, k in enumerate(keys):
            groups.setdefault(self._link(k), []).append(i)
        return list(groups.items())

    @staticmethod
    def _kvkeys(link, keys, idx):
        return common.derive_keys(link.identity, [keys[i] for i in idx])

    def submit_batch_set(self, keys, memviews):
        keys, views = list(keys), [memoryview(m).cast("B") for m in memviews]

        def run():
            ok = [False] * len(keys)
            for link, idx in self._groups(keys):
                # The namespace's layout is its objects' size (one size per namespace).
                spec = kvtier.make_namespace(link.ns, common.opaque_layout(len(views[idx[0]])),
                                             codec="fp16", tenant=link.tenant,
                                             model_id=link.identity.label)
                if not link.register(spec):
                    continue
                kk = self._kvkeys(link, keys, idx)
                blocks = [kvtier.PutBlock(k, views[i]) for k, i in zip(kk, idx)]
                r = link.call("put", lambda c: c.put_blocks(link.ns, blocks,
                                                            format=kvtier.RAW), None)
                if r is not None and r.blocks_stored == len(blocks):
                    for i in idx:
                        ok[i] = True
            if not all(ok):
                raise RuntimeError("kvtier: %d of %d objects not stored" %
                                   (ok.count(False), len(ok)))
            return ok
        return self._submit(run)

    def submit_batch_get(self, keys, memviews):
        keys, views = list(keys), [memoryview(m).cast("B") for m in memviews]

        def run():
            ok = [False] * len(keys)
            for link, idx in self._groups(keys):
                kk = self._kvkeys(link, keys, idx)
                bufs = [np.frombuffer(views[i], dtype=np.uint8) for i in idx]
                infos = link.call("get", lambda c: c.get_blocks_into(link.ns, kk, bufs,
                                                                    format=kvtier.RAW), None)
                for j, i in enumerate(idx):
                    ok[i] = bool(infos is not None and infos[j].found and
                                 infos[j].size == len(views[i]))
            return ok
        return self._submit(run)

    def submit_batch_exists(self, keys):
        keys = list(keys)

        def run():
            ok = [False] * len(keys)
            for link, idx in self._groups(keys):
                kk = self._kvkeys(link, keys, idx)
                resp = link.call("lookup", lambda c: c.lookup(link.ns, kk), None)
                for j, i in enumerate(idx):
                    ok[i] = resp is not None and resp.blocks[j].tier != kvtier.pb.TIER_NONE
            return ok
        return self._submit(run)

    def submit_batch_delete(self, keys):
        keys = list(keys)

        def run():
            for link, idx in self._groups(keys):
                kk = self._kvkeys(link, keys, idx)
                link.call("delete", lambda c: c.delete(link.ns, kk), 0)
            return [True] * len(keys)
        return self._submit(run)

    def close(self):
        self._pool.shutdown(wait=True)
        self._conn.close()
        os.close(self._fd)
