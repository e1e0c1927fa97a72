#include "tools/synthetic_blocks.h"

#include <cstring>
#include <random>

#include "kv/half.h"

namespace kvtier::tools {
namespace {

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

std::vector<uint32_t> SyntheticTokens(uint64_t seed, uint32_t num_blocks,
                                      uint32_t shared_prefix_blocks,
                                      uint32_t tokens_per_block) {
  std::vector<uint32_t> tokens;
  tokens.reserve(uint64_t{num_blocks} * tokens_per_block);
  for (uint32_t b = 0; b < num_blocks; ++b) {
    const uint64_t block_seed = b < shared_prefix_blocks ? 0 : Mix(seed + 1);
    for (uint32_t t = 0; t < tokens_per_block; ++t) {
      // A 128k vocabulary, like Llama 3.
      tokens.push_back(static_cast<uint32_t>(
          Mix(block_seed ^ (uint64_t{b} << 32 | t)) % 128256));
    }
  }
  return tokens;
}

std::string SyntheticRawBlock(const kv::Layout& layout, uint64_t seed, uint32_t block_index) {
  std::string out(layout.BytesPerBlock(), '\0');
  std::mt19937_64 rng(Mix(seed) ^ Mix(block_index + 0x1234));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const size_t n = out.size() / 2;
  for (size_t i = 0; i < n; ++i) {
    const uint16_t v = kv::FloatToDtype(layout.dtype, normal(rng));
    std::memcpy(out.data() + 2 * i, &v, 2);
  }
  return out;
}

}  // namespace kvtier::tools
