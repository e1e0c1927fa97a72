// The block events kvtier reports to KV-aware routers, independent of any transport, and
// the sink interface the store and the service report them into. No ZMQ here: storage/
// and service/ include only this header (docs/design.md §4 Tiers and eviction says which
// tier change raises which event). Header-only, so storage/ needs no link dependency.
// The ZMQ publisher (events/zmq_publisher.h) is one sink.
#ifndef KVTIER_EVENTS_BLOCK_EVENT_H_
#define KVTIER_EVENTS_BLOCK_EVENT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kvtier::events {

// What happened. The names are vLLM's KVEventBatch event tags.
enum class EventKind : uint8_t {
  kStored = 0,      // "BlockStored": the blocks became resident in `medium`
  kRemoved = 1,     // "BlockRemoved": the blocks left `medium` (other tiers unaffected)
  kAllCleared = 2,  // "AllBlocksCleared": every block of the namespace left every tier
};
// Returns "BlockStored", "BlockRemoved" or "AllBlocksCleared".
inline const char* EventKindName(EventKind kind) {
  switch (kind) {
    case EventKind::kStored:
      return "BlockStored";
    case EventKind::kRemoved:
      return "BlockRemoved";
    case EventKind::kAllCleared:
      return "AllBlocksCleared";
  }
  return "?";
}

// Where the blocks are (or were) resident, as the routers spell it (docs/routers.md):
// llm-d's indexer lowercases the medium into a tier name and weighs it ("cpu" 0.8 by
// default; "disk" needs a weight line in its config, else it counts as 1.0); Dynamo maps
// CPU to host memory and DISK to its disk tier.
enum class Medium : uint8_t {
  kCpuPinned = 0,  // "CPU": the hot tier (pinned host memory)
  kDisk = 1,       // "DISK": the cold tier (RocksDB)
};
// Returns "CPU" or "DISK".
inline const char* MediumName(Medium medium) {
  return medium == Medium::kCpuPinned ? "CPU" : "DISK";
}

// One event about one or more blocks of one namespace. A value type; copyable.
struct BlockEvent {
  EventKind kind = EventKind::kStored;
  std::string ns;        // namespace name (events of different namespaces never share a batch)
  std::string model_id;  // the namespace's model id; empty: the topic uses `ns` instead
  // The keys the client gave (bytes, 1..32 each). kStored: one chain, keys[i] the parent
  // of keys[i+1] (routers read it as vLLM's block_hashes); kRemoved: any set of blocks
  // that left `medium`; kAllCleared: empty.
  std::vector<std::string> keys;
  // kStored: the parent of keys[0]; nullopt for a chain's first block. Unused otherwise.
  std::optional<std::string> parent_key;
  // kStored: the parent was not resident in the store when this event was raised (a
  // parallel stream stored the child first), so its BlockStored may still come. A
  // publisher may hold the event until the parent's BlockStored has passed, or a bounded
  // time (EventsConfig.parent_wait_ms): routers drop a child whose parent they have not
  // seen. False when the parent's BlockStored was already reported, or there is none.
  bool parent_pending = false;
  uint32_t block_size = 0;             // kStored: the namespace's tokens per block
  Medium medium = Medium::kCpuPinned;  // kStored / kRemoved
  // kStored, each only when the client sent it with the blocks (otherwise empty):
  std::vector<uint32_t> token_ids;  // the tokens of all `keys`, concatenated
  std::optional<std::string> lora_name;
  // One entry per key: that block's extra hash inputs (multimodal ids, LoRA name,
  // cache_salt), empty for a block without any. Empty vector: none for every block.
  std::vector<std::vector<std::string>> extra_keys;

  // The three shapes the store reports.
  static BlockEvent Stored(std::string ns, std::string model_id, std::vector<std::string> keys,
                           std::optional<std::string> parent_key, uint32_t block_size,
                           Medium medium) {
    BlockEvent e;
    e.ns = std::move(ns);
    e.model_id = std::move(model_id);
    e.keys = std::move(keys);
    e.parent_key = std::move(parent_key);
    e.block_size = block_size;
    e.medium = medium;
    return e;
  }
  static BlockEvent Removed(std::string ns, std::string model_id, std::vector<std::string> keys,
                            Medium medium) {
    BlockEvent e;
    e.kind = EventKind::kRemoved;
    e.ns = std::move(ns);
    e.model_id = std::move(model_id);
    e.keys = std::move(keys);
    e.medium = medium;
    return e;
  }
  static BlockEvent AllCleared(std::string ns, std::string model_id) {
    BlockEvent e;
    e.kind = EventKind::kAllCleared;
    e.ns = std::move(ns);
    e.model_id = std::move(model_id);
    return e;
  }
};

// Where the store and the service report events. Implementations are thread-safe and
// Publish never blocks on I/O or on a consumer (it may take a short internal lock): it
// is called on the Put/Get path. An event a sink cannot keep is dropped and counted by
// the sink, never reported back to the caller.
class EventSink {
 public:
  virtual ~EventSink() = default;
  // Reports `event`. Events of one namespace are published in the order of the calls
  // (callers that need a cross-thread order serialize their calls).
  virtual void Publish(BlockEvent event) = 0;
};

}  // namespace kvtier::events

#endif  // KVTIER_EVENTS_BLOCK_EVENT_H_
