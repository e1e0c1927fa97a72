"""kvtier.Client: the Python client of kvtierd, with the C++ client's semantics
(client/client.h).

  ns = kvtier.make_namespace("llama3", kvtier.make_layout(32, 8, 128, 16), codec="int8")
  with kvtier.Client("127.0.0.1:50051", namespace=ns) as c:
      keys = kvtier.prefix_keys(tokens, "llama3", tokens_per_block=16)
      hit = c.lookup("llama3", keys).prefix_blocks
      c.put_blocks("llama3", [kvtier.PutBlock(k, kv[i], parent, i) ...], format=kvtier.RAW)
      c.get_blocks_into("llama3", keys[:hit], buffers, format=kvtier.RAW)

Connect (the constructor): with `namespace` it registers the spec or checks it against the
stored one; without, it calls Stats. Either way a server hash scheme other than
`hash_scheme` and a stored layout / codec other than the spec's raise
FailedPreconditionError naming the field; UnavailableError / DeadlineExceededError when the
server does not answer within `connect_timeout`.

Payload calls: with `native` (the default) and the kvtier._native extension built (the
CMake build puts it in build/python/kvtier; a plain `pip install client/python` has none),
put_blocks, get_blocks_into, get_blocks, lookup and allocate_shared_buffer are the C++
client's (client/client.h, bound as kvtier._native.Client): the same payload-path loop
(shared-memory socket frame, shared memory on a gRPC stream, UCX, gRPC stream;
docs/dataplane.md), run with the GIL released, payloads read from and written into the
caller's buffers in place (uses_native says which). Without it (or native=False) the
same calls run in Python on grpcio, with the same results and exception classes
(tests/python runs both): the rest of this paragraph. Transport: `num_channels` separate
HTTP/2 connections used round-robin. Put and Get
payloads never pass through protobuf `bytes` fields: Put chunk messages are framed by hand
(0x12, varint length, payload) and Get responses are parsed straight into the destination
buffers (the framing of protocol/wire.h, kvtier.wire). When the server is on this host and offers its
shared-memory socket, the client maps a region (see kvtier.shm) and put_blocks /
get_blocks_into payloads travel through it: the call itself goes as one frame over
another connection to the server's socket (kvtier.shm, SharedRegion.call; as the C++
client; shared_memory_socket_calls=False or a failed socket: a gRPC stream carrying the
header only; shared_memory_socket_calls counts the calls the socket answered). Payloads
and get buffers that are SharedBuffers (allocate_shared_buffer) are not copied by the
client at all; others are staged through the region with one copy. A call whose payloads
do not fit the region, and every call after the server forgot the session (it restarted:
FAILED_PRECONDITION with reason SHM_SESSION_UNKNOWN), goes over TCP. get_blocks (which
allocates its results) always uses TCP, like the C++ GetBlocks. lookup goes as a frame on
the socket too when the server offers it (SharedMemoryOffer.socket_lookup), as in C++.

Deadlines: every call has one (`timeout` seconds, else the client's `timeout`) covering all
its attempts. Retries: idempotent calls (register, put_blocks, get, lookup, pin, unpin,
delete, stats, list_namespaces, evict, flush, cluster_status) are retried on UNAVAILABLE with
exponential backoff while the deadline allows (a Put stores blocks under keys bound to their
content, so storing them again leaves the same state); report_scores, drop_namespace and
recover never are.

Errors: kvtier.KvtierError subclasses (kvtier.errors) carrying the gRPC code, the server's
message, the RPC name and the structured detail.

Thread-safe: one Client may be used from many threads at once.
"""

import concurrent.futures
import dataclasses
import threading
import time
from typing import Any

import grpc
import numpy as np

from kvtier import _grpc_fast
from kvtier import _pypaths
from kvtier import _protocol
from kvtier import errors
from kvtier import layout as layout_mod
from kvtier import lookup_form
from kvtier import shm as shm_mod
from kvtier import wire
from kvtier._proto import pb, pb_grpc
from kvtier.keys import HASH_SCHEME

try:
    from kvtier import _native
except ImportError:  # not built (pip install client/python), or its libgrpc++ is missing
    _native = None
# What a kvtier._native call raises for a non-OK status (nothing to catch without it).
_NATIVE_ERROR = _native.RpcError if _native is not None else ()

_D = _protocol.CLIENT_DEFAULTS
RAW = pb.PAYLOAD_FORMAT_RAW
ENCODED = pb.PAYLOAD_FORMAT_ENCODED
_FORMATS = {"raw": RAW, "encoded": ENCODED}

_PUT = "/kvtier.v1.KvCache/Put"
_GET = "/kvtier.v1.KvCache/Get"


@dataclasses.dataclass
class PutBlock:
    """One block to put. payload: any C-contiguous buffer (bytes, bytearray, memoryview,
    numpy array of any dtype); RAW payloads are exactly bytes_per_block(layout) bytes.
    token_ids / lora_name / extra_keys: optional, for KV-aware routers only (carried into
    the block's BlockStored events, never stored; PutBlock in the proto)."""
    key: bytes
    payload: Any
    parent_key: bytes = b""
    block_index: int = 0
    token_ids: Any = ()      # the block's tokens (ints; a numpy array works)
    lora_name: str = ""      # its LoRA adapter
    extra_keys: Any = ()     # its extra hash inputs (str: multimodal ids, cache_salt)


@dataclasses.dataclass
class PutResult:
    blocks_stored: int = 0
    bytes_stored: int = 0      # encoded bytes stored by the server
    replicas_skipped: int = 0  # ClusterClient only: copies whose owner was unreachable


@dataclasses.dataclass
class FetchedBlock:
    info: Any   # kvtier.v1.GetBlockInfo: found, size, tier, block_index, codec, positions
    data: Any   # bytearray or numpy array; None when not found


@dataclasses.dataclass
class ConnectInfo:
    node_id: str = ""
    server_hash_scheme: str = ""
    namespace_created: bool = False
    stored_spec: Any = None
    # Why the shared-memory path is not used ("" when it is, or none is offered).
    shared_memory_error: str = ""


def _fmt(fmt):
    return _FORMATS[fmt.lower()] if isinstance(fmt, str) else fmt


def _split_ranges(n, parts):
    if n <= 1 or parts <= 1:
        return [(0, n)]
    parts = min(parts, n)
    out, begin = [], 0
    for p in range(parts):
        end = begin + (n - begin) // (parts - p)
        out.append((begin, end))
        begin = end
    return out


def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise errors.InvalidArgumentError(f"options.tls: {path} cannot be read: {e}") from None


def _tls_pems(tls, ca_file, cert_file, key_file, server_name):
    """None (plaintext) or the (root, key, cert) PEM bytes (None where no file), as the C++
    ClientOptions tls_* fields. The files are read once, at connect."""
    if not (tls or ca_file or cert_file or key_file or server_name):
        return None
    if bool(cert_file) != bool(key_file):
        raise errors.InvalidArgumentError("options.tls: tls_cert_file and tls_key_file go together")
    return tuple(_read(f) if f else None for f in (ca_file, key_file, cert_file))


_UNARY_METHODS = {}  # (admin, rpc) -> (full method name, response class)


def _unary_method(admin, rpc):
    """The full gRPC method name of a KvCache (KvCacheAdmin when `admin`) method and its
    response message class, from the proto's descriptor."""
    found = _UNARY_METHODS.get((admin, rpc))
    if found is None:
        service = pb.DESCRIPTOR.services_by_name["KvCacheAdmin" if admin else "KvCache"]
        method = service.methods_by_name[rpc]
        found = ("/%s/%s" % (service.full_name, rpc), getattr(pb, method.output_type.name))
        _UNARY_METHODS[(admin, rpc)] = found
    return found


class _Channel:
    def __init__(self, address, index, opts, metadata, keepalive=True):
        options = [("grpc.use_local_subchannel_pool", 1), ("kvtier.channel_id", index),
                   ("grpc.max_receive_message_length", opts["max_receive_message_bytes"]),
                   ("grpc.max_send_message_length", -1)]
        if opts["http2_stream_window_bytes"] > 0:
            options.append(("grpc.http2.lookahead_bytes", opts["http2_stream_window_bytes"]))
        pems = opts["tls_pems"]
        if pems is None:
            self.channel = grpc.insecure_channel(address, options=options)
        else:
            if opts["tls_server_name"]:
                options.append(("grpc.ssl_target_name_override", opts["tls_server_name"]))
            credentials = grpc.ssl_channel_credentials(
                root_certificates=pems[0], private_key=pems[1], certificate_chain=pems[2])
            self.channel = grpc.secure_channel(address, credentials, options=options)
        self.data = pb_grpc.KvCacheStub(self.channel)
        self.admin = pb_grpc.KvCacheAdminStub(self.channel)
        self.put = self.channel.stream_unary(_PUT, request_serializer=None,
                                             response_deserializer=pb.PutResponse.FromString)
        self.get = self.channel.unary_stream(_GET, request_serializer=pb.GetRequest.SerializeToString,
                                             response_deserializer=None)
        # Only the pure-Python payload paths stream over grpcio (_grpc_fast.Keepalive).
        self.keepalive = _grpc_fast.Keepalive(self.channel, metadata) if keepalive else None

    def close(self):
        if self.keepalive is not None:
            self.keepalive.cancel()
        self.channel.close()


class Client(_pypaths.PythonPaths):
    """A connection to one kvtierd (see the module docstring). Use as a context manager or
    call close()."""

    # Defaults: the C++ ClientOptions' (kvtier._protocol.CLIENT_DEFAULTS).
    def __init__(self, address, namespace=None, *, hash_scheme=HASH_SCHEME,
                 num_channels=_D["num_channels"], timeout=_D["default_deadline_ms"] / 1000,
                 connect_timeout=_D["connect_deadline_ms"] / 1000,
                 max_attempts=_D["max_attempts"], retry_backoff=_D["retry_backoff_ms"] / 1000,
                 chunk_bytes=_D["chunk_bytes"], max_streams_per_call=_D["max_streams_per_call"],
                 max_receive_message_bytes=_D["max_receive_message_bytes"],
                 http2_stream_window_bytes=_D["http2_stream_window_bytes"],
                 shared_memory=_D["shared_memory"], shared_memory_bytes=_D["shared_memory_bytes"],
                 shared_memory_socket="",
                 shared_memory_socket_calls=_D["shared_memory_socket_calls"], auth_token="",
                 tls=False, tls_ca_file="",
                 tls_cert_file="", tls_key_file="", tls_server_name="", native=True):
        if not address:
            raise errors.InvalidArgumentError("options.server is empty")
        if num_channels < 1:
            raise errors.InvalidArgumentError("options.num_channels must be >= 1")
        if chunk_bytes <= 0:
            raise errors.InvalidArgumentError("options.chunk_bytes is 0")
        if max_streams_per_call < 1:
            raise errors.InvalidArgumentError("options.max_streams_per_call must be >= 1")
        self.address = address
        self.hash_scheme = hash_scheme or HASH_SCHEME
        self.timeout = timeout
        self.max_attempts = max_attempts
        self.retry_backoff = retry_backoff
        self.chunk_bytes = chunk_bytes
        self.max_streams_per_call = max_streams_per_call
        self._shm_socket_calls = shared_memory_socket_calls
        # Calls the shared-memory socket answered on the Python path
        # (shared_memory_socket_calls).
        self._socket_calls = 0
        self._cpp = None  # the kvtier._native.Client of the payload calls, when built
        self._metadata = (("authorization", "Bearer " + auth_token),) if auth_token else None
        opts = dict(max_receive_message_bytes=max_receive_message_bytes,
                    http2_stream_window_bytes=http2_stream_window_bytes,
                    tls_pems=_tls_pems(tls, tls_ca_file, tls_cert_file, tls_key_file,
                                       tls_server_name),
                    tls_server_name=tls_server_name)
        use_cpp = native and _native is not None
        # With the extension every call runs on the C++ client's num_channels connections
        # (the payload calls and Lookup bound one by one, the others through
        # _native.Client.unary): no grpcio connection at all.
        self._channels = ([] if use_cpp else
                          [_Channel(address, i, opts, self._metadata) for i in range(num_channels)])
        self._next = 0
        self._lock = threading.Lock()
        self._layouts = {}
        # (ns, format, shm session) -> (its layout, the serialized PutHeader fields but
        # the blocks): _put_header.
        self._header_fields = {}
        self._region = None
        # Lookup frames on the region's socket: offered by the server; tried while the
        # last one was not refused (_socket_lookup_call).
        self._socket_lookup_offered = self._socket_lookup = False
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=max(1, max_streams_per_call - 1) * 2, thread_name_prefix="kvtier")
        self.connect_info = ConnectInfo()
        try:
            if use_cpp:
                # The C++ client's handshake first (it registers the namespace); Python's
                # own after it, through the C++ client (connect_info, the spec check).
                self._cpp = self._connect_cpp(
                    namespace, connect_timeout, shared_memory=shared_memory,
                    shared_memory_bytes=shared_memory_bytes,
                    shared_memory_socket=shared_memory_socket,
                    shared_memory_socket_calls=shared_memory_socket_calls,
                    num_channels=num_channels, max_attempts=max_attempts,
                    retry_backoff_ms=max(0, int(retry_backoff * 1000)),
                    chunk_bytes=chunk_bytes, max_streams_per_call=max_streams_per_call,
                    max_receive_message_bytes=max_receive_message_bytes,
                    http2_stream_window_bytes=http2_stream_window_bytes,
                    auth_token=auth_token, tls=bool(tls), tls_ca_file=tls_ca_file,
                    tls_cert_file=tls_cert_file, tls_key_file=tls_key_file,
                    tls_server_name=tls_server_name)
            self._connect(namespace, connect_timeout, shared_memory and not use_cpp,
                          shared_memory_bytes, shared_memory_socket)
        except BaseException:
            self.close()
            raise

    # -- lifecycle --------------------------------------------------------------------

    def close(self):
        """Closes the channels and ends the shared-memory session. Idempotent."""
        with self._lock:
            region, self._region = self._region, None
            cpp, self._cpp = self._cpp, None
        if cpp is not None:
            cpp.close()
        if region is not None:
            region.close()
        for ch in self._channels:
            ch.close()
        self._pool.shutdown(wait=False)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def uses_shared_memory(self):
        """True while payloads use the same-node shared-memory path. Turns False for good
        when the server forgets the session (a new Client gets it again)."""
        cpp = self._cpp
        return cpp.uses_shared_memory() if cpp is not None else self._region is not None

    @property
    def uses_native(self):
        """True when the payload calls run in the C++ client (kvtier._native.Client, GIL
        released); False on the pure-Python path (not built, or native=False)."""
        return self._cpp is not None

    @property
    def shared_memory_socket_calls(self):
        """Put / Get calls answered over the shared-memory socket so far (the C++
        client's Client::shared_memory_socket_calls)."""
        cpp = self._cpp
        return cpp.shared_memory_socket_calls() if cpp is not None else self._socket_calls

    def _cpp_timeout(self, timeout, rpc):
        """The deadline of a call in kvtier._native, in seconds. The C++ client counts
        whole milliseconds, so a deadline under 1 ms has passed already."""
        left = timeout if timeout else self.timeout
        if left < 0.001:
            raise errors.DeadlineExceededError("Deadline Exceeded", rpc)
        return left

    def _connect_cpp(self, spec, connect_timeout, **options):
        """The kvtier._native.Client of this client's options (its own handshake: the
        namespace registered above is found and checked again)."""
        try:
            cpp = _native.Client(
                self.address, default_deadline_ms=max(1, int(self.timeout * 1000)),
                connect_deadline_ms=max(1, int(connect_timeout * 1000)),
                namespace_spec=spec.SerializeToString() if spec is not None else None,
                hash_scheme=self.hash_scheme, **options)
        except _native.RpcError as e:
            raise errors.from_native_error("Connect", e) from None
        self.connect_info.shared_memory_error = cpp.connect_info()[2]
        return cpp

    # -- plumbing ---------------------------------------------------------------------

    def _pick(self):
        if not self._channels:  # a native client after close()
            raise errors.FailedPreconditionError("the client is closed")
        with self._lock:
            self._next += 1
            return self._channels[self._next % len(self._channels)]

    def _deadline(self, timeout):
        return time.monotonic() + (timeout if timeout else self.timeout)

    def _call(self, rpc, attempt, idempotent, deadline, wait_for_ready=False):
        """Runs attempt(channel, timeout_s, wait_for_ready) until it succeeds, fails with
        another code than UNAVAILABLE, attempts run out or the deadline passes."""
        backoff = self.retry_backoff
        attempts = max(1, self.max_attempts) if idempotent else 1
        for a in range(attempts):
            left = deadline - time.monotonic()
            if left <= 0:
                raise errors.DeadlineExceededError("Deadline Exceeded", rpc)
            try:
                return attempt(self._pick(), left, wait_for_ready)
            except grpc.RpcError as e:
                err = errors.from_rpc_error(rpc, e)
            if err.code != grpc.StatusCode.UNAVAILABLE or a + 1 == attempts:
                raise err
            if time.monotonic() + backoff >= deadline:
                raise err
            time.sleep(backoff)
            backoff *= 2
        raise AssertionError("unreachable")

    def _unary(self, rpc, admin, request, idempotent, timeout, wait_for_ready=False):
        cpp = self._cpp
        if cpp is not None:  # on the C++ client's connections, its deadline and retry rule
            method, response_type = _unary_method(admin, rpc)
            try:
                return response_type.FromString(cpp.unary(
                    method, request.SerializeToString(), idempotent, wait_for_ready,
                    self._cpp_timeout(timeout, rpc)))
            except _NATIVE_ERROR as e:
                raise errors.from_native_error(rpc, e) from None

        def attempt(ch, left, wfr):
            stub = ch.admin if admin else ch.data
            return getattr(stub, rpc)(request, timeout=left, metadata=self._metadata,
                                      wait_for_ready=wfr or None)
        return self._call(rpc, attempt, idempotent, self._deadline(timeout), wait_for_ready)

    def _check_scheme(self, server_scheme):
        if server_scheme and server_scheme != self.hash_scheme:
            raise errors.FailedPreconditionError(
                "hash_scheme mismatch: client uses '%s', server '%s' uses '%s'"
                % (self.hash_scheme, self.address, server_scheme))

    def _connect(self, spec, connect_timeout, shared_memory, shm_bytes, shm_socket):
        info = self.connect_info
        if spec is not None:
            req = pb.RegisterNamespaceRequest(spec=spec, hash_scheme=self.hash_scheme)
            resp = self._unary("RegisterNamespace", False, req, True, connect_timeout, True)
            info.node_id, info.server_hash_scheme = resp.node_id, resp.hash_scheme
            info.namespace_created = resp.created
            info.stored_spec = resp.spec
            self._check_scheme(resp.hash_scheme)
            if resp.HasField("spec"):
                self._check_spec(spec, resp.spec)
        else:
            resp = self._unary("Stats", True, pb.StatsRequest(), True, connect_timeout, True)
            info.node_id, info.server_hash_scheme = resp.node_id, resp.hash_scheme
            self._check_scheme(resp.hash_scheme)
        offer = resp.shared_memory
        if shared_memory and offer.socket_path:
            try:
                self._region = shm_mod.SharedRegion.open(
                    shm_socket or offer.socket_path, min(shm_bytes, offer.max_region_bytes),
                    offer.instance_id)
                self._socket_lookup_offered = self._socket_lookup = (
                    offer.socket_lookup and self._shm_socket_calls)
            except errors.KvtierError as e:
                info.shared_memory_error = e.message

    def _check_spec(self, spec, stored):
        msg = layout_mod.check_spec_matches(spec, stored)
        if msg:
            raise errors.FailedPreconditionError(msg, "RegisterNamespace")
        with self._lock:
            self._layouts[stored.name] = stored.layout

    def _parallel(self, n, fn):
        """fn(begin, end) over up to max_streams_per_call contiguous ranges of [0, n), the
        first on this thread; returns the results in order (first error raised)."""
        ranges = _split_ranges(n, self.max_streams_per_call)
        if len(ranges) == 1:
            return [fn(*ranges[0])]
        futures = [self._pool.submit(fn, b, e) for b, e in ranges[1:]]
        results = [fn(*ranges[0])]
        first_error = None
        for f in futures:
            try:
                results.append(f.result())
            except BaseException as e:  # noqa: BLE001 - re-raised below, in order
                first_error = first_error or e
        if first_error is not None:
            raise first_error
        return results

    # -- namespaces -------------------------------------------------------------------

    def register_namespace(self, spec, timeout=None):
        """Registers `spec` (or checks it against the stored one); returns the
        RegisterNamespaceResponse. FailedPreconditionError on a hash-scheme, layout or
        codec mismatch. Later puts to it send the layout for the server to re-check."""
        req = pb.RegisterNamespaceRequest(spec=spec, hash_scheme=self.hash_scheme)
        resp = self._unary("RegisterNamespace", False, req, True, timeout)
        if resp.hash_scheme and resp.hash_scheme != self.hash_scheme:
            raise errors.FailedPreconditionError(
                "hash_scheme mismatch: client uses '%s', server uses '%s'"
                % (self.hash_scheme, resp.hash_scheme), "RegisterNamespace")
        if resp.HasField("spec"):
            self._check_spec(spec, resp.spec)
        return resp

    def namespace_layout(self, ns, timeout=None):
        """The Layout of namespace `ns` (remembered from register, else ListNamespaces).
        NotFoundError when the server has no such namespace."""
        with self._lock:
            known = self._layouts.get(ns)
        if known is not None:
            return known
        for spec in self.list_namespaces(timeout).namespaces:
            if spec.name == ns:
                with self._lock:
                    self._layouts[ns] = spec.layout
                return spec.layout
        raise errors.NotFoundError("namespace '%s' is not registered" % ns, "ListNamespaces")

    # -- shared memory ----------------------------------------------------------------

    def allocate_shared_buffer(self, nbytes):
        """A kvtier.shm.SharedBuffer (numpy uint8 array) of `nbytes` in the shared region.
        FailedPreconditionError without the shared-memory path; ResourceExhaustedError
        when the region has no room."""
        cpp = self._cpp
        if cpp is not None:
            if nbytes <= 0:
                raise errors.InvalidArgumentError("AllocateSharedBuffer: bytes is 0")
            try:
                native_buf = cpp.allocate_shared_buffer(nbytes)
            except _NATIVE_ERROR as e:
                raise errors.from_native_error("AllocateSharedBuffer", e) from None
            buf = np.frombuffer(native_buf, dtype=np.uint8).view(shm_mod.SharedBuffer)
            buf._kvtier_owner = native_buf
            return buf
        region = self._region
        if region is None:
            suffix = (": " + self.connect_info.shared_memory_error
                      if self.connect_info.shared_memory_error else "")
            raise errors.FailedPreconditionError(
                "AllocateSharedBuffer: no shared-memory path to the server" + suffix)
        if nbytes <= 0:
            raise errors.InvalidArgumentError("AllocateSharedBuffer: bytes is 0")
        at = region.allocate(nbytes)
        if at is None:
            raise errors.ResourceExhaustedError(
                "AllocateSharedBuffer: no free range of %d bytes in the %d-byte shared region "
                "(shared_memory_bytes)" % (nbytes, region.size))
        buf = region.view(at, nbytes).view(shm_mod.SharedBuffer)
        buf._kvtier_owner = shm_mod._Allocation(region, at)
        return buf

    # -- put --------------------------------------------------------------------------

    def put_blocks(self, ns, blocks, format=ENCODED, timeout=None):
        """Stores `blocks` (PutBlock list) in namespace `ns`; returns a PutResult. Split into
        contiguous runs over up to max_streams_per_call concurrent streams. Retried on UNAVAILABLE.
        Raises the server's errors (NotFoundError unknown namespace, InvalidArgumentError
        bad key or payload, FailedPreconditionError layout mismatch,
        ResourceExhaustedError), DeadlineExceededError, UnavailableError."""
        total = PutResult()
        if not blocks:
            return total
        fmt = _fmt(format)
        cpp = self._cpp
        if cpp is not None:
            try:
                total.blocks_stored, total.bytes_stored = cpp.put(
                    ns, blocks, fmt, self._cpp_timeout(timeout, "Put"))
            except _NATIVE_ERROR as e:
                raise errors.from_native_error("Put", e) from None
            return total
        views = [wire.as_bytes_view(b.payload) for b in blocks]
        deadline = self._deadline(timeout)
        payloads = [b.payload for b in blocks]
        for r in self._parallel(len(blocks), lambda b, e: self._put_run(
                ns, blocks[b:e], views[b:e], payloads[b:e], fmt, deadline)):
            total.blocks_stored += r.blocks_stored
            total.bytes_stored += r.bytes_stored
        return total

    # -- get --------------------------------------------------------------------------

    def get_blocks_into(self, ns, keys, buffers, format=ENCODED, timeout=None, lease_id=0):
        """Fetches `keys` into caller buffers (writable C-contiguous numpy arrays,
        memoryviews, bytearrays): block i, when found, is written to the start of
        buffers[i]. Returns one GetBlockInfo per key (found False for a miss; size = bytes
        written). lease_id: a lease of this server (lookup(lease_ms=...).blocks[i].lease_id)
        that ends once the blocks are read (GetRequest.lease_id; with several streams, one
        release_lease after all of them, as the C++ client). InvalidArgumentError if the
        counts differ or a buffer is read-only; OutOfRangeError naming the buffer if a block
        does not fit; the server's errors otherwise. Retried on UNAVAILABLE (buffers may
        have been partly written)."""
        if len(buffers) != len(keys):
            raise errors.InvalidArgumentError("buffers: %d buffers for %d keys"
                                              % (len(buffers), len(keys)))
        cpp = self._cpp
        if cpp is not None:
            if not keys:
                return []
            try:
                return list(pb.GetHeader.FromString(cpp.get_into(
                    ns, keys, buffers, _fmt(format), self._cpp_timeout(timeout, "Get"),
                    lease_id)).blocks)
            except _NATIVE_ERROR as e:
                raise errors.from_native_error("Get", e) from None
        keys = [bytes(k) for k in keys]
        arrays = [wire.as_u8_array(b, "buffers[%d]" % i) for i, b in enumerate(buffers)]
        if not keys:
            return []
        deadline = self._deadline(timeout)
        fmt = _fmt(format)

        def run(b, e):
            def dest(i, info):
                buf = arrays[b + i]
                if buf.size < info.size:
                    raise errors.OutOfRangeError("buffers[%d] holds %d bytes, block needs %d"
                                                 % (b + i, buf.size, info.size), "Get")
                return buf
            return self._get_run(ns, keys[b:e], fmt, deadline, dest, buffers[b:e], arrays[b:e],
                                 run_lease)
        run_lease = self._run_lease(len(keys), lease_id)
        infos = [info for part in self._parallel(len(keys), run) for info in part]
        self._end_lease(ns, lease_id, run_lease, deadline)
        return infos

    def get_blocks(self, ns, keys, format=ENCODED, timeout=None, numpy=False, lease_id=0):
        """Like get_blocks_into (lease_id too) but allocates the payloads: returns one
        FetchedBlock per key with data a bytearray (None for a miss). With numpy=True, data is a numpy array: for
        RAW gets of the namespace's dtype (float16, or uint16 bf16 bit patterns) shaped
        block_shape(layout) when the size matches; uint8 for ENCODED gets."""
        keys = [bytes(k) for k in keys]
        out = [FetchedBlock(None, None) for _ in keys]
        if not keys:
            return out
        deadline = self._deadline(timeout)
        fmt = _fmt(format)
        cpp = self._cpp
        if cpp is not None:
            try:
                header, datas = cpp.get(ns, keys, fmt, self._cpp_timeout(timeout, "Get"),
                                        lease_id)
            except _NATIVE_ERROR as e:
                raise errors.from_native_error("Get", e) from None
            infos = list(pb.GetHeader.FromString(header).blocks)
            for fb, data in zip(out, datas):
                fb.data = data
        else:
            infos = None

        def run(b, e):
            def dest(i, info):
                data = bytearray(info.size)
                out[b + i].data = data
                return np.frombuffer(data, dtype=np.uint8)
            return self._get_run(ns, keys[b:e], fmt, deadline, dest, None, None, run_lease)
        if infos is None:
            run_lease = self._run_lease(len(keys), lease_id)
            infos = [info for part in self._parallel(len(keys), run) for info in part]
            self._end_lease(ns, lease_id, run_lease, deadline)
        lay = self.namespace_layout(ns) if numpy and fmt == RAW else None
        for fb, info in zip(out, infos):
            fb.info = info
            if not info.found:
                fb.data = None
                continue
            if fb.data is None:
                fb.data = bytearray()
            if numpy:
                arr = np.frombuffer(fb.data, dtype=np.uint8)
                if lay is not None:
                    arr = arr.view(layout_mod.numpy_dtype(lay))
                    if len(fb.data) == layout_mod.bytes_per_block(lay):
                        arr = arr.reshape(layout_mod.block_shape(lay))
                fb.data = arr
        return out

    def _run_lease(self, n, lease_id):
        """The lease_id each Get stream carries: one stream ends the lease itself; several
        leave it to _end_lease, so no stream ends it while another still reads."""
        return lease_id if len(_split_ranges(n, self.max_streams_per_call)) == 1 else 0

    def _end_lease(self, ns, lease_id, run_lease, deadline):
        if lease_id and not run_lease:
            req = pb.ReleaseLeaseRequest(namespace=ns, lease_id=lease_id)
            self._unary("ReleaseLease", False, req, True, max(deadline - time.monotonic(), 0.001))

    # -- keyed unary calls ------------------------------------------------------------

    def lookup(self, ns, keys, local_only=False, timeout=None, lease_ms=0, compact=False):
        """How much of the prefix chain `keys` (block 0 first) is resident, and where:
        a LookupResponse (prefix_blocks; blocks[i].tier, blocks[i].owner). With lease_ms
        > 0 the owners also keep the first leased_blocks loadable for that long
        (blocks[i].lease_id; lease_limit says why fewer than prefix_blocks were leased)
        until release_lease. The server answers in the compact form (kvtier.lookup_form);
        it is expanded into `blocks` unless `compact` is true (then check
        lookup_form.is_compact: an old server answers with `blocks` regardless)."""
        cpp = self._cpp
        if cpp is not None:
            timeout_s = self._cpp_timeout(timeout, "Lookup")
            try:
                try:
                    resp = cpp.lookup(ns, keys, local_only, lease_ms, compact, timeout_s)
                except TypeError:  # keys that are bytes-like but not bytes
                    resp = cpp.lookup(ns, [bytes(k) for k in keys], local_only, lease_ms,
                                      compact, timeout_s)
                return pb.LookupResponse.FromString(resp)
            except _NATIVE_ERROR as e:
                raise errors.from_native_error("Lookup", e) from None
        req = pb.LookupRequest(namespace=ns, keys=[bytes(k) for k in keys],
                               local_only=local_only, lease_ms=lease_ms, compact=True)
        resp = self._socket_lookup_call(req, timeout)
        if resp is None:
            resp = self._unary("Lookup", False, req, True, timeout)
        return resp if compact else lookup_form.expand(resp)

    def release_lease(self, ns, lease_id, timeout=None):
        """Ends lease `lease_id` (a blocks[i].lease_id of this server's Lookup); returns the
        number of blocks it held (0 when it had ended already)."""
        req = pb.ReleaseLeaseRequest(namespace=ns, lease_id=lease_id)
        return self._unary("ReleaseLease", False, req, True, timeout).blocks

    def pin(self, ns, keys, ttl_ms=0, timeout=None):
        """Pins `keys` for ttl_ms (0 = until unpin); returns the number pinned."""
        req = pb.PinRequest(namespace=ns, keys=[bytes(k) for k in keys], ttl_ms=ttl_ms)
        return self._unary("Pin", False, req, True, timeout).blocks

    def unpin(self, ns, keys, timeout=None):
        req = pb.UnpinRequest(namespace=ns, keys=[bytes(k) for k in keys])
        return self._unary("Unpin", False, req, True, timeout).blocks

    def delete(self, ns, keys, timeout=None):
        """Deletes `keys` from every tier; returns the number that existed."""
        req = pb.DeleteRequest(namespace=ns, keys=[bytes(k) for k in keys])
        return self._unary("Delete", False, req, True, timeout).blocks

    def compact(self, request, timeout=None):
        """Token compaction on the server (a kvtier.v1.CompactRequest: namespace, the stored
        sequence's keys, a policy): the CompactResponse naming the stored entry (get it
        with get_blocks / get_blocks_into; RAW is [layer][k|v][kv_head][kept][head_dim]).
        Retried on UNAVAILABLE (the entry's key depends only on the request)."""
        return self._unary("Compact", False, request, True, timeout)

    def report_scores(self, ns, keys, scores, timeout=None):
        """Reports attention mass per key. InvalidArgumentError if the lengths differ.
        Not retried (scores accumulate on the server)."""
        if len(keys) != len(scores):
            raise errors.InvalidArgumentError("scores: %d scores for %d keys"
                                              % (len(scores), len(keys)))
        req = pb.ReportScoresRequest(namespace=ns, keys=[bytes(k) for k in keys],
                                     scores=[float(s) for s in scores])
        self._unary("ReportScores", False, req, False, timeout)

    # -- admin ------------------------------------------------------------------------

    def stats(self, ns="", timeout=None):
        return self._unary("Stats", True, pb.StatsRequest(namespace=ns), True, timeout)

    def list_namespaces(self, timeout=None):
        return self._unary("ListNamespaces", True, pb.ListNamespacesRequest(), True, timeout)

    def evict(self, ns, keys=(), drop=False, timeout=None):
        req = pb.EvictRequest(namespace=ns, keys=[bytes(k) for k in keys], drop=drop)
        return self._unary("Evict", True, req, True, timeout).blocks

    def drop_namespace(self, ns, force=False, timeout=None):
        """Drops namespace `ns` from this server: every block, then the spec (the server
        publishes one AllBlocksCleared). Returns the blocks removed. NotFoundError unknown
        namespace; FailedPreconditionError while leases of it are in force unless
        `force`. Not retried."""
        req = pb.DropNamespaceRequest(namespace=ns, force=force)
        with self._lock:
            self._layouts.pop(ns, None)
        return self._unary("DropNamespace", True, req, False, timeout).blocks

    def flush(self, ns="", timeout=None):
        """Flushes until done: each call stops near its deadline and reports progress."""
        while True:
            r = self._unary("Flush", True, pb.FlushRequest(namespace=ns), True, timeout)
            if r.done:
                return
            if r.flushed_blocks == 0:
                raise errors.DeadlineExceededError(
                    "no block written within the call deadline", rpc="Flush")

    def recover(self, verify=False, timeout=3600.0):
        """Recovery on demand of the server called (RecoverRequest; docs/recovery.md "On
        demand"): scans its cold slab; with `verify` reports what a rebuild would change
        and changes nothing, else re-creates lost index and namespace records and frees
        damaged extents. Returns the RecoverResponse (counts, bytes, seconds). Operator
        token only (PermissionDeniedError). Reads the whole slab, hence the long default
        `timeout` (seconds). Not retried."""
        mode = pb.RecoverRequest.VERIFY if verify else pb.RecoverRequest.REBUILD
        return self._unary("Recover", True, pb.RecoverRequest(mode=mode), False, timeout)

    def cluster_status(self, timeout=None):
        return self._unary("ClusterStatus", True, pb.ClusterStatusRequest(), True, timeout)
