// The two records RocksDbColdTier (rocksdb_cold_tier.h) stores per block, as pure
// functions so they can be tested and fuzzed without a database:
//
//   block value  the extent in cold.slab. Format 2 (docs/recovery.md): a self-describing
//                header, so a scan of the slab alone can re-index every block:
//                  0 magic u32 ("KVTB" live; "KVTD" once deleted: KillColdRecord)
//                  4 version u8 (2)      5 flags u8 (bit 0: zstd, bit 1: standalone)
//                  6 key length u16      8 parent_key length u16     10 reserved u16
//                 12 ns_id u32          16 block_index u32          20 payload_bytes u32
//                 24 body bytes u32     28 reserved u32             32 seq u64
//                 40 checksum u64 (PayloadChecksum of the uncompressed payload)
//                 48 body checksum u64 (PayloadChecksum of the stored body)
//                 56 header checksum u64 (PayloadChecksum of bytes 0..56, key and
//                    parent_key, with the live magic)
//                 64 key bytes, parent_key bytes, then the body (zstd frame if flagged)
//                `seq` orders copies of one key: the highest live one is the block.
//   index value  block_index u32, payload_bytes u32, stored_bytes u32, checksum u64,
//                standalone u8, parent_key length u8, parent_key bytes
//
// All integers little-endian. Format 1 block values (a 20-byte header without the key)
// are not read: RocksDbColdTier refuses a format-1 slab at open (docs/recovery.md).
// The parsers treat their input as untrusted (it comes from disk): any byte string gets
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

// Bytes of the block value's fixed header (before the key and parent_key).
inline constexpr size_t kColdRecordHeaderBytes = 64;
// The format version of block values written now.
inline constexpr uint8_t kColdRecordVersion = 2;
// The bytes KillColdRecord writes at the start of an extent (the "KVTD" magic).
inline constexpr std::string_view kColdRecordKilled{"KVTD", 4};

// What a block value's header says. `record.stored_bytes` is the whole value's length
// (header, keys and body); `record.ns_id`, `key`, `parent_key`, `block_index`,
// `payload_bytes`, `checksum` and `standalone` are the block's.
struct ColdRecordHeader {
  ColdIndexRecord record;
  uint64_t seq = 0;
  uint32_t header_bytes = 0;  // kColdRecordHeaderBytes + key + parent_key
  uint32_t body_bytes = 0;
  uint64_t body_checksum = 0;
  bool zstd = false;
};

// Returns the block value of `payload` for `record` (its ns_id, key, parent_key,
// block_index and standalone are stored) with sequence number `seq`. With `compress`,
// the payload is stored as a zstd (level 1) frame when that saves at least 1/8 of it.
// REQUIRES: payload.size() < 4 GiB; key and parent_key under 64 KiB.
std::string EncodeColdRecord(const ColdIndexRecord& record, uint64_t seq,
                             std::span<const uint8_t> payload, uint64_t checksum, bool compress);

// Parses the header at the start of `prefix` (the first bytes of an extent; at least
// kColdRecordHeaderBytes, and the key and parent_key must be in it too). NOT_FOUND for a
// killed extent ("KVTD"); DATA_LOSS for a bad magic, version, header checksum or a key
// that does not fit in `prefix` (the message says which). Does not look at the body.
absl::StatusOr<ColdRecordHeader> ParseColdRecordHeader(std::span<const uint8_t> prefix);

// Parses and verifies a whole block value: returns the uncompressed payload (a view into
// `value`, or into `*scratch` when it was compressed) and sets *checksum, and *header
// when not null. DATA_LOSS ("cold record ...") for a bad or killed header, a length that
// does not match, a frame that does not decompress to the announced size or a checksum
// mismatch.
absl::StatusOr<std::span<const uint8_t>> ParseColdRecord(std::span<const uint8_t> value,
                                                         std::string* scratch,
                                                         uint64_t* checksum,
                                                         ColdRecordHeader* header = nullptr);

// Returns the index value of `record` (ns_id and key live in the database key).
// REQUIRES: record.parent_key.size() <= 255.
std::string EncodeColdIndexValue(const ColdIndexRecord& record);

// Parses an index value into the fields of *record it holds (all but ns_id and key).
// DATA_LOSS ("malformed block index record") when its length does not match.
absl::Status ParseColdIndexValue(std::string_view value, ColdIndexRecord* record);

}  // namespace kvtier::storage

#endif  // KVTIER_STORAGE_COLD_RECORD_H_
