// The kvtier.v1.KvCache handlers (KvCacheServiceImpl): unary calls through RunUnary
// (service/admission.h); Put and Get start their reactors.
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/mutex.h"
#include "common/status_macros.h"
#include "protocol/lookup_form.h"
#include "service/admission.h"
#include "service/compact.h"
#include "service/config.h"
#include "service/get_reactor.h"
#include "service/kv_cache_service.h"
#include "service/peer_fanout.h"
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
  FillUcxOffer(*ctx, response->mutable_ucx());
  return absl::OkStatus();
}

// Lookup's work once admitted: the local answer, or (cluster mode, unless local_only)
// the local tiers merged with the owners' answers for the keys not held here.
void LookupWork(ServiceContext* ctx, const protocol::LookupRequestView& request,
                v1::LookupResponse* response, storage::TieredStore& store, const Caller& caller,
                FinishFn finish) {
  std::string ns_name;
  storage::LookupResult r;
  absl::Status s = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(storage::NamespaceOptions ns,
                     FindNamespace(*ctx, store, std::string(request.ns), caller));
    ns_name = ns.name;
    RETURN_IF_ERROR(CheckKeyViews(request.keys, ctx->limits, false));
    if (request.lease_ms > ctx->limits.max_lease_ms) {
      return absl::InvalidArgumentError(absl::StrCat(
          "lease_ms ", request.lease_ms, " exceeds max_lease_ms ", ctx->limits.max_lease_ms));
    }
    storage::LeaseOptions lease;
    lease.lease_ms = request.lease_ms;
    // In a cluster this node may hold keys after another owner's: those are in the
    // cluster-wide prefix too (PeerFanout), so lease every resident key.
    lease.every_resident_key = ctx->fanout != nullptr;
    lease.prefetch = request.prefetch == v1::PREFETCH_ON ||
                     (request.prefetch != v1::PREFETCH_OFF && ctx->limits.prefetch_on_lookup);
    ASSIGN_OR_RETURN(r, store.Lookup(ns.name, request.keys, lease));
    return absl::OkStatus();
  }();
  if (!s.ok()) return finish(s);
  const std::span<const std::string_view> keys = request.keys;
  PeerFanout::LocalAnswer local;
  local.lease_limit = static_cast<v1::LeaseLimit>(r.lease_limit);
  local.tiers.reserve(keys.size());
  local.lease_ids.reserve(keys.size());
  uint32_t leased = 0;  // the lease holds the first r.leased_blocks resident keys
  for (size_t i = 0; i < keys.size(); ++i) {
    const storage::Tier t = i < r.tiers.size() ? r.tiers[i] : storage::Tier::kNone;
    local.tiers.push_back(TierToProto(t));
    const bool held = t != storage::Tier::kNone && leased < r.leased_blocks;
    leased += held ? 1 : 0;
    local.lease_ids.push_back(held ? r.lease_id : 0);
  }
  if (ctx->fanout != nullptr && !request.local_only) {
    ctx->fanout->LookupAsync(ns_name, keys, local, request.lease_ms, request.compact,
                             [response, finish](v1::LookupResponse merged) {
                               *response = std::move(merged);
                               finish(absl::OkStatus());
                             });
    return;
  }
  response->set_prefix_blocks(r.prefix_blocks);
  uint32_t leased_prefix = 0;
  while (leased_prefix < r.prefix_blocks && local.lease_ids[leased_prefix] != 0) ++leased_prefix;
  response->set_leased_blocks(leased_prefix);
  if (leased_prefix < r.prefix_blocks) response->set_lease_limit(local.lease_limit);
  if (request.compact) {
    protocol::EncodeCompactLookup(local.tiers, local.lease_ids, ctx->node_id, response);
    return finish(absl::OkStatus());
  }
  response->mutable_blocks()->Reserve(static_cast<int>(local.tiers.size()));
  for (size_t i = 0; i < local.tiers.size(); ++i) {
    v1::BlockLocation* loc = response->add_blocks();
    loc->set_tier(local.tiers[i]);
    if (local.tiers[i] != v1::TIER_NONE) loc->set_owner(ctx->node_id);
    loc->set_lease_id(local.lease_ids[i]);
  }
  finish(absl::OkStatus());
}

// One Lookup call: the request's bytes (the one slice they usually arrive in, else
// joined), read in place (protocol::ReadLookupRequest) or, when the reader declines,
// parsed with protobuf (then `view` views `parsed`), and the response. Shared by the
// call's work and its completion.
struct LookupState {
  grpc::Slice slice;
  std::string joined;
  v1::LookupRequest parsed;
  protocol::LookupRequestView view;
  v1::LookupResponse response;
};

// Reads a LookupRequest's bytes in place (protocol::ReadLookupRequest) or, when that
// declines, with protobuf into *parsed (then *view views it); false when they do not
// parse as a LookupRequest.
bool ReadLookupBytes(std::string_view bytes, v1::LookupRequest* parsed,
                     protocol::LookupRequestView* view) {
  if (protocol::ReadLookupRequest(bytes, view)) return true;
  if (!parsed->ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return false;
  *view = protocol::LookupRequestView{};
  view->ns = parsed->namespace_();
  view->keys.assign(parsed->keys().begin(), parsed->keys().end());
  view->local_only = parsed->local_only();
  view->lease_ms = parsed->lease_ms();
  view->compact = parsed->compact();
  view->prefetch = static_cast<uint32_t>(parsed->prefetch());
  return true;
}

// Reads the request into `call`; false when it does not parse as a LookupRequest.
bool ReadLookupState(const grpc::ByteBuffer& raw, LookupState* call) {
  std::string_view bytes;
  if (raw.TrySingleSlice(&call->slice).ok()) {
    bytes =
        std::string_view(reinterpret_cast<const char*>(call->slice.begin()), call->slice.size());
  } else {
    std::vector<grpc::Slice> slices;
    if (!raw.Dump(&slices).ok()) return false;
    for (const grpc::Slice& sl : slices) {
      call->joined.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
    }
    bytes = call->joined;
  }
  return ReadLookupBytes(bytes, &call->parsed, &call->view);
}

UnaryWork RegisterNamespaceWorkFor(ServiceContext* ctx, const v1::RegisterNamespaceRequest* request,
                                   v1::RegisterNamespaceResponse* response) {
  return Synchronous([ctx, request, response](storage::TieredStore& store, const Caller& caller) {
    return RegisterNamespaceWork(ctx, *request, response, store, caller);
  });
}

UnaryWork PinWork(ServiceContext* ctx, const v1::PinRequest* request, v1::PinResponse* response) {
  return KeyedCount(ctx, request, response, false,
                    [request](storage::TieredStore& store, const std::string& ns,
                              const std::vector<std::string>& keys) {
                      return store.Pin(ns, keys, request->ttl_ms());
                    });
}

UnaryWork UnpinWork(ServiceContext* ctx, const v1::UnpinRequest* request,
                    v1::UnpinResponse* response) {
  return KeyedCount(ctx, request, response, false,
                    [](storage::TieredStore& store, const std::string& ns,
                       const std::vector<std::string>& keys) { return store.Unpin(ns, keys); });
}

UnaryWork ReportScoresWork(ServiceContext* ctx, const v1::ReportScoresRequest* request,
                           v1::ReportScoresResponse* /*response*/) {
  return Synchronous([ctx, request](storage::TieredStore& store,
                                    const Caller& caller) -> absl::Status {
    ASSIGN_OR_RETURN(storage::NamespaceOptions ns,
                     FindNamespace(*ctx, store, request->namespace_(), caller));
    ASSIGN_OR_RETURN(std::vector<std::string> keys, CheckKeys(request->keys(), ctx->limits, false));
    if (request->scores_size() != request->keys_size()) {
      return absl::InvalidArgumentError(absl::StrCat("scores has ", request->scores_size(),
                                                     " values but keys has ",
                                                     request->keys_size()));
    }
    std::vector<float> scores(request->scores().begin(), request->scores().end());
    return store.ReportScores(ns.name, keys, scores);
  });
}

UnaryWork DeleteWork(ServiceContext* ctx, const v1::DeleteRequest* request,
                     v1::DeleteResponse* response) {
  return KeyedCount(ctx, request, response, false,
                    [](storage::TieredStore& store, const std::string& ns,
                       const std::vector<std::string>& keys) { return store.Delete(ns, keys); });
}

UnaryWork CompactWork(ServiceContext* ctx, const v1::CompactRequest* request,
                      v1::CompactResponse* response) {
  return Synchronous([ctx, request, response](storage::TieredStore& store,
                                              const Caller& caller) -> absl::Status {
    RETURN_IF_ERROR(FindNamespace(*ctx, store, request->namespace_(), caller).status());
    RETURN_IF_ERROR(CheckKeys(request->keys(), ctx->limits, false).status());
    ASSIGN_OR_RETURN(*response, RunCompact(store, *request));
    return absl::OkStatus();
  });
}

UnaryWork ReleaseLeaseWork(ServiceContext* ctx, const v1::ReleaseLeaseRequest* request,
                           v1::ReleaseLeaseResponse* response) {
  return Synchronous([ctx, request, response](storage::TieredStore& store,
                                              const Caller& caller) -> absl::Status {
    ASSIGN_OR_RETURN(storage::NamespaceOptions ns,
                     FindNamespace(*ctx, store, request->namespace_(), caller));
    ASSIGN_OR_RETURN(uint64_t blocks, store.ReleaseLease(ns.name, request->lease_id()));
    response->set_blocks(blocks);
    return absl::OkStatus();
  });
}

}  // namespace

absl::Status LookupFromSharedMemory(ServiceContext* ctx, storage::TieredStore* store,
                                    const Caller& caller, std::string_view request,
                                    std::string* response) {
  protocol::LookupRequestView view;
  v1::LookupRequest parsed;
  if (!ReadLookupBytes(request, &parsed, &view)) {
    return absl::InvalidArgumentError(
        "Lookup: request bytes do not parse as kvtier.v1.LookupRequest");
  }
  v1::LookupResponse resp;
  common::Notification done;
  absl::Status status;
  LookupWork(ctx, view, &resp, *store, caller, [&](absl::Status s) {
    status = std::move(s);
    done.Notify();
  });
  done.WaitForNotification();
  RETURN_IF_ERROR(status);
  resp.AppendToString(response);
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* KvCacheServiceImpl::RegisterNamespace(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return RunParsed(ctx_, context, Op::kRegisterNamespace, "RegisterNamespace", request, response,
                   &RegisterNamespaceWorkFor);
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
                                                     const grpc::ByteBuffer* request,
                                                     grpc::ByteBuffer* response) {
  auto call = std::make_shared<LookupState>();
  if (!ReadLookupState(*request, call.get())) {
    return RefuseUnparsable(ctx_, context, Op::kLookup, "Lookup", call->parsed.GetTypeName());
  }
  // Inline: Lookup reads the in-memory index only (peer calls are asynchronous).
  return RunUnary(
      ctx_, context, Op::kLookup,
      [ctx = ctx_, call, response](storage::TieredStore& store, const Caller& caller,
                                   FinishFn finish) {
        LookupWork(ctx, call->view, &call->response, store, caller,
                   [call, response, finish](absl::Status s) {
                     if (s.ok()) s = SerializeResponse(call->response, response);
                     finish(s);
                   });
      },
      Dispatch::kInline);
}

grpc::ServerUnaryReactor* KvCacheServiceImpl::Pin(grpc::CallbackServerContext* context,
                                                  const grpc::ByteBuffer* request,
                                                  grpc::ByteBuffer* response) {
  return RunParsed(ctx_, context, Op::kPin, "Pin", request, response, &PinWork);
}

grpc::ServerUnaryReactor* KvCacheServiceImpl::Unpin(grpc::CallbackServerContext* context,
                                                    const grpc::ByteBuffer* request,
                                                    grpc::ByteBuffer* response) {
  return RunParsed(ctx_, context, Op::kUnpin, "Unpin", request, response, &UnpinWork);
}

grpc::ServerUnaryReactor* KvCacheServiceImpl::ReportScores(grpc::CallbackServerContext* context,
                                                           const grpc::ByteBuffer* request,
                                                           grpc::ByteBuffer* response) {
  return RunParsed(ctx_, context, Op::kReportScores, "ReportScores", request, response,
                   &ReportScoresWork);
}

grpc::ServerUnaryReactor* KvCacheServiceImpl::Delete(grpc::CallbackServerContext* context,
                                                     const grpc::ByteBuffer* request,
                                                     grpc::ByteBuffer* response) {
  return RunParsed(ctx_, context, Op::kDelete, "Delete", request, response, &DeleteWork);
}

grpc::ServerUnaryReactor* KvCacheServiceImpl::Compact(grpc::CallbackServerContext* context,
                                                      const grpc::ByteBuffer* request,
                                                      grpc::ByteBuffer* response) {
  return RunParsed(ctx_, context, Op::kCompact, "Compact", request, response, &CompactWork);
}

grpc::ServerUnaryReactor* KvCacheServiceImpl::ReleaseLease(grpc::CallbackServerContext* context,
                                                           const grpc::ByteBuffer* request,
                                                           grpc::ByteBuffer* response) {
  return RunParsed(ctx_, context, Op::kReleaseLease, "ReleaseLease", request, response,
                   &ReleaseLeaseWork);
}

}  // namespace kvtier::service
