#include "storage/tiered_store.h"

#include <xxhash.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "storage/cold_tier.h"
#include "storage/eviction_policy.h"
#include "storage/hot_arena.h"
#include "storage/kv/compaction.h"

namespace kvtier::storage {

const char* TierName(Tier tier) {
  switch (tier) {
    case Tier::kNone:
      return "none";
    case Tier::kHot:
      return "hot";
    case Tier::kCold:
      return "cold";
  }
  return "none";
}

uint64_t PiecesSize(std::span<const std::string_view> pieces) {
  uint64_t n = 0;
  for (std::string_view p : pieces) n += p.size();
  return n;
}

std::string JoinPieces(std::span<const std::string_view> pieces) {
  std::string out;
  out.reserve(PiecesSize(pieces));
  for (std::string_view p : pieces) out.append(p);
  return out;
}

absl::StatusOr<kv::EncodedInfo> ParsePiecesHeader(std::span<const std::string_view> pieces) {
  std::array<uint8_t, kv::kEncodedHeaderBytes> header;
  size_t copied = 0;
  for (std::string_view p : pieces) {
    if (copied == header.size()) break;
    const size_t n = std::min(p.size(), header.size() - copied);
    std::memcpy(header.data() + copied, p.data(), n);
    copied += n;
  }
  return kv::ParseHeaderPrefix(std::span<const uint8_t>(header.data(), copied),
                               PiecesSize(pieces));
}

const char* EvictionPolicyName(EvictionPolicyKind kind) {
  switch (kind) {
    case EvictionPolicyKind::kLru:
      return "lru";
    case EvictionPolicyKind::kPrefixLru:
      return "prefix_lru";
    case EvictionPolicyKind::kLfu:
      return "lfu";
    case EvictionPolicyKind::kHeavyHitter:
      return "heavy_hitter";
    case EvictionPolicyKind::kReuseLru:
      return "reuse_lru";
    case EvictionPolicyKind::kAdaptive:
      return "adaptive";
  }
  return "unknown";
}

absl::StatusOr<EvictionPolicyKind> ParseEvictionPolicy(std::string_view name) {
  for (EvictionPolicyKind kind : {EvictionPolicyKind::kLru, EvictionPolicyKind::kPrefixLru,
                                  EvictionPolicyKind::kLfu, EvictionPolicyKind::kHeavyHitter,
                                  EvictionPolicyKind::kReuseLru, EvictionPolicyKind::kAdaptive}) {
    if (name == EvictionPolicyName(kind)) return kind;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "policy must be lru, prefix_lru, lfu, heavy_hitter, reuse_lru or adaptive, got '", Sv(name), "'"));
}

namespace {

bool ValidNameChars(std::string_view s) {
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '/' || c == '-';
    if (!ok) return false;
  }
  return true;
}

bool ValidCodec(kv::CodecId codec) {
  for (kv::CodecId c : kv::AllCodecs()) {
    if (c == codec) return true;
  }
  return false;
}

}  // namespace

absl::Status NamespaceOptions::Validate() const {
  if (name.empty() || name.size() > 128 || !ValidNameChars(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("name must be 1..128 chars of [A-Za-z0-9._/-], got '", name, "'"));
  }
  if (tenant.empty() || tenant.size() > 128 || !ValidNameChars(tenant)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tenant must be 1..128 chars of [A-Za-z0-9._/-], got '", tenant, "'"));
  }
  if (model_id.size() > 256) return absl::InvalidArgumentError("model_id longer than 256");
  RETURN_IF_ERROR(layout.Validate());
  if (!ValidCodec(codec)) {
    return absl::InvalidArgumentError(
        absl::StrCat("codec id ", static_cast<int>(codec), " is unknown"));
  }
  if ((codec == kv::CodecId::kFp16 && layout.dtype != kv::Dtype::kFp16) ||
      (codec == kv::CodecId::kBf16 && layout.dtype != kv::Dtype::kBf16)) {
    return absl::InvalidArgumentError(absl::StrCat("codec ", kv::CodecName(codec),
                                                   " does not match layout dtype ",
                                                   kv::DtypeName(layout.dtype)));
  }
  return absl::OkStatus();
}

namespace {

constexpr size_t kMaxKeyBytes = 32;
constexpr uint32_t kNone32 = 0xffffffffu;
constexpr int64_t kPinForever = std::numeric_limits<int64_t>::max();
constexpr size_t kNumStripes = 64;

// Entry flags.
constexpr uint8_t kUsed = 1;        // slot of the entry table is allocated
constexpr uint8_t kHot = 2;         // payload in the hot arena (slot)
constexpr uint8_t kCold = 4;        // a record for the current payload is in RocksDB
constexpr uint8_t kPinned = 8;
constexpr uint8_t kBusy = 16;       // being demoted / copied to cold
constexpr uint8_t kEligible = 32;   // announced to the policy as a candidate
constexpr uint8_t kInColdList = 64;
constexpr uint8_t kStandalone = 128;

// One index entry: 84 bytes, of which 33 are the key. Ids are 32-bit; links are ids.
// An entry with neither kHot nor kCold is a "ghost": kept only while it has children so
// the prefix structure (and sink protection) survives deletes and out-of-order puts.
struct Entry {
  char key[kMaxKeyBytes];
  uint8_t key_len;
  uint8_t flags;
  uint16_t ns;
  uint32_t parent;         // kNone32 when none
  uint32_t children;       // child entries in the index (resident or ghost)
  uint32_t hot_children;   // ... of which in the hot tier
  uint32_t block_index;
  uint32_t slot;           // hot slot id when kHot
  uint32_t payload_bytes;
  uint32_t cold_bytes;     // stored bytes when kCold
  uint32_t cold_prev;      // cold LRU-of-leaves list (when kInColdList)
  uint32_t cold_next;
  uint32_t hits;
  uint32_t recency;        // low 32 bits of the tick of the last access
  float attention;

  std::string_view key_view() const { return std::string_view(key, key_len); }
};
static_assert(sizeof(Entry) == 84, "index entry grew");

// A slot of the hot arena. Freed when no index entry owns it and no reader holds it.
struct HotSlot {
  uint64_t offset = 0;
  uint64_t alloc_bytes = 0;
  uint32_t payload_bytes = 0;
  uint32_t readers = 0;
  uint64_t checksum = 0;
  bool has_checksum = false;  // computed lazily: only a cold write needs it
  bool owned = false;  // an index entry points here
  uint32_t entry = 0;  // ... this one (when owned)
};

struct KeyRef {
  uint16_t ns;
  std::string_view key;
};

struct NsState {
  NamespaceOptions opts;
  uint16_t id = 0;
  uint64_t slot_bytes = 0;  // hot slot size of a full block
  NamespaceStats stats;
};

std::string SerializeNamespace(const NamespaceOptions& ns) {
  std::string out;
  auto put_str = [&out](std::string_view s) {
    uint32_t n = static_cast<uint32_t>(s.size());
    out.append(reinterpret_cast<const char*>(&n), 4);
    out.append(s);
  };
  auto put_u32 = [&out](uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); };
  put_u32(1);  // format version
  put_str(ns.name);
  put_str(ns.tenant);
  put_str(ns.model_id);
  put_u32(ns.layout.num_layers);
  put_u32(ns.layout.num_kv_heads);
  put_u32(ns.layout.head_dim);
  put_u32(ns.layout.tokens_per_block);
  put_u32(static_cast<uint32_t>(ns.layout.dtype));
  put_u32(ns.layout.sink_tokens);
  put_u32(static_cast<uint32_t>(ns.codec));
  put_u32(ns.keep_sinks);
  put_u32(ns.write_through);
  put_u32(ns.cold_zstd);
  put_u32(ns.sink_blocks);
  return out;
}

absl::StatusOr<NamespaceOptions> ParseNamespace(std::string_view in) {
  NamespaceOptions ns;
  bool ok = true;
  auto get_u32 = [&]() -> uint32_t {
    if (in.size() < 4) {
      ok = false;
      return 0;
    }
    uint32_t v;
    std::memcpy(&v, in.data(), 4);
    in.remove_prefix(4);
    return v;
  };
  auto get_str = [&]() -> std::string {
    uint32_t n = get_u32();
    if (!ok || in.size() < n) {
      ok = false;
      return "";
    }
    std::string s(in.substr(0, n));
    in.remove_prefix(n);
    return s;
  };
  if (get_u32() != 1) return absl::DataLossError("namespace record version is unknown");
  ns.name = get_str();
  ns.tenant = get_str();
  ns.model_id = get_str();
  ns.layout.num_layers = get_u32();
  ns.layout.num_kv_heads = get_u32();
  ns.layout.head_dim = get_u32();
  ns.layout.tokens_per_block = get_u32();
  ns.layout.dtype = static_cast<kv::Dtype>(get_u32());
  ns.layout.sink_tokens = get_u32();
  ns.codec = static_cast<kv::CodecId>(get_u32());
  ns.keep_sinks = get_u32() != 0;
  ns.write_through = get_u32() != 0;
  ns.cold_zstd = get_u32() != 0;
  ns.sink_blocks = get_u32();
  if (!ok || !in.empty()) return absl::DataLossError("namespace record is malformed");
  return ns;
}

// Returns the first field that differs, or empty.
std::string FirstDifference(const NamespaceOptions& a, const NamespaceOptions& b) {
  if (a.tenant != b.tenant) return "tenant";
  if (a.model_id != b.model_id) return "model_id";
  if (a.layout.num_layers != b.layout.num_layers) return "layout.num_layers";
  if (a.layout.num_kv_heads != b.layout.num_kv_heads) return "layout.num_kv_heads";
  if (a.layout.head_dim != b.layout.head_dim) return "layout.head_dim";
  if (a.layout.tokens_per_block != b.layout.tokens_per_block) return "layout.tokens_per_block";
  if (a.layout.dtype != b.layout.dtype) return "layout.dtype";
  if (a.layout.sink_tokens != b.layout.sink_tokens) return "layout.sink_tokens";
  if (a.codec != b.codec) return "codec";
  if (a.keep_sinks != b.keep_sinks) return "keep_sinks";
  if (a.write_through != b.write_through) return "write_through";
  if (a.cold_zstd != b.cold_zstd) return "cold_zstd";
  if (a.sink_blocks != b.sink_blocks) return "sink_blocks";
  return "";
}

class TieredStoreImpl;

// Hash and equality over entry ids that look the key up in the entry table, so the hash
// set holds 4-byte ids instead of keys.
struct IdHash {
  using is_transparent = void;
  const TieredStoreImpl* store;
  size_t operator()(uint32_t id) const;
  size_t operator()(const KeyRef& k) const {
    return XXH3_64bits_withSeed(k.key.data(), k.key.size(), k.ns);
  }
};
struct IdEq {
  using is_transparent = void;
  const TieredStoreImpl* store;
  bool operator()(uint32_t a, uint32_t b) const { return a == b; }
  bool operator()(uint32_t a, const KeyRef& b) const;
  bool operator()(const KeyRef& a, uint32_t b) const { return (*this)(b, a); }
};

class TieredStoreImpl final : public TieredStore {
 public:
  explicit TieredStoreImpl(const StoreOptions& options)
      : options_(options),
        clock_(options.clock != nullptr ? options.clock : common::RealClock()),
        index_(0, IdHash{this}, IdEq{this}) {}
  ~TieredStoreImpl() override;

  absl::Status Init();

  absl::StatusOr<NamespaceOptions> RegisterNamespace(const NamespaceOptions& ns) override;
  absl::StatusOr<NamespaceOptions> GetNamespace(std::string_view name) const override;
  std::vector<NamespaceOptions> ListNamespaces() const override;
  absl::Status Put(std::string_view ns, std::span<const BlockPut> blocks) override;
  absl::StatusOr<BlockRef> Get(std::string_view ns, std::string_view key) override;
  absl::StatusOr<LookupResult> Lookup(std::string_view ns,
                                      std::span<const std::string> keys) override;
  absl::StatusOr<uint64_t> Delete(std::string_view ns,
                                  std::span<const std::string> keys) override;
  absl::StatusOr<uint64_t> Pin(std::string_view ns, std::span<const std::string> keys,
                               uint64_t ttl_ms) override;
  absl::StatusOr<uint64_t> Unpin(std::string_view ns, std::span<const std::string> keys) override;
  absl::Status ReportScores(std::string_view ns, std::span<const std::string> keys,
                            std::span<const float> scores) override;
  absl::StatusOr<uint64_t> Evict(std::string_view ns, std::span<const std::string> keys,
                                 bool drop) override;
  absl::Status Flush(std::string_view ns) override;
  StoreStats Stats() const override;

  // For IdHash / IdEq (called with mu_ held by whoever touches index_).
  const Entry& EntryAtUnlocked(uint32_t id) const ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return chunks_[id >> kChunkShift][id & kChunkMask];
  }

 private:
  static constexpr uint32_t kChunkShift = 14;
  static constexpr uint32_t kChunkMask = (1u << kChunkShift) - 1;

  enum class DemoteMode { kWatermark, kAdmin, kCopyOnly };

  Entry& E(uint32_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return chunks_[id >> kChunkShift][id & kChunkMask];
  }
  const Entry& E(uint32_t id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return chunks_[id >> kChunkShift][id & kChunkMask];
  }
  absl::Mutex& Stripe(uint16_t ns, std::string_view key) {
    return stripes_[XXH3_64bits_withSeed(key.data(), key.size(), ns) % kNumStripes];
  }

  absl::StatusOr<NsState*> FindNs(std::string_view name) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<NsState*> FindNsLocked(std::string_view name) const ABSL_LOCKS_EXCLUDED(mu_);
  uint32_t FindEntry(uint16_t ns, std::string_view key) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint32_t NewEntry(uint16_t ns, std::string_view key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint32_t FindOrCreateEntry(uint16_t ns, std::string_view key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Frees the entry if it is a ghost without children, then walks up the parents.
  void MaybeFreeEntry(uint32_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetParent(uint32_t id, uint32_t parent) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  BlockInfo Info(const Entry& e) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Touch(uint32_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Residency transitions. They keep child counts, policy and cold list in sync.
  void EnterHot(uint32_t id, uint32_t slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LeaveHot(uint32_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EnterCold(uint32_t id, uint32_t stored_bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LeaveCold(uint32_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateEligibility(uint32_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateColdList(uint32_t id, bool at_head) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ColdUnlink(uint32_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ColdAppend(uint32_t id, bool at_head) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Hot slots.
  std::optional<uint32_t> AllocSlotLocked(uint64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseSlotLocked(uint32_t slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseReader(uint32_t slot) ABSL_LOCKS_EXCLUDED(mu_);
  BlockRef MakeHotRef(uint32_t slot, uint32_t block_index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Allocates a hot slot, demoting synchronously while the arena has no room. Returns
  // nullopt when nothing more can be demoted.
  std::optional<uint32_t> AllocSlot(uint64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);

  // Demotion. DemoteOne picks the policy's victim; returns false if there is none.
  bool DemoteOne() ABSL_LOCKS_EXCLUDED(mu_);
  uint32_t PickVictimLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes block `id` to cold (if not there) and, for kDemote, frees its hot slot, then
  // enforces the cold capacity. REQUIRES: the entry is marked kBusy by the caller.
  // kGone: a concurrent Delete / re-Put took the block out of the hot tier first.
  enum class DemoteResult { kMoved, kGone, kFailed };
  DemoteResult DemoteMarked(uint32_t id, DemoteMode mode) ABSL_LOCKS_EXCLUDED(mu_);
  DemoteResult DemoteMarkedOnly(uint32_t id, DemoteMode mode) ABSL_LOCKS_EXCLUDED(mu_);
  void DemoteUntilBelow(uint64_t target_bytes) ABSL_LOCKS_EXCLUDED(mu_);
  void EnforceColdCapacity() ABSL_LOCKS_EXCLUDED(mu_);
  void ExpirePinsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void BackgroundLoop();
  void MaybeWakeDemoter() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Removes every tier copy of `id` from the index (cold record deletion is the caller's,
  // outside mu_). Returns true if the block had a cold record.
  bool RemoveLocked(uint32_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Deletes one block everywhere, holding its stripe. Returns whether it existed.
  bool DeleteOne(NsState* ns, std::string_view key, uint64_t NamespaceStats::*counter)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Reads a cold block into a new hot slot (or a heap copy when the arena is full of
  // pinned blocks) and returns a read handle. NOT_FOUND on absence or checksum failure.
  absl::StatusOr<BlockRef> Promote(NsState* ns, std::string_view key, bool pin,
                                   int64_t pin_until_ms) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status PutOne(NsState* ns, const BlockPut& block) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Recover();

  const StoreOptions options_;
  common::Clock* const clock_;
  std::unique_ptr<ColdTier> cold_;
  std::unique_ptr<HotArena> arena_;
  std::array<absl::Mutex, kNumStripes> stripes_;  // serialize cold writes per key

  mutable absl::Mutex mu_;
  absl::CondVar demote_cv_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t demote_requests_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::unique_ptr<NsState>> namespaces_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, uint16_t> ns_by_name_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Entry[]>> chunks_ ABSL_GUARDED_BY(mu_);
  uint32_t num_entries_ ABSL_GUARDED_BY(mu_) = 0;  // high-water mark of ids
  std::vector<uint32_t> free_ids_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<uint32_t, IdHash, IdEq> index_ ABSL_GUARDED_BY(mu_);
  std::vector<HotSlot> slots_ ABSL_GUARDED_BY(mu_);
  std::vector<uint32_t> free_slots_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<EvictionPolicy> policy_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint32_t, int64_t> pins_ ABSL_GUARDED_BY(mu_);  // id -> until ms
  int64_t next_pin_expiry_ms_ ABSL_GUARDED_BY(mu_) = kPinForever;
  uint32_t cold_head_ ABSL_GUARDED_BY(mu_) = kNone32;  // least recently used cold leaf
  uint32_t cold_tail_ ABSL_GUARDED_BY(mu_) = kNone32;
  uint64_t cold_used_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t tick_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t high_bytes_ = 0;
  uint64_t low_bytes_ = 0;
  std::thread demoter_;
};

size_t IdHash::operator()(uint32_t id) const {
  const Entry& e = store->EntryAtUnlocked(id);
  return XXH3_64bits_withSeed(e.key, e.key_len, e.ns);
}

bool IdEq::operator()(uint32_t a, const KeyRef& b) const {
  const Entry& e = store->EntryAtUnlocked(a);
  return e.ns == b.ns && e.key_view() == b.key;
}

// ---------------------------------------------------------------------------------------
// Setup

absl::Status TieredStoreImpl::Init() {
  if (!(options_.low_watermark > 0 && options_.low_watermark <= options_.high_watermark &&
        options_.high_watermark <= 1.0)) {
    return absl::InvalidArgumentError(
        "watermarks must satisfy 0 < low_watermark <= high_watermark <= 1");
  }
  if (options_.cold_capacity_bytes == 0) {
    return absl::InvalidArgumentError("cold_capacity_bytes must be positive");
  }
  ASSIGN_OR_RETURN(arena_, HotArena::Create(options_.hot_capacity_bytes, options_.hot_allocator));
  high_bytes_ = static_cast<uint64_t>(options_.high_watermark * arena_->capacity_bytes());
  low_bytes_ = static_cast<uint64_t>(options_.low_watermark * arena_->capacity_bytes());
  ColdTierOptions cold_options;
  cold_options.dir = options_.data_dir;
  cold_options.sync_writes = options_.cold_sync;
  cold_options.blob_files = options_.cold_blob_files;
  ASSIGN_OR_RETURN(cold_, ColdTier::Open(cold_options));
  {
    absl::MutexLock lock(&mu_);
    policy_ = NewEvictionPolicy(options_.policy, options_.policy_options);
  }
  RETURN_IF_ERROR(Recover());
  if (options_.background_demotion) demoter_ = std::thread([this] { BackgroundLoop(); });
  if (options_.warm_from_cold) {
    std::vector<std::pair<NsState*, std::string>> warm;
    {
      absl::MutexLock lock(&mu_);
      uint64_t planned = 0;
      // Most recently used cold leaves first is unknown after restart: take index order.
      for (uint32_t id = 0; id < num_entries_ && planned < low_bytes_; ++id) {
        const Entry& e = E(id);
        if ((e.flags & kUsed) && (e.flags & kCold) && !(e.flags & kStandalone)) {
          NsState* ns = namespaces_[e.ns].get();
          planned += HotArena::RoundUp(ns->slot_bytes);
          if (planned <= low_bytes_) warm.emplace_back(ns, std::string(e.key_view()));
        }
      }
    }
    for (auto& [ns, key] : warm) {
      (void)Promote(ns, key, false, 0);
    }
  }
  return absl::OkStatus();
}

TieredStoreImpl::~TieredStoreImpl() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    demote_cv_.SignalAll();
  }
  if (demoter_.joinable()) demoter_.join();
}

absl::Status TieredStoreImpl::Recover() {
  std::vector<std::pair<uint32_t, std::string>> specs;
  RETURN_IF_ERROR(cold_->ForEachNamespace([&](uint32_t id, std::string_view spec) {
    specs.emplace_back(id, std::string(spec));
  }));
  absl::MutexLock lock(&mu_);
  for (auto& [id, spec] : specs) {
    ASSIGN_OR_RETURN(NamespaceOptions opts, ParseNamespace(spec));
    if (id > 0xffff) return absl::DataLossError("namespace id out of range");
    if (namespaces_.size() <= id) namespaces_.resize(id + 1);
    auto state = std::make_unique<NsState>();
    state->opts = opts;
    state->id = static_cast<uint16_t>(id);
    state->slot_bytes = kv::EncodedSize(opts.codec, opts.layout, opts.layout.tokens_per_block,
                                        opts.keep_sinks ? opts.layout.sink_tokens : 0);
    state->stats.name = opts.name;
    state->stats.tenant = opts.tenant;
    state->stats.codec = opts.codec;
    ns_by_name_[opts.name] = static_cast<uint16_t>(id);
    namespaces_[id] = std::move(state);
  }
  absl::Status bad;
  RETURN_IF_ERROR(cold_->ForEachBlock([&](const ColdIndexRecord& rec) {
    if (rec.ns_id >= namespaces_.size() || namespaces_[rec.ns_id] == nullptr ||
        rec.key.empty() || rec.key.size() > kMaxKeyBytes || rec.parent_key.size() > kMaxKeyBytes) {
      bad = absl::DataLossError("block index record names an unknown namespace or bad key");
      return;
    }
    const uint16_t ns = static_cast<uint16_t>(rec.ns_id);
    const uint32_t id = FindOrCreateEntry(ns, rec.key);
    Entry& e = E(id);
    e.block_index = rec.block_index;
    e.payload_bytes = rec.payload_bytes;
    if (rec.standalone) e.flags |= kStandalone;
    e.recency = static_cast<uint32_t>(++tick_);
    if (!rec.standalone && !rec.parent_key.empty() && rec.parent_key != rec.key) {
      SetParent(id, FindOrCreateEntry(ns, rec.parent_key));
    }
    EnterCold(id, rec.stored_bytes);
  }));
  RETURN_IF_ERROR(bad);
  // Ghosts whose real record never showed up (parent never stored) stay as ghosts: they
  // have children by construction.
  return absl::OkStatus();
}


// ---------------------------------------------------------------------------------------
// Namespaces

absl::StatusOr<NamespaceOptions> TieredStoreImpl::RegisterNamespace(const NamespaceOptions& ns) {
  RETURN_IF_ERROR(ns.Validate());
  absl::MutexLock lock(&mu_);
  auto it = ns_by_name_.find(ns.name);
  if (it != ns_by_name_.end()) {
    const NamespaceOptions& have = namespaces_[it->second]->opts;
    std::string diff = FirstDifference(have, ns);
    if (!diff.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "namespace '", ns.name, "' is registered with a different ", diff));
    }
    return have;
  }
  if (namespaces_.size() > 0xffff) return absl::ResourceExhaustedError("too many namespaces");
  const uint16_t id = static_cast<uint16_t>(namespaces_.size());
  // Namespace writes are rare; holding mu_ over the synced write keeps ids unique.
  RETURN_IF_ERROR(cold_->PutNamespace(id, SerializeNamespace(ns)));
  auto state = std::make_unique<NsState>();
  state->opts = ns;
  state->id = id;
  state->slot_bytes = kv::EncodedSize(ns.codec, ns.layout, ns.layout.tokens_per_block,
                                      ns.keep_sinks ? ns.layout.sink_tokens : 0);
  state->stats.name = ns.name;
  state->stats.tenant = ns.tenant;
  state->stats.codec = ns.codec;
  ns_by_name_[ns.name] = id;
  namespaces_.push_back(std::move(state));
  return ns;
}

absl::StatusOr<NsState*> TieredStoreImpl::FindNs(std::string_view name) const {
  auto it = ns_by_name_.find(std::string(name));
  if (it == ns_by_name_.end()) {
    return absl::NotFoundError(absl::StrCat("namespace '", Sv(name), "' is not registered"));
  }
  return namespaces_[it->second].get();
}

absl::StatusOr<NsState*> TieredStoreImpl::FindNsLocked(std::string_view name) const {
  absl::MutexLock lock(&mu_);
  return FindNs(name);
}

absl::StatusOr<NamespaceOptions> TieredStoreImpl::GetNamespace(std::string_view name) const {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(NsState * ns, FindNs(name));
  return ns->opts;
}

std::vector<NamespaceOptions> TieredStoreImpl::ListNamespaces() const {
  absl::MutexLock lock(&mu_);
  std::vector<NamespaceOptions> out;
  for (const auto& ns : namespaces_) {
    if (ns != nullptr) out.push_back(ns->opts);
  }
  std::sort(out.begin(), out.end(),
            [](const NamespaceOptions& a, const NamespaceOptions& b) { return a.name < b.name; });
  return out;
}

// ---------------------------------------------------------------------------------------
// Index entries

uint32_t TieredStoreImpl::FindEntry(uint16_t ns, std::string_view key) const {
  auto it = index_.find(KeyRef{ns, key});
  return it == index_.end() ? kNone32 : *it;
}

uint32_t TieredStoreImpl::NewEntry(uint16_t ns, std::string_view key) {
  uint32_t id;
  if (!free_ids_.empty()) {
    id = free_ids_.back();
    free_ids_.pop_back();
  } else {
    id = num_entries_++;
    if ((id >> kChunkShift) >= chunks_.size()) {
      chunks_.push_back(std::make_unique<Entry[]>(size_t{1} << kChunkShift));
    }
  }
  Entry& e = E(id);
  std::memset(&e, 0, sizeof(e));
  std::memcpy(e.key, key.data(), key.size());
  e.key_len = static_cast<uint8_t>(key.size());
  e.flags = kUsed;
  e.ns = ns;
  e.parent = kNone32;
  e.slot = kNone32;
  e.cold_prev = e.cold_next = kNone32;
  index_.insert(id);
  return id;
}

uint32_t TieredStoreImpl::FindOrCreateEntry(uint16_t ns, std::string_view key) {
  uint32_t id = FindEntry(ns, key);
  return id != kNone32 ? id : NewEntry(ns, key);
}

void TieredStoreImpl::SetParent(uint32_t id, uint32_t parent) {
  Entry& e = E(id);
  if (e.parent == parent) return;
  const uint32_t old = e.parent;
  const bool hot = e.flags & kHot;
  e.parent = parent;
  if (parent != kNone32) {
    Entry& p = E(parent);
    ++p.children;
    if (hot) ++p.hot_children;
    UpdateEligibility(parent);
    UpdateColdList(parent, false);
  }
  if (old != kNone32) {
    Entry& p = E(old);
    --p.children;
    if (hot) --p.hot_children;
    UpdateEligibility(old);
    UpdateColdList(old, true);
    MaybeFreeEntry(old);
  }
}

void TieredStoreImpl::MaybeFreeEntry(uint32_t id) {
  while (id != kNone32) {
    Entry& e = E(id);
    if ((e.flags & (kHot | kCold | kBusy)) || e.children > 0) return;
    const uint32_t parent = e.parent;
    index_.erase(id);
    e.flags = 0;
    free_ids_.push_back(id);
    if (parent == kNone32) return;
    Entry& p = E(parent);
    --p.children;
    UpdateEligibility(parent);
    // A parent that just became a leaf is older than the child that left: LRU end.
    UpdateColdList(parent, true);
    id = parent;
  }
}

BlockInfo TieredStoreImpl::Info(const Entry& e) const {
  BlockInfo info;
  info.block_index = e.block_index;
  info.hits = e.hits;
  info.attention = e.attention;
  info.tick = tick_;
  info.payload_bytes = e.payload_bytes;
  return info;
}

void TieredStoreImpl::Touch(uint32_t id) {
  Entry& e = E(id);
  e.recency = static_cast<uint32_t>(++tick_);
  if (e.flags & kInColdList) {
    ColdUnlink(id);
    ColdAppend(id, false);
  }
}

void TieredStoreImpl::UpdateEligibility(uint32_t id) {
  Entry& e = E(id);
  bool eligible = (e.flags & kHot) && !(e.flags & (kPinned | kBusy));
  if (eligible) {
    // The sink rule holds per tier: a sink block (index < sink_blocks) is not demoted
    // while a descendant is hot, and ColdLeaf never deletes a block with any descendant.
    // A sink whose descendants are all cold may be demoted: it stays resident (cold) and
    // its prefix whole. Counting cold descendants here would keep every conversation's
    // block 0 hot forever and crowd out reusable blocks. Structure-aware policies
    // further take hot leaves only, which implies the sink rule.
    const NsState& ns = *namespaces_[e.ns];
    const bool protected_sink = e.block_index < ns.opts.sink_blocks && e.hot_children > 0;
    eligible = policy_->structure_aware() ? e.hot_children == 0 : !protected_sink;
  }
  if (eligible == static_cast<bool>(e.flags & kEligible)) return;
  if (eligible) {
    e.flags |= kEligible;
  } else {
    e.flags &= ~kEligible;
  }
  policy_->OnEligible(id, eligible);
}

void TieredStoreImpl::ColdUnlink(uint32_t id) {
  Entry& e = E(id);
  if (e.cold_prev != kNone32) {
    E(e.cold_prev).cold_next = e.cold_next;
  } else {
    cold_head_ = e.cold_next;
  }
  if (e.cold_next != kNone32) {
    E(e.cold_next).cold_prev = e.cold_prev;
  } else {
    cold_tail_ = e.cold_prev;
  }
  e.cold_prev = e.cold_next = kNone32;
  e.flags &= ~kInColdList;
}

void TieredStoreImpl::ColdAppend(uint32_t id, bool at_head) {
  Entry& e = E(id);
  e.flags |= kInColdList;
  if (at_head) {
    e.cold_prev = kNone32;
    e.cold_next = cold_head_;
    if (cold_head_ != kNone32) E(cold_head_).cold_prev = id;
    cold_head_ = id;
    if (cold_tail_ == kNone32) cold_tail_ = id;
  } else {
    e.cold_next = kNone32;
    e.cold_prev = cold_tail_;
    if (cold_tail_ != kNone32) E(cold_tail_).cold_next = id;
    cold_tail_ = id;
    if (cold_head_ == kNone32) cold_head_ = id;
  }
}

void TieredStoreImpl::UpdateColdList(uint32_t id, bool at_head) {
  Entry& e = E(id);
  const bool want = (e.flags & kCold) && e.children == 0;
  const bool have = e.flags & kInColdList;
  if (want && !have) ColdAppend(id, at_head);
  if (!want && have) ColdUnlink(id);
}

void TieredStoreImpl::EnterHot(uint32_t id, uint32_t slot) {
  Entry& e = E(id);
  KVTIER_CHECK(!(e.flags & kHot)) << "block already hot";
  e.flags |= kHot;
  e.slot = slot;
  slots_[slot].owned = true;
  slots_[slot].entry = id;
  NsState& ns = *namespaces_[e.ns];
  ns.stats.hot.blocks++;
  ns.stats.hot.bytes += slots_[slot].payload_bytes;
  policy_->OnInsert(id, Info(e));
  if (e.parent != kNone32) {
    ++E(e.parent).hot_children;
    UpdateEligibility(e.parent);
  }
  UpdateEligibility(id);
}

void TieredStoreImpl::LeaveHot(uint32_t id) {
  Entry& e = E(id);
  if (!(e.flags & kHot)) return;
  if (e.flags & kEligible) e.flags &= ~kEligible;
  policy_->OnRemove(id);
  e.flags &= ~kHot;
  NsState& ns = *namespaces_[e.ns];
  ns.stats.hot.blocks--;
  ns.stats.hot.bytes -= slots_[e.slot].payload_bytes;
  slots_[e.slot].owned = false;
  ReleaseSlotLocked(e.slot);
  e.slot = kNone32;
  if (e.flags & kPinned) {
    e.flags &= ~kPinned;
    pins_.erase(id);
  }
  if (e.parent != kNone32) {
    --E(e.parent).hot_children;
    UpdateEligibility(e.parent);
  }
}

void TieredStoreImpl::EnterCold(uint32_t id, uint32_t stored_bytes) {
  Entry& e = E(id);
  NsState& ns = *namespaces_[e.ns];
  if (e.flags & kCold) {
    ns.stats.cold.bytes -= e.cold_bytes;
    cold_used_ -= e.cold_bytes;
  } else {
    ns.stats.cold.blocks++;
  }
  e.flags |= kCold;
  e.cold_bytes = stored_bytes;
  ns.stats.cold.bytes += stored_bytes;
  cold_used_ += stored_bytes;
  UpdateColdList(id, false);
}

void TieredStoreImpl::LeaveCold(uint32_t id) {
  Entry& e = E(id);
  if (!(e.flags & kCold)) return;
  NsState& ns = *namespaces_[e.ns];
  ns.stats.cold.blocks--;
  ns.stats.cold.bytes -= e.cold_bytes;
  cold_used_ -= e.cold_bytes;
  e.cold_bytes = 0;
  e.flags &= ~kCold;
  UpdateColdList(id, false);
}

bool TieredStoreImpl::RemoveLocked(uint32_t id) {
  Entry& e = E(id);
  const bool had_cold = e.flags & kCold;
  LeaveHot(id);
  LeaveCold(id);
  MaybeFreeEntry(id);
  return had_cold;
}

// ---------------------------------------------------------------------------------------
// Hot slots

std::optional<uint32_t> TieredStoreImpl::AllocSlotLocked(uint64_t bytes) {
  std::optional<uint64_t> offset = arena_->Allocate(bytes);
  if (!offset) return std::nullopt;
  uint32_t slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    slot = static_cast<uint32_t>(slots_.size());
    slots_.emplace_back();
  }
  HotSlot& s = slots_[slot];
  s = HotSlot{};
  s.offset = *offset;
  s.alloc_bytes = bytes;
  s.readers = 1;  // the caller's; dropped with ReleaseSlotLocked / ReleaseReader
  return slot;
}

void TieredStoreImpl::ReleaseSlotLocked(uint32_t slot) {
  HotSlot& s = slots_[slot];
  if (s.owned || s.readers > 0) return;
  arena_->Free(s.offset, s.alloc_bytes);
  s = HotSlot{};
  free_slots_.push_back(slot);
  // Room appeared: a Put waiting in AllocSlot does not wait on this, it retries.
}

void TieredStoreImpl::ReleaseReader(uint32_t slot) {
  absl::MutexLock lock(&mu_);
  KVTIER_CHECK(slots_[slot].readers > 0) << "hot slot reader underflow";
  --slots_[slot].readers;
  ReleaseSlotLocked(slot);
}

BlockRef TieredStoreImpl::MakeHotRef(uint32_t slot, uint32_t block_index) {
  HotSlot& s = slots_[slot];
  ++s.readers;
  const uint8_t* data = arena_->base() + s.offset;
  std::shared_ptr<const void> owner(static_cast<const void*>(data),
                                    [this, slot](const void*) { ReleaseReader(slot); });
  return BlockRef(std::move(owner), std::span<const uint8_t>(data, s.payload_bytes), Tier::kHot,
                  block_index);
}

std::optional<uint32_t> TieredStoreImpl::AllocSlot(uint64_t bytes) {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (HotArena::RoundUp(bytes) > arena_->capacity_bytes()) return std::nullopt;
      std::optional<uint32_t> slot = AllocSlotLocked(bytes);
      if (slot) {
        MaybeWakeDemoter();
        return slot;
      }
    }
    // No room: demote synchronously (the background demoter normally keeps headroom).
    if (!DemoteOne()) {
      // Nothing evictable now; blocks being read or demoted by others may still free
      // room, so retry once after yielding before giving up.
      absl::MutexLock lock(&mu_);
      std::optional<uint32_t> slot = AllocSlotLocked(bytes);
      if (slot) return slot;
      return std::nullopt;
    }
  }
}

// ---------------------------------------------------------------------------------------
// Demotion and eviction

void TieredStoreImpl::ExpirePinsLocked() {
  const int64_t now = clock_->NowMillis();
  if (now < next_pin_expiry_ms_) return;
  int64_t next = kPinForever;
  std::vector<uint32_t> expired;
  for (const auto& [id, until] : pins_) {
    if (until <= now) {
      expired.push_back(id);
    } else {
      next = std::min(next, until);
    }
  }
  for (uint32_t id : expired) {
    pins_.erase(id);
    E(id).flags &= ~kPinned;
    UpdateEligibility(id);
  }
  next_pin_expiry_ms_ = next;
}

uint32_t TieredStoreImpl::PickVictimLocked() {
  ExpirePinsLocked();
  uint32_t id = policy_->PickVictim();
  if (id != kInvalidBlock) return id;
  // No eligible block: the hot tier holds only pinned blocks, interior blocks and sinks
  // protected by cold descendants. Demoting keeps a block resident, so fall back to the
  // least recent unpinned hot leaf (a protected sink becomes cold, its prefix stays
  // whole), and only then to any unpinned hot block. O(hot blocks); rare.
  uint32_t best = kNone32;
  uint32_t best_age = 0;
  bool best_leaf = false;
  for (const HotSlot& s : slots_) {
    if (!s.owned) continue;
    const uint32_t i = s.entry;
    const Entry& e = E(i);
    if (!(e.flags & kHot) || (e.flags & (kPinned | kBusy))) continue;
    const bool leaf = e.hot_children == 0;
    const uint32_t age = static_cast<uint32_t>(tick_) - e.recency;
    if (best == kNone32 || (leaf && !best_leaf) || (leaf == best_leaf && age > best_age)) {
      best = i;
      best_age = age;
      best_leaf = leaf;
    }
  }
  return best;
}

bool TieredStoreImpl::DemoteOne() {
  uint32_t id;
  {
    absl::MutexLock lock(&mu_);
    id = PickVictimLocked();
    if (id == kNone32) return false;
    E(id).flags |= kBusy;
    UpdateEligibility(id);
  }
  DemoteMarked(id, DemoteMode::kWatermark);
  return true;
}

TieredStoreImpl::DemoteResult TieredStoreImpl::DemoteMarked(uint32_t id, DemoteMode mode) {
  const DemoteResult result = DemoteMarkedOnly(id, mode);
  // Also after kGone: entries skipped as busy by another thread's enforcement are
  // candidates again now.
  EnforceColdCapacity();
  return result;
}

TieredStoreImpl::DemoteResult TieredStoreImpl::DemoteMarkedOnly(uint32_t id, DemoteMode mode) {
  uint16_t ns_id;
  std::string key;
  {
    absl::MutexLock lock(&mu_);
    ns_id = E(id).ns;
    key.assign(E(id).key_view());
  }
  DemoteResult result = DemoteResult::kFailed;
  {
    absl::MutexLock stripe(&Stripe(ns_id, key));
    uint32_t slot;
    uint64_t offset, checksum;
    bool has_checksum;
    uint32_t payload_bytes;
    ColdIndexRecord rec;
    bool compress;
    bool need_write;
    {
      absl::MutexLock lock(&mu_);
      Entry& e = E(id);
      // The busy mark keeps the entry alive; a Delete or re-Put that ran before we took the
      // stripe may have changed its residency, so look again.
      if (!(e.flags & kHot)) {
        e.flags &= ~kBusy;
        MaybeFreeEntry(id);
        return DemoteResult::kGone;
      }
      slot = e.slot;
      const HotSlot& s = slots_[slot];
      offset = s.offset;
      checksum = s.checksum;
      has_checksum = s.has_checksum;
      payload_bytes = s.payload_bytes;
      need_write = !(e.flags & kCold);
      NsState& ns = *namespaces_[e.ns];
      compress = ns.opts.cold_zstd;
      rec.ns_id = e.ns;
      rec.key = key;
      if (e.parent != kNone32) rec.parent_key.assign(E(e.parent).key_view());
      rec.block_index = e.block_index;
      rec.standalone = e.flags & kStandalone;
      ++slots_[slot].readers;
    }
    absl::StatusOr<uint32_t> stored = 0u;
    const std::span<const uint8_t> bytes(arena_->base() + offset, payload_bytes);
    if (need_write) {
      // Our reader reference keeps the slot's bytes stable while we hash and write them.
      if (!has_checksum) checksum = PayloadChecksum(bytes);
      stored = cold_->PutBlock(rec, bytes, checksum, compress);
    }
    absl::MutexLock lock(&mu_);
    if (need_write && !has_checksum) {
      slots_[slot].checksum = checksum;
      slots_[slot].has_checksum = true;
    }
    --slots_[slot].readers;
    Entry& e = E(id);
    e.flags &= ~kBusy;
    NsState& ns = *namespaces_[e.ns];
    if (!stored.ok()) {
      KVTIER_LOG(WARNING) << "demotion to cold failed: " << stored.status().ToString();
      if (mode != DemoteMode::kCopyOnly) {
        // Cold cannot take it: drop it from the hot tier anyway so the arena drains.
        LeaveHot(id);
        ns.stats.evictions_hot_capacity++;
        MaybeFreeEntry(id);
      } else {
        UpdateEligibility(id);
      }
    } else {
      if (need_write) EnterCold(id, *stored);
      if (mode == DemoteMode::kWatermark) {
        LeaveHot(id);
        ns.stats.demotions++;
        ns.stats.evictions_hot_capacity++;
      } else if (mode == DemoteMode::kAdmin) {
        LeaveHot(id);
        ns.stats.evictions_admin++;
      } else {
        UpdateEligibility(id);
      }
      result = DemoteResult::kMoved;
    }
  }
  return result;
}

void TieredStoreImpl::DemoteUntilBelow(uint64_t target_bytes) {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (arena_->used_bytes() <= target_bytes || stopping_) return;
    }
    if (!DemoteOne()) return;
  }
}

void TieredStoreImpl::MaybeWakeDemoter() {
  if (arena_->used_bytes() > high_bytes_ && options_.background_demotion) {
    ++demote_requests_;
    demote_cv_.Signal();
  }
}

void TieredStoreImpl::BackgroundLoop() {
  uint64_t seen = 0;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      while (!stopping_ && demote_requests_ == seen) demote_cv_.Wait(&mu_);
      if (stopping_) return;
      seen = demote_requests_;
    }
    DemoteUntilBelow(low_bytes_);
  }
}

void TieredStoreImpl::EnforceColdCapacity() {
  while (true) {
    uint16_t ns_id;
    std::string key;
    {
      absl::MutexLock lock(&mu_);
      if (cold_used_ <= options_.cold_capacity_bytes) return;
      uint32_t id = cold_head_;
      while (id != kNone32 && (E(id).flags & kBusy)) id = E(id).cold_next;
      if (id == kNone32) return;
      ns_id = E(id).ns;
      key.assign(E(id).key_view());
    }
    absl::MutexLock stripe(&Stripe(ns_id, key));
    bool delete_record = false;
    {
      absl::MutexLock lock(&mu_);
      uint32_t id = FindEntry(ns_id, key);
      if (id == kNone32) continue;
      Entry& e = E(id);
      if (!(e.flags & kInColdList) || (e.flags & kBusy)) continue;
      NsState& ns = *namespaces_[e.ns];
      delete_record = true;
      if (e.flags & kHot) {
        LeaveCold(id);  // still resident in hot: only the copy goes
      } else {
        ns.stats.evictions_cold_capacity++;
        RemoveLocked(id);
      }
    }
    if (delete_record) {
      absl::Status st = cold_->DeleteBlock(ns_id, key);
      if (!st.ok()) KVTIER_LOG(WARNING) << "cold eviction failed: " << st.ToString();
    }
  }
}

// ---------------------------------------------------------------------------------------
// Data path

absl::Status TieredStoreImpl::Put(std::string_view ns_name, std::span<const BlockPut> blocks) {
  ASSIGN_OR_RETURN(NsState * ns, FindNsLocked(ns_name));
  for (const BlockPut& block : blocks) RETURN_IF_ERROR(PutOne(ns, block));
  return absl::OkStatus();
}

absl::Status TieredStoreImpl::PutOne(NsState* ns, const BlockPut& block) {
  if (block.key.empty() || block.key.size() > kMaxKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("key must be 1..32 bytes, got ", block.key.size()));
  }
  if (block.parent_key.size() > kMaxKeyBytes) {
    return absl::InvalidArgumentError("parent_key must be at most 32 bytes");
  }
  if (!block.standalone && block.parent_key == block.key) {
    return absl::InvalidArgumentError("parent_key must differ from key");
  }
  // A payload given as pieces is copied once, straight into the hot slot (`payload` then
  // views the slot); it is joined only when it must be contiguous without a hot copy.
  std::string joined;
  bool in_pieces = block.payload.empty() && !block.pieces.empty();
  if (in_pieces && block.standalone) {
    joined = JoinPieces(block.pieces);
    in_pieces = false;
  }
  std::span<const uint8_t> payload = kv::AsBytes(joined.empty() ? block.payload : joined);
  const uint64_t payload_size = in_pieces ? PiecesSize(block.pieces) : payload.size();
  // A standalone entry may be a compacted sequence: a compaction header (kept positions)
  // around an ordinary codec blob, which is what is checked against the namespace.
  std::span<const uint8_t> blob = payload;
  if (block.standalone && kv::IsCompactedEntry(payload)) {
    absl::StatusOr<kv::CompactedEntry> entry = kv::ParseCompactedEntry(payload);
    if (!entry.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "payload is not a valid compacted entry: ", entry.status().message()));
    }
    blob = entry->blob;
  }
  absl::StatusOr<kv::EncodedInfo> info =
      in_pieces ? ParsePiecesHeader(block.pieces) : kv::ParseHeader(blob);
  if (!info.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("payload is not a valid encoded block: ", info.status().message()));
  }
  const kv::Layout& want = ns->opts.layout;
  if (info->codec != ns->opts.codec) {
    return absl::FailedPreconditionError(absl::StrCat(
        "payload codec ", kv::CodecName(info->codec), " differs from namespace codec ",
        kv::CodecName(ns->opts.codec)));
  }
  if (info->layout.num_layers != want.num_layers) {
    return absl::FailedPreconditionError("payload layout.num_layers differs from namespace");
  }
  if (info->layout.num_kv_heads != want.num_kv_heads) {
    return absl::FailedPreconditionError("payload layout.num_kv_heads differs from namespace");
  }
  if (info->layout.head_dim != want.head_dim) {
    return absl::FailedPreconditionError("payload layout.head_dim differs from namespace");
  }
  if (info->layout.dtype != want.dtype) {
    return absl::FailedPreconditionError("payload layout.dtype differs from namespace");
  }
  if (!block.standalone && info->num_tokens > want.tokens_per_block) {
    return absl::FailedPreconditionError(
        "payload holds more tokens than layout.tokens_per_block");
  }
  if (payload_size > std::numeric_limits<uint32_t>::max()) {
    return absl::InvalidArgumentError("payload larger than 4 GiB");
  }
  const bool write_through = ns->opts.write_through || block.standalone;

  // 1. Room in the hot tier (standalone entries are cold-only), copy outside the lock.
  std::optional<uint32_t> slot;
  if (!block.standalone) {
    slot = AllocSlot(std::max<uint64_t>(ns->slot_bytes, payload_size));
  }
  if (slot) {
    uint8_t* dst;
    {
      absl::MutexLock lock(&mu_);
      HotSlot& s = slots_[*slot];
      s.payload_bytes = static_cast<uint32_t>(payload_size);
      dst = arena_->base() + s.offset;
    }
    if (in_pieces) {
      uint8_t* o = dst;
      for (std::string_view p : block.pieces) {
        if (p.empty()) continue;
        std::memcpy(o, p.data(), p.size());
        o += p.size();
      }
      // Our reader reference keeps the slot ours until it is published below.
      payload = std::span<const uint8_t>(dst, payload_size);
    } else {
      std::memcpy(dst, payload.data(), payload.size());
    }
  } else if (in_pieces) {
    joined = JoinPieces(block.pieces);  // no hot room: the cold write needs it contiguous
    payload = kv::AsBytes(joined);
  }

  // 2. Cold write (write-through, or no hot room) and publish, serialized per key.
  bool stale_cold_record = false;
  {
    absl::MutexLock stripe(&Stripe(ns->id, block.key));
    std::optional<uint32_t> stored;
    if (write_through || !slot) {
      // A hot-only Put skips the XXH3 pass: it is computed when the block goes cold.
      const uint64_t checksum = PayloadChecksum(payload);
      if (slot) {
        absl::MutexLock lock(&mu_);
        slots_[*slot].checksum = checksum;
        slots_[*slot].has_checksum = true;
      }
      ColdIndexRecord rec;
      rec.ns_id = ns->id;
      rec.key = std::string(block.key);
      rec.parent_key = block.standalone ? "" : std::string(block.parent_key);
      rec.block_index = block.block_index;
      rec.standalone = block.standalone;
      absl::StatusOr<uint32_t> st = cold_->PutBlock(rec, payload, checksum, ns->opts.cold_zstd);
      if (!st.ok()) {
        if (slot) ReleaseReader(*slot);
        return st.status();
      }
      stored = *st;
    }
    absl::MutexLock lock(&mu_);
    const uint32_t id = FindOrCreateEntry(ns->id, block.key);
    Entry& e = E(id);
    int64_t pinned_until = 0;  // a re-put keeps the key's pin
    if (e.flags & kPinned) pinned_until = pins_[id];
    if (e.flags & kHot) {
      // Same bytes as before? Only asked when the old copy also has a cold record.
      const HotSlot& old = slots_[e.slot];
      const bool same = (e.flags & kCold) && old.payload_bytes == payload.size() &&
                        std::memcmp(arena_->base() + old.offset, payload.data(),
                                    payload.size()) == 0;
      LeaveHot(id);
      if ((e.flags & kCold) && !same && !stored) stale_cold_record = true;
    } else if ((e.flags & kCold) && !stored) {
      stale_cold_record = true;  // cannot tell whether the cold copy matches
    }
    if (stale_cold_record) LeaveCold(id);
    e.block_index = block.block_index;
    e.payload_bytes = static_cast<uint32_t>(payload.size());
    if (block.standalone) {
      e.flags |= kStandalone;
    } else {
      e.flags &= ~kStandalone;
    }
    const uint32_t parent = (block.standalone || block.parent_key.empty())
                                ? kNone32
                                : FindOrCreateEntry(ns->id, block.parent_key);
    SetParent(id, parent);
    if (stored) EnterCold(id, *stored);
    Touch(id);
    if (slot) {
      EnterHot(id, *slot);
      --slots_[*slot].readers;  // the index owns it now
      if (pinned_until != 0) {
        e.flags |= kPinned;
        pins_[id] = pinned_until;
        UpdateEligibility(id);
      }
    }
    ns->stats.puts++;
    ns->stats.raw_bytes_put += info->raw_bytes;
    ns->stats.encoded_bytes_put += payload.size();
  }
  if (stale_cold_record) {
    // The old cold record holds different bytes; drop it rather than serve them.
    absl::MutexLock stripe(&Stripe(ns->id, block.key));
    bool still_stale;
    {
      absl::MutexLock lock(&mu_);
      uint32_t id = FindEntry(ns->id, block.key);
      still_stale = id == kNone32 || !(E(id).flags & kCold);
    }
    if (still_stale) RETURN_IF_ERROR(cold_->DeleteBlock(ns->id, block.key));
  }
  if (!options_.background_demotion) {
    bool over;
    {
      absl::MutexLock lock(&mu_);
      over = arena_->used_bytes() > high_bytes_;
    }
    if (over) DemoteUntilBelow(low_bytes_);
  }
  EnforceColdCapacity();
  return absl::OkStatus();
}

absl::StatusOr<BlockRef> TieredStoreImpl::Get(std::string_view ns_name, std::string_view key) {
  NsState* ns;
  {
    absl::MutexLock lock(&mu_);
    ASSIGN_OR_RETURN(ns, FindNs(ns_name));
    ns->stats.gets++;
    const uint32_t id = FindEntry(ns->id, key);
    if (id == kNone32 || !(E(id).flags & (kHot | kCold))) {
      ns->stats.get_misses++;
      return absl::NotFoundError("block not found");
    }
    Entry& e = E(id);
    if (e.flags & kHot) {
      e.hits++;
      Touch(id);
      policy_->OnAccess(id, Info(e));
      ns->stats.hot.hits++;
      return MakeHotRef(e.slot, e.block_index);
    }
  }
  return Promote(ns, key, false, 0);
}

absl::StatusOr<BlockRef> TieredStoreImpl::Promote(NsState* ns, std::string_view key, bool pin,
                                                  int64_t pin_until_ms) {
  uint32_t payload_bytes;
  {
    absl::MutexLock lock(&mu_);
    const uint32_t id = FindEntry(ns->id, key);
    if (id == kNone32 || !(E(id).flags & kCold)) {
      ns->stats.get_misses++;
      return absl::NotFoundError("block not found");
    }
    payload_bytes = E(id).payload_bytes;
  }
  const bool standalone = [&] {
    absl::MutexLock lock(&mu_);
    const uint32_t id = FindEntry(ns->id, key);
    return id != kNone32 && (E(id).flags & kStandalone);
  }();
  std::optional<uint32_t> slot;
  if (!standalone) slot = AllocSlot(std::max<uint64_t>(ns->slot_bytes, payload_bytes));
  std::string heap_copy;
  bool size_ok = true;
  uint64_t checksum = 0;
  uint8_t* dst = nullptr;
  uint64_t cap = 0;
  if (slot) {
    absl::MutexLock lock(&mu_);
    dst = arena_->base() + slots_[*slot].offset;
    cap = slots_[*slot].alloc_bytes;
  }
  absl::Status st = cold_->GetBlock(ns->id, key, [&](std::span<const uint8_t> bytes, uint64_t sum) {
    checksum = sum;  // GetBlock verified the bytes against it
    payload_bytes = static_cast<uint32_t>(bytes.size());
    if (slot) {
      if (bytes.size() > cap) {
        size_ok = false;
        return;
      }
      std::memcpy(dst, bytes.data(), bytes.size());
    } else {
      heap_copy.assign(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    }
  });
  if (st.ok() && !size_ok) st = absl::DataLossError("cold payload larger than its slot");
  if (!st.ok()) {
    if (slot) ReleaseReader(*slot);
    if (absl::IsDataLoss(st)) {
      // Never served: count, delete and report a miss.
      absl::MutexLock stripe(&Stripe(ns->id, key));
      bool delete_record = false;
      {
        absl::MutexLock lock(&mu_);
        ns->stats.checksum_failures++;
        ns->stats.get_misses++;
        const uint32_t id = FindEntry(ns->id, key);
        if (id != kNone32 && (E(id).flags & kCold) && !(E(id).flags & kBusy)) {
          delete_record = true;
          if (E(id).flags & kHot) {
            LeaveCold(id);
          } else {
            RemoveLocked(id);
          }
        }
      }
      KVTIER_LOG(WARNING) << "cold block failed verification, deleted: " << st.ToString();
      if (delete_record) (void)cold_->DeleteBlock(ns->id, key);
      return absl::NotFoundError("block not found (checksum failure)");
    }
    absl::MutexLock lock(&mu_);
    ns->stats.get_misses++;
    if (absl::IsNotFound(st)) return absl::NotFoundError("block not found");
    return st;
  }
  absl::MutexLock lock(&mu_);
  const uint32_t id = FindEntry(ns->id, key);
  if (id == kNone32 || !(E(id).flags & (kHot | kCold))) {
    // Deleted while we read: do not resurrect it.
    if (slot) {
      --slots_[*slot].readers;
      ReleaseSlotLocked(*slot);
    }
    ns->stats.get_misses++;
    return absl::NotFoundError("block not found");
  }
  Entry& e = E(id);
  e.hits++;
  Touch(id);
  ns->stats.cold.hits++;
  if (!slot) {
    auto owned = std::make_shared<std::string>(std::move(heap_copy));
    std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(owned->data()),
                                   owned->size());
    return BlockRef(std::shared_ptr<const void>(owned, owned.get()), bytes, Tier::kCold,
                    e.block_index);
  }
  HotSlot& s = slots_[*slot];
  s.payload_bytes = payload_bytes;
  s.checksum = checksum;
  s.has_checksum = true;
  if (e.flags & kHot) {
    // Someone else promoted or re-put it meanwhile: serve our copy, drop it afterwards.
    BlockRef ref = MakeHotRef(*slot, e.block_index);
    --s.readers;
    return BlockRef(ref.owner(), ref.payload(), Tier::kCold, e.block_index);
  }
  EnterHot(id, *slot);
  ns->stats.promotions++;
  if (pin) {
    e.flags |= kPinned;
    pins_[id] = pin_until_ms;
    next_pin_expiry_ms_ = std::min(next_pin_expiry_ms_, pin_until_ms);
    UpdateEligibility(id);
  }
  policy_->OnAccess(id, Info(e));
  BlockRef ref = MakeHotRef(*slot, e.block_index);
  --slots_[*slot].readers;  // the allocation's reference: the index owns the slot now
  MaybeWakeDemoter();
  return BlockRef(ref.owner(), ref.payload(), Tier::kCold, e.block_index);
}

absl::StatusOr<LookupResult> TieredStoreImpl::Lookup(std::string_view ns_name,
                                                     std::span<const std::string> keys) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(NsState * ns, FindNs(ns_name));
  LookupResult out;
  out.tiers.reserve(keys.size());
  bool prefix = true;
  uint64_t hits = 0;
  for (const std::string& key : keys) {
    const uint32_t id = FindEntry(ns->id, key);
    Tier tier = Tier::kNone;
    if (id != kNone32) {
      const uint8_t f = E(id).flags;
      tier = (f & kHot) ? Tier::kHot : (f & kCold) ? Tier::kCold : Tier::kNone;
    }
    out.tiers.push_back(tier);
    if (tier != Tier::kNone) {
      ++hits;
      if (prefix) ++out.prefix_blocks;
    } else {
      prefix = false;
    }
  }
  ns->stats.lookups++;
  ns->stats.lookup_blocks += keys.size();
  ns->stats.lookup_hit_blocks += hits;
  ns->stats.lookup_prefix_hit_blocks += out.prefix_blocks;
  return out;
}

bool TieredStoreImpl::DeleteOne(NsState* ns, std::string_view key,
                                uint64_t NamespaceStats::*counter) {
  absl::MutexLock stripe(&Stripe(ns->id, key));
  bool existed = false;
  bool had_cold = false;
  {
    absl::MutexLock lock(&mu_);
    const uint32_t id = FindEntry(ns->id, key);
    if (id != kNone32 && (E(id).flags & (kHot | kCold))) {
      existed = true;
      ns->stats.*counter += 1;
      had_cold = RemoveLocked(id);
    }
  }
  if (had_cold) {
    absl::Status st = cold_->DeleteBlock(ns->id, key);
    if (!st.ok()) KVTIER_LOG(WARNING) << "cold delete failed: " << st.ToString();
  }
  return existed;
}

absl::StatusOr<uint64_t> TieredStoreImpl::Delete(std::string_view ns_name,
                                                 std::span<const std::string> keys) {
  ASSIGN_OR_RETURN(NsState * ns, FindNsLocked(ns_name));
  uint64_t n = 0;
  for (const std::string& key : keys) {
    if (DeleteOne(ns, key, &NamespaceStats::evictions_admin)) ++n;
  }
  return n;
}

absl::StatusOr<uint64_t> TieredStoreImpl::Pin(std::string_view ns_name,
                                              std::span<const std::string> keys,
                                              uint64_t ttl_ms) {
  ASSIGN_OR_RETURN(NsState * ns, FindNsLocked(ns_name));
  const int64_t until =
      ttl_ms == 0 ? kPinForever : clock_->NowMillis() + static_cast<int64_t>(ttl_ms);
  uint64_t pinned = 0;
  for (const std::string& key : keys) {
    {
      absl::MutexLock lock(&mu_);
      const uint32_t id = FindEntry(ns->id, key);
      if (id == kNone32) continue;
      Entry& e = E(id);
      if (e.flags & kHot) {
        e.flags |= kPinned;
        pins_[id] = until;
        next_pin_expiry_ms_ = std::min(next_pin_expiry_ms_, until);
        UpdateEligibility(id);
        ++pinned;
        continue;
      }
      if (!(e.flags & kCold) || (e.flags & kStandalone)) continue;
    }
    absl::StatusOr<BlockRef> ref = Promote(ns, key, true, until);
    if (ref.ok()) {
      absl::MutexLock lock(&mu_);
      const uint32_t id = FindEntry(ns->id, key);
      if (id != kNone32 && (E(id).flags & kHot)) {
        // A concurrent promotion may have won; make sure the resident copy is pinned.
        Entry& e = E(id);
        e.flags |= kPinned;
        pins_[id] = until;
        next_pin_expiry_ms_ = std::min(next_pin_expiry_ms_, until);
        UpdateEligibility(id);
        ++pinned;
      }
    }
  }
  return pinned;
}

absl::StatusOr<uint64_t> TieredStoreImpl::Unpin(std::string_view ns_name,
                                                std::span<const std::string> keys) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(NsState * ns, FindNs(ns_name));
  uint64_t n = 0;
  for (const std::string& key : keys) {
    const uint32_t id = FindEntry(ns->id, key);
    if (id == kNone32 || !(E(id).flags & kPinned)) continue;
    E(id).flags &= ~kPinned;
    pins_.erase(id);
    UpdateEligibility(id);
    ++n;
  }
  MaybeWakeDemoter();
  return n;
}

absl::Status TieredStoreImpl::ReportScores(std::string_view ns_name,
                                           std::span<const std::string> keys,
                                           std::span<const float> scores) {
  if (keys.size() != scores.size()) {
    return absl::InvalidArgumentError("keys and scores must have the same size");
  }
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(NsState * ns, FindNs(ns_name));
  for (size_t i = 0; i < keys.size(); ++i) {
    const uint32_t id = FindEntry(ns->id, keys[i]);
    if (id == kNone32) continue;
    Entry& e = E(id);
    e.attention += scores[i];
    if (e.flags & kHot) policy_->OnScore(id, scores[i], Info(e));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> TieredStoreImpl::Evict(std::string_view ns_name,
                                                std::span<const std::string> keys, bool drop) {
  ASSIGN_OR_RETURN(NsState * ns, FindNsLocked(ns_name));
  // Targets, deepest first so a prefix never loses a block before its descendants.
  std::vector<std::pair<uint32_t, std::string>> targets;  // (depth, key)
  {
    absl::MutexLock lock(&mu_);
    absl::flat_hash_set<uint32_t> chosen;
    for (const std::string& key : keys) {
      const uint32_t id = FindEntry(ns->id, key);
      if (id != kNone32) chosen.insert(id);
    }
    const bool all = keys.empty();
    for (uint32_t id = 0; id < num_entries_; ++id) {
      const Entry& e = E(id);
      if (!(e.flags & kUsed) || e.ns != ns->id || !(e.flags & (kHot | kCold))) continue;
      uint32_t depth = 0;
      bool selected = all || chosen.contains(id);
      for (uint32_t p = e.parent; p != kNone32 && depth < (1u << 20); p = E(p).parent) {
        ++depth;
        if (drop && chosen.contains(p)) selected = true;  // descendants go too
      }
      if (!drop && !(e.flags & kHot)) selected = false;
      if (selected) targets.emplace_back(depth, std::string(e.key_view()));
    }
  }
  std::sort(targets.begin(), targets.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  uint64_t moved = 0;
  for (const auto& [depth, key] : targets) {
    if (drop) {
      if (DeleteOne(ns, key, &NamespaceStats::evictions_admin)) ++moved;
      continue;
    }
    uint32_t id;
    {
      absl::MutexLock lock(&mu_);
      id = FindEntry(ns->id, key);
      if (id == kNone32 || !(E(id).flags & kHot) || (E(id).flags & kBusy)) continue;
      Entry& e = E(id);
      if (e.flags & kPinned) {
        e.flags &= ~kPinned;
        pins_.erase(id);
      }
      e.flags |= kBusy;
      UpdateEligibility(id);
    }
    if (DemoteMarked(id, DemoteMode::kAdmin) == DemoteResult::kMoved) ++moved;
  }
  return moved;
}

absl::Status TieredStoreImpl::Flush(std::string_view ns_name) {
  std::vector<uint32_t> ids;
  {
    absl::MutexLock lock(&mu_);
    int ns_id = -1;
    if (!ns_name.empty()) {
      ASSIGN_OR_RETURN(NsState * ns, FindNs(ns_name));
      ns_id = ns->id;
    }
    for (uint32_t id = 0; id < num_entries_; ++id) {
      Entry& e = E(id);
      if ((e.flags & kHot) && !(e.flags & (kCold | kBusy)) && (ns_id < 0 || e.ns == ns_id)) {
        e.flags |= kBusy;
        UpdateEligibility(id);
        ids.push_back(id);
      }
    }
  }
  bool failed = false;
  for (uint32_t id : ids) {
    // kGone is fine: the block was deleted or replaced after Flush picked it.
    if (DemoteMarked(id, DemoteMode::kCopyOnly) == DemoteResult::kFailed) failed = true;
  }
  RETURN_IF_ERROR(cold_->SyncWal());
  if (failed) return absl::UnavailableError("flush: some blocks could not be written to cold");
  return absl::OkStatus();
}

StoreStats TieredStoreImpl::Stats() const {
  absl::MutexLock lock(&mu_);
  StoreStats out;
  out.hot_allocator = arena_->allocator_name();
  out.hot_capacity_bytes = arena_->capacity_bytes();
  out.hot_used_bytes = arena_->used_bytes();
  out.cold_capacity_bytes = options_.cold_capacity_bytes;
  out.cold_used_bytes = cold_used_;
  out.index_entries = index_.size();
  out.index_memory_bytes = index_.capacity() * (sizeof(uint32_t) + 1) +
                           chunks_.size() * (sizeof(Entry) << kChunkShift) +
                           free_ids_.capacity() * sizeof(uint32_t);
  out.policy_memory_bytes = policy_->MemoryBytes();
  for (const auto& ns : namespaces_) {
    if (ns != nullptr) out.namespaces.push_back(ns->stats);
  }
  std::sort(out.namespaces.begin(), out.namespaces.end(),
            [](const NamespaceStats& a, const NamespaceStats& b) { return a.name < b.name; });
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TieredStore>> TieredStore::Open(const StoreOptions& options) {
  auto store = std::make_unique<TieredStoreImpl>(options);
  RETURN_IF_ERROR(store->Init());
  return std::unique_ptr<TieredStore>(std::move(store));
}

}  // namespace kvtier::storage
