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
#include <memory>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "storage/cold_record.h"
#include "storage/slab_file.h"

namespace kvtier::storage {
namespace {

constexpr char kBlockIndexPrefix = 'i';
constexpr char kNamespacePrefix = 'n';
constexpr char kSlabFileName[] = "cold.slab";
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

// Whether the extent holds the block value `record` names: its header (cold_record.h:
// checksum at byte 8, payload_bytes at byte 16) matches. A cheap test used at open only.
bool ExtentHolds(const SlabFile& slab, uint64_t offset, const ColdIndexRecord& record) {
  std::string header;
  if (!slab.Read(offset, kColdRecordHeaderBytes, &header).ok()) return false;
  uint64_t checksum;
  uint32_t payload_bytes;
  std::memcpy(&checksum, header.data() + 8, 8);
  std::memcpy(&payload_bytes, header.data() + 16, 4);
  return checksum == record.checksum && payload_bytes == record.payload_bytes;
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
  std::shared_ptr<WalDropCounter> wal_log;
  rocksdb::DBOptions db_options;
  db_options.create_if_missing = true;
  db_options.create_missing_column_families = true;
  db_options.max_background_jobs = 2;
  // Index records are ~60 bytes: 64 MiB of WAL is ~1M puts, and flushing bounds it.
  db_options.max_total_wal_size = 64ull << 20;
  // Recover the intact WAL records after a damaged one (kPointInTimeRecovery would stop
  // there and lose everything after it). Payloads are verified by our checksum anyway;
  // the price is that a dropped delete can bring an older record back, whose extent is
  // then checked at open (see Open's overlap rule) and on every read.
  db_options.wal_recovery_mode = rocksdb::WALRecoveryMode::kSkipAnyCorruptedRecords;

  // A directory of the earlier layout (payloads in a "blocks" column family) is refused,
  // not converted: see the header.
  std::vector<std::string> existing;
  if (rocksdb::DB::ListColumnFamilies(db_options, options.dir, &existing).ok() &&
      std::find(existing.begin(), existing.end(), "blocks") != existing.end()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "data_dir '", options.dir,
        "' holds a cold tier of the earlier layout (payloads inside RocksDB, column family "
        "'blocks'); this version keeps payloads in ",
        kSlabFileName,
        " and cannot read it: empty the directory (the cache refills) or run the earlier "
        "kvtierd"));
  }
  std::shared_ptr<rocksdb::Logger> base_log;
  if (rocksdb::CreateLoggerFromOptions(options.dir, db_options, &base_log).ok()) {
    wal_log = std::make_shared<WalDropCounter>(std::move(base_log));
    db_options.info_log = wal_log;
  }

  rocksdb::ColumnFamilyOptions meta;
  meta.compression = rocksdb::kNoCompression;
  meta.write_buffer_size = 16ull << 20;

  std::vector<rocksdb::ColumnFamilyDescriptor> cfs = {
      {rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions()}, {"meta", meta}};
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::Status s = rocksdb::DB::Open(db_options, options.dir, cfs, &handles, &tier->db_);
  if (!s.ok()) {
    absl::Status st = FromRocks(s, "open");
    if (absl::IsDataLoss(st)) {
      // Name the damaged file so the operator knows what to move aside.
      const std::string damaged = DamagedTableFiles(options.dir);
      if (!damaged.empty()) {
        return absl::DataLossError(
            absl::StrCat(st.message(), "; damaged table file(s) in ", options.dir, ": ", damaged));
      }
      return st;
    }
    return absl::Status(
        st.code() == absl::StatusCode::kInternal ? absl::StatusCode::kUnavailable : st.code(),
        st.message());
  }
  if (wal_log != nullptr && wal_log->dropped_ranges() > 0) {
    tier->wal_dropped_ranges_ = wal_log->dropped_ranges();
    tier->wal_dropped_bytes_ = wal_log->dropped_bytes();
    KVTIER_LOG(WARNING) << "cold tier " << options.dir << ": WAL recovery skipped "
                        << tier->wal_dropped_ranges_ << " corrupted range(s), "
                        << tier->wal_dropped_bytes_ << " bytes (see its RocksDB LOG)";
  }
  tier->default_cf_ = handles[0];
  tier->meta_cf_ = handles[1];
  ASSIGN_OR_RETURN(tier->slab_,
                   SlabFile::Open((std::filesystem::path(options.dir) / kSlabFileName).string(),
                                  options.slab_bytes));
  RETURN_IF_ERROR(tier->RebuildSlab());
  return tier;
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
    if (u.extent.offset % SlabFile::kUnitBytes != 0 || u.extent.bytes < kColdRecordHeaderBytes) {
      RETURN_IF_ERROR(FromRocks(drops.Delete(meta_cf_, u.db_key), "drop malformed record"));
      continue;
    }
    if (!kept.empty() && u.extent.offset < kept.back().offset + kept.back().bytes) {
      const Used* prev = kept_by.back();
      if (!ExtentHolds(*slab_, prev->extent.offset, prev->record) &&
          ExtentHolds(*slab_, u.extent.offset, u.record)) {
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
  return slab_->Reset(kept);
}

RocksDbColdTier::~RocksDbColdTier() {
  if (db_ == nullptr) return;
  for (auto* cf : {default_cf_, meta_cf_}) {
    if (cf != nullptr) db_->DestroyColumnFamilyHandle(cf);
  }
  db_->Close();
  delete db_;
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
  const std::string value = EncodeColdRecord(payload, checksum, compress);
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
  if (old) slab_->Free(old->offset, old->bytes);  // the record naming it is overwritten
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
    const absl::Status read = slab_->Read(offset, rec.stored_bytes, &value);
    absl::StatusOr<std::span<const uint8_t>> body =
        read.ok() ? ParseColdRecord(std::span<const uint8_t>(
                                        reinterpret_cast<const uint8_t*>(value.data()),
                                        value.size()),
                                    &unpacked, &checksum)
                  : absl::StatusOr<std::span<const uint8_t>>(read);
    if (body.ok() && (checksum != rec.checksum || body->size() != rec.payload_bytes)) {
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

absl::Status RocksDbColdTier::DeleteBlock(uint32_t ns_id, std::string_view key) {
  const std::string index_key = IndexKey(ns_id, key);
  ASSIGN_OR_RETURN(const std::optional<SlabFile::Extent> old, ExtentOf(index_key));
  RETURN_IF_ERROR(
      FromRocks(db_->Delete(rocksdb::WriteOptions(), meta_cf_, index_key), "delete block"));
  // Only now may the extent be reused: its record is gone (see the header).
  if (old) slab_->Free(old->offset, old->bytes);
  return absl::OkStatus();
}

absl::Status RocksDbColdTier::PutNamespace(uint32_t ns_id, std::string_view spec) {
  rocksdb::WriteOptions wo;
  wo.sync = true;  // rare, and a lost namespace would orphan its blocks
  std::string key = BlockKey(ns_id, "", kNamespacePrefix);
  return FromRocks(db_->Put(wo, meta_cf_, key, rocksdb::Slice(spec.data(), spec.size())),
                   "put namespace");
}

absl::Status RocksDbColdTier::DeleteNamespace(uint32_t ns_id) {
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
