// RocksDbColdTier: the production ColdTier (cold_tier.h). One directory holding
//  - cold.slab (slab_file.h): every block's value (cold_record.h format 2: a header that
//    names the block — namespace, key, parent, index, sizes, checksums, seq — then the
//    payload, zstd when it pays) in an extent of its own, written once with pwrite and
//    never moved. The slab is the source of truth: a scan of it alone rebuilds the index;
//  - cold.meta (cold_meta_file.h): the slab format, the seq ceiling and a copy of every
//    namespace spec, replaced atomically;
//  - a RocksDB database with column family "meta": namespace specs and one index record
//    per block (the cold_record.h index value, then the u64 LE slab offset of its extent;
//    stored_bytes is the extent's length). Values are ~60 bytes: no RocksDB compression,
//    no read-side RocksDB checksums (our XXH3 covers every payload). The database is an
//    index of the slab, rebuilt from it whenever it is damaged (docs/recovery.md).
// Disk use is therefore the slab's high-water mark (at most ColdTierOptions.slab_bytes)
// plus a small database; no compaction ever rewrites a payload (issue 16: with payloads
// in RocksDB, leveled compaction of 2 MiB values on 2 cores left the directory at
// 2.35-3.91x the cold capacity under churn, put p99 328 ms; docs/durability.md, "Cold tier disk
// under churn", has the before/after).
//
// Write order and why a crash never serves wrong bytes, nor brings a deleted block back:
//  - PutBlock: allocate a free extent, pwrite the value with the next seq (fdatasync when
//    sync_writes), then write the index record naming (offset, stored_bytes, checksum) in
//    one RocksDB write (synced when sync_writes); then the key's previous extent is killed
//    (its magic overwritten with "KVTD") and only then freed.
//  - DeleteBlock: kill the extent, delete the record, then free the extent. So an extent
//    is reused only after it is killed and the record naming it is gone, and a slab scan
//    never finds a deleted block (a killed header is not a block).
//  - A crash between a Put's pwrite and its record write leaves a live extent no record
//    names: free again at the next open, or indexed by a scan (it holds a verified copy
//    of a block that was being put). A crash between the record write and the kill of
//    the old copy leaves two live copies: a scan keeps the higher seq.
//  - Without sync_writes, or after a WAL record is dropped at recovery, a crash may lose
//    a deletion while the extent's new bytes survive: the old record then names another
//    block's bytes. Every read checks the value's header (namespace, key, checksums)
//    against the record, so such a record is DATA_LOSS, never served.
//  - Open rebuilds the allocator from the index records (one scan of the small meta
//    column family, before the first Put can allocate). Records whose extents overlap
//    (a lost deletion whose extent was reused) are resolved by the value header in the
//    slab: the record whose extent holds its block stays, the other record is deleted.
//    Records past the end of a truncated slab read as DATA_LOSS.
//  - Open rebuilds the whole index from the slab instead (Recover; docs/recovery.md)
//    when the database lost anything or cannot be trusted: WAL recovery skipped a range,
//    a table file fails its checksum, the database does not open for corruption (it is
//    moved aside to damaged-db-<time>/ first), the database is missing while the slab
//    is not empty, cold.meta is missing or damaged, the database holds another number
//    of block records than at the last clean close (a MANIFEST or WAL tail RocksDB
//    dropped as torn, silently), or ColdTierOptions.recover asks.
// Layout changes: a directory of the first layout (payloads inside RocksDB, column family
// "blocks") and a slab of format 1 (block values without the key, no cold.meta) are
// refused with FAILED_PRECONDITION at Open, not converted: it is a cache, and a converter
// would be code run once per deployment; the message says what to do.
//
// This is the only place rocksdb::Status is translated to absl::Status (cold_tier.h
// lists the codes).
//
// Thread-safe (RocksDB and SlabFile are; reads take no lock, see GetBlock).
#ifndef KVTIER_STORAGE_ROCKSDB_COLD_TIER_H_
#define KVTIER_STORAGE_ROCKSDB_COLD_TIER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "storage/cold_meta_file.h"
#include "storage/cold_tier.h"
#include "storage/slab_file.h"

namespace rocksdb {
class DB;
class ColumnFamilyHandle;
class Logger;
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
  // Rebuild the index from the slab at Open even when nothing looks lost (kvtierd
  // --recover). Default: false.
  bool recover = false;
  // MultiGetBlock reads a run that is mostly not in the page cache, and has no dirty
  // pages (SlabFile::Cached), with O_DIRECT (SlabFile::ReadDirectAt): no page-cache pages
  // to allocate and fill, and the blocks do not push other data out of it; other runs,
  // and file systems without O_DIRECT, are read through the page cache. Default: true.
  bool direct_reads = true;
};

class RocksDbColdTier final : public ColdTier {
 public:
  // Opens or creates the tier. INVALID_ARGUMENT for an empty dir; UNAVAILABLE when the
  // directory cannot be created, RocksDB cannot open it for a reason other than
  // corruption (e.g. another process holds its lock), or the slab cannot be read;
  // FAILED_PRECONDITION for a directory of an earlier layout (header comment). Damage:
  //  - WAL: RocksDB skips the damaged records (with whatever else starts in the rest of
  //    their 32 KiB log block; wal_dropped_ranges()); then the index is rebuilt from the
  //    slab, so every block whose extent is intact comes back.
  //  - SST / MANIFEST / CURRENT: a table file that fails VerifyChecksum, or a database
  //    that does not open with Corruption, is moved aside whole (with its LOG) into
  //    <dir>/damaged-db-<unix time>/ for the operator; a fresh database is created and
  //    the index rebuilt from the slab. Logged at ERROR with the reason and the path.
  //  - Slab: a block whose extent fails its checksum is lost (DATA_LOSS on read, or
  //    dropped and counted by a rebuild); nothing else is.
  // recovery() reports what was dropped and what the rebuild found.
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
  // One RocksDB MultiGet for the index records; the extents sorted by slab offset and
  // runs of them at most kMultiGetGapBytes apart read with one pread of at most
  // kMultiGetRunBytes; each block's header and payload verified as GetBlock does. A
  // block that fails there (or whose run fails to read) is read again alone by GetBlock,
  // whose status it gets (a record changed meanwhile is read again; damage is DATA_LOSS).
  // With `destination`, a run in the page cache is read with preadv: the bodies of
  // uncompressed records straight into their destinations, everything else (headers,
  // keys, gaps, records without one) into a scratch buffer; each body is verified in
  // place. Runs not in the page cache (options.direct_reads) are read with O_DIRECT by a
  // reader thread, 1 MiB at a time, while this thread verifies and hands out the records
  // already read.
  std::vector<absl::Status> MultiGetBlock(uint32_t ns_id, std::span<const std::string_view> keys,
                                          const MultiPayloadSink& sink,
                                          const MultiDestination* destination = nullptr) override;
  static constexpr uint64_t kMultiGetGapBytes = 64 << 10;
  static constexpr uint64_t kMultiGetRunBytes = 8 << 20;
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
  uint64_t wal_dropped_ranges() const { return recovery_.wal_dropped_ranges; }
  uint64_t wal_dropped_bytes() const { return recovery_.wal_dropped_bytes; }
  ColdTierRecovery recovery() const override { return recovery_; }
  // ColdTier::RecoverOnline: a slab scan and a pass over the index records alongside the
  // live calls (O(blocks)), then, inside hooks.exclusive (O(extents no record names)),
  // each record and extent it acts on read and verified again: a verified extent in
  // free space whose key has no index record is re-indexed (hooks.adopt allowing) and
  // its space claimed; a verified extent in free space whose key has a verified record
  // (or that hooks.adopt refuses, or whose namespace has no spec) is killed; a damaged
  // one in free space is killed; namespace records follow cold.meta. kVerify writes
  // nothing. Logged at WARNING with the figures.
  absl::StatusOr<ColdRecoverReport> RecoverOnline(ColdRecoverMode mode,
                                                  const ColdRecoverHooks& hooks) override;

 private:
  explicit RocksDbColdTier(const ColdTierOptions& options) : options_(options) {}
  // Opens (creating) the RocksDB database; on Corruption moves it aside and creates a
  // fresh one, noting the reason in recovery_.
  absl::Status OpenDb(bool had_db);
  void CloseDb();
  // Moves every RocksDB file of the directory (all but cold.slab, cold.meta and earlier
  // damaged-db-* folders) into a new damaged-db-<time> folder; returns its path.
  absl::StatusOr<std::string> MoveDbAside();
  // Rebuilds slab_'s allocator from the index records (Open).
  absl::Status RebuildSlab();
  // Rebuilds the index records and namespaces from a scan of the slab and resets the
  // allocator (Open, when recovery_.scan_reason is set).
  absl::Status Recover(const std::optional<ColdMeta>& meta);
  // The extent the index record under `index_key` names; nullopt when absent or malformed.
  absl::StatusOr<std::optional<SlabFile::Extent>> ExtentOf(const std::string& index_key);
  // Overwrites the magic of the extent at `offset` ("KVTD"): no scan finds it again.
  absl::Status Kill(uint64_t offset);
  // Returns the next block seq, raising the ceiling in cold.meta when it is reached.
  absl::StatusOr<uint64_t> NextSeq();
  absl::Status WriteMetaLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(meta_mu_);
  // Makes the database's namespace records those of `meta` (cold.meta is written first,
  // so it is the newer copy) and adopts them as meta_.namespaces.
  absl::Status SyncNamespaces(const ColdMeta& meta);

  const ColdTierOptions options_;
  // Buffers for MultiGetBlock's direct reads, kept for the next call (a fresh one is
  // megabytes of pages to fault in each time); at most kDirectBuffersKept, none larger
  // than kDirectBufferKeptBytes.
  static constexpr size_t kDirectBuffersKept = 4;
  static constexpr size_t kDirectBufferKeptBytes = 16 << 20;
  common::Mutex direct_buffers_mu_;
  std::vector<std::unique_ptr<SlabFile::AlignedBuffer>> direct_buffers_
      ABSL_GUARDED_BY(direct_buffers_mu_);
  rocksdb::DB* db_ = nullptr;
  rocksdb::ColumnFamilyHandle* default_cf_ = nullptr;
  rocksdb::ColumnFamilyHandle* meta_cf_ = nullptr;
  std::shared_ptr<rocksdb::Logger> info_log_;
  std::unique_ptr<SlabFile> slab_;
  ColdTierRecovery recovery_;
  std::atomic<uint64_t> next_seq_{1};
  common::Mutex meta_mu_;
  ColdMeta meta_ ABSL_GUARDED_BY(meta_mu_);
  std::atomic<uint64_t> seq_ceiling_{0};  // meta_.seq_ceiling, readable without the lock
  // Block index records in the database (cold.meta's count at a clean close).
  std::atomic<int64_t> blocks_{0};
  bool opened_ = false;  // Open succeeded: the destructor records a clean close
};

}  // namespace kvtier::storage

#endif  // KVTIER_STORAGE_ROCKSDB_COLD_TIER_H_
