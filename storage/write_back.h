// Write-back debt bounds (docs/design.md §4 Tiers and eviction): how many unflushed bytes
// and blocks (hot copies of write-back blocks with no cold record yet) a store may hold
// so that flushing them at shutdown fits a time budget. StoreOptions::max_unflushed_*
// hold the bounds; kvtierd derives them from ServerConfig.shutdown_grace_ms unless
// max_unflushed_bytes is set (service/config.cc), and the Kubernetes manifests'
// terminationGracePeriodSeconds from the same grace (deploy/README.md).
//
// The rates are deliberately conservative: 64 MiB/s is below a cloud persistent disk's
// baseline throughput, and 20,000 blocks/s is a third of the per-block rate measured on
// the 2-core CI machine (10^6 tiny write-back blocks flushed in 16 s, issue 16), so a
// shutdown that finds the bounds full still ends inside its half of the grace.
#ifndef KVTIER_STORAGE_WRITE_BACK_H_
#define KVTIER_STORAGE_WRITE_BACK_H_

#include <cstdint>

namespace kvtier::storage {

inline constexpr uint64_t kConservativeFlushBytesPerSecond = 64ull << 20;
inline constexpr uint64_t kConservativeFlushBlocksPerSecond = 20000;

// Thread-compatible value type.
struct WriteBackBounds {
  uint64_t max_unflushed_bytes = 0;
  uint64_t max_unflushed_blocks = 0;
};

// Returns the bounds whose flush takes at most half of `shutdown_grace_ms` at the
// conservative rates above (the other half is for in-flight calls). At least 1 MiB and
// 256 blocks. Never fails.
constexpr WriteBackBounds WriteBackBoundsForGrace(uint64_t shutdown_grace_ms) {
  const uint64_t flush_ms = shutdown_grace_ms / 2;
  const uint64_t bytes = kConservativeFlushBytesPerSecond / 1000 * flush_ms;
  const uint64_t blocks = kConservativeFlushBlocksPerSecond * flush_ms / 1000;
  return {.max_unflushed_bytes = bytes < (1ull << 20) ? (1ull << 20) : bytes,
          .max_unflushed_blocks = blocks < 256 ? 256 : blocks};
}

}  // namespace kvtier::storage

#endif  // KVTIER_STORAGE_WRITE_BACK_H_
