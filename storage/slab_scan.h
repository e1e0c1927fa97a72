// ScanSlab: reads cold.slab from start to end and finds every extent that holds a whole,
// verified block value (cold_record.h format 2), without the RocksDB index. The recovery
// of RocksDbColdTier (rocksdb_cold_tier.h, docs/recovery.md) builds the index from it.
//
// The scan visits offsets in SlabFile::kUnitBytes steps. At each it parses a header
// (magic, version, header checksum); a valid header whose body fits in the file and
// matches its body checksum is an extent, and the scan continues after it; anything else
// advances one unit, so an extent written inside a stale one (free space reused) is found
// even though the stale header is still readable. Counted on the way: killed headers
// ("KVTD", deleted blocks), damaged headers (the live magic, but a bad version or header
// checksum) and damaged bodies (a valid header whose body fails its checksum or runs
// past the end of the file: the extent is listed in `damaged` so the caller can kill it).
// Several extents may hold the same key (a crash between a re-Put and the kill of the
// old copy; an unacknowledged Put): the caller keeps the highest seq.
//
// Reads sequentially in chunks of `chunk_bytes` (positional reads, no lock). It may run
// while the slab is written (RocksDbColdTier::RecoverOnline): what it reports is then a
// mix of before and after, and an extent written meanwhile may read as damaged, so a
// caller acting on it reads each extent again (VerifyExtent) under its own exclusion.
#ifndef KVTIER_STORAGE_SLAB_SCAN_H_
#define KVTIER_STORAGE_SLAB_SCAN_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "storage/cold_record.h"
#include "storage/slab_file.h"

namespace kvtier::storage {

struct ScannedExtent {
  uint64_t offset = 0;
  ColdRecordHeader header;  // header.record.stored_bytes is the extent's length
};

struct SlabScan {
  std::vector<ScannedExtent> extents;  // by offset, disjoint
  std::vector<SlabFile::Extent> damaged;  // valid header, damaged or truncated body
  uint64_t killed_headers = 0;
  uint64_t damaged_headers = 0;
  uint64_t bytes = 0;    // the file's size: what was read
  uint64_t max_seq = 0;  // over every valid header, damaged bodies included
};

// UNAVAILABLE on read errors.
absl::StatusOr<SlabScan> ScanSlab(const SlabFile& slab, uint64_t chunk_bytes = 8ull << 20);

// Reads the extent at `offset` again and verifies it as ScanSlab does (header, then the
// body against its checksum); returns its header. NOT_FOUND for a killed header;
// DATA_LOSS for a damaged header or body, or one that runs past the end of the file;
// UNAVAILABLE on read errors. Thread-safe (one positional read or two).
absl::StatusOr<ColdRecordHeader> VerifyExtent(const SlabFile& slab, uint64_t offset);

}  // namespace kvtier::storage

#endif  // KVTIER_STORAGE_SLAB_SCAN_H_
