#include "service/ucx_calls.h"

#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "dataplane/ucx_server.h"
#include "protocol/error_detail.h"
#include "protocol/shm_wire.h"
#include "service/admission.h"
#include "service/put_reactor.h"

namespace kvtier::service {
namespace {

namespace shm = ::kvtier::protocol::shm;
using Reply = std::function<void(std::string)>;

// The Put header of a call frame and the caller it runs as, or why it may not run.
struct ParsedCall {
  v1::PutHeader header;
  Caller caller;
};

absl::StatusOr<ParsedCall> Parse(const ServiceContext& ctx, const std::string& session,
                                 std::string_view frame) {
  ASSIGN_OR_RETURN(shm::FrameHeader h, shm::DecodeFrameHeader(frame));
  if (h.deadline_unix_ms != 0 && shm::NowUnixMs() > h.deadline_unix_ms) {
    return absl::DeadlineExceededError("the call's deadline passed before the server read it");
  }
  if (h.op != static_cast<uint32_t>(shm::FrameOp::kPut)) {
    return absl::InvalidArgumentError(
        absl::StrCat("frame: op ", h.op, " is not served over UCX (only Put is)"));
  }
  frame.remove_prefix(sizeof(h));
  v1::PutRequest req;
  const bool parsed = req.ParseFromArray(frame.data(), static_cast<int>(frame.size()));
  ParsedCall call;
  ASSIGN_OR_RETURN(call.header, PutHeaderOf(parsed, &req));
  std::optional<std::string> bound =
      session.empty() ? std::nullopt : ctx.ucx->BoundIdentity(session);
  if (!bound.has_value() || call.header.ucx_session() != session) {
    return protocol::WithErrorDetail(
        absl::FailedPreconditionError(
            "header.ucx_session is not the session of the UCX endpoint that sent the frame "
            "(closed, or the server restarted): reconnect, or send the call over gRPC"),
        v1::UCX_SESSION_UNKNOWN, "header.ucx_session");
  }
  if (!ctx.auth.enabled()) return call;  // the anonymous operator, as over gRPC
  if (bound->empty()) {
    // A frame has no credentials of its own, so it binds nothing.
    return absl::UnauthenticatedError(
        "header.ucx_session names a UCX session no authenticated gRPC call has used yet: its "
        "first Put or Get goes over gRPC, with the token or certificate");
  }
  call.caller = CallerFromIdentity(*bound);
  return call;
}

}  // namespace

void ServeUcxCall(ServiceContext* ctx, std::string session, std::string frame, Reply reply) {
  const int64_t start = NowMicros();
  // Answers the call (once) and counts it in the Put metrics.
  auto answer = [ctx, start, id = shm::RequestIdOf(frame), max = ctx->ucx->max_call_frame(),
                 reply = std::move(reply)](const absl::Status& s, std::string_view body) {
    ctx->metrics.Record(Op::kPut, NowMicros() - start, s.ok());
    const grpc::Status g = protocol::ToGrpcStatus(s);
    reply(shm::EncodeReply(id, g.error_code(), g.error_message(), g.error_details(), body, max));
  };
  absl::StatusOr<ParsedCall> call = Parse(*ctx, session, frame);
  if (!call.ok()) return answer(call.status(), "");
  const std::string tenant = call->caller.tenant;
  auto task = std::make_shared<std::pair<ParsedCall, decltype(answer)>>(*std::move(call),
                                                                        std::move(answer));
  if (ctx->executor->TrySchedule(tenant, [ctx, task] {
        storage::TieredStore* store = nullptr;
        if (absl::Status s = AdmitToStore(ctx, &store); !s.ok()) {
          ctx->in_flight.fetch_sub(1);
          return task->second(s, "");
        }
        ParsedCall& c = task->first;
        PutAsync(ctx, store, c.caller, std::move(c.header),
                 [ctx, task](absl::Status s, v1::PutResponse response) {
                   ctx->in_flight.fetch_sub(1);
                   task->second(s, s.ok() ? response.SerializeAsString() : std::string());
                 });
      })) {
    return;
  }
  task->second(absl::ResourceExhaustedError(BusyStatus().error_message()), "");
}

}  // namespace kvtier::service
