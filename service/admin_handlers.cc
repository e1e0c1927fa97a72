// The kvtier.v1.KvCacheAdmin handlers (KvCacheAdminImpl), all through RunUnary
// (service/admission.h).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/status_macros.h"
#include "service/admission.h"
#include "service/config.h"
#include "service/kv_cache_service.h"
#include "service/request_checks.h"
#include "service/ucx_put.h"

namespace kvtier::service {
namespace {

// This node's stats with its identity fields, limited to what `caller` may see.
v1::StatsResponse NodeStats(const ServiceContext& ctx, storage::TieredStore& store,
                            const std::string& only_ns, const Caller& caller) {
  v1::StatsResponse st;
  FillStats(store.Stats(), only_ns, &st);
  RemoveOtherTenants(caller, &st);
  st.set_node_id(ctx.node_id);
  st.set_hash_scheme(HashSchemeVersion());
  st.set_uptime_ms((NowMicros() - ctx.open_micros) / 1000);
  return st;
}

// ClusterStatus of a single node: itself, healthy, owning everything.
void SingleNodeStatus(const ServiceContext& ctx, v1::StatsResponse st,
                      v1::ClusterStatusResponse* response) {
  response->set_node_id(ctx.node_id);
  response->set_replication_factor(ctx.replication_factor);
  v1::PeerStatus* self = response->add_peers();
  self->set_node_id(ctx.node_id);
  self->set_address(ctx.node_id);
  self->set_healthy(true);
  self->set_ownership_share(1.0);
  self->set_last_seen_ms_ago(0);
  *self->mutable_stats() = std::move(st);
}

UnaryWork StatsWork(ServiceContext* ctx, const v1::StatsRequest* request,
                    v1::StatsResponse* response) {
  return Synchronous([ctx, request, response](storage::TieredStore& store,
                                              const Caller& caller) -> absl::Status {
    if (!request->namespace_().empty()) {
      RETURN_IF_ERROR(FindNamespace(*ctx, store, request->namespace_(), caller).status());
    }
    *response = NodeStats(*ctx, store, request->namespace_(), caller);
    FillShmOffer(*ctx, response->mutable_shared_memory());
    if (ctx->shm != nullptr) {
      response->set_shm_sessions(static_cast<uint32_t>(ctx->shm->session_count()));
    }
    FillUcxStats(*ctx, response);
    ctx->metrics.AppendLatencies(response);
    return absl::OkStatus();
  });
}

UnaryWork ListNamespacesWork(ServiceContext* /*ctx*/, const v1::ListNamespacesRequest* /*request*/,
                             v1::ListNamespacesResponse* response) {
  return Synchronous([response](storage::TieredStore& store, const Caller& caller) {
    for (const auto& ns : store.ListNamespaces()) {
      if (caller.MayUse(ns.tenant)) *response->add_namespaces() = NamespaceToProto(ns);
    }
    return absl::OkStatus();
  });
}

UnaryWork EvictWork(ServiceContext* ctx, const v1::EvictRequest* request,
                    v1::EvictResponse* response) {
  return KeyedCount(ctx, request, response, true,
                    [request](storage::TieredStore& store, const std::string& ns,
                              const std::vector<std::string>& keys) {
                      return store.Evict(ns, keys, request->drop());
                    });
}

// The store-clock time (milliseconds) at which a Flush stops writing: half of the call's
// remaining time (and 10 ms more) is left for the final sync of what it wrote, the
// executor queue and the answer; request.max_ms bounds it further. No deadline and no
// max_ms: never.
int64_t FlushStopMillis(const grpc::CallbackServerContext& context,
                        const v1::FlushRequest& request) {
  const int64_t now_ms = common::RealClock()->NowMillis();
  int64_t budget_ms = std::numeric_limits<int64_t>::max() / 2;
  const auto remaining = context.deadline() - std::chrono::system_clock::now();
  if (remaining < std::chrono::hours(24 * 365)) {
    const int64_t left_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(remaining).count();
    budget_ms = std::max<int64_t>(0, left_ms / 2 - 10);
  }
  if (request.max_ms() != 0) budget_ms = std::min<int64_t>(budget_ms, request.max_ms());
  return now_ms + budget_ms;
}

UnaryWork FlushWork(ServiceContext* ctx, const v1::FlushRequest* request,
                    v1::FlushResponse* response, int64_t stop_ms) {
  return Synchronous([ctx, request, response, stop_ms](storage::TieredStore& store,
                                                       const Caller& caller) -> absl::Status {
    if (request->namespace_().empty()) {
      if (!caller.is_operator) {
        return absl::PermissionDeniedError(
            "namespace: flushing every namespace needs an operator token");
      }
    } else {
      RETURN_IF_ERROR(FindNamespace(*ctx, store, request->namespace_(), caller).status());
    }
    ASSIGN_OR_RETURN(storage::FlushProgress progress, store.Flush(request->namespace_(), stop_ms));
    response->set_flushed_blocks(progress.flushed_blocks);
    response->set_remaining_blocks(progress.remaining_blocks);
    response->set_remaining_bytes(progress.remaining_bytes);
    response->set_done(progress.done);
    return absl::OkStatus();
  });
}

UnaryWork DropNamespaceWork(ServiceContext* ctx, const v1::DropNamespaceRequest* request,
                            v1::DropNamespaceResponse* response) {
  return Synchronous([ctx, request, response](storage::TieredStore& store,
                                              const Caller& caller) -> absl::Status {
    ASSIGN_OR_RETURN(storage::NamespaceOptions ns,
                     FindNamespace(*ctx, store, request->namespace_(), caller));
    absl::StatusOr<uint64_t> removed = store.DropNamespace(ns.name, request->force());
    // Forgotten even when a cold delete failed: the store no longer knows the name.
    if (removed.ok() || !absl::IsFailedPrecondition(removed.status())) {
      ctx->namespaces.Erase(ns.name);
    }
    RETURN_IF_ERROR(removed.status());
    response->set_blocks(*removed);
    return absl::OkStatus();
  });
}

UnaryWork RecoverWork(ServiceContext* /*ctx*/, const v1::RecoverRequest* request,
                      v1::RecoverResponse* response) {
  return Synchronous([request, response](storage::TieredStore& store,
                                         const Caller& caller) -> absl::Status {
    if (!caller.is_operator) {
      return absl::PermissionDeniedError("Recover needs an operator token");
    }
    storage::ColdRecoverMode mode;
    switch (request->mode()) {
      case v1::RecoverRequest::VERIFY: mode = storage::ColdRecoverMode::kVerify; break;
      case v1::RecoverRequest::REBUILD: mode = storage::ColdRecoverMode::kRebuild; break;
      case v1::RecoverRequest::MODE_UNSPECIFIED:
        return absl::InvalidArgumentError("mode: set VERIFY or REBUILD");
      default:
        return absl::InvalidArgumentError(
            absl::StrCat("mode: unknown value ", static_cast<int>(request->mode()),
                         " (VERIFY = 1, REBUILD = 2)"));
    }
    ASSIGN_OR_RETURN(storage::ColdRecoverReport r, store.RecoverCold(mode));
    response->set_rebuilt(mode == storage::ColdRecoverMode::kRebuild);
    response->set_scan_bytes(r.scan_bytes);
    response->set_seconds(r.seconds);
    response->set_extents_scanned(r.extents_scanned);
    response->set_records_verified(r.records_verified);
    response->set_records_recreated(r.records_recreated);
    response->set_damaged_extents(r.damaged_extents);
    response->set_damaged_records(r.damaged_records);
    response->set_stale_copies(r.stale_copies);
    response->set_orphan_blocks(r.orphan_blocks);
    response->set_deleted_extents(r.deleted_extents);
    response->set_namespaces_recreated(r.namespaces_recreated);
    return absl::OkStatus();
  });
}

UnaryWork ClusterStatusWork(ServiceContext* ctx, const v1::ClusterStatusRequest* /*request*/,
                            v1::ClusterStatusResponse* response) {
  return [ctx, response](storage::TieredStore& store, const Caller& caller, FinishFn finish) {
    v1::StatsResponse st = NodeStats(*ctx, store, "", caller);
    if (ctx->fanout == nullptr) {
      SingleNodeStatus(*ctx, std::move(st), response);
      return finish(absl::OkStatus());
    }
    // Membership, health, ownership shares and every peer's Stats.
    ctx->fanout->ClusterStatusAsync(
        std::move(st), [response, finish, caller](v1::ClusterStatusResponse r) {
          // Peers answered the operator peer token: keep this caller's tenant only.
          for (v1::PeerStatus& p : *r.mutable_peers()) {
            RemoveOtherTenants(caller, p.mutable_stats());
          }
          *response = std::move(r);
          finish(absl::OkStatus());
        });
  };
}

}  // namespace

grpc::ServerUnaryReactor* KvCacheAdminImpl::Stats(grpc::CallbackServerContext* context,
                                                  const grpc::ByteBuffer* request,
                                                  grpc::ByteBuffer* response) {
  return RunParsed(ctx_, context, Op::kStats, "Stats", request, response, &StatsWork);
}

grpc::ServerUnaryReactor* KvCacheAdminImpl::ListNamespaces(grpc::CallbackServerContext* context,
                                                           const grpc::ByteBuffer* request,
                                                           grpc::ByteBuffer* response) {
  return RunParsed(ctx_, context, Op::kStats, "ListNamespaces", request, response,
                   &ListNamespacesWork);
}

grpc::ServerUnaryReactor* KvCacheAdminImpl::Evict(grpc::CallbackServerContext* context,
                                                  const grpc::ByteBuffer* request,
                                                  grpc::ByteBuffer* response) {
  return RunParsed(ctx_, context, Op::kEvict, "Evict", request, response, &EvictWork);
}

grpc::ServerUnaryReactor* KvCacheAdminImpl::Flush(grpc::CallbackServerContext* context,
                                                  const grpc::ByteBuffer* request,
                                                  grpc::ByteBuffer* response) {
  return RunParsedWith<v1::FlushRequest, v1::FlushResponse>(
      ctx_, context, Op::kFlush, "Flush", request, response,
      [ctx = ctx_, context](const v1::FlushRequest* req, v1::FlushResponse* resp) {
        return FlushWork(ctx, req, resp, FlushStopMillis(*context, *req));
      });
}

grpc::ServerUnaryReactor* KvCacheAdminImpl::ClusterStatus(grpc::CallbackServerContext* context,
                                                          const grpc::ByteBuffer* request,
                                                          grpc::ByteBuffer* response) {
  return RunParsed(ctx_, context, Op::kStats, "ClusterStatus", request, response,
                   &ClusterStatusWork);
}

grpc::ServerUnaryReactor* KvCacheAdminImpl::DropNamespace(grpc::CallbackServerContext* context,
                                                          const grpc::ByteBuffer* request,
                                                          grpc::ByteBuffer* response) {
  // Timed with Evict (a namespace-wide admin removal).
  return RunParsed(ctx_, context, Op::kEvict, "DropNamespace", request, response,
                   &DropNamespaceWork);
}

grpc::ServerUnaryReactor* KvCacheAdminImpl::Recover(grpc::CallbackServerContext* context,
                                                    const grpc::ByteBuffer* request,
                                                    grpc::ByteBuffer* response) {
  // Timed with Flush (an admin call that reads or writes the cold tier at length).
  return RunParsed(ctx_, context, Op::kFlush, "Recover", request, response, &RecoverWork);
}

}  // namespace kvtier::service
