#include "storage/kv/checksum.h"

#include <xxhash.h>

namespace kvtier::kv {

uint64_t Checksum64(std::span<const uint8_t> data) {
  return XXH3_64bits(data.data(), data.size());
}

uint64_t Checksum64(std::string_view data) { return XXH3_64bits(data.data(), data.size()); }

}  // namespace kvtier::kv
