// Generated block sequences for the client integration tests (header only).
#ifndef KVTIER_TESTS_INTEGRATION_SEQUENCES_H_
#define KVTIER_TESTS_INTEGRATION_SEQUENCES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "client/client.h"
#include "client/prefix_keys.h"
#include "kv/codec.h"
#include "kv/layout.h"
#include "tools/synthetic_blocks.h"

namespace kvtier::client {

// A sequence of `n` blocks with canonical keys in namespace `ns`: raw fp16 payloads, their
// encoded fp16 blobs, and PutBlocks whose payloads view `encoded` (a Sequence may be
// moved, not copied: the views follow the strings' heap buffers).
struct Sequence {
  std::vector<std::string> keys;
  std::vector<std::string> raw;
  std::vector<std::string> encoded;
  std::vector<PutBlock> blocks;
};

inline Sequence MakeSequence(const std::string& ns, const kv::Layout& layout, uint32_t n,
                             uint64_t seed) {
  Sequence s;
  PrefixKeyParams p;
  p.namespace_name = ns;
  p.tokens_per_block = layout.tokens_per_block;
  s.keys = *PrefixKeysForTokens(p, tools::SyntheticTokens(seed, n, 0, layout.tokens_per_block));
  for (uint32_t i = 0; i < n; ++i) {
    s.raw.push_back(tools::SyntheticRawBlock(layout, seed, i));
    s.encoded.push_back(*kv::Encode(kv::CodecId::kFp16, layout, i, kv::AsBytes(s.raw.back())));
  }
  for (uint32_t i = 0; i < n; ++i) {
    PutBlock b;
    b.key = s.keys[i];
    b.parent_key = i == 0 ? "" : s.keys[i - 1];
    b.block_index = i;
    b.payload = kv::AsBytes(s.encoded[i]);
    s.blocks.push_back(b);
  }
  return s;
}

}  // namespace kvtier::client

#endif  // KVTIER_TESTS_INTEGRATION_SEQUENCES_H_
