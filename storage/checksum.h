// The payload checksum of the store (docs/design.md §2 Data model): XXH3-64 with seed 0
// over the exact uncompressed payload bytes. Every cold record carries it; the cold tier
// verifies it on every read (cold_tier.h). Pure function; thread-safe.
#ifndef KVTIER_STORAGE_CHECKSUM_H_
#define KVTIER_STORAGE_CHECKSUM_H_

#include <cstdint>
#include <span>

namespace kvtier::storage {

// Returns XXH3_64bits(bytes) (seed 0). Identical to `xxhsum -H3` of the same bytes.
uint64_t PayloadChecksum(std::span<const uint8_t> bytes);

}  // namespace kvtier::storage

#endif  // KVTIER_STORAGE_CHECKSUM_H_
