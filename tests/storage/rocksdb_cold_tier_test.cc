#include "storage/rocksdb_cold_tier.h"

#include <rocksdb/db.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "storage/checksum.h"
#include "tests/storage/store_test_util.h"
#include "tests/testing/temp_dir.h"

namespace kvtier::storage {
namespace {

std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

absl::StatusOr<std::string> Read(ColdTier& cold, uint32_t ns, const std::string& key) {
  std::string out;
  absl::Status st = cold.GetBlock(ns, key, [&](std::span<const uint8_t> b, uint64_t sum) {
    EXPECT_EQ(sum, PayloadChecksum(b));
    out.assign(reinterpret_cast<const char*>(b.data()), b.size());
  });
  if (!st.ok()) return st;
  return out;
}

TEST(ColdTierTest, RoundTripIndexAndRecovery) {
  kvtier::testing::TempDir dir;
  std::string payload(100000, '\0');
  std::mt19937 rng(5);  // incompressible
  for (char& c : payload) c = static_cast<char>(rng());
  std::string zeros(100000, '\0');
  {
    auto cold = RocksDbColdTier::Open(ColdTierOptions{dir.Sub("db")});
    ASSERT_TRUE(cold.ok()) << cold.status();
    ASSERT_TRUE((*cold)->PutNamespace(3, "spec-3").ok());
    ColdIndexRecord rec;
    rec.ns_id = 3;
    rec.key = "child";
    rec.parent_key = "parent";
    rec.block_index = 7;
    auto stored = (*cold)->PutBlock(rec, Bytes(payload), PayloadChecksum(Bytes(payload)), false);
    ASSERT_TRUE(stored.ok());
    EXPECT_EQ(*stored, payload.size() + 20);
    rec.key = "zeros";
    rec.parent_key = "";
    stored = (*cold)->PutBlock(rec, Bytes(zeros), PayloadChecksum(Bytes(zeros)), true);
    ASSERT_TRUE(stored.ok());
    EXPECT_LT(*stored, zeros.size() / 10);  // zstd kept: it pays
    // Incompressible bytes stay raw even when compression is asked for.
    rec.key = "raw";
    stored = (*cold)->PutBlock(rec, Bytes(payload), PayloadChecksum(Bytes(payload)), true);
    ASSERT_TRUE(stored.ok());
    EXPECT_EQ(*stored, payload.size() + 20);
  }
  auto cold = RocksDbColdTier::Open(ColdTierOptions{dir.Sub("db")});
  ASSERT_TRUE(cold.ok());
  EXPECT_EQ(*Read(**cold, 3, "child"), payload);
  EXPECT_EQ(*Read(**cold, 3, "zeros"), zeros);
  EXPECT_EQ(*Read(**cold, 3, "raw"), payload);
  EXPECT_TRUE(absl::IsNotFound(Read(**cold, 4, "child").status()));
  std::vector<std::pair<uint32_t, std::string>> specs;
  ASSERT_TRUE((*cold)
                  ->ForEachNamespace([&](uint32_t id, std::string_view s) {
                    specs.emplace_back(id, std::string(s));
                  })
                  .ok());
  ASSERT_EQ(specs.size(), 1u);
  EXPECT_EQ(specs[0].first, 3u);
  EXPECT_EQ(specs[0].second, "spec-3");
  std::vector<ColdIndexRecord> recs;
  ASSERT_TRUE((*cold)->ForEachBlock([&](const ColdIndexRecord& r) { recs.push_back(r); }).ok());
  ASSERT_EQ(recs.size(), 3u);
  EXPECT_EQ(recs[0].key, "child");
  EXPECT_EQ(recs[0].parent_key, "parent");
  EXPECT_EQ(recs[0].block_index, 7u);
  EXPECT_EQ(recs[0].payload_bytes, payload.size());
  EXPECT_EQ(recs[0].checksum, PayloadChecksum(Bytes(payload)));
  ASSERT_TRUE((*cold)->DeleteBlock(3, "child").ok());
  EXPECT_TRUE(absl::IsNotFound(Read(**cold, 3, "child").status()));
  recs.clear();
  ASSERT_TRUE((*cold)->ForEachBlock([&](const ColdIndexRecord& r) { recs.push_back(r); }).ok());
  EXPECT_EQ(recs.size(), 2u);
}

// Rewrites the stored value of block (namespace 0, `key`) with RocksDB directly,
// underneath a closed cold tier (the record format on disk is fixed, see
// rocksdb_cold_tier.cc): value = edit(value).
void EditRawValue(const std::string& dir, const std::string& key,
                  const std::function<std::string(std::string)>& edit) {
  std::vector<rocksdb::ColumnFamilyDescriptor> cfs = {
      {rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions()},
      {"blocks", rocksdb::ColumnFamilyOptions()},
      {"meta", rocksdb::ColumnFamilyOptions()}};
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* db = nullptr;
  ASSERT_TRUE(rocksdb::DB::Open(rocksdb::DBOptions(), dir, cfs, &handles, &db).ok());
  const std::string block_key = std::string(4, '\0') + key;  // big-endian ns id 0
  std::string value;
  ASSERT_TRUE(db->Get(rocksdb::ReadOptions(), handles[1], block_key, &value).ok());
  ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), handles[1], block_key, edit(value)).ok());
  for (auto* h : handles) db->DestroyColumnFamilyHandle(h);
  ASSERT_TRUE(db->Close().ok());
  delete db;
}

TEST(ColdTierTest, CorruptionIsDataLoss) {
  kvtier::testing::TempDir dir;
  const std::string db = dir.Sub("db");
  std::string payload(5000, 'p');
  {
    auto cold = RocksDbColdTier::Open(ColdTierOptions{db});
    ASSERT_TRUE(cold.ok());
    ColdIndexRecord rec;
    rec.key = "k";
    ASSERT_TRUE(
        (*cold)->PutBlock(rec, Bytes(payload), PayloadChecksum(Bytes(payload)), false).ok());
  }
  std::string original;
  auto read_after = [&](const std::function<std::string(std::string)>& edit) {
    EditRawValue(db, "k", edit);
    auto cold = RocksDbColdTier::Open(ColdTierOptions{db});
    EXPECT_TRUE(cold.ok());
    return cold.ok() ? Read(**cold, 0, "k") : cold.status();
  };
  auto flipped = read_after([&](std::string v) {
    original = v;
    v.at(100) ^= 1;  // a payload byte (the header is 20 bytes)
    return v;
  });
  EXPECT_TRUE(absl::IsDataLoss(flipped.status())) << flipped.status();
  auto truncated = read_after([&](std::string v) { return v.substr(0, 10); });
  EXPECT_TRUE(absl::IsDataLoss(truncated.status())) << truncated.status();
  auto restored = read_after([&](std::string) { return original; });
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(*restored, payload);
}

TEST(ColdTierTest, BlobFilesModeRoundTrips) {
  kvtier::testing::TempDir dir;
  ColdTierOptions o{dir.Sub("db")};
  o.blob_files = true;
  auto cold = RocksDbColdTier::Open(o);
  ASSERT_TRUE(cold.ok());
  std::string payload(200000, 'b');
  ColdIndexRecord rec;
  rec.key = "k";
  ASSERT_TRUE((*cold)->PutBlock(rec, Bytes(payload), PayloadChecksum(Bytes(payload)), false).ok());
  EXPECT_EQ(*Read(**cold, 0, "k"), payload);
}

TEST(ColdTierTest, DamagedWalRecordDropsAtMostTheRestOfItsLogBlock) {
  kvtier::testing::TempDir dir;
  const std::string db = dir.Sub("db");
  std::mt19937 rng(11);
  std::vector<std::string> payloads(64);
  {
    auto cold = RocksDbColdTier::Open(ColdTierOptions{db});
    ASSERT_TRUE(cold.ok());
    for (size_t i = 0; i < payloads.size(); ++i) {
      payloads[i].resize(8192);
      for (char& c : payloads[i]) c = static_cast<char>(rng());
      ColdIndexRecord rec;
      rec.key = "k" + std::to_string(i);
      ASSERT_TRUE(
          (*cold)
              ->PutBlock(rec, Bytes(payloads[i]), PayloadChecksum(Bytes(payloads[i])), false)
              .ok());
    }
  }  // closed without a memtable flush: every block is only in the WAL
  ASSERT_TRUE(testing::FlipByteInWal(db, payloads[31]));

  auto cold = RocksDbColdTier::Open(ColdTierOptions{db});
  ASSERT_TRUE(cold.ok()) << cold.status();
  EXPECT_GE((*cold)->wal_dropped_ranges(), 1u);
  EXPECT_GT((*cold)->wal_dropped_bytes(), 0u);
  // The damaged record is dropped with whatever else starts in the rest of its 32 KiB
  // log block (RocksDB cannot trust the lengths there): at most 4 more 8 KiB records.
  // Every later record is recovered (kPointInTimeRecovery would lose them all).
  size_t lost = 0;
  for (size_t i = 0; i < payloads.size(); ++i) {
    auto got = Read(**cold, 0, "k" + std::to_string(i));
    if (!got.ok()) {
      EXPECT_TRUE(absl::IsNotFound(got.status())) << i << ": " << got.status();
      EXPECT_TRUE(i >= 31 && i <= 35) << "record " << i << " lost";
      ++lost;
      continue;
    }
    EXPECT_EQ(*got, payloads[i]) << i;
  }
  EXPECT_TRUE(absl::IsNotFound(Read(**cold, 0, "k31").status()));
  size_t records = 0;
  ASSERT_TRUE((*cold)->ForEachBlock([&](const ColdIndexRecord&) { ++records; }).ok());
  EXPECT_EQ(records, 64 - lost);  // each index record went with its block (one batch)
}

TEST(ColdTierTest, DamagedSstFooterRefusesToOpenNamingTheFile) {
  kvtier::testing::TempDir dir;
  const std::string db = dir.Sub("db");
  {
    auto cold = RocksDbColdTier::Open(ColdTierOptions{db});
    ASSERT_TRUE(cold.ok());
    std::string payload(5000, 's');
    ColdIndexRecord rec;
    rec.key = "k";
    ASSERT_TRUE(
        (*cold)->PutBlock(rec, Bytes(payload), PayloadChecksum(Bytes(payload)), false).ok());
  }
  {
    // Flush the memtables into table files with RocksDB directly.
    std::vector<rocksdb::ColumnFamilyDescriptor> cfs = {
        {rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions()},
        {"blocks", rocksdb::ColumnFamilyOptions()},
        {"meta", rocksdb::ColumnFamilyOptions()}};
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::DBOptions(), db, cfs, &handles, &raw).ok());
    ASSERT_TRUE(raw->Flush(rocksdb::FlushOptions(), handles).ok());
    for (auto* h : handles) raw->DestroyColumnFamilyHandle(h);
    ASSERT_TRUE(raw->Close().ok());
    delete raw;
  }
  std::string sst;
  for (const auto& f : std::filesystem::directory_iterator(db)) {
    if (f.path().extension() == ".sst") sst = f.path().filename().string();
  }
  ASSERT_FALSE(sst.empty());
  {
    // Overwrite the footer (the last 48 bytes hold the index handle and the magic).
    std::fstream f(db + "/" + sst, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-48, std::ios::end);
    const std::string junk(48, 'x');
    f.write(junk.data(), junk.size());
  }
  auto cold = RocksDbColdTier::Open(ColdTierOptions{db});
  ASSERT_FALSE(cold.ok());
  EXPECT_TRUE(absl::IsDataLoss(cold.status())) << cold.status();
  EXPECT_NE(cold.status().message().find(sst), std::string::npos) << cold.status();
}

}  // namespace
}  // namespace kvtier::storage
