// vLLM's KVEventBatch wire format for BlockEvents: the topic of a namespace's batches and
// the msgpack payload of one batch (field names, order and types as vLLM's
// vllm/distributed/kv_events.py declares them). No ZMQ; pure functions.
#ifndef KVTIER_EVENTS_ENCODING_H_
#define KVTIER_EVENTS_ENCODING_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "events/block_event.h"
#include "events/config.h"

namespace kvtier::events {

// Returns "kv@<node_id>@<model>", model being event.model_id or, when empty, event.ns.
// Thread-safe.
std::string TopicFor(std::string_view node_id, const BlockEvent& event);

// Returns the msgpack encoding of the batch (ts, events, data_parallel_rank) in `format`.
// Every event field of the vLLM schema is written, nil where kvtier has no value:
//   BlockStored:  block_hashes (list of bin), parent_block_hash (bin|nil), token_ids
//                 (list of int, empty when not sent), block_size (int), lora_id (nil),
//                 medium (str), lora_name (str|nil), extra_keys (nil, or one entry per
//                 block: nil or a list of str), group_idx (0), kv_cache_spec_kind
//                 ("full_attention"), kv_cache_spec_sliding_window (nil)
//   BlockRemoved: block_hashes, medium, group_idx (0)
//   AllBlocksCleared: no field
// `ts` is seconds since the Unix epoch. Thread-safe.
std::string EncodeBatch(double ts, std::span<const BlockEvent> events,
                        std::optional<int32_t> data_parallel_rank, BatchFormat format);

}  // namespace kvtier::events

#endif  // KVTIER_EVENTS_ENCODING_H_
