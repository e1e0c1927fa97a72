// BlockPut::pieces: a payload given as pieces (split anywhere, also through the 40-byte
// codec header) is stored bit-exactly on every path: hot, write-through, no hot room,
// standalone, re-put of the same / different bytes; invalid pieces change nothing.
#include <string>
#include <string_view>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kv/codec.h"
#include "storage/hot_arena.h"
#include "storage/tiered_store.h"
#include "tests/storage/store_test_util.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace kvtier::storage {
namespace {

using ::kvtier::storage::testing::KeyOf;
using ::kvtier::storage::testing::MakePayload;
using ::kvtier::storage::testing::NsStats;
using ::kvtier::storage::testing::RefBytes;
using ::kvtier::storage::testing::SmallLayout;
using ::kvtier::storage::testing::SlotBytes;
using ::kvtier::storage::testing::SmallNamespace;
using ::kvtier::storage::testing::TierOf;
using ::testing::HasSubstr;

// Splits `s` at the given offsets (ascending, <= s.size()); repeated offsets give empty
// pieces.
std::vector<std::string_view> Split(std::string_view s, std::vector<size_t> cuts) {
  std::vector<std::string_view> out;
  size_t at = 0;
  for (size_t c : cuts) {
    out.push_back(s.substr(at, c - at));
    at = c;
  }
  out.push_back(s.substr(at));
  return out;
}

// Cut patterns: inside the header (1, 7, 39), right at it (40), odd offsets in the body,
// empty pieces, and a single piece.
std::vector<std::vector<size_t>> CutPatterns(size_t size) {
  return {
      {},
      {1},
      {7, 39},
      {3, 3, 40, 41},
      {13, 13, 555, 4097, size - 1},
      {39, 40, 1023, size},
      {0, 0, 20, size / 2 + 1},
  };
}

class TieredStorePiecesTest : public testing::StoreTest {
 protected:
  static absl::Status PutPieces(TieredStore* store, const std::string& ns, const std::string& key,
                                std::span<const std::string_view> pieces,
                                bool standalone = false) {
    BlockPut put;
    put.key = key;
    put.block_index = 0;
    put.pieces = pieces;
    put.standalone = standalone;
    return store->Put(ns, {&put, 1});
  }
};

TEST(ParsePiecesHeaderTest, MatchesParseHeaderForEverySplit) {
  const std::string blob = MakePayload(SmallLayout(), 0, 7);
  auto want = kv::ParseHeader(kv::AsBytes(blob));
  ASSERT_OK(want);
  for (const auto& cuts : CutPatterns(blob.size())) {
    auto pieces = Split(blob, cuts);
    EXPECT_EQ(PiecesSize(pieces), blob.size());
    EXPECT_EQ(JoinPieces(pieces), blob);
    auto got = ParsePiecesHeader(pieces);
    ASSERT_OK(got);
    EXPECT_EQ(got->codec, want->codec);
    EXPECT_EQ(got->layout, want->layout);
    EXPECT_EQ(got->num_tokens, want->num_tokens);
    EXPECT_EQ(got->encoded_bytes, want->encoded_bytes);
    EXPECT_EQ(got->raw_bytes, want->raw_bytes);
  }
  // Errors are ParseHeader's: a truncated blob, a blob shorter than its header, garbage.
  for (std::string bad : {blob.substr(0, blob.size() - 3), blob.substr(0, 30),
                          std::string("not a blob at all, but long enough to have a header")}) {
    auto want_err = kv::ParseHeader(kv::AsBytes(bad));
    ASSERT_FALSE(want_err.ok());
    auto got_err = ParsePiecesHeader(Split(bad, {5, 5, 21}));
    ASSERT_FALSE(got_err.ok());
    EXPECT_EQ(got_err.status(), want_err.status());
  }
  EXPECT_FALSE(ParsePiecesHeader({}).ok());
}

TEST_F(TieredStorePiecesTest, HotPutFromPiecesIsBitExact) {
  auto store = Open(Options());
  ASSERT_OK(store->RegisterNamespace(SmallNamespace()));
  const auto patterns = CutPatterns(MakePayload(SmallLayout(), 0, 1).size());
  std::vector<std::string> payloads;
  for (uint32_t i = 0; i < patterns.size(); ++i) {
    payloads.push_back(MakePayload(SmallLayout(), 0, 100 + i));
    auto pieces = Split(payloads.back(), patterns[i]);
    ASSERT_OK(PutPieces(store.get(), "ns", KeyOf(1, i), pieces)) << i;
  }
  for (uint32_t i = 0; i < patterns.size(); ++i) {
    auto ref = store->Get("ns", KeyOf(1, i));
    ASSERT_OK(ref);
    EXPECT_EQ(ref->tier(), Tier::kHot);
    EXPECT_EQ(RefBytes(*ref), payloads[i]) << "pattern " << i;
  }
  NamespaceStats st = NsStats(*store);
  EXPECT_EQ(st.puts, patterns.size());
  EXPECT_EQ(st.encoded_bytes_put, patterns.size() * payloads[0].size());
  EXPECT_EQ(st.hot.bytes, patterns.size() * payloads[0].size());
  // Demoted to cold (checksummed from the hot copy) and read back, still bit-exact.
  ASSERT_OK(store->Evict("ns", {}, /*drop=*/false));
  for (uint32_t i = 0; i < patterns.size(); ++i) {
    auto ref = store->Get("ns", KeyOf(1, i));
    ASSERT_OK(ref);
    EXPECT_EQ(ref->tier(), Tier::kCold);
    EXPECT_EQ(RefBytes(*ref), payloads[i]);
  }
  EXPECT_EQ(NsStats(*store).checksum_failures, 0u);
}

TEST_F(TieredStorePiecesTest, WriteThroughPiecesSurviveRestart) {
  const std::string payload = MakePayload(SmallLayout(), 0, 9);
  {
    auto store = Open(Options());
    ASSERT_OK(store->RegisterNamespace(SmallNamespace("wt", /*write_through=*/true)));
    auto pieces = Split(payload, {2, 39, 41, 777});
    ASSERT_OK(PutPieces(store.get(), "wt", KeyOf(2, 0), pieces));
    EXPECT_EQ(NsStats(*store, "wt").cold.blocks, 1u);
  }
  auto store = Open(Options());
  auto ref = store->Get("wt", KeyOf(2, 0));
  ASSERT_OK(ref);
  EXPECT_EQ(ref->tier(), Tier::kCold);
  EXPECT_EQ(RefBytes(*ref), payload);
}

TEST_F(TieredStorePiecesTest, PiecesGoColdWhenTheHotTierHasNoRoom) {
  auto store = Open(Options(/*hot_blocks=*/2));
  ASSERT_OK(store->RegisterNamespace(SmallNamespace()));
  std::vector<std::string> keys;
  for (uint32_t i = 0; i < 2; ++i) {
    const std::string p = MakePayload(SmallLayout(), 0, 200 + i);
    keys.push_back(KeyOf(3, i));
    BlockPut put{keys.back(), "", 0, p};
    ASSERT_OK(store->Put("ns", {&put, 1}));
  }
  auto pinned = store->Pin("ns", keys, 0);
  ASSERT_OK(pinned);
  ASSERT_EQ(*pinned, 2u);
  const std::string payload = MakePayload(SmallLayout(), 0, 300);
  auto pieces = Split(payload, {11, 39, 5000});
  ASSERT_OK(PutPieces(store.get(), "ns", KeyOf(4, 0), pieces));
  EXPECT_EQ(TierOf(store.get(), KeyOf(4, 0)), Tier::kCold);
  auto ref = store->Get("ns", KeyOf(4, 0));
  ASSERT_OK(ref);
  EXPECT_EQ(RefBytes(*ref), payload);
}

TEST_F(TieredStorePiecesTest, StandalonePiecesAreStoredCold) {
  auto store = Open(Options());
  ASSERT_OK(store->RegisterNamespace(SmallNamespace()));
  const std::string payload = MakePayload(SmallLayout(), 0, 400);
  auto pieces = Split(payload, {1, 2, 3, 40, 4000});
  ASSERT_OK(PutPieces(store.get(), "ns", "entry", pieces, /*standalone=*/true));
  EXPECT_EQ(TierOf(store.get(), "entry"), Tier::kCold);
  auto ref = store->Get("ns", "entry");
  ASSERT_OK(ref);
  EXPECT_EQ(RefBytes(*ref), payload);
}

TEST_F(TieredStorePiecesTest, RePutFromPiecesKeepsOrReplacesTheColdCopy) {
  auto store = Open(Options());
  ASSERT_OK(store->RegisterNamespace(SmallNamespace()));
  const std::string a = MakePayload(SmallLayout(), 0, 500);
  const std::string b = MakePayload(SmallLayout(), 0, 501);
  ASSERT_OK(PutPieces(store.get(), "ns", KeyOf(5, 0), Split(a, {17})));
  ASSERT_OK(store->Flush("ns"));  // hot + cold copies of `a`
  ASSERT_EQ(NsStats(*store).cold.blocks, 1u);
  // Same bytes: the cold copy stays valid.
  ASSERT_OK(PutPieces(store.get(), "ns", KeyOf(5, 0), Split(a, {38, 8000})));
  EXPECT_EQ(NsStats(*store).cold.blocks, 1u);
  // Different bytes: the stale cold copy is dropped, the new bytes are served from both tiers.
  ASSERT_OK(PutPieces(store.get(), "ns", KeyOf(5, 0), Split(b, {40, 41})));
  EXPECT_EQ(NsStats(*store).cold.blocks, 0u);
  auto hot = store->Get("ns", KeyOf(5, 0));
  ASSERT_OK(hot);
  EXPECT_EQ(RefBytes(*hot), b);
  hot = BlockRef();
  ASSERT_OK(store->Evict("ns", {}, /*drop=*/false));
  auto cold = store->Get("ns", KeyOf(5, 0));
  ASSERT_OK(cold);
  EXPECT_EQ(cold->tier(), Tier::kCold);
  EXPECT_EQ(RefBytes(*cold), b);
}

TEST_F(TieredStorePiecesTest, InvalidPiecesAreRejectedAndChangeNothing) {
  auto store = Open(Options());
  ASSERT_OK(store->RegisterNamespace(SmallNamespace()));
  const std::string payload = MakePayload(SmallLayout(), 0, 600);
  // Truncated (the header's body size no longer matches).
  absl::Status st =
      PutPieces(store.get(), "ns", "k", Split(std::string_view(payload).substr(0, 5000), {39}));
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("not a valid encoded block"));
  // One byte too many.
  const std::string longer = payload + "x";
  st = PutPieces(store.get(), "ns", "k", Split(longer, {20, 4000}));
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  // Wrong layout / codec, header split across pieces.
  kv::Layout wide = SmallLayout();
  wide.num_layers = 3;
  const std::string wrong = MakePayload(wide, 0, 1);
  st = PutPieces(store.get(), "ns", "k", Split(wrong, {3, 30}));
  EXPECT_TRUE(absl::IsFailedPrecondition(st)) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("num_layers"));
  const std::string int8 = MakePayload(SmallLayout(), 0, 1, kv::CodecId::kInt8);
  st = PutPieces(store.get(), "ns", "k", Split(int8, {6, 7}));
  EXPECT_TRUE(absl::IsFailedPrecondition(st)) << st;
  NamespaceStats ns = NsStats(*store);
  EXPECT_EQ(ns.puts, 0u);
  EXPECT_EQ(ns.hot.blocks, 0u);
  EXPECT_EQ(store->Stats().hot_used_bytes, 0u);
  EXPECT_EQ(TierOf(store.get(), "k"), Tier::kNone);
}

TEST_F(TieredStorePiecesTest, NonEmptyPayloadWinsOverPieces) {
  auto store = Open(Options());
  ASSERT_OK(store->RegisterNamespace(SmallNamespace()));
  const std::string a = MakePayload(SmallLayout(), 0, 700);
  const std::string b = MakePayload(SmallLayout(), 0, 701);
  auto pieces = Split(b, {100});
  BlockPut put{"k", "", 0, a};
  put.pieces = pieces;
  ASSERT_OK(store->Put("ns", {&put, 1}));
  auto ref = store->Get("ns", "k");
  ASSERT_OK(ref);
  EXPECT_EQ(RefBytes(*ref), a);
}

}  // namespace
}  // namespace kvtier::storage
