#include "protocol/lookup_form.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace kvtier::protocol {
namespace {

namespace v1 = ::kvtier::v1;

void AddBlock(v1::LookupResponse* r, v1::Tier tier, const std::string& owner, uint64_t lease) {
  v1::BlockLocation* b = r->add_blocks();
  b->set_tier(tier);
  if (tier != v1::TIER_NONE) b->set_owner(owner);
  b->set_lease_id(lease);
}

// `verbose`'s prefix fields, with its blocks encoded compact by EncodeLookupAnswers.
v1::LookupResponse Compact(const v1::LookupResponse& verbose) {
  v1::LookupResponse compact = verbose;
  compact.clear_blocks();
  std::vector<KeyAnswer> answers;
  for (const v1::BlockLocation& b : verbose.blocks()) {
    answers.push_back({b.tier(), b.owner(), b.lease_id()});
  }
  EncodeLookupAnswers(answers, /*compact=*/true, &compact);
  return compact;
}

void ExpectSameBlocks(const v1::LookupResponse& a, const v1::LookupResponse& b) {
  ASSERT_EQ(a.blocks_size(), b.blocks_size());
  for (int i = 0; i < a.blocks_size(); ++i) {
    EXPECT_EQ(a.blocks(i).SerializeAsString(), b.blocks(i).SerializeAsString()) << i;
  }
}

TEST(LookupFormTest, SingleOwnerWithoutLeaseNeedsNoIndex) {
  v1::LookupResponse verbose;
  verbose.set_prefix_blocks(2);
  AddBlock(&verbose, v1::TIER_HOT, "n1", 0);
  AddBlock(&verbose, v1::TIER_COLD, "n1", 0);
  AddBlock(&verbose, v1::TIER_NONE, "", 0);
  v1::LookupResponse compact = Compact(verbose);
  EXPECT_TRUE(IsCompactLookup(compact));
  EXPECT_EQ(compact.blocks_size(), 0);
  EXPECT_EQ(compact.tiers().size(), 3u);
  EXPECT_EQ(compact.owners_size(), 1);
  EXPECT_EQ(compact.owner_index_size(), 0);
  EXPECT_EQ(compact.owner_lease_ids_size(), 0);
  EXPECT_EQ(compact.prefix_blocks(), 2u);
  ASSERT_TRUE(ExpandLookup(&compact).ok());
  EXPECT_FALSE(IsCompactLookup(compact));
  ExpectSameBlocks(compact, verbose);
}

TEST(LookupFormTest, SeveralOwnersAndLeasesRoundTrip) {
  v1::LookupResponse verbose;
  AddBlock(&verbose, v1::TIER_HOT, "n1", 0);
  AddBlock(&verbose, v1::TIER_HOT, "n2", 7);
  AddBlock(&verbose, v1::TIER_NONE, "", 0);
  AddBlock(&verbose, v1::TIER_COLD, "n1", 9);
  AddBlock(&verbose, v1::TIER_HOT, "n2", 7);
  AddBlock(&verbose, v1::TIER_NONE, "", 0);
  v1::LookupResponse compact = Compact(verbose);
  EXPECT_EQ(compact.owners_size(), 4);  // (n1, 0), (n2, 7), ("", 0), (n1, 9)
  EXPECT_EQ(compact.owner_lease_ids_size(), 4);
  EXPECT_EQ(compact.owner_index_size(), 6);
  ASSERT_TRUE(ExpandLookup(&compact).ok());
  ExpectSameBlocks(compact, verbose);
}

TEST(LookupFormTest, ClusterAnswerNamesOwnersOfAbsentKeys) {
  v1::LookupResponse verbose;  // PeerFanout names each absent key's primary
  AddBlock(&verbose, v1::TIER_HOT, "n1", 0);
  v1::BlockLocation* absent = verbose.add_blocks();
  absent->set_tier(v1::TIER_NONE);
  absent->set_owner("n3");
  v1::LookupResponse compact = Compact(verbose);
  EXPECT_EQ(compact.owner_index_size(), 2);
  EXPECT_EQ(LookupOwner(compact, 1), "n3");
  ASSERT_TRUE(ExpandLookup(&compact).ok());
  ExpectSameBlocks(compact, verbose);
}

TEST(LookupFormTest, OneNodesAnswerMatchesCompactOfVerbose) {
  const std::vector<v1::Tier> tiers = {v1::TIER_NONE, v1::TIER_HOT,  v1::TIER_HOT,
                                       v1::TIER_COLD, v1::TIER_NONE, v1::TIER_HOT};
  for (const std::vector<uint64_t>& leases :
       {std::vector<uint64_t>{0, 0, 0, 0, 0, 0}, std::vector<uint64_t>{0, 5, 5, 5, 0, 5},
        std::vector<uint64_t>{0, 5, 5, 5, 0, 0}}) {
    v1::LookupResponse verbose, encoded;
    EncodeCompactLookup(tiers, leases, "node-a", &encoded);
    for (size_t i = 0; i < tiers.size(); ++i) {
      AddBlock(&verbose, tiers[i], "node-a", tiers[i] == v1::TIER_NONE ? 0 : leases[i]);
      EXPECT_EQ(LookupTier(encoded, i), tiers[i]);
      EXPECT_EQ(LookupOwner(encoded, i), tiers[i] == v1::TIER_NONE ? "" : "node-a");
      EXPECT_EQ(LookupLeaseId(encoded, i), tiers[i] == v1::TIER_NONE ? 0 : leases[i]);
    }
    // One lease over every resident key still needs no owner_index.
    EXPECT_EQ(encoded.owner_index_size(), leases.back() == 0 && leases[1] != 0 ? 6 : 0);
    ASSERT_TRUE(CheckLookup(encoded).ok());
    ASSERT_TRUE(ExpandLookup(&encoded).ok());
    ExpectSameBlocks(encoded, verbose);
  }
  v1::LookupResponse plain;
  const std::vector<v1::Tier> hot(2048, v1::TIER_HOT);
  EncodeCompactLookup(hot, std::vector<uint64_t>(2048, 0), "node-a", &plain);
  EXPECT_LT(plain.ByteSizeLong(), 2100u);  // one byte per key plus the table
}

TEST(LookupFormTest, VerboseIsLeftAloneAndBadIndexIsDataLoss) {
  v1::LookupResponse verbose;
  AddBlock(&verbose, v1::TIER_HOT, "n1", 0);
  v1::LookupResponse copy = verbose;
  ASSERT_TRUE(ExpandLookup(&copy).ok());
  ExpectSameBlocks(copy, verbose);

  v1::LookupResponse bad;
  bad.set_tiers(std::string(2, static_cast<char>(v1::TIER_HOT)));
  bad.add_owners("n1");
  bad.add_owner_index(0);
  bad.add_owner_index(1);
  const v1::LookupResponse before = bad;
  absl::Status s = ExpandLookup(&bad);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_EQ(bad.SerializeAsString(), before.SerializeAsString());
  bad.add_owner_index(0);  // 3 entries for 2 keys
  EXPECT_EQ(ExpandLookup(&bad).code(), absl::StatusCode::kDataLoss);
}

TEST(LookupFormTest, EncodedRequestIsWhatProtobufWrites) {
  const std::vector<std::string> keys = {"a", std::string(32, 'k'), std::string(200, 'x')};
  for (bool local_only : {false, true}) {
    for (uint64_t lease_ms : {uint64_t{0}, uint64_t{1000}, uint64_t{1} << 40}) {
      for (bool compact : {false, true}) {
        v1::LookupRequest req;
        req.set_namespace_("ns-1");
        for (const auto& k : keys) req.add_keys(k);
        req.set_local_only(local_only);
        req.set_lease_ms(lease_ms);
        req.set_compact(compact);
        EXPECT_EQ(EncodeLookupRequest("ns-1", keys, local_only, lease_ms, compact),
                  req.SerializeAsString());
      }
    }
  }
  EXPECT_EQ(EncodeLookupRequest("", {}, false, 0, false), "");
}

TEST(LookupFormTest, EncodedSubsetRequestNamesOnlyThoseKeysInThatOrder) {
  const std::vector<std::string> keys = {"k0", "k1", "k2", "k3"};
  const std::vector<size_t> which = {3, 1};
  v1::LookupRequest req;
  req.set_namespace_("ns");
  req.add_keys("k3");
  req.add_keys("k1");
  req.set_local_only(true);
  req.set_lease_ms(500);
  req.set_compact(true);
  EXPECT_EQ(EncodeLookupRequest("ns", keys, which, true, 500, true), req.SerializeAsString());
}

TEST(LookupFormTest, AnswersEncodeToTheSameBlocksInEitherForm) {
  const std::vector<KeyAnswer> answers = {{v1::TIER_HOT, "n1", 4},
                                          {v1::TIER_NONE, "n2", 0},
                                          {v1::TIER_COLD, "n2", 0},
                                          {v1::TIER_HOT, "n1", 4}};
  v1::LookupResponse verbose, compact;
  EncodeLookupAnswers(answers, /*compact=*/false, &verbose);
  EncodeLookupAnswers(answers, /*compact=*/true, &compact);
  EXPECT_FALSE(IsCompactLookup(verbose));
  ASSERT_TRUE(IsCompactLookup(compact));
  ASSERT_EQ(verbose.blocks_size(), 4);
  for (size_t i = 0; i < answers.size(); ++i) {
    EXPECT_EQ(verbose.blocks(static_cast<int>(i)).tier(), answers[i].tier) << i;
    EXPECT_EQ(verbose.blocks(static_cast<int>(i)).owner(), answers[i].owner) << i;
    EXPECT_EQ(verbose.blocks(static_cast<int>(i)).lease_id(), answers[i].lease_id) << i;
  }
  ASSERT_TRUE(ExpandLookup(&compact).ok());
  ExpectSameBlocks(compact, verbose);
}

}  // namespace
}  // namespace kvtier::protocol
