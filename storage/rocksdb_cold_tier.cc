#include "storage/rocksdb_cold_tier.h"

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/sst_file_reader.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "storage/checksum.h"
#include "storage/cold_record.h"
#include "storage/rocksdb_cold_tier_records.h"
#include "storage/slab_file.h"
#include "storage/slab_scan.h"

namespace kvtier::storage {
namespace {

// RocksDB's info log, forwarded to `base`, counting what WAL recovery dropped: RocksDB
// reports a skipped corrupted WAL range only as a "... dropping N bytes; ..." line there.
class WalDropCounter final : public rocksdb::Logger {
 public:
  explicit WalDropCounter(std::shared_ptr<rocksdb::Logger> base)
      : rocksdb::Logger(base->GetInfoLogLevel()), base_(std::move(base)) {}

  void Logv(const char* format, va_list ap) override {
    Logv(rocksdb::InfoLogLevel::INFO_LEVEL, format, ap);
  }
  void Logv(const rocksdb::InfoLogLevel level, const char* format, va_list ap) override {
    va_list copy;
    va_copy(copy, ap);
    char line[1024];
    vsnprintf(line, sizeof(line), format, copy);
    va_end(copy);
    const char* at = std::strstr(line, " dropping ");
    if (at != nullptr) {
      dropped_ranges_.fetch_add(1, std::memory_order_relaxed);
      dropped_bytes_.fetch_add(std::strtoull(at + 10, nullptr, 10), std::memory_order_relaxed);
    }
    base_->Logv(level, format, ap);
  }
  void Flush() override { base_->Flush(); }
  size_t GetLogFileSize() const override { return base_->GetLogFileSize(); }

  uint64_t dropped_ranges() const { return dropped_ranges_.load(std::memory_order_relaxed); }
  uint64_t dropped_bytes() const { return dropped_bytes_.load(std::memory_order_relaxed); }

 private:
  const std::shared_ptr<rocksdb::Logger> base_;
  std::atomic<uint64_t> dropped_ranges_{0};
  std::atomic<uint64_t> dropped_bytes_{0};
};

// Returns the table files under `dir` that cannot be opened or fail their checksums, as
// "000012.sst (Corruption: ...)" joined by "; ". RocksDB's own error at DB::Open does not
// always name the damaged table file (a bad footer is reported against the MANIFEST).
std::string DamagedTableFiles(const std::string& dir) {
  std::string out;
  std::error_code ec;
  for (const auto& f : std::filesystem::directory_iterator(dir, ec)) {
    if (f.path().extension() != ".sst") continue;
    rocksdb::SstFileReader reader{rocksdb::Options()};
    rocksdb::Status s = reader.Open(f.path().string());
    if (s.ok()) s = reader.VerifyChecksum();
    if (s.ok()) continue;
    if (!out.empty()) out += "; ";
    absl::StrAppend(&out, f.path().filename().string(), " (", s.ToString(), ")");
  }
  return out;
}

// Where each file of the tier lives.
std::string SlabPath(const std::string& dir) {
  return (std::filesystem::path(dir) / kSlabFileName).string();
}
std::string MetaPath(const std::string& dir) {
  return (std::filesystem::path(dir) / kMetaFileName).string();
}

// Seqs are reserved in cold.meta this many at a time (one atomic file replace per chunk).
constexpr uint64_t kSeqChunk = 1ull << 20;

rocksdb::DBOptions DbOptions() {
  rocksdb::DBOptions db_options;
  db_options.create_if_missing = true;
  db_options.create_missing_column_families = true;
  db_options.max_background_jobs = 2;
  // Index records are ~60 bytes: 64 MiB of WAL is ~1M puts, and flushing bounds it.
  db_options.max_total_wal_size = 64ull << 20;
  // Recover the intact WAL records after a damaged one (kPointInTimeRecovery would stop
  // there). Whatever is skipped is counted (WalDropCounter) and makes Open rebuild the
  // index from the slab, so a damaged record costs nothing while its extent is intact.
  db_options.wal_recovery_mode = rocksdb::WALRecoveryMode::kSkipAnyCorruptedRecords;
  return db_options;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RocksDbColdTier>> RocksDbColdTier::Open(
    const ColdTierOptions& options) {
  if (options.dir.empty()) return absl::InvalidArgumentError("data_dir must not be empty");
  std::error_code ec;
  std::filesystem::create_directories(options.dir, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot create data_dir '", options.dir, "': ", ec.message()));
  }
  std::unique_ptr<RocksDbColdTier> tier(new RocksDbColdTier(options));
  // A directory of the earlier layout (payloads in a "blocks" column family) is refused,
  // not converted: see the header.
  std::vector<std::string> existing;
  if (rocksdb::DB::ListColumnFamilies(DbOptions(), options.dir, &existing).ok() &&
      std::find(existing.begin(), existing.end(), "blocks") != existing.end()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "data_dir '", options.dir,
        "' holds a cold tier of the earlier layout (payloads inside RocksDB, column family "
        "'blocks'); this version keeps payloads in ",
        kSlabFileName,
        " and cannot read it: empty the directory (the cache refills) or run the earlier "
        "kvtierd"));
  }
  ASSIGN_OR_RETURN(tier->slab_, SlabFile::Open(SlabPath(options.dir), options.slab_bytes));
  ASSIGN_OR_RETURN(const uint64_t slab_file_bytes, tier->slab_->FileBytes());

  std::vector<std::string> reasons;
  std::optional<ColdMeta> meta;
  absl::StatusOr<std::optional<ColdMeta>> read_meta = ReadColdMetaFile(MetaPath(options.dir));
  if (read_meta.ok()) {
    meta = *std::move(read_meta);
  } else if (absl::IsDataLoss(read_meta.status())) {
    reasons.push_back(std::string(read_meta.status().message()));
  } else {
    return read_meta.status();
  }
  if (meta && meta->slab_format != kColdRecordVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "data_dir '", options.dir, "' holds a cold slab of format ", meta->slab_format,
        "; this kvtierd reads format ", kColdRecordVersion,
        ": empty the directory (the cache refills) or run the kvtierd that wrote it"));
  }
  if (!meta && read_meta.ok() && slab_file_bytes > 0) {
    std::string first;
    if (tier->slab_->Read(0, std::min<uint64_t>(slab_file_bytes, 5), &first).ok() &&
        first.size() == 5 && first.compare(0, 4, "KVTB") == 0 && first[4] == 1) {
      return absl::FailedPreconditionError(absl::StrCat(
          "data_dir '", options.dir,
          "' holds a cold slab of format 1 (block values without their keys, no ",
          kMetaFileName, "); this kvtierd reads format ", kColdRecordVersion,
          " only and does not convert it: empty the directory (the cache refills) or run the "
          "earlier kvtierd"));
    }
    reasons.push_back(absl::StrCat(kMetaFileName, " is missing and ", kSlabFileName,
                                   " is not empty"));
  }
  const bool had_db = std::filesystem::exists(std::filesystem::path(options.dir) / "CURRENT");
  if (!had_db && slab_file_bytes > 0) reasons.push_back("the database is missing");
  RETURN_IF_ERROR(tier->OpenDb(had_db));
  if (!tier->recovery_.damaged_db_dir.empty()) {
    reasons.push_back(absl::StrCat("the database was damaged (moved to ",
                                   tier->recovery_.damaged_db_dir, ")"));
  }
  if (tier->recovery_.wal_dropped_ranges > 0) {
    reasons.push_back(absl::StrCat("WAL recovery skipped ", tier->recovery_.wal_dropped_ranges,
                                   " corrupted range(s), ", tier->recovery_.wal_dropped_bytes,
                                   " bytes"));
  }
  if (options.recover) reasons.push_back("asked (recover)");
  if (meta) tier->next_seq_.store(std::max<uint64_t>(meta->seq_ceiling, 1));
  if (reasons.empty()) {
    RETURN_IF_ERROR(tier->RebuildSlab());
    if (meta && meta->clean && static_cast<uint64_t>(tier->blocks_.load()) != meta->blocks) {
      reasons.push_back(absl::StrCat("the database holds ", tier->blocks_.load(),
                                     " block records, ", meta->blocks,
                                     " at the last clean close"));
    }
  }
  if (reasons.empty()) {
    if (!meta) {  // a new directory (or one without blocks): adopt the database's specs
      meta.emplace();
      RETURN_IF_ERROR(tier->ForEachNamespace([&](uint32_t id, std::string_view spec) {
        meta->namespaces.emplace(id, spec);
      }));
    }
    RETURN_IF_ERROR(tier->SyncNamespaces(*meta));
  } else {
    tier->recovery_.scan_reason = absl::StrJoin(reasons, "; ");
    RETURN_IF_ERROR(tier->Recover(meta));
  }
  {
    // Reserve the first chunk of seqs (and write cold.meta of a new directory).
    common::MutexLock lock(&tier->meta_mu_);
    tier->meta_.slab_format = kColdRecordVersion;
    tier->meta_.seq_ceiling = tier->next_seq_.load() + kSeqChunk;
    tier->meta_.clean = false;  // until the destructor says otherwise
    RETURN_IF_ERROR(tier->WriteMetaLocked());
  }
  tier->opened_ = true;
  return tier;
}

absl::Status RocksDbColdTier::OpenDb(bool had_db) {
  for (int attempt = 0;; ++attempt) {
    rocksdb::DBOptions db_options = DbOptions();
    std::shared_ptr<rocksdb::Logger> base_log;
    std::shared_ptr<WalDropCounter> wal_log;
    if (rocksdb::CreateLoggerFromOptions(options_.dir, db_options, &base_log).ok()) {
      wal_log = std::make_shared<WalDropCounter>(std::move(base_log));
      db_options.info_log = wal_log;
      info_log_ = wal_log;
    }
    rocksdb::ColumnFamilyOptions meta;
    meta.compression = rocksdb::kNoCompression;
    meta.write_buffer_size = 16ull << 20;
    std::vector<rocksdb::ColumnFamilyDescriptor> cfs = {
        {rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions()}, {"meta", meta}};
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::Status s = rocksdb::DB::Open(db_options, options_.dir, cfs, &handles, &db_);
    std::string damage;
    if (s.ok()) {
      default_cf_ = handles[0];
      meta_cf_ = handles[1];
      // Table files hold index records RocksDB would otherwise read unverified (GetBlock
      // skips its block checksums): a damaged one means the index cannot be trusted.
      if (had_db && attempt == 0) {
        const rocksdb::Status v = db_->VerifyChecksum();
        if (v.IsCorruption()) damage = v.ToString();
        else if (!v.ok()) return FromRocks(v, "verify table checksums");
      }
      if (damage.empty()) {
        if (wal_log != nullptr && wal_log->dropped_ranges() > 0) {
          recovery_.wal_dropped_ranges = wal_log->dropped_ranges();
          recovery_.wal_dropped_bytes = wal_log->dropped_bytes();
          KVTIER_LOG(WARNING) << "cold tier " << options_.dir << ": WAL recovery skipped "
                              << recovery_.wal_dropped_ranges << " corrupted range(s), "
                              << recovery_.wal_dropped_bytes << " bytes (see its RocksDB LOG)";
        }
        return absl::OkStatus();
      }
      CloseDb();
    } else if (s.IsCorruption() ||
               (s.IsIOError() && !s.IsIOFenced() && s.ToString().find("lock") == std::string::npos &&
                (s.IsPathNotFound() || s.ToString().find("MANIFEST") != std::string::npos ||
                 s.ToString().find("CURRENT") != std::string::npos))) {
      // A damaged MANIFEST or CURRENT (a damaged name in CURRENT reads as a missing
      // MANIFEST). Other I/O errors (the lock held by another process, a full disk) are
      // not damage: the database is left alone.
      damage = s.ToString();
      const std::string tables = DamagedTableFiles(options_.dir);
      if (!tables.empty()) absl::StrAppend(&damage, "; damaged table file(s): ", tables);
    } else {
      absl::Status st = FromRocks(s, "open");
      return absl::Status(
          st.code() == absl::StatusCode::kInternal ? absl::StatusCode::kUnavailable : st.code(),
          st.message());
    }
    info_log_.reset();
    if (attempt > 0) {
      return absl::DataLossError(
          absl::StrCat("cold tier ", options_.dir, ": a fresh database is damaged: ", damage));
    }
    ASSIGN_OR_RETURN(recovery_.damaged_db_dir, MoveDbAside());
    KVTIER_LOG(ERROR) << "cold tier " << options_.dir << ": the RocksDB index is damaged ("
                      << damage << "); moved it to " << recovery_.damaged_db_dir
                      << " for the operator; rebuilding the index from " << kSlabFileName;
  }
}

void RocksDbColdTier::CloseDb() {
  if (db_ == nullptr) return;
  for (auto* cf : {default_cf_, meta_cf_}) {
    if (cf != nullptr) db_->DestroyColumnFamilyHandle(cf);
  }
  default_cf_ = meta_cf_ = nullptr;
  db_->Close();
  delete db_;
  db_ = nullptr;
}

absl::StatusOr<std::string> RocksDbColdTier::MoveDbAside() {
  namespace fs = std::filesystem;
  const fs::path dir(options_.dir);
  const std::string stamp = absl::StrCat("damaged-db-", absl::ToUnixSeconds(absl::Now()));
  fs::path dest = dir / stamp;
  for (int n = 1; fs::exists(dest); ++n) dest = dir / absl::StrCat(stamp, "-", n);
  std::error_code ec;
  fs::create_directory(dest, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot create ", dest.string(), ": ", ec.message()));
  }
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name == kSlabFileName || name == kMetaFileName ||
        name == absl::StrCat(kMetaFileName, ".tmp") || name.rfind("damaged-db-", 0) == 0) {
      continue;
    }
    fs::rename(entry.path(), dest / name, ec);
    if (ec) {
      return absl::UnavailableError(absl::StrCat("cannot move ", entry.path().string(), " to ",
                                                 dest.string(), ": ", ec.message()));
    }
  }
  if (ec) return absl::UnavailableError(absl::StrCat("cannot list ", dir.string(), ": ", ec.message()));
  return dest.string();
}

absl::Status RocksDbColdTier::WriteMetaLocked() {
  RETURN_IF_ERROR(WriteColdMetaFile(MetaPath(options_.dir), meta_));
  seq_ceiling_.store(meta_.seq_ceiling, std::memory_order_release);
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> RocksDbColdTier::NextSeq() {
  const uint64_t seq = next_seq_.fetch_add(1, std::memory_order_relaxed);
  if (seq < seq_ceiling_.load(std::memory_order_acquire)) return seq;
  common::MutexLock lock(&meta_mu_);
  if (seq >= meta_.seq_ceiling) {
    const uint64_t old = meta_.seq_ceiling;
    meta_.seq_ceiling = seq + kSeqChunk;
    if (absl::Status st = WriteMetaLocked(); !st.ok()) {
      meta_.seq_ceiling = old;
      return st;
    }
  }
  return seq;
}

absl::Status RocksDbColdTier::Kill(uint64_t offset) {
  return slab_->Write(offset, kColdRecordKilled, options_.sync_writes);
}

RocksDbColdTier::~RocksDbColdTier() {
  CloseDb();
  if (!opened_) return;
  common::MutexLock lock(&meta_mu_);
  meta_.clean = true;
  meta_.blocks = static_cast<uint64_t>(std::max<int64_t>(blocks_.load(), 0));
  if (absl::Status st = WriteMetaLocked(); !st.ok()) {
    KVTIER_LOG(WARNING) << "cold tier " << options_.dir << ": cannot record the clean close: "
                        << st;
  }
}

absl::StatusOr<std::optional<SlabFile::Extent>> RocksDbColdTier::ExtentOf(
    const std::string& index_key) {
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), meta_cf_, index_key, &value);
  if (s.IsNotFound()) return std::nullopt;
  RETURN_IF_ERROR(FromRocks(s, "get block index"));
  ColdIndexRecord rec;
  SlabFile::Extent e;
  // A malformed record names no extent we can free: its space returns at the next open.
  if (!ParseIndex(value, &rec, &e.offset).ok()) return std::nullopt;
  e.bytes = rec.stored_bytes;
  return e;
}

absl::StatusOr<uint32_t> RocksDbColdTier::PutBlock(ColdIndexRecord record,
                                                   std::span<const uint8_t> payload,
                                                   uint64_t checksum, bool compress) {
  ASSIGN_OR_RETURN(const uint64_t seq, NextSeq());
  const std::string value = EncodeColdRecord(record, seq, payload, checksum, compress);
  record.payload_bytes = static_cast<uint32_t>(payload.size());
  record.stored_bytes = static_cast<uint32_t>(value.size());
  record.checksum = checksum;
  const std::string index_key = IndexKey(record.ns_id, record.key);
  ASSIGN_OR_RETURN(const std::optional<SlabFile::Extent> old, ExtentOf(index_key));
  const std::optional<uint64_t> offset = slab_->Allocate(value.size());
  if (!offset) {
    return absl::UnavailableError(absl::StrCat("cold tier slab full: ", slab_->used_bytes(),
                                               " of ", slab_->limit_bytes(), " bytes in use"));
  }
  absl::Status st = slab_->Write(*offset, value, options_.sync_writes);
  if (st.ok()) {
    rocksdb::WriteOptions wo;
    wo.sync = options_.sync_writes;
    st = FromRocks(db_->Put(wo, meta_cf_, index_key, EncodeIndex(record, *offset)), "put block");
  }
  if (!st.ok()) {
    slab_->Free(*offset, value.size());
    return st;
  }
  if (!old) blocks_.fetch_add(1, std::memory_order_relaxed);
  if (old) {
    // The record naming it is overwritten: kill the old copy, then free it. If the kill
    // fails the extent stays allocated (free again at the next open; a scan would prefer
    // the new copy's higher seq anyway).
    if (absl::Status killed = Kill(old->offset); killed.ok()) {
      slab_->Free(old->offset, old->bytes);
    } else {
      KVTIER_LOG(WARNING) << "cold tier: cannot kill a replaced extent: " << killed;
    }
  }
  return record.stored_bytes;
}

absl::Status RocksDbColdTier::GetBlock(uint32_t ns_id, std::string_view key,
                                       const PayloadSink& sink) {
  const std::string index_key = IndexKey(ns_id, key);
  rocksdb::ReadOptions ro;
  ro.verify_checksums = false;  // index records are tiny; the payload has our XXH3
  std::string index;
  rocksdb::Status s = db_->Get(ro, meta_cf_, index_key, &index);
  std::string value;
  std::string unpacked;
  // Reads take no lock: a Delete or re-Put of the key may free (and a Put elsewhere
  // reuse) the extent while we read it. The checksum catches that; a record that changed
  // meanwhile means "read again", not DATA_LOSS.
  for (int attempt = 0;; ++attempt) {
    if (s.IsNotFound()) return absl::NotFoundError("block not in cold tier");
    RETURN_IF_ERROR(FromRocks(s, "get block index"));
    ColdIndexRecord rec;
    uint64_t offset = 0;
    RETURN_IF_ERROR(ParseIndex(index, &rec, &offset));
    uint64_t checksum = 0;
    ColdRecordHeader header;
    const absl::Status read = slab_->Read(offset, rec.stored_bytes, &value);
    absl::StatusOr<std::span<const uint8_t>> body =
        read.ok() ? ParseColdRecord(std::span<const uint8_t>(
                                        reinterpret_cast<const uint8_t*>(value.data()),
                                        value.size()),
                                    &unpacked, &checksum, &header)
                  : absl::StatusOr<std::span<const uint8_t>>(read);
    if (body.ok() && (checksum != rec.checksum || body->size() != rec.payload_bytes ||
                      header.record.ns_id != ns_id || header.record.key != key)) {
      body = absl::DataLossError("cold extent holds another block than its index record names");
    }
    if (body.ok()) {
      sink(*body, checksum);
      return absl::OkStatus();
    }
    if (!absl::IsDataLoss(body.status())) return body.status();
    std::string again;
    s = db_->Get(ro, meta_cf_, index_key, &again);
    if (attempt >= 2 || (s.ok() && again == index)) return body.status();
    index = std::move(again);
  }
}

std::vector<absl::Status> RocksDbColdTier::MultiGetBlock(uint32_t ns_id,
                                                        std::span<const std::string_view> keys,
                                                        const MultiPayloadSink& sink,
                                                        const MultiDestination* destination) {
  const size_t n = keys.size();
  std::vector<absl::Status> out(n);
  if (n == 0) return out;
  std::vector<std::string> index_keys(n);
  std::vector<rocksdb::Slice> slices(n);
  for (size_t i = 0; i < n; ++i) {
    index_keys[i] = IndexKey(ns_id, keys[i]);
    slices[i] = index_keys[i];
  }
  std::vector<rocksdb::PinnableSlice> values(n);
  std::vector<rocksdb::Status> statuses(n);
  rocksdb::ReadOptions ro;
  ro.verify_checksums = false;  // as GetBlock
  db_->MultiGet(ro, meta_cf_, n, slices.data(), values.data(), statuses.data());
  struct Want {
    uint64_t offset = 0;
    ColdIndexRecord rec;
    size_t i = 0;
    // Read straight into it: the body of an uncompressed record whose header is
    // header_bytes long (empty: the whole record goes to the run's scratch).
    std::span<uint8_t> dst;
    uint32_t header_bytes = 0;
    size_t scratch_at = 0;  // where its header (or whole record) lies in the scratch
  };
  std::vector<Want> wants;
  wants.reserve(n);
  std::vector<size_t> alone;  // read again one by one, by GetBlock
  for (size_t i = 0; i < n; ++i) {
    if (statuses[i].IsNotFound()) {
      out[i] = absl::NotFoundError("block not in cold tier");
      continue;
    }
    if (!statuses[i].ok()) {
      alone.push_back(i);
      continue;
    }
    Want w;
    w.i = i;
    if (!ParseIndex(std::string_view(values[i].data(), values[i].size()), &w.rec, &w.offset)
             .ok()) {
      alone.push_back(i);
      continue;
    }
    if (destination != nullptr) {
      // Uncompressed exactly when the body is the payload's size (zstd is kept only
      // when it saves at least 1/8); the header read says so again before it is used.
      const uint64_t header_bytes =
          kColdRecordHeaderBytes + keys[i].size() + w.rec.parent_key.size();
      if (header_bytes + w.rec.payload_bytes == w.rec.stored_bytes) {
        std::span<uint8_t> dst = (*destination)(i);
        if (dst.size() >= w.rec.payload_bytes && w.rec.payload_bytes > 0) {
          w.dst = dst.first(w.rec.payload_bytes);
          w.header_bytes = static_cast<uint32_t>(header_bytes);
        }
      }
    }
    wants.push_back(std::move(w));
  }
  values.clear();
  std::sort(wants.begin(), wants.end(),
            [](const Want& a, const Want& b) { return a.offset < b.offset; });
  // Runs: extents in offset order, none overlapping, gaps and size bounded.
  struct Run {
    size_t j = 0, k = 0;  // wants[j, k)
    uint64_t start = 0, end = 0;
  };
  std::vector<Run> runs;
  for (size_t j = 0; j < wants.size();) {
    Run r{j, j + 1, wants[j].offset, wants[j].offset + wants[j].rec.stored_bytes};
    while (r.k < wants.size() && wants[r.k].offset >= r.end &&
           wants[r.k].offset - r.end <= kMultiGetGapBytes &&
           wants[r.k].offset + wants[r.k].rec.stored_bytes - r.start <= kMultiGetRunBytes) {
      r.end = wants[r.k].offset + wants[r.k].rec.stored_bytes;
      ++r.k;
    }
    j = r.k;
    runs.push_back(r);
  }
  // One read per run, in slab order (the kernel's sequential read-ahead follows it;
  // asking for more with posix_fadvise WILLNEED measured slower here): for a run in the
  // page cache a pread into the scratch, or, when some of its bodies have destinations,
  // a preadv that puts those bodies there and the rest of the run, in order, into the
  // scratch.
  std::string run;
  std::string unpacked;
  std::vector<std::span<uint8_t>> parts;
  // Runs not in the page cache are read past it (ColdTierOptions::direct_reads), by a
  // reader thread 1 MiB at a time into one aligned buffer, while this thread verifies
  // and hands out each record as soon as its bytes are in: the disk and the copies
  // overlap.
  struct Plan {
    uint64_t file_start = 0;  // aligned
    uint64_t bytes = 0;       // aligned
    uint64_t buffer_at = 0;   // where it lies in the buffer
  };
  std::vector<int> plan_of(runs.size(), -1);
  std::vector<Plan> plan;
  std::unique_ptr<SlabFile::AlignedBuffer> aligned;
  if (options_.direct_reads && slab_->has_direct_reads()) {
    uint64_t total = 0;
    for (size_t x = 0; x < runs.size(); ++x) {
      if (slab_->Cached(runs[x].start, runs[x].end - runs[x].start)) continue;
      constexpr uint64_t kAlign = SlabFile::kDirectAlign;
      Plan p;
      p.file_start = runs[x].start / kAlign * kAlign;
      p.bytes = (runs[x].end + kAlign - 1) / kAlign * kAlign - p.file_start;
      p.buffer_at = total;
      total += p.bytes;
      plan_of[x] = static_cast<int>(plan.size());
      plan.push_back(p);
    }
    if (!plan.empty()) {
      {
        common::MutexLock lock(&direct_buffers_mu_);
        if (!direct_buffers_.empty()) {
          aligned = std::move(direct_buffers_.back());
          direct_buffers_.pop_back();
        }
      }
      if (aligned == nullptr) aligned = std::make_unique<SlabFile::AlignedBuffer>();
      if (!SlabFile::Reserve(aligned.get(), total).ok()) {
        plan.clear();
        plan_of.assign(runs.size(), -1);
      }
    }
  }
  // The reader's progress: bytes of plan[p] read so far, and whether it is over (read
  // whole, or stopped by the end of the file or an error).
  struct Progress {
    uint64_t read = 0;
    bool over = false;
  };
  common::Mutex progress_mu;
  common::CondVar progress_cv;
  std::vector<Progress> progress(plan.size());
  std::thread reader;
  if (!plan.empty()) {
    reader = std::thread([&] {
      constexpr size_t kChunk = 1 << 20;  // larger direct reads measured slower here
      for (size_t p = 0; p < plan.size(); ++p) {
        uint64_t done = 0;
        while (done < plan[p].bytes) {
          const size_t want = static_cast<size_t>(std::min<uint64_t>(kChunk, plan[p].bytes - done));
          absl::StatusOr<size_t> n = slab_->ReadDirectAt(
              plan[p].file_start + done, aligned->data + plan[p].buffer_at + done, want);
          if (n.ok()) done += *n;
          const bool over = !n.ok() || *n < want || done == plan[p].bytes;
          common::MutexLock lock(&progress_mu);
          progress[p].read = done;
          progress[p].over = over;
          progress_cv.SignalAll();
          if (over) break;
        }
      }
    });
  }
  // Waits until record bytes [0, end) of plan[p] are read or its read is over; true when
  // they are there.
  auto wait_for = [&](size_t p, uint64_t end) {
    common::MutexLock lock(&progress_mu);
    while (progress[p].read < end && !progress[p].over) progress_cv.Wait(&progress_mu);
    return progress[p].read >= end;
  };
  for (size_t x = 0; x < runs.size(); ++x) {
    const size_t j = runs[x].j, k = runs[x].k;
    const uint64_t start = runs[x].start, end = runs[x].end;
    const int p = plan_of[x];
    const uint8_t* odirect =
        p >= 0 ? aligned->data + plan[p].buffer_at + (start - plan[p].file_start) : nullptr;
    bool direct = false;
    uint64_t scratch_bytes = 0;
    for (size_t m = j; m < k; ++m) {
      Want& w = wants[m];
      const uint64_t prev_end = m == j ? start : wants[m - 1].offset + wants[m - 1].rec.stored_bytes;
      scratch_bytes += w.offset - prev_end;  // the gap before it
      w.scratch_at = static_cast<size_t>(scratch_bytes);
      if (!w.dst.empty() && odirect == nullptr) {
        direct = true;
        scratch_bytes += w.header_bytes;
      } else {
        scratch_bytes += w.rec.stored_bytes;
      }
    }
    absl::Status read;
    if (odirect != nullptr) {
      // Already read; records are parsed from it and copied out below.
    } else if (!direct) {
      read = slab_->Read(start, end - start, &run);
    } else {
      run.resize(scratch_bytes);
      auto* scratch = reinterpret_cast<uint8_t*>(run.data());
      parts.clear();
      size_t at = 0;
      for (size_t m = j; m < k; ++m) {
        const Want& w = wants[m];
        if (w.dst.empty()) continue;
        // Everything in the scratch up to its header's end, then its body in place.
        const size_t upto = w.scratch_at + w.header_bytes;
        parts.emplace_back(scratch + at, upto - at);
        parts.push_back(w.dst);
        at = upto;
      }
      if (at < scratch_bytes) parts.emplace_back(scratch + at, scratch_bytes - at);
      read = slab_->ReadV(start, parts);
    }
    const auto* base =
        odirect != nullptr ? odirect : reinterpret_cast<const uint8_t*>(run.data());
    for (size_t m = j; m < k; ++m) {
      const Want& w = wants[m];
      if (!read.ok() ||
          (p >= 0 && !wait_for(p, w.offset + w.rec.stored_bytes - plan[p].file_start))) {
        alone.push_back(w.i);
        continue;
      }
      const size_t at = direct ? w.scratch_at : static_cast<size_t>(w.offset - start);
      uint64_t checksum = 0;
      if (!w.dst.empty() && direct) {
        absl::StatusOr<ColdRecordHeader> header =
            ParseColdRecordHeader(std::span<const uint8_t>(base + at, w.header_bytes));
        if (header.ok() && !header->zstd && header->header_bytes == w.header_bytes &&
            header->record.stored_bytes == w.rec.stored_bytes &&
            header->record.checksum == w.rec.checksum && header->record.ns_id == ns_id &&
            header->record.key == keys[w.i] &&
            PayloadChecksum(w.dst) == w.rec.checksum) {
          sink(w.i, w.dst, w.rec.checksum);
        } else {
          alone.push_back(w.i);  // GetBlock reads the record again and decides
        }
        continue;
      }
      ColdRecordHeader header;
      absl::StatusOr<std::span<const uint8_t>> body = ParseColdRecord(
          std::span<const uint8_t>(base + at, w.rec.stored_bytes), &unpacked, &checksum,
          &header);
      if (body.ok() && checksum == w.rec.checksum && body->size() == w.rec.payload_bytes &&
          header.record.ns_id == ns_id && header.record.key == keys[w.i]) {
        sink(w.i, *body, checksum);
      } else {
        alone.push_back(w.i);  // GetBlock reads the record again and decides
      }
    }
  }
  if (reader.joinable()) reader.join();
  if (aligned != nullptr && aligned->capacity <= kDirectBufferKeptBytes) {
    common::MutexLock lock(&direct_buffers_mu_);
    if (direct_buffers_.size() < kDirectBuffersKept) direct_buffers_.push_back(std::move(aligned));
  }
  for (size_t i : alone) {
    out[i] = GetBlock(ns_id, keys[i], [&](std::span<const uint8_t> payload, uint64_t checksum) {
      sink(i, payload, checksum);
    });
  }
  return out;
}

absl::Status RocksDbColdTier::DeleteBlock(uint32_t ns_id, std::string_view key) {
  const std::string index_key = IndexKey(ns_id, key);
  ASSIGN_OR_RETURN(const std::optional<SlabFile::Extent> old, ExtentOf(index_key));
  // Kill first: from here no scan brings the block back, whatever is lost later.
  if (old) RETURN_IF_ERROR(Kill(old->offset));
  RETURN_IF_ERROR(
      FromRocks(db_->Delete(rocksdb::WriteOptions(), meta_cf_, index_key), "delete block"));
  // Only now may the extent be reused: it is killed and its record is gone (header).
  if (old) {
    slab_->Free(old->offset, old->bytes);
    blocks_.fetch_sub(1, std::memory_order_relaxed);
  }
  return absl::OkStatus();
}

absl::Status RocksDbColdTier::PutNamespace(uint32_t ns_id, std::string_view spec) {
  {
    // cold.meta first: at open the database follows it (SyncNamespaces).
    common::MutexLock lock(&meta_mu_);
    const std::map<uint32_t, std::string> before = meta_.namespaces;
    meta_.namespaces[ns_id] = std::string(spec);
    if (absl::Status st = WriteMetaLocked(); !st.ok()) {
      meta_.namespaces = before;
      return st;
    }
  }
  rocksdb::WriteOptions wo;
  wo.sync = true;  // rare, and a lost namespace would orphan its blocks
  std::string key = BlockKey(ns_id, "", kNamespacePrefix);
  return FromRocks(db_->Put(wo, meta_cf_, key, rocksdb::Slice(spec.data(), spec.size())),
                   "put namespace");
}

absl::Status RocksDbColdTier::DeleteNamespace(uint32_t ns_id) {
  {
    common::MutexLock lock(&meta_mu_);
    const std::map<uint32_t, std::string> before = meta_.namespaces;
    meta_.namespaces.erase(ns_id);
    if (absl::Status st = WriteMetaLocked(); !st.ok()) {
      meta_.namespaces = before;
      return st;
    }
  }
  rocksdb::WriteOptions wo;
  wo.sync = true;
  return FromRocks(db_->Delete(wo, meta_cf_, BlockKey(ns_id, "", kNamespacePrefix)),
                   "delete namespace");
}

absl::Status RocksDbColdTier::ForEachNamespace(
    const std::function<void(uint32_t, std::string_view)>& fn) {
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), meta_cf_));
  const std::string prefix(1, kNamespacePrefix);
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    if (it->key().size() != 5) return absl::DataLossError("malformed namespace key");
    fn(DecodeNsId(it->key().data() + 1), std::string_view(it->value().data(), it->value().size()));
  }
  return FromRocks(it->status(), "scan namespaces");
}

absl::Status RocksDbColdTier::ForEachBlock(const std::function<void(const ColdIndexRecord&)>& fn) {
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), meta_cf_));
  const std::string prefix(1, kBlockIndexPrefix);
  ColdIndexRecord rec;
  uint64_t offset;
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    const rocksdb::Slice k = it->key();
    const rocksdb::Slice v = it->value();
    if (k.size() < 6) return absl::DataLossError("malformed block index record");
    RETURN_IF_ERROR(ParseIndex(std::string_view(v.data(), v.size()), &rec, &offset));
    rec.ns_id = DecodeNsId(k.data() + 1);
    rec.key.assign(k.data() + 5, k.size() - 5);
    fn(rec);
  }
  return FromRocks(it->status(), "scan block index");
}

absl::Status RocksDbColdTier::Sync() {
  // Payloads first: a synced record must never name bytes that a power loss can lose.
  RETURN_IF_ERROR(slab_->Sync());
  return FromRocks(db_->SyncWAL(), "sync wal");
}

}  // namespace kvtier::storage
