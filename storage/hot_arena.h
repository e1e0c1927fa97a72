// HotArena: the hot tier's memory. One region of host memory allocated once at start and
// touched up front (a copy into never-touched pages runs at about a third of the speed),
// carved into slots by a best-fit extent allocator.
//
// Allocator chain for "auto": cudaHostAlloc (pinned for DMA) when a CUDA runtime and a
// device are present -- libcudart is loaded with dlopen, so the binary never needs CUDA
// and a machine without a driver fails over in well under a millisecond -- else
// mmap + mlock (needs CAP_IPC_LOCK or a large RLIMIT_MEMLOCK), else plain memory.
// allocator_name() says which one is in use: "cuda", "mlock" or "malloc".
//
// Thread-compatible: the owner (HotTier, hot_tier.h) serializes calls with its mutex. The
// bytes of an allocated slot may be read and written without that mutex by whoever owns
// the slot.
#ifndef KVTIER_STORAGE_HOT_ARENA_H_
#define KVTIER_STORAGE_HOT_ARENA_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/cuda_runtime.h"

namespace kvtier::storage {

class HotArena {
 public:
  // Slots start and end on this boundary.
  static constexpr uint64_t kAlignment = 256;

  // Allocates and touches `capacity_bytes` (> 0) with `allocator` ("auto", "cuda",
  // "mlock", "malloc"; a forced allocator that is unavailable falls back like auto).
  // INVALID_ARGUMENT for an unknown allocator name or zero capacity; RESOURCE_EXHAUSTED
  // when no allocator can provide the memory.
  static absl::StatusOr<std::unique_ptr<HotArena>> Create(uint64_t capacity_bytes,
                                                          std::string_view allocator);
  ~HotArena();
  HotArena(const HotArena&) = delete;
  HotArena& operator=(const HotArena&) = delete;

  uint8_t* base() const { return base_; }
  uint64_t capacity_bytes() const { return capacity_; }
  // Bytes in allocated slots (rounded to kAlignment). Never exceeds capacity_bytes().
  uint64_t used_bytes() const { return used_; }
  const char* allocator_name() const { return allocator_; }

  // Returns the rounded size Allocate(size) would take.
  static uint64_t RoundUp(uint64_t size) { return (size + kAlignment - 1) & ~(kAlignment - 1); }

  // Returns the offset of a free slot of RoundUp(size) bytes (best fit), or nullopt when
  // no free extent is large enough.
  std::optional<uint64_t> Allocate(uint64_t size);
  // Returns a slot to the free extents (coalescing). REQUIRES: (offset, size) came from
  // Allocate(size) and was not freed since.
  void Free(uint64_t offset, uint64_t size);
  // Size of the largest free extent.
  uint64_t LargestFree() const;

 private:
  HotArena(uint8_t* base, uint64_t capacity, const char* allocator,
           const common::CudaRuntime* cuda);
  void InsertFree(uint64_t offset, uint64_t size);
  void EraseFree(std::map<uint64_t, uint64_t>::iterator it);

  uint8_t* const base_;
  const uint64_t capacity_;
  const char* const allocator_;
  const common::CudaRuntime* const cuda_;  // set when allocator_ == "cuda"
  uint64_t used_ = 0;
  std::map<uint64_t, uint64_t> free_by_offset_;       // offset -> size
  std::multimap<uint64_t, uint64_t> free_by_size_;    // size -> offset
};

}  // namespace kvtier::storage

#endif  // KVTIER_STORAGE_HOT_ARENA_H_
