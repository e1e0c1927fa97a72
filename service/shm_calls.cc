#include "service/shm_calls.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "protocol/error_detail.h"
#include "protocol/shm_wire.h"
#include "service/admission.h"
#include "service/get_reactor.h"
#include "service/payload_paths.h"
#include "service/put_reactor.h"
#include "service/request_checks.h"

namespace kvtier::service {
namespace {

namespace shm = ::kvtier::protocol::shm;

// The caller a frame naming `session` runs as, or why it may not run.
absl::StatusOr<Caller> SessionCaller(const ServiceContext& ctx, const std::string& session,
                                     std::string_view field) {
  if (!ctx.auth.enabled()) return Caller{};
  std::optional<std::string> bound = ctx.shm->BoundIdentity(session);
  if (bound.has_value()) return CallerFromIdentity(*bound);
  // An unknown session says so (the client then falls back as over gRPC). A frame has no
  // identity of its own, so it binds nothing (not FindShmSession, which binds).
  if (ctx.shm->Find(session) == nullptr) return ShmSessionUnknown(field);
  return absl::UnauthenticatedError(
      absl::StrCat(Sv(field),
                   " names a shared-memory session no authenticated gRPC call has used yet: "
                   "its first Put or Get goes over gRPC, with the token or certificate"));
}

absl::Status Serve(ServiceContext* ctx, storage::TieredStore* store, const shm::FrameHeader& h,
                   std::string_view body, std::string* response) {
  if (h.deadline_unix_ms != 0 && shm::NowUnixMs() > h.deadline_unix_ms) {
    return absl::DeadlineExceededError("the call's deadline passed before the server read it");
  }
  if (h.op == static_cast<uint32_t>(shm::FrameOp::kPut)) {
    v1::PutRequest req;
    const bool parsed = req.ParseFromArray(body.data(), static_cast<int>(body.size()));
    ASSIGN_OR_RETURN(v1::PutHeader header, PutHeaderOf(parsed, &req));
    ASSIGN_OR_RETURN(Caller caller, SessionCaller(*ctx, header.shm_session(), "header.shm_session"));
    v1::PutResponse resp;
    if (!NamesSharedRegion(header)) {
      return absl::InvalidArgumentError(
          "header.shm_session is empty: a Put over the shared-memory socket carries its "
          "payloads in the session's region");
    }
    RETURN_IF_ERROR(PutInline(ctx, store, caller, std::move(header), &resp));
    resp.AppendToString(response);
    return absl::OkStatus();
  }
  if (h.op == static_cast<uint32_t>(shm::FrameOp::kGet)) {
    v1::GetRequest req;
    if (!req.ParseFromArray(body.data(), static_cast<int>(body.size()))) {
      return absl::InvalidArgumentError("request: cannot parse GetRequest");
    }
    ASSIGN_OR_RETURN(Caller caller, SessionCaller(*ctx, req.shm_session(), "shm_session"));
    v1::GetResponse resp;
    if (!NamesSharedRegion(req)) {
      return absl::InvalidArgumentError(
          "shm_session is empty: a Get over the shared-memory socket returns its payloads in "
          "the session's region");
    }
    RETURN_IF_ERROR(GetInline(ctx, store, caller, std::move(req), &resp));
    resp.AppendToString(response);
    return absl::OkStatus();
  }
  if (h.op == static_cast<uint32_t>(shm::FrameOp::kLookup)) {
    ASSIGN_OR_RETURN(shm::SessionAndRequest call, shm::SplitSessionAndRequest(body));
    ASSIGN_OR_RETURN(Caller caller,
                     SessionCaller(*ctx, std::string(call.session), "frame.session"));
    return LookupFromSharedMemory(ctx, store, caller, call.request, response);
  }
  return absl::InvalidArgumentError(absl::StrCat("frame: op ", h.op, " is unknown"));
}

}  // namespace

std::string ServeShmFrame(ServiceContext* ctx, std::string_view frame) {
  const int64_t start = NowMicros();
  absl::StatusOr<shm::FrameHeader> h = shm::DecodeFrameHeader(frame);
  absl::Status s = h.status();
  std::string body;
  const uint32_t op_id = h.ok() ? h->op : 0;
  const Op op = op_id == static_cast<uint32_t>(shm::FrameOp::kGet)      ? Op::kGet
                : op_id == static_cast<uint32_t>(shm::FrameOp::kLookup) ? Op::kLookup
                                                                        : Op::kPut;
  if (s.ok()) {
    storage::TieredStore* store = nullptr;
    s = AdmitToStore(ctx, &store);
    if (s.ok()) s = Serve(ctx, store, *h, frame.substr(sizeof(shm::FrameHeader)), &body);
    ctx->in_flight.fetch_sub(1);
  }
  ctx->metrics.Record(op, NowMicros() - start, s.ok());
  const grpc::Status g = protocol::ToGrpcStatus(s);
  // A reply too long for a frame (the call ran: a Get's blocks are in the region) is
  // UNAVAILABLE, which the client redoes over gRPC.
  return shm::EncodeReply(shm::RequestIdOf(frame), g.error_code(), g.error_message(),
                          g.error_details(), body, shm::kMaxFrameBytes);
}

}  // namespace kvtier::service
