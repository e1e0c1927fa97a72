"""The framing of the payload-carrying messages of the kvtier data plane, as in the C++
protocol/wire.h: a PutRequest chunk is 0x12, varint(length), payload; a
GetResponse is 0x0a, varint(length), GetHeader or 0x12, varint(length), payload bytes. Block
payloads are framed and parsed by hand so they never pass through protobuf `bytes` fields.
Also a Put's header and a staged Get's request, encoded by hand because they are built per
call, and the buffer adapters (caller buffers as flat uint8 views, no copy).
Thread-compatible.
"""

import ctypes

import numpy as np

from kvtier import errors
from kvtier._proto import pb


def varint(n):
    """The base-128 varint of n >= 0."""
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def chunk_prefix(n):
    """The prefix of a chunk field holding n payload bytes: 0x12, varint(n)."""
    return b"\x12" + varint(n)


def _delimited(tag, data):
    """A length-delimited field: its tag byte, varint(len(data)), data."""
    return tag + varint(len(data)) + data


def put_block_field(key, parent_key, block_index, size, shm_offset):
    """PutHeader.blocks (field 3) holding a PutBlock with these fields, the bytes protobuf
    writes (fields at their defaults left out). About 4x faster than building the message,
    and a Put's header is built per call (tests/python/test_wire.py checks they agree)."""
    parts = [_delimited(b"\x0a", key)]
    if parent_key:
        parts.append(_delimited(b"\x12", parent_key))
    if block_index:
        parts += [b"\x18", varint(block_index)]
    if size:
        parts += [b"\x20", varint(size)]
    if shm_offset:
        parts += [b"\x28", varint(shm_offset)]
    return _delimited(b"\x1a", b"".join(parts))


def get_request(ns, keys, fmt, lease_id, shm_session, shm_destinations):
    """A serialized GetRequest of `keys` whose payloads go to the shared region at
    shm_destinations ((offset, capacity) per key), the bytes protobuf writes. Built by hand
    for the same reason as a Put's header (tests/python/test_wire.py checks they agree)."""
    parts = [_delimited(b"\x0a", ns.encode())] if ns else []
    parts += [_delimited(b"\x12", k) for k in keys]
    if fmt:
        parts += [b"\x18", varint(fmt)]
    if shm_session:
        parts.append(_delimited(b"\x22", shm_session))
    for offset, capacity in shm_destinations:
        parts.append(_delimited(b"\x2a", (b"\x08" + varint(offset) if offset else b"") +
                                (b"\x10" + varint(capacity) if capacity else b"")))
    if lease_id:
        parts += [b"\x30", varint(lease_id)]
    return b"".join(parts)


def put_request(header_fields, block_fields):
    """The serialized PutRequest whose header is the serialized PutHeader fields
    `header_fields` followed by `block_fields` (put_block_field each). protobuf writes
    fields in number order; any order parses to the same message."""
    return _delimited(b"\x0a", header_fields + b"".join(block_fields))


def read_varint(buf, i):
    shift = value = 0
    while shift < 70:
        if i >= len(buf):
            break
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, i
        shift += 7
    raise errors.InternalError("get stream: malformed message length", "Get")


def as_bytes_view(payload):
    """A flat uint8 memoryview of a C-contiguous buffer (no copy)."""
    mv = memoryview(payload)
    if not mv.c_contiguous:
        raise errors.InvalidArgumentError("payload: buffer is not C-contiguous")
    return mv.cast("B") if mv.format != "B" or mv.ndim != 1 else mv


def as_u8_array(buf, name):
    """A writable flat numpy uint8 view of a caller's buffer (no copy)."""
    if isinstance(buf, np.ndarray):
        if not buf.flags.c_contiguous:
            raise errors.InvalidArgumentError("%s is not C-contiguous" % name)
        arr = buf.reshape(-1).view(np.uint8)
    else:
        mv = memoryview(buf)
        if not mv.c_contiguous:
            raise errors.InvalidArgumentError("%s is not C-contiguous" % name)
        arr = np.frombuffer(mv.cast("B") if mv.ndim != 1 or mv.format != "B" else mv,
                            dtype=np.uint8)
    if not arr.flags.writeable:
        raise errors.InvalidArgumentError("%s is read-only" % name)
    return arr


class GetStreamParser:
    """The client side of a Get stream (GetStreamParser of protocol/wire.h): the header, then
    chunk messages whose payload bytes go, in header order, into destination arrays."""

    def __init__(self, destination):
        self._destination = destination  # (index, info) -> np.uint8 array
        self.header = None
        self._dest, self._cur, self._off, self._remaining = [], 0, 0, 0

    def consume(self, msg):
        if not msg:
            return
        tag = msg[0]
        length, i = read_varint(msg, 1)
        if length != len(msg) - i:
            raise errors.InternalError("get stream: malformed message length", "Get")
        if tag == 0x12:
            if self.header is None:
                raise errors.InternalError("get stream: chunk before header", "Get")
            self._chunk(msg, i, length)
        elif tag == 0x0A:
            if self.header is not None:
                raise errors.InternalError("get stream: second header", "Get")
            self.on_header(msg[i:])
        else:
            raise errors.InternalError("get stream: unexpected field tag %d" % tag, "Get")

    def on_header(self, data):
        """Parses the serialized GetHeader `data` and returns each block's destination
        (a uint8 array of exactly info.size bytes, or None), which the chunks then
        fill."""
        self.header = pb.GetHeader.FromString(data)
        for k, info in enumerate(self.header.blocks):
            d = None
            if info.found and info.size:
                d = self._destination(k, info)
                if d.size < info.size:
                    raise errors.InternalError("get stream: destination of block %d holds "
                                               "%d bytes, needs %d" % (k, d.size, info.size),
                                               "Get")
                d = d[:info.size]
                self._remaining += info.size
            self._dest.append(d)
        return self._dest

    def _chunk(self, msg, i, length):
        if length > self._remaining:
            raise errors.InternalError("get stream: %d payload bytes more than the header "
                                       "announced" % (length - self._remaining), "Get")
        self._remaining -= length
        src = np.frombuffer(msg, dtype=np.uint8, count=length, offset=i).__array_interface__[
            "data"][0]
        pos = 0
        while pos < length:
            d = self._dest[self._cur]
            if d is None or self._off == d.size:
                self._cur += 1
                self._off = 0
                continue
            take = min(length - pos, d.size - self._off)
            # memmove releases the GIL (numpy's copy may not): other threads' calls go on.
            ctypes.memmove(d.__array_interface__["data"][0] + self._off, src + pos, take)
            self._off += take
            pos += take

    def finish(self):
        if self.header is None:
            raise errors.InternalError("get stream: ended without a header", "Get")
        if self._remaining:
            raise errors.InternalError("get stream: ended %d payload bytes short"
                                       % self._remaining, "Get")
