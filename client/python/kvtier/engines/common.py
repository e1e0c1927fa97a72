"""What every engine adapter shares: the engine's identity as a kvtier namespace, keys derived
from the engine's own chained hashes, and a connection that turns a down, slow or refusing
kvtierd into a miss. Imports no engine; pure Python on the kvtier client's public API.

Identity. Engines whose KV bytes differ (weights, dtype, KV dtype, block size, page layout, TP
rank) must never read each other's blocks, yet their own hashes cover token ids only. So each
adapter describes its engine as an ordered dict of identity fields; `Identity` digests it
(SHA-256 over the canonical JSON) and names the namespace `<engine>/<label>/<digest[:24]>`,
model_id = the label, layout = the block's geometry. Two engines share KV exactly when every
field agrees; kvtierd's own check (layout, codec) rejects the rest at connect.

Keys. key_i = SHA-256("kvtier-engine-key-v1" || digest || engine_hash_i)[:16]. The engine's
hashes are already chained over the prefix (vLLM block_hashes, SGLang page keys, LMCache
chunk hashes), so key_i names the whole prefix; the parent of key_i is key_{i-1}.

Link. The adapters call kvtierd through Link.call(fn, default): the first call (and the
first after `retry_s` once a call failed with UNAVAILABLE or a deadline) connects, every
call has a deadline of `timeout_s`, and any failure returns `default` (a miss, nothing
stored) after logging once per `retry_s`. An engine never waits longer than
connect_timeout_s + timeout_s on kvtierd, and never gets an exception from it.

Thread-safe: Identity and derive_keys are pure; a Link may be shared by threads.
"""

import hashlib
import json
import logging
import re
import threading
import time

import kvtier

log = logging.getLogger("kvtier.engines")

KEY_SCHEME = b"kvtier-engine-key-v1"


class Identity:
    """An engine's identity: `engine` ("vllm", "sglang", "lmcache"), a human `label` (model
    name; sanitized into the namespace name), and `fields`, every property that changes the
    KV bytes (values: str, int, float, bool, None, lists of them)."""

    def __init__(self, engine, label, fields):
        self.engine = engine
        self.label = label
        self.fields = dict(fields)
        canon = json.dumps({"engine": engine, "label": label, "fields": self.fields},
                           sort_keys=True, separators=(",", ":"))
        self.digest = hashlib.sha256(canon.encode()).digest()
        safe = re.sub(r"[^A-Za-z0-9._-]+", "-", label).strip("-.")[-48:] or "model"
        self.namespace = "%s/%s/%s" % (engine, safe, self.digest.hex()[:24])

    def describe(self):
        return "%s (%s)" % (self.namespace, ", ".join(
            "%s=%s" % kv for kv in sorted(self.fields.items())))


def derive_keys(identity, engine_hashes):
    """kvtier keys (16 bytes each) for the engine's chained hashes (bytes, or str / int
    rendered as text), in order."""
    out = []
    for h in engine_hashes:
        if isinstance(h, str):
            h = h.encode()
        elif isinstance(h, int):
            h = str(h).encode()
        out.append(hashlib.sha256(KEY_SCHEME + identity.digest + bytes(h)).digest()[:16])
    return out


def block_layout(num_layers, num_kv_heads, head_dim, tokens_per_block, dtype):
    """kvtier.v1.Layout of one engine block; `dtype` "fp16" or "bf16". No sink tokens: the
    adapters store the engine's bytes as they are (the identity codec)."""
    return kvtier.make_layout(num_layers=num_layers, num_kv_heads=num_kv_heads,
                              head_dim=head_dim, tokens_per_block=tokens_per_block,
                              dtype=dtype, sink_tokens=0)


def opaque_layout(nbytes):
    """A Layout whose RAW block is exactly `nbytes` (a positive multiple of 8: head_dim is
    even), for engine objects that are bytes with no kvtier geometry (LMCache's L2 objects,
    SGLang's host-pool regions). ValueError otherwise."""
    if nbytes <= 0 or nbytes % 8:
        raise ValueError("object size %d is not a positive multiple of 8" % nbytes)
    # 4 * L * H * T * D == nbytes with H = 1, D = 2: L * T = nbytes / 8, T a power of two.
    m = nbytes // 8
    t = 1
    for cand in (4096, 2048, 1024, 512, 256, 128, 64, 32, 16, 8, 4, 2):
        if m % cand == 0:
            t = cand
            break
    return block_layout(m // t, 1, 2, t, "fp16")


class Connection:
    """One lazily connected kvtier.Client (no namespace) for `address`, shared by the Links
    of one adapter; see the module docstring for the timeouts and the backoff."""

    def __init__(self, address, timeout_s=2.0, connect_timeout_s=2.0, retry_s=5.0,
                 shared_memory=True):
        self.address = address
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.retry_s = retry_s
        self.shared_memory = shared_memory
        self._client = None
        self._down_until = 0.0
        self._last_log = 0.0
        self._lock = threading.Lock()
        self.failures = 0

    def client(self):
        """The connected client, or None while kvtierd is unreachable (retried after
        retry_s)."""
        with self._lock:
            if self._client is not None:
                return self._client
            if time.monotonic() < self._down_until:
                return None
            try:
                self._client = kvtier.Client(
                    self.address, timeout=self.timeout_s,
                    connect_timeout=self.connect_timeout_s, max_attempts=1,
                    shared_memory=self.shared_memory, shared_memory_bytes=128 << 20)
            except Exception as e:  # noqa: BLE001 - any failure to connect is a miss
                self._failed_locked("connect", e)
                return None
            log.info("kvtier: connected to %s", self.address)
            return self._client

    def call(self, what, fn, default):
        """fn(client) or `default` when kvtierd is unreachable or the call fails."""
        c = self.client()
        if c is None:
            return default
        try:
            return fn(c)
        except Exception as e:  # noqa: BLE001 - the engine must never see kvtierd's errors
            with self._lock:
                self._failed_locked(what, e)
            return default

    def _failed_locked(self, what, err):
        self.failures += 1
        code = getattr(err, "code", None)
        if isinstance(err, kvtier.NotFoundError):
            return  # a namespace nobody stored into yet: a plain miss
        unreachable = isinstance(err, (kvtier.UnavailableError, kvtier.DeadlineExceededError))
        if self._client is None or unreachable:
            if self._client is not None:
                try:
                    self._client.close()
                except Exception:  # noqa: BLE001
                    pass
            self._client = None
            self._down_until = time.monotonic() + self.retry_s
        now = time.monotonic()
        if now - self._last_log >= self.retry_s:
            self._last_log = now
            log.warning("kvtier: %s on %s failed (%s%s); treated as a miss", what, self.address,
                        "%s: " % code if code else "", err)

    def close(self):
        with self._lock:
            if self._client is not None:
                self._client.close()
            self._client = None


class Link:
    """One namespace on a Connection (see the module docstring). `conn` a Connection, or an
    address (then the Link has its own, built with the keyword options); `spec` a
    NamespaceSpec, registered (or checked against the stored one) before the first call, or
    None with `name`: a namespace another client registered (lookups and gets only, until
    register(spec)). A spec kvtierd refuses (another layout or codec under that name) makes
    every call a miss, retried after retry_s."""

    def __init__(self, conn, spec=None, name="", **options):
        self.conn = conn if isinstance(conn, Connection) else Connection(conn, **options)
        self.spec = spec
        self.name = spec.name if spec is not None else name
        self._registered = spec is None
        self._refused_until = 0.0

    @property
    def ns(self):
        return self.name

    @property
    def failures(self):
        return self.conn.failures

    @property
    def timeout_s(self):
        return self.conn.timeout_s

    @property
    def connect_timeout_s(self):
        return self.conn.connect_timeout_s

    def client(self):
        """The connection's client once the namespace is registered, else None."""
        c = self.conn.client()
        if c is None or self._registered:
            return c
        if time.monotonic() < self._refused_until:
            return None
        if self.conn.call("register", lambda cl: cl.register_namespace(self.spec), None) is None:
            self._refused_until = time.monotonic() + self.conn.retry_s
            return None
        self._registered = True
        log.info("kvtier: namespace %s on %s", self.name, self.conn.address)
        return self.conn.client()

    def register(self, spec):
        """Registers (or checks) `spec` for a Link built by name; False while that fails."""
        if self.spec is None:
            self.spec, self._registered = spec, False
        return self.client() is not None

    def call(self, what, fn, default):
        """fn(client) or `default` when kvtierd is unreachable, refuses the namespace, or
        the call fails."""
        if self.client() is None:
            return default
        return self.conn.call(what, fn, default)

    def close(self):
        self.conn.close()
