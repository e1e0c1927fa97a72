// The tiered store's vocabulary: the types its interface (tiered_store.h) and its
// collaborators (hot tier, prefix index, namespace records, quotas, kvtierd's request
// checks, config and metrics, the offline store model) share: tiers, limits, namespace
// and store options, block puts and read handles, lookup results and stats. Include
// this header, not the TieredStore facade, when only the types are needed
// (scripts/check_deps.sh checks it inside storage/). Value types are thread-compatible
// unless stated; the functions are thread-safe.
#ifndef KVTIER_STORAGE_STORE_TYPES_H_
#define KVTIER_STORAGE_STORE_TYPES_H_

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
#include "kv/codec.h"
#include "kv/layout.h"
#include "storage/cold_tier.h"
#include "storage/eviction_policy.h"
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
  // Cold reads of runs not in the page cache use O_DIRECT (ColdTierOptions::direct_reads;
  // docs/prefetch.md). Default: true.
  bool cold_direct_reads = true;
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
  // A reader takes queued blocks of one namespace up to this many payload bytes (at
  // least one block) and reads them with one ColdTier::MultiGetBlock; a Get of one of
  // them waits for the batch. Default: 4 MiB.
  uint64_t prefetch_batch_bytes = 4ull << 20;
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

}  // namespace kvtier::storage

#endif  // KVTIER_STORAGE_STORE_TYPES_H_
