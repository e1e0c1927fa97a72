"""Exceptions of the kvtier client: one class per gRPC status code, each carrying the
code, the server's message, the RPC name and the structured error detail (if any).

The server attaches a kvtier.v1.RpcStatus (wire-compatible with google.rpc.Status) holding
an Any(kvtier.v1.ErrorDetail) as the `grpc-status-details-bin` trailer on errors a client
acts on (docs/design.md §8); decode_status_details reads it (servers that send no
detail give reason 0).
"""

import grpc
from google.protobuf.message import DecodeError

from kvtier._proto import pb

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


def decode_status_details(data):
    """(reason, field) of the first kvtier.v1.ErrorDetail in a serialized RpcStatus
    (the grpc-status-details-bin trailer); (0, "") when there is none or it is garbled."""
    try:
        status = pb.RpcStatus.FromString(bytes(data))
        for detail in status.details:
            if detail.type_url == ERROR_DETAIL_TYPE_URL:
                d = pb.ErrorDetail.FromString(detail.value)
                return d.reason, d.field
    except DecodeError:
        pass
    return REASON_UNSPECIFIED, ""


_CODE_BY_NUMBER = {c.value[0]: c for c in grpc.StatusCode}


def from_native_error(rpc, err):
    """Converts a kvtier._native.RpcError (code number, message, grpc-status-details-bin
    bytes) into the KvtierError from_rpc_error gives for the same status."""
    return from_status(rpc, *err.args)


def from_status(rpc, number, message, details):
    """The KvtierError of a status given as its code number, message and
    grpc-status-details-bin bytes (a native call's error, a shared-memory socket reply)."""
    reason, field = decode_status_details(details) if details else (REASON_UNSPECIFIED, "")
    return error_for(_CODE_BY_NUMBER.get(number, grpc.StatusCode.UNKNOWN), message, rpc, reason,
                     field)


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
