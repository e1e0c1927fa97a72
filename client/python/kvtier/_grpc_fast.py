"""Cheaper streaming calls for grpcio's synchronous API (the Python client's hot path).

grpcio's public sync API starts a thread per client-streaming call (to consume the
request iterator) and, while a channel has no other call in flight, a "spin" thread per
server-streaming call; with 2 MiB payloads on a few cores that was ~200 us of CPU per
call, more than the payload copy. Two remedies, both optional:
  - stream_unary(): a client-streaming call whose messages are sent from the calling
    thread, on grpcio's own segregated-call machinery (grpc._channel internals of
    grpcio 1.4x-1.6x); when those internals are not there it uses the public API.
    KVTIER_GRPC_FAST_PATH=0 turns it off.
  - unary_stream_iter() / unary_stream_messages(): a server-streaming call received on
    the calling thread, the same way (TCP Gets parse each payload message as it arrives;
    a shared-memory Get gets its lone header): no hand-off from the channel's event
    thread per message.
  - Keepalive: one long-lived Health/Watch stream per channel keeps the channel's event
    thread alive between calls, for the public server-streaming path (fast path off).
"""

import os
import threading

try:
    from grpc import _channel as _gch
    from grpc import _compression
    from grpc._cython import cygrpc
    _OK = all(hasattr(_gch, n) for n in (
        "_RPCState", "_STREAM_UNARY_INITIAL_DUE", "_InitialMetadataFlags", "_handle_event",
        "_stream_unary_invocation_operationses_and_tags", "_end_unary_response_blocking",
        "_deadline", "_determine_deadline", "_EMPTY_FLAGS", "_StreamUnaryMultiCallable",
        "_UnaryStreamMultiCallable"))
except ImportError:  # pragma: no cover - another grpcio layout
    _OK = False

ENABLED = _OK and os.environ.get("KVTIER_GRPC_FAST_PATH", "1") != "0"

_HEALTH_WATCH = "/grpc.health.v1.Health/Watch"


def stream_unary(multicallable, messages, timeout, metadata=None):
    """multicallable(iter(messages), timeout=..., metadata=...) without a helper thread.
    `messages` are serialized requests, sent one after the other (the first with the call's
    initial batch and the last with the half-close, so a one-message stream costs what a
    unary call does); returns the response or raises grpc.RpcError like the public call."""
    mc = multicallable
    if not ENABLED or not isinstance(mc, _gch._StreamUnaryMultiCallable):
        return mc(iter(messages), timeout=timeout, metadata=metadata)
    ops = cygrpc.OperationType
    flags = _gch._EMPTY_FLAGS
    it = iter(messages)
    cur = next(it, None)
    nxt = next(it, None) if cur is not None else None
    md = _compression.augment_metadata(metadata, None)
    first = [cygrpc.SendInitialMetadataOperation(
        md, _gch._InitialMetadataFlags().with_wait_for_ready(None))]
    due = {ops.send_initial_metadata, ops.receive_initial_metadata, ops.receive_message,
           ops.receive_status_on_client}
    # A batch completes only when all its operations have, and the receives in the first
    # one complete with the call: only a stream of at most one message rides along.
    single = nxt is None
    if single:
        if cur is not None:
            first.append(cygrpc.SendMessageOperation(cur, flags))
            due.add(ops.send_message)
        first.append(cygrpc.SendCloseFromClientOperation(flags))
        due.add(ops.send_close_from_client)
        cur = None
    first += [cygrpc.ReceiveMessageOperation(flags), cygrpc.ReceiveStatusOnClientOperation(flags)]
    state = _gch._RPCState(due, None, None, None, None)
    call = mc._channel.segregated_call(
        cygrpc.PropagationConstants.GRPC_PROPAGATE_DEFAULTS, mc._method, None,
        _gch._determine_deadline(_gch._deadline(timeout)), md, None,
        ((tuple(first), None), ((cygrpc.ReceiveInitialMetadataOperation(flags),), None)),
        mc._context)

    def pump(done):
        while not done():
            _gch._handle_event(call.next_event(), state, mc._response_deserializer)
    try:
        while cur is not None:
            batch = [cygrpc.SendMessageOperation(cur, flags)]
            state.due.add(ops.send_message)
            if nxt is None:
                batch.append(cygrpc.SendCloseFromClientOperation(flags))
                state.due.add(ops.send_close_from_client)
            if not call.operate(tuple(batch), None):
                state.due.discard(ops.send_message)
                state.due.discard(ops.send_close_from_client)
                break
            pump(lambda: state.code is not None or ops.send_message not in state.due)
            if state.code is not None:
                break
            cur, nxt = nxt, (next(it, None) if nxt is not None else None)
    except BaseException:
        call.cancel(cygrpc.StatusCode.cancelled, "kvtier: request stream failed")
        pump(lambda: not state.due)
        raise
    pump(lambda: not state.due)
    return _gch._end_unary_response_blocking(state, call, False, None)


def unary_stream_iter(multicallable, request, timeout, metadata=None):
    """The response messages of a server-streaming call, yielded as they arrive and
    received on the calling thread (no hand-off from the channel's event thread per
    message). Raises grpc.RpcError like the public call once the stream ends with an
    error; closing the generator early cancels the call."""
    mc = multicallable
    if not ENABLED or not isinstance(mc, _gch._UnaryStreamMultiCallable):
        call = mc(request, timeout=timeout, metadata=metadata)
        try:
            yield from call
        finally:
            call.cancel()
        return
    ops = cygrpc.OperationType
    flags = _gch._EMPTY_FLAGS
    md = _compression.augment_metadata(metadata, None)
    payload = mc._request_serializer(request) if mc._request_serializer else request
    state = _gch._RPCState((ops.send_initial_metadata, ops.send_message,
                            ops.send_close_from_client, ops.receive_status_on_client,
                            ops.receive_initial_metadata), None, None, None, None)
    call = mc._channel.segregated_call(
        cygrpc.PropagationConstants.GRPC_PROPAGATE_DEFAULTS, mc._method, None,
        _gch._determine_deadline(_gch._deadline(timeout)), md, None,
        (((cygrpc.SendInitialMetadataOperation(
              md, _gch._InitialMetadataFlags().with_wait_for_ready(None)),
           cygrpc.SendMessageOperation(payload, flags),
           cygrpc.SendCloseFromClientOperation(flags),
           cygrpc.ReceiveStatusOnClientOperation(flags)), None),
         ((cygrpc.ReceiveInitialMetadataOperation(flags),), None)),
        mc._context)

    def pump(done):
        while not done():
            _gch._handle_event(call.next_event(), state, mc._response_deserializer)
    finished = False
    try:
        while state.code is None:
            state.due.add(ops.receive_message)
            state.response = None
            if not call.operate((cygrpc.ReceiveMessageOperation(flags),), None):
                state.due.discard(ops.receive_message)
                break
            pump(lambda: ops.receive_message not in state.due)
            if state.response is None:
                break
            yield state.response
        finished = True
    finally:
        if not finished:
            call.cancel(cygrpc.StatusCode.cancelled, "kvtier: response stream abandoned")
        pump(lambda: not state.due)
    _gch._end_unary_response_blocking(state, call, False, None)  # raises on an error status


def unary_stream_messages(multicallable, request, timeout, metadata=None):
    """All response messages of a server-streaming call, received on the calling thread
    (for short answers, e.g. a shared-memory Get's lone header). Raises grpc.RpcError like
    the public call."""
    return list(unary_stream_iter(multicallable, request, timeout, metadata))


class Keepalive:
    """A Health/Watch stream held open on a channel (re-opened when it ended)."""

    def __init__(self, channel, metadata=None):
        self._method = channel.unary_stream(_HEALTH_WATCH, request_serializer=None,
                                            response_deserializer=None)
        self._metadata = metadata
        self._lock = threading.Lock()
        self._call = None

    def ensure(self):
        call = self._call
        if call is not None and call.is_active():
            return
        with self._lock:
            if self._call is None or not self._call.is_active():
                self._call = self._method(b"", metadata=self._metadata)

    def cancel(self):
        if self._call is not None:
            self._call.cancel()
