"""The client's end of kvtierd's same-node shared-memory data path.

Handshake (protocol/shm_wire.h; server service/shm_server.h) over a Unix SOCK_SEQPACKET
socket, structs little-endian with C layout:
  client -> server  ShmRequest {char magic[8] "KVTSHM01"; u64 region_bytes;
                                u8 instance[16]}                              (32 bytes)
  server -> client  ShmReply   {char magic[8]; u32 ok; u32 reserved; u64 region_bytes;
                                u8 session[16]; u8 instance[16]; char error[200]} (256 bytes)
                    with the region's sealed memfd attached (SCM_RIGHTS) when ok.
The session lasts while the socket stays open. SharedRegion maps the memfd (populated),
exposes it as a numpy uint8 array and allocates ranges of it (first fit, 4 KiB granules)
for staging copies and SharedBuffers.

Calls (SharedRegion.call; the pure-Python path: with kvtier._native the C++ client makes
these calls itself): other
connections to the same socket path carry Put, Get and (when the server's offer says
socket_lookup) Lookup calls, one at a time each, as single messages of at most
MAX_FRAME_BYTES:
  client -> server  FrameHeader {char magic[4] "KVF1"; u32 op (1 Put, 2 Get, 3 Lookup);
                                 u64 request_id; i64 deadline_unix_ms (0: none)}  (24 bytes)
                    + the serialized kvtier.v1.PutRequest holding only its header (Put) or
                      GetRequest (Get), exactly what the gRPC call sends, naming the
                      session; for Lookup, lookup_frame(session, LookupRequest bytes)
  server -> client  ReplyHeader {char magic[4] "KVF1"; i32 code (grpc status); u64
                                 request_id; u32 message_bytes; u32 details_bytes} (24 bytes)
                    + the status message, grpc-status-details-bin, and when code is 0 the
                      serialized PutResponse / GetResponse (the payloads are in the region)
                      / LookupResponse
Thread-safe.
"""

import ctypes
import itertools
import mmap
import socket
import struct
import threading
import time

import numpy as np

from kvtier import _protocol
from kvtier import errors

MAGIC = _protocol.CONSTANTS["shm_magic"]
SESSION_BYTES = _protocol.CONSTANTS["shm_session_bytes"]
INSTANCE_BYTES = _protocol.CONSTANTS["shm_instance_bytes"]
_REQUEST = struct.Struct("<8sQ16s")
_REPLY = struct.Struct("<8sIIQ16s16s200s")
_GRANULE = 4096
FRAME_MAGIC = _protocol.CONSTANTS["shm_frame_magic"]
OP_PUT, OP_GET, OP_LOOKUP = 1, 2, 3
MAX_FRAME_BYTES = _protocol.CONSTANTS["shm_max_frame_bytes"]
_FRAME = struct.Struct("<4sIQq")
_REPLY_HEADER = struct.Struct("<4siQII")


def lookup_frame(session, request):
    """The body of a Lookup frame: u16 session length, the session, then the serialized
    LookupRequest (protocol::shm::JoinSessionAndRequest)."""
    return struct.pack("<H", len(session)) + bytes(session) + request


def buffer_address(buf):
    """(address, nbytes) of a C-contiguous buffer (numpy array, memoryview, bytearray)."""
    arr = np.frombuffer(buf, dtype=np.uint8) if not isinstance(buf, np.ndarray) else buf
    return arr.__array_interface__["data"][0], arr.nbytes


class SharedRegion:
    """A mapped region of one shared-memory session."""

    def __init__(self, sock, mm, size, session, socket_path):
        self._sock = sock
        self._socket_path = socket_path
        self._idle = []  # call connections not in use
        self._closed = False
        self._request_ids = itertools.count(1)
        self._mm = mm
        self.size = size
        self.session = session
        self.array = np.frombuffer(mm, dtype=np.uint8)  # the whole region
        self.base = self.array.__array_interface__["data"][0]
        self._lock = threading.Lock()
        self._free = {0: size}  # offset -> length, coalesced
        self._used = {}

    @classmethod
    def open(cls, socket_path, nbytes, expected_instance):
        """Connects, asks for `nbytes` and maps the region. Raises FailedPreconditionError
        when the socket belongs to another server than `expected_instance`,
        UnavailableError when it cannot be reached, ResourceExhaustedError with the
        server's reason when it refuses."""
        if nbytes <= 0:
            raise errors.InvalidArgumentError("shared memory: region size is 0")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        fds = []
        try:
            try:
                sock.connect(socket_path)
            except OSError as e:
                raise errors.UnavailableError("shared memory: cannot connect to %s: %s"
                                              % (socket_path, e.strerror or e)) from None
            inst = bytes(expected_instance)[:INSTANCE_BYTES].ljust(INSTANCE_BYTES, b"\0")
            sock.sendall(_REQUEST.pack(MAGIC, nbytes, inst))
            try:
                msg, fds, flags, _ = socket.recv_fds(sock, _REPLY.size, 1)
            except OSError as e:
                raise errors.UnavailableError("shm socket receive: %s" % e) from None
            if not msg:
                raise errors.UnavailableError("shm socket: closed by peer")
            if len(msg) != _REPLY.size or flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
                raise errors.UnavailableError("shm socket: message of %d bytes, expected %d"
                                              % (len(msg), _REPLY.size))
            magic, ok, _, granted, session, instance, err = _REPLY.unpack(msg)
            if magic != MAGIC:
                raise errors.FailedPreconditionError(
                    "shared memory: the server answered with a bad magic")
            if instance != bytes(expected_instance):
                raise errors.FailedPreconditionError(
                    "shared memory: %s belongs to another kvtierd than the one connected"
                    % socket_path)
            if ok != 1 or not fds:
                raise errors.ResourceExhaustedError(
                    "shared memory refused: " + err.split(b"\0")[0].decode("utf-8", "replace"))
            if granted != nbytes:
                raise errors.InternalError(
                    "shared memory: the server granted another size than asked")
            flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
            mm = mmap.mmap(fds[0], nbytes, flags=flags, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            sock.close()
            raise
        finally:
            for fd in fds:
                socket.close(fd)
        return cls(sock, mm, nbytes, session, socket_path)

    def call(self, op, request, timeout, copies=(), copy_outs=()):
        """Copies each (offset, buffer) of `copies` into the region (a Put's staged
        payloads), then sends one call (OP_PUT with a serialized header-only PutRequest,
        OP_GET with a GetRequest) on a call connection of the pool (one per concurrent
        call, opened on demand) and returns (code, message, details, body, copied) of the
        server's reply; None, with nothing copied, when the frame is larger than
        MAX_FRAME_BYTES. copied: whether the staged Get destinations `copy_outs` ((block
        index, offset, writable array) each) were copied out of the region already
        (always False here: the caller copies). DeadlineExceededError when `timeout` seconds pass without a reply (that
        connection is dropped); OSError when the socket fails (the caller may redo the
        call over gRPC, after staging the copies itself)."""
        if len(request) + _FRAME.size > MAX_FRAME_BYTES:
            return None
        self.stage(copies)
        request_id = next(self._request_ids)
        deadline_ms = int((time.time() + timeout) * 1000)
        with self._lock:
            if self._closed:
                raise OSError("shared memory: the session was closed")
            sock = self._idle.pop() if self._idle else None
        fresh = sock is None
        if fresh:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            sock.settimeout(timeout)
            if fresh:
                sock.connect(self._socket_path)
            sock.sendall(_FRAME.pack(FRAME_MAGIC, op, request_id, deadline_ms) + request)
            reply = sock.recv(MAX_FRAME_BYTES)
        except socket.timeout:
            sock.close()
            raise errors.DeadlineExceededError("Deadline Exceeded") from None
        except BaseException:
            sock.close()
            raise
        if len(reply) < _REPLY_HEADER.size:
            sock.close()
            raise OSError("shm socket: reply of %d bytes" % len(reply))
        magic, code, rid, message_bytes, details_bytes = _REPLY_HEADER.unpack_from(reply)
        end = _REPLY_HEADER.size + message_bytes + details_bytes
        if magic != FRAME_MAGIC or rid != request_id or end > len(reply):
            sock.close()
            raise OSError("shm socket: malformed reply")
        with self._lock:
            if self._closed:
                sock.close()
            else:
                self._idle.append(sock)
        at = _REPLY_HEADER.size
        message = reply[at:at + message_bytes].decode("utf-8", "replace")
        details = reply[at + message_bytes:end]
        return code, message, details, reply[end:], False

    def close(self):
        """Ends the session (the server forgets it). The mapping stays while SharedBuffers
        or other views of it are alive and goes when the last one does."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for s in idle:
            s.close()
        self._sock.close()
        self.array = None
        try:
            self._mm.close()
        except BufferError:
            pass  # views still exported: unmapped when they are collected

    def allocate(self, n):
        """Offset of `n` reserved bytes (rounded up to 4 KiB), or None when full."""
        if n <= 0:
            return None
        n = -(-n // _GRANULE) * _GRANULE
        with self._lock:
            for off in sorted(self._free):
                length = self._free[off]
                if length < n:
                    continue
                del self._free[off]
                if length > n:
                    self._free[off + n] = length - n
                self._used[off] = n
                return off
        return None

    def free(self, offset):
        """Returns a range from allocate()."""
        with self._lock:
            n = self._used.pop(offset, None)
            if n is None:
                return
            start, end = offset, offset + n
            nxt = self._free.pop(end, None)
            if nxt is not None:
                end += nxt
            for off, length in list(self._free.items()):
                if off + length == start:
                    del self._free[off]
                    start = off
                    break
            self._free[start] = end - start

    def offset_of(self, buf):
        """Offset of a buffer that lies wholly inside the region, else None."""
        if isinstance(buf, (bytes, bytearray)):
            return None  # Python's own memory: never inside the mapping
        try:
            addr, n = buffer_address(buf)
        except (TypeError, ValueError):
            return None
        if addr < self.base or addr - self.base > self.size or n > self.size - (addr - self.base):
            return None
        return addr - self.base

    def _mapped(self):
        """The region's array, held by the caller for as long as it touches the mapping:
        a close() meanwhile then leaves the mapping to the garbage collector instead of
        unmapping it under a copy that runs without the GIL. UnavailableError once
        closed."""
        array = self.array
        if array is None:
            raise errors.UnavailableError("shared memory: the session was closed")
        return array

    def copy_in(self, offset, src):
        """Copies a buffer into region[offset:] (memmove without the GIL)."""
        addr, n = buffer_address(src)
        mapped = self._mapped()
        ctypes.memmove(self.base + offset, addr, n)
        del mapped

    def stage(self, copies):
        """copy_in of each (offset, buffer) of `copies`."""
        for offset, src in copies:
            self.copy_in(offset, src)

    def copy_out(self, offset, dst, n):
        """Copies region[offset, offset + n) to the start of writable array `dst`."""
        mapped = self._mapped()
        ctypes.memmove(dst.__array_interface__["data"][0], self.base + offset, n)
        del mapped

    def view(self, offset, n):
        """numpy uint8 view of region[offset, offset + n)."""
        return self._mapped()[offset:offset + n]


class SharedBuffer(np.ndarray):
    """A numpy uint8 array inside the client's shared region (Client.allocate_shared_buffer).
    Payloads put from it and get_blocks_into it skip the client-side copy; view it with
    .view(np.float16).reshape(...) to fill or read KV in place. Its range is returned to
    the region when the array (and every view of it) is garbage-collected, or at
    release(). Keeps the mapping alive while it lives."""

    def release(self):
        """Returns the range to the region now; the array must not be used afterwards."""
        owner = getattr(self, "_kvtier_owner", None)
        if owner is not None:
            owner.release()


class _Allocation:
    def __init__(self, region, offset):
        self.region, self.offset = region, offset

    def release(self):
        if self.region is not None:
            self.region.free(self.offset)
            self.region = None

    def __del__(self):
        self.release()
