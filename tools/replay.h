// Trace replay against the real TieredStore (storage/tiered_store.h), plus the offline
// references computed with tools/cache_sim.h, for `kvtier replay`.
//
// Semantics per request (same as cache_sim.h): Lookup all keys; a block *hits* if it is
// resident in the HOT tier (the cache being sized); prefix hits are the leading run of hot
// blocks, and the leading run resident in either tier is counted by serving tier. Then
// every block is referenced in request order: hot or cold blocks with Get (a cold Get
// promotes into hot), absent blocks with Put (real encoded payload bytes). The cold tier
// holds cold_capacities x the hot tier's blocks (its bytes: that many cold records) and
// deletes least recently used leaves, as the store always does.
//
// Keys: 16 bytes, the hash id little-endian in the first 8 bytes, zero padded; parent =
// previous id of the request; block_index = position in the request.
//
// Thread safety: ReplayTrace opens its own store (thread-safe unless two calls share a
// data_dir); the option and result structs are thread-compatible values.
#ifndef KVTIER_TOOLS_REPLAY_H_
#define KVTIER_TOOLS_REPLAY_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "kv/codec.h"
#include "kv/layout.h"
#include "storage/tiered_store.h"
#include "tools/cache_sim.h"
#include "tools/trace.h"

namespace kvtier::tools {

// Cold record bytes beyond the payload (storage/cold_tier.cc kRecordHeaderBytes); the
// replay sizes the cold tier in records with it.
inline constexpr uint64_t kColdRecordOverheadBytes = 20;

// Returns the 16-byte store key of a trace hash id.
std::string TraceKey(uint64_t hash_id);

// A tiny layout so replay payloads are small: fp16, 1 layer, 1 KV head, head_dim 16,
// 4 tokens per block, 0 sink tokens.
kv::Layout ReplayLayout();

struct ReplayOptions {
  uint64_t capacity_blocks = 0;  // hot tier capacity in blocks (> 0)
  // Hot capacity in bytes instead (0 = capacity_blocks hot slots; a slot is the encoded
  // block size rounded up to the arena alignment). When set, the capacity in blocks is
  // capacity_bytes / slot size.
  uint64_t capacity_bytes = 0;
  storage::EvictionPolicyKind policy = storage::EvictionPolicyKind::kAdaptive;
  kv::Layout layout = ReplayLayout();
  kv::CodecId codec = kv::CodecId::kFp16;
  // Cold tier size in blocks, as a multiple of the hot capacity (at least one block).
  double cold_capacities = 8.0;
  // Namespace sink_blocks: blocks with index < this are not demoted from hot while a
  // descendant is hot, nor deleted from cold while any descendant is resident.
  uint32_t sink_blocks = 1;
  std::string data_dir;  // RocksDB directory; empty = a fresh temp dir, removed after
  size_t measure_begin = 0;  // counted requests [measure_begin, measure_end); 0 = end
  size_t measure_end = 0;
  // Called after each request with (requests done, total). May be empty.
  std::function<void(size_t, size_t)> progress;
};

struct ReplayResult {
  std::string policy;
  uint64_t capacity_blocks = 0;
  uint64_t block_bytes = 0;  // encoded bytes of one block
  uint64_t slot_bytes = 0;   // hot arena bytes one block occupies
  uint64_t cold_capacity_bytes = 0;  // cold tier size given to the store
  SimResult store;           // counts from the real store
  // The same counts split at the middle request: [0, n/2) and [n/2, n) (warm cache),
  // ignoring measure_begin/measure_end. For hold-out evaluation.
  SimResult halves[2];
  uint64_t max_hot_blocks = 0;  // most hot blocks seen (sanity check of the capacity)
  uint64_t hot_evictions = 0;   // demotions + hot capacity evictions
};

// Replays `trace` through a fresh TieredStore. INVALID_ARGUMENT for a zero capacity or an
// invalid layout; any store error is returned as is, prefixed with the request number.
absl::StatusOr<ReplayResult> ReplayTrace(const Trace& trace, const ReplayOptions& options);

}  // namespace kvtier::tools

#endif  // KVTIER_TOOLS_REPLAY_H_
