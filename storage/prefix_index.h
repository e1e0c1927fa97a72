// PrefixIndex: the store's index of every block it knows (docs/design.md §4 Tiers and
// eviction). One 60-byte Entry per key in a chunked table (ChunkedTable), found through
// a hash set of 32-bit ids (the set hashes the key stored with the entry, so it holds 4
// bytes and a control byte per slot; its arrays are mapped, so the one a doubling
// replaces leaves the RSS: MmapAllocator).
// An entry links to its parent; the index keeps, per entry, how many children it has
// and how many of those are in the hot tier, and a list of the cold leaves (entries with
// a cold record and no child) in least-recently-used order, which is where cold-capacity
// eviction takes victims.
//
// Lifecycle: an entry exists while it is resident (kHot or kCold), busy (kBusy), or has
// children. An entry with none of these flags but with children is a *ghost*: kept so
// the prefix structure (and sink protection) survives deletes and out-of-order puts.
// MaybeFree frees a childless ghost and walks up to ghosts it leaves childless.
//
// Ids are reused after an entry is freed. Residency flags (kCold, kPinned, kBusy,
// kEligible, kStandalone) are the caller's to set on at(id).flags; kHot is set only
// through SetHot (it drives the parent's hot child count) and kUsed / kInColdList only
// by the index.
//
// Thread-compatible: TieredStoreImpl calls it only while holding its index mutex. Not
// copyable or movable (the hash set points back at the entry table).
#ifndef KVTIER_STORAGE_PREFIX_INDEX_H_
#define KVTIER_STORAGE_PREFIX_INDEX_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string_view>

#include "absl/container/flat_hash_set.h"
#include "storage/chunked_table.h"
#include "storage/eviction_policy.h"
#include "storage/mmap_allocator.h"
#include "storage/store_types.h"

namespace kvtier::storage {

// "No entry": the parent of a root, the end of the cold list. Same value as
// kInvalidBlock, so entry ids are the policy's BlockIds.
inline constexpr BlockId kNoEntry = kInvalidBlock;

// One index entry: 60 bytes, the key included when it has at most kInlineKeyBytes (the
// canonical 16-byte prefix keys of client/python/kvtier/keys.py); a longer key adds a
// 32-byte long-key cell. Links are entry ids.
struct Entry {
  static constexpr uint8_t kUsed = 1;  // the table slot is allocated
  static constexpr uint8_t kHot = 2;   // payload in the hot tier (slot)
  static constexpr uint8_t kCold = 4;  // a record for the current payload is cold
  static constexpr uint8_t kPinned = 8;
  static constexpr uint8_t kBusy = 16;      // being demoted / copied to cold
  static constexpr uint8_t kEligible = 32;  // announced to the policy as a candidate
  static constexpr uint8_t kInColdList = 64;
  static constexpr uint8_t kStandalone = 128;
  static constexpr size_t kInlineKeyBytes = 16;

 private:
  friend class PrefixIndex;
  // The key when key_len <= kInlineKeyBytes, else the id of its long-key cell. First,
  // so that a lookup's key compare and its ns / flags reads share a cache line mostly.
  char key_[kInlineKeyBytes];

 public:
  uint8_t key_len;  // the key is PrefixIndex::key(id)
  uint8_t flags;
  uint16_t ns;
  uint32_t parent;  // kNoEntry when none
  uint32_t block_index;
  uint32_t slot;  // hot slot id when kHot
  uint32_t payload_bytes;
  uint32_t cold_bytes;  // when kCold: its footprint in the cold tier (ColdTier::FootprintBytes)
  uint32_t hits;
  uint32_t recency;  // low 32 bits of the tick of the last access
  float attention;

  bool resident() const { return flags & (kHot | kCold); }
  // Child entries in the index (resident or ghost), and how many of them are hot.
  uint32_t children() const { return flags & kInColdList ? 0 : links_[0]; }
  uint32_t hot_children() const { return flags & kInColdList ? 0 : links_[1]; }
  // The next more recently used cold leaf (kNoEntry at the end or when not listed).
  uint32_t cold_next() const { return flags & kInColdList ? links_[1] : kNoEntry; }

 private:
  // A listed cold leaf has no child, so the two words are either its cold list links
  // (prev, next: kInColdList) or its child counts (children, hot_children: otherwise).
  uint32_t links_[2];
};
static_assert(sizeof(Entry) == 60, "index entry grew");

class PrefixIndex {
 public:
  // Called after an entry's child counts changed, so the caller can re-evaluate the
  // entry (eviction eligibility). Called only from within PrefixIndex methods.
  using LinksChanged = std::function<void(BlockId id)>;

  explicit PrefixIndex(LinksChanged on_links_changed);
  PrefixIndex(const PrefixIndex&) = delete;
  PrefixIndex& operator=(const PrefixIndex&) = delete;

  // REQUIRES: id names a used entry (or one the caller keeps alive with kBusy).
  Entry& at(BlockId id) { return entries_[id]; }
  const Entry& at(BlockId id) const { return entries_[id]; }
  // Returns the entry's key, valid until the entry is freed. Same REQUIRES as at().
  std::string_view key(BlockId id) const;

  // Returns the entry of (ns, key), or kNoEntry.
  BlockId Find(uint16_t ns, std::string_view key) const;
  // Find for the key after `prev` in a prefix chain: tries entry prev + 1 before the hash
  // set, since a chain put in order usually got consecutive ids (a Lookup of a 2,048-block
  // chain then misses the cache once per block instead of about three times).
  BlockId FindAfter(uint16_t ns, std::string_view key, BlockId prev) const;
  // Starts loading the hash-set slots Find(ns, key) and an insert of it would touch, so a
  // batch that prefetches a few keys ahead overlaps their cache misses.
  void Prefetch(uint16_t ns, std::string_view key) const { ids_.prefetch(Ref(ns, key)); }
  // Returns the entry of (ns, key), creating an empty (ghost) one when absent.
  // REQUIRES: 1 <= key.size() <= kMaxKeyBytes.
  BlockId FindOrCreate(uint16_t ns, std::string_view key);

  // Every entry id is below id_limit(); ids without Entry::kUsed are free.
  uint32_t id_limit() const { return entries_.id_limit(); }
  // Number of entries (resident and ghosts).
  size_t size() const { return ids_.size(); }
  // Heap bytes of the entry and long-key tables and the hash set.
  size_t MemoryBytes() const;

  // Links `id` under `parent` (kNoEntry: a root), updating both parents' child counts;
  // an old parent left a childless ghost is freed.
  void SetParent(BlockId id, BlockId parent);
  // Frees `id` if it is a childless ghost, then walks up the parents.
  void MaybeFree(BlockId id);
  // Sets or clears Entry::kHot and the parent's hot child count.
  void SetHot(BlockId id, bool hot);

  // Puts `id` in the cold leaf list if it has a cold record and no child (at the least
  // recently used end when at_head), or takes it out otherwise.
  void UpdateColdList(BlockId id, bool at_head);
  // Moves a listed entry to the most recently used end.
  void TouchCold(BlockId id);
  // The least recently used cold leaf (follow at(id).cold_next()), or kNoEntry.
  BlockId cold_head() const { return cold_head_; }

 private:
  struct LongKey {
    char bytes[kMaxKeyBytes];
  };

  // A hash-set slot: the entry id in the low 32 bits and 32 bits of the key's hash in the
  // high ones, so a rehash never reads the entry (at 10^7 blocks each such read missed the
  // cache, a tenth of a Put's time) and a probe reads an entry only for a matching hash.
  using IdSlot = uint64_t;
  static uint32_t KeyHash(uint16_t ns, std::string_view key);
  static IdSlot SlotOf(BlockId id, uint32_t hash) { return uint64_t{hash} << 32 | id; }
  struct KeyRef {
    uint16_t ns;
    std::string_view key;
    uint32_t hash;  // KeyHash(ns, key)
  };
  static KeyRef Ref(uint16_t ns, std::string_view key) { return {ns, key, KeyHash(ns, key)}; }
  struct IdHash {
    using is_transparent = void;
    size_t operator()(IdSlot s) const { return Spread(static_cast<uint32_t>(s >> 32)); }
    size_t operator()(const KeyRef& k) const { return Spread(k.hash); }
    static size_t Spread(uint32_t h);
  };
  struct IdEq {
    using is_transparent = void;
    const PrefixIndex* index;
    bool operator()(IdSlot a, IdSlot b) const { return a == b; }
    bool operator()(IdSlot a, const KeyRef& b) const;
    bool operator()(const KeyRef& a, IdSlot b) const { return (*this)(b, a); }
  };

  // Creates the entry of ref (which Find did not find).
  BlockId NewEntry(const KeyRef& ref);
  void ColdUnlink(BlockId id);
  void ColdAppend(BlockId id, bool at_head);

  const LinksChanged on_links_changed_;
  ChunkedTable<Entry, 12> entries_;  // 240 KiB chunks: at most that much slack
  ChunkedTable<LongKey, 10> long_keys_;
  absl::flat_hash_set<IdSlot, IdHash, IdEq, MmapAllocator<IdSlot>> ids_;
  BlockId cold_head_ = kNoEntry;  // least recently used cold leaf
  BlockId cold_tail_ = kNoEntry;
};

}  // namespace kvtier::storage

#endif  // KVTIER_STORAGE_PREFIX_INDEX_H_
