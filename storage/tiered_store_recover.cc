// TieredStoreImpl::RecoverCold (TieredStore::RecoverCold, docs/recovery.md "On demand"):
// the cold tier scans its slab alongside live calls, then reconciles inside `exclusive`,
// which here holds the namespace write lock and every key stripe, so no cold write or
// delete runs; the store answers which lost blocks may come back (MayAdoptCold) and
// indexes those that did (AdoptCold).
#include <functional>

#include "common/mutex.h"
#include "common/status_macros.h"
#include "storage/tiered_store_impl.h"

namespace kvtier::storage {

absl::Status TieredStoreImpl::WithStripesFrom(size_t i, const std::function<absl::Status()>& fn) {
  if (i == kNumStripes) return fn();
  common::MutexLock stripe(&stripes_[i]);
  return WithStripesFrom(i + 1, fn);
}

bool TieredStoreImpl::MayAdoptCold(const ColdIndexRecord& rec) {
  if (rec.key.empty() || rec.key.size() > kMaxKeyBytes || rec.parent_key.size() > kMaxKeyBytes) {
    return false;
  }
  common::MutexLock lock(&mu_);
  // An unknown namespace, or one being dropped (its blocks are going away).
  if (rec.ns_id >= namespaces_.size() || namespaces_[rec.ns_id] == nullptr ||
      namespaces_[rec.ns_id]->dropped) {
    return false;
  }
  // A resident key was put (or promoted) since the record was lost: this copy is older.
  const BlockId id = index_.Find(static_cast<uint16_t>(rec.ns_id), rec.key);
  return id == kNoEntry || !index_.at(id).resident();
}

void TieredStoreImpl::AdoptCold(const ColdIndexRecord& rec) {
  common::MutexLock lock(&mu_);
  if (rec.ns_id >= namespaces_.size() || namespaces_[rec.ns_id] == nullptr) return;
  const auto ns = static_cast<uint16_t>(rec.ns_id);
  const BlockId id = index_.FindOrCreate(ns, rec.key);
  Entry& e = index_.at(id);
  if (e.resident()) return;  // MayAdoptCold said no copy; the stripes keep it so
  e.block_index = rec.block_index;
  e.payload_bytes = rec.payload_bytes;
  if (rec.standalone) e.flags |= Entry::kStandalone;
  e.recency = static_cast<uint32_t>(++tick_);
  const bool linked = !rec.standalone && !rec.parent_key.empty() && rec.parent_key != rec.key;
  if (linked && e.parent == kNoEntry) {
    index_.SetParent(id, index_.FindOrCreate(ns, rec.parent_key));
  }
  EnterColdLocked(id, rec.stored_bytes);
}

absl::StatusOr<ColdRecoverReport> TieredStoreImpl::RecoverCold(ColdRecoverMode mode) {
  common::MutexLock one(&recover_mu_);
  ColdRecoverHooks hooks;
  hooks.exclusive = [this](const std::function<absl::Status()>& critical) {
    common::MutexLock ns_write(&ns_write_mu_);
    return WithStripesFrom(0, critical);
  };
  hooks.adopt = [this](const ColdIndexRecord& rec) { return MayAdoptCold(rec); };
  hooks.adopted = [this](const ColdIndexRecord& rec) { AdoptCold(rec); };
  ASSIGN_OR_RETURN(ColdRecoverReport report, cold_->RecoverOnline(mode, hooks));
  // Re-indexed blocks count toward the cold capacity again.
  if (mode == ColdRecoverMode::kRebuild && report.records_recreated > 0) EnforceColdCapacity();
  return report;
}

}  // namespace kvtier::storage
