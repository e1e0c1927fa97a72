#include "protocol/wire.h"

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kvtier/v1/kvtier.pb.h"
#include "tests/testing/status_matchers.h"

namespace kvtier::protocol {
namespace {

namespace v1 = ::kvtier::v1;

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

// Splits `bytes` into spans at random cut points (like gRPC slices).
std::vector<std::span<const uint8_t>> RandomSlices(const std::string& bytes, std::mt19937& rng) {
  std::vector<std::span<const uint8_t>> out;
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  size_t pos = 0;
  while (pos < bytes.size()) {
    const size_t n = std::min<size_t>(bytes.size() - pos, 1 + rng() % 70000);
    out.emplace_back(p + pos, n);
    pos += n;
  }
  return out;
}

TEST(ChunkPrefixTest, MatchesProtobufSerialization) {
  for (uint64_t n : {0ull, 1ull, 127ull, 128ull, 16383ull, 16384ull, 1ull << 20,
                     (3ull << 20) + 5}) {
    v1::PutRequest req;
    const std::string payload = RandomBytes(n, static_cast<uint32_t>(n));
    req.set_chunk(payload);
    const std::string wire = req.SerializeAsString();
    uint8_t prefix[kMaxFramePrefixBytes];
    const size_t len = EncodeChunkPrefix(n, prefix);
    ASSERT_EQ(wire.size(), len + n) << n;
    EXPECT_EQ(std::memcmp(wire.data(), prefix, len), 0) << n;
    // And the hand-built frame parses back as the same message.
    std::string frame(reinterpret_cast<char*>(prefix), len);
    frame += payload;
    v1::PutRequest parsed;
    ASSERT_TRUE(parsed.ParseFromString(frame));
    ASSERT_EQ(parsed.msg_case(), v1::PutRequest::kChunk);
    EXPECT_EQ(parsed.chunk(), payload);
  }
}

TEST(PlanChunksTest, CoversEveryByteInOrderWithBoundedChunks) {
  const uint64_t kChunk = 1 << 20;
  const std::vector<uint64_t> sizes = {(3ull << 20) + 5, 0, 1ull << 20, 7, 2ull << 20};
  const auto chunks = PlanChunks(sizes, kChunk);
  uint64_t total = 0;
  for (auto s : sizes) total += s;
  EXPECT_EQ(chunks.size(), (total + kChunk - 1) / kChunk);
  size_t block = 0;
  uint64_t offset = 0;
  for (size_t c = 0; c < chunks.size(); ++c) {
    uint64_t bytes = 0;
    for (const auto& piece : chunks[c]) {
      while (block < sizes.size() && offset == sizes[block]) {
        ++block;
        offset = 0;
      }
      ASSERT_EQ(piece.block, block);
      ASSERT_EQ(piece.offset, offset);
      ASSERT_GT(piece.bytes, 0u);
      offset += piece.bytes;
      bytes += piece.bytes;
    }
    if (c + 1 < chunks.size()) {
      EXPECT_EQ(bytes, kChunk);
    }
    EXPECT_LE(bytes, kChunk);
  }
  EXPECT_EQ(offset, sizes.back());
  EXPECT_TRUE(PlanChunks(std::vector<uint64_t>{0, 0}, kChunk).empty());
}

// Serialized Get stream: header then chunks (as the server would send with protobuf).
struct GetStream {
  std::vector<std::string> messages;
  std::vector<std::string> payloads;  // per header block ("" for misses)
};

GetStream MakeGetStream(const std::vector<int64_t>& sizes, uint64_t chunk, uint32_t seed) {
  GetStream s;
  v1::GetResponse header;
  std::string all;
  for (size_t i = 0; i < sizes.size(); ++i) {
    auto* b = header.mutable_header()->add_blocks();
    b->set_key(absl::StrCat("k", i));
    b->set_found(sizes[i] >= 0);
    b->set_size(sizes[i] >= 0 ? sizes[i] : 0);
    s.payloads.push_back(sizes[i] >= 0 ? RandomBytes(sizes[i], seed + i) : "");
    all += s.payloads.back();
  }
  s.messages.push_back(header.SerializeAsString());
  for (size_t pos = 0; pos < all.size(); pos += chunk) {
    v1::GetResponse m;
    m.set_chunk(all.substr(pos, chunk));
    s.messages.push_back(m.SerializeAsString());
  }
  return s;
}

TEST(GetStreamParserTest, RoutesChunksIntoDestinationsBitExact) {
  std::mt19937 rng(42);
  // Blocks larger than a chunk, a miss, an empty block and a tiny one.
  const std::vector<int64_t> sizes = {(2 << 20) + 17, -1, 0, 5, (1 << 20) - 3};
  const GetStream stream = MakeGetStream(sizes, 1 << 20, 7);
  std::vector<std::string> dest(sizes.size());
  std::vector<size_t> asked;
  GetStreamParser parser([&](size_t i, const v1::GetBlockInfo& info)
                             -> absl::StatusOr<std::span<uint8_t>> {
    asked.push_back(i);
    dest[i].assign(info.size() + 10, '\xee');  // larger than needed is fine
    return std::span<uint8_t>(reinterpret_cast<uint8_t*>(dest[i].data()), dest[i].size());
  });
  for (const auto& m : stream.messages) {
    auto slices = RandomSlices(m, rng);
    ASSERT_OK(parser.Consume(slices));
  }
  ASSERT_OK(parser.Finish());
  EXPECT_EQ(asked, (std::vector<size_t>{0, 3, 4}));
  for (size_t i : asked) {
    EXPECT_EQ(dest[i].substr(0, stream.payloads[i].size()), stream.payloads[i]) << i;
    EXPECT_EQ(dest[i].substr(stream.payloads[i].size()), std::string(10, '\xee')) << i;
  }
  EXPECT_EQ(parser.header().blocks_size(), 5);
  EXPECT_FALSE(parser.header().blocks(1).found());
}

std::vector<std::span<const uint8_t>> One(const std::string& s) {
  return {std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size())};
}

TEST(GetStreamParserTest, RejectsMalformedStreams) {
  const GetStream stream = MakeGetStream({100, 50}, 64, 1);
  std::string sink(200, 0);
  auto dest = [&](size_t, const v1::GetBlockInfo&) -> absl::StatusOr<std::span<uint8_t>> {
    return std::span<uint8_t>(reinterpret_cast<uint8_t*>(sink.data()), sink.size());
  };
  {  // chunk before header
    GetStreamParser p(dest);
    EXPECT_EQ(p.Consume(One(stream.messages[1])).code(), absl::StatusCode::kInternal);
  }
  {  // second header
    GetStreamParser p(dest);
    ASSERT_OK(p.Consume(One(stream.messages[0])));
    EXPECT_FALSE(p.Consume(One(stream.messages[0])).ok());
  }
  {  // stream ends short
    GetStreamParser p(dest);
    ASSERT_OK(p.Consume(One(stream.messages[0])));
    ASSERT_OK(p.Consume(One(stream.messages[1])));
    EXPECT_FALSE(p.Finish().ok());
  }
  {  // more bytes than announced
    GetStreamParser p(dest);
    ASSERT_OK(p.Consume(One(stream.messages[0])));
    for (size_t i = 1; i < stream.messages.size(); ++i) {
      ASSERT_OK(p.Consume(One(stream.messages[i])));
    }
    EXPECT_OK(p.Finish());
    EXPECT_FALSE(p.Consume(One(stream.messages[1])).ok());
  }
  {  // truncated length prefix
    GetStreamParser p(dest);
    ASSERT_OK(p.Consume(One(stream.messages[0])));
    EXPECT_FALSE(p.Consume(One(stream.messages[1].substr(0, 10))).ok());
  }
  {  // destination too small
    GetStreamParser p([](size_t, const v1::GetBlockInfo&) -> absl::StatusOr<std::span<uint8_t>> {
      static uint8_t tiny[4];
      return std::span<uint8_t>(tiny, 4);
    });
    EXPECT_FALSE(p.Consume(One(stream.messages[0])).ok());
  }
  {  // destination error is passed through
    GetStreamParser p([](size_t, const v1::GetBlockInfo&) -> absl::StatusOr<std::span<uint8_t>> {
      return absl::OutOfRangeError("no room");
    });
    EXPECT_EQ(p.Consume(One(stream.messages[0])).code(), absl::StatusCode::kOutOfRange);
  }
}

// Runs SliceCursor::ReadVarint over `bytes` split one byte per span (the worst case).
bool ReadVarintSplit(const std::string& bytes, uint64_t* out) {
  std::vector<std::span<const uint8_t>> spans;
  for (const char& c : bytes) spans.emplace_back(reinterpret_cast<const uint8_t*>(&c), 1);
  SliceCursor cursor(spans);
  return cursor.ReadVarint(out);
}

TEST(SliceCursorTest, VarintsRoundTripAcrossSpanBoundaries) {
  for (uint64_t v : {uint64_t{0}, uint64_t{1}, uint64_t{127}, uint64_t{128}, uint64_t{300},
                     uint64_t{1} << 35, UINT64_MAX - 1, UINT64_MAX}) {
    uint8_t prefix[kMaxFramePrefixBytes];
    const size_t n = EncodeChunkPrefix(v, prefix);
    uint64_t got = 0;
    ASSERT_TRUE(ReadVarintSplit(std::string(reinterpret_cast<char*>(prefix) + 1, n - 1), &got))
        << v;
    EXPECT_EQ(got, v);
  }
}

TEST(SliceCursorTest, VarintRejectsOverflowAndOverlongAndTruncated) {
  uint64_t v = 0;
  // Ten bytes whose last one sets bits above 63.
  EXPECT_FALSE(ReadVarintSplit(std::string(9, '\xff') + '\x02', &v));
  // Eleven bytes (continuation on the tenth): a 70-bit shift, once accepted by the client.
  EXPECT_FALSE(ReadVarintSplit(std::string(10, '\x80') + '\x00', &v));
  // The message ends inside the varint.
  EXPECT_FALSE(ReadVarintSplit("\x80\x80", &v));
  EXPECT_FALSE(ReadVarintSplit("", &v));
  // The largest value is exactly ten bytes ending in 0x01.
  ASSERT_TRUE(ReadVarintSplit(std::string(9, '\xff') + '\x01', &v));
  EXPECT_EQ(v, UINT64_MAX);
}

TEST(SliceCursorTest, NextReturnsContiguousPiecesAndSkipsEmptySpans) {
  const std::string a = "abc", b = "", c = "defg";
  std::vector<std::span<const uint8_t>> spans = {
      {reinterpret_cast<const uint8_t*>(a.data()), a.size()},
      {reinterpret_cast<const uint8_t*>(b.data()), b.size()},
      {reinterpret_cast<const uint8_t*>(c.data()), c.size()}};
  SliceCursor cursor(spans);
  EXPECT_EQ(cursor.remaining(), 7u);
  uint8_t byte = 0;
  ASSERT_TRUE(cursor.ReadByte(&byte));
  EXPECT_EQ(byte, 'a');
  EXPECT_EQ(cursor.Next(100).size(), 2u);  // the rest of "abc"
  EXPECT_EQ(cursor.index(), 2u);           // the empty span is skipped
  EXPECT_EQ(cursor.Next(3).size(), 3u);
  EXPECT_EQ(cursor.remaining(), 1u);
  EXPECT_EQ(cursor.Next(3).size(), 1u);
  EXPECT_TRUE(cursor.Next(3).empty());
  EXPECT_FALSE(cursor.ReadByte(&byte));
}

TEST(ReadChunkPrefixTest, AcceptsExactlyOneChunkField) {
  v1::PutRequest req;
  req.set_chunk(RandomBytes(1000, 5));
  const std::string bytes = req.SerializeAsString();
  std::mt19937 rng(11);
  auto spans = RandomSlices(bytes, rng);
  SliceCursor ok(spans);
  ASSERT_TRUE(ReadChunkPrefix(ok));
  EXPECT_EQ(ok.remaining(), 1000u);

  // A header message, a length that does not reach the end, and an empty message.
  v1::PutRequest header;
  header.mutable_header()->set_namespace_("ns");
  const std::string h = header.SerializeAsString();
  std::span<const uint8_t> hs(reinterpret_cast<const uint8_t*>(h.data()), h.size());
  SliceCursor not_chunk(std::span<const std::span<const uint8_t>>(&hs, 1));
  EXPECT_FALSE(ReadChunkPrefix(not_chunk));
  const std::string extra = bytes + "x";
  std::span<const uint8_t> es(reinterpret_cast<const uint8_t*>(extra.data()), extra.size());
  SliceCursor trailing(std::span<const std::span<const uint8_t>>(&es, 1));
  EXPECT_FALSE(ReadChunkPrefix(trailing));
  SliceCursor empty(std::span<const std::span<const uint8_t>>{});
  EXPECT_FALSE(ReadChunkPrefix(empty));
}

TEST(ReadGetHeaderSizesTest, ReadsFoundSizesAndSkipsOtherFields) {
  v1::GetResponse r;
  auto* a = r.mutable_header()->add_blocks();
  a->set_key("k0");
  a->set_found(true);
  a->set_size(2097152);
  a->set_tier(v1::TIER_HOT);
  a->add_positions(7);
  a->set_ucx(true);  // field 20: a two-byte tag
  auto* miss = r.mutable_header()->add_blocks();
  miss->set_key("k1");
  auto* b = r.mutable_header()->add_blocks();
  b->set_found(true);
  b->set_size(5);
  const std::string bytes = r.SerializeAsString();
  auto span = [](const std::string& s) {
    return std::span(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  };
  std::vector<uint64_t> sizes;
  ASSERT_TRUE(ReadGetHeaderSizes(span(bytes), &sizes));
  EXPECT_EQ(sizes, (std::vector<uint64_t>{2097152, 0, 5}));
  // Two header fields merge, as protobuf merges them.
  ASSERT_TRUE(ReadGetHeaderSizes(span(bytes + bytes), &sizes));
  EXPECT_EQ(sizes.size(), 6u);
  // An empty header lists no block.
  v1::GetResponse empty;
  empty.mutable_header();
  ASSERT_TRUE(ReadGetHeaderSizes(span(empty.SerializeAsString()), &sizes));
  EXPECT_TRUE(sizes.empty());

  // Refused: a chunk, no header at all, a truncated header, a found flag of another wire
  // type.
  v1::GetResponse chunk;
  chunk.set_chunk("abc");
  EXPECT_FALSE(ReadGetHeaderSizes(span(chunk.SerializeAsString()), &sizes));
  EXPECT_FALSE(ReadGetHeaderSizes(span(std::string()), &sizes));
  EXPECT_FALSE(ReadGetHeaderSizes(span(bytes.substr(0, bytes.size() - 1)), &sizes));
  const std::string fixed_found("\x0a\x04\x0a\x02\x15\x01", 6);  // found as a fixed32
  EXPECT_FALSE(ReadGetHeaderSizes(span(fixed_found), &sizes));
}

}  // namespace
}  // namespace kvtier::protocol
