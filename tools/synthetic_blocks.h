// Deterministic synthetic token sequences and raw KV blocks for the CLI tour, the load
// generator and tests. Not a model of real KV statistics (see tools/synthetic_kv.h for
// that); just reproducible, incompressible-looking fp16/bf16 data. Pure functions;
// thread-safe.
#ifndef KVTIER_TOOLS_SYNTHETIC_BLOCKS_H_
#define KVTIER_TOOLS_SYNTHETIC_BLOCKS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kv/layout.h"

namespace kvtier::tools {

// Returns num_blocks * tokens_per_block token ids. Blocks [0, shared_prefix_blocks) are
// the same for every seed (a common "system prompt"); later blocks depend on `seed`.
std::vector<uint32_t> SyntheticTokens(uint64_t seed, uint32_t num_blocks,
                                      uint32_t shared_prefix_blocks,
                                      uint32_t tokens_per_block);

// Returns one raw block (layout.BytesPerBlock() bytes, source dtype, values drawn from
// N(0, 1)) determined by (seed, block_index).
std::string SyntheticRawBlock(const kv::Layout& layout, uint64_t seed, uint32_t block_index);

}  // namespace kvtier::tools

#endif  // KVTIER_TOOLS_SYNTHETIC_BLOCKS_H_
