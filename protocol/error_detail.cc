#include "protocol/error_detail.h"

#include <string>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "common/strings.h"
#include "google/protobuf/any.pb.h"

namespace kvtier::protocol {

absl::Status WithErrorDetail(absl::Status status, v1::ErrorReason reason,
                             std::string_view field) {
  if (status.ok()) return status;
  v1::ErrorDetail detail;
  detail.set_reason(reason);
  detail.set_field(std::string(field));
  status.SetPayload(Sv(kErrorDetailTypeUrl), absl::Cord(detail.SerializeAsString()));
  return status;
}

std::optional<v1::ErrorDetail> GetErrorDetail(const absl::Status& status) {
  absl::optional<absl::Cord> payload = status.GetPayload(Sv(kErrorDetailTypeUrl));
  if (!payload.has_value()) return std::nullopt;
  v1::ErrorDetail detail;
  if (!detail.ParseFromString(std::string(*payload))) return std::nullopt;
  return detail;
}

bool HasErrorReason(const absl::Status& status, v1::ErrorReason reason) {
  std::optional<v1::ErrorDetail> detail = GetErrorDetail(status);
  return detail.has_value() && detail->reason() == reason;
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  const auto code = static_cast<grpc::StatusCode>(status.code());
  std::string message(status.message());
  std::optional<v1::ErrorDetail> detail = GetErrorDetail(status);
  if (!detail.has_value()) return grpc::Status(code, std::move(message));
  v1::RpcStatus rpc;
  rpc.set_code(static_cast<int32_t>(code));
  rpc.set_message(message);
  google::protobuf::Any* any = rpc.add_details();
  any->set_type_url(std::string(kErrorDetailTypeUrl));
  any->set_value(detail->SerializeAsString());
  return grpc::Status(code, std::move(message), rpc.SerializeAsString());
}

absl::Status FromGrpcStatus(std::string_view rpc, const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  absl::Status out(static_cast<absl::StatusCode>(status.error_code()),
                   absl::StrCat(Sv(rpc), ": ", status.error_message()));
  if (status.error_details().empty()) return out;
  v1::RpcStatus details;
  if (!details.ParseFromString(status.error_details())) return out;
  for (const google::protobuf::Any& any : details.details()) {
    v1::ErrorDetail detail;
    if (any.type_url() == kErrorDetailTypeUrl && detail.ParseFromString(any.value())) {
      return WithErrorDetail(std::move(out), detail.reason(), detail.field());
    }
  }
  return out;
}

}  // namespace kvtier::protocol
