// The RocksDB cold tier's own key and value encodings and its RocksDB-to-absl status
// mapping, shared by the two halves of RocksDbColdTier: serving (rocksdb_cold_tier.cc)
// and recovery from the slab (rocksdb_cold_tier_recovery.cc). Only those two files and
// tests that damage a tier's directory (tests/testing/cold_damage.h) include it; the
// tier's contract is storage/rocksdb_cold_tier.h. Pure functions, thread-safe.
#ifndef KVTIER_STORAGE_ROCKSDB_COLD_TIER_RECORDS_H_
#define KVTIER_STORAGE_ROCKSDB_COLD_TIER_RECORDS_H_

#include <rocksdb/status.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/strings.h"
#include "storage/cold_record.h"

namespace kvtier::storage {

inline constexpr char kBlockIndexPrefix = 'i';
inline constexpr char kNamespacePrefix = 'n';
inline constexpr char kSlabFileName[] = "cold.slab";
inline constexpr char kMetaFileName[] = "cold.meta";
inline constexpr size_t kOffsetBytes = 8;

// Big-endian namespace id so a namespace's keys are contiguous.
inline std::string BlockKey(uint32_t ns_id, std::string_view key, char prefix = 0) {
  std::string out;
  out.reserve(5 + key.size());
  if (prefix != 0) out.push_back(prefix);
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>(ns_id >> shift));
  out.append(key);
  return out;
}

inline std::string IndexKey(uint32_t ns_id, std::string_view key) {
  return BlockKey(ns_id, key, kBlockIndexPrefix);
}

inline uint32_t DecodeNsId(const char* p) {
  return (uint32_t{static_cast<uint8_t>(p[0])} << 24) |
         (uint32_t{static_cast<uint8_t>(p[1])} << 16) |
         (uint32_t{static_cast<uint8_t>(p[2])} << 8) | uint32_t{static_cast<uint8_t>(p[3])};
}

inline absl::Status FromRocks(const rocksdb::Status& s, std::string_view what) {
  if (s.ok()) return absl::OkStatus();
  std::string msg = absl::StrCat("cold tier ", Sv(what), ": ", s.ToString());
  if (s.IsNotFound()) return absl::NotFoundError(msg);
  if (s.IsCorruption()) return absl::DataLossError(msg);
  if (s.IsIOError() || s.IsBusy() || s.IsTimedOut() || s.IsTryAgain()) {
    return absl::UnavailableError(msg);
  }
  return absl::InternalError(msg);
}

// An index value: the cold_record.h index value, then the slab offset (u64 LE) of the
// block's extent, which holds its cold_record.h block value (stored_bytes long).
inline std::string EncodeIndex(const ColdIndexRecord& record, uint64_t offset) {
  std::string out = EncodeColdIndexValue(record);
  out.append(reinterpret_cast<const char*>(&offset), kOffsetBytes);
  return out;
}

inline absl::Status ParseIndex(std::string_view value, ColdIndexRecord* record, uint64_t* offset) {
  if (value.size() < kOffsetBytes) return absl::DataLossError("malformed block index record");
  std::memcpy(offset, value.data() + value.size() - kOffsetBytes, kOffsetBytes);
  return ParseColdIndexValue(value.substr(0, value.size() - kOffsetBytes), record);
}

}  // namespace kvtier::storage

#endif  // KVTIER_STORAGE_ROCKSDB_COLD_TIER_RECORDS_H_
