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
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "storage/cold_record.h"
#include "storage/slab_file.h"
#include "storage/slab_scan.h"

namespace kvtier::storage {
namespace {

constexpr char kBlockIndexPrefix = 'i';
constexpr char kNamespacePrefix = 'n';
constexpr char kSlabFileName[] = "cold.slab";
constexpr char kMetaFileName[] = "cold.meta";
constexpr size_t kOffsetBytes = 8;

// Big-endian namespace id so a namespace's keys are contiguous.
std::string BlockKey(uint32_t ns_id, std::string_view key, char prefix = 0) {
  std::string out;
  out.reserve(5 + key.size());
  if (prefix != 0) out.push_back(prefix);
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>(ns_id >> shift));
  out.append(key);
  return out;
}

std::string IndexKey(uint32_t ns_id, std::string_view key) {
  return BlockKey(ns_id, key, kBlockIndexPrefix);
}

uint32_t DecodeNsId(const char* p) {
  return (uint32_t{static_cast<uint8_t>(p[0])} << 24) |
         (uint32_t{static_cast<uint8_t>(p[1])} << 16) |
         (uint32_t{static_cast<uint8_t>(p[2])} << 8) | uint32_t{static_cast<uint8_t>(p[3])};
}

absl::Status FromRocks(const rocksdb::Status& s, std::string_view what) {
  if (s.ok()) return absl::OkStatus();
  std::string msg = absl::StrCat("cold tier ", Sv(what), ": ", s.ToString());
  if (s.IsNotFound()) return absl::NotFoundError(msg);
  if (s.IsCorruption()) return absl::DataLossError(msg);
  if (s.IsIOError() || s.IsBusy() || s.IsTimedOut() || s.IsTryAgain()) {
    return absl::UnavailableError(msg);
  }
  return absl::InternalError(msg);
}

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

// An index value: the cold_record.h index value, then the slab offset (u64 LE) of the
// block's extent, which holds its cold_record.h block value (stored_bytes long).
std::string EncodeIndex(const ColdIndexRecord& record, uint64_t offset) {
  std::string out = EncodeColdIndexValue(record);
  out.append(reinterpret_cast<const char*>(&offset), kOffsetBytes);
  return out;
}

absl::Status ParseIndex(std::string_view value, ColdIndexRecord* record, uint64_t* offset) {
  if (value.size() < kOffsetBytes) return absl::DataLossError("malformed block index record");
  std::memcpy(offset, value.data() + value.size() - kOffsetBytes, kOffsetBytes);
  return ParseColdIndexValue(value.substr(0, value.size() - kOffsetBytes), record);
}

// Whether the extent at `offset` holds the block value of (ns_id, key) that `record`
// names: its header parses and matches. A cheap test used at open only.
bool ExtentHolds(const SlabFile& slab, uint64_t offset, uint32_t ns_id, std::string_view key,
                 const ColdIndexRecord& record) {
  std::string prefix;
  const uint64_t n = std::min<uint64_t>(record.stored_bytes, SlabFile::kUnitBytes);
  if (!slab.Read(offset, n, &prefix).ok()) return false;
  absl::StatusOr<ColdRecordHeader> h = ParseColdRecordHeader(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(prefix.data()), prefix.size()));
  return h.ok() && h->record.ns_id == ns_id && h->record.key == key &&
         h->record.checksum == record.checksum &&
         h->record.payload_bytes == record.payload_bytes &&
         h->record.stored_bytes == record.stored_bytes;
}

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

absl::Status RocksDbColdTier::SyncNamespaces(const ColdMeta& meta) {
  // cold.meta is written before the database (PutNamespace, DeleteNamespace), so it is
  // the newer of the two: the database follows it.
  std::map<uint32_t, std::string> in_db;
  RETURN_IF_ERROR(ForEachNamespace(
      [&](uint32_t id, std::string_view spec) { in_db.emplace(id, std::string(spec)); }));
  rocksdb::WriteBatch batch;
  for (const auto& [id, spec] : meta.namespaces) {
    auto it = in_db.find(id);
    if (it != in_db.end() && it->second == spec) continue;
    RETURN_IF_ERROR(FromRocks(batch.Put(meta_cf_, BlockKey(id, "", kNamespacePrefix), spec),
                              "put namespace"));
    ++recovery_.namespaces_recreated;
  }
  for (const auto& [id, spec] : in_db) {
    if (meta.namespaces.contains(id)) continue;
    RETURN_IF_ERROR(
        FromRocks(batch.Delete(meta_cf_, BlockKey(id, "", kNamespacePrefix)), "drop namespace"));
  }
  {
    common::MutexLock lock(&meta_mu_);
    meta_.namespaces = meta.namespaces;
  }
  if (batch.Count() == 0) return absl::OkStatus();
  KVTIER_LOG(WARNING) << "cold tier " << options_.dir << ": " << batch.Count()
                      << " namespace record(s) of the database differed from " << kMetaFileName
                      << "; rewritten from it";
  rocksdb::WriteOptions wo;
  wo.sync = true;
  return FromRocks(db_->Write(wo, &batch), "rewrite namespaces");
}

absl::Status RocksDbColdTier::Recover(const std::optional<ColdMeta>& meta) {
  const absl::Time start = absl::Now();
  KVTIER_LOG(WARNING) << "cold tier " << options_.dir << ": rebuilding the index from "
                      << kSlabFileName << " (" << recovery_.scan_reason << ")";
  ASSIGN_OR_RETURN(SlabScan scan, ScanSlab(*slab_));
  // Namespaces: cold.meta when it is intact, else what the database still has.
  ColdMeta specs;
  if (meta) {
    specs = *meta;
  } else {
    RETURN_IF_ERROR(ForEachNamespace(
        [&](uint32_t id, std::string_view spec) { specs.namespaces.emplace(id, spec); }));
  }
  RETURN_IF_ERROR(SyncNamespaces(specs));
  // The block of each key: its highest-seq verified copy in a known namespace.
  std::vector<uint64_t> kills;
  absl::flat_hash_map<std::string, size_t> best;
  for (size_t i = 0; i < scan.extents.size(); ++i) {
    const ColdIndexRecord& r = scan.extents[i].header.record;
    if (!specs.namespaces.contains(r.ns_id)) {
      ++recovery_.orphan_blocks;
      kills.push_back(scan.extents[i].offset);
      continue;
    }
    if (r.key.empty() || r.parent_key.size() > 255) {
      ++recovery_.damaged_extents;
      kills.push_back(scan.extents[i].offset);
      continue;
    }
    auto [it, inserted] = best.try_emplace(IndexKey(r.ns_id, r.key), i);
    if (inserted) continue;
    ++recovery_.stale_copies;
    if (scan.extents[it->second].header.seq < scan.extents[i].header.seq) {
      kills.push_back(scan.extents[it->second].offset);
      it->second = i;
    } else {
      kills.push_back(scan.extents[i].offset);
    }
  }
  recovery_.damaged_extents += scan.damaged.size() + scan.damaged_headers;
  for (const SlabFile::Extent& e : scan.damaged) kills.push_back(e.offset);
  // Kill the losers first: a later scan must not find them whatever happens next.
  for (uint64_t offset : kills) {
    RETURN_IF_ERROR(slab_->Write(offset, kColdRecordKilled, false));
  }
  if (!kills.empty()) RETURN_IF_ERROR(slab_->Sync());
  // The index records: exactly the chosen extents.
  absl::flat_hash_map<std::string, std::string> in_db;
  {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), meta_cf_));
    const std::string prefix(1, kBlockIndexPrefix);
    for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
      in_db.emplace(it->key().ToString(), it->value().ToString());
    }
    RETURN_IF_ERROR(FromRocks(it->status(), "scan block index"));
  }
  rocksdb::WriteOptions wo;
  wo.sync = true;
  rocksdb::WriteBatch batch;
  auto flush_batch = [&](size_t at_least) -> absl::Status {
    if (batch.Count() < at_least || batch.Count() == 0) return absl::OkStatus();
    RETURN_IF_ERROR(FromRocks(db_->Write(wo, &batch), "rewrite block index"));
    batch.Clear();
    return absl::OkStatus();
  };
  std::vector<SlabFile::Extent> used;
  used.reserve(best.size());
  for (const auto& [key, i] : best) {
    const ScannedExtent& e = scan.extents[i];
    const std::string value = EncodeIndex(e.header.record, e.offset);
    used.push_back({e.offset, e.header.record.stored_bytes});
    auto it = in_db.find(key);
    if (it != in_db.end()) {
      const bool same = it->second == value;
      in_db.erase(it);
      if (same) continue;
    }
    RETURN_IF_ERROR(FromRocks(batch.Put(meta_cf_, key, value), "put block index"));
    ++recovery_.records_recreated;
    RETURN_IF_ERROR(flush_batch(1 << 14));
  }
  for (const auto& [key, value] : in_db) {  // naming no verified extent
    RETURN_IF_ERROR(FromRocks(batch.Delete(meta_cf_, key), "drop block index"));
    ++recovery_.records_dropped;
    RETURN_IF_ERROR(flush_batch(1 << 14));
  }
  RETURN_IF_ERROR(flush_batch(0));
  std::sort(used.begin(), used.end(),
            [](const SlabFile::Extent& a, const SlabFile::Extent& b) { return a.offset < b.offset; });
  RETURN_IF_ERROR(slab_->Reset(used));
  blocks_.store(static_cast<int64_t>(used.size()));
  next_seq_.store(std::max(next_seq_.load(), scan.max_seq + 1));
  recovery_.slab_scanned = true;
  recovery_.scan_bytes = scan.bytes;
  recovery_.blocks_indexed = used.size();
  recovery_.scan_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  const double secs = std::max(recovery_.scan_seconds, 1e-9);
  KVTIER_LOG(WARNING) << "cold tier " << options_.dir << ": index rebuilt from "
                      << kSlabFileName << ": " << scan.bytes << " bytes in "
                      << recovery_.scan_seconds << " s ("
                      << static_cast<double>(scan.bytes) / secs / 1e9 << " GB/s, "
                      << static_cast<double>(scan.extents.size()) / secs << " blocks/s); "
                      << recovery_.blocks_indexed << " blocks indexed, "
                      << recovery_.records_recreated << " records re-created, "
                      << recovery_.records_dropped << " dropped; "
                      << recovery_.damaged_extents << " damaged extent(s), "
                      << recovery_.stale_copies << " stale copies, " << recovery_.orphan_blocks
                      << " orphan block(s) freed; " << scan.killed_headers
                      << " deleted extent(s) skipped; " << recovery_.namespaces_recreated
                      << " namespace(s) re-created";
  return absl::OkStatus();
}

absl::Status RocksDbColdTier::RebuildSlab() {
  struct Used {
    SlabFile::Extent extent;
    std::string db_key;
    ColdIndexRecord record;
  };
  std::vector<Used> used;
  {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), meta_cf_));
    const std::string prefix(1, kBlockIndexPrefix);
    for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
      Used u;
      if (!ParseIndex(std::string_view(it->value().data(), it->value().size()), &u.record,
                      &u.extent.offset)
               .ok()) {
        continue;  // ForEachBlock reports it; it names no extent we could trust
      }
      u.extent.bytes = u.record.stored_bytes;
      u.db_key = it->key().ToString();
      used.push_back(std::move(u));
    }
    RETURN_IF_ERROR(FromRocks(it->status(), "scan block index"));
  }
  std::sort(used.begin(), used.end(), [](const Used& a, const Used& b) {
    return a.extent.offset != b.extent.offset ? a.extent.offset < b.extent.offset
                                              : a.db_key < b.db_key;
  });
  // Overlapping extents mean a record whose deletion was lost (see the header): keep
  // the one whose extent holds its block, drop the other record. Reads would never
  // serve the stale one anyway; dropping it keeps the allocator exact.
  std::vector<SlabFile::Extent> kept;
  std::vector<const Used*> kept_by;
  rocksdb::WriteBatch drops;
  for (const Used& u : used) {
    if (u.extent.offset % SlabFile::kUnitBytes != 0 || u.extent.bytes < kColdRecordHeaderBytes ||
        u.db_key.size() < 6) {
      RETURN_IF_ERROR(FromRocks(drops.Delete(meta_cf_, u.db_key), "drop malformed record"));
      continue;
    }
    if (!kept.empty() && u.extent.offset < kept.back().offset + kept.back().bytes) {
      const Used* prev = kept_by.back();
      auto holds = [&](const Used& x) {
        return ExtentHolds(*slab_, x.extent.offset, DecodeNsId(x.db_key.data() + 1),
                           std::string_view(x.db_key).substr(5), x.record);
      };
      if (!holds(*prev) && holds(u)) {
        RETURN_IF_ERROR(FromRocks(drops.Delete(meta_cf_, prev->db_key), "drop stale record"));
        kept.pop_back();
        kept_by.pop_back();
      } else {
        RETURN_IF_ERROR(FromRocks(drops.Delete(meta_cf_, u.db_key), "drop stale record"));
        continue;
      }
      if (!kept.empty() && u.extent.offset < kept.back().offset + kept.back().bytes) {
        RETURN_IF_ERROR(FromRocks(drops.Delete(meta_cf_, u.db_key), "drop stale record"));
        continue;
      }
    }
    kept.push_back(u.extent);
    kept_by.push_back(&u);
  }
  if (drops.Count() > 0) {
    KVTIER_LOG(WARNING) << "cold tier " << options_.dir << ": dropped " << drops.Count()
                        << " index record(s) naming an extent another block holds";
    rocksdb::WriteOptions wo;
    wo.sync = true;
    RETURN_IF_ERROR(FromRocks(db_->Write(wo, &drops), "drop stale records"));
  }
  blocks_.store(static_cast<int64_t>(kept.size()));
  return slab_->Reset(kept);
}

absl::StatusOr<ColdRecoverReport> RocksDbColdTier::RecoverOnline(ColdRecoverMode mode,
                                                                 const ColdRecoverHooks& hooks) {
  const absl::Time start = absl::Now();
  const bool rebuild = mode == ColdRecoverMode::kRebuild;
  ColdRecoverReport report;
  // Everything up to `critical` runs alongside Puts and Deletes, so what it saw may be
  // stale by then: `critical` reads again each record and extent it acts on.
  ASSIGN_OR_RETURN(SlabScan scan, ScanSlab(*slab_));
  report.scan_bytes = scan.bytes;
  report.extents_scanned = scan.extents.size();
  report.deleted_extents = scan.killed_headers;
  absl::flat_hash_map<uint64_t, size_t> scanned_at;
  scanned_at.reserve(scan.extents.size());
  for (size_t i = 0; i < scan.extents.size(); ++i) scanned_at.emplace(scan.extents[i].offset, i);
  auto holds = [](const ColdRecordHeader& h, const ColdIndexRecord& r) {
    return h.record.ns_id == r.ns_id && h.record.key == r.key &&
           h.record.checksum == r.checksum && h.record.stored_bytes == r.stored_bytes &&
           h.record.payload_bytes == r.payload_bytes;
  };
  // Whether the extent a record names holds its block (the scan's view, else read again).
  auto verified = [&](const ColdIndexRecord& rec, uint64_t offset) -> absl::StatusOr<bool> {
    auto at = scanned_at.find(offset);
    if (at != scanned_at.end() && holds(scan.extents[at->second].header, rec)) return true;
    absl::StatusOr<ColdRecordHeader> h = VerifyExtent(*slab_, offset);
    if (!h.ok() && !absl::IsDataLoss(h.status()) && !absl::IsNotFound(h.status())) {
      return h.status();
    }
    return h.ok() && holds(*h, rec);
  };
  // The index as it is now: which records the blocks back (counted, never changed), and
  // which keys have a record at all.
  absl::flat_hash_map<std::string, uint64_t> named;  // index key -> offset
  {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), meta_cf_));
    const std::string prefix(1, kBlockIndexPrefix);
    for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
      ColdIndexRecord rec;
      uint64_t offset = 0;
      if (it->key().size() < 6 ||
          !ParseIndex(std::string_view(it->value().data(), it->value().size()), &rec, &offset)
               .ok()) {
        ++report.damaged_records;
        continue;
      }
      rec.ns_id = DecodeNsId(it->key().data() + 1);
      rec.key.assign(it->key().data() + 5, it->key().size() - 5);
      ASSIGN_OR_RETURN(const bool ok, verified(rec, offset));
      ++(ok ? report.records_verified : report.damaged_records);
      named.emplace(it->key().ToString(), offset);
    }
    RETURN_IF_ERROR(FromRocks(it->status(), "scan block index"));
  }
  // Candidates: verified extents no record named, and damaged extents.
  std::vector<size_t> unnamed;
  for (size_t i = 0; i < scan.extents.size(); ++i) {
    const ColdIndexRecord& r = scan.extents[i].header.record;
    auto n = named.find(IndexKey(r.ns_id, r.key));
    if (n == named.end() || n->second != scan.extents[i].offset) unnamed.push_back(i);
  }
  absl::flat_hash_map<std::string, uint64_t>().swap(named);

  // The database's namespace records, then cold.meta's specs (written first: a namespace
  // write under way shows in `specs_before`, and is at worst written again below).
  auto read_db_namespaces = [&](std::map<uint32_t, std::string>* in_db) {
    in_db->clear();
    return ForEachNamespace(
        [&](uint32_t id, std::string_view spec) { in_db->emplace(id, std::string(spec)); });
  };
  std::map<uint32_t, std::string> in_db;
  RETURN_IF_ERROR(read_db_namespaces(&in_db));
  std::map<uint32_t, std::string> specs_before;
  {
    common::MutexLock lock(&meta_mu_);
    specs_before = meta_.namespaces;
  }

  // The reconcile: no Put, Delete or namespace write runs (hooks.exclusive). Its cost is
  // in the candidates, not in the index size (the database is read only for them).
  auto critical = [&]() -> absl::Status {
    std::map<uint32_t, std::string> specs;
    {
      common::MutexLock lock(&meta_mu_);
      specs = meta_.namespaces;
    }
    // A namespace was registered or dropped since: read the database's records again.
    if (specs != specs_before) RETURN_IF_ERROR(read_db_namespaces(&in_db));
    {
      // Namespace records: the database follows cold.meta (written first).
      rocksdb::WriteBatch batch;
      for (const auto& [id, spec] : specs) {
        auto it = in_db.find(id);
        if (it != in_db.end() && it->second == spec) continue;
        ++report.namespaces_recreated;
        RETURN_IF_ERROR(FromRocks(batch.Put(meta_cf_, BlockKey(id, "", kNamespacePrefix), spec),
                                  "put namespace"));
      }
      if (rebuild && batch.Count() > 0) {
        rocksdb::WriteOptions wo;
        wo.sync = true;
        RETURN_IF_ERROR(FromRocks(db_->Write(wo, &batch), "rewrite namespaces"));
      }
    }
    std::vector<uint64_t> kills;
    absl::flat_hash_map<std::string, ColdRecordHeader> lost;  // index key -> newest copy
    absl::flat_hash_map<std::string, uint64_t> lost_at;
    for (size_t i : unnamed) {
      const ScannedExtent& e = scan.extents[i];
      const ColdIndexRecord& r = e.header.record;
      const std::string key = IndexKey(r.ns_id, r.key);
      // The key's record now (a Put may have written one since).
      std::string value;
      const rocksdb::Status got = db_->Get(rocksdb::ReadOptions(), meta_cf_, key, &value);
      if (!got.ok() && !got.IsNotFound()) return FromRocks(got, "get block index");
      ColdIndexRecord rec;
      uint64_t rec_offset = 0;
      const bool has_record = got.ok();
      const bool parsed = has_record && ParseIndex(value, &rec, &rec_offset).ok();
      if (parsed && rec_offset == e.offset) continue;        // its own record's (now)
      if (!slab_->IsFree(e.offset, r.stored_bytes)) continue;  // in use by another
      absl::StatusOr<ColdRecordHeader> now = VerifyExtent(*slab_, e.offset);
      if (!now.ok() || now->seq != e.header.seq) continue;  // killed or reused since
      if (!specs.contains(r.ns_id)) {
        ++report.orphan_blocks;
        kills.push_back(e.offset);
        continue;
      }
      if (has_record) {
        // A verified record is the block (this copy is older or was never acknowledged);
        // a damaged one is left to the read path (never changed here).
        rec.ns_id = r.ns_id;
        rec.key = r.key;
        bool ok = false;
        if (parsed) {
          ASSIGN_OR_RETURN(ok, verified(rec, rec_offset));
        }
        if (ok) {
          ++report.stale_copies;
          kills.push_back(e.offset);
        }
        continue;
      }
      if (r.key.empty() || r.parent_key.size() > 255) {
        ++report.damaged_extents;
        kills.push_back(e.offset);
        continue;
      }
      auto [it, inserted] = lost.try_emplace(key, *now);
      if (!inserted) {
        ++report.stale_copies;
        if (it->second.seq < now->seq) {
          kills.push_back(lost_at[key]);
          it->second = *now;
        } else {
          kills.push_back(e.offset);
          continue;
        }
      }
      lost_at[key] = e.offset;
    }
    for (const SlabFile::Extent& d : scan.damaged) {
      if (!slab_->IsFree(d.offset, SlabFile::kUnitBytes)) continue;  // a record's: counted
      absl::StatusOr<ColdRecordHeader> now = VerifyExtent(*slab_, d.offset);
      if (!absl::IsDataLoss(now.status())) continue;  // killed or rewritten since
      ++report.damaged_extents;
      kills.push_back(d.offset);
    }
    report.damaged_extents += scan.damaged_headers;  // no scan adopts those: nothing to kill
    // Keys the caller holds a newer copy of (or whose namespace is going) stay out.
    std::vector<std::pair<std::string, ColdRecordHeader>> adopt;
    adopt.reserve(lost.size());
    for (auto& [key, h] : lost) {
      if (hooks.adopt && !hooks.adopt(h.record)) {
        ++report.stale_copies;
        kills.push_back(lost_at[key]);
        continue;
      }
      adopt.emplace_back(key, h);
    }
    report.records_recreated = adopt.size();
    if (!rebuild) return absl::OkStatus();

    // Kill the losers first: a later scan must not find them whatever happens next.
    for (uint64_t offset : kills) RETURN_IF_ERROR(Kill(offset));
    if (!kills.empty()) RETURN_IF_ERROR(slab_->Sync());
    rocksdb::WriteBatch batch;
    std::vector<const ColdIndexRecord*> written;
    std::vector<SlabFile::Extent> claimed;
    auto unclaim = [&] {
      for (const SlabFile::Extent& c : claimed) slab_->Free(c.offset, c.bytes);
    };
    for (const auto& [key, h] : adopt) {
      const uint64_t offset = lost_at[key];
      if (!slab_->Claim(offset, h.record.stored_bytes)) continue;  // checked free above
      claimed.push_back({offset, h.record.stored_bytes});
      absl::Status put =
          FromRocks(batch.Put(meta_cf_, key, EncodeIndex(h.record, offset)), "put block index");
      if (!put.ok()) {
        unclaim();
        return put;
      }
      written.push_back(&h.record);
    }
    if (batch.Count() > 0) {
      rocksdb::WriteOptions wo;
      wo.sync = true;
      if (absl::Status st = FromRocks(db_->Write(wo, &batch), "rewrite block index"); !st.ok()) {
        unclaim();
        return st;
      }
    }
    blocks_.fetch_add(static_cast<int64_t>(written.size()), std::memory_order_relaxed);
    report.records_recreated = written.size();
    for (const ColdIndexRecord* r : written) {
      if (hooks.adopted) hooks.adopted(*r);
    }
    // Seqs above every copy seen, so a later re-Put's copy always wins a later scan.
    uint64_t next = next_seq_.load();
    while (next <= scan.max_seq && !next_seq_.compare_exchange_weak(next, scan.max_seq + 1)) {
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(hooks.exclusive ? hooks.exclusive(critical) : critical());
  report.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  KVTIER_LOG(WARNING) << "cold tier " << options_.dir << ": "
                      << (rebuild ? "online rebuild" : "online verify") << " from "
                      << kSlabFileName << ": " << report.scan_bytes << " bytes, "
                      << report.extents_scanned << " extents in " << report.seconds << " s; "
                      << report.records_verified << " records verified, "
                      << report.records_recreated
                      << (rebuild ? " re-created, " : " to re-create, ")
                      << report.damaged_records << " naming a damaged extent; "
                      << report.damaged_extents << " damaged extent(s), "
                      << report.stale_copies << " stale copies, " << report.orphan_blocks
                      << " orphan block(s)" << (rebuild ? " freed; " : " to free; ")
                      << report.namespaces_recreated << " namespace record(s)"
                      << (rebuild ? " re-created" : " to re-create");
  return report;
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
                                                        const MultiPayloadSink& sink) {
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
  // One pread per run, in slab order (the kernel's sequential read-ahead follows it;
  // asking for more with posix_fadvise WILLNEED measured slower here).
  std::string run;
  std::string unpacked;
  for (size_t x = 0; x < runs.size(); ++x) {
    const size_t j = runs[x].j, k = runs[x].k;
    const uint64_t start = runs[x].start, end = runs[x].end;
    const absl::Status read = slab_->Read(start, end - start, &run);
    for (size_t m = j; m < k; ++m) {
      const Want& w = wants[m];
      if (!read.ok()) {
        alone.push_back(w.i);
        continue;
      }
      uint64_t checksum = 0;
      ColdRecordHeader header;
      const auto* base = reinterpret_cast<const uint8_t*>(run.data());
      absl::StatusOr<std::span<const uint8_t>> body = ParseColdRecord(
          std::span<const uint8_t>(base + (w.offset - start), w.rec.stored_bytes), &unpacked,
          &checksum, &header);
      if (body.ok() && checksum == w.rec.checksum && body->size() == w.rec.payload_bytes &&
          header.record.ns_id == ns_id && header.record.key == keys[w.i]) {
        sink(w.i, *body, checksum);
      } else {
        alone.push_back(w.i);  // GetBlock reads the record again and decides
      }
    }
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
