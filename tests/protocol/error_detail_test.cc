#include "protocol/error_detail.h"

#include <string>

#include "google/protobuf/any.pb.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace kvtier::protocol {
namespace {

TEST(ErrorDetailTest, SurvivesTheGrpcEdgeBothWays) {
  const absl::Status server = WithErrorDetail(absl::FailedPreconditionError("no such session"),
                                              v1::SHM_SESSION_UNKNOWN, "header.shm_session");
  const grpc::Status wire = ToGrpcStatus(server);
  EXPECT_EQ(wire.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(wire.error_message(), "no such session");

  // The details are a google.rpc.Status-compatible RpcStatus holding one Any.
  v1::RpcStatus rpc;
  ASSERT_TRUE(rpc.ParseFromString(wire.error_details()));
  EXPECT_EQ(rpc.code(), static_cast<int>(grpc::StatusCode::FAILED_PRECONDITION));
  ASSERT_EQ(rpc.details_size(), 1);
  EXPECT_EQ(rpc.details(0).type_url(), "type.googleapis.com/kvtier.v1.ErrorDetail");

  const absl::Status client = FromGrpcStatus("Put", wire);
  EXPECT_EQ(client.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(client.message(), "Put: no such session");
  EXPECT_TRUE(HasErrorReason(client, v1::SHM_SESSION_UNKNOWN));
  ASSERT_TRUE(GetErrorDetail(client).has_value());
  EXPECT_EQ(GetErrorDetail(client)->field(), "header.shm_session");
}

TEST(ErrorDetailTest, MessageTextAloneCarriesNoReason) {
  // A status that merely mentions the field is not a lost session.
  const grpc::Status wire(grpc::StatusCode::FAILED_PRECONDITION, "shm_session is unknown");
  const absl::Status client = FromGrpcStatus("Get", wire);
  EXPECT_FALSE(HasErrorReason(client, v1::SHM_SESSION_UNKNOWN));
  EXPECT_FALSE(GetErrorDetail(client).has_value());
  EXPECT_TRUE(ToGrpcStatus(absl::InternalError("x")).error_details().empty());
  // Garbage details are ignored, not fatal.
  const grpc::Status garbage(grpc::StatusCode::INTERNAL, "m", "\xff\xff\xff");
  EXPECT_FALSE(GetErrorDetail(FromGrpcStatus("Get", garbage)).has_value());
}

TEST(ErrorDetailTest, OkStaysOk) {
  EXPECT_OK(WithErrorDetail(absl::OkStatus(), v1::SHM_SESSION_UNKNOWN, "f"));
  EXPECT_OK(ToGrpcStatus(absl::OkStatus()));
  EXPECT_OK(FromGrpcStatus("Get", grpc::Status::OK));
}

}  // namespace
}  // namespace kvtier::protocol
