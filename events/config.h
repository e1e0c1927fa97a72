// Configuration and counters of the ZMQ event publisher (events/zmq_publisher.h). Mirrors
// the ServerConfig block `events { endpoint, replay_endpoint, format, batch_ms, ... }`.
// No ZMQ here, so service/config.h can embed EventsConfig.
#ifndef KVTIER_EVENTS_CONFIG_H_
#define KVTIER_EVENTS_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvtier::events {

// msgpack shape of a batch and its events.
enum class BatchFormat : uint8_t {
  // {"ts", "events", "data_parallel_rank"}, each event {"type": tag, field: value, ...}
  // (vLLM main since PR #42892; llm-d's indexer decodes it from v0.9.0 on).
  kMap = 0,
  // [ts, [events...], data_parallel_rank], each event [tag, field0, field1, ...] in
  // declaration order: what vLLM releases send and every consumer decodes (llm-d's
  // indexer v0.8.1 decodes only this). The default.
  kArray = 1,
};
const char* BatchFormatName(BatchFormat format);  // "map", "array"
// Parses "map" or "array"; INVALID_ARGUMENT naming events.format otherwise.
absl::StatusOr<BatchFormat> ParseBatchFormat(std::string_view name);

struct EventsConfig {
  // ZMQ PUB endpoint. Bound when it contains "*" or "::" or starts with ipc:// or
  // inproc:// (e.g. tcp://*:5557, tcp://127.0.0.1:* for an ephemeral port), connected
  // otherwise (to a subscriber that binds, as llm-d's does). Empty: events off (the
  // service creates no publisher). Default: empty.
  std::string endpoint;
  // ZMQ ROUTER endpoint for replay requests, always bound. Empty: no replay. Default: empty.
  std::string replay_endpoint;
  BatchFormat format = BatchFormat::kArray;
  // A batch leaves at most this long after its first event was published. 1..10000.
  // Default: 5.
  uint32_t batch_ms = 5;
  // ... or as soon as it holds this many events. 1..1000000. Default: 1024.
  uint32_t max_batch_events = 1024;
  // Events waiting for the publisher thread; Publish drops (and counts) beyond it.
  // 1..10000000. Default: 100000.
  uint32_t queue_capacity_events = 100000;
  // Recent batches kept for replay. 1..10000000. Default: 10000 (as vLLM).
  uint32_t replay_buffer_batches = 10000;
  // Batches the PUB socket queues per subscriber; a batch that would exceed it for any
  // subscriber is dropped for all (ZMQ_XPUB_NODROP) and counted. 1..10000000.
  // Default: 10000.
  uint32_t send_hwm = 10000;
  // A BlockStored whose parent has not been published yet (BlockEvent::parent_pending: a
  // parallel stream stored the child first) waits until the parent's BlockStored has been
  // published, or this long, whichever comes first; then it leaves (the parent may be held
  // by another node, or never come). Routers drop a child whose parent they have not
  // seen. 0: no waiting. 0..60000. Default: 1000.
  uint32_t parent_wait_ms = 1000;
  // Whether AllBlocksCleared events go out. llm-d's indexer ignores them (v0.8.1) or
  // clears the whole pod, every model, on one (v0.9.0), while kvtier raises one per dropped
  // namespace after BlockRemoved events listing its blocks; so off unless a consumer
  // applies it per topic (kvtier's own consumers do). Default: false.
  bool send_all_blocks_cleared = false;
  // The pod id in the topic kv@<node_id>@<model> (the key of a router's scores);
  // non-empty, no '@'. Default: "kvtier".
  std::string node_id = "kvtier";
  // data_parallel_rank of every batch; nullopt: nil. Default: nullopt.
  std::optional<int32_t> data_parallel_rank;

  bool enabled() const { return !endpoint.empty(); }
  // Returns INVALID_ARGUMENT naming the bad field ("events.batch_ms ..."); an empty
  // endpoint is invalid here (callers create no publisher when !enabled()).
  absl::Status Validate() const;
};

// Counters of one publisher since it was created. Plain values (a snapshot).
struct EventsStats {
  uint64_t events_published = 0;       // events in batches the PUB socket accepted (also
                                       // with no subscriber: PUB then sends them nowhere)
  uint64_t events_dropped = 0;         // Publish calls dropped (queue full) + events in
                                       // batches the PUB socket refused
  uint64_t batches_published = 0;      // batches the PUB socket accepted
  uint64_t batches_dropped = 0;        // batches refused because a subscriber was at its
                                       // send_hwm (they are still in the replay buffer)
  uint64_t sequences_skipped = 0;      // sequence numbers left unused to mark queue drops
  uint64_t held_for_parent = 0;        // BlockStored events waiting for their parent now
  uint64_t parent_waits_expired = 0;   // ... that left at parent_wait_ms without it
  uint64_t next_seq = 0;               // sequence number of the next batch
  uint64_t queued_events = 0;          // events waiting for the publisher thread
  uint64_t replay_buffer_batches = 0;  // batches held for replay now
  uint64_t replay_requests = 0;        // replay requests answered
  int64_t subscribers = 0;             // connections open on the PUB socket (socket monitor)
};

}  // namespace kvtier::events

#endif  // KVTIER_EVENTS_CONFIG_H_
