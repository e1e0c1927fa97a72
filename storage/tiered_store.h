// TieredStore: the storage engine behind kvtierd (docs/design.md §3 Put / Get / Lookup data
// flow, §4 Tiers and eviction). Hot blocks live in one arena of pinned host memory, cold
// blocks in a ColdTier (RocksDB); a prefix index links every block to its parent so
// eviction never strands a prefix and never drops attention-sink blocks while a
// descendant is resident. No gRPC.
//
// Blocks are stored already encoded (storage/kv/codec.h blobs in the namespace codec);
// transcoding is the caller's job. Every stored payload carries an XXH3-64 checksum; a
// block whose checksum fails is never returned: it is counted, deleted and reported as a
// miss.
#ifndef KVTIER_STORAGE_TIERED_STORE_H_
#define KVTIER_STORAGE_TIERED_STORE_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/clock.h"
#include "events/block_event.h"
#include "storage/cold_tier.h"
#include "storage/eviction_policy.h"
#include "storage/kv/codec.h"
#include "storage/kv/layout.h"
#include "storage/lease_table.h"
#include "storage/tenant_quota.h"
#include "storage/write_back.h"

namespace kvtier::storage {

// Where a block is resident. Stable numbers (they appear in stats and on the wire).
enum class Tier : uint8_t { kNone = 0, kHot = 1, kCold = 2 };
const char* TierName(Tier tier);  // "none", "hot", "cold"

// Limits on names and keys (NamespaceOptions::Validate, BlockPut).
inline constexpr size_t kMaxKeyBytes = 32;       // keys and parent keys: 1..32 bytes
inline constexpr size_t kMaxNameBytes = 128;     // namespace and tenant names
inline constexpr size_t kMaxModelIdBytes = 256;  // NamespaceOptions::model_id
inline constexpr uint32_t kMaxSinkBlocks = 1024;  // NamespaceOptions::sink_blocks
// True when `s` is 1..kMaxNameBytes chars of [A-Za-z0-9._/-] (namespace and tenant names).
bool IsValidName(std::string_view s);

// A named KV layout plus how to store it. Registered once; later registrations must match.
struct NamespaceOptions {
  std::string name;                   // 1..kMaxNameBytes chars of [A-Za-z0-9._/-]
  std::string tenant = "default";     // owner, same charset; tenants never see each
                                      // other's namespaces
  std::string model_id;               // informational (model name + revision), at most
                                      // kMaxModelIdBytes
  kv::Layout layout;
  kv::CodecId codec = kv::CodecId::kFp16;  // storage codec of every block
  bool keep_sinks = true;             // codec keeps block 0's sink tokens unquantized
  bool write_through = false;         // Put acknowledges only after the cold write is durable
  bool cold_zstd = false;             // compress cold values with zstd (pays for low-bit codes)
  uint32_t sink_blocks = 1;           // blocks with index < this are never evicted while a
                                      // descendant is resident; at most kMaxSinkBlocks

  // Returns INVALID_ARGUMENT naming the bad field.
  absl::Status Validate() const;
};


// Options of TieredStore::Open, the one place their defaults live; Open checks them
// (INVALID_ARGUMENT naming the field).
struct StoreOptions {
  // RocksDB directory of the cold tier; created if missing. Unused when the store is
  // opened over an injected ColdTier. Default: "./kvtier-data".
  std::string data_dir = "./kvtier-data";
  // Hot arena size. Default: 256 MiB.
  uint64_t hot_capacity_bytes = 256ull << 20;
  // Cold tier bytes, counted as the tier allocates them (ColdTier::FootprintBytes: the
  // stored bytes after optional zstd, rounded up to the slab's 4 KiB units); least
  // recently used cold leaves are deleted above it. Default: 16 GiB.
  uint64_t cold_capacity_bytes = 16ull << 30;
  // Demotion starts when the hot arena is fuller than this fraction. Default: 0.90.
  double high_watermark = 0.90;
  // ... and stops once it is at most this fraction full. Default: 0.80.
  double low_watermark = 0.80;
  // Hot-tier eviction policy. Default: adaptive.
  EvictionPolicyKind policy = EvictionPolicyKind::kAdaptive;
  // Tuning of the ranked policies. Default: see EvictionPolicyOptions.
  EvictionPolicyOptions policy_options;
  // Hot arena allocator: "auto" (cudaHostAlloc, else mmap+mlock, else plain), or one of
  // "cuda", "mlock", "malloc" to force it (falls back like auto when unavailable).
  // Default: "auto".
  std::string hot_allocator = "auto";
  // false: demote synchronously inside Put instead of on a background thread (tests).
  // Default: true.
  bool background_demotion = true;
  // fsync the WAL on write-through puts (power-loss durability). Default: false.
  bool cold_sync = false;
  // On open, promote cold blocks into the hot tier up to the low watermark.
  // Default: false.
  bool warm_from_cold = false;
  // Write-back debt bounds (storage/write_back.h): payload bytes and blocks of hot
  // blocks without a cold copy. Above 3/4 of either a background flusher writes the
  // oldest to cold; a Put that leaves either exceeded writes back synchronously before
  // it returns. 0 = unbounded. Default: WriteBackBoundsForGrace(10 s), so that what a
  // shutdown must flush fits half the default shutdown grace at a conservative disk rate.
  uint64_t max_unflushed_bytes = WriteBackBoundsForGrace(10000).max_unflushed_bytes;  // ~320 MiB
  uint64_t max_unflushed_blocks = WriteBackBoundsForGrace(10000).max_unflushed_blocks;  // 100k
  // Payload bytes all leases (Lookup with lease_ms) may hold at once; a Lookup beyond it
  // leases a shorter prefix (LeaseLimit::kNodeBytes). Default: 64 MiB.
  uint64_t max_leased_bytes = 64ull << 20;
  // ... and the leases of one tenant's namespaces (LeaseLimit::kTenantBytes).
  // Default: 32 MiB.
  uint64_t max_leased_bytes_per_tenant = 32ull << 20;
  // Per-tenant quotas on hot, cold and leased bytes (tenant_quota.h); a tenant not listed
  // has none, and its leases are bounded by max_leased_bytes_per_tenant. Open checks them
  // (ValidateTenantQuotas). Default: none.
  std::vector<TenantQuota> tenant_quotas;
  // Time source for pin and lease expiry; not owned, must outlive the store. Default: null, which
  // means common::RealClock().
  common::Clock* clock = nullptr;
  // Prefetch on Lookup (LeaseOptions::prefetch, docs/prefetch.md): payload bytes of
  // prefetches queued or being read at once; a Lookup queues no more beyond it.
  // Default: 256 MiB (a 2,048-block prefix of 128 KiB blocks).
  uint64_t prefetch_max_inflight_bytes = 256ull << 20;
  // ... and the share of the hot capacity that prefetched blocks no Get has read yet
  // (plus those queued or being read) may take. In (0, 1]. Default: 0.25.
  double prefetch_max_hot_fraction = 0.25;
  // A prefetch without a lease is dropped (queued: cancelled; read: counted wasted and
  // evictable again) this long after its Lookup; a leased one when its lease ends.
  // Default: 10 s.
  uint64_t prefetch_unread_ms = 10000;
  // Threads reading prefetched blocks from cold (0: prefetch is off). Default: 2.
  uint32_t prefetch_threads = 2;
  // Where block events go (docs/design.md §4 Tiers and eviction): one event per tier
  // change of a block, reported under the index mutex that orders the change, so a
  // consumer applying them in order knows which tiers hold each block: BlockStored
  // CPU when a block enters the hot tier (Put, promotion), BlockStored DISK when
  // it enters the cold tier (write-through, no hot room, demotion, and for every block
  // recovered on open), BlockRemoved for the tier it leaves (demotion, eviction by
  // policy, capacity or admin, Delete, a corrupt cold copy dropped on read). Standalone
  // (compacted) entries are not reported. When the store is destroyed, its hot blocks are
  // reported as BlockRemoved CPU (up to 1024 keys an event): the hot tier ends with it.
  // Not owned, must outlive the store; Publish must not block. Default: null (no events).
  events::EventSink* events = nullptr;
};

// Room for one block's payload taken before its bytes exist (TieredStore::ReservePut): a
// hot slot (or, when the hot tier has no room, a heap buffer) that a transport writes the
// payload into, then stored by naming it in BlockPut::reservation. It holds the hot room
// and the tenant's hot quota it took until that Put stores it; destroying it unstored
// gives both back. Thread-compatible: one writer, then one Put, and nothing may write
// into data() once that Put started. REQUIRES: destroyed before the TieredStore.
class PutReservation {
 public:
  virtual ~PutReservation() = default;
  // The payload's bytes (as many as ReservePut asked for; not zeroed).
  virtual std::span<uint8_t> data() = 0;
};

// One block to store.
struct BlockPut {
  std::string_view key;         // 1..kMaxKeyBytes opaque bytes
  std::string_view parent_key;  // empty for block 0 (and for standalone entries)
  uint32_t block_index = 0;     // 0 = first block of the sequence (holds the sinks)
  std::string_view payload;     // encoded blob (kv codec header) in the namespace codec
  // A standalone entry (e.g. a compacted sequence) is not part of the prefix tree and may
  // be larger than a block; it is stored in the cold tier only.
  bool standalone = false;
  // Alternative to `payload` for a blob received in pieces (e.g. network buffers): used
  // only when `payload` is empty. The blob is the concatenation of the pieces; the views
  // must stay valid until Put returns. The store copies them once, straight into the hot
  // slot, and concatenates them only when the block must go to the cold tier without a
  // hot copy (standalone, or no hot room).
  std::span<const std::string_view> pieces = {};
  // Alternative to both: the payload was written into this reservation (ReservePut on
  // the same store and namespace); payload and pieces are then ignored. The Put stores
  // it without a copy (its slot becomes the block's), or leaves it unused when the block
  // is refused (the caller's destruction of it releases the room). Not standalone.
  PutReservation* reservation = nullptr;
  // Carried into the block's BlockStored events only, never stored (empty: not sent):
  // the block's tokens, its LoRA adapter, its extra hash inputs (multimodal ids,
  // cache_salt). The views must stay valid until Put returns.
  std::span<const uint32_t> token_ids = {};
  std::optional<std::string_view> lora_name = std::nullopt;
  std::span<const std::string> extra_keys = {};
};

// Total bytes of `pieces`.
uint64_t PiecesSize(std::span<const std::string_view> pieces);
// Returns the concatenation of `pieces` (one copy).
std::string JoinPieces(std::span<const std::string_view> pieces);
// kv::ParseHeader of the blob that `pieces` concatenate to (same checks, same errors),
// without concatenating it: only the first kv::kEncodedHeaderBytes are copied when they
// straddle pieces. Thread-safe.
absl::StatusOr<kv::EncodedInfo> ParsePiecesHeader(std::span<const std::string_view> pieces);

// A refcounted read handle: while any copy is alive the payload bytes stay valid and
// the hot slot behind them is neither freed nor reused (a hot hit is zero-copy: the span
// points into the arena). Thread-compatible; copies may be used from different threads.
// REQUIRES: every copy (and every copy of owner()) is destroyed before the TieredStore.
class BlockRef {
 public:
  BlockRef() = default;
  BlockRef(std::shared_ptr<const void> owner, std::span<const uint8_t> payload, Tier tier,
           uint32_t block_index)
      : owner_(std::move(owner)), payload_(payload), tier_(tier), block_index_(block_index) {}

  std::span<const uint8_t> payload() const { return payload_; }
  Tier tier() const { return tier_; }  // tier the block was served from
  uint32_t block_index() const { return block_index_; }
  // The shared owner; gRPC slices hold a copy to keep the bytes alive.
  const std::shared_ptr<const void>& owner() const { return owner_; }

 private:
  std::shared_ptr<const void> owner_;
  std::span<const uint8_t> payload_;
  Tier tier_ = Tier::kNone;
  uint32_t block_index_ = 0;
};

// What a Lookup leases (TieredStore::Lookup).
struct LeaseOptions {
  uint64_t lease_ms = 0;  // 0 = no lease
  // false: the leading resident prefix. true: every resident key, in order (a cluster
  // node holds parts of a chain: its keys after another owner's are still in the
  // cluster-wide prefix).
  bool every_resident_key = false;
  // Prefetch (docs/prefetch.md): start promoting the cold blocks of the reported leading
  // resident prefix (of the leased part, with a lease) to hot in the background, within
  // StoreOptions' prefetch bounds and the tenant's hot quota. A later Get of such a block
  // reads it hot when the promotion finished, waits for it while it is being read, and
  // reads cold otherwise. Never changes what the Lookup reports.
  bool prefetch = false;
};

struct LookupResult {
  uint32_t prefix_blocks = 0;  // leading keys resident in some tier
  std::vector<Tier> tiers;     // per requested key; kNone when absent
  // With a lease: how many blocks it holds: the first leased_blocks resident keys (with
  // LeaseOptions::every_resident_key) or leading keys (otherwise); its id (0 when nothing
  // was leased); and which bound stopped it short, if one did.
  uint32_t leased_blocks = 0;
  uint64_t lease_id = 0;
  LeaseLimit lease_limit = LeaseLimit::kNone;
};

struct TierStats {
  uint64_t blocks = 0;
  uint64_t bytes = 0;  // hot: encoded payload bytes resident; cold: their footprint on disk
                       // (ColdTier::FootprintBytes: extents in 4 KiB units)
  uint64_t hits = 0;   // Get hits served from this tier
};

struct NamespaceStats {
  std::string name;
  std::string tenant;
  kv::CodecId codec = kv::CodecId::kFp16;
  uint64_t lookups = 0;                  // Lookup calls
  uint64_t lookup_blocks = 0;            // keys asked in Lookup calls
  uint64_t lookup_hit_blocks = 0;        // ... resident in any tier
  uint64_t lookup_prefix_hit_blocks = 0; // ... in the resident leading prefix
  uint64_t lookup_prefix_hit_blocks_hot = 0;   // ... of them hot when Lookup answered
  uint64_t lookup_prefix_hit_blocks_cold = 0;  // ... of them cold (hot + cold = prefix)
  uint64_t gets = 0;                     // blocks asked with Get
  uint64_t get_misses = 0;               // ... not served (absent or checksum failure)
  uint64_t puts = 0;                     // blocks stored
  uint64_t raw_bytes_put = 0;            // source-dtype bytes those blocks represent
  uint64_t encoded_bytes_put = 0;        // encoded bytes stored for them
  TierStats hot;
  TierStats cold;
  uint64_t distinct_blocks = 0;          // blocks resident in some tier (a block held in
                                         // both tiers counts once)
  uint64_t demotions = 0;                // hot -> cold by watermark
  uint64_t promotions = 0;               // cold -> hot on Get
  uint64_t evictions_hot_capacity = 0;   // dropped from hot under pressure (any policy)
  uint64_t evictions_cold_capacity = 0;  // deleted because cold was over capacity
  uint64_t evictions_admin = 0;          // removed by Evict / Delete
  uint64_t checksum_failures = 0;        // corrupt blocks found (deleted, served as misses)
};

// What one bounded Flush did (TieredStore::Flush with a deadline).
struct FlushProgress {
  uint64_t flushed_blocks = 0;    // blocks this call wrote to cold
  uint64_t remaining_blocks = 0;  // unflushed blocks of the namespace(s) afterwards
  uint64_t remaining_bytes = 0;   // ... and their payload bytes
  bool done = false;  // every block unflushed when the call began was written (or is gone)
};

// Counters of prefetch on Lookup (LeaseOptions::prefetch), node-wide.
struct PrefetchStats {
  uint64_t queued_blocks = 0;      // cold blocks a Lookup queued for prefetch
  uint64_t skipped_blocks = 0;     // ... it did not queue: over a bound or the tenant's quota
  uint64_t prefetched_blocks = 0;  // promoted to hot by a prefetch
  uint64_t hits = 0;               // Gets that found the block hot because of a prefetch
  uint64_t wasted_evicted = 0;     // prefetched blocks that left hot before any Get read them
  uint64_t wasted_expired = 0;     // ... whose lease or prefetch_unread_ms ended unread
  uint64_t cancelled = 0;          // queued or in flight, dropped: lease ended, block gone
                                   // or changed tier, no room, or its Get read it itself
  uint64_t failed = 0;             // cold read failed (the Get reports it, if one comes)
  uint64_t get_waits = 0;          // Gets that waited for an in-flight prefetch of the block
  uint64_t get_wait_us = 0;        // ... total microseconds they waited
  uint64_t inflight_bytes = 0;     // payload bytes queued or being read now
  uint64_t unread_bytes = 0;       // payload bytes prefetched and not read yet, now
};

struct StoreStats {
  std::string hot_allocator;  // "cuda", "mlock" or "malloc": what the arena really uses
  uint64_t hot_capacity_bytes = 0;
  uint64_t hot_used_bytes = 0;
  uint64_t cold_capacity_bytes = 0;
  uint64_t cold_used_bytes = 0;
  uint64_t index_entries = 0;        // keys in the prefix index (resident blocks + ghosts)
  uint64_t index_memory_bytes = 0;   // heap bytes of the index (entries + hash table)
  uint64_t policy_memory_bytes = 0;  // heap bytes of the hot policy's state
  uint64_t hot_slot_memory_bytes = 0;  // heap bytes of the hot tier's slot table
  uint64_t write_back_memory_bytes = 0;  // heap bytes of the write-back queue (~4 per
                                         // unflushed block)
  LeaseStats leases;                 // leases granted by Lookup (node-wide)
  PrefetchStats prefetch;            // prefetch on Lookup (node-wide)
  uint64_t unflushed_blocks = 0;     // hot blocks without a cold copy (write-back debt)
  uint64_t unflushed_bytes = 0;      // ... their payload bytes
  uint64_t max_unflushed_bytes = 0;  // StoreOptions bounds (0 = unbounded)
  uint64_t max_unflushed_blocks = 0;
  ColdTierRecovery cold_recovery;    // what the cold tier dropped at open (damaged WAL)
  std::vector<NamespaceStats> namespaces;  // sorted by name
  // Every tenant with a namespace or a quota, sorted by name.
  std::vector<TenantStats> tenants;
};

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
