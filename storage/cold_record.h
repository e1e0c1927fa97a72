// The two records RocksDbColdTier (rocksdb_cold_tier.h) stores per block, as pure
// functions so they can be tested and fuzzed without a database:
//
//   block value  "KVTB" magic u32, version u8 (1), flags u8 (bit 0: zstd), reserved u16,
//                checksum u64 (PayloadChecksum of the uncompressed payload),
//                payload_bytes u32 (uncompressed), then the payload (zstd frame if flagged)
//   index value  block_index u32, payload_bytes u32, stored_bytes u32, checksum u64,
//                standalone u8, parent_key length u8, parent_key bytes
//
// All integers little-endian. The formats only grow by new versions / appended fields.
// Both parsers treat their input as untrusted (it comes from disk): any byte string gets
// either a verified result or DATA_LOSS naming the problem, never a read out of bounds or
// an allocation larger than the record justifies. Pure functions; thread-safe.
#ifndef KVTIER_STORAGE_COLD_RECORD_H_
#define KVTIER_STORAGE_COLD_RECORD_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "storage/cold_tier.h"

namespace kvtier::storage {

// Bytes of the block value's header.
inline constexpr size_t kColdRecordHeaderBytes = 20;

// Returns the block value of `payload`. With `compress`, the payload is stored as a zstd
// (level 1) frame when that saves at least 1/8 of it. REQUIRES: payload.size() < 4 GiB.
std::string EncodeColdRecord(std::span<const uint8_t> payload, uint64_t checksum, bool compress);

// Parses and verifies a block value: returns the uncompressed payload (a view into `value`,
// or into `*scratch` when it was compressed) and sets *checksum. DATA_LOSS ("cold record
// ...") for a bad header, a frame that does not decompress to the announced size, a size
// mismatch or a checksum mismatch.
absl::StatusOr<std::span<const uint8_t>> ParseColdRecord(std::span<const uint8_t> value,
                                                         std::string* scratch,
                                                         uint64_t* checksum);

// Returns the index value of `record` (ns_id and key live in the database key).
// REQUIRES: record.parent_key.size() <= 255.
std::string EncodeColdIndexValue(const ColdIndexRecord& record);

// Parses an index value into the fields of *record it holds (all but ns_id and key).
// DATA_LOSS ("malformed block index record") when its length does not match.
absl::Status ParseColdIndexValue(std::string_view value, ColdIndexRecord* record);

}  // namespace kvtier::storage

#endif  // KVTIER_STORAGE_COLD_RECORD_H_
