#include "storage/hot_tier.h"

#include <utility>

#include "common/logging.h"
#include "common/mutex.h"

namespace kvtier::storage {

absl::StatusOr<std::unique_ptr<HotTier>> HotTier::Create(uint64_t capacity_bytes,
                                                         std::string_view allocator) {
  absl::StatusOr<std::unique_ptr<HotArena>> arena = HotArena::Create(capacity_bytes, allocator);
  if (!arena.ok()) return arena.status();
  return std::unique_ptr<HotTier>(new HotTier(*std::move(arena)));
}

HotTier::HotTier(std::unique_ptr<HotArena> arena)
    : capacity_bytes_(arena->capacity_bytes()),
      allocator_name_(arena->allocator_name()),
      base_(arena->base()),
      arena_(std::move(arena)) {}

uint64_t HotTier::used_bytes() const {
  common::MutexLock lock(&mu_);
  return arena_->used_bytes();
}

std::optional<SlotId> HotTier::Allocate(uint64_t bytes) {
  common::MutexLock lock(&mu_);
  std::optional<uint64_t> offset = arena_->Allocate(bytes);
  if (!offset) return std::nullopt;
  SlotId slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    slot = static_cast<SlotId>(slots_.size());
    slots_.emplace_back();
  }
  Slot& s = slots_[slot];
  s = Slot{};
  s.offset = *offset;
  s.alloc_bytes = bytes;
  s.refs = 1;  // the caller's
  return slot;
}

HotTier::SlotView HotTier::ViewLocked(SlotId slot) const {
  const Slot& s = slots_[slot];
  SlotView v;
  v.data = base_ + s.offset;
  v.alloc_bytes = s.alloc_bytes;
  v.payload_bytes = s.payload_bytes;
  if (s.has_checksum) v.checksum = s.checksum;
  return v;
}

HotTier::SlotView HotTier::Acquire(SlotId slot) {
  common::MutexLock lock(&mu_);
  ++slots_[slot].refs;
  return ViewLocked(slot);
}

HotTier::SlotView HotTier::View(SlotId slot) const {
  common::MutexLock lock(&mu_);
  return ViewLocked(slot);
}

void HotTier::MaybeFreeLocked(SlotId slot) {
  Slot& s = slots_[slot];
  if (s.owned || s.refs > 0) return;
  arena_->Free(s.offset, s.alloc_bytes);
  s = Slot{};
  free_slots_.push_back(slot);
}

void HotTier::Release(SlotId slot) {
  common::MutexLock lock(&mu_);
  KVTIER_CHECK(slots_[slot].refs > 0) << "hot slot reference underflow";
  --slots_[slot].refs;
  MaybeFreeLocked(slot);
}

BlockRef HotTier::NewRef(SlotId slot, Tier tier, uint32_t block_index) {
  const SlotView v = Acquire(slot);
  std::shared_ptr<const void> owner(static_cast<const void*>(v.data),
                                    [this, slot](const void*) { Release(slot); });
  return BlockRef(std::move(owner), std::span<const uint8_t>(v.data, v.payload_bytes), tier,
                  block_index);
}

void HotTier::SetPayload(SlotId slot, uint32_t payload_bytes, std::optional<uint64_t> checksum) {
  common::MutexLock lock(&mu_);
  Slot& s = slots_[slot];
  s.payload_bytes = payload_bytes;
  s.has_checksum = checksum.has_value();
  s.checksum = checksum.value_or(0);
}

void HotTier::SetChecksum(SlotId slot, uint64_t checksum) {
  common::MutexLock lock(&mu_);
  slots_[slot].checksum = checksum;
  slots_[slot].has_checksum = true;
}

void HotTier::Own(SlotId slot, BlockId entry) {
  common::MutexLock lock(&mu_);
  slots_[slot].owned = true;
  slots_[slot].entry = entry;
}

void HotTier::Disown(SlotId slot) {
  common::MutexLock lock(&mu_);
  slots_[slot].owned = false;
  slots_[slot].entry = kInvalidBlock;
  MaybeFreeLocked(slot);
}

void HotTier::ForEachOwned(const std::function<void(BlockId entry)>& fn) const {
  common::MutexLock lock(&mu_);
  for (const Slot& s : slots_) {
    if (s.owned) fn(s.entry);
  }
}

}  // namespace kvtier::storage
