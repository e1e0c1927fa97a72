"""Exceptions of the kvtier client: one class per gRPC status code, each carrying the
code, the server's message, the RPC name and the structured error detail (if any).

The server attaches a kvtier.v1.RpcStatus (wire-compatible with google.rpc.Status) holding
an Any(kvtier.v1.ErrorDetail) as the `grpc-status-details-bin` trailer on errors a client
acts on (docs/design.md §8); decode_status_details reads it without the generated
messages, so it works against servers built before ErrorDetail existed (no detail then).
"""

import grpc

ERROR_DETAIL_TYPE_URL = "type.googleapis.com/kvtier.v1.ErrorDetail"

# kvtier.v1.ErrorReason values.
REASON_UNSPECIFIED = 0
REASON_SHM_SESSION_UNKNOWN = 1
REASON_SERVER_LOADING = 40


class KvtierError(Exception):
    """A failed call. code: grpc.StatusCode; message: the server's (or client's) message;
    rpc: the RPC name ("Put", "Get", ...); reason / field: the ErrorDetail, 0 / "" when the
    server sent none. str() is "RPC: message" like the C++ client's statuses."""

    code = grpc.StatusCode.UNKNOWN

    def __init__(self, message, rpc="", code=None, reason=REASON_UNSPECIFIED, field=""):
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message
        self.rpc = rpc
        self.reason = reason
        self.field = field

    def __str__(self):
        return "%s: %s" % (self.rpc, self.message) if self.rpc else self.message


class CancelledError(KvtierError):
    code = grpc.StatusCode.CANCELLED


class UnknownError(KvtierError):
    code = grpc.StatusCode.UNKNOWN


class InvalidArgumentError(KvtierError, ValueError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class DeadlineExceededError(KvtierError, TimeoutError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class NotFoundError(KvtierError, LookupError):
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExistsError(KvtierError):
    code = grpc.StatusCode.ALREADY_EXISTS


class PermissionDeniedError(KvtierError, PermissionError):
    code = grpc.StatusCode.PERMISSION_DENIED


class ResourceExhaustedError(KvtierError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class FailedPreconditionError(KvtierError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class AbortedError(KvtierError):
    code = grpc.StatusCode.ABORTED


class OutOfRangeError(KvtierError):
    code = grpc.StatusCode.OUT_OF_RANGE


class UnimplementedError(KvtierError):
    code = grpc.StatusCode.UNIMPLEMENTED


class InternalError(KvtierError):
    code = grpc.StatusCode.INTERNAL


class UnavailableError(KvtierError, ConnectionError):
    code = grpc.StatusCode.UNAVAILABLE


class DataLossError(KvtierError):
    code = grpc.StatusCode.DATA_LOSS


class UnauthenticatedError(KvtierError):
    code = grpc.StatusCode.UNAUTHENTICATED


_BY_CODE = {c.code: c for c in (
    CancelledError, UnknownError, InvalidArgumentError, DeadlineExceededError, NotFoundError,
    AlreadyExistsError, PermissionDeniedError, ResourceExhaustedError,
    FailedPreconditionError, AbortedError, OutOfRangeError, UnimplementedError, InternalError,
    UnavailableError, DataLossError, UnauthenticatedError)}


def error_for(code, message, rpc="", reason=REASON_UNSPECIFIED, field=""):
    """The exception of class matching `code` (a grpc.StatusCode)."""
    return _BY_CODE.get(code, KvtierError)(message, rpc, code, reason, field)


def _varint(buf, i):
    shift = value = 0
    while True:
        if i >= len(buf) or shift > 63:
            raise ValueError("truncated varint")
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, i
        shift += 7


def _fields(buf):
    """(field number, wire type, value) of a serialized message; bytes for wire type 2."""
    i = 0
    while i < len(buf):
        tag, i = _varint(buf, i)
        num, wt = tag >> 3, tag & 7
        if wt == 0:
            v, i = _varint(buf, i)
        elif wt == 2:
            n, i = _varint(buf, i)
            if i + n > len(buf):
                raise ValueError("truncated field")
            v, i = bytes(buf[i:i + n]), i + n
        elif wt == 1:
            v, i = buf[i:i + 8], i + 8
        elif wt == 5:
            v, i = buf[i:i + 4], i + 4
        else:
            raise ValueError("unsupported wire type %d" % wt)
        yield num, wt, v


def decode_status_details(data):
    """(reason, field) of the first kvtier.v1.ErrorDetail in a serialized RpcStatus
    (the grpc-status-details-bin trailer); (0, "") when there is none or it is garbled."""
    try:
        for num, wt, v in _fields(data):
            if num != 3 or wt != 2:
                continue
            type_url, value = "", b""
            for n2, w2, v2 in _fields(v):
                if n2 == 1 and w2 == 2:
                    type_url = v2.decode("utf-8", "replace")
                elif n2 == 2 and w2 == 2:
                    value = v2
            if type_url != ERROR_DETAIL_TYPE_URL:
                continue
            reason, field = REASON_UNSPECIFIED, ""
            for n3, w3, v3 in _fields(value):
                if n3 == 1 and w3 == 0:
                    reason = v3
                elif n3 == 2 and w3 == 2:
                    field = v3.decode("utf-8", "replace")
            return reason, field
    except ValueError:
        pass
    return REASON_UNSPECIFIED, ""


def from_rpc_error(rpc, err):
    """Converts a grpc.RpcError raised by a call into a KvtierError."""
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    message = err.details() if hasattr(err, "details") else str(err)
    reason, field = REASON_UNSPECIFIED, ""
    trailers = err.trailing_metadata() if hasattr(err, "trailing_metadata") else None
    for k, v in trailers or ():
        if k == "grpc-status-details-bin":
            reason, field = decode_status_details(v)
    return error_for(code, message or "", rpc, reason, field)
