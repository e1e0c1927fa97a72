// RocksDbColdTier: the production ColdTier (cold_tier.h). One directory holding
//  - cold.slab (slab_file.h): every block's value (cold_record.h: header + payload, zstd
//    when it pays) in an extent of its own, written once with pwrite and never moved;
//  - a RocksDB database with column family "meta": namespace specs and one index record
//    per block (the cold_record.h index value, then the u64 LE slab offset of its extent;
//    stored_bytes is the extent's length). Values are ~60 bytes: no RocksDB compression,
//    no read-side RocksDB checksums (our XXH3 covers every payload).
// Disk use is therefore the slab's high-water mark (at most ColdTierOptions.slab_bytes)
// plus a small database; no compaction ever rewrites a payload (issue 16: with payloads
// in RocksDB, leveled compaction of 2 MiB values on 2 cores left the directory at
// 2.35-3.91x the cold capacity under churn, put p99 328 ms; docs/durability.md, "Cold tier disk
// under churn", has the before/after).
//
// Write order and why a crash never serves wrong bytes:
//  - PutBlock: allocate a free extent, pwrite the value (fdatasync when sync_writes),
//    then write the index record naming (offset, stored_bytes, checksum) in one RocksDB
//    write (synced when sync_writes); only then is the key's previous extent freed.
//  - DeleteBlock: delete the record, then free its extent. So an extent is reused only
//    after the deletion (or overwrite) of the record naming it is written.
//  - Without sync_writes, or after a WAL record is dropped at recovery, a crash may lose
//    that deletion while the extent's new bytes survive: the old record then names
//    another block's bytes. Every read checks the value's XXH3 against the record's
//    checksum (and the value header's checksum and size against the record), so such a
//    record is DATA_LOSS, never served. A crash between pwrite and the record write
//    leaves an extent no record names: it is free again at the next open.
//  - Open rebuilds the allocator from the index records (one scan of the small meta
//    column family, before the first Put can allocate). Records whose extents overlap
//    (a lost deletion whose extent was reused) are resolved by the value header in the
//    slab: the record whose extent holds its block stays, the other record is deleted.
//    Records past the end of a truncated slab read as DATA_LOSS.
// Layout change: a directory of the earlier layout (payloads inside RocksDB, column
// family "blocks") is refused with FAILED_PRECONDITION at Open, not converted: it is a
// cache, and a converter would be code run once per deployment; the message says what to do.
//
// This is the only place rocksdb::Status is translated to absl::Status (cold_tier.h
// lists the codes).
//
// Thread-safe (RocksDB and SlabFile are; reads take no lock, see GetBlock).
#ifndef KVTIER_STORAGE_ROCKSDB_COLD_TIER_H_
#define KVTIER_STORAGE_ROCKSDB_COLD_TIER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "storage/cold_tier.h"
#include "storage/slab_file.h"

namespace rocksdb {
class DB;
class ColumnFamilyHandle;
}  // namespace rocksdb

namespace kvtier::storage {

struct ColdTierOptions {
  // Database directory; created if missing. Default: none (required).
  std::string dir;
  // fsync the WAL on every block write (power-loss durability). Default: false.
  bool sync_writes = false;
  // Largest size of the slab file (cold.slab): a PutBlock that finds no free extent
  // below it fails with UNAVAILABLE. 0: unbounded. TieredStore sets the cold capacity
  // plus slack. Default: 0.
  uint64_t slab_bytes = 0;
};

class RocksDbColdTier final : public ColdTier {
 public:
  // Opens or creates the database. INVALID_ARGUMENT for an empty dir; UNAVAILABLE when
  // the directory cannot be created or RocksDB cannot open it; DATA_LOSS when RocksDB
  // reports corruption it cannot skip. Damage is handled so:
  //  - WAL: a damaged record is skipped with whatever else starts in the rest of its
  //    32 KiB log block (RocksDB cannot trust the lengths there); every later record is
  //    recovered (wal_dropped_ranges()). A lost record's block is absent, never served.
  //  - SST (footer, index or any table file RocksDB opens at start): Open refuses with
  //    DATA_LOSS whose message names the file; the operator moves that file aside (its
  //    blocks are then lost) or wipes the directory. No automatic repair: a silently
  //    shrunken cold tier is worse than a clear failure at start.
  //  - Slab: see the header comment (overlapping extents, truncated file).
  // FAILED_PRECONDITION for a directory of the earlier layout (header comment).
  static absl::StatusOr<std::unique_ptr<RocksDbColdTier>> Open(const ColdTierOptions& options);
  ~RocksDbColdTier() override;
  RocksDbColdTier(const RocksDbColdTier&) = delete;
  RocksDbColdTier& operator=(const RocksDbColdTier&) = delete;

  // ColdTier. Compression (`compress`) is zstd level 1, kept only when it saves at least
  // 1/8 of the payload. PutBlock is durable against power loss when sync_writes; it fails
  // with UNAVAILABLE ("cold tier slab full") when no extent is free.
  absl::StatusOr<uint32_t> PutBlock(ColdIndexRecord record, std::span<const uint8_t> payload,
                                    uint64_t checksum, bool compress) override;
  absl::Status GetBlock(uint32_t ns_id, std::string_view key, const PayloadSink& sink) override;
  absl::Status DeleteBlock(uint32_t ns_id, std::string_view key) override;
  absl::Status PutNamespace(uint32_t ns_id, std::string_view spec) override;
  absl::Status DeleteNamespace(uint32_t ns_id) override;
  absl::Status ForEachNamespace(
      const std::function<void(uint32_t ns_id, std::string_view spec)>& fn) override;
  absl::Status ForEachBlock(const std::function<void(const ColdIndexRecord&)>& fn) override;
  absl::Status Sync() override;
  // A block's extent in cold.slab: whole 4 KiB units.
  uint64_t FootprintBytes(uint32_t stored_bytes) const override {
    return SlabFile::Round(stored_bytes);
  }

  // What WAL recovery at Open skipped (kSkipAnyCorruptedRecords): corrupted ranges and
  // their bytes, as RocksDB reports them in its info LOG. Open logs a warning when any.
  uint64_t wal_dropped_ranges() const { return wal_dropped_ranges_; }
  uint64_t wal_dropped_bytes() const { return wal_dropped_bytes_; }
  ColdTierRecovery recovery() const override {
    return {wal_dropped_ranges_, wal_dropped_bytes_};
  }

 private:
  explicit RocksDbColdTier(const ColdTierOptions& options) : options_(options) {}
  // Rebuilds slab_'s allocator from the index records (Open).
  absl::Status RebuildSlab();
  // The extent the index record under `index_key` names; nullopt when absent or malformed.
  absl::StatusOr<std::optional<SlabFile::Extent>> ExtentOf(const std::string& index_key);

  const ColdTierOptions options_;
  rocksdb::DB* db_ = nullptr;
  rocksdb::ColumnFamilyHandle* default_cf_ = nullptr;
  rocksdb::ColumnFamilyHandle* meta_cf_ = nullptr;
  std::unique_ptr<SlabFile> slab_;
  uint64_t wal_dropped_ranges_ = 0;
  uint64_t wal_dropped_bytes_ = 0;
};

}  // namespace kvtier::storage

#endif  // KVTIER_STORAGE_ROCKSDB_COLD_TIER_H_
