// TieredStore: the storage engine behind kvtierd (docs/design.md §3 Put / Get / Lookup data
// flow, §4 Tiers and eviction). Hot blocks live in one arena of pinned host memory, cold
// blocks in a ColdTier (RocksDB); a prefix index links every block to its parent so
// eviction never strands a prefix and never drops attention-sink blocks while a
// descendant is resident. No gRPC.
//
// Blocks are stored already encoded (kv/codec.h blobs in the namespace codec);
// transcoding is the caller's job. Every stored payload carries an XXH3-64 checksum; a
// block whose checksum fails is never returned: it is counted, deleted and reported as a
// miss.
#ifndef KVTIER_STORAGE_TIERED_STORE_H_
#define KVTIER_STORAGE_TIERED_STORE_H_

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "storage/store_types.h"

namespace kvtier::storage {

// Thread-safe. All methods may be called concurrently from any thread.
//
// Layout (docs/design.md §4 Tiers and eviction): TieredStoreImpl (tiered_store_impl.h)
// orchestrates a PrefixIndex (prefix_index.h: entries, parent links, ghosts, the cold
// LRU-of-leaves list), a HotTier (hot_tier.h: slots in the arena, refcounted read
// handles), an EvictionPolicy (eviction_policy.h) and a ColdTier (cold_tier.h; RocksDB in
// production, rocksdb_cold_tier.h). One index mutex guards the index, policy and
// counters; payload copies, checksums and cold I/O run outside it. Cold writes and
// deletes of one key are serialized by a striped per-key mutex, so the cold record and
// the index never disagree.
//
// Memory per block (tiny blocks at 10^6, beyond the payload's hot slot; docs/scale.md):
// index entry 84 B (33 of them the key) in 16,384-entry chunks 85.3, index hash set
// 10.5 (5 B per slot, half empty just after a doubling), policy 19.1, hot slot table
// 28.1, write-back queue 4 per unflushed block: 143-147 B, all in Stats()
// (*_memory_bytes; store_bench BM_IndexMemory total_B_per_block). kvtierd's RSS rises
// 7-10% more (allocator slack, gRPC; tests/bench/kvtier_scale). A bounded RocksDB
// memtable holds cold writes on top of that and is not counted.
//
// Eviction: the hot tier's policy picks victims among eligible blocks; a victim is
// written to cold unless a current cold copy exists, then its slot is freed (the entry
// stays, tier = cold). If no block is eligible, the least recent unpinned hot leaf (then
// any unpinned hot block) is demoted: demotion never loses data while the cold tier
// accepts writes (a demotion whose cold write fails drops the block: it becomes a miss,
// never a partial block). The cold tier deletes least recently used leaves (no child in
// the index) while over capacity, so a resident block's ancestors, and with them the
// sink blocks, are never deleted first.
//
// Error codes: every method below names its own. In addition, any method that touches
// the cold tier may return the cold tier's UNAVAILABLE / INTERNAL (cold_tier.h) as is.
class TieredStore {
 public:
  // Opens (or creates) the store under options.data_dir, allocates and touches the hot
  // arena, and recovers namespaces and the cold index from RocksDB. INVALID_ARGUMENT for
  // bad options, RESOURCE_EXHAUSTED if the hot arena cannot be allocated, UNAVAILABLE /
  // INTERNAL if RocksDB cannot open, DATA_LOSS if a recovered record is malformed.
  static absl::StatusOr<std::unique_ptr<TieredStore>> Open(const StoreOptions& options);
  // As above over an injected cold tier (options.data_dir and the cold_* RocksDB knobs
  // are unused; tests pass tests/testing/fake_cold_tier.h). REQUIRES: cold != nullptr.
  static absl::StatusOr<std::unique_ptr<TieredStore>> Open(const StoreOptions& options,
                                                           std::unique_ptr<ColdTier> cold);

  virtual ~TieredStore() = default;

  // Registers a namespace (persisted). Idempotent for an identical spec; a different
  // spec for an existing name returns FAILED_PRECONDITION naming the first differing
  // field. INVALID_ARGUMENT for an invalid spec; RESOURCE_EXHAUSTED past 65536
  // namespaces. Returns the stored spec.
  virtual absl::StatusOr<NamespaceOptions> RegisterNamespace(const NamespaceOptions& ns) = 0;
  // Returns the spec of namespace `name`. NOT_FOUND if unknown.
  virtual absl::StatusOr<NamespaceOptions> GetNamespace(std::string_view name) const = 0;
  // Returns every registered namespace, sorted by name. Never fails.
  virtual std::vector<NamespaceOptions> ListNamespaces() const = 0;

  // Stores blocks (all or nothing per block, in order; a failing block stops the call and
  // the blocks before it stay stored). NOT_FOUND unknown namespace; INVALID_ARGUMENT bad
  // key / payload not a valid blob / a prefix rule below broken on block_index;
  // FAILED_PRECONDITION payload codec or layout differs from the namespace, or a stored
  // key would change its parent; RESOURCE_EXHAUSTED if the hot tier is full of pinned/unevictable
  // blocks and the block cannot go cold either, or (TenantQuotaExhausted, tenant_quota.h)
  // when the namespace's tenant is at its hot quota and none of its own hot blocks can be
  // demoted to make room (its own are demoted first, never another tenant's); the cold
  // tier's error (e.g. UNAVAILABLE) when a needed cold write fails, in which case nothing
  // of that block is stored.
  // Re-putting an existing key replaces it. Write-through namespaces return only after
  // the cold write is durable.
  //
  // Prefix rules, checked per block (standalone entries are exempt); a rejected block
  // changes nothing stored, and the message names blocks[i].<field>, i its position in
  // `blocks`:
  //  - block_index is 0 if and only if parent_key is empty (INVALID_ARGUMENT,
  //    blocks[i].block_index);
  //  - a block whose parent this node holds has the parent's block_index + 1
  //    (INVALID_ARGUMENT, blocks[i].block_index); a parent this node does not hold is
  //    accepted as is (in a cluster it lives on another node);
  //  - a stored key never changes its parent (FAILED_PRECONDITION, blocks[i].parent_key).
  virtual absl::Status Put(std::string_view ns, std::span<const BlockPut> blocks) = 0;

  // Reserves room for a block of `bytes` payload bytes whose parent is `parent_key` (the
  // tenant's own blocks are made room from, that parent last), so a transport can write
  // the payload straight where it will be stored; store it with a BlockPut naming the
  // reservation (validated then, as any Put). Counts against the hot tier and the
  // tenant's hot quota exactly as the Put's hot copy would; with no hot room left the
  // reservation is a heap buffer and the block goes cold when stored. NOT_FOUND unknown
  // namespace; INVALID_ARGUMENT `bytes` not in 1..4 GiB; RESOURCE_EXHAUSTED
  // (TenantQuotaExhausted) as Put.
  virtual absl::StatusOr<std::unique_ptr<PutReservation>> ReservePut(std::string_view ns,
                                                                     std::string_view parent_key,
                                                                     uint64_t bytes) = 0;

  // Returns the block: hot hit, else cold hit (checksum verified, then promoted within
  // the tenant's hot quota, else served from a heap copy), else
  // NOT_FOUND (also for a checksum failure, which is counted and deletes the block).
  // NOT_FOUND also for an unknown namespace; the cold tier's UNAVAILABLE / INTERNAL when
  // a cold read fails otherwise. Updates recency and hit counts. A block that a Lookup's
  // prefetch (LeaseOptions::prefetch) is reading is waited for and served hot; one still
  // queued is taken off the queue and read by this call.
  virtual absl::StatusOr<BlockRef> Get(std::string_view ns, std::string_view key) = 0;

  // Returns Get(ns, keys[i]) for every key, in order, with the same results and counts;
  // the blocks that must come from cold are read in batches (ColdTier::MultiGetBlock:
  // slab order, adjacent extents in one read), so one call for a whole prefix reads the
  // cold tier near its sequential speed. A block that fails verification is a miss for
  // that key only. Default: Get per key.
  virtual std::vector<absl::StatusOr<BlockRef>> GetMany(std::string_view ns,
                                                        std::span<const std::string> keys) {
    std::vector<absl::StatusOr<BlockRef>> out;
    out.reserve(keys.size());
    for (const std::string& key : keys) out.push_back(Get(ns, key));
    return out;
  }

  // Returns how many leading `keys` are resident and each key's tier. Never changes
  // recency, never takes a lease. NOT_FOUND unknown namespace.
  absl::StatusOr<LookupResult> Lookup(std::string_view ns, std::span<const std::string> keys) {
    return Lookup(ns, keys, LeaseOptions{});
  }
  // As above; with lease.lease_ms > 0 also leases the reported resident prefix (or every
  // resident key, LeaseOptions) for lease_ms (store clock) or until ReleaseLease: a block
  // reported hot stays hot, a block reported cold stays resident (it may be promoted and
  // demoted, never deleted by capacity). Explicit Delete / Evict still remove leased
  // blocks (they end those holds). The lease stops short where the node's or the
  // tenant's leased-bytes bound (StoreOptions) would be exceeded; lease_limit says which.
  // Still never changes recency itself; with lease.prefetch the blocks its prefetch
  // promotes later become recent as any promotion does. NOT_FOUND unknown namespace.
  virtual absl::StatusOr<LookupResult> Lookup(std::string_view ns,
                                              std::span<const std::string_view> keys,
                                              const LeaseOptions& lease) = 0;
  // The same for keys held as strings.
  absl::StatusOr<LookupResult> Lookup(std::string_view ns, std::span<const std::string> keys,
                                      const LeaseOptions& lease) {
    const std::vector<std::string_view> views(keys.begin(), keys.end());
    return Lookup(ns, views, lease);
  }
  // Ends lease `lease_id` of namespace `ns` (granted by Lookup). Returns the number of
  // blocks it held; 0 when it already ended (expired or released). NOT_FOUND unknown
  // namespace.
  virtual absl::StatusOr<uint64_t> ReleaseLease(std::string_view ns, uint64_t lease_id) = 0;

  // Removes blocks from every tier; absent keys are ignored. Returns how many existed.
  // Descendants are not removed (use Evict with drop=true for that); a removed block with
  // descendants stays in the index as a non-resident link so sink protection still holds.
  // NOT_FOUND unknown namespace. A failed cold delete is logged, not returned.
  virtual absl::StatusOr<uint64_t> Delete(std::string_view ns,
                                          std::span<const std::string> keys) = 0;

  // Pins resident blocks in the hot tier (promoting cold ones) for ttl_ms (0 = until
  // Unpin). Pinned blocks are never demoted by pressure; a re-Put keeps the pin; admin
  // Evict/Delete ignore it. Returns how many were pinned. NOT_FOUND unknown namespace.
  virtual absl::StatusOr<uint64_t> Pin(std::string_view ns, std::span<const std::string> keys,
                                       uint64_t ttl_ms) = 0;
  // Unpins blocks; returns how many were pinned. NOT_FOUND unknown namespace.
  virtual absl::StatusOr<uint64_t> Unpin(std::string_view ns,
                                         std::span<const std::string> keys) = 0;

  // Adds worker-reported attention mass to blocks (heavy_hitter policy input); absent
  // keys are ignored. INVALID_ARGUMENT if sizes differ; NOT_FOUND unknown namespace.
  virtual absl::Status ReportScores(std::string_view ns, std::span<const std::string> keys,
                                    std::span<const float> scores) = 0;

  // Admin eviction: demotes the named blocks (all of the namespace when `keys` is empty)
  // from the hot tier to cold; with drop=true deletes them from every tier. Returns how
  // many blocks moved. Pins are ignored. Prefix closure is kept (descendants go first).
  // NOT_FOUND unknown namespace.
  virtual absl::StatusOr<uint64_t> Evict(std::string_view ns, std::span<const std::string> keys,
                                         bool drop) = 0;

  // Drops namespace `ns` from this node: deletes every block of it from every tier, then
  // its spec (a later RegisterNamespace of the name starts empty, with any spec; the name
  // is unknown to every call from the moment the drop starts, and Puts already under way
  // store nothing). Events: BlockRemoved events of up to 1024 keys per tier
  // listing the blocks it held, then one AllBlocksCleared for the namespace, instead of a
  // BlockRemoved per block, unless another namespace of this node publishes under the
  // same topic (same model id), in which case each block gets its BlockRemoved. Pins are
  // ignored. Returns how many blocks were resident. NOT_FOUND unknown namespace;
  // FAILED_PRECONDITION while a lease of the namespace is in force, unless `force`
  // (which ends those leases); UNAVAILABLE when a cold delete failed (the blocks whose
  // delete failed and the spec stay on disk, so a restart brings the namespace back with
  // them). The namespace's id is not reused while the process runs (ids count toward the
  // 65536-namespace bound).
  virtual absl::StatusOr<uint64_t> DropNamespace(std::string_view ns, bool force) = 0;

  // Makes every hot block of `ns` (all namespaces when empty) durable in the cold tier.
  // NOT_FOUND unknown namespace; UNAVAILABLE if some block could not be written (the
  // others are written, the failed ones stay hot); the cold tier's error if syncing fails.
  absl::Status Flush(std::string_view ns) {
    return Flush(ns, std::numeric_limits<int64_t>::max()).status();
  }
  // As above, but stops writing once the store clock passes `deadline_ms` (checked after
  // every block, so the overrun is one block's cold write) and returns how far it got;
  // what it wrote is synced before it returns. It always writes at least one block when
  // one is unflushed, even past the deadline, so repeated calls always make progress.
  // Same errors as above.
  virtual absl::StatusOr<FlushProgress> Flush(std::string_view ns, int64_t deadline_ms) = 0;

  // Returns a snapshot of the counters and capacities. Never fails.
  virtual StoreStats Stats() const = 0;

  // Recovery on demand (docs/recovery.md "On demand"; the admin RPC Recover): checks the
  // cold tier's index against its slab (ColdTier::RecoverOnline) and, with kRebuild,
  // re-creates the index records and namespace records it lost, makes those blocks
  // resident again (cold; announced as stored), and frees damaged and stale extents.
  // kVerify changes nothing and reports what a rebuild would do.
  // Concurrency contract with live calls: every call goes on during the slab scan and
  // the pass over the index (the long parts, O(blocks)). The reconcile then holds every
  // key stripe and the namespace write lock: Puts and Deletes (and flushes, demotions,
  // cold evictions, RegisterNamespace) wait for it; Gets and Lookups do not. It costs
  // O(extents no index record names): microseconds when nothing was lost. Hence:
  //  - a block whose Delete (or drop) was acknowledged before the reconcile never comes
  //    back: its extent was killed first and every extent is read again inside it; one
  //    deleted after it is found in the index and deleted as usual;
  //  - an acknowledged block is never lost: no index record is changed or deleted, only
  //    free slab space is reclaimed, and a key the store holds a newer copy of (hot) is
  //    not re-indexed from an older extent.
  //  - a Delete of a block the store did not know (its record was lost before it
  //    started) removes nothing, so a later rebuild may bring that block back with
  //    exactly the bytes its Put carried.
  // One recovery runs at a time (a second waits). UNIMPLEMENTED when the cold tier has no
  // self-describing copy; the cold tier's I/O errors.
  virtual absl::StatusOr<ColdRecoverReport> RecoverCold(ColdRecoverMode /*mode*/) {
    return absl::UnimplementedError("this store cannot recover its cold tier on demand");
  }
};

}  // namespace kvtier::storage

#endif  // KVTIER_STORAGE_TIERED_STORE_H_
