#include "storage/hot_tier.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/mutex.h"

namespace kvtier::storage {

absl::StatusOr<std::unique_ptr<HotTier>> HotTier::Create(uint64_t capacity_bytes,
                                                         std::string_view allocator) {
  if (capacity_bytes > kMaxCapacityBytes) {
    return absl::InvalidArgumentError(absl::StrCat("hot_capacity_bytes must be at most ",
                                                   kMaxCapacityBytes, ", got ", capacity_bytes));
  }
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

size_t HotTier::MemoryBytes() const {
  common::MutexLock lock(&mu_);
  return slots_.MemoryBytes();
}

std::optional<SlotId> HotTier::Allocate(uint64_t bytes) {
  common::MutexLock lock(&mu_);
  std::optional<uint64_t> offset = arena_->Allocate(bytes);
  if (!offset) return std::nullopt;
  const SlotId slot = slots_.Allocate();
  Slot& s = SlotLocked(slot);
  s = Slot{};
  s.offset_granules = static_cast<uint32_t>(*offset / HotArena::kAlignment);
  s.alloc_granules = static_cast<uint32_t>(HotArena::RoundUp(bytes) / HotArena::kAlignment);
  s.refs = 1;  // the caller's
  return slot;
}

HotTier::SlotView HotTier::ViewLocked(SlotId slot) const {
  const Slot& s = SlotLocked(slot);
  SlotView v;
  v.data = base_ + uint64_t{s.offset_granules} * HotArena::kAlignment;
  v.alloc_bytes = uint64_t{s.alloc_granules} * HotArena::kAlignment;
  v.payload_bytes = s.payload_bytes;
  return v;
}

HotTier::SlotView HotTier::Acquire(SlotId slot) {
  common::MutexLock lock(&mu_);
  ++SlotLocked(slot).refs;
  return ViewLocked(slot);
}

HotTier::SlotView HotTier::View(SlotId slot) const {
  common::MutexLock lock(&mu_);
  return ViewLocked(slot);
}

void HotTier::MaybeFreeLocked(SlotId slot) {
  Slot& s = SlotLocked(slot);
  if (s.owned || s.refs > 0) return;
  arena_->Free(uint64_t{s.offset_granules} * HotArena::kAlignment,
               uint64_t{s.alloc_granules} * HotArena::kAlignment);
  s = Slot{};
  slots_.Free(slot);
}

void HotTier::Release(SlotId slot) {
  common::MutexLock lock(&mu_);
  Slot& s = SlotLocked(slot);
  KVTIER_CHECK(s.refs > 0) << "hot slot reference underflow";
  --s.refs;
  MaybeFreeLocked(slot);
}

BlockRef HotTier::NewRef(SlotId slot, Tier tier, uint32_t block_index) {
  const SlotView v = Acquire(slot);
  std::shared_ptr<const void> owner(static_cast<const void*>(v.data),
                                    [this, slot](const void*) { Release(slot); });
  return BlockRef(std::move(owner), std::span<const uint8_t>(v.data, v.payload_bytes), tier,
                  block_index);
}

void HotTier::SetPayload(SlotId slot, uint32_t payload_bytes) {
  common::MutexLock lock(&mu_);
  SlotLocked(slot).payload_bytes = payload_bytes;
}

uint32_t HotTier::Own(SlotId slot) {
  common::MutexLock lock(&mu_);
  Slot& s = SlotLocked(slot);
  KVTIER_CHECK(s.refs > 0) << "hot slot owned without a reference";
  s.owned = true;
  --s.refs;
  return s.payload_bytes;
}

uint32_t HotTier::Disown(SlotId slot) {
  common::MutexLock lock(&mu_);
  Slot& s = SlotLocked(slot);
  const uint32_t payload_bytes = s.payload_bytes;
  s.owned = false;
  MaybeFreeLocked(slot);
  return payload_bytes;
}

}  // namespace kvtier::storage
