// Admission of a call to the kvtier.v1 services and the one helper every unary handler
// runs through (docs/design.md §5 Service, admission and limits).
//
// Admit counts the call in ServiceContext::in_flight, refuses it while draining or before
// the store is open (UNAVAILABLE) and identifies the caller (UNAUTHENTICATED). RunUnary
// then queues the handler's work on the bounded executor, keyed by the caller's tenant so
// tenants take turns and none takes more than its share of the queue while others wait
// (common/thread_pool.h): a full queue (or share) answers RESOURCE_EXHAUSTED "server busy"
// instead of blocking the reaction.
#ifndef KVTIER_SERVICE_ADMISSION_H_
#define KVTIER_SERVICE_ADMISSION_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "google/protobuf/message.h"
#include "grpcpp/grpcpp.h"
#include "service/auth.h"
#include "service/kv_cache_service.h"
#include "service/metrics.h"
#include "service/request_checks.h"
#include "storage/tiered_store.h"

namespace kvtier::service {

// Microseconds on the real clock (call latencies).
int64_t NowMicros();

// RESOURCE_EXHAUSTED "server busy: executor queue is full".
grpc::Status BusyStatus();

// Counts a call in ctx->in_flight (the caller decrements it when done, also when this
// refuses it), sets *store and returns OK; or returns UNAVAILABLE while draining or before
// the store is open. The part of Admit that does not depend on gRPC (the shared-memory
// socket's calls use it alone: service/shm_calls.h).
absl::Status AdmitToStore(ServiceContext* ctx, storage::TieredStore** store);

// Counts the call in ctx->in_flight (the caller decrements it in OnDone, also when the
// call is refused), sets *store and *caller and returns OK; or returns the status to
// refuse the call with: UNAVAILABLE while draining or before the store is open,
// UNAUTHENTICATED for a missing or unknown token.
grpc::Status Admit(ServiceContext* ctx, grpc::CallbackServerContext* context,
                   storage::TieredStore** store, Caller* caller);

// Finishes a unary call with `status`: call exactly once, from any thread, never blocking.
using FinishFn = std::function<void(absl::Status)>;
// The work of a unary call, run on the executor once the call is admitted. It may finish
// at once or later (after peer calls).
using UnaryWork = std::function<void(storage::TieredStore& store, const Caller& caller,
                                     FinishFn finish)>;

// Where a unary call's work runs: on the bounded executor (work that may block: RocksDB,
// long loops), or inline on the gRPC reaction thread (work that only reads in-memory state
// and never blocks beyond a short mutex; saves the executor hand-off, about two thread
// wake-ups per call).
enum class Dispatch { kExecutor, kInline };

// Admits the call, runs `work` (on the executor, or inline), records `op`'s latency and
// outcome in ctx->metrics and finishes the call with the status work passes to finish.
// Returns the reactor to hand back to gRPC.
grpc::ServerUnaryReactor* RunUnary(ServiceContext* ctx, grpc::CallbackServerContext* context,
                                   Op op, UnaryWork work, Dispatch dispatch = Dispatch::kExecutor);

// Builds the work of a unary call from its parsed request and its response (owned by the
// call until it finishes). Req may be non-const: the work may then move fields (keys) out
// of the request instead of copying them.
template <typename Req, typename Resp>
using MakeWorkFn = UnaryWork (*)(ServiceContext* ctx, Req* request, Resp* response);

// Serializes `message` into `out`. INTERNAL when it cannot be serialized.
absl::Status SerializeResponse(const google::protobuf::Message& message, grpc::ByteBuffer* out);

// Refuses a call whose request bytes do not parse as the message `type_name`:
// INVALID_ARGUMENT "<method>: request bytes do not parse as <type_name>", after admission
// (an unauthenticated caller still gets UNAUTHENTICATED).
grpc::ServerUnaryReactor* RefuseUnparsable(ServiceContext* ctx,
                                           grpc::CallbackServerContext* context, Op op,
                                           const char* method, std::string_view type_name);

// RunUnary for a raw (grpc::ByteBuffer) unary method: parses `raw_request` as Req, runs
// the UnaryWork that make_work(&request, &response) returns (any callable; it may capture
// the call's context, e.g. its deadline) and, once it finishes OK, serializes the
// response into `raw_response`. Request bytes that do not parse as Req are refused with
// INVALID_ARGUMENT "<method>: request bytes do not parse as kvtier.v1.<Req>" (after
// admission, so an unauthenticated caller still gets UNAUTHENTICATED).
template <typename Req, typename Resp, typename MakeWork>
grpc::ServerUnaryReactor* RunParsedWith(ServiceContext* ctx, grpc::CallbackServerContext* context,
                                        Op op, const char* method,
                                        const grpc::ByteBuffer* raw_request,
                                        grpc::ByteBuffer* raw_response, MakeWork make_work,
                                        Dispatch dispatch = Dispatch::kExecutor) {
  struct Messages {
    std::remove_const_t<Req> request;
    Resp response;
  };
  auto m = std::make_shared<Messages>();
  grpc::ByteBuffer copy(*raw_request);  // shares the slices
  if (!grpc::SerializationTraits<Req>::Deserialize(&copy, &m->request).ok()) {
    return RefuseUnparsable(ctx, context, op, method, m->request.GetTypeName());
  }
  UnaryWork inner = make_work(&m->request, &m->response);
  return RunUnary(ctx, context, op,
                  [m, inner = std::move(inner), raw_response](
                      storage::TieredStore& store, const Caller& caller, FinishFn finish) {
                    inner(store, caller, [m, raw_response, finish](absl::Status s) {
                      if (s.ok()) s = SerializeResponse(m->response, raw_response);
                      finish(s);
                    });
                  },
                  dispatch);
}

// RunParsedWith for a MakeWorkFn, called as make_work(ctx, &request, &response).
template <typename Req, typename Resp>
grpc::ServerUnaryReactor* RunParsed(ServiceContext* ctx, grpc::CallbackServerContext* context,
                                    Op op, const char* method,
                                    const grpc::ByteBuffer* raw_request,
                                    grpc::ByteBuffer* raw_response,
                                    MakeWorkFn<Req, Resp> make_work,
                                    Dispatch dispatch = Dispatch::kExecutor) {
  return RunParsedWith<Req, Resp>(
      ctx, context, op, method, raw_request, raw_response,
      [ctx, make_work](Req* request, Resp* response) {
        return make_work(ctx, request, response);
      },
      dispatch);
}

// Adapts synchronous work `fn(store, caller) -> absl::Status` to UnaryWork.
template <typename Fn>
UnaryWork Synchronous(Fn fn) {
  return [fn = std::move(fn)](storage::TieredStore& store, const Caller& caller,
                              FinishFn finish) { finish(fn(store, caller)); };
}

// The work of the calls shaped (namespace, keys) -> a block count (Pin, Unpin, Delete,
// Evict): checks the namespace and the keys, then sets response->blocks to
// `op_on_store(store, ns_name, keys)` (a StatusOr<uint64_t>).
template <typename Request, typename Response, typename StoreOp>
UnaryWork KeyedCount(ServiceContext* ctx, const Request* request, Response* response,
                     bool allow_empty_keys, StoreOp op_on_store) {
  return Synchronous([=](storage::TieredStore& store, const Caller& caller) -> absl::Status {
    ASSIGN_OR_RETURN(storage::NamespaceOptions ns,
                     FindNamespace(*ctx, store, request->namespace_(), caller));
    ASSIGN_OR_RETURN(std::vector<std::string> keys,
                     CheckKeys(request->keys(), ctx->limits, allow_empty_keys));
    ASSIGN_OR_RETURN(uint64_t n, op_on_store(store, ns.name, keys));
    response->set_blocks(n);
    return absl::OkStatus();
  });
}

}  // namespace kvtier::service

#endif  // KVTIER_SERVICE_ADMISSION_H_
