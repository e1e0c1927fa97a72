// MmapAllocator: a standard allocator for tables that grow by doubling (the prefix
// index's hash set). Arrays of kMinMappedBytes or more are mapped straight from the
// kernel and unmapped when freed, so the array a doubling leaves behind goes back to the
// system at once. From malloc it would stay resident as free heap memory whenever the
// next, larger array comes from another thread's malloc arena (kvtierd runs Puts on
// several gRPC threads: at 10^6 blocks that stranded the hash set's previous 5 MiB array).
// Smaller arrays come from operator new.
//
// Stateless and thread-safe. A failed mapping is fatal, like a failed operator new.
#ifndef KVTIER_STORAGE_MMAP_ALLOCATOR_H_
#define KVTIER_STORAGE_MMAP_ALLOCATOR_H_

#include <sys/mman.h>

#include <cstddef>
#include <new>

#include "common/logging.h"

namespace kvtier::storage {

inline constexpr size_t kMinMappedBytes = size_t{1} << 20;

template <typename T>
class MmapAllocator {
 public:
  using value_type = T;
  static_assert(alignof(T) <= 4096, "mapped arrays are page-aligned");

  MmapAllocator() = default;
  template <typename U>
  MmapAllocator(const MmapAllocator<U>&) {}  // NOLINT: rebinding is implicit by contract

  T* allocate(size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes < kMinMappedBytes) return static_cast<T*>(::operator new(bytes));
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    KVTIER_CHECK(p != MAP_FAILED) << "mmap of " << bytes << " bytes for a table failed";
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes < kMinMappedBytes) {
      ::operator delete(p);
    } else {
      munmap(p, bytes);
    }
  }

  template <typename U>
  bool operator==(const MmapAllocator<U>&) const {
    return true;
  }
};

}  // namespace kvtier::storage

#endif  // KVTIER_STORAGE_MMAP_ALLOCATOR_H_
