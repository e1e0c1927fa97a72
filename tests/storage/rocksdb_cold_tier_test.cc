#include "storage/rocksdb_cold_tier.h"

#include <fcntl.h>
#include <rocksdb/db.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "storage/checksum.h"
#include "storage/cold_record.h"
#include "storage/slab_scan.h"
#include "tests/storage/store_test_util.h"
#include "tests/testing/status_matchers.h"
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
    ASSERT_OK(cold);
    ASSERT_OK((*cold)->PutNamespace(3, "spec-3"));
    ColdIndexRecord rec;
    rec.ns_id = 3;
    rec.key = "child";
    rec.parent_key = "parent";
    rec.block_index = 7;
    auto stored = (*cold)->PutBlock(rec, Bytes(payload), PayloadChecksum(Bytes(payload)), false);
    ASSERT_OK(stored);
    // Header, key "child", parent "parent", payload.
    EXPECT_EQ(*stored, kColdRecordHeaderBytes + 5 + 6 + payload.size());
    rec.key = "zeros";
    rec.parent_key = "";
    stored = (*cold)->PutBlock(rec, Bytes(zeros), PayloadChecksum(Bytes(zeros)), true);
    ASSERT_OK(stored);
    EXPECT_LT(*stored, zeros.size() / 10);  // zstd kept: it pays
    // Incompressible bytes stay raw even when compression is asked for.
    rec.key = "raw";
    stored = (*cold)->PutBlock(rec, Bytes(payload), PayloadChecksum(Bytes(payload)), true);
    ASSERT_OK(stored);
    EXPECT_EQ(*stored, kColdRecordHeaderBytes + 3 + payload.size());
  }
  auto cold = RocksDbColdTier::Open(ColdTierOptions{dir.Sub("db")});
  ASSERT_OK(cold);
  EXPECT_EQ(*Read(**cold, 3, "child"), payload);
  EXPECT_EQ(*Read(**cold, 3, "zeros"), zeros);
  EXPECT_EQ(*Read(**cold, 3, "raw"), payload);
  EXPECT_TRUE(absl::IsNotFound(Read(**cold, 4, "child").status()));
  std::vector<std::pair<uint32_t, std::string>> specs;
  ASSERT_OK((*cold)
                  ->ForEachNamespace([&](uint32_t id, std::string_view s) {
                    specs.emplace_back(id, std::string(s));
                  }));
  ASSERT_EQ(specs.size(), 1u);
  EXPECT_EQ(specs[0].first, 3u);
  EXPECT_EQ(specs[0].second, "spec-3");
  std::vector<ColdIndexRecord> recs;
  ASSERT_OK((*cold)->ForEachBlock([&](const ColdIndexRecord& r) { recs.push_back(r); }));
  ASSERT_EQ(recs.size(), 3u);
  EXPECT_EQ(recs[0].key, "child");
  EXPECT_EQ(recs[0].parent_key, "parent");
  EXPECT_EQ(recs[0].block_index, 7u);
  EXPECT_EQ(recs[0].payload_bytes, payload.size());
  EXPECT_EQ(recs[0].checksum, PayloadChecksum(Bytes(payload)));
  ASSERT_OK((*cold)->DeleteBlock(3, "child"));
  EXPECT_TRUE(absl::IsNotFound(Read(**cold, 3, "child").status()));
  recs.clear();
  ASSERT_OK((*cold)->ForEachBlock([&](const ColdIndexRecord& r) { recs.push_back(r); }));
  EXPECT_EQ(recs.size(), 2u);
}

std::string SlabPath(const std::string& db) { return db + "/cold.slab"; }

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string RandomBytes(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  std::mt19937 rng(seed);
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

absl::Status PutKey(ColdTier& cold, const std::string& key, const std::string& payload) {
  ColdIndexRecord rec;
  rec.key = key;
  return cold.PutBlock(rec, Bytes(payload), PayloadChecksum(Bytes(payload)), false).status();
}

// Runs fn on the tier's RocksDB database directly, the tier closed.
void WithRawDb(const std::string& dir,
               const std::function<void(rocksdb::DB*, rocksdb::ColumnFamilyHandle* meta)>& fn) {
  std::vector<rocksdb::ColumnFamilyDescriptor> cfs = {
      {rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions()},
      {"meta", rocksdb::ColumnFamilyOptions()}};
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* db = nullptr;
  ASSERT_OK(rocksdb::DB::Open(rocksdb::DBOptions(), dir, cfs, &handles, &db));
  fn(db, handles[1]);
  for (auto* h : handles) db->DestroyColumnFamilyHandle(h);
  ASSERT_OK(db->Close());
  delete db;
}

TEST(ColdTierTest, CorruptedExtentIsDataLossNeverServed) {
  kvtier::testing::TempDir dir;
  const std::string db = dir.Sub("db");
  const std::string payload(5000, 'p');
  {
    auto cold = RocksDbColdTier::Open(ColdTierOptions{db});
    ASSERT_OK(cold);
    ASSERT_OK(PutKey(**cold, "k", payload));
  }
  const std::string original = ReadFile(SlabPath(db));
  auto read_after = [&](const std::string& slab) {
    WriteFile(SlabPath(db), slab);
    auto cold = RocksDbColdTier::Open(ColdTierOptions{db});
    EXPECT_OK(cold);
    return cold.ok() ? Read(**cold, 0, "k") : cold.status();
  };
  std::string damaged = original;
  damaged.replace(100, 1, 1, static_cast<char>(original.at(100) ^ 1));  // payload (header 64, key 1)
  auto flipped = read_after(damaged);
  EXPECT_TRUE(absl::IsDataLoss(flipped.status())) << flipped.status();
  auto truncated = read_after(original.substr(0, 10));
  EXPECT_TRUE(absl::IsDataLoss(truncated.status())) << truncated.status();
  auto restored = read_after(original);
  ASSERT_OK(restored);
  EXPECT_EQ(*restored, payload);
}

// MultiGetBlock serves every key as GetBlock would, whatever the batching: the bytes of
// each block once; an absent key NOT_FOUND and a damaged extent DATA_LOSS for that key
// only. The blocks span several 8 MiB runs and have freed extents (gaps) between them.
TEST(ColdTierTest, MultiGetBlockServesEachKeyAsGetBlockDoesAndADamagedBlockOnlyFailsItself) {
  kvtier::testing::TempDir dir;
  const std::string db = dir.Sub("db");
  auto opened = RocksDbColdTier::Open(ColdTierOptions{db});
  ASSERT_OK(opened);
  ColdTier& cold = **opened;
  std::mt19937 rng(11);
  std::vector<std::string> keys;
  std::vector<std::string> payloads;
  for (int i = 0; i < 40; ++i) {
    const size_t bytes = i % 5 == 0 ? 1'100'000 + rng() % 50'000 : 1 + rng() % 90'000;
    keys.push_back(absl::StrCat("m", i));
    payloads.push_back(RandomBytes(bytes, 100 + i));
    ASSERT_OK(PutKey(cold, keys.back(), payloads.back()));
  }
  // Compressed blocks are read as well.
  keys.push_back("zeros");
  payloads.push_back(std::string(200'000, '\0'));
  {
    ColdIndexRecord rec;
    rec.key = "zeros";
    ASSERT_OK(cold.PutBlock(rec, Bytes(payloads.back()), PayloadChecksum(Bytes(payloads.back())), true));
  }
  // Gaps: every 7th block deleted (its key is then absent).
  std::vector<bool> present(keys.size(), true);
  for (size_t i = 3; i < 40; i += 7) {
    ASSERT_OK(cold.DeleteBlock(0, keys[i]));
    present[i] = false;
  }
  // Damage block 12's payload in place, the tier open.
  const size_t damaged = 12;
  {
    const std::string slab = ReadFile(SlabPath(db));
    const size_t at = slab.find(payloads[damaged].substr(500, 64));
    ASSERT_NE(at, std::string::npos);
    std::fstream f(SlabPath(db), std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(static_cast<std::streamoff>(at));
    const char flipped = static_cast<char>(slab[at] ^ 0x40);
    f.write(&flipped, 1);
  }
  // Ask in a shuffled order, with a key never stored.
  std::vector<size_t> order(keys.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<std::string_view> ask;
  for (size_t i : order) ask.push_back(keys[i]);
  ask.push_back("never-stored");
  // Twice: read into the tier's scratch, then (with destinations) the bodies of most
  // keys straight into them: verified there, the damaged one still DATA_LOSS with no
  // sink call, a destination too small or a compressed record read the other way.
  // A third time with the slab out of the page cache: runs read with O_DIRECT
  // (ColdTierOptions::direct_reads), the same answers.
  for (const int pass : {0, 1, 2}) {
    const bool with_destinations = pass >= 1;
    SCOPED_TRACE(pass == 0 ? "without destinations"
                           : pass == 1 ? "with destinations" : "out of the page cache");
    if (pass == 2) {
      const int fd = open(SlabPath(db).c_str(), O_RDONLY);
      ASSERT_GE(fd, 0);
      fdatasync(fd);
      ASSERT_EQ(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
      close(fd);
    }
    std::vector<std::string> dst(ask.size());
    for (size_t j = 0; j < order.size(); ++j) {
      const size_t i = order[j];
      // Every 4th key none (the damaged one has one); key 1's one byte short; the
      // others room to spare.
      if (j % 4 == 3 && i != damaged) continue;
      dst[j].assign(payloads[i].size() + (i == 1 ? 0 : 100), '\x5a');
      if (i == 1) dst[j].pop_back();
    }
    int asked = 0;
    const ColdTier::MultiDestination destination = [&](size_t j) -> std::span<uint8_t> {
      ++asked;
      return std::span<uint8_t>(reinterpret_cast<uint8_t*>(dst[j].data()), dst[j].size());
    };
    std::vector<std::string> got(ask.size());
    std::vector<int> calls(ask.size(), 0);
    std::vector<bool> in_place(ask.size(), false);
    const std::vector<absl::Status> st = cold.MultiGetBlock(
        0, ask,
        [&](size_t i, std::span<const uint8_t> b, uint64_t sum) {
          ASSERT_LT(i, ask.size());
          EXPECT_EQ(sum, PayloadChecksum(b));
          calls[i]++;
          in_place[i] = !dst[i].empty() && b.data() == reinterpret_cast<uint8_t*>(dst[i].data());
          got[i].assign(reinterpret_cast<const char*>(b.data()), b.size());
        },
        with_destinations ? &destination : nullptr);
    ASSERT_EQ(st.size(), ask.size());
    if (with_destinations) {
      EXPECT_GT(asked, 0);
    }
    size_t read_in_place = 0;
    for (size_t j = 0; j < order.size(); ++j) {
      const size_t i = order[j];
      if (!present[i]) {
        EXPECT_TRUE(absl::IsNotFound(st[j])) << keys[i] << ": " << st[j];
        EXPECT_EQ(calls[j], 0) << keys[i];
      } else if (i == damaged) {
        EXPECT_TRUE(absl::IsDataLoss(st[j])) << st[j];
        EXPECT_EQ(calls[j], 0);
      } else {
        ASSERT_OK(st[j]) << keys[i] << ": " << st[j];
        EXPECT_EQ(calls[j], 1) << keys[i];
        EXPECT_TRUE(got[j] == payloads[i]) << keys[i];
        const bool fits = !dst[j].empty() && dst[j].size() >= payloads[i].size();
        // Read through the page cache, bodies land in place; read past it (O_DIRECT, or
        // buffered where the file system has none), wherever the run's start was.
        const bool expect_in_place =
            with_destinations && fits && keys[i] != "zeros" && pass == 1;
        if (pass < 2) {
          EXPECT_EQ(in_place[j], expect_in_place) << keys[i];
        }
        if (in_place[j]) {
          ++read_in_place;
          // Nothing written past the payload.
          EXPECT_EQ(dst[j].substr(payloads[i].size()), std::string(100, '\x5a')) << keys[i];
        }
      }
    }
    if (pass < 2) {
      EXPECT_EQ(read_in_place > 0, with_destinations);
    }
    EXPECT_TRUE(absl::IsNotFound(st.back())) << st.back();
    EXPECT_EQ(calls.back(), 0);
    if (pass == 2) {
      // Where the file system has O_DIRECT, the reads left the slab out of the page
      // cache (its first page, block m0's, is still not there).
      const int direct = open(SlabPath(db).c_str(), O_RDONLY | O_DIRECT);
      if (direct >= 0) {
        close(direct);
        const int fd = open(SlabPath(db).c_str(), O_RDONLY);
        char byte;
        struct iovec iov = {&byte, 1};
        EXPECT_EQ(preadv2(fd, &iov, 1, 0, RWF_NOWAIT), -1);
        EXPECT_EQ(errno, EAGAIN);
        close(fd);
      }
    }
  }
  // GetBlock agrees on the damaged block.
  EXPECT_TRUE(absl::IsDataLoss(Read(cold, 0, keys[damaged]).status()));
}

TEST(ColdTierTest, DeletedAndReplacedExtentsAreReused) {
  kvtier::testing::TempDir dir;
  const std::string db = dir.Sub("db");
  auto cold = RocksDbColdTier::Open(ColdTierOptions{db});
  ASSERT_OK(cold);
  const size_t block = 64 * 1024 - kColdRecordHeaderBytes - 2;  // 16 units with header, key
  for (int round = 0; round < 20; ++round) {
    for (int k = 0; k < 4; ++k) {
      ASSERT_OK(PutKey(**cold, absl::StrCat("k", k), RandomBytes(block, round * 4 + k)));
    }
    ASSERT_OK((*cold)->DeleteBlock(0, absl::StrCat("k", round % 4)));
  }
  // 20 rounds of 4 puts and a delete, never more than 4 blocks live: the slab holds 4
  // extents (plus the one a replacement is written to before the old one is freed).
  EXPECT_LE(std::filesystem::file_size(SlabPath(db)), 5u * 64 * 1024);
  for (int k = 0; k < 4; ++k) {
    auto got = Read(**cold, 0, absl::StrCat("k", k));
    if (k == 19 % 4) {
      EXPECT_TRUE(absl::IsNotFound(got.status())) << got.status();
    } else {
      ASSERT_OK(got) << k << ": " << got.status();
      EXPECT_EQ(*got, RandomBytes(block, 19 * 4 + k));
    }
  }
}

TEST(ColdTierTest, FullSlabIsUnavailableAndKeepsThePreviousRecord) {
  kvtier::testing::TempDir dir;
  ColdTierOptions o{dir.Sub("db")};
  o.slab_bytes = 3 * 64 * 1024;
  auto cold = RocksDbColdTier::Open(o);
  ASSERT_OK(cold);
  const size_t block = 64 * 1024 - kColdRecordHeaderBytes - 2;
  for (int k = 0; k < 3; ++k)
    ASSERT_OK(PutKey(**cold, absl::StrCat("k", k), RandomBytes(block, k)));
  absl::Status full = PutKey(**cold, "k3", RandomBytes(block, 3));
  EXPECT_TRUE(absl::IsUnavailable(full)) << full;
  EXPECT_NE(full.message().find("slab full"), std::string::npos) << full;
  // Replacing a block needs a second extent first: refused, the old record stays whole.
  full = PutKey(**cold, "k0", RandomBytes(block, 9));
  EXPECT_TRUE(absl::IsUnavailable(full)) << full;
  EXPECT_EQ(*Read(**cold, 0, "k0"), RandomBytes(block, 0));
  EXPECT_TRUE(absl::IsNotFound(Read(**cold, 0, "k3").status()));
  // Evicting a block makes room (what TieredStore's cold eviction does).
  ASSERT_OK((*cold)->DeleteBlock(0, "k1"));
  ASSERT_OK(PutKey(**cold, "k3", RandomBytes(block, 3)));
  EXPECT_EQ(*Read(**cold, 0, "k3"), RandomBytes(block, 3));
  EXPECT_EQ(*Read(**cold, 0, "k2"), RandomBytes(block, 2));
}

TEST(ColdTierTest, RestartRebuildsAllocatorAndServesEveryAcknowledgedBlock) {
  kvtier::testing::TempDir dir;
  const std::string db = dir.Sub("db");
  std::mt19937 rng(3);
  std::vector<std::string> live(40);
  {
    auto cold = RocksDbColdTier::Open(ColdTierOptions{db});
    ASSERT_OK(cold);
    for (size_t i = 0; i < live.size(); ++i) {
      live[i] = RandomBytes(1000 + rng() % 20000, static_cast<uint32_t>(i));
      ASSERT_OK(PutKey(**cold, absl::StrCat("k", i), live[i]));
    }
    for (size_t i = 0; i < live.size(); i += 3) {
      ASSERT_OK((*cold)->DeleteBlock(0, absl::StrCat("k", i)));
      live[i].clear();
    }
  }  // closed without a flush: the index records are only in the WAL
  const uint64_t slab_size = std::filesystem::file_size(SlabPath(db));
  auto cold = RocksDbColdTier::Open(ColdTierOptions{db});
  ASSERT_OK(cold);
  // New blocks go into the freed extents, not over a live one, not past the end.
  for (size_t i = 0; i < live.size(); i += 3) {
    live[i] = RandomBytes(900, static_cast<uint32_t>(100 + i));
    ASSERT_OK(PutKey(**cold, absl::StrCat("n", i), live[i]));
  }
  EXPECT_EQ(std::filesystem::file_size(SlabPath(db)), slab_size);
  for (size_t i = 0; i < live.size(); ++i) {
    const std::string key = absl::StrCat(i % 3 == 0 ? "n" : "k", i);
    auto got = Read(**cold, 0, key);
    ASSERT_OK(got) << key << ": " << got.status();
    EXPECT_EQ(*got, live[i]) << key;
  }
}

TEST(ColdTierTest, LostDeletionWithReusedExtentServesNothingWrong) {
  // A crash that loses a deletion (unsynced WAL, dropped WAL record) after its extent
  // was reused: the old record names another block's bytes.
  kvtier::testing::TempDir dir;
  const std::string db = dir.Sub("db");
  const std::string a = RandomBytes(30000, 1);
  const std::string b = RandomBytes(30000, 2);
  std::string a_index;
  {
    auto cold = RocksDbColdTier::Open(ColdTierOptions{db});
    ASSERT_OK(cold);
    ASSERT_OK(PutKey(**cold, "a", a));
  }
  const std::string a_key("i\0\0\0\0a", 6);  // index record of (namespace 0, "a")
  WithRawDb(db, [&](rocksdb::DB* raw, rocksdb::ColumnFamilyHandle* meta) {
    ASSERT_OK(raw->Get(rocksdb::ReadOptions(), meta, a_key, &a_index));
  });
  {
    auto cold = RocksDbColdTier::Open(ColdTierOptions{db});
    ASSERT_OK(cold);
    ASSERT_OK((*cold)->DeleteBlock(0, "a"));
    ASSERT_OK(PutKey(**cold, "b", b));  // reuses a's extent
  }
  // Bring a's record back (its deletion "lost"); first without b's record, so a names
  // b's bytes and nothing else claims them.
  const std::string b_key("i\0\0\0\0b", 6);
  std::string b_index;
  WithRawDb(db, [&](rocksdb::DB* raw, rocksdb::ColumnFamilyHandle* meta) {
    ASSERT_OK(raw->Get(rocksdb::ReadOptions(), meta, b_key, &b_index));
    ASSERT_OK(raw->Delete(rocksdb::WriteOptions(), meta, b_key));
    ASSERT_OK(raw->Put(rocksdb::WriteOptions(), meta, a_key, a_index));
  });
  {
    auto cold = RocksDbColdTier::Open(ColdTierOptions{db});
    ASSERT_OK(cold);
    auto got = Read(**cold, 0, "a");
    EXPECT_TRUE(absl::IsDataLoss(got.status())) << got.status();
  }
  // Both records back: they overlap; Open keeps b (its extent holds it) and drops a.
  WithRawDb(db, [&](rocksdb::DB* raw, rocksdb::ColumnFamilyHandle* meta) {
    ASSERT_OK(raw->Put(rocksdb::WriteOptions(), meta, b_key, b_index));
  });
  auto cold = RocksDbColdTier::Open(ColdTierOptions{db});
  ASSERT_OK(cold);
  EXPECT_TRUE(absl::IsNotFound(Read(**cold, 0, "a").status()));
  EXPECT_EQ(*Read(**cold, 0, "b"), b);
  // The allocator knows b's extent is taken: a new block does not overwrite it.
  ASSERT_OK(PutKey(**cold, "c", a));
  EXPECT_EQ(*Read(**cold, 0, "b"), b);
  EXPECT_EQ(*Read(**cold, 0, "c"), a);
}

TEST(ColdTierTest, TruncatedSlabServesNothingWrong) {
  kvtier::testing::TempDir dir;
  const std::string db = dir.Sub("db");
  std::vector<std::string> payloads(8);
  {
    auto cold = RocksDbColdTier::Open(ColdTierOptions{db});
    ASSERT_OK(cold);
    for (size_t i = 0; i < payloads.size(); ++i) {
      payloads[i] = RandomBytes(10000, static_cast<uint32_t>(i));
      ASSERT_OK(PutKey(**cold, absl::StrCat("k", i), payloads[i]));
    }
  }
  std::filesystem::resize_file(SlabPath(db), std::filesystem::file_size(SlabPath(db)) / 2);
  auto cold = RocksDbColdTier::Open(ColdTierOptions{db});
  ASSERT_OK(cold);
  size_t served = 0;
  for (size_t i = 0; i < payloads.size(); ++i) {
    auto got = Read(**cold, 0, absl::StrCat("k", i));
    if (got.ok()) {
      EXPECT_EQ(*got, payloads[i]);
      ++served;
    } else {
      EXPECT_TRUE(absl::IsDataLoss(got.status())) << got.status();
    }
  }
  EXPECT_EQ(served, payloads.size() / 2);  // the extents before the cut
}

TEST(ColdTierTest, EarlierLayoutIsRefusedNamingWhy) {
  kvtier::testing::TempDir dir;
  const std::string db = dir.Sub("db");
  {
    rocksdb::Options o;
    o.create_if_missing = true;
    rocksdb::DB* raw = nullptr;
    ASSERT_OK(rocksdb::DB::Open(o, db, &raw));
    rocksdb::ColumnFamilyHandle* blocks = nullptr;
    ASSERT_OK(raw->CreateColumnFamily(rocksdb::ColumnFamilyOptions(), "blocks", &blocks));
    raw->DestroyColumnFamilyHandle(blocks);
    ASSERT_OK(raw->Close());
    delete raw;
  }
  auto cold = RocksDbColdTier::Open(ColdTierOptions{db});
  ASSERT_FALSE(cold.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(cold.status())) << cold.status();
  EXPECT_NE(cold.status().message().find("earlier layout"), std::string::npos) << cold.status();
}

TEST(ColdTierTest, DamagedWalRecordCostsNoBlockWhileItsExtentIsIntact) {
  kvtier::testing::TempDir dir;
  const std::string db = dir.Sub("db");
  std::mt19937 rng(11);
  std::vector<std::string> payloads(64);
  {
    auto cold = RocksDbColdTier::Open(ColdTierOptions{db});
    ASSERT_OK(cold);
    ASSERT_OK((*cold)->PutNamespace(0, "spec-0"));
    for (size_t i = 0; i < payloads.size(); ++i) {
      payloads[i].resize(8192);
      for (char& c : payloads[i]) c = static_cast<char>(rng());
      ColdIndexRecord rec;
      rec.key = "k" + std::to_string(i);
      ASSERT_OK((*cold)
              ->PutBlock(rec, Bytes(payloads[i]), PayloadChecksum(Bytes(payloads[i])), false));
    }
  }  // closed without a memtable flush: every block is only in the WAL
  ASSERT_TRUE(testing::FlipByteInWal(db, "k31"));  // its index record (the key)

  auto cold = RocksDbColdTier::Open(ColdTierOptions{db});
  ASSERT_OK(cold);
  // RocksDB drops the damaged record with whatever else starts in the rest of its 32 KiB
  // log block; the drop is detected and the index rebuilt from the slab.
  EXPECT_GE((*cold)->wal_dropped_ranges(), 1u);
  EXPECT_GT((*cold)->wal_dropped_bytes(), 0u);
  const ColdTierRecovery r = (*cold)->recovery();
  EXPECT_TRUE(r.slab_scanned);
  EXPECT_NE(r.scan_reason.find("WAL recovery skipped"), std::string::npos) << r.scan_reason;
  EXPECT_GE(r.records_recreated, 1u);
  EXPECT_EQ(r.blocks_indexed, 64u);
  for (size_t i = 0; i < payloads.size(); ++i) {
    auto got = Read(**cold, 0, "k" + std::to_string(i));
    ASSERT_OK(got) << i << ": " << got.status();
    EXPECT_EQ(*got, payloads[i]) << i;
  }
  // The allocator knows every extent: new blocks do not overwrite one.
  for (size_t i = 0; i < 8; ++i) {
    ASSERT_OK(PutKey(**cold, absl::StrCat("n", i), payloads[i]));
  }
  for (size_t i = 0; i < payloads.size(); ++i) {
    EXPECT_EQ(*Read(**cold, 0, "k" + std::to_string(i)), payloads[i]) << i;
  }
}

}  // namespace
}  // namespace kvtier::storage
