// Structured error details: conditions a client acts on travel as a kvtier.v1.ErrorDetail
// (reason + field), never as message text (docs/design.md §5 Service, admission and
// limits).
//
// Inside a process the detail rides on an absl::Status as a payload under
// kErrorDetailTypeUrl. At the gRPC edge the server (ToGrpcStatus) sends it as the status
// details: a serialized kvtier.v1.RpcStatus (wire-compatible with google.rpc.Status)
// holding one Any(ErrorDetail), i.e. the `grpc-status-details-bin` trailer. The client
// (FromGrpcStatus) decodes it back into the payload. Pure functions; thread-safe.
#ifndef KVTIER_PROTOCOL_ERROR_DETAIL_H_
#define KVTIER_PROTOCOL_ERROR_DETAIL_H_

#include <optional>
#include <string_view>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"
#include "kvtier/v1/kvtier.pb.h"

namespace kvtier::protocol {

// Type URL of the Any holding an ErrorDetail, and the absl::Status payload key.
inline constexpr std::string_view kErrorDetailTypeUrl =
    "type.googleapis.com/kvtier.v1.ErrorDetail";

// Returns `status` with ErrorDetail{reason, field} attached (replacing any earlier one).
// An OK status is returned unchanged.
absl::Status WithErrorDetail(absl::Status status, v1::ErrorReason reason, std::string_view field);

// Returns the ErrorDetail attached to `status`, or nullopt when there is none (or it does
// not parse).
std::optional<v1::ErrorDetail> GetErrorDetail(const absl::Status& status);

// True when `status` carries an ErrorDetail with `reason`.
bool HasErrorReason(const absl::Status& status, v1::ErrorReason reason);

// Converts at the server's gRPC edge: same code (the numbers are identical) and message;
// an attached ErrorDetail becomes the status details (serialized RpcStatus).
grpc::Status ToGrpcStatus(const absl::Status& status);

// Converts at the client's gRPC edge: same code, the message prefixed with "<rpc>: ", and
// the ErrorDetail of the status details (if any) attached again.
absl::Status FromGrpcStatus(std::string_view rpc, const grpc::Status& status);

}  // namespace kvtier::protocol

#endif  // KVTIER_PROTOCOL_ERROR_DETAIL_H_
