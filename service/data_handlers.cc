// The kvtier.v1.KvCache handlers (KvCacheServiceImpl): unary calls through RunUnary
// (service/admission.h); Put and Get start their reactors.
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "service/admission.h"
#include "service/compact.h"
#include "service/config.h"
#include "service/get_reactor.h"
#include "service/kv_cache_service.h"
#include "service/put_reactor.h"
#include "service/request_checks.h"

namespace kvtier::service {
namespace {

// RegisterNamespace's work once admitted: checks the hash scheme, the spec and the
// caller's tenant, then registers (or checks) the namespace.
absl::Status RegisterNamespaceWork(ServiceContext* ctx, const v1::RegisterNamespaceRequest& request,
                                   v1::RegisterNamespaceResponse* response,
                                   storage::TieredStore& store, const Caller& caller) {
  if (!request.hash_scheme().empty() && request.hash_scheme() != HashSchemeVersion()) {
    return absl::FailedPreconditionError(absl::StrCat("hash_scheme \"", request.hash_scheme(),
                                                      "\" differs from the server's \"",
                                                      HashSchemeVersion(), "\""));
  }
  if (!request.has_spec()) return absl::InvalidArgumentError("spec is missing");
  ASSIGN_OR_RETURN(storage::NamespaceOptions ns, NamespaceFromProto(request.spec(), "spec"));
  if (!caller.is_operator) {
    // A tenant registers for itself: an empty spec.tenant means its own.
    if (!request.spec().tenant().empty() && request.spec().tenant() != caller.tenant) {
      return absl::PermissionDeniedError(absl::StrCat("spec.tenant \"", request.spec().tenant(),
                                                      "\" is not the caller's tenant \"",
                                                      caller.tenant, "\""));
    }
    ns.tenant = caller.tenant;
  }
  auto prior = store.GetNamespace(ns.name);
  const bool existed = prior.ok();
  if (existed) RETURN_IF_ERROR(CheckNamespaceAccess(caller, ns.name, prior->tenant));
  ASSIGN_OR_RETURN(storage::NamespaceOptions stored, store.RegisterNamespace(ns));
  ctx->namespaces.Insert(stored);
  *response->mutable_spec() = NamespaceToProto(stored);
  response->set_created(!existed);
  response->set_hash_scheme(HashSchemeVersion());
  response->set_node_id(ctx->node_id);
  FillShmOffer(*ctx, response->mutable_shared_memory());
  return absl::OkStatus();
}

// Lookup's work once admitted: the local answer, or (cluster mode, unless local_only)
// the local tiers merged with the owners' answers for the keys not held here.
void LookupWork(ServiceContext* ctx, const v1::LookupRequest* request,
                v1::LookupResponse* response, storage::TieredStore& store, const Caller& caller,
                FinishFn finish) {
  std::vector<std::string> keys;
  std::string ns_name;
  storage::LookupResult r;
  absl::Status s = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(storage::NamespaceOptions ns,
                     FindNamespace(*ctx, store, request->namespace_(), caller));
    ns_name = ns.name;
    ASSIGN_OR_RETURN(keys, CheckKeys(request->keys(), ctx->limits, false));
    ASSIGN_OR_RETURN(r, store.Lookup(ns.name, keys));
    return absl::OkStatus();
  }();
  if (!s.ok()) return finish(s);
  std::vector<v1::Tier> tiers;
  for (size_t i = 0; i < keys.size(); ++i) {
    tiers.push_back(TierToProto(i < r.tiers.size() ? r.tiers[i] : storage::Tier::kNone));
  }
  if (ctx->fanout != nullptr && !request->local_only()) {
    ctx->fanout->LookupAsync(ns_name, keys, tiers,
                             [response, finish](v1::LookupResponse merged) {
                               *response = std::move(merged);
                               finish(absl::OkStatus());
                             });
    return;
  }
  response->set_prefix_blocks(r.prefix_blocks);
  for (const v1::Tier t : tiers) {
    v1::BlockLocation* loc = response->add_blocks();
    loc->set_tier(t);
    if (t != v1::TIER_NONE) loc->set_owner(ctx->node_id);
  }
  finish(absl::OkStatus());
}

}  // namespace

grpc::ServerUnaryReactor* KvCacheServiceImpl::RegisterNamespace(
    grpc::CallbackServerContext* context, const v1::RegisterNamespaceRequest* request,
    v1::RegisterNamespaceResponse* response) {
  ServiceContext* ctx = ctx_;
  return RunUnary(ctx_, context, Op::kRegisterNamespace,
                  Synchronous([ctx, request, response](storage::TieredStore& store,
                                                       const Caller& caller) {
                    return RegisterNamespaceWork(ctx, *request, response, store, caller);
                  }));
}

grpc::ServerReadReactor<grpc::ByteBuffer>* KvCacheServiceImpl::Put(
    grpc::CallbackServerContext* context, grpc::ByteBuffer* response) {
  return StartPut(ctx_, context, response);
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* KvCacheServiceImpl::Get(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  return StartGet(ctx_, context, request);
}

grpc::ServerUnaryReactor* KvCacheServiceImpl::Lookup(grpc::CallbackServerContext* context,
                                                     const v1::LookupRequest* request,
                                                     v1::LookupResponse* response) {
  ServiceContext* ctx = ctx_;
  return RunUnary(ctx_, context, Op::kLookup,
                  [ctx, request, response](storage::TieredStore& store, const Caller& caller,
                                           FinishFn finish) {
                    LookupWork(ctx, request, response, store, caller, std::move(finish));
                  });
}

grpc::ServerUnaryReactor* KvCacheServiceImpl::Pin(grpc::CallbackServerContext* context,
                                                  const v1::PinRequest* request,
                                                  v1::PinResponse* response) {
  return RunUnary(ctx_, context, Op::kPin,
                  KeyedCount(ctx_, request, response, false,
                             [request](storage::TieredStore& store, const std::string& ns,
                                       const std::vector<std::string>& keys) {
                               return store.Pin(ns, keys, request->ttl_ms());
                             }));
}

grpc::ServerUnaryReactor* KvCacheServiceImpl::Unpin(grpc::CallbackServerContext* context,
                                                    const v1::UnpinRequest* request,
                                                    v1::UnpinResponse* response) {
  return RunUnary(ctx_, context, Op::kUnpin,
                  KeyedCount(ctx_, request, response, false,
                             [](storage::TieredStore& store, const std::string& ns,
                                const std::vector<std::string>& keys) {
                               return store.Unpin(ns, keys);
                             }));
}

grpc::ServerUnaryReactor* KvCacheServiceImpl::ReportScores(grpc::CallbackServerContext* context,
                                                           const v1::ReportScoresRequest* request,
                                                           v1::ReportScoresResponse* /*response*/) {
  ServiceContext* ctx = ctx_;
  return RunUnary(
      ctx_, context, Op::kReportScores,
      Synchronous([ctx, request](storage::TieredStore& store, const Caller& caller) -> absl::Status {
        ASSIGN_OR_RETURN(storage::NamespaceOptions ns,
                         FindNamespace(*ctx, store, request->namespace_(), caller));
        ASSIGN_OR_RETURN(std::vector<std::string> keys,
                         CheckKeys(request->keys(), ctx->limits, false));
        if (request->scores_size() != request->keys_size()) {
          return absl::InvalidArgumentError(absl::StrCat("scores has ", request->scores_size(),
                                                         " values but keys has ",
                                                         request->keys_size()));
        }
        std::vector<float> scores(request->scores().begin(), request->scores().end());
        return store.ReportScores(ns.name, keys, scores);
      }));
}

grpc::ServerUnaryReactor* KvCacheServiceImpl::Delete(grpc::CallbackServerContext* context,
                                                     const v1::DeleteRequest* request,
                                                     v1::DeleteResponse* response) {
  return RunUnary(ctx_, context, Op::kDelete,
                  KeyedCount(ctx_, request, response, false,
                             [](storage::TieredStore& store, const std::string& ns,
                                const std::vector<std::string>& keys) {
                               return store.Delete(ns, keys);
                             }));
}

grpc::ServerUnaryReactor* KvCacheServiceImpl::Compact(grpc::CallbackServerContext* context,
                                                      const v1::CompactRequest* request,
                                                      v1::CompactResponse* response) {
  ServiceContext* ctx = ctx_;
  return RunUnary(
      ctx_, context, Op::kCompact,
      Synchronous([ctx, request, response](storage::TieredStore& store,
                                           const Caller& caller) -> absl::Status {
        RETURN_IF_ERROR(FindNamespace(*ctx, store, request->namespace_(), caller).status());
        RETURN_IF_ERROR(CheckKeys(request->keys(), ctx->limits, false).status());
        ASSIGN_OR_RETURN(*response, RunCompact(store, *request));
        return absl::OkStatus();
      }));
}

}  // namespace kvtier::service
