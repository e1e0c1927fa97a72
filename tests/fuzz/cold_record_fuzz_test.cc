// Mutation fuzzing of the cold tier's on-disk records (storage/cold_record.h), the bytes
// RocksDbColdTier reads back from RocksDB: block values (header + raw or zstd payload) and
// block index values. A damaged record is rejected with DATA_LOSS and a message, never
// served as other bytes, never read out of bounds or answered with a huge allocation.
#include <random>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "storage/checksum.h"
#include "storage/cold_record.h"
#include "tests/testing/mutator.h"
#include "tests/testing/status_matchers.h"

namespace kvtier::storage {
namespace {

std::span<const uint8_t> AsSpan(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

struct Seed {
  std::string payload;
  std::string record;
};

std::vector<Seed> ValueSeeds() {
  std::mt19937 rng(3);
  std::vector<Seed> seeds;
  for (size_t n : {0u, 1u, 100u, 4096u}) {
    for (bool compressible : {false, true}) {
      Seed s;
      s.payload.resize(n);
      for (size_t i = 0; i < n; ++i) {
        s.payload[i] = compressible ? static_cast<char>(i / 512) : static_cast<char>(rng());
      }
      for (bool compress : {false, true}) {
        const uint64_t checksum = PayloadChecksum(AsSpan(s.payload));
        ColdIndexRecord r;
        r.ns_id = 3;
        r.key = "key";
        r.parent_key = n % 2 == 0 ? "parent" : "";
        s.record = EncodeColdRecord(r, /*seq=*/n + 1, AsSpan(s.payload), checksum, compress);
        seeds.push_back(s);
      }
    }
  }
  return seeds;
}

TEST(ColdRecordFuzzTest, SeedsRoundTrip) {
  for (const Seed& s : ValueSeeds()) {
    std::string scratch;
    uint64_t checksum = 0;
    auto payload = ParseColdRecord(AsSpan(s.record), &scratch, &checksum);
    ASSERT_OK(payload);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(payload->data()), payload->size()),
              s.payload);
  }
}

TEST(ColdRecordFuzzTest, MutatedValuesAreDataLossOrTheOriginalBytes) {
  const std::vector<Seed> seeds = ValueSeeds();
  testing::Mutator m(99);
  int accepted = 0, rejected = 0;
  for (int it = 0; it < 20000; ++it) {
    const Seed& seed = seeds[m.Below(seeds.size())];
    const std::string record = m.Mutate(seed.record);
    SCOPED_TRACE(absl::StrCat("iteration ", it));
    std::string scratch;
    uint64_t checksum = 0;
    auto payload = ParseColdRecord(AsSpan(record), &scratch, &checksum);
    if (payload.ok()) {
      ++accepted;
      ASSERT_EQ(std::string(reinterpret_cast<const char*>(payload->data()), payload->size()),
                seed.payload)
          << "a damaged record was served as other bytes";
      EXPECT_EQ(checksum, PayloadChecksum(*payload));
    } else {
      ++rejected;
      EXPECT_TRUE(absl::IsDataLoss(payload.status())) << payload.status();
      EXPECT_FALSE(payload.status().message().empty());
    }
    // Never more scratch than the record's own payload could need.
    EXPECT_LE(scratch.size(), 1u << 20);
  }
  EXPECT_GT(accepted, 0);
  EXPECT_GT(rejected, 0);
}

TEST(ColdRecordFuzzTest, MutatedIndexValuesParseConsistentlyOrAreDataLoss) {
  std::vector<std::string> seeds;
  for (size_t parent : {0u, 1u, 32u, 255u}) {
    ColdIndexRecord r;
    r.block_index = 7;
    r.payload_bytes = 4096;
    r.stored_bytes = 4116;
    r.checksum = 0x0123456789abcdefull;
    r.standalone = parent == 0;
    r.parent_key.assign(parent, 'p');
    seeds.push_back(EncodeColdIndexValue(r));
    ColdIndexRecord back;
    ASSERT_OK(ParseColdIndexValue(seeds.back(), &back));
    EXPECT_EQ(back.parent_key, r.parent_key);
    EXPECT_EQ(back.checksum, r.checksum);
  }
  testing::Mutator m(5);
  for (int it = 0; it < 20000; ++it) {
    const std::string v = m.Mutate(seeds[m.Below(seeds.size())]);
    ColdIndexRecord r;
    const absl::Status s = ParseColdIndexValue(v, &r);
    if (s.ok()) {
      ASSERT_EQ(v.size(), 22u + r.parent_key.size()) << "iteration " << it;
      // Re-encoding gives back the same bytes, up to the standalone byte's spelling.
      std::string again = EncodeColdIndexValue(r);
      again[20] = v[20];
      EXPECT_EQ(again, v) << "iteration " << it;
    } else {
      EXPECT_TRUE(absl::IsDataLoss(s)) << s;
      EXPECT_FALSE(s.message().empty());
    }
  }
}

}  // namespace
}  // namespace kvtier::storage
