#include "protocol/lookup_merge.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace kvtier::protocol {
namespace {

namespace v1 = ::kvtier::v1;

constexpr char kNs[] = "m";

class LookupMergeTest : public ::testing::Test {
 protected:
  LookupMergeTest() : ring_({"n0:1", "n1:1", "n2:1"}) {
    for (int i = 0; i < 200; ++i) keys_.push_back("key-" + std::to_string(i));
    views_.assign(keys_.begin(), keys_.end());
  }

  // Node `node`'s answer about `share` (its keys from index `first` on): key j is in
  // tier(share.index[j]) under lease lease_id(share.index[j]).
  template <typename TierOf>
  v1::LookupResponse Answer(const LookupMerge::Share& share, size_t node, TierOf tier_of,
                            uint64_t lease = 0, size_t first = 0) {
    std::vector<v1::Tier> tiers;
    std::vector<uint64_t> leases;
    for (size_t j = first; j < share.index.size(); ++j) {
      tiers.push_back(tier_of(share.index[j]));
      leases.push_back(tiers.back() != v1::TIER_NONE ? lease : 0);
    }
    v1::LookupResponse r;
    EncodeCompactLookup(tiers, leases, ring_.nodes()[node], &r);
    return r;
  }

  RendezvousRing ring_;
  std::vector<std::string> keys_;
  std::vector<std::string_view> views_;
};

TEST_F(LookupMergeTest, EachKeyGoesToEachOfItsOwnersAtItsRank) {
  LookupMerge merge(ring_, 2, kNs, views_);
  ASSERT_EQ(merge.shares().size(), 3u);
  std::vector<std::vector<size_t>> asked(keys_.size());
  for (size_t n = 0; n < 3; ++n) {
    const LookupMerge::Share& s = merge.shares()[n];
    ASSERT_EQ(s.index.size(), s.rank.size());
    for (size_t j = 0; j < s.index.size(); ++j) {
      if (j > 0) {
        EXPECT_LT(s.index[j - 1], s.index[j]) << "chain order";
      }
      const std::vector<size_t> owners = ring_.Owners(kNs, keys_[s.index[j]], 2);
      ASSERT_LT(s.rank[j], owners.size());
      EXPECT_EQ(owners[s.rank[j]], n);
      asked[s.index[j]].push_back(n);
    }
  }
  for (size_t k = 0; k < keys_.size(); ++k) EXPECT_EQ(asked[k].size(), 2u) << k;
}

TEST_F(LookupMergeTest, TheAskingNodesOwnCopiesStandAndItIsNeverAsked) {
  const std::string self = ring_.nodes()[1];
  std::vector<v1::Tier> tiers(keys_.size(), v1::TIER_NONE);
  std::vector<uint64_t> leases(keys_.size(), 0);
  for (size_t k = 0; k < keys_.size(); k += 3) {
    tiers[k] = v1::TIER_COLD;
    leases[k] = 7;
  }
  const LookupMerge::Local local{self, tiers, leases, v1::LEASE_LIMIT_NONE};
  LookupMerge merge(ring_, 2, kNs, views_, &local);
  EXPECT_TRUE(merge.shares()[1].index.empty());
  for (const LookupMerge::Share& s : merge.shares()) {
    for (size_t k : s.index) EXPECT_NE(k % 3, 0u) << "key " << k << " is held locally";
  }
  const v1::LookupResponse r = merge.Result(/*compact=*/false);
  ASSERT_EQ(r.blocks_size(), static_cast<int>(keys_.size()));
  EXPECT_EQ(r.blocks(0).tier(), v1::TIER_COLD);
  EXPECT_EQ(r.blocks(0).owner(), self);
  EXPECT_EQ(r.blocks(0).lease_id(), 7u);
  EXPECT_EQ(r.prefix_blocks(), 1u);
  // A miss names its primary owner.
  EXPECT_EQ(r.blocks(1).tier(), v1::TIER_NONE);
  EXPECT_EQ(r.blocks(1).owner(), ring_.OwnerIds(kNs, keys_[1], 2)[0]);
}

TEST_F(LookupMergeTest, ThePrimarysCopyWinsThenTheFasterTier) {
  LookupMerge merge(ring_, 2, kNs, views_);
  // Every owner holds every key it owns: the primary cold, the secondary hot.
  for (size_t n = 0; n < 3; ++n) {
    const LookupMerge::Share& s = merge.shares()[n];
    std::vector<v1::Tier> tiers;
    std::vector<uint64_t> leases;
    for (size_t j = 0; j < s.index.size(); ++j) {
      tiers.push_back(s.rank[j] == 0 ? v1::TIER_COLD : v1::TIER_HOT);
      leases.push_back(100 + n);
    }
    v1::LookupResponse a;
    EncodeCompactLookup(tiers, leases, ring_.nodes()[n], &a);
    merge.Add(n, a);
  }
  const v1::LookupResponse r = merge.Result(/*compact=*/false);
  EXPECT_EQ(r.prefix_blocks(), keys_.size());
  EXPECT_EQ(r.leased_blocks(), keys_.size());
  for (size_t k = 0; k < keys_.size(); ++k) {
    const size_t primary = ring_.Owners(kNs, keys_[k], 2)[0];
    EXPECT_EQ(r.blocks(k).tier(), v1::TIER_COLD) << k;
    EXPECT_EQ(r.blocks(k).owner(), ring_.nodes()[primary]) << k;
    EXPECT_EQ(r.blocks(k).lease_id(), 100 + primary) << k;
  }
}

TEST_F(LookupMergeTest, APrimaryMissFallsToTheReplicaAndAGapEndsThePrefix) {
  LookupMerge merge(ring_, 2, kNs, views_);
  const size_t gap = 120;  // no owner holds it
  for (size_t n = 0; n < 3; ++n) {
    const LookupMerge::Share& s = merge.shares()[n];
    // Primaries miss the even keys; replicas hold everything but the gap.
    merge.Add(n, Answer(s, n, [&](size_t k) {
                if (k == gap) return v1::TIER_NONE;
                const bool primary = ring_.Owners(kNs, keys_[k], 2)[0] == n;
                return primary && k % 2 == 0 ? v1::TIER_NONE : v1::TIER_HOT;
              }));
  }
  const v1::LookupResponse r = merge.Result(/*compact=*/true);
  EXPECT_EQ(r.prefix_blocks(), gap);
  EXPECT_EQ(r.leased_blocks(), 0u);
  for (size_t k = 0; k < keys_.size(); ++k) {
    const std::vector<size_t> owners = ring_.Owners(kNs, keys_[k], 2);
    if (k == gap) {
      EXPECT_EQ(LookupTier(r, k), v1::TIER_NONE);
      EXPECT_EQ(LookupOwner(r, k), ring_.nodes()[owners[0]]);
      continue;
    }
    EXPECT_EQ(LookupTier(r, k), v1::TIER_HOT) << k;
    EXPECT_EQ(LookupOwner(r, k), ring_.nodes()[owners[k % 2 == 0 ? 1 : 0]]) << k;
  }
}

TEST_F(LookupMergeTest, AShareAnsweredInPartsAndAMalformedAnswerAddsNothing) {
  LookupMerge merge(ring_, 1, kNs, views_);
  size_t split_node = 0;
  for (size_t n = 0; n < 3; ++n) {
    if (merge.shares()[n].index.size() > merge.shares()[split_node].index.size()) split_node = n;
  }
  for (size_t n = 0; n < 3; ++n) {
    const LookupMerge::Share& s = merge.shares()[n];
    auto hot = [](size_t) { return v1::TIER_HOT; };
    if (n != split_node) {
      merge.Add(n, Answer(s, n, hot));
      continue;
    }
    // In two calls: the tail (hot) first, then the whole share (cold).
    const size_t half = s.index.size() / 2;
    merge.Add(n, Answer(s, n, hot, 0, half), half);
    v1::LookupResponse head = Answer(s, n, [](size_t) { return v1::TIER_COLD; });
    merge.Add(n, head);
  }
  // Malformed: owner_index names a holder past the table. Ignored.
  v1::LookupResponse bad = Answer(merge.shares()[0], 0, [](size_t) { return v1::TIER_HOT; });
  bad.add_owner_index(9);
  merge.Add(0, bad);
  merge.Add(7, bad);  // not a ring node

  const v1::LookupResponse r = merge.Result(/*compact=*/false);
  EXPECT_EQ(r.prefix_blocks(), keys_.size());
  const LookupMerge::Share& s = merge.shares()[split_node];
  const size_t half = s.index.size() / 2;
  for (size_t j = 0; j < s.index.size(); ++j) {
    // The tail's keys: the hot copy beats the cold one at the same rank, though it came
    // first. The head's: only the cold answer listed them.
    EXPECT_EQ(r.blocks(s.index[j]).tier(), j < half ? v1::TIER_COLD : v1::TIER_HOT) << j;
  }
}

TEST_F(LookupMergeTest, TheFirstLeaseLimitReportedIsKeptWhenTheLeaseStopsShort) {
  const std::string self = ring_.nodes()[0];
  std::vector<v1::Tier> tiers(keys_.size(), v1::TIER_NONE);
  for (size_t k = 0; k < keys_.size(); ++k) {
    if (k == 0 || ring_.IsOwner(self, kNs, keys_[k], 1)) tiers[k] = v1::TIER_HOT;
  }
  const std::vector<uint64_t> leases = {5};  // only key 0 is leased here
  const LookupMerge::Local local{self, tiers, leases, v1::LEASE_LIMIT_NONE};
  LookupMerge merge(ring_, 1, kNs, views_, &local);
  for (size_t n = 1; n < 3; ++n) {
    v1::LookupResponse a = Answer(merge.shares()[n], n, [](size_t) { return v1::TIER_HOT; });
    a.set_lease_limit(n == 1 ? v1::LEASE_LIMIT_NODE_BYTES : v1::LEASE_LIMIT_TENANT_BYTES);
    merge.Add(n, a);  // found, not leased
  }
  const v1::LookupResponse r = merge.Result(/*compact=*/true);
  // Key 0 is held here and leased; the rest are found but not leased.
  EXPECT_EQ(r.prefix_blocks(), keys_.size());
  EXPECT_EQ(r.leased_blocks(), 1u);
  EXPECT_EQ(r.lease_limit(), v1::LEASE_LIMIT_NODE_BYTES);
}

}  // namespace
}  // namespace kvtier::protocol
