// HotTier: the hot tier's slots (docs/design.md §4 Tiers and eviction). Owns the
// HotArena and a table of slots carved from it; each slot holds one block's payload and
// is reference counted on the model of leveldb's util/cache.cc handles: a slot is freed
// only when no index entry owns it and no reader holds it, so the bytes behind a
// BlockRef stay valid (and are never reused) however the block moves meanwhile.
//
// References: Allocate returns a slot with one reference held by the caller; Acquire and
// NewRef take more; Release drops one. Own / Disown mark whether an index entry points at
// the slot (which entry is the index's to know: Entry::slot); Own turns the allocator's
// reference into the entry's. Bytes of a slot may be written without any lock by whoever allocated
// it, until it is published (Own); after that they are read-only.
//
// Memory: 16 bytes per slot (offset and size in HotArena::kAlignment granules, so the
// arena is at most 1 TiB) in a ChunkedTable of 4,096-slot chunks (MemoryBytes counts
// them). A slot keeps no checksum: the XXH3 of a payload is computed when it goes cold.
//
// Thread-safe: an internal mutex guards the slot table and the arena. Lock order: a
// caller may hold TieredStoreImpl's index mutex while calling in; HotTier never calls out.
#ifndef KVTIER_STORAGE_HOT_TIER_H_
#define KVTIER_STORAGE_HOT_TIER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "storage/chunked_table.h"
#include "storage/hot_arena.h"
#include "storage/store_types.h"

namespace kvtier::storage {

using SlotId = uint32_t;

class HotTier {
 public:
  // What a reference to a slot sees. `data` stays valid while the reference is held.
  struct SlotView {
    uint8_t* data = nullptr;
    uint64_t alloc_bytes = 0;    // capacity of the slot
    uint32_t payload_bytes = 0;  // bytes of the block (set by SetPayload)
  };

  // The largest arena a slot's granule offset can address.
  static constexpr uint64_t kMaxCapacityBytes = (uint64_t{1} << 32) * HotArena::kAlignment;

  // Creates the arena (HotArena::Create: same arguments, same errors; INVALID_ARGUMENT
  // naming hot_capacity_bytes above kMaxCapacityBytes).
  static absl::StatusOr<std::unique_ptr<HotTier>> Create(uint64_t capacity_bytes,
                                                         std::string_view allocator);
  HotTier(const HotTier&) = delete;
  HotTier& operator=(const HotTier&) = delete;
  // REQUIRES: no BlockRef from NewRef is alive.
  ~HotTier() = default;

  uint64_t capacity_bytes() const { return capacity_bytes_; }
  const char* allocator_name() const { return allocator_name_; }
  // Bytes in allocated slots (rounded to HotArena::kAlignment).
  uint64_t used_bytes() const ABSL_LOCKS_EXCLUDED(mu_);
  // Heap bytes of the slot table (chunks and free list; the arena not included).
  size_t MemoryBytes() const ABSL_LOCKS_EXCLUDED(mu_);

  // Returns a new slot of at least `bytes` (alloc_bytes rounded up to
  // HotArena::kAlignment, payload_bytes 0) holding one
  // reference for the caller, or nullopt when no free extent is large enough.
  std::optional<SlotId> Allocate(uint64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);
  // Takes a reference and returns the slot's current view. REQUIRES: the caller holds a
  // reference or knows the slot is owned (and keeps it so for the call).
  SlotView Acquire(SlotId slot) ABSL_LOCKS_EXCLUDED(mu_);
  // Returns the slot's view without taking a reference (same REQUIRES as Acquire).
  SlotView View(SlotId slot) const ABSL_LOCKS_EXCLUDED(mu_);
  // Drops a reference; frees the slot when it was the last and no entry owns it.
  void Release(SlotId slot) ABSL_LOCKS_EXCLUDED(mu_);
  // Returns a read handle (holding its own reference) on the slot's payload.
  BlockRef NewRef(SlotId slot, Tier tier, uint32_t block_index) ABSL_LOCKS_EXCLUDED(mu_);

  // Sets the payload size of a slot being filled.
  void SetPayload(SlotId slot, uint32_t payload_bytes) ABSL_LOCKS_EXCLUDED(mu_);

  // An index entry now points at the slot, taking over the caller's reference (the one
  // Allocate returned); returns the slot's payload_bytes. One lock for what Own, View and
  // Release would take three for (the Put path's, per block). REQUIRES: the caller holds
  // a reference.
  uint32_t Own(SlotId slot) ABSL_LOCKS_EXCLUDED(mu_);
  // No index entry points at the slot any more (it is freed once no reference remains);
  // returns its payload_bytes.
  uint32_t Disown(SlotId slot) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Slot {
    uint32_t offset_granules = 0;  // offset / HotArena::kAlignment
    uint32_t alloc_granules = 0;   // capacity / HotArena::kAlignment
    uint32_t payload_bytes = 0;
    uint32_t refs : 31 = 0;
    uint32_t owned : 1 = 0;  // an index entry points here
  };
  static_assert(sizeof(Slot) == 16, "hot slot grew");

  explicit HotTier(std::unique_ptr<HotArena> arena);
  SlotView ViewLocked(SlotId slot) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MaybeFreeLocked(SlotId slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Slot& SlotLocked(SlotId slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return slots_[slot]; }
  const Slot& SlotLocked(SlotId slot) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return slots_[slot];
  }

  // Constant after construction.
  const uint64_t capacity_bytes_;
  const char* const allocator_name_;
  uint8_t* const base_;

  // State below is protected by mu_.
  mutable common::Mutex mu_;
  const std::unique_ptr<HotArena> arena_ ABSL_PT_GUARDED_BY(mu_);
  ChunkedTable<Slot, 12> slots_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvtier::storage

#endif  // KVTIER_STORAGE_HOT_TIER_H_
