// ZmqEventPublisher: an EventSink that publishes BlockEvents on a ZMQ PUB socket in vLLM's
// KVEventBatch format, so KV-aware routers (llm-d's kv-cache indexer, Dynamo's router)
// index what kvtier holds with no change on their side. Optional replay ROUTER socket.
//
// Wire (per batch): three frames
//   topic    "kv@<node_id>@<model>" (model: the namespace's model id, else its name)
//   seq      u64 big-endian; 0 for the first batch, +1 per batch across all topics
//   payload  msgpack KVEventBatch (events/encoding.h), map or array form
// One batch holds events of one namespace only; consecutive BlockStored events of one chain
// (a Put of N blocks) leave as one BlockStored with N block_hashes (events/coalesce.h),
// as vLLM sends them. Publish() appends to a bounded queue; a
// thread sends a batch batch_ms after its first event, or at max_batch_events events.
// Parents before children: a BlockStored raised while its parent was not resident
// (parent_pending) is held until the parent's BlockStored has been sent, or for
// parent_wait_ms (events/parent_order.h states the rule). Stored and removed events with
// no keys are never sent (routers crash on an empty block_hashes); AllBlocksCleared only
// with send_all_blocks_cleared.
//
// Loss, and how a consumer sees it (subscribe to "kv@<node_id>@" to see every batch):
// - Queue full: Publish drops the event (events_dropped) and the thread leaves one
//   sequence number unused (sequences_skipped), so consumers see a gap that no replay
//   can fill; they re-sync from a snapshot.
// - A subscriber at send_hwm queued batches: the batch is refused for every subscriber
//   (ZMQ_XPUB_NODROP; batches_dropped) but kept in the replay buffer, so consumers see a
//   gap and replay it. Memory stays bounded: send_hwm batches per subscriber.
//
// Replay (ROUTER, vLLM's protocol): a client (DEALER, or REQ for one reply) sends
// [empty, start_seq as 8 bytes big-endian] (the empty delimiter frame is optional). The
// server answers, in order, one message [empty, seq (u64 BE), payload] per buffered batch
// with seq >= start_seq, then the end marker [empty, -1 as i64 BE, empty payload] (the
// delimiter only when the request had one). When start_seq is older than the buffer, or
// was skipped for queue drops, the first answered seq is greater than start_seq (or only
// the end marker comes): the consumer must re-sync from a snapshot. A start_seq newer than
// every batch gets just the end marker.
// kvtier extension: a request with one more frame after the 8 bytes (any content, e.g.
// "topic") gets each answer with a last frame, the batch's topic, so a consumer of several
// topics can tell which namespace a replayed AllBlocksCleared applies to (the end marker's
// topic frame is empty). vLLM's consumers never send it and get vLLM's exact answers.
//
// Thread-safe: Publish, Flush and stats may be called from any thread.
#ifndef KVTIER_EVENTS_ZMQ_PUBLISHER_H_
#define KVTIER_EVENTS_ZMQ_PUBLISHER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "events/block_event.h"
#include "events/config.h"
#include "events/parent_order.h"

namespace kvtier::events {

// Returns true when `endpoint` is bound rather than connected: it contains "*" or "::",
// or starts with ipc:// or inproc:// (vLLM's rule).
bool EndpointBinds(std::string_view endpoint);

class ZmqEventPublisher final : public EventSink {
 public:
  // Opens the sockets and starts the publishing thread. Returns INVALID_ARGUMENT naming
  // the field when config.Validate() fails or an endpoint is refused by ZMQ (malformed,
  // address in use, ...).
  static absl::StatusOr<std::unique_ptr<ZmqEventPublisher>> Create(EventsConfig config);

  // Stops the thread after it has sent the queued and held events, then closes the
  // sockets, giving the PUB socket at most 200 ms to hand them to subscribers.
  ~ZmqEventPublisher() override;

  ZmqEventPublisher(const ZmqEventPublisher&) = delete;
  ZmqEventPublisher& operator=(const ZmqEventPublisher&) = delete;

  // Queues `event` for the next batch. Never blocks on I/O; drops and counts the event
  // when queue_capacity_events are already waiting.
  void Publish(BlockEvent event) override;

  // Sends every event queued before the call now (without waiting for batch_ms), and
  // every event held for its parent, and returns once they are sent or dropped. For tests
  // and orderly shutdown.
  void Flush();

  // Returns a snapshot of the counters.
  EventsStats stats() const;

  // The PUB endpoint: the address actually bound (ZMQ_LAST_ENDPOINT, e.g.
  // "tcp://127.0.0.1:41234" for "tcp://127.0.0.1:*"), or the configured one when connected.
  const std::string& endpoint() const { return endpoint_; }
  // The bound replay endpoint; empty when replay is off.
  const std::string& replay_endpoint() const { return replay_endpoint_; }

 private:
  struct Sockets;
  struct SentBatch {
    uint64_t seq;
    std::shared_ptr<const std::string> payload;  // shared with messages still queued
    std::string topic;
  };

  ZmqEventPublisher(EventsConfig config, std::unique_ptr<Sockets> sockets);

  void Run();
  // Wakes the thread if it waits for sockets.
  void Wake();
  // Passes `events` through order_ (releasing all held events when `release_all`, else
  // those whose wait ended), encodes what leaves into per-namespace batches and sends them;
  // then, when events were dropped from the queue, skips one sequence number.
  void SendBatches(std::deque<BlockEvent> events, bool queue_dropped, bool release_all);
  // Sends one batch and keeps it for replay.
  void SendBatch(std::vector<BlockEvent> events);
  // Waits up to timeout_ms for replay requests and monitor events, and serves them.
  void PollSockets(int timeout_ms);
  void ServeReplayRequests();
  void ReadMonitorEvents();
  bool BatchDueLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const EventsConfig config_;
  const std::unique_ptr<Sockets> sockets_;  // used by the thread only (after Create)
  std::string endpoint_;
  std::string replay_endpoint_;
  // Thread-only state.
  uint64_t next_seq_ = 0;
  ParentOrder order_;
  std::deque<SentBatch> replay_buffer_;

  mutable common::Mutex mu_;
  std::deque<BlockEvent> queue_ ABSL_GUARDED_BY(mu_);
  absl::Time first_queued_at_ ABSL_GUARDED_BY(mu_);  // arrival of queue_.front()
  bool queue_dropped_ ABSL_GUARDED_BY(mu_) = false;  // Publish dropped since the last drain
  uint64_t enqueued_ ABSL_GUARDED_BY(mu_) = 0;       // events ever accepted by Publish
  uint64_t processed_ ABSL_GUARDED_BY(mu_) = 0;      // ... and since sent or dropped
  int flush_waiters_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  EventsStats stats_ ABSL_GUARDED_BY(mu_);

  std::thread thread_;  // last: starts after every field above is initialized
};

}  // namespace kvtier::events

#endif  // KVTIER_EVENTS_ZMQ_PUBLISHER_H_
