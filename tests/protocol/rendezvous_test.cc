#include "protocol/rendezvous.h"

#include <cstdint>
#include <cstdio>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvtier::protocol {
namespace {

using ::testing::ElementsAre;
using ::testing::UnorderedElementsAre;

// 16-byte opaque keys, like truncated SHA-256 prefix keys, from a seeded RNG.
std::vector<std::string> RandomKeys(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::string> keys(n);
  for (auto& k : keys) {
    k.resize(16);
    for (size_t i = 0; i < 16; i += 8) {
      const uint64_t v = rng();
      for (size_t b = 0; b < 8; ++b) k[i + b] = static_cast<char>(v >> (8 * b));
    }
  }
  return keys;
}

const std::vector<std::string> kThree = {"10.0.0.1:50051", "10.0.0.2:50051", "10.0.0.3:50051"};

TEST(RendezvousHashTest, GoldenValuesPinTheWireContract) {
  // These numbers are the placement contract between clients and servers of different
  // builds: if they change, mixed-version clusters silently stop finding blocks.
  EXPECT_EQ(RendezvousNodeHash(""), 0x2d06800538d394c2ULL);  // XXH3_64 of "" (seed 0)
  EXPECT_EQ(RendezvousKeyHash("ns", "key-0"), 0xa6f2f2bf40e1090dULL);
  EXPECT_EQ(RendezvousScore(RendezvousKeyHash("ns", "key-0"), RendezvousNodeHash("a:1")),
            0x1c714e9770c88821ULL);
  // Length prefix: moving bytes between namespace and key changes the hash.
  EXPECT_NE(RendezvousKeyHash("ab", "c"), RendezvousKeyHash("a", "bc"));
  EXPECT_NE(RendezvousKeyHash("ns", "k"), RendezvousKeyHash("ns2", "k"));
  const uint64_t kh = RendezvousKeyHash("llama3-8b", std::string("\x01\x02\x03", 3));
  EXPECT_EQ(kh, RendezvousKeyHash("llama3-8b", std::string("\x01\x02\x03", 3)));
  EXPECT_NE(RendezvousScore(kh, RendezvousNodeHash("a:1")),
            RendezvousScore(kh, RendezvousNodeHash("b:1")));
}

TEST(RendezvousHashTest, GoldenOwners) {
  // Pinned placements for a fixed ring: a change of hash, byte order or tie rule shows
  // up here. (Computed once with this implementation; XXH3 is version-stable.)
  RendezvousRing ring(kThree);
  std::vector<std::string> golden;
  for (int i = 0; i < 8; ++i) {
    golden.push_back(ring.OwnerIds("ns", "key-" + std::to_string(i), 1)[0]);
  }
  const char* expected[] = {"10.0.0.2:50051", "10.0.0.1:50051", "10.0.0.1:50051", "10.0.0.2:50051",
                            "10.0.0.2:50051", "10.0.0.3:50051", "10.0.0.3:50051", "10.0.0.2:50051"};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(golden[i], expected[i]) << "key-" << i;
}

TEST(RendezvousRingTest, NormalizesNodeList) {
  RendezvousRing a({"c:1", "a:1", "b:1", "a:1", ""});
  RendezvousRing b({"b:1", "c:1", "a:1"});
  EXPECT_THAT(a.nodes(), ElementsAre("a:1", "b:1", "c:1"));
  EXPECT_EQ(a.nodes(), b.nodes());
  for (const auto& key : RandomKeys(200, 7)) {
    EXPECT_EQ(a.OwnerIds("ns", key, 2), b.OwnerIds("ns", key, 2));
  }
}

TEST(RendezvousRingTest, EmptyRingHasNoOwners) {
  RendezvousRing ring;
  EXPECT_TRUE(ring.Owners("ns", "k", 1).empty());
  EXPECT_TRUE(ring.OwnershipShares(1).empty());
  EXPECT_FALSE(ring.IsOwner("a:1", "ns", "k", 1));
}

TEST(RendezvousRingTest, SpreadOverTenThousandKeysIsWithinTwentyPercentOfEven) {
  RendezvousRing ring(kThree);
  std::vector<int> counts(3, 0);
  const auto keys = RandomKeys(10000, 42);
  for (const auto& key : keys) ++counts[ring.Primary("llama3-8b", key)];
  const double even = 10000.0 / 3;
  // The split, printed for a reader (`ctest -R rendezvous_test -V`).
  std::printf("10000 keys over 3 nodes: %d / %d / %d\n", counts[0], counts[1], counts[2]);
  for (int c : counts) {
    EXPECT_GE(c, even * 0.8) << "node got too few keys";
    EXPECT_LE(c, even * 1.2) << "node got too many keys";
  }
}

TEST(RendezvousRingTest, SpreadHoldsForSequentialKeysAndManyNodes) {
  // Structured keys (counters) must spread as well as random ones.
  std::vector<std::string> nodes;
  for (int i = 0; i < 8; ++i) nodes.push_back("kvtier-" + std::to_string(i) + ":50051");
  RendezvousRing ring(nodes);
  std::vector<int> counts(8, 0);
  for (int i = 0; i < 40000; ++i) ++counts[ring.Primary("ns", "block-" + std::to_string(i))];
  for (int c : counts) {
    EXPECT_GE(c, 5000 * 0.8);
    EXPECT_LE(c, 5000 * 1.2);
  }
}

TEST(RendezvousRingTest, PrimaryIsFirstOwnerAndReplicasAreDistinct) {
  RendezvousRing ring(kThree);
  for (const auto& key : RandomKeys(1000, 3)) {
    const auto owners = ring.Owners("ns", key, 2);
    ASSERT_EQ(owners.size(), 2u);
    EXPECT_NE(owners[0], owners[1]);
    EXPECT_EQ(owners[0], ring.Primary("ns", key));
    EXPECT_EQ(ring.Owners("ns", key, 1)[0], owners[0]);
    EXPECT_TRUE(ring.IsOwner(ring.nodes()[owners[1]], "ns", key, 2));
    EXPECT_FALSE(ring.IsOwner(ring.nodes()[owners[1]], "ns", key, 1));
  }
  // r larger than the ring: every node, each once; r = 0 means 1.
  EXPECT_THAT(ring.Owners("ns", "k", 10), UnorderedElementsAre(0u, 1u, 2u));
  EXPECT_EQ(ring.Owners("ns", "k", 0).size(), 1u);
}

TEST(RendezvousRingTest, RemovingANodeMovesOnlyItsKeysAndRejoiningRestoresThem) {
  const std::vector<std::string> four = {"a:1", "b:1", "c:1", "d:1"};
  RendezvousRing full(four);
  RendezvousRing without_c({"a:1", "b:1", "d:1"});
  int moved = 0;
  const auto keys = RandomKeys(4000, 11);
  for (const auto& key : keys) {
    const std::string before = full.OwnerIds("ns", key, 1)[0];
    const std::string after = without_c.OwnerIds("ns", key, 1)[0];
    if (before != "c:1") {
      EXPECT_EQ(before, after) << "a key not owned by the removed node moved";
    } else {
      ++moved;
      // With R=2 the surviving replica is the new primary: no block becomes a miss.
      EXPECT_EQ(after, full.OwnerIds("ns", key, 2)[1]);
    }
  }
  EXPECT_GT(moved, 4000 / 4 * 0.8);
  EXPECT_LT(moved, 4000 / 4 * 1.2);
  // Rejoin: a ring rebuilt with c is identical to the original.
  RendezvousRing rejoined({"d:1", "c:1", "b:1", "a:1"});
  for (const auto& key : keys) {
    EXPECT_EQ(rejoined.OwnerIds("ns", key, 2), full.OwnerIds("ns", key, 2));
  }
}

TEST(RendezvousRingTest, GroupByOwnerListsEveryKeyUnderEachOwnerInOrder) {
  RendezvousRing ring(kThree);
  const auto keys = RandomKeys(300, 5);
  const auto groups = ring.GroupByOwner("ns", keys, 2);
  ASSERT_EQ(groups.size(), 3u);
  size_t total = 0;
  for (size_t node = 0; node < groups.size(); ++node) {
    total += groups[node].size();
    for (size_t j = 0; j < groups[node].size(); ++j) {
      if (j > 0) {
        EXPECT_LT(groups[node][j - 1], groups[node][j]);
      }
      EXPECT_TRUE(ring.IsOwner(ring.nodes()[node], "ns", keys[groups[node][j]], 2));
    }
  }
  EXPECT_EQ(total, 2 * keys.size());
  EXPECT_TRUE(RendezvousRing().GroupByOwner("ns", keys, 1).empty());
}

TEST(RendezvousRingTest, OwnershipSharesSumToOneAndAreNearEven) {
  RendezvousRing ring(kThree);
  for (size_t r : {1u, 2u, 3u, 5u}) {
    const auto shares = ring.OwnershipShares(r);
    ASSERT_EQ(shares.size(), 3u);
    double sum = 0;
    for (double s : shares) {
      sum += s;
      EXPECT_NEAR(s, 1.0 / 3, 0.02) << "r=" << r;
    }
    EXPECT_NEAR(sum, 1.0, 1e-9);
  }
  // Deterministic: every node computes the same numbers.
  EXPECT_EQ(ring.OwnershipShares(1), RendezvousRing(kThree).OwnershipShares(1));
  EXPECT_THAT(RendezvousRing({"solo:1"}).OwnershipShares(2), ElementsAre(1.0));
}

}  // namespace
}  // namespace kvtier::protocol
