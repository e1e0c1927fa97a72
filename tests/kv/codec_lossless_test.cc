// The lossless codec: every 16-bit pattern and random blocks of several layouts
// round-trip bit-exactly through both kernel sets; the size stays within EncodedSize; a
// malformed plane directory is DATA_LOSS.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kv/codec.h"
#include "kv/codec_kernels.h"
#include "kv/half.h"
#include "tests/testing/status_matchers.h"

namespace kvtier::kv {
namespace {

using internal::CodecKernels;
using ::testing::HasSubstr;

Layout MakeLayout(uint32_t layers, uint32_t heads, uint32_t head_dim, uint32_t tokens,
                  Dtype dtype) {
  Layout l;
  l.num_layers = layers;
  l.num_kv_heads = heads;
  l.head_dim = head_dim;
  l.tokens_per_block = tokens;
  l.dtype = dtype;
  l.sink_tokens = std::min(4u, tokens);
  return l;
}

std::vector<const CodecKernels*> KernelSets() {
  std::vector<const CodecKernels*> sets = {&internal::BaselineKernels()};
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) sets.push_back(&internal::Avx2Kernels());
  return sets;
}

std::string Bytes(const std::vector<uint16_t>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 2);
}

// Encodes and decodes `raw` with every kernel set; all blobs must be equal, every decode
// bit-exact. Returns the blob.
std::string RoundTrip(const Layout& layout, uint32_t block_index, const std::string& raw,
                      const std::string& what) {
  std::string first;
  for (const CodecKernels* k : KernelSets()) {
    auto enc =
        internal::EncodeWithKernels(*k, CodecId::kLossless, layout, block_index, AsBytes(raw), {});
    EXPECT_OK(enc) << what << ": " << enc.status();
    if (!enc.ok()) return "";
    std::string dec(raw.size(), '\x55');
    absl::Status st = internal::DecodeWithKernels(
        *k, AsBytes(*enc), {reinterpret_cast<uint8_t*>(dec.data()), dec.size()});
    EXPECT_OK(st) << what << ": " << st;
    EXPECT_TRUE(dec == raw) << what << ": decode is not bit-exact";
    if (first.empty()) {
      first = *enc;
    } else {
      EXPECT_EQ(*enc, first) << what << ": kernel sets encode differently";
    }
  }
  return first;
}

TEST(CodecLosslessTest, EveryBitPatternRoundTripsForBothDtypes) {
  // L1 H1 D64 T512 holds exactly 65536 elements: each 16-bit pattern once, NaN and inf
  // (both signs, every payload) and subnormals included.
  std::vector<uint16_t> sorted(65536);
  std::iota(sorted.begin(), sorted.end(), uint16_t{0});
  std::vector<uint16_t> shuffled = sorted;
  std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937(3));
  std::vector<uint16_t> low_major(sorted.size());  // the low plane is runs, the high one not
  for (size_t i = 0; i < sorted.size(); ++i) {
    low_major[i] = static_cast<uint16_t>(((i & 0xff) << 8) | (i >> 8));
  }
  for (Dtype dtype : {Dtype::kFp16, Dtype::kBf16}) {
    const Layout layout = MakeLayout(1, 1, 64, 512, dtype);
    for (const auto* v : {&sorted, &shuffled, &low_major}) {
      const std::string raw = Bytes(*v);
      const std::string blob = RoundTrip(layout, 0, raw, DtypeName(dtype));
      ASSERT_FALSE(blob.empty());
      EXPECT_LE(blob.size(), EncodedSize(CodecId::kLossless, layout, 512, 4));
      if (v == &sorted) {
        EXPECT_LT(blob.size(), raw.size() / 8);  // both planes compress
      }
    }
  }
}

TEST(CodecLosslessTest, RandomBlocksOfSeveralLayoutsRoundTrip) {
  struct Shape {
    uint32_t layers, heads, head_dim, tokens;
  };
  const Shape shapes[] = {{2, 2, 128, 16}, {1, 2, 8, 16}, {2, 1, 40, 7},
                          {1, 1, 64, 70},  {1, 1, 2, 1},  {3, 2, 256, 5}};
  std::mt19937 rng(5);
  for (Dtype dtype : {Dtype::kFp16, Dtype::kBf16}) {
    for (const Shape& s : shapes) {
      const Layout layout = MakeLayout(s.layers, s.heads, s.head_dim, s.tokens, dtype);
      for (int kind = 0; kind < 3; ++kind) {
        std::vector<uint16_t> v(layout.ElementsPerBlock());
        std::normal_distribution<float> normal(0.0f, kind == 0 ? 1.0f : 300.0f);
        for (size_t i = 0; i < v.size(); ++i) {
          if (kind == 2) {
            v[i] = static_cast<uint16_t>(rng());  // any bits
          } else {
            float x = normal(rng);
            if (i % 7 == 3) x += 12.0f;  // an outlier channel
            v[i] = FloatToDtype(dtype, x);
          }
        }
        const std::string raw = Bytes(v);
        const std::string what = std::string(DtypeName(dtype)) + " D" + std::to_string(s.head_dim) +
                                 " T" + std::to_string(s.tokens) + " kind " + std::to_string(kind);
        for (uint32_t block : {0u, 2u}) {
          const std::string blob = RoundTrip(layout, block, raw, what);
          ASSERT_FALSE(blob.empty()) << what;
          auto info = ParseHeader(AsBytes(blob));
          ASSERT_OK(info) << what << ": " << info.status();
          EXPECT_EQ(info->codec, CodecId::kLossless);
          EXPECT_EQ(info->layout.dtype, dtype);
          EXPECT_EQ(info->num_tokens, s.tokens);
          EXPECT_EQ(info->raw_tokens, s.tokens);  // every token is exact
          EXPECT_EQ(info->encoded_bytes, blob.size());
          EXPECT_EQ(info->raw_bytes, raw.size());
          EXPECT_LE(blob.size(), EncodedSize(CodecId::kLossless, layout, s.tokens, 0)) << what;
          // Unaligned input and output give the same bytes.
          const std::string shifted = "x" + raw;
          auto unaligned = Encode(CodecId::kLossless, layout, block, AsBytes(shifted).subspan(1));
          ASSERT_OK(unaligned);
          EXPECT_EQ(*unaligned, blob);
          std::string out(raw.size() + 1, '\0');
          ASSERT_OK(Decode(AsBytes(blob), {reinterpret_cast<uint8_t*>(out.data()) + 1, raw.size()}));
          EXPECT_EQ(out.substr(1), raw) << what;
        }
      }
    }
  }
}

TEST(CodecLosslessTest, KvLikeDataCompressesAndNoiseDoesNotGrow) {
  const Layout layout = MakeLayout(2, 8, 128, 16, Dtype::kFp16);
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint16_t> kv(layout.ElementsPerBlock()), noise(kv.size());
  for (uint16_t& x : kv) x = FloatToHalf(normal(rng));
  for (uint16_t& x : noise) x = static_cast<uint16_t>(rng());
  auto kv_blob = Encode(CodecId::kLossless, layout, 1, AsBytes(Bytes(kv)));
  auto noise_blob = Encode(CodecId::kLossless, layout, 1, AsBytes(Bytes(noise)));
  ASSERT_OK(kv_blob);
  ASSERT_OK(noise_blob);
  // N(0,1) fp16: the high byte carries about 5.5 of its 8 bits (sign, exponent, two
  // uniform mantissa bits), so about 16 / 13.5 = 1.18x.
  EXPECT_GT(static_cast<double>(kv.size() * 2) / kv_blob->size(), 1.15);
  // Incompressible planes are stored: the blob is the payload plus 52 bytes.
  EXPECT_EQ(noise_blob->size(), EncodedSize(CodecId::kLossless, layout, 16, 0));
  EXPECT_EQ(noise_blob->size(), noise.size() * 2 + kEncodedHeaderBytes + 12);
}

TEST(CodecLosslessTest, MalformedPlaneDirectoryIsDataLoss) {
  const Layout layout = MakeLayout(1, 1, 64, 16, Dtype::kFp16);
  std::vector<uint16_t> v(layout.ElementsPerBlock(), FloatToHalf(1.5f));
  for (size_t i = 0; i < v.size(); i += 3) v[i] = FloatToHalf(-0.25f);
  const std::string good = *Encode(CodecId::kLossless, layout, 1, AsBytes(Bytes(v)));
  ASSERT_EQ(good[40], 1);  // high plane: zstd
  ASSERT_EQ(good[41], 1);  // low plane: zstd
  auto decode = [&](const std::string& blob) {
    std::string out(v.size() * 2, '\0');
    return Decode(AsBytes(blob), {reinterpret_cast<uint8_t*>(out.data()), out.size()});
  };
  ASSERT_OK(decode(good));
  auto with = [&](size_t offset, uint8_t value) {
    std::string s = good;
    s[offset] = static_cast<char>(value);
    return s;
  };
  struct Bad {
    std::string blob;
    const char* message;
  };
  const Bad bads[] = {
      {with(40, 2), "plane modes"},               // unknown mode
      {with(42, 1), "reserved"},                  // reserved bits
      {with(44, good[44] + 1), "do not fill"},    // high-plane size
      {with(40, 0), "high plane holds"},          // a zstd frame read as stored
      {with(52, good[52] ^ 0x01), "zstd frame"},  // frame magic
  };
  for (const Bad& bad : bads) {
    absl::Status st = decode(bad.blob);
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << bad.message << ": " << st;
    EXPECT_THAT(std::string(st.message()), HasSubstr(bad.message));
  }
  // A header that claims far more tokens than so small a body can hold.
  std::string huge = good;
  const uint32_t tokens = 1u << 20;
  std::memcpy(huge.data() + 20, &tokens, 4);  // num_tokens
  std::memcpy(huge.data() + 24, &tokens, 4);  // raw_tokens
  auto info = ParseHeader(AsBytes(huge));
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(info.status().message()), HasSubstr("implies"));
}

}  // namespace
}  // namespace kvtier::kv
