#include "service/events_service.h"

#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/mutex.h"
#include "service/auth.h"

namespace kvtier::service {
namespace {

grpc::Status ToGrpc(const absl::Status& s) {
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

// Who may see events of which namespace: the caller's tenant against each namespace's
// owner, memoized per call.
class Visibility {
 public:
  Visibility(storage::TieredStore* store, Caller caller) : store_(store), caller_(std::move(caller)) {}

  bool MayUse(const std::string& ns) {
    if (caller_.is_operator) return true;
    auto it = allowed_.find(ns);
    if (it == allowed_.end()) {
      auto spec = store_->GetNamespace(ns);
      it = allowed_.emplace(ns, spec.ok() && caller_.MayUse(spec->tenant)).first;
    }
    return it->second;
  }
  // Forgets what MayUse(ns) answered: `ns` was dropped, and a namespace registered under
  // the name later may belong to another tenant.
  void Forget(const std::string& ns) { allowed_.erase(ns); }

 private:
  storage::TieredStore* store_;
  const Caller caller_;
  absl::flat_hash_map<std::string, bool> allowed_;
};

// Checks the call: the log exists, the store is open, the caller is known and may use
// `ns` (when named). Returns the caller.
absl::StatusOr<Caller> Admit(ServiceContext* ctx, const events::EventLog* log,
                             grpc::CallbackServerContext* context, const std::string& ns) {
  if (log == nullptr) {
    return absl::FailedPreconditionError("KV events over gRPC are off (events.grpc)");
  }
  storage::TieredStore* store = ctx->store.load(std::memory_order_acquire);
  if (store == nullptr || ctx->draining.load()) {
    return absl::UnavailableError("the store is not open");
  }
  absl::StatusOr<Caller> caller = ctx->auth.Authenticate(context->client_metadata());
  if (!caller.ok()) return caller.status();
  if (!ns.empty()) {
    absl::StatusOr<storage::NamespaceOptions> spec = store->GetNamespace(ns);
    if (!spec.ok()) return spec.status();
    if (absl::Status s = CheckNamespaceAccess(*caller, ns, spec->tenant); !s.ok()) return s;
  }
  return caller;
}

// One WatchEvents call: a thread reads the log and writes batches; OnWriteDone and
// OnCancel wake it. The thread calls Finish last and never touches the reactor after;
// OnDone deletes the reactor once gRPC is done with it.
class WatchReactor final : public grpc::ServerWriteReactor<v1::WatchEventsResponse> {
 public:
  static constexpr size_t kMaxEventsPerMessage = 256;

  WatchReactor(const events::EventLog* log, Visibility visibility, v1::WatchEventsRequest request)
      : log_(log), visibility_(std::move(visibility)), request_(std::move(request)) {
    std::thread([this] { Run(); }).detach();
  }

  void OnWriteDone(bool ok) override {
    common::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) cancelled_ = true;
  }
  void OnCancel() override {
    common::MutexLock lock(&mu_);
    cancelled_ = true;
  }
  void OnDone() override { delete this; }

 private:
  void Run() {
    uint64_t next = request_.from_seq();
    grpc::Status status = grpc::Status::OK;
    while (true) {
      {
        common::MutexLock lock(&mu_);
        if (cancelled_) {
          status = grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
          break;
        }
      }
      absl::StatusOr<std::vector<events::EventLog::Entry>> got =
          log_->Read(next, kMaxEventsPerMessage, absl::Now() + absl::Milliseconds(100));
      if (!got.ok()) {
        status = ToGrpc(got.status());
        break;
      }
      if (got->empty()) continue;
      next = got->back().seq + 1;
      response_.Clear();
      for (const events::EventLog::Entry& e : *got) {
        if (!request_.namespace_().empty() && e.event.ns != request_.namespace_()) continue;
        const bool visible = visibility_.MayUse(e.event.ns);
        if (e.event.kind == events::EventKind::kAllCleared) visibility_.Forget(e.event.ns);
        if (!visible) continue;
        EventToProto(e, response_.add_events());
      }
      if (response_.events_size() == 0) continue;
      {
        common::MutexLock lock(&mu_);
        writing_ = true;
      }
      StartWrite(&response_);  // outside mu_: OnWriteDone may run on any thread
      common::MutexLock lock(&mu_);
      mu_.Await(common::Condition(
          +[](WatchReactor* r) ABSL_NO_THREAD_SAFETY_ANALYSIS { return !r->writing_; }, this));
    }
    Finish(status);
  }

  const events::EventLog* const log_;
  Visibility visibility_;
  const v1::WatchEventsRequest request_;
  v1::WatchEventsResponse response_;  // the write in flight
  common::Mutex mu_;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

void EventToProto(const events::EventLog::Entry& entry, v1::KvEvent* out) {
  const events::BlockEvent& e = entry.event;
  out->set_seq(entry.seq);
  switch (e.kind) {
    case events::EventKind::kStored:
      out->set_kind(v1::BLOCK_STORED);
      break;
    case events::EventKind::kRemoved:
      out->set_kind(v1::BLOCK_REMOVED);
      break;
    case events::EventKind::kAllCleared:
      out->set_kind(v1::ALL_BLOCKS_CLEARED);
      break;
  }
  out->set_namespace_(e.ns);
  out->set_model_id(e.model_id);
  if (e.kind == events::EventKind::kAllCleared) return;
  for (const std::string& k : e.keys) out->add_keys(k);
  out->set_tier(e.medium == events::Medium::kCpuPinned ? v1::TIER_HOT : v1::TIER_COLD);
  if (e.kind != events::EventKind::kStored) return;
  if (e.parent_key) out->set_parent_key(*e.parent_key);
  out->set_block_size(e.block_size);
  out->mutable_token_ids()->Add(e.token_ids.begin(), e.token_ids.end());
  if (e.lora_name) out->set_lora_name(*e.lora_name);
  for (const std::vector<std::string>& keys : e.extra_keys) {
    v1::KvEventExtraKeys* x = out->add_extra_keys();
    for (const std::string& k : keys) x->add_keys(k);
  }
}

grpc::ServerWriteReactor<v1::WatchEventsResponse>* KvEventsServiceImpl::WatchEvents(
    grpc::CallbackServerContext* context, const v1::WatchEventsRequest* request) {
  absl::StatusOr<Caller> caller = Admit(ctx_, log_, context, request->namespace_());
  if (!caller.ok()) {
    class Failed final : public grpc::ServerWriteReactor<v1::WatchEventsResponse> {
     public:
      explicit Failed(const absl::Status& s) { Finish(ToGrpc(s)); }
      void OnDone() override { delete this; }
    };
    return new Failed(caller.status());
  }
  return new WatchReactor(log_, Visibility(ctx_->store.load(std::memory_order_acquire), *caller),
                          *request);
}

grpc::ServerUnaryReactor* KvEventsServiceImpl::EventsSnapshot(
    grpc::CallbackServerContext* context, const v1::EventsSnapshotRequest* request,
    v1::EventsSnapshotResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<Caller> caller = Admit(ctx_, log_, context, request->namespace_());
  if (!caller.ok()) {
    reactor->Finish(ToGrpc(caller.status()));
    return reactor;
  }
  Visibility visibility(ctx_->store.load(std::memory_order_acquire), *caller);
  std::vector<events::EventLog::Resident> blocks;
  response->set_next_seq(log_->Snapshot(request->namespace_(), &blocks));
  for (const events::EventLog::Resident& b : blocks) {
    if (!visibility.MayUse(b.ns)) continue;
    v1::ResidentBlock* out = response->add_blocks();
    out->set_namespace_(b.ns);
    out->set_key(b.key);
    out->set_hot(b.hot);
    out->set_cold(b.cold);
  }
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace kvtier::service
