// Feeds mutated, truncated, extended and random blobs to ParseHeader and Decode. Nothing
// may crash or read out of bounds (this test also runs under ASAN+UBSAN); anything
// ParseHeader accepts must decode into a buffer of info.raw_bytes without error or be
// rejected with DATA_LOSS (bad params).
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kv/codec.h"
#include "kv/half.h"
#include "tests/testing/status_matchers.h"

namespace kvtier::kv {
namespace {

std::vector<std::string> Seeds() {
  std::vector<std::string> blobs;
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  struct Shape {
    uint32_t layers, heads, head_dim, tokens;
    Dtype dtype;
  };
  const Shape shapes[] = {{1, 1, 8, 5, Dtype::kFp16}, {2, 1, 40, 3, Dtype::kBf16},
                          {1, 2, 32, 34, Dtype::kFp16}};
  for (const Shape& s : shapes) {
    Layout layout;
    layout.num_layers = s.layers;
    layout.num_kv_heads = s.heads;
    layout.head_dim = s.head_dim;
    layout.tokens_per_block = s.tokens;
    layout.dtype = s.dtype;
    layout.sink_tokens = std::min(2u, s.tokens);
    std::vector<uint16_t> raw(layout.ElementsPerBlock());
    for (uint16_t& v : raw) v = FloatToDtype(s.dtype, normal(rng));
    const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(raw.data()),
                                         raw.size() * 2);
    for (CodecId codec : AllCodecs()) {
      if (codec == CodecId::kFp16 && s.dtype != Dtype::kFp16) continue;
      if (codec == CodecId::kBf16 && s.dtype != Dtype::kBf16) continue;
      for (uint32_t block : {0u, 1u}) {
        auto enc = Encode(codec, layout, block, bytes);
        EXPECT_OK(enc);
        if (enc.ok()) blobs.push_back(*enc);
      }
    }
  }
  // Lossless blobs whose planes are both zstd frames (constant data), and one whose
  // high plane is a frame of several blocks, so mutations reach the zstd decoder.
  Layout layout;
  layout.num_layers = 1;
  layout.num_kv_heads = 1;
  layout.head_dim = 64;
  layout.tokens_per_block = 16;
  layout.sink_tokens = 0;
  std::vector<uint16_t> flat(layout.ElementsPerBlock(), FloatToHalf(0.75f));
  auto flat_enc = Encode(CodecId::kLossless, layout, 0,
                         {reinterpret_cast<const uint8_t*>(flat.data()), flat.size() * 2});
  EXPECT_OK(flat_enc);
  if (flat_enc.ok()) blobs.push_back(*flat_enc);
  layout.tokens_per_block = 1200;  // 153600 elements: more than one 128 KiB zstd block
  std::vector<uint16_t> big(layout.ElementsPerBlock());
  for (uint16_t& v : big) v = FloatToHalf(normal(rng));
  auto big_enc = Encode(CodecId::kLossless, layout, 1,
                        {reinterpret_cast<const uint8_t*>(big.data()), big.size() * 2});
  EXPECT_OK(big_enc);
  if (big_enc.ok()) blobs.push_back(*big_enc);
  return blobs;
}

// Byte `i` of the lossless plane directory (after the 40-byte header).
uint8_t LosslessDirectoryByte(const std::string& blob, size_t i) {
  return static_cast<uint8_t>(blob[kEncodedHeaderBytes + i]);
}

// Returns true if the blob was accepted by ParseHeader.
bool Exercise(const std::string& blob, std::string& out) {
  const auto bytes = AsBytes(blob);
  auto info = ParseHeader(bytes);
  if (!info.ok()) {
    EXPECT_FALSE(Decode(bytes, {}).ok());
    return false;
  }
  EXPECT_EQ(info->encoded_bytes, blob.size());
  out.assign(info->raw_bytes, '\0');
  absl::Status st = Decode(bytes, {reinterpret_cast<uint8_t*>(out.data()), out.size()});
  if (!st.ok()) {
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  }
  return true;
}

TEST(CodecFuzzTest, MutatedTruncatedAndRandomInputsNeverCrash) {
  const std::vector<std::string> seeds = Seeds();
  ASSERT_GE(seeds.size(), 30u);
  int zstd_planes = 0;
  for (const std::string& seed : seeds) {
    if (ParseHeader(AsBytes(seed))->codec != CodecId::kLossless) continue;
    zstd_planes += LosslessDirectoryByte(seed, 0) + LosslessDirectoryByte(seed, 1);
  }
  ASSERT_GE(zstd_planes, 3) << "the seeds must reach the zstd decoder";
  std::mt19937 rng(7);
  std::string out;
  int accepted = 0, rejected = 0;
  for (const std::string& seed : seeds) {
    ASSERT_TRUE(Exercise(seed, out));
    // Every truncation of the header, and a spread of body truncations.
    for (size_t len = 0; len < seed.size(); len += (len < 64 ? 1 : 1 + seed.size() / 37)) {
      EXPECT_FALSE(Exercise(seed.substr(0, len), out)) << len;
    }
    EXPECT_FALSE(Exercise(seed + std::string(1 + rng() % 64, '\0'), out));
    // Random bit flips and byte stores anywhere; header bytes get extra attention.
    for (int i = 0; i < 300; ++i) {
      std::string m = seed;
      const int edits = 1 + static_cast<int>(rng() % 4);
      for (int e = 0; e < edits; ++e) {
        const size_t pos = (rng() % 2) ? rng() % kEncodedHeaderBytes : rng() % m.size();
        if (rng() % 2) {
          m[pos] = static_cast<char>(m[pos] ^ (1u << (rng() % 8)));
        } else {
          m[pos] = static_cast<char>(rng());
        }
      }
      (Exercise(m, out) ? accepted : rejected)++;
    }
    // Header fields replaced by boundary values.
    for (size_t field : {8u, 12u, 16u, 20u, 24u}) {
      for (uint32_t v : {0u, 1u, 2u, 0xffffffffu, 0x80000000u, 1u << 20}) {
        std::string m = seed;
        std::memcpy(m.data() + field, &v, 4);
        (Exercise(m, out) ? accepted : rejected)++;
      }
    }
  }
  // Random garbage, with and without a valid magic + version in front.
  for (int i = 0; i < 3000; ++i) {
    std::string m(rng() % 200, '\0');
    for (char& c : m) c = static_cast<char>(rng());
    if (i % 2 && m.size() >= 8) {
      std::memcpy(m.data(), "KVTB\x01\x00", 6);
      m[6] = static_cast<char>(1 + rng() % AllCodecs().size());
      m[7] = static_cast<char>(1 + rng() % 2);
    }
    EXPECT_FALSE(Exercise(m, out));
  }
  // Sanity: the mutations hit both paths (payload flips stay decodable).
  EXPECT_GT(accepted, 1000);
  EXPECT_GT(rejected, 1000);
}

}  // namespace
}  // namespace kvtier::kv
