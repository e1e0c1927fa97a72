"""The pure-Python payload paths of kvtier.Client (client.py), used only when the
kvtier._native extension is not built or the client was made with native=False; with it,
the C++ client's one fallback loop runs the payload calls (docs/dataplane.md). This is
that loop's Python mirror: a Put or Get goes as a frame on the shared region's socket,
else as a gRPC stream naming the region, else as a gRPC stream carrying the payloads
(grpcio; chunks framed by hand, kvtier.wire), and a lost session (SHM_SESSION_UNKNOWN)
drops the region. tests/python runs every case on both (test_client.py NATIVE,
test_shm.py PATHS). Thread-safe, as Client is.
"""

import time

import grpc

from kvtier import _grpc_fast
from kvtier import errors
from kvtier import shm as shm_mod
from kvtier import wire
from kvtier._proto import pb

# Codes of a shared-memory socket reply that send the call over gRPC instead.
_REDO_OVER_GRPC = (grpc.StatusCode.UNAVAILABLE.value[0], grpc.StatusCode.UNAUTHENTICATED.value[0])


class PythonPaths:
    """The pure-Python payload-path methods of kvtier.Client (a mixin: they use its
    channels, region, lock, _call and _deadline). _put_run / _put_stream return the
    server's PutResponse."""

    def _lost_session(self, err, region):
        """True (and the region dropped) when `err` says the server forgot the session."""
        if (err.code == grpc.StatusCode.FAILED_PRECONDITION
                and err.reason == errors.REASON_SHM_SESSION_UNKNOWN):
            with self._lock:
                if self._region is region:
                    self._region = None
            return True
        return False

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
                        return resp
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
            self._socket_calls += 1
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
            return _grpc_fast.stream_unary(ch.put, requests(), left, self._metadata)

        # Retried like the idempotent calls: a block's key is bound to its content (client.py).
        return self._call("Put", attempt, True, deadline)

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
            if not _grpc_fast.ENABLED and ch.keepalive is not None:
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
