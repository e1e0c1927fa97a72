#include "storage/checksum.h"

#include <xxhash.h>

namespace kvtier::storage {

uint64_t PayloadChecksum(std::span<const uint8_t> bytes) {
  return XXH3_64bits(bytes.data(), bytes.size());
}

}  // namespace kvtier::storage
