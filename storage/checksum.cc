#include "storage/checksum.h"

#include <xxhash.h>
#if defined(__x86_64__)
// libxxhash picks the widest vector unit the CPU has (SSE2, AVX2, AVX-512) at run time;
// Debian builds the plain XXH3_64bits entry point for SSE2 only. Same hash; 1.4-1.6x the
// GiB/s out of cache on this project's AVX-512 VMs (docs/performance.md, "Store", BM_Checksum).
#include <xxh_x86dispatch.h>
#endif

namespace kvtier::storage {

uint64_t PayloadChecksum(std::span<const uint8_t> bytes) {
#if defined(__x86_64__)
  return XXH3_64bits_dispatch(bytes.data(), bytes.size());
#else
  return XXH3_64bits(bytes.data(), bytes.size());
#endif
}

}  // namespace kvtier::storage
