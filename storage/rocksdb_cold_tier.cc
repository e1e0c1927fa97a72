#include "storage/rocksdb_cold_tier.h"

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/sst_file_reader.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/strings.h"
#include "storage/cold_record.h"

namespace kvtier::storage {
namespace {

constexpr char kBlockIndexPrefix = 'i';
constexpr char kNamespacePrefix = 'n';

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

rocksdb::ColumnFamilyOptions BlocksCfOptions(const ColdTierOptions& options) {
  rocksdb::ColumnFamilyOptions blocks;
  blocks.compression = rocksdb::kNoCompression;  // zstd is ours, per value (PutBlock)
  blocks.write_buffer_size = 64ull << 20;
  blocks.max_write_buffer_number = 3;
  blocks.target_file_size_base = 256ull << 20;
  blocks.max_bytes_for_level_base = 1ull << 30;
  rocksdb::BlockBasedTableOptions table;
  // Promoted blocks go to the hot arena; caching multi-MiB values twice only evicts
  // index blocks.
  table.no_block_cache = true;
  blocks.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  if (options.blob_files) {
    blocks.enable_blob_files = true;
    blocks.min_blob_size = 4096;
    blocks.blob_compression_type = rocksdb::kNoCompression;
    blocks.enable_blob_garbage_collection = true;  // reclaim deleted / overwritten values
  }
  return blocks;
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
  db_options.max_total_wal_size = 256ull << 20;
  // Recover the intact WAL records after a damaged one (kPointInTimeRecovery would stop
  // there and lose everything after it). Payloads are verified by our checksum anyway;
  // the price is that a dropped delete can bring an older (still valid) block back.
  db_options.wal_recovery_mode = rocksdb::WALRecoveryMode::kSkipAnyCorruptedRecords;
  std::shared_ptr<rocksdb::Logger> base_log;
  if (rocksdb::CreateLoggerFromOptions(options.dir, db_options, &base_log).ok()) {
    wal_log = std::make_shared<WalDropCounter>(std::move(base_log));
    db_options.info_log = wal_log;
  }

  rocksdb::ColumnFamilyOptions meta;
  meta.compression = rocksdb::kNoCompression;

  std::vector<rocksdb::ColumnFamilyDescriptor> cfs = {
      {rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions()},
      {"blocks", BlocksCfOptions(options)},
      {"meta", meta}};
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
  tier->blocks_cf_ = handles[1];
  tier->meta_cf_ = handles[2];
  return tier;
}

RocksDbColdTier::~RocksDbColdTier() {
  if (db_ == nullptr) return;
  for (auto* cf : {default_cf_, blocks_cf_, meta_cf_}) {
    if (cf != nullptr) db_->DestroyColumnFamilyHandle(cf);
  }
  db_->Close();
  delete db_;
}

absl::StatusOr<uint32_t> RocksDbColdTier::PutBlock(ColdIndexRecord record,
                                                   std::span<const uint8_t> payload,
                                                   uint64_t checksum, bool compress) {
  const std::string value = EncodeColdRecord(payload, checksum, compress);
  record.payload_bytes = static_cast<uint32_t>(payload.size());
  record.stored_bytes = static_cast<uint32_t>(value.size());
  record.checksum = checksum;
  const std::string index = EncodeColdIndexValue(record);

  rocksdb::WriteBatch batch;
  const std::string block_key = BlockKey(record.ns_id, record.key);
  rocksdb::Status s = batch.Put(blocks_cf_, block_key, value);
  if (s.ok()) s = batch.Put(meta_cf_, IndexKey(record.ns_id, record.key), index);
  rocksdb::WriteOptions wo;
  wo.sync = options_.sync_writes;
  if (s.ok()) s = db_->Write(wo, &batch);
  if (!s.ok()) return FromRocks(s, "put block");
  return record.stored_bytes;
}

absl::Status RocksDbColdTier::GetBlock(uint32_t ns_id, std::string_view key,
                                       const PayloadSink& sink) {
  rocksdb::PinnableSlice value;
  rocksdb::ReadOptions ro;
  // Our XXH3 over the payload (ParseColdRecord) covers what RocksDB's block checksum would; paying
  // for both costs a full extra pass over every cold read.
  ro.verify_checksums = false;
  rocksdb::Status s = db_->Get(ro, blocks_cf_, BlockKey(ns_id, key), &value);
  if (s.IsNotFound()) return absl::NotFoundError("block not in cold tier");
  if (!s.ok()) return FromRocks(s, "get block");
  std::string unpacked;
  uint64_t checksum = 0;
  auto body = ParseColdRecord(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(value.data()), value.size()),
      &unpacked, &checksum);
  if (!body.ok()) return body.status();
  sink(*body, checksum);
  return absl::OkStatus();
}

absl::Status RocksDbColdTier::DeleteBlock(uint32_t ns_id, std::string_view key) {
  rocksdb::WriteBatch batch;
  rocksdb::Status s = batch.Delete(blocks_cf_, BlockKey(ns_id, key));
  if (s.ok()) s = batch.Delete(meta_cf_, IndexKey(ns_id, key));
  if (s.ok()) s = db_->Write(rocksdb::WriteOptions(), &batch);
  return FromRocks(s, "delete block");
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
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    const rocksdb::Slice k = it->key();
    const rocksdb::Slice v = it->value();
    if (k.size() < 6) return absl::DataLossError("malformed block index record");
    absl::Status parsed = ParseColdIndexValue(std::string_view(v.data(), v.size()), &rec);
    if (!parsed.ok()) return parsed;
    rec.ns_id = DecodeNsId(k.data() + 1);
    rec.key.assign(k.data() + 5, k.size() - 5);
    fn(rec);
  }
  return FromRocks(it->status(), "scan block index");
}

absl::Status RocksDbColdTier::Sync() { return FromRocks(db_->SyncWAL(), "sync wal"); }

}  // namespace kvtier::storage
