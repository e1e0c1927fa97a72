// BulkCopy: the copy of a block payload into memory its copier does not read again (the
// shared region a server reads from, a hot slot, a caller's buffer a GPU DMA reads).
// Copies of kBulkCopyStreamingBytes or more use non-temporal (streaming) stores on x86-64,
// so a 2 MiB payload goes to memory without evicting the copier's working set, which a
// cached copy would (the reader is another process or a later call, so the cache gains
// nothing). Smaller copies, and other architectures, are memcpy.
//
// Measured (docs/performance.md, "Streaming payload copies"): the same-node 2 MiB put / get of
// `kvtier bench` on the 2-core VM, where clients and server share the caches.
//
// Thread-safe (a pure function). The ranges must not overlap.
#ifndef KVTIER_COMMON_BULK_COPY_H_
#define KVTIER_COMMON_BULK_COPY_H_

#include <cstddef>

namespace kvtier::common {

inline constexpr size_t kBulkCopyStreamingBytes = size_t{1} << 20;

// Copies n bytes from src to dst, as memcpy.
void BulkCopy(void* dst, const void* src, size_t n);

}  // namespace kvtier::common

#endif  // KVTIER_COMMON_BULK_COPY_H_
