#include "service/admission.h"

#include <string>
#include <utility>

#include "common/clock.h"
#include "common/strings.h"
#include "protocol/error_detail.h"

namespace kvtier::service {
namespace {

// A unary reactor that keeps ServiceContext::in_flight accurate.
class UnaryReactor final : public grpc::ServerUnaryReactor {
 public:
  explicit UnaryReactor(ServiceContext* ctx) : ctx_(ctx) {}
  void OnDone() override {
    ctx_->in_flight.fetch_sub(1);
    delete this;
  }

 private:
  ServiceContext* const ctx_;
};

}  // namespace

int64_t NowMicros() { return common::RealClock()->NowMicros(); }

grpc::Status BusyStatus() {
  return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "server busy: executor queue is full");
}

absl::Status AdmitToStore(ServiceContext* ctx, storage::TieredStore** store) {
  ctx->in_flight.fetch_add(1);
  if (ctx->draining.load()) return absl::UnavailableError("server is shutting down");
  *store = ctx->store.load(std::memory_order_acquire);
  if (*store == nullptr) {
    return protocol::WithErrorDetail(
        absl::UnavailableError("kvtierd is loading its index from the cold tier (health "
                               "NOT_SERVING); retry once it reports SERVING"),
        v1::SERVER_LOADING, "");
  }
  return absl::OkStatus();
}

grpc::Status Admit(ServiceContext* ctx, grpc::CallbackServerContext* context,
                   storage::TieredStore** store, Caller* caller) {
  if (absl::Status s = AdmitToStore(ctx, store); !s.ok()) return protocol::ToGrpcStatus(s);
  absl::StatusOr<Caller> who =
      ctx->auth.Authenticate(context->client_metadata(),
                             ctx->auth.enabled() ? context->auth_context().get() : nullptr);
  if (!who.ok()) return protocol::ToGrpcStatus(who.status());
  *caller = *std::move(who);
  return grpc::Status::OK;
}

absl::Status SerializeResponse(const google::protobuf::Message& message, grpc::ByteBuffer* out) {
  bool own = false;
  if (!grpc::SerializationTraits<google::protobuf::Message>::Serialize(message, out, &own).ok()) {
    return absl::InternalError(absl::StrCat("cannot serialize ", message.GetTypeName()));
  }
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* RefuseUnparsable(ServiceContext* ctx,
                                           grpc::CallbackServerContext* context, Op op,
                                           const char* method, std::string_view type_name) {
  absl::Status refusal = absl::InvalidArgumentError(
      absl::StrCat(method, ": request bytes do not parse as ", Sv(type_name)));
  return RunUnary(
      ctx, context, op,
      [refusal](storage::TieredStore&, const Caller&, FinishFn finish) { finish(refusal); });
}

grpc::ServerUnaryReactor* RunUnary(ServiceContext* ctx, grpc::CallbackServerContext* context,
                                   Op op, UnaryWork work, Dispatch dispatch) {
  grpc::ServerUnaryReactor* reactor = new UnaryReactor(ctx);
  const int64_t start = NowMicros();
  storage::TieredStore* store = nullptr;
  Caller caller;
  if (grpc::Status admit = Admit(ctx, context, &store, &caller); !admit.ok()) {
    reactor->Finish(admit);
    return reactor;
  }
  FinishFn finish = [ctx, reactor, op, start](absl::Status s) {
    ctx->metrics.Record(op, NowMicros() - start, s.ok());
    reactor->Finish(protocol::ToGrpcStatus(s));
  };
  if (dispatch == Dispatch::kInline) {
    work(*store, caller, std::move(finish));
    return reactor;
  }
  // Tenants take turns on the executor (common/thread_pool.h fairness keys).
  const std::string tenant = caller.tenant;
  const bool queued = ctx->executor->TrySchedule(
      tenant, [store, caller = std::move(caller), work = std::move(work),
               finish = std::move(finish)]() mutable { work(*store, caller, std::move(finish)); });
  if (!queued) {
    ctx->metrics.Record(op, NowMicros() - start, false);
    reactor->Finish(BusyStatus());
  }
  return reactor;
}

}  // namespace kvtier::service
