#include "storage/hot_arena.h"

#include <sys/mman.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/strings.h"

namespace kvtier::storage {

absl::StatusOr<std::unique_ptr<HotArena>> HotArena::Create(uint64_t capacity_bytes,
                                                           std::string_view allocator) {
  if (capacity_bytes == 0) {
    return absl::InvalidArgumentError("hot_capacity_bytes must be positive");
  }
  if (allocator != "auto" && allocator != "cuda" && allocator != "mlock" &&
      allocator != "malloc") {
    return absl::InvalidArgumentError(absl::StrCat(
        "hot_allocator must be auto, cuda, mlock or malloc, got '", Sv(allocator), "'"));
  }
  const uint64_t capacity = RoundUp(capacity_bytes);
  const common::CudaRuntime* cuda = common::LoadCudaRuntime();
  void* pinned = nullptr;
  if ((allocator == "auto" || allocator == "cuda") && cuda != nullptr &&
      cuda->host_alloc(&pinned, capacity, /*cudaHostAllocDefault=*/0) == 0 && pinned != nullptr) {
    // Pinned already, but touch every page so the first copies do not fault.
    std::memset(pinned, 0, capacity);
    return std::unique_ptr<HotArena>(
        new HotArena(static_cast<uint8_t*>(pinned), capacity, "cuda", cuda));
  }
  void* ptr = mmap(nullptr, capacity, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (ptr == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("hot arena: mmap of ", capacity, " bytes failed: ", strerror(errno)));
  }
  const char* name = "malloc";
  if (allocator != "malloc" && mlock(ptr, capacity) == 0) name = "mlock";
  // MAP_POPULATE is best effort; write every page so none is faulted in by a Put.
  std::memset(ptr, 0, capacity);
  return std::unique_ptr<HotArena>(
      new HotArena(static_cast<uint8_t*>(ptr), capacity, name, nullptr));
}

HotArena::HotArena(uint8_t* base, uint64_t capacity, const char* allocator,
                   const common::CudaRuntime* cuda)
    : base_(base), capacity_(capacity), allocator_(allocator), cuda_(cuda) {
  InsertFree(0, capacity_);
}

HotArena::~HotArena() {
  if (cuda_ != nullptr) {
    cuda_->free_host(base_);
  } else {
    munmap(base_, capacity_);  // also unlocks
  }
}

void HotArena::InsertFree(uint64_t offset, uint64_t size) {
  free_by_offset_.emplace(offset, size);
  free_by_size_.emplace(size, offset);
}

void HotArena::EraseFree(std::map<uint64_t, uint64_t>::iterator it) {
  auto [lo, hi] = free_by_size_.equal_range(it->second);
  for (auto s = lo; s != hi; ++s) {
    if (s->second == it->first) {
      free_by_size_.erase(s);
      break;
    }
  }
  free_by_offset_.erase(it);
}

std::optional<uint64_t> HotArena::Allocate(uint64_t size) {
  size = RoundUp(size == 0 ? 1 : size);
  auto fit = free_by_size_.lower_bound(size);
  if (fit == free_by_size_.end()) return std::nullopt;
  const uint64_t offset = fit->second;
  const uint64_t extent = fit->first;
  free_by_size_.erase(fit);
  free_by_offset_.erase(offset);
  if (extent > size) InsertFree(offset + size, extent - size);
  used_ += size;
  return offset;
}

void HotArena::Free(uint64_t offset, uint64_t size) {
  size = RoundUp(size == 0 ? 1 : size);
  KVTIER_CHECK(offset + size <= capacity_ && used_ >= size) << "bad hot slot free";
  used_ -= size;
  uint64_t start = offset;
  uint64_t end = offset + size;
  auto next = free_by_offset_.lower_bound(offset);
  if (next != free_by_offset_.end() && next->first == end) {
    end += next->second;
    auto victim = next++;
    EraseFree(victim);
  }
  if (next != free_by_offset_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      EraseFree(prev);
    }
  }
  InsertFree(start, end - start);
}

uint64_t HotArena::LargestFree() const {
  return free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
}

}  // namespace kvtier::storage
