#include "protocol/lookup_form.h"

#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

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
  ASSERT_OK(ExpandLookup(&compact));
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
  ASSERT_OK(ExpandLookup(&compact));
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
  ASSERT_OK(ExpandLookup(&compact));
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
    ASSERT_OK(CheckLookup(encoded));
    ASSERT_OK(ExpandLookup(&encoded));
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
  ASSERT_OK(ExpandLookup(&copy));
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

TEST(LookupFormTest, PrefetchIsWrittenAndReadAsProtobufDoes) {
  const std::vector<std::string> keys = {"a", std::string(32, 'k')};
  for (v1::Prefetch p : {v1::PREFETCH_DEFAULT, v1::PREFETCH_ON, v1::PREFETCH_OFF}) {
    v1::LookupRequest req;
    req.set_namespace_("ns");
    for (const auto& k : keys) req.add_keys(k);
    req.set_lease_ms(300);
    req.set_prefetch(p);
    req.set_compact(true);
    const std::string bytes = EncodeLookupRequest("ns", keys, false, 300, true, p);
    EXPECT_EQ(bytes, req.SerializeAsString()) << p;
    LookupRequestView v;
    ASSERT_TRUE(ReadLookupRequest(bytes, &v));
    EXPECT_EQ(v.prefetch, static_cast<uint32_t>(p));
    EXPECT_EQ(v.lease_ms, 300u);
    EXPECT_TRUE(v.compact);
  }
}

TEST(LookupFormTest, EncodedSubsetRequestNamesOnlyThoseKeysInThatOrder) {
  const std::vector<std::string_view> keys = {"k0", "k1", "k2", "k3"};
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

TEST(LookupFormTest, ReadRequestReadsWhatProtobufWritesWithoutCopyingKeys) {
  const std::vector<std::string> keys = {"a", std::string(32, 'k'), std::string(200, 'x')};
  for (bool local_only : {false, true}) {
    for (uint64_t lease_ms : {uint64_t{0}, uint64_t{1000}, uint64_t{1} << 40}) {
      for (bool compact : {false, true}) {
        const std::string bytes = EncodeLookupRequest("ns-1", keys, local_only, lease_ms, compact);
        LookupRequestView v;
        ASSERT_TRUE(ReadLookupRequest(bytes, &v));
        EXPECT_EQ(v.ns, "ns-1");
        ASSERT_EQ(v.keys.size(), keys.size());
        for (size_t i = 0; i < keys.size(); ++i) {
          EXPECT_EQ(v.keys[i], keys[i]);
          EXPECT_TRUE(v.keys[i].data() >= bytes.data() &&
                      v.keys[i].data() < bytes.data() + bytes.size());  // a view, no copy
        }
        EXPECT_EQ(v.local_only, local_only);
        EXPECT_EQ(v.lease_ms, lease_ms);
        EXPECT_EQ(v.compact, compact);
      }
    }
  }
  LookupRequestView v;
  ASSERT_TRUE(ReadLookupRequest("", &v));  // every field at its default
  EXPECT_TRUE(v.ns.empty() && v.keys.empty() && !v.local_only && v.lease_ms == 0);

  // Unknown fields are skipped, as protobuf skips them; the last namespace wins.
  v1::LookupRequest req;
  req.set_namespace_("first");
  req.add_keys("k");
  std::string bytes = req.SerializeAsString();
  bytes += std::string("\xa0\x06\x07", 3);              // field 100, varint 7
  bytes += std::string("\x0a\x04last", 6);              // namespace again
  bytes += std::string("\xad\x06\x01\x02\x03\x04", 6);  // field 101, fixed32
  ASSERT_TRUE(ReadLookupRequest(bytes, &v));
  EXPECT_EQ(v.ns, "last");
  ASSERT_TRUE(req.ParseFromString(bytes));
  EXPECT_EQ(req.namespace_(), "last");

  // Declined (protobuf decides): a non-ASCII namespace (UTF-8 is protobuf's to check), a
  // known field of another wire type, a truncated key, a group, field number 0.
  EXPECT_FALSE(ReadLookupRequest(std::string("\x0a\x02\xc3\xa9", 4), &v));
  EXPECT_FALSE(ReadLookupRequest(std::string("\x1d\x01\x00\x00\x00", 5), &v));  // fixed32
  EXPECT_FALSE(ReadLookupRequest(std::string("\x12\x05"
                                             "abc",
                                             5),
                                 &v));
  EXPECT_FALSE(ReadLookupRequest(std::string("\x0b\x0c", 2), &v));
  EXPECT_FALSE(ReadLookupRequest(std::string("\x00\x01", 2), &v));
}

TEST(LookupFormTest, ReadRequestAgreesWithProtobufOnMutatedBytes) {
  // Whatever ReadLookupRequest reads, protobuf parses to the same fields.
  std::mt19937 rng(5);
  int read = 0;
  for (int it = 0; it < 20000; ++it) {
    std::vector<std::string> keys(rng() % 5);
    for (std::string& k : keys)
      k = std::string(1 + rng() % 40, static_cast<char>('a' + rng() % 26));
    std::string bytes = EncodeLookupRequest("ns", keys, rng() % 2, rng() % 3 * 700, rng() % 2);
    for (int m = 0, n = 1 + static_cast<int>(rng() % 3); m < n && !bytes.empty(); ++m) {
      switch (rng() % 3) {
        case 0:
          bytes[rng() % bytes.size()] = static_cast<char>(rng());
          break;
        case 1:
          bytes.resize(rng() % bytes.size());
          break;
        default:
          bytes.insert(rng() % (bytes.size() + 1), 1, static_cast<char>(rng()));
      }
    }
    LookupRequestView v;
    if (!ReadLookupRequest(bytes, &v)) continue;
    ++read;
    v1::LookupRequest req;
    ASSERT_TRUE(req.ParseFromString(bytes)) << it;
    EXPECT_EQ(v.ns, req.namespace_()) << it;
    ASSERT_EQ(v.keys.size(), static_cast<size_t>(req.keys_size())) << it;
    for (size_t i = 0; i < v.keys.size(); ++i) EXPECT_EQ(v.keys[i], req.keys(static_cast<int>(i)));
    EXPECT_EQ(v.local_only, req.local_only()) << it;
    EXPECT_EQ(v.lease_ms, req.lease_ms()) << it;
    EXPECT_EQ(v.compact, req.compact()) << it;
  }
  EXPECT_GT(read, 1000);
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
  ASSERT_OK(ExpandLookup(&compact));
  ExpectSameBlocks(compact, verbose);
}

}  // namespace
}  // namespace kvtier::protocol
