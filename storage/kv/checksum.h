// Payload checksums for block records (DESIGN.md section 2): XXH3-64 with seed 0 over the
// exact bytes stored. Pure functions; thread-safe.
#ifndef KVTIER_STORAGE_KV_CHECKSUM_H_
#define KVTIER_STORAGE_KV_CHECKSUM_H_

#include <cstdint>
#include <span>
#include <string_view>

namespace kvtier::kv {

// Returns XXH3_64bits(data) (seed 0). Identical to `xxhsum -H3` of the same bytes.
uint64_t Checksum64(std::span<const uint8_t> data);
uint64_t Checksum64(std::string_view data);

}  // namespace kvtier::kv

#endif  // KVTIER_STORAGE_KV_CHECKSUM_H_
