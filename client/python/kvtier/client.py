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

Transport: `num_channels` separate HTTP/2 connections used round-robin. Put and Get
payloads never pass through protobuf `bytes` fields: Put chunk messages are framed by hand
(0x12, varint length, payload) and Get responses are parsed straight into the destination
buffers (the framing of protocol/wire.h, kvtier.wire). With `native` (the default) and the
kvtier._native extension built (the CMake build puts it in build/python/kvtier; a plain
`pip install client/python` has none), the Put and Get streams (payloads over TCP, only
headers on the shared-memory path) run in C++ with the GIL released, on one more
connection per channel: payloads are sent from the caller's buffers and received into
them with no copy in Python (uses_native says which). Errors, retries and messages are
the same as on grpcio. When the server is on this host and offers its
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
its attempts. Retries: idempotent calls (register, get, lookup, pin, unpin, delete, stats,
list_namespaces, evict, flush, cluster_status) are retried on UNAVAILABLE with exponential
backoff while the deadline allows; put_blocks, report_scores, drop_namespace and recover
never are.

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

RAW = pb.PAYLOAD_FORMAT_RAW
ENCODED = pb.PAYLOAD_FORMAT_ENCODED
_FORMATS = {"raw": RAW, "encoded": ENCODED}
# Codes of a shared-memory socket reply that send the call over gRPC instead.
_REDO_OVER_GRPC = (grpc.StatusCode.UNAVAILABLE.value[0], grpc.StatusCode.UNAUTHENTICATED.value[0])

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


class _Channel:
    def __init__(self, address, index, opts, metadata):
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
        # The payload-carrying streams of the gRPC path, when kvtier._native is there.
        self.native = _native.Channel(
            address, index, opts["max_receive_message_bytes"],
            opts["http2_stream_window_bytes"], pems,
            opts["tls_server_name"]) if opts["native"] else None
        self.data = pb_grpc.KvCacheStub(self.channel)
        self.admin = pb_grpc.KvCacheAdminStub(self.channel)
        self.put = self.channel.stream_unary(_PUT, request_serializer=None,
                                             response_deserializer=pb.PutResponse.FromString)
        self.get = self.channel.unary_stream(_GET, request_serializer=pb.GetRequest.SerializeToString,
                                             response_deserializer=None)
        self.keepalive = _grpc_fast.Keepalive(self.channel, metadata)

    def close(self):
        self.keepalive.cancel()
        self.channel.close()


class Client:
    """A connection to one kvtierd (see the module docstring). Use as a context manager or
    call close()."""

    def __init__(self, address, namespace=None, *, hash_scheme=HASH_SCHEME, num_channels=4,
                 timeout=10.0, connect_timeout=5.0, max_attempts=3, retry_backoff=0.02,
                 chunk_bytes=1 << 20, max_streams_per_call=4,
                 max_receive_message_bytes=64 << 20, http2_stream_window_bytes=8 << 20,
                 shared_memory=True, shared_memory_bytes=64 << 20, shared_memory_socket="",
                 shared_memory_socket_calls=True, auth_token="", tls=False, tls_ca_file="",
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
        # Calls answered over the shared-memory socket (not gRPC), as the C++ client's
        # Client::shared_memory_socket_calls().
        self.shared_memory_socket_calls = 0
        self._metadata = (("authorization", "Bearer " + auth_token),) if auth_token else None
        opts = dict(max_receive_message_bytes=max_receive_message_bytes,
                    http2_stream_window_bytes=http2_stream_window_bytes,
                    tls_pems=_tls_pems(tls, tls_ca_file, tls_cert_file, tls_key_file,
                                       tls_server_name),
                    tls_server_name=tls_server_name, native=native and _native is not None)
        self._channels = [_Channel(address, i, opts, self._metadata) for i in range(num_channels)]
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
            self._connect(namespace, connect_timeout, shared_memory, shared_memory_bytes,
                          shared_memory_socket)
        except BaseException:
            self.close()
            raise

    # -- lifecycle --------------------------------------------------------------------

    def close(self):
        """Closes the channels and ends the shared-memory session. Idempotent."""
        with self._lock:
            region, self._region = self._region, None
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
        return self._region is not None

    @property
    def uses_native(self):
        """True when the Put and Get streams run in kvtier._native (C++, GIL released);
        False on grpcio (not built, or native=False)."""
        return self._channels[0].native is not None

    # -- plumbing ---------------------------------------------------------------------

    def _pick(self):
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
            except _NATIVE_ERROR as e:
                err = errors.from_native_error(rpc, e)
            if err.code != grpc.StatusCode.UNAVAILABLE or a + 1 == attempts:
                raise err
            if time.monotonic() + backoff >= deadline:
                raise err
            time.sleep(backoff)
            backoff *= 2
        raise AssertionError("unreachable")

    def _unary(self, rpc, admin, request, idempotent, timeout, wait_for_ready=False):
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
                    offer.instance_id, _native if self.uses_native else None)
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

    def _lost_session(self, err, region):
        """True (and the region dropped) when `err` says the server forgot the session."""
        if (err.code == grpc.StatusCode.FAILED_PRECONDITION
                and err.reason == errors.REASON_SHM_SESSION_UNKNOWN):
            with self._lock:
                if self._region is region:
                    self._region = None
            return True
        return False

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
        contiguous runs over up to max_streams_per_call concurrent streams. Never retried.
        Raises the server's errors (NotFoundError unknown namespace, InvalidArgumentError
        bad key or payload, FailedPreconditionError layout mismatch,
        ResourceExhaustedError), DeadlineExceededError, UnavailableError."""
        total = PutResult()
        if not blocks:
            return total
        fmt = _fmt(format)
        views = [wire.as_bytes_view(b.payload) for b in blocks]
        deadline = self._deadline(timeout)
        payloads = [b.payload for b in blocks]
        for r in self._parallel(len(blocks), lambda b, e: self._put_run(
                ns, blocks[b:e], views[b:e], payloads[b:e], fmt, deadline)):
            total.blocks_stored += r.blocks_stored
            total.bytes_stored += r.bytes_stored
        return total

    def _put_run(self, ns, blocks, views, payloads, fmt, deadline):
        region = self._region
        if region is not None:
            offsets, staged, ok = [], [], True
            for v, p in zip(views, payloads):
                at = region.offset_of(p) if len(v) else 0
                if at is None:
                    at = region.allocate(len(v))
                    if at is None:
                        ok = False
                        break
                    staged.append((at, v))
                offsets.append(at)
            try:
                if ok:
                    # The socket call stages the payloads itself (in C++ with kvtier._native);
                    # the gRPC stream naming the region needs them staged here.
                    resp, _ = self._socket_call(
                        region, shm_mod.OP_PUT,
                        self._put_header(ns, blocks, views, fmt, region.session, offsets),
                        deadline, "Put", pb.PutResponse, staged)
                    if resp is not None:
                        return PutResult(resp.blocks_stored, resp.bytes_stored)
                    region.stage(staged)
                    return self._put_stream(ns, blocks, views, fmt, deadline,
                                            region.session, offsets)
            except errors.KvtierError as e:
                if not self._lost_session(e, region):
                    raise
            finally:
                for at, _ in staged:
                    region.free(at)
        return self._put_stream(ns, blocks, views, fmt, deadline)

    def _socket_call(self, region, op, message, deadline, rpc, response_type, copies=(),
                     copy_outs=()):
        """The call of serialized request `message` over the region's socket
        (shm.SharedRegion.call, which first copies `copies` into the region and may copy
        `copy_outs` out of it), as the C++ client makes it: (its parsed response_type, whether copy_outs were copied), or (None,
        False) when it must go over gRPC instead (socket calls off, the socket failed, the
        frame is too large, or the server answered UNAVAILABLE or UNAUTHENTICATED: a
        session is bound to its caller by the first authenticated gRPC call naming it;
        the copies may then not have been made). Raises the server's error otherwise."""
        if not self._shm_socket_calls:
            return None, False
        left = deadline - time.monotonic()
        if left <= 0:
            raise errors.DeadlineExceededError("Deadline Exceeded", rpc)
        try:
            reply = region.call(op, message, left, copies, copy_outs)
        except errors.DeadlineExceededError:
            raise errors.DeadlineExceededError("Deadline Exceeded", rpc) from None
        except OSError:
            return None, False
        if reply is None:
            return None, False
        code, message, details, body, copied = reply
        if code in _REDO_OVER_GRPC:
            return None, False
        with self._lock:
            self.shared_memory_socket_calls += 1
            if op != shm_mod.OP_LOOKUP and self._socket_lookup_offered:
                self._socket_lookup = True  # the session is bound now
        if code != 0:
            raise errors.from_status(rpc, code, message, details)
        return response_type.FromString(body), copied

    def _put_header(self, ns, blocks, views, fmt, session=None, offsets=None):
        """The first message of a Put of `blocks`, serialized: a PutRequest holding only
        its header (payloads in the region at `offsets` when `session` is set). The
        blocks are encoded by hand (wire.put_block_field) unless one carries router
        fields (token_ids, lora_name, extra_keys)."""
        with self._lock:
            known = self._layouts.get(ns)
            cached = self._header_fields.get((ns, fmt, session))
        if cached is None or cached[0] is not known:
            header = pb.PutHeader(namespace=ns, format=fmt)
            if known is not None:
                header.layout.CopyFrom(known)
            if session:
                header.shm_session = session
            cached = (known, header.SerializeToString())
            with self._lock:
                self._header_fields[(ns, fmt, session)] = cached
        if not any(len(b.token_ids) or b.lora_name or b.extra_keys for b in blocks):
            return wire.put_request(cached[1], [
                wire.put_block_field(bytes(b.key), bytes(b.parent_key), b.block_index, len(v),
                                     offsets[i] if session else 0)
                for i, (b, v) in enumerate(zip(blocks, views))])
        request = pb.PutRequest()
        header = request.header
        header.MergeFromString(cached[1])
        for i, (b, v) in enumerate(zip(blocks, views)):
            pb_block = header.blocks.add(key=bytes(b.key), parent_key=bytes(b.parent_key),
                                         block_index=b.block_index, size=len(v),
                                         shm_offset=offsets[i] if session else 0)
            if len(b.token_ids):
                pb_block.token_ids.extend(int(t) for t in b.token_ids)
            if b.lora_name:
                pb_block.lora_name = b.lora_name
            if b.extra_keys:
                pb_block.extra_keys.extend(b.extra_keys)
        return request.SerializeToString()

    def _put_stream(self, ns, blocks, views, fmt, deadline, session=None, offsets=None):
        first = self._put_header(ns, blocks, views, fmt, session, offsets)
        chunk = self.chunk_bytes

        def requests():
            yield first
            if session:
                return
            pieces, have = [], 0
            for v in views:
                off = 0
                while off < len(v):
                    take = min(len(v) - off, chunk - have)
                    pieces.append(v[off:off + take])
                    off += take
                    have += take
                    if have == chunk:
                        yield b"".join([wire.chunk_prefix(have)] + pieces)
                        pieces, have = [], 0
            if pieces:
                yield b"".join([wire.chunk_prefix(have)] + pieces)

        def attempt(ch, left, _):
            if ch.native is not None:
                return pb.PutResponse.FromString(ch.native.put(
                    _PUT, first, () if session else views, chunk, left, self._metadata))
            return _grpc_fast.stream_unary(ch.put, requests(), left, self._metadata)

        resp = self._call("Put", attempt, False, deadline)
        return PutResult(resp.blocks_stored, resp.bytes_stored)

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
        keys = [bytes(k) for k in keys]
        if len(buffers) != len(keys):
            raise errors.InvalidArgumentError("buffers: %d buffers for %d keys"
                                              % (len(buffers), len(keys)))
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

        def run(b, e):
            def dest(i, info):
                data = bytearray(info.size)
                out[b + i].data = data
                return np.frombuffer(data, dtype=np.uint8)
            return self._get_run(ns, keys[b:e], fmt, deadline, dest, None, None, run_lease)
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

    def _get_run(self, ns, keys, fmt, deadline, dest, buffers, arrays, lease_id=0):
        region = self._region if buffers is not None else None
        if region is not None:
            staged, destinations, ok = [], [], True
            for i, (buf, arr) in enumerate(zip(buffers, arrays)):
                at = region.offset_of(buf) if arr.size else None
                if at is None and arr.size:
                    at = region.allocate(arr.size)
                    if at is None:
                        ok = False
                        break
                    staged.append((i, at))
                destinations.append((at or 0, arr.size if at is not None else 0))
            try:
                if ok:
                    # Encoded by hand (built per call); parsed back only to redo it as a
                    # gRPC stream naming the region.
                    request = wire.get_request(ns, keys, fmt, lease_id, region.session,
                                               destinations)
                    resp, copied = self._socket_call(
                        region, shm_mod.OP_GET, request, deadline, "Get", pb.GetResponse,
                        copy_outs=[(i, at, arrays[i]) for i, at in staged])
                    staged_out = () if copied else staged  # copied: done within the call
                    infos = (list(resp.header.blocks) if resp is not None else self._call(
                        "Get", self._get_shm_attempt(pb.GetRequest.FromString(request)), True,
                        deadline))
                    if len(infos) != len(keys):
                        raise errors.InternalError("header lists %d blocks for %d keys"
                                                   % (len(infos), len(keys)), "Get")
                    for i, info in enumerate(infos):
                        if info.found and info.size > arrays[i].size:
                            raise errors.InternalError(
                                "the server wrote %d bytes into buffers[%d] of %d"
                                % (info.size, i, arrays[i].size), "Get")
                    for i, at in staged_out:
                        if infos[i].found:
                            region.copy_out(at, arrays[i], infos[i].size)
                    return infos
            except errors.KvtierError as e:
                if not self._lost_session(e, region):
                    raise
            finally:
                for _, at in staged:
                    region.free(at)
        req = pb.GetRequest(namespace=ns, keys=keys, format=fmt, lease_id=lease_id)

        def attempt(ch, left, _):
            parser = wire.GetStreamParser(dest)
            if ch.native is not None:
                ch.native.get(_GET, req.SerializeToString(), parser.on_header, left,
                              self._metadata)
                return check(parser)
            if not _grpc_fast.ENABLED:
                ch.keepalive.ensure()
            messages = _grpc_fast.unary_stream_iter(ch.get, req, left, self._metadata)
            try:
                for msg in messages:
                    parser.consume(msg)
            finally:
                messages.close()  # cancels the call when the parser gave up
            parser.finish()
            return check(parser)

        def check(parser):
            if len(parser.header.blocks) != len(keys):
                raise errors.InternalError("header lists %d blocks for %d keys"
                                           % (len(parser.header.blocks), len(keys)), "Get")
            return list(parser.header.blocks)
        return self._call("Get", attempt, True, deadline)

    def _get_shm_attempt(self, req):
        def attempt(ch, left, _):
            if ch.native is not None:
                # The framer refuses chunks (no destinations) and a second header.
                headers = []
                ch.native.get(_GET, req.SerializeToString(),
                              lambda data: headers.append(pb.GetHeader.FromString(data)) or (),
                              left, self._metadata)
                return list(headers[0].blocks)
            header, extra = None, False
            for msg in _grpc_fast.unary_stream_messages(ch.get, req, left, self._metadata):
                if header is not None or not msg or msg[0] != 0x0A:
                    extra = True
                    continue
                header = pb.GetResponse.FromString(msg).header
            if header is None or extra:
                raise errors.InternalError(
                    "a shared-memory Get must answer with exactly one header message", "Get")
            return list(header.blocks)
        return attempt

    # -- keyed unary calls ------------------------------------------------------------

    def lookup(self, ns, keys, local_only=False, timeout=None, lease_ms=0, compact=False):
        """How much of the prefix chain `keys` (block 0 first) is resident, and where:
        a LookupResponse (prefix_blocks; blocks[i].tier, blocks[i].owner). With lease_ms
        > 0 the owners also keep the first leased_blocks loadable for that long
        (blocks[i].lease_id; lease_limit says why fewer than prefix_blocks were leased)
        until release_lease. The server answers in the compact form (kvtier.lookup_form);
        it is expanded into `blocks` unless `compact` is true (then check
        lookup_form.is_compact: an old server answers with `blocks` regardless)."""
        req = pb.LookupRequest(namespace=ns, keys=[bytes(k) for k in keys],
                               local_only=local_only, lease_ms=lease_ms, compact=True)
        resp = self._socket_lookup_call(req, timeout)
        if resp is None:
            resp = self._unary("Lookup", False, req, True, timeout)
        return resp if compact else lookup_form.expand(resp)

    def _socket_lookup_call(self, req, timeout):
        """Lookup `req` as a frame on the shared-memory socket, as the C++ client sends it
        when the server offers it: its LookupResponse, or None to ask over gRPC (not
        offered, the frame too large, or refused: then not tried again until a socket Put
        or Get is answered, since a session is bound to its caller by a gRPC call)."""
        region = self._region
        if region is None or not self._socket_lookup:
            return None
        frame = shm_mod.lookup_frame(region.session, req.SerializeToString())
        if len(frame) + shm_mod._FRAME.size > shm_mod.MAX_FRAME_BYTES:
            return None
        try:
            resp, _ = self._socket_call(region, shm_mod.OP_LOOKUP, frame,
                                        self._deadline(timeout), "Lookup", pb.LookupResponse)
        except errors.KvtierError as e:
            if not self._lost_session(e, region):
                raise
            return None
        if resp is None:
            self._socket_lookup = False
        return resp

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
