// The slab is the source of truth at recovery (storage/rocksdb_cold_tier.h,
// docs/recovery.md): damage anywhere in the RocksDB directory costs no block whose extent
// is intact; damage in the slab costs exactly the blocks whose extents were hit; a
// deleted block never comes back. Every run checks every byte served (0 wrong bytes).
//
// KVTIER_FLIP_RUNS=n (default 12) sets how many single-byte flips in the RocksDB
// directory FlippedByteAnywhereInTheDatabaseLosesNoBlock tries (scripts/bench.sh runs 100).
#include <rocksdb/db.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "storage/checksum.h"
#include "storage/cold_meta_file.h"
#include "storage/cold_record.h"
#include "storage/rocksdb_cold_tier.h"
#include "storage/slab_file.h"
#include "storage/slab_scan.h"
#include "tests/testing/cold_damage.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace kvtier::storage {
namespace {

namespace fs = std::filesystem;

constexpr int kBlocks = 64;
constexpr size_t kBlockBytes = 8192;

std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

std::string Payload(int i) {
  std::string s(kBlockBytes, '\0');
  std::mt19937 rng(1000 + i);
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

std::string Key(int i) { return absl::StrCat("k", i); }

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

void FlipByte(const std::string& path, uint64_t at, uint8_t mask) {
  std::string bytes = ReadFile(path);
  ASSERT_LT(at, bytes.size()) << path;
  bytes[at] = static_cast<char>(bytes[at] ^ mask);
  WriteFile(path, bytes);
}

absl::Status PutBlock(ColdTier& cold, uint32_t ns, const std::string& key,
                      const std::string& parent, uint32_t index, const std::string& payload) {
  ColdIndexRecord rec;
  rec.ns_id = ns;
  rec.key = key;
  rec.parent_key = parent;
  rec.block_index = index;
  return cold.PutBlock(rec, Bytes(payload), PayloadChecksum(Bytes(payload)), false).status();
}

absl::StatusOr<std::string> Read(ColdTier& cold, uint32_t ns, const std::string& key) {
  std::string out;
  absl::Status st = cold.GetBlock(ns, key, [&](std::span<const uint8_t> b, uint64_t) {
    out.assign(reinterpret_cast<const char*>(b.data()), b.size());
  });
  if (!st.ok()) return st;
  return out;
}

// Flushes the tier's memtables into table files with RocksDB directly (the tier closed).
void FlushDb(const std::string& dir) {
  std::vector<rocksdb::ColumnFamilyDescriptor> cfs = {
      {rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions()},
      {"meta", rocksdb::ColumnFamilyOptions()}};
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  ASSERT_OK(rocksdb::DB::Open(rocksdb::DBOptions(), dir, cfs, &handles, &raw));
  ASSERT_OK(raw->Flush(rocksdb::FlushOptions(), handles));
  for (auto* h : handles) raw->DestroyColumnFamilyHandle(h);
  ASSERT_OK(raw->Close());
  delete raw;
}

// A tier with namespaces 1 and 2 and 64 blocks of 8 KiB (a chain in namespace 1); the
// index records in the WAL, or (flushed) in table files.
void MakeTier(const std::string& dir, bool flushed) {
  {
    auto cold = RocksDbColdTier::Open(ColdTierOptions{dir});
    ASSERT_OK(cold);
    ASSERT_OK((*cold)->PutNamespace(1, "spec-1"));
    ASSERT_OK((*cold)->PutNamespace(2, "spec-2"));
    for (int i = 0; i < kBlocks; ++i) {
      ASSERT_OK(PutBlock(**cold, 1, Key(i), i == 0 ? "" : Key(i - 1), i, Payload(i)));
    }
  }
  if (flushed) FlushDb(dir);
}

void CopyTree(const std::string& from, const std::string& to) {
  fs::remove_all(to);
  fs::copy(from, to, fs::copy_options::recursive);
}

struct Outcome {
  int served = 0;       // bit-exact
  int wrong = 0;        // served with other bytes: must stay 0
  std::set<int> lost;   // NOT_FOUND or DATA_LOSS
  std::map<uint32_t, std::string> namespaces;
  ColdTierRecovery recovery;
};

Outcome OpenAndRead(const ColdTierOptions& options) {
  Outcome out;
  auto cold = RocksDbColdTier::Open(options);
  EXPECT_OK(cold);
  if (!cold.ok()) return out;
  out.recovery = (*cold)->recovery();
  for (int i = 0; i < kBlocks; ++i) {
    auto got = Read(**cold, 1, Key(i));
    if (!got.ok()) {
      EXPECT_TRUE(absl::IsNotFound(got.status()) || absl::IsDataLoss(got.status()))
          << got.status();
      out.lost.insert(i);
    } else if (*got == Payload(i)) {
      ++out.served;
    } else {
      ++out.wrong;
    }
  }
  EXPECT_OK((*cold)
                  ->ForEachNamespace([&](uint32_t id, std::string_view s) {
                    out.namespaces.emplace(id, std::string(s));
                  }));
  // The rebuilt index is whole: ForEachBlock lists what is served, with its parent.
  int records = 0;
  EXPECT_OK((*cold)
                  ->ForEachBlock([&](const ColdIndexRecord& r) {
                    ++records;
                    const int i = std::atoi(r.key.c_str() + 1);
                    EXPECT_EQ(r.block_index, static_cast<uint32_t>(i));
                    EXPECT_EQ(r.parent_key, i == 0 ? "" : Key(i - 1));
                  }));
  if (out.recovery.slab_scanned) {
    EXPECT_EQ(records, out.served + out.wrong);
  }
  return out;
}

const std::map<uint32_t, std::string> kSpecs = {{1, "spec-1"}, {2, "spec-2"}};

// The RocksDB files of a tier directory, by the kind the flip test cycles through.
std::vector<std::string> DbFiles(const std::string& dir, const std::string& kind) {
  std::vector<std::string> out;
  for (const auto& f : fs::directory_iterator(dir)) {
    const std::string name = f.path().filename().string();
    if (!f.is_regular_file() || fs::file_size(f.path()) == 0 || name.rfind("cold.", 0) == 0) {
      continue;
    }
    const bool match = kind == "any" || (kind == ".log" && f.path().extension() == ".log") ||
                       (kind == ".sst" && f.path().extension() == ".sst") ||
                       (kind != ".log" && kind != ".sst" && name.rfind(kind, 0) == 0);
    if (match) out.push_back(f.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(ColdTierRecoveryTest, FlippedByteAnywhereInTheDatabaseLosesNoBlock) {
  kvtier::testing::TempDir dir;
  const std::string wal = dir.Sub("wal"), sst = dir.Sub("sst"), run = dir.Sub("run");
  MakeTier(wal, /*flushed=*/false);
  MakeTier(sst, /*flushed=*/true);
  const char* env = std::getenv("KVTIER_FLIP_RUNS");
  const int runs = env != nullptr ? std::atoi(env) : 12;
  std::mt19937_64 rng(20261203);
  const std::vector<std::string> kinds = {".log", ".sst", "MANIFEST", "CURRENT", "any"};
  int scanned = 0;
  for (int r = 0; r < runs; ++r) {
    const std::string kind = kinds[r % kinds.size()];
    const bool flushed = kind == ".sst" || (kind != ".log" && rng() % 2 == 0);
    CopyTree(flushed ? sst : wal, run);
    const std::vector<std::string> files = DbFiles(run, kind);
    ASSERT_FALSE(files.empty()) << kind;
    const std::string file = files[rng() % files.size()];
    const uint64_t at = rng() % fs::file_size(file);
    const uint8_t mask = static_cast<uint8_t>(1u << (rng() % 8));
    SCOPED_TRACE(absl::StrCat("run ", r, ": flipped bit ", mask, " of byte ", at, " of ",
                              fs::path(file).filename().string(), " (", fs::file_size(file),
                              " bytes, ", flushed ? "flushed" : "unflushed", ")"));
    FlipByte(file, at, mask);
    const Outcome o = OpenAndRead(ColdTierOptions{run});
    EXPECT_EQ(o.served, kBlocks);
    EXPECT_EQ(o.wrong, 0);
    EXPECT_EQ(o.namespaces, kSpecs);
    scanned += o.recovery.slab_scanned;
  }
  // Not every flip is damage RocksDB notices (a LOG line, an unused byte), but most are.
  if (runs >= 10) {
    EXPECT_GT(scanned, 0);
  }
}

TEST(ColdTierRecoveryTest, FortyFlippedBytesInTheWalLoseNoNamespaceAndNoBlock) {
  kvtier::testing::TempDir dir;
  const std::string db = dir.Sub("db");
  MakeTier(db, /*flushed=*/false);
  const std::vector<std::string> logs = DbFiles(db, ".log");
  ASSERT_EQ(logs.size(), 1u);
  std::mt19937_64 rng(40);
  for (int i = 0; i < 40; ++i) FlipByte(logs[0], rng() % fs::file_size(logs[0]), 0x10);
  const Outcome o = OpenAndRead(ColdTierOptions{db});
  EXPECT_TRUE(o.recovery.slab_scanned);
  EXPECT_GE(o.recovery.wal_dropped_ranges, 1u);
  EXPECT_EQ(o.served, kBlocks);
  EXPECT_EQ(o.wrong, 0);
  EXPECT_EQ(o.namespaces, kSpecs);
  EXPECT_EQ(o.recovery.blocks_indexed, static_cast<uint64_t>(kBlocks));
  EXPECT_GT(o.recovery.records_recreated, 0u);
}

// The blocks whose extents (header to end of body) hold one of `positions`.
std::set<int> BlocksHit(const std::string& db, const std::vector<uint64_t>& positions) {
  auto slab = SlabFile::Open(db + "/cold.slab", 0);
  EXPECT_OK(slab);
  auto scan = ScanSlab(**slab);
  EXPECT_OK(scan);
  EXPECT_EQ(scan->extents.size(), static_cast<size_t>(kBlocks));
  std::set<int> hit;
  for (const ScannedExtent& e : scan->extents) {
    for (uint64_t p : positions) {
      if (p >= e.offset && p < e.offset + e.header.record.stored_bytes) {
        hit.insert(std::atoi(e.header.record.key.c_str() + 1));
      }
    }
  }
  return hit;
}

TEST(ColdTierRecoveryTest, FlippedBytesInTheSlabLoseExactlyTheBlocksHit) {
  kvtier::testing::TempDir dir;
  const std::string pristine = dir.Sub("pristine"), run = dir.Sub("run");
  MakeTier(pristine, /*flushed=*/false);
  const uint64_t slab_bytes = fs::file_size(pristine + "/cold.slab");
  std::mt19937_64 rng(7);
  for (int r = 0; r < 6; ++r) {
    std::vector<uint64_t> positions;
    // Headers too: every third flip lands in the first 80 bytes of some extent.
    for (int i = 0; i < 5; ++i) {
      positions.push_back(i % 3 == 0 ? (rng() % kBlocks) * 3 * SlabFile::kUnitBytes + rng() % 80
                                     : rng() % slab_bytes);
    }
    const std::set<int> hit = BlocksHit(pristine, positions);
    for (bool recover : {false, true}) {
      SCOPED_TRACE(absl::StrCat("run ", r, recover ? ", rebuilt from the slab" : ", as is"));
      CopyTree(pristine, run);
      for (uint64_t p : positions) FlipByte(run + "/cold.slab", p, 0x04);
      ColdTierOptions o{run};
      o.recover = recover;
      const Outcome out = OpenAndRead(o);
      EXPECT_EQ(out.lost, hit);
      EXPECT_EQ(out.served, kBlocks - static_cast<int>(hit.size()));
      EXPECT_EQ(out.wrong, 0);
      EXPECT_EQ(out.namespaces, kSpecs);
      if (recover) {
        // The database was intact: exactly the hit blocks' records named no verified extent.
        EXPECT_EQ(out.recovery.records_dropped, hit.size());
        EXPECT_LE(out.recovery.damaged_extents, hit.size());
        EXPECT_EQ(out.recovery.records_recreated, 0u);
      }
    }
  }
}

TEST(ColdTierRecoveryTest, DatabaseDeletedOutrightIsRebuiltAndDeletedBlocksStayDeleted) {
  kvtier::testing::TempDir dir;
  const std::string db = dir.Sub("db");
  MakeTier(db, /*flushed=*/false);
  std::set<int> deleted;
  {
    auto cold = RocksDbColdTier::Open(ColdTierOptions{db});
    ASSERT_OK(cold);
    for (int i = 0; i < kBlocks; i += 5) {
      ASSERT_OK((*cold)->DeleteBlock(1, Key(i)));
      deleted.insert(i);
    }
    // Replaced blocks: the new copy comes back, never the old one.
    for (int i = 1; i < kBlocks; i += 5) {
      ASSERT_OK(PutBlock(**cold, 1, Key(i), Key(i - 1), i, "stale"));
      ASSERT_OK(PutBlock(**cold, 1, Key(i), Key(i - 1), i, Payload(i)));
    }
  }
  for (const auto& f : fs::directory_iterator(db)) {
    if (f.path().filename().string().rfind("cold.", 0) != 0) fs::remove_all(f.path());
  }
  const Outcome o = OpenAndRead(ColdTierOptions{db});
  EXPECT_TRUE(o.recovery.slab_scanned);
  EXPECT_NE(o.recovery.scan_reason.find("database is missing"), std::string::npos)
      << o.recovery.scan_reason;
  EXPECT_EQ(o.lost, deleted);
  EXPECT_EQ(o.served, kBlocks - static_cast<int>(deleted.size()));
  EXPECT_EQ(o.wrong, 0);
  EXPECT_EQ(o.namespaces, kSpecs);
  EXPECT_EQ(o.recovery.stale_copies, 0u);  // replaced copies were killed, not left behind
}

TEST(ColdTierRecoveryTest, NewestCopyOfAKeyWinsAndOrphansAreFreed) {
  kvtier::testing::TempDir dir;
  const std::string db = dir.Sub("db");
  MakeTier(db, /*flushed=*/false);
  // Two copies the tier never leaves behind except after a crash: an older copy of k5
  // (seq 0, below every real one: a crash between a re-Put and the kill of the old copy)
  // and a block of namespace 9, which has no spec. Appended at unit boundaries.
  {
    ColdIndexRecord rec;
    rec.ns_id = 1;
    rec.key = Key(5);
    rec.parent_key = Key(4);
    rec.block_index = 5;
    const std::string old = "an older copy of k5";
    std::string slab = ReadFile(db + "/cold.slab");
    slab.resize(SlabFile::Round(slab.size()), '\0');
    slab += EncodeColdRecord(rec, 0, Bytes(old), PayloadChecksum(Bytes(old)), false);
    slab.resize(SlabFile::Round(slab.size()), '\0');
    rec.ns_id = 9;
    slab += EncodeColdRecord(rec, 1ull << 40, Bytes(old), PayloadChecksum(Bytes(old)), false);
    WriteFile(db + "/cold.slab", slab);
  }
  ColdTierOptions o{db};
  o.recover = true;
  Outcome out = OpenAndRead(o);
  EXPECT_EQ(out.served, kBlocks);
  EXPECT_EQ(out.wrong, 0);
  EXPECT_EQ(out.recovery.stale_copies, 1u);
  EXPECT_EQ(out.recovery.orphan_blocks, 1u);
  EXPECT_EQ(out.recovery.records_recreated, 0u);
  // Both were killed: a second scan finds neither.
  out = OpenAndRead(o);
  EXPECT_EQ(out.served, kBlocks);
  EXPECT_EQ(out.recovery.stale_copies, 0u);
  EXPECT_EQ(out.recovery.orphan_blocks, 0u);
}

TEST(ColdTierRecoveryTest, DamagedSstIsMovedAsideAndTheIndexRebuilt) {
  kvtier::testing::TempDir dir;
  const std::string db = dir.Sub("db");
  MakeTier(db, /*flushed=*/true);
  const std::vector<std::string> ssts = DbFiles(db, ".sst");
  ASSERT_FALSE(ssts.empty());
  {
    // Overwrite the footer (the last 48 bytes hold the index handle and the magic).
    std::fstream f(ssts[0], std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-48, std::ios::end);
    const std::string junk(48, 'x');
    f.write(junk.data(), junk.size());
  }
  const Outcome o = OpenAndRead(ColdTierOptions{db});
  EXPECT_EQ(o.served, kBlocks);
  EXPECT_EQ(o.wrong, 0);
  EXPECT_EQ(o.namespaces, kSpecs);
  ASSERT_FALSE(o.recovery.damaged_db_dir.empty());
  // The damaged files are kept for the operator, the damaged table file among them.
  EXPECT_TRUE(fs::exists(fs::path(o.recovery.damaged_db_dir) / fs::path(ssts[0]).filename()));
  EXPECT_TRUE(fs::exists(fs::path(o.recovery.damaged_db_dir) / "CURRENT"));
  // The next open finds a healthy database: no second rebuild.
  const Outcome again = OpenAndRead(ColdTierOptions{db});
  EXPECT_EQ(again.served, kBlocks);
  EXPECT_FALSE(again.recovery.slab_scanned);
}

TEST(ColdTierRecoveryTest, LostOrDamagedMetaFileIsRebuilt) {
  kvtier::testing::TempDir dir;
  const std::string db = dir.Sub("db");
  MakeTier(db, /*flushed=*/false);
  FlipByte(db + "/cold.meta", 10, 1);
  Outcome o = OpenAndRead(ColdTierOptions{db});
  EXPECT_TRUE(o.recovery.slab_scanned);
  EXPECT_EQ(o.served, kBlocks);
  EXPECT_EQ(o.namespaces, kSpecs);  // from the database's copy
  fs::remove(db + "/cold.meta");
  o = OpenAndRead(ColdTierOptions{db});
  EXPECT_TRUE(o.recovery.slab_scanned);
  EXPECT_EQ(o.served, kBlocks);
  EXPECT_EQ(o.namespaces, kSpecs);
  // New puts after a rebuild get seqs above every block in the slab: a later scan keeps
  // them over the copies they replace.
  {
    auto cold = RocksDbColdTier::Open(ColdTierOptions{db});
    ASSERT_OK(cold);
    ASSERT_OK(PutBlock(**cold, 1, Key(3), Key(2), 3, Payload(3)));
  }
  ColdTierOptions recover{db};
  recover.recover = true;
  o = OpenAndRead(recover);
  EXPECT_EQ(o.served, kBlocks);
  EXPECT_EQ(o.recovery.stale_copies, 0u);
}

TEST(ColdTierRecoveryTest, FormatOneSlabIsRefusedNamingWhy) {
  kvtier::testing::TempDir dir;
  const std::string db = dir.Sub("db");
  fs::create_directories(db);
  std::string v1("KVTB\x01\0\0\0", 8);
  v1.resize(SlabFile::kUnitBytes, 'x');
  WriteFile(db + "/cold.slab", v1);
  auto cold = RocksDbColdTier::Open(ColdTierOptions{db});
  ASSERT_FALSE(cold.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(cold.status())) << cold.status();
  EXPECT_NE(cold.status().message().find("format 1"), std::string::npos) << cold.status();
}

// --- Recovery on demand (RecoverOnline), on a running tier.

ColdRecoverHooks NoHooks() { return {}; }

// Loses namespace 1's records of Key(i) for every i in `ids` (the silent loss an unclean
// shutdown can leave, which RecoverOnline exists for).
void LoseRecordsSilently(const std::string& dir, const std::vector<int>& ids) {
  std::vector<std::string> keys;
  for (int i : ids) keys.push_back(Key(i));
  ::kvtier::testing::LoseRecordsSilently(dir, 1, keys);
}

TEST(ColdTierRecoveryTest, OnlineVerifyReportsLostRecordsAndChangesNothing) {
  kvtier::testing::TempDir dir;
  const std::string db = dir.Sub("db");
  MakeTier(db, /*flushed=*/false);
  LoseRecordsSilently(db, {10, 11, 12, 13, 14});
  auto cold = RocksDbColdTier::Open(ColdTierOptions{db});
  ASSERT_OK(cold);
  ASSERT_FALSE((*cold)->recovery().slab_scanned);  // the loss went unnoticed at open
  EXPECT_TRUE(absl::IsNotFound(Read(**cold, 1, Key(12)).status()));
  for (int round = 0; round < 2; ++round) {
    auto r = (*cold)->RecoverOnline(ColdRecoverMode::kVerify, NoHooks());
    ASSERT_OK(r);
    EXPECT_EQ(r->extents_scanned, static_cast<uint64_t>(kBlocks));
    EXPECT_EQ(r->records_verified, static_cast<uint64_t>(kBlocks - 5));
    EXPECT_EQ(r->records_recreated, 5u);
    EXPECT_EQ(r->damaged_extents + r->damaged_records + r->stale_copies + r->orphan_blocks, 0u);
    EXPECT_GT(r->scan_bytes, static_cast<uint64_t>(kBlocks) * kBlockBytes);
    EXPECT_TRUE(absl::IsNotFound(Read(**cold, 1, Key(12)).status()));  // still lost
  }
}

TEST(ColdTierRecoveryTest, OnlineRebuildReindexesLostBlocksOnlyAndKeepsDeletesDead) {
  kvtier::testing::TempDir dir;
  const std::string db = dir.Sub("db");
  MakeTier(db, /*flushed=*/true);
  LoseRecordsSilently(db, {20, 21, 22, 23, 24, 25});
  auto cold = RocksDbColdTier::Open(ColdTierOptions{db});
  ASSERT_OK(cold);
  // While the records are lost: 30 (known) is deleted, 21 is put again (new bytes, a
  // newer copy; best fit puts it in 30's freed extent: a Put may reuse the space of a
  // block whose record is lost, which is then gone, hence "rebuild soon" in
  // docs/recovery.md), and 25's extent gets a flipped body byte.
  const std::string fresh(kBlockBytes, 'n');
  ASSERT_OK((*cold)->DeleteBlock(1, Key(30)));
  ASSERT_OK(PutBlock(**cold, 1, Key(21), Key(20), 21, fresh));
  {
    auto slab = SlabFile::Open(db + "/cold.slab", 0);
    ASSERT_OK(slab);
    auto scan = ScanSlab(**slab);
    ASSERT_OK(scan);
    for (const ScannedExtent& e : scan->extents) {
      if (e.header.record.key == Key(25)) FlipByte(db + "/cold.slab", e.offset + 200, 0x10);
    }
  }
  auto r = (*cold)->RecoverOnline(ColdRecoverMode::kRebuild, NoHooks());
  ASSERT_OK(r);
  EXPECT_EQ(r->records_recreated, 4u);  // 20, 22, 23, 24
  EXPECT_EQ(r->stale_copies, 1u);       // 21's old copy
  EXPECT_EQ(r->damaged_extents, 1u);    // 25
  EXPECT_EQ(r->damaged_records, 0u);
  for (int i = 0; i < kBlocks; ++i) {
    auto got = Read(**cold, 1, Key(i));
    if (i == 25 || i == 30) {
      EXPECT_TRUE(absl::IsNotFound(got.status())) << i << ": " << got.status();
    } else {
      ASSERT_OK(got) << i << ": " << got.status();
      EXPECT_EQ(*got, i == 21 ? fresh : Payload(i)) << i;
    }
  }
  // The claimed extents are allocated: new blocks land elsewhere and every old one stays.
  for (int i = 0; i < 16; ++i) {
    ASSERT_OK(PutBlock(**cold, 2, Key(100 + i), "", 0, Payload(100 + i)));
  }
  for (int i : {20, 22, 23, 24}) EXPECT_EQ(*Read(**cold, 1, Key(i)), Payload(i)) << i;
  // A second rebuild finds nothing more to do, and a full rebuild at open agrees.
  auto again = (*cold)->RecoverOnline(ColdRecoverMode::kRebuild, NoHooks());
  ASSERT_OK(again);
  EXPECT_EQ(again->records_recreated + again->stale_copies + again->damaged_extents, 0u);
  cold->reset();
  ColdTierOptions full{db};
  full.recover = true;
  auto reopened = RocksDbColdTier::Open(full);
  ASSERT_OK(reopened);
  EXPECT_TRUE(absl::IsNotFound(Read(**reopened, 1, Key(30)).status()));
  EXPECT_EQ(*Read(**reopened, 1, Key(21)), fresh);
  EXPECT_EQ(*Read(**reopened, 1, Key(22)), Payload(22));
}

TEST(ColdTierRecoveryTest, OnlineRebuildAsksBeforeReindexingAndRunsItsReconcileInExclusive) {
  kvtier::testing::TempDir dir;
  const std::string db = dir.Sub("db");
  MakeTier(db, /*flushed=*/false);
  LoseRecordsSilently(db, {40, 41});
  auto cold = RocksDbColdTier::Open(ColdTierOptions{db});
  ASSERT_OK(cold);
  int exclusive_calls = 0;
  bool inside = false;
  std::vector<std::string> asked, adopted;
  ColdRecoverHooks hooks;
  hooks.exclusive = [&](const std::function<absl::Status()>& critical) {
    ++exclusive_calls;
    inside = true;
    absl::Status st = critical();
    inside = false;
    return st;
  };
  hooks.adopt = [&](const ColdIndexRecord& rec) {
    EXPECT_TRUE(inside);
    asked.push_back(rec.key);
    return rec.key != Key(41);  // the caller holds a newer 41
  };
  hooks.adopted = [&](const ColdIndexRecord& rec) {
    EXPECT_TRUE(inside);
    EXPECT_EQ(rec.parent_key, Key(std::atoi(rec.key.c_str() + 1) - 1));
    adopted.push_back(rec.key);
  };
  auto r = (*cold)->RecoverOnline(ColdRecoverMode::kRebuild, hooks);
  ASSERT_OK(r);
  EXPECT_EQ(exclusive_calls, 1);
  std::sort(asked.begin(), asked.end());
  EXPECT_EQ(asked, (std::vector<std::string>{Key(40), Key(41)}));
  EXPECT_EQ(adopted, std::vector<std::string>{Key(40)});
  EXPECT_EQ(r->records_recreated, 1u);
  EXPECT_EQ(r->stale_copies, 1u);  // 41's refused copy is killed
  EXPECT_EQ(*Read(**cold, 1, Key(40)), Payload(40));
  EXPECT_TRUE(absl::IsNotFound(Read(**cold, 1, Key(41)).status()));
  // Killed: a full rebuild does not bring 41's old copy back either.
  cold->reset();
  ColdTierOptions full{db};
  full.recover = true;
  auto reopened = RocksDbColdTier::Open(full);
  ASSERT_OK(reopened);
  EXPECT_TRUE(absl::IsNotFound(Read(**reopened, 1, Key(41)).status()));
  EXPECT_EQ(*Read(**reopened, 1, Key(40)), Payload(40));
}

}  // namespace
}  // namespace kvtier::storage
