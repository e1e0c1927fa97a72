// Admission of a call to the kvtier.v1 services and the one helper every unary handler
// runs through (docs/design.md §5 Service, admission and limits).
//
// Admit counts the call in ServiceContext::in_flight, refuses it while draining or before
// the store is open (UNAVAILABLE) and identifies the caller (UNAUTHENTICATED). RunUnary
// then queues the handler's work on the bounded executor: a full queue answers
// RESOURCE_EXHAUSTED "server busy" instead of blocking the reaction.
#ifndef KVTIER_SERVICE_ADMISSION_H_
#define KVTIER_SERVICE_ADMISSION_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/status_macros.h"
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

// Admits the call, runs `work` on the executor, records `op`'s latency and outcome in
// ctx->metrics and finishes the call with the status work passes to finish. Returns the
// reactor to hand back to gRPC.
grpc::ServerUnaryReactor* RunUnary(ServiceContext* ctx, grpc::CallbackServerContext* context,
                                   Op op, UnaryWork work);

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
