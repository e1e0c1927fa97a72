#include "storage/hot_arena.h"

#include <dlfcn.h>
#include <sys/mman.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/strings.h"

namespace kvtier::storage {
namespace {

// cudaError_t is an int-sized enum; 0 is cudaSuccess.
using CudaGetDeviceCountFn = int (*)(int*);
using CudaHostAllocFn = int (*)(void**, size_t, unsigned int);
using CudaFreeHostFn = int (*)(void*);

struct CudaAlloc {
  void* lib = nullptr;
  void* free_fn = nullptr;
  uint8_t* ptr = nullptr;
};

// Tries cudaHostAlloc through a dlopen'ed libcudart. Returns ptr == nullptr (and closes
// the library) when there is no runtime, no driver or no device.
CudaAlloc TryCudaHostAlloc(uint64_t size) {
  CudaAlloc out;
  for (const char* name : {"libcudart.so", "libcudart.so.13", "libcudart.so.12",
                           "/usr/local/cuda/lib64/libcudart.so"}) {
    out.lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (out.lib != nullptr) break;
  }
  if (out.lib == nullptr) return out;
  auto count_fn = reinterpret_cast<CudaGetDeviceCountFn>(dlsym(out.lib, "cudaGetDeviceCount"));
  auto alloc_fn = reinterpret_cast<CudaHostAllocFn>(dlsym(out.lib, "cudaHostAlloc"));
  auto free_fn = reinterpret_cast<CudaFreeHostFn>(dlsym(out.lib, "cudaFreeHost"));
  int devices = 0;
  void* ptr = nullptr;
  if (count_fn != nullptr && alloc_fn != nullptr && free_fn != nullptr &&
      count_fn(&devices) == 0 && devices > 0 &&
      alloc_fn(&ptr, size, /*cudaHostAllocDefault=*/0) == 0 && ptr != nullptr) {
    out.ptr = static_cast<uint8_t*>(ptr);
    out.free_fn = reinterpret_cast<void*>(free_fn);
    return out;
  }
  dlclose(out.lib);
  out.lib = nullptr;
  return out;
}

}  // namespace

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
  if (allocator == "auto" || allocator == "cuda") {
    CudaAlloc cuda = TryCudaHostAlloc(capacity);
    if (cuda.ptr != nullptr) {
      // Pinned already, but touch every page so the first copies do not fault.
      std::memset(cuda.ptr, 0, capacity);
      return std::unique_ptr<HotArena>(
          new HotArena(cuda.ptr, capacity, "cuda", cuda.lib, cuda.free_fn));
    }
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
      new HotArena(static_cast<uint8_t*>(ptr), capacity, name, nullptr, nullptr));
}

HotArena::HotArena(uint8_t* base, uint64_t capacity, const char* allocator, void* cuda_lib,
                   void* cuda_free)
    : base_(base),
      capacity_(capacity),
      allocator_(allocator),
      cuda_lib_(cuda_lib),
      cuda_free_(cuda_free) {
  InsertFree(0, capacity_);
}

HotArena::~HotArena() {
  if (cuda_lib_ != nullptr) {
    reinterpret_cast<CudaFreeHostFn>(cuda_free_)(base_);
    dlclose(cuda_lib_);
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
