// Small K/V layouts shared by tests (header only).
#ifndef KVTIER_TESTS_TESTING_LAYOUTS_H_
#define KVTIER_TESTS_TESTING_LAYOUTS_H_

#include "kv/layout.h"

namespace kvtier::testing {

// "L2 H2 D64 T32 fp16 sinks4": 32 KiB raw blocks; a KIVI group of 32 tokens fits one block.
constexpr kv::Layout SmallLayout() {
  kv::Layout l;
  l.num_layers = 2;
  l.num_kv_heads = 2;
  l.head_dim = 64;
  l.tokens_per_block = 32;
  l.dtype = kv::Dtype::kFp16;
  l.sink_tokens = 4;
  return l;
}

// "L1 H1 D8 T4 fp16 sinks1": 128-byte raw blocks, for index-scale tests and benchmarks.
constexpr kv::Layout TinyLayout() {
  kv::Layout l;
  l.num_layers = 1;
  l.num_kv_heads = 1;
  l.head_dim = 8;
  l.tokens_per_block = 4;
  l.sink_tokens = 1;
  return l;
}

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_TESTING_LAYOUTS_H_
