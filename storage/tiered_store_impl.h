// TieredStoreImpl: the TieredStore behind TieredStore::Open (docs/design.md §4 Tiers and
// eviction). It orchestrates four collaborators, each with its own file and contract:
//   PrefixIndex (prefix_index.h)    entries, parent links, ghosts, the cold leaf list
//   HotTier (hot_tier.h)            slots in the hot arena, refcounted read handles
//   EvictionPolicy (eviction_policy.h)  which eligible hot block to demote next
//   ColdTier (cold_tier.h)          persistent records; RocksDbColdTier in production
// and keeps what crosses them: namespaces, residency transitions (which keep child
// counts, policy eligibility and the cold list in step), pins, leases (lease_table.h), statistics, demotion and
// cold-capacity enforcement.
//
// Locking: mu_ guards the index, the policy, pins and counters. Payload copies,
// checksums and cold I/O run outside it. Cold writes and deletes of one key are
// serialized by its stripe (Stripe()), taken before mu_, so the cold record and the
// index never disagree. Lock order: stripe -> mu_ -> HotTier's own mutex.
// Naming: a method whose name ends in `Locked` requires mu_ held; every other method
// takes it itself.
//
// The member functions are defined in tiered_store_impl.cc (setup, namespaces,
// residency, admin calls, stats), tiered_store_lookup.cc (Lookup, leases),
// tiered_store_put.cc (Put), tiered_store_get.cc (Get, promotion, Pin) and
// tiered_store_demotion.cc (room in the hot tier, demotion, cold-capacity eviction, the
// background demoter), tiered_store_drop.cc (DropNamespace), tiered_store_write_back.cc
// (write-back debt, the flusher, Flush) and tiered_store_prefetch.cc (prefetch on
// Lookup: the queue, its readers, what a Get finds of them).
//
// Thread-safe (see TieredStore).
#ifndef KVTIER_STORAGE_TIERED_STORE_IMPL_H_
#define KVTIER_STORAGE_TIERED_STORE_IMPL_H_

#include <xxhash.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/clock.h"
#include "common/mutex.h"
#include "events/block_event.h"
#include "kv/codec.h"
#include "storage/cold_tier.h"
#include "storage/eviction_policy.h"
#include "storage/hot_tier.h"
#include "storage/prefix_index.h"
#include "storage/tenant_quota.h"
#include "storage/tiered_store.h"

namespace kvtier::storage {

// One registered namespace. `opts`, `id` and `slot_bytes` are constant after
// registration (read without the store's mutex); `stats`, `dropped` and `quiet` are
// guarded by the store's mu_. A dropped namespace keeps its NsState (callers that found
// it before the drop still hold the pointer) but leaves ns_by_name_.
struct NsState {
  NamespaceOptions opts;
  uint16_t id = 0;
  uint64_t slot_bytes = 0;  // hot slot size of a full block
  TenantUsage* tenant = nullptr;  // the owner's usage (the pointer is constant, the
                                  // record guarded by the store's mu_)
  NamespaceStats stats;
  bool dropped = false;  // DropNamespace started: Put stores nothing more
  bool quiet = false;    // ... and its blocks' removals raise no per-block events (the drop
                         // reports AllBlocksCleared and chunked BlockRemoved)
  uint64_t unflushed_blocks = 0;  // write-back debt of this namespace (guarded by mu_)
  uint64_t unflushed_bytes = 0;
};

class TieredStoreImpl final : public TieredStore {
 public:
  // Takes the tiers; nothing is read yet (Init does that). REQUIRES: valid options
  // (ValidateOptions), non-null tiers.
  TieredStoreImpl(const StoreOptions& options, std::unique_ptr<HotTier> hot,
                  std::unique_ptr<ColdTier> cold);
  // Stops the background threads, then reports the hot tier's blocks as removed.
  ~TieredStoreImpl() override;

  // INVALID_ARGUMENT naming the bad StoreOptions field.
  static absl::Status ValidateOptions(const StoreOptions& options);
  // Recovers namespaces and the index from the cold tier, starts the demoter and, with
  // warm_from_cold, promotes cold blocks. The cold tier's errors; DATA_LOSS for a
  // malformed record. Call once, before any other method.
  absl::Status Init() ABSL_LOCKS_EXCLUDED(mu_);

  // TieredStore.
  absl::StatusOr<NamespaceOptions> RegisterNamespace(const NamespaceOptions& ns) override
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<NamespaceOptions> GetNamespace(std::string_view name) const override
      ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<NamespaceOptions> ListNamespaces() const override ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Put(std::string_view ns, std::span<const BlockPut> blocks) override
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<std::unique_ptr<PutReservation>> ReservePut(std::string_view ns,
                                                             std::string_view parent_key,
                                                             uint64_t bytes) override
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<BlockRef> Get(std::string_view ns, std::string_view key) override
      ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<absl::StatusOr<BlockRef>> GetMany(std::string_view ns,
                                                std::span<const std::string> keys) override
      ABSL_LOCKS_EXCLUDED(mu_);
  using TieredStore::Lookup;
  absl::StatusOr<LookupResult> Lookup(std::string_view ns, std::span<const std::string_view> keys,
                                      const LeaseOptions& lease) override ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<uint64_t> ReleaseLease(std::string_view ns, uint64_t lease_id) override
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<uint64_t> Delete(std::string_view ns, std::span<const std::string> keys) override
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<uint64_t> Pin(std::string_view ns, std::span<const std::string> keys,
                               uint64_t ttl_ms) override ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<uint64_t> Unpin(std::string_view ns, std::span<const std::string> keys) override
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status ReportScores(std::string_view ns, std::span<const std::string> keys,
                            std::span<const float> scores) override ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<uint64_t> Evict(std::string_view ns, std::span<const std::string> keys,
                                 bool drop) override ABSL_LOCKS_EXCLUDED(mu_);
  using TieredStore::Flush;
  absl::StatusOr<FlushProgress> Flush(std::string_view ns, int64_t deadline_ms) override
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<uint64_t> DropNamespace(std::string_view ns, bool force) override
      ABSL_LOCKS_EXCLUDED(mu_);
  StoreStats Stats() const override ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<ColdRecoverReport> RecoverCold(ColdRecoverMode mode) override
      ABSL_LOCKS_EXCLUDED(mu_, ns_write_mu_, recover_mu_);

 private:
#ifdef KVTIER_TSAN
  // RecoverCold holds every stripe at once, and TSAN's deadlock detector aborts a thread
  // holding more than 64 locks (sanitizer_deadlock_detector.h: all_locks_with_contexts_):
  // the TSAN build (scripts/tsan.sh) uses fewer stripes, the same code otherwise.
  static constexpr size_t kNumStripes = 32;
#else
  static constexpr size_t kNumStripes = 64;
#endif
  static constexpr int64_t kPinForever = std::numeric_limits<int64_t>::max();

  enum class DemoteMode { kWatermark, kAdmin, kCopyOnly };
  // kGone: a concurrent Delete / re-Put took the block out of the hot tier first.
  enum class DemoteResult { kMoved, kGone, kFailed };

  // A validated Put, ready to store, and a ReservePut's room (tiered_store_put.cc).
  struct PreparedPut;
  class Reservation;

  common::Mutex& Stripe(uint16_t ns, std::string_view key) {
    return stripes_[XXH3_64bits_withSeed(key.data(), key.size(), ns) % kNumStripes];
  }

  // --- Recovery on demand (tiered_store_recover.cc)
  // Runs fn holding stripes_[i..] (then returns its status); stripes are taken in index
  // order, and nothing else holds two.
  absl::Status WithStripesFrom(size_t i, const std::function<absl::Status()>& fn);
  // Whether the cold tier should re-index `record` (no resident copy of its key here, its
  // namespace live), and indexing it as a cold block.
  bool MayAdoptCold(const ColdIndexRecord& record) ABSL_LOCKS_EXCLUDED(mu_);
  void AdoptCold(const ColdIndexRecord& record) ABSL_LOCKS_EXCLUDED(mu_);

  // --- Setup (tiered_store_impl.cc)
  absl::Status Recover() ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status AddNamespaceLocked(uint32_t id, const NamespaceOptions& opts)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WarmFromCold() ABSL_LOCKS_EXCLUDED(mu_);

  // --- Namespaces and index helpers (tiered_store_impl.cc)
  absl::StatusOr<NsState*> FindNsLocked(std::string_view name) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<NsState*> FindNs(std::string_view name) const ABSL_LOCKS_EXCLUDED(mu_);
  BlockInfo InfoLocked(BlockId id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void TouchLocked(BlockId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // --- Residency transitions (tiered_store_impl.cc). They keep child counts, policy and
  // cold list in step, and report each tier change to options_.events (`origin`: the
  // Put that stored the block, whose token ids / LoRA / extra keys go into the event).
  // EnterHotLocked takes over the caller's reference on `slot` (HotTier::Own).
  void EnterHotLocked(BlockId id, SlotId slot, const BlockPut* origin = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LeaveHotLocked(BlockId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EnterColdLocked(BlockId id, uint32_t stored_bytes, const BlockPut* origin = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LeaveColdLocked(BlockId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // At destruction (takes mu_): BlockRemoved CPU for every hot block, chunked per namespace.
  void ReportHotTierGone() ABSL_LOCKS_EXCLUDED(mu_);
  // Reports that block `id` entered (stored) or left `medium`; nothing when events are
  // off or the block is standalone.
  void ReportLocked(BlockId id, bool stored, events::Medium medium, const BlockPut* origin)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateEligibilityLocked(BlockId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PinLocked(BlockId id, int64_t until_ms) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes every tier copy of `id` from the index (cold record deletion is the caller's,
  // outside mu_). Returns true if the block had a cold record.
  bool RemoveLocked(BlockId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Deletes one block everywhere, holding its stripe. Returns whether it existed. A failed
  // cold delete is logged and, when `cold_status` is set, stored there.
  bool DeleteOne(NsState* ns, std::string_view key, uint64_t NamespaceStats::*counter,
                 absl::Status* cold_status = nullptr) ABSL_LOCKS_EXCLUDED(mu_);
  // Whether another live namespace publishes its events under the topic of `ns`
  // (tiered_store_drop.cc).
  bool SharesTopicLocked(const NsState& ns) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // --- Put (tiered_store_put.cc)
  // Stores blocks[position] of a Put call.
  // `next`: a key a few blocks ahead in the same Put, prefetched (none: empty).
  absl::Status PutOne(NsState* ns, const BlockPut& block, size_t position, std::string_view next)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The prefix metadata rules (TieredStore::Put). INVALID_ARGUMENT naming
  // blocks[position].block_index, FAILED_PRECONDITION naming blocks[position].parent_key.
  absl::Status CheckPrefixRulesLocked(const NsState& ns, const BlockPut& block,
                                      size_t position) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Validates the block against the namespace and fills *prepared (no slot yet).
  // INVALID_ARGUMENT / FAILED_PRECONDITION as Put.
  absl::Status PreparePut(const NsState& ns, const BlockPut& block, PreparedPut* prepared) const;
  // Copies the payload into a new hot slot (standalone entries and a full hot tier get
  // none) and points prepared->payload at contiguous bytes.
  void CopyIntoHot(const NsState& ns, const BlockPut& block, PreparedPut* prepared)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Writes the cold record (write-through, or no hot room); returns its stored bytes,
  // or nullopt when no cold write was needed.
  absl::StatusOr<std::optional<uint32_t>> WriteColdForPut(const NsState& ns, const BlockPut& block,
                                                          const PreparedPut& prepared)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Publishes the block in the index. Returns true if an older cold record of the key
  // holds other bytes and must be deleted (DropStaleCold).
  bool PublishLocked(NsState* ns, const BlockPut& block, const PreparedPut& prepared,
                     std::optional<uint32_t> stored) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status DropStaleCold(const NsState& ns, std::string_view key) ABSL_LOCKS_EXCLUDED(mu_);

  // --- Get (tiered_store_get.cc)
  // Reads a cold block into a new hot slot (or a heap copy when the arena is full of
  // pinned blocks) and returns a read handle. NOT_FOUND on absence or checksum failure.
  absl::StatusOr<BlockRef> Promote(NsState* ns, std::string_view key, bool pin,
                                   int64_t pin_until_ms) ABSL_LOCKS_EXCLUDED(mu_);
  // The part of Get under mu_: counts the Get, waits for an in-flight prefetch of the
  // block, serves it when hot or reports the miss. nullopt: it must be read from cold.
  std::optional<absl::StatusOr<BlockRef>> GetResidentLocked(NsState* ns, std::string_view key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Promote for the keys[at[k]] (cold, at the time of GetResidentLocked), read with
  // ColdTier::MultiGetBlock in batches of about kGetBatchBytes; results into out[at[k]].
  void PromoteMany(NsState* ns, std::span<const std::string> keys, std::span<const size_t> at,
                   std::vector<absl::StatusOr<BlockRef>>* out) ABSL_LOCKS_EXCLUDED(mu_);
  static constexpr uint64_t kGetBatchBytes = 32ull << 20;
  // Counts, deletes and reports as a miss a block whose cold read failed verification.
  absl::Status DropCorruptCold(NsState* ns, std::string_view key, const absl::Status& cause)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Publishes a promoted copy in `slot` (or serves `heap_copy` when slot is nullopt).
  absl::StatusOr<BlockRef> PublishPromotedLocked(NsState* ns, std::string_view key,
                                                 std::optional<SlotId> slot, std::string heap_copy,
                                                 bool pin, int64_t pin_until_ms)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // --- Tenant quotas (tiered_store_quota.cc)
  // Reserves `bytes` of ns's tenant's hot quota (*reserved = bytes), demoting the
  // tenant's own blocks until they fit. RESOURCE_EXHAUSTED (TenantQuotaExhausted,
  // counted as a rejection when count_rejection) when none of them can be demoted. OK at
  // once, *reserved = 0, when the tenant has no hot quota.
  // `parent_key` (may be empty) names the parent of the block being put, demoted last.
  absl::Status ReserveTenantHot(NsState* ns, uint64_t bytes, bool count_rejection,
                                std::string_view parent_key, uint64_t* reserved)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Gives back a reservation of *bytes (none when 0) and sets it to 0.
  void UnreserveTenantHotLocked(NsState* ns, uint64_t* bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The least recent demotable hot block of `tenant` (any tenant when null): eligible
  // ones first, then leaves, then interior blocks, and last sinks and `avoid`; for a
  // tenant never a sink with a hot child. kNoEntry when none.
  BlockId ScanVictimLocked(const TenantUsage* tenant, BlockId avoid = kNoEntry)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The cold leaf to delete next: a tenant over its cold quota loses its own first
  // (*charged = that tenant), then, over cold capacity, anyone's (*charged = null).
  // kNoEntry when nothing is to be deleted.
  BlockId PickColdVictimLocked(TenantUsage** charged) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // --- Room and demotion (tiered_store_demotion.cc)
  // Allocates a hot slot, demoting synchronously while the arena has no room. Returns
  // nullopt when nothing more can be demoted.
  std::optional<SlotId> AllocSlot(uint64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);
  // Demotes the policy's victim; returns false if there is none.
  bool DemoteOne() ABSL_LOCKS_EXCLUDED(mu_);
  BlockId PickVictimLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes block `id` to cold (if not there) and, unless kCopyOnly, frees its hot slot,
  // then enforces the cold capacity. REQUIRES: the entry is marked kBusy by the caller.
  DemoteResult DemoteMarked(BlockId id, DemoteMode mode) ABSL_LOCKS_EXCLUDED(mu_);
  DemoteResult DemoteMarkedOnly(BlockId id, DemoteMode mode) ABSL_LOCKS_EXCLUDED(mu_);
  void FinishDemotionLocked(BlockId id, DemoteMode mode, bool wrote,
                            const absl::StatusOr<uint32_t>& stored)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DemoteUntilBelow(uint64_t target_bytes) ABSL_LOCKS_EXCLUDED(mu_);
  // Demotes synchronously when background demotion is off and the arena is over the
  // high watermark.
  void DemoteIfSynchronous() ABSL_LOCKS_EXCLUDED(mu_);
  void EnforceColdCapacity() ABSL_LOCKS_EXCLUDED(mu_);
  void ExpirePinsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the leases that are due and re-evaluates their blocks (tiered_store_lookup.cc).
  void ExpireLeasesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Grants the lease of Lookup over the entries `ids` (one per key) that `out->tiers`
  // reports resident (LeaseOptions).
  void LeaseLocked(const NsState& ns, std::span<const BlockId> ids, const LeaseOptions& lease,
                   LookupResult* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Re-evaluates the blocks whose holds ended (eligibility, the demoter).
  void OnHoldsEndedLocked(const std::vector<LeaseTable::Hold>& holds)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void BackgroundLoop() ABSL_LOCKS_EXCLUDED(mu_);

  // --- Prefetch on Lookup (tiered_store_prefetch.cc, docs/prefetch.md)
  // One block a Lookup asked to prefetch, from queued to read by a Get (or dropped).
  struct Prefetch {
    enum State : uint8_t { kQueued, kInFlight, kUnread };
    State state = kQueued;
    uint32_t bytes = 0;        // payload bytes
    uint64_t lease_id = 0;     // the Lookup's lease (0: none)
    int64_t deadline_ms = 0;   // dropped (counted wasted when kUnread) at this store time
  };
  // Hands the Lookup's reported prefix (its leased part, with a lease) to the readers in
  // O(1): they queue its cold blocks within the bounds (StoreOptions::prefetch_*) and the
  // tenant's hot quota (ExpandPrefetchRunLocked), off the Lookup's thread.
  // REQUIRES: `ids` are the Lookup's entries, one per key.
  void QueuePrefetchLocked(NsState* ns, std::vector<BlockId> ids, const LookupResult& out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A Lookup's run as handed over: its entries (the Lookup's own vector, moved), how
  // many lead the prefix (or the leased part), its lease and its deadline.
  struct PrefetchRun {
    NsState* ns = nullptr;
    std::vector<BlockId> ids;
    size_t end = 0;
    uint64_t lease_id = 0;
    int64_t deadline_ms = 0;
  };
  // Queues the run's cold-only blocks, in order, within the bounds; counts the rest
  // skipped.
  void ExpandPrefetchRunLocked(PrefetchRun run) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes the next blocks off the queue (one namespace, up to prefetch_batch_bytes, at
  // least one), marking them in flight; cancels those no longer worth reading.
  std::vector<BlockId> TakePrefetchBatchLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the tracking of `id` (its counters and bytes); the caller counted why.
  void ForgetPrefetchLocked(absl::flat_hash_map<BlockId, Prefetch>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Block `id` left the hot tier or the index: an unread prefetch of it is wasted, a
  // queued one cancelled. Cheap when nothing is prefetched.
  void OnPrefetchLeftLocked(BlockId id, bool removed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops prefetches whose deadline passed or whose lease ended.
  void ExpirePrefetchesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `id` is a prefetched block no Get has read yet (kept out of the victims).
  bool UnreadPrefetchLocked(BlockId id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (prefetch_.empty()) return false;
    const auto it = prefetch_.find(id);
    return it != prefetch_.end() && it->second.state == Prefetch::kUnread;
  }
  // Get's part, on block `id` resident: a hot block read for the first time since its
  // prefetch counts a hit; a cold block being prefetched is waited for (true: wait, then
  // look again); a queued one is taken off the queue (the Get reads it itself).
  bool GetMeetsPrefetchLocked(BlockId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reads the in-flight blocks `ids` (TakePrefetchBatchLocked) with one
  // ColdTier::MultiGetBlock and publishes each as a prefetched hot block.
  // `keys` and `bytes` are theirs, captured with them.
  void PrefetchBatch(NsState* ns, std::vector<BlockId> ids, std::vector<std::string> keys,
                     std::vector<uint32_t> bytes) ABSL_LOCKS_EXCLUDED(mu_);
  void PrefetchLoop() ABSL_LOCKS_EXCLUDED(mu_);
  void StartPrefetchers();

  // --- Write-back debt (tiered_store_write_back.cc)
  // True for a hot block without a cold record (what a shutdown must still write).
  static bool Unflushed(const Entry& e) {
    return (e.flags & (Entry::kUsed | Entry::kHot | Entry::kCold | Entry::kStandalone)) ==
           (Entry::kUsed | Entry::kHot);
  }
  // Updates the debt counters after entry `id` changed residency; `was_unflushed` is
  // Unflushed() before the change. Wakes the flusher above 3/4 of a bound.
  void CountDebtLocked(BlockId id, bool was_unflushed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // True when the debt exceeds num/den of either bound.
  bool DebtAboveLocked(uint64_t num, uint64_t den) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes the oldest unflushed block to cold (copy only). False when there is none or
  // its write failed.
  bool FlushOldest() ABSL_LOCKS_EXCLUDED(mu_);
  // Put's hard bound: while the debt exceeds a bound, writes the oldest blocks back.
  void LimitUnflushed() ABSL_LOCKS_EXCLUDED(mu_);
  // Clears the busy mark of a block picked but not written.
  void UnmarkBusyLocked(BlockId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FlusherLoop() ABSL_LOCKS_EXCLUDED(mu_);
  void StartFlusher();
  void MaybeWakeDemoterLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const StoreOptions options_;
  common::Clock* const clock_;
  const std::unique_ptr<HotTier> hot_;            // thread-safe itself
  const std::unique_ptr<ColdTier> cold_;          // thread-safe itself
  const uint64_t high_bytes_;                     // demotion starts above this many hot bytes
  const uint64_t low_bytes_;                      // ... and stops at or below this many
  std::array<common::Mutex, kNumStripes> stripes_;  // serialize cold writes per key
  // Serializes the cold tier's namespace writes with RecoverCold's reconcile. Lock
  // order: ns_write_mu_ -> stripe -> mu_.
  common::Mutex ns_write_mu_;
  common::Mutex recover_mu_;  // one RecoverCold at a time
  std::thread demoter_;                           // started by Init, joined by the destructor
  std::thread flusher_;                           // ditto (write-back debt)
  std::vector<std::thread> prefetchers_;          // ditto (prefetch on Lookup)
  std::atomic<bool> over_debt_{false};            // DebtAboveLocked(1, 1), read without mu_

  // State below is protected by mu_.
  mutable common::Mutex mu_;
  common::CondVar demote_cv_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t demote_requests_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::unique_ptr<NsState>> namespaces_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, uint16_t> ns_by_name_ ABSL_GUARDED_BY(mu_);
  PrefixIndex index_ ABSL_GUARDED_BY(mu_);
  const std::unique_ptr<EvictionPolicy> policy_ ABSL_PT_GUARDED_BY(mu_);
  absl::flat_hash_map<BlockId, int64_t> pins_ ABSL_GUARDED_BY(mu_);  // id -> until ms
  int64_t next_pin_expiry_ms_ ABSL_GUARDED_BY(mu_) = kPinForever;
  TenantQuotaTable tenants_ ABSL_GUARDED_BY(mu_);
  LeaseTable leases_ ABSL_GUARDED_BY(mu_);
  uint64_t cold_used_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t tick_ ABSL_GUARDED_BY(mu_) = 0;
  common::CondVar flush_cv_;
  uint64_t unflushed_blocks_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t unflushed_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // Blocks in the order they became unflushed (may hold stale ids: checked when popped,
  // compacted when it outgrows the debt).
  std::deque<BlockId> unflushed_fifo_ ABSL_GUARDED_BY(mu_);
  // Prefetch on Lookup: what is tracked, the queue (may hold stale ids: checked when
  // popped), its wake-up, the bytes bounded, the counters.
  absl::flat_hash_map<BlockId, Prefetch> prefetch_ ABSL_GUARDED_BY(mu_);
  std::deque<BlockId> prefetch_queue_ ABSL_GUARDED_BY(mu_);
  std::deque<PrefetchRun> prefetch_runs_ ABSL_GUARDED_BY(mu_);  // handed over, not yet queued
  common::CondVar prefetch_cv_;       // a block was queued, or stopping
  common::CondVar prefetch_done_cv_;  // an in-flight prefetch ended (Gets wait on it)
  uint64_t prefetch_inflight_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t prefetch_unread_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t next_prefetch_expiry_ms_ ABSL_GUARDED_BY(mu_) = kPinForever;
  PrefetchStats prefetch_stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvtier::storage

#endif  // KVTIER_STORAGE_TIERED_STORE_IMPL_H_
