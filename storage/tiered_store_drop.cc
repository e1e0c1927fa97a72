// TieredStoreImpl::DropNamespace (TieredStore::DropNamespace): the namespace leaves
// ns_by_name_ and is marked dropped under mu_ (new calls get NOT_FOUND, Puts under way
// store nothing), a pass over every stripe waits out the Puts that checked before, then
// every block is deleted and finally the spec.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/mutex.h"
#include "common/status_macros.h"
#include "storage/tiered_store_impl.h"

namespace kvtier::storage {
namespace {

// The model part of the ZMQ topic (events/encoding.h TopicFor).
const std::string& TopicModel(const NamespaceOptions& ns) {
  return ns.model_id.empty() ? ns.name : ns.model_id;
}

}  // namespace

bool TieredStoreImpl::SharesTopicLocked(const NsState& ns) const {
  for (const auto& other : namespaces_) {
    if (other != nullptr && other.get() != &ns && !other->dropped &&
        TopicModel(other->opts) == TopicModel(ns.opts)) {
      return true;
    }
  }
  return false;
}

absl::StatusOr<uint64_t> TieredStoreImpl::DropNamespace(std::string_view ns_name, bool force) {
  NsState* ns = nullptr;
  {
    common::MutexLock lock(&mu_);
    ASSIGN_OR_RETURN(ns, FindNsLocked(ns_name));
    ExpireLeasesLocked();
    if (leases_.HoldsNamespace(ns->id)) {
      if (!force) {
        return absl::FailedPreconditionError(absl::StrCat(
            "namespace '", ns->opts.name,
            "' has leases in force (Lookup lease_ms): release them, let them expire, or "
            "drop with force"));
      }
      OnHoldsEndedLocked(leases_.ReleaseNamespace(ns->id));
    }
    ns_by_name_.erase(ns->opts.name);
    ns->dropped = true;
    // A router applies AllBlocksCleared to the whole topic: only when no other namespace
    // shares it does one event say it all.
    ns->quiet = options_.events != nullptr && !SharesTopicLocked(*ns);
  }
  // A Put that saw `dropped` false holds its key's stripe until its block is published.
  for (common::Mutex& stripe : stripes_) common::MutexLock wait(&stripe);

  std::vector<std::string> keys;
  {
    common::MutexLock lock(&mu_);
    // When quiet: the blocks as BlockRemoved per tier (kRemovedChunk keys an event), then
    // AllBlocksCleared (llm-d's indexer ignores it in v0.8.1 and clears the whole pod, every
    // model, in v0.9.0, so the ZMQ publisher leaves it out by default). Events of this
    // namespace raised since `quiet` was set were not reported.
    constexpr size_t kRemovedChunk = 1024;
    std::vector<std::string> by_medium[2];
    auto report = [&](events::Medium medium, bool last) {
      std::vector<std::string>& chunk = by_medium[static_cast<int>(medium)];
      if (chunk.empty() || (!last && chunk.size() < kRemovedChunk)) return;
      options_.events->Publish(events::BlockEvent::Removed(ns->opts.name, ns->opts.model_id,
                                                           std::move(chunk), medium));
      chunk.clear();
    };
    for (BlockId id = 0; id < index_.id_limit(); ++id) {
      const Entry& e = index_.at(id);
      if ((e.flags & Entry::kUsed) && e.ns == ns->id && (e.flags & (Entry::kHot | Entry::kCold))) {
        keys.emplace_back(index_.key(id));
        if (!ns->quiet) continue;
        for (events::Medium m : {events::Medium::kCpuPinned, events::Medium::kDisk}) {
          if (!(e.flags & (m == events::Medium::kCpuPinned ? Entry::kHot : Entry::kCold))) continue;
          by_medium[static_cast<int>(m)].push_back(keys.back());
          report(m, false);
        }
      }
    }
    if (ns->quiet) {
      report(events::Medium::kCpuPinned, true);
      report(events::Medium::kDisk, true);
      options_.events->Publish(events::BlockEvent::AllCleared(ns->opts.name, ns->opts.model_id));
    }
  }
  uint64_t removed = 0;
  absl::Status cold_status;
  for (const std::string& key : keys) {
    if (DeleteOne(ns, key, &NamespaceStats::evictions_admin, &cold_status)) ++removed;
  }
  if (!cold_status.ok()) {
    return absl::UnavailableError(absl::StrCat("drop namespace '", ns->opts.name,
                                               "': a cold delete failed (the namespace comes "
                                               "back on restart): ",
                                               cold_status.message()));
  }
  common::MutexLock ns_write(&ns_write_mu_);  // RecoverCold's reconcile excludes the write
  RETURN_IF_ERROR(cold_->DeleteNamespace(ns->id));
  return removed;
}

}  // namespace kvtier::storage
