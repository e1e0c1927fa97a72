// Mutation fuzzing of the Put / Get frame parsers (protocol/wire.h): SliceCursor varints,
// ReadChunkPrefix, ReadGetHeaderSizes and GetStreamParser over mutated, truncated and
// extended messages cut into random slices. Nothing may crash, hang or read out of bounds
// (this test also runs under ASAN+UBSAN); every rejection is an error with a message;
// whatever is accepted is internally consistent (a chunk prefix leaves exactly its
// announced payload, a finished Get stream filled exactly the announced bytes).
#include <algorithm>
#include <cstring>
#include <deque>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "protocol/wire.h"
#include "tests/testing/mutator.h"

namespace kvtier::protocol {
namespace {

constexpr int kIterations = 20000;

using Spans = std::vector<std::span<const uint8_t>>;

// Cuts `bytes` into 1..8 spans at random points, with an empty span now and then.
Spans RandomSlices(const std::string& bytes, testing::Mutator& m) {
  Spans out;
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  size_t pos = 0;
  const size_t pieces = 1 + m.Below(8);
  for (size_t i = 0; i + 1 < pieces && pos < bytes.size(); ++i) {
    const size_t n = m.Below(bytes.size() - pos + 1);
    out.emplace_back(p + pos, n);
    pos += n;
  }
  out.emplace_back(p + pos, bytes.size() - pos);
  return out;
}

std::string Payload(size_t n, testing::Mutator& m) {
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(m.rng()());
  return s;
}

// Seeds: well-formed PutRequest messages (headers and chunks of several sizes, including
// hand-built chunk prefixes with non-minimal varints).
std::vector<std::string> PutSeeds(testing::Mutator& m) {
  std::vector<std::string> seeds;
  v1::PutRequest header;
  header.mutable_header()->set_namespace_("ns");
  for (int i = 0; i < 3; ++i) {
    auto* b = header.mutable_header()->add_blocks();
    b->set_key(absl::StrCat("k", i));
    if (i > 0) b->set_parent_key(absl::StrCat("k", i - 1));
    b->set_block_index(i);
    b->set_size(4096);
  }
  seeds.push_back(header.SerializeAsString());
  for (size_t n : {0u, 1u, 127u, 128u, 300u, 16384u}) {
    v1::PutRequest chunk;
    chunk.set_chunk(Payload(n, m));
    seeds.push_back(chunk.SerializeAsString());
  }
  seeds.push_back(std::string("\x12\x83\x80\x00", 4) + "abc");  // non-minimal varint 3
  return seeds;
}

TEST(WireFuzzTest, ChunkPrefixAndVarintsNeverOverreadAndAgreeWithProtobuf) {
  testing::Mutator m(20261201);
  const std::vector<std::string> seeds = PutSeeds(m);
  int accepted = 0;
  for (int it = 0; it < kIterations; ++it) {
    const std::string msg = m.Mutate(seeds[m.Below(seeds.size())]);
    SCOPED_TRACE(absl::StrCat("iteration ", it));
    const Spans spans = RandomSlices(msg, m);
    {
      SliceCursor cursor(spans);
      ASSERT_EQ(cursor.remaining(), msg.size());
      if (ReadChunkPrefix(cursor)) {
        ++accepted;
        // The rest is the payload: exactly what protobuf sees as the chunk field.
        std::string rest;
        for (auto piece = cursor.Next(7); !piece.empty(); piece = cursor.Next(7)) {
          rest.append(reinterpret_cast<const char*>(piece.data()), piece.size());
        }
        EXPECT_EQ(cursor.remaining(), 0u);
        v1::PutRequest parsed;
        ASSERT_TRUE(parsed.ParseFromString(msg));
        ASSERT_EQ(parsed.msg_case(), v1::PutRequest::kChunk);
        EXPECT_EQ(parsed.chunk(), rest);
      } else {
        v1::PutRequest parsed;
        (void)parsed.ParseFromString(msg);  // the fallback path; must not crash either way
      }
    }
    {
      // Varints anywhere in the message, read until the cursor runs dry.
      SliceCursor cursor(spans);
      uint64_t v = 0;
      int reads = 0;
      while (cursor.remaining() > 0 && reads++ < 64) {
        const uint64_t before = cursor.remaining();
        if (!cursor.ReadVarint(&v)) break;
        ASSERT_LT(cursor.remaining(), before);
      }
    }
  }
  EXPECT_GT(accepted, 0);
}

struct GetStream {
  std::vector<std::string> messages;
  uint64_t total = 0;
};

GetStream MakeGetStream(testing::Mutator& m) {
  GetStream s;
  v1::GetResponse header;
  std::string all;
  const size_t blocks = 1 + m.Below(4);
  for (size_t i = 0; i < blocks; ++i) {
    auto* b = header.mutable_header()->add_blocks();
    b->set_key(absl::StrCat("k", i));
    const bool found = m.Below(4) != 0;
    const size_t size = found ? m.Below(3000) : 0;
    b->set_found(found);
    b->set_size(size);
    all += Payload(size, m);
  }
  s.total = all.size();
  s.messages.push_back(header.SerializeAsString());
  const size_t chunk = 1 + m.Below(2000);
  for (size_t pos = 0; pos < all.size(); pos += chunk) {
    v1::GetResponse c;
    c.set_chunk(all.substr(pos, chunk));
    s.messages.push_back(c.SerializeAsString());
  }
  return s;
}

TEST(WireFuzzTest, GetStreamParserAnswersEveryMutatedStreamWithAStatus) {
  testing::Mutator m(17);
  int finished = 0, rejected = 0;
  for (int it = 0; it < kIterations; ++it) {
    SCOPED_TRACE(absl::StrCat("iteration ", it));
    GetStream s = MakeGetStream(m);
    // Mutate one or two messages, sometimes drop, duplicate or reorder one.
    for (int k = 0, n = 1 + static_cast<int>(m.Below(2)); k < n; ++k) {
      std::string& victim = s.messages[m.Below(s.messages.size())];
      victim = m.Mutate(victim);
    }
    switch (m.Below(6)) {
      case 0:
        s.messages.erase(s.messages.begin() + m.Below(s.messages.size()));
        break;
      case 1:
        s.messages.push_back(s.messages[m.Below(s.messages.size())]);
        break;
      case 2:
        std::swap(s.messages[m.Below(s.messages.size())], s.messages[m.Below(s.messages.size())]);
        break;
      default:
        break;
    }
    std::deque<std::string> dest;  // emplace_back keeps earlier elements in place
    GetStreamParser parser([&](size_t, const v1::GetBlockInfo& info)
                               -> absl::StatusOr<std::span<uint8_t>> {
      if (info.size() > (1u << 20)) return absl::ResourceExhaustedError("block too large");
      dest.emplace_back(info.size(), '\0');
      return std::span<uint8_t>(reinterpret_cast<uint8_t*>(dest.back().data()),
                                dest.back().size());
    });
    absl::Status st;
    for (const std::string& msg : s.messages) {
      st = parser.Consume(RandomSlices(msg, m));
      if (!st.ok()) break;
    }
    if (st.ok()) st = parser.Finish();
    if (st.ok()) {
      ++finished;
      ASSERT_TRUE(parser.has_header());
    } else {
      ++rejected;
      EXPECT_FALSE(st.message().empty()) << st;
    }
  }
  EXPECT_GT(finished, 0);
  EXPECT_GT(rejected, 0);
}

TEST(WireFuzzTest, GetHeaderSizesAgreeWithProtobufWheneverRead) {
  // ReadGetHeaderSizes may refuse what protobuf parses (it falls back to protobuf then),
  // but whatever it reads, protobuf reads the same: one size per block, 0 when not found.
  testing::Mutator m(23);
  int read = 0, refused = 0;
  for (int it = 0; it < kIterations; ++it) {
    SCOPED_TRACE(absl::StrCat("iteration ", it));
    std::string msg = MakeGetStream(m).messages[0];
    if (m.Below(8) == 0) msg += MakeGetStream(m).messages[0];  // a second header merges
    if (m.Below(4) != 0) msg = m.Mutate(msg);
    std::vector<uint64_t> sizes;
    if (!ReadGetHeaderSizes(std::span(reinterpret_cast<const uint8_t*>(msg.data()), msg.size()),
                            &sizes)) {
      ++refused;
      continue;
    }
    ++read;
    v1::GetResponse r;
    ASSERT_TRUE(r.ParseFromString(msg));
    ASSERT_TRUE(r.has_header());
    ASSERT_EQ(sizes.size(), static_cast<size_t>(r.header().blocks_size()));
    for (size_t i = 0; i < sizes.size(); ++i) {
      const v1::GetBlockInfo& b = r.header().blocks(static_cast<int>(i));
      EXPECT_EQ(sizes[i], b.found() ? b.size() : 0) << "block " << i;
    }
  }
  EXPECT_GT(read, kIterations / 4);
  EXPECT_GT(refused, 0);
}

}  // namespace
}  // namespace kvtier::protocol
