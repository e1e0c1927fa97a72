// Client-side coalescing of concurrent small PutBlocks / GetBlocksInto calls
// (ClientOptions::coalesce_max_delay_us, coalesce_max_bytes): calls from several threads
// to the same namespace with the same payload format are sent as one Put or Get stream,
// so each pays a share of the server's fixed per-call cost instead of all of it.
//
// Batching rule, per (call kind, namespace, format) group: a call joins the group's open
// batch (or opens one). A batch leaves once no batch of its group is on the wire and it
// holds as many calls as the group's previous batch (so a lone caller never waits, and
// callers that come back together leave together), or when it holds max_bytes of
// payload, or max_delay_us after its first call arrived, whichever is first.
// A call whose own payload is more than half of max_bytes is never coalesced.
//
// What is shared and what is not: the callers of one batch share one stream, whose
// deadline is the earliest of theirs, and each returns when the whole batch has (a
// coalesced call is one stream, never split over max_streams_per_call). Results stay per caller:
// each gets its own blocks' PutResult (blocks_stored, bytes_stored from the server's
// block_bytes_stored) or its own keys' GetBlockInfos. When the shared stream fails, no caller sees
// that error: each caller's part is re-sent alone (its own stream, its own deadline) and the caller
// gets what that call returns, so one caller's bad block or too-small buffer fails only its call.
// The cost of a failure is one extra call per caller of the batch. The server validates a Put's
// blocks as a whole before storing any, so after a refusal the re-sent parts are stored once; after
// a transport failure (the stream broke after the store) a re-sent block may be stored again, the
// same bytes under the same key. A Get's buffers may have been partly written before it fails.
//
// Thread-safe. Private to the client library (client.cc holds one per Client).
#ifndef KVTIER_CLIENT_COALESCER_H_
#define KVTIER_CLIENT_COALESCER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/client.h"
#include "common/mutex.h"
#include "kvtier/v1/kvtier.pb.h"

namespace kvtier::client::internal {

class Coalescer {
 public:
  using Deadline = std::chrono::system_clock::time_point;
  // Sends `blocks` as one Put stream; adds to *result (blocks_stored, bytes_stored,
  // block_bytes_stored). Client::Impl::PutRun.
  using PutFn = std::function<absl::Status(std::string_view ns, std::span<const PutBlock> blocks,
                                           kvtier::v1::PayloadFormat format, Deadline deadline,
                                           PutResult* result)>;
  // Fetches `keys` into `buffers` (one per key) as one Get stream; sets *infos (one per
  // key). OUT_OF_RANGE when a found block does not fit its buffer.
  using GetFn = std::function<absl::Status(std::string_view ns, std::span<const std::string> keys,
                                           kvtier::v1::PayloadFormat format, Deadline deadline,
                                           std::span<const std::span<uint8_t>> buffers,
                                           std::vector<kvtier::v1::GetBlockInfo>* infos)>;

  // max_delay_us > 0 and max_bytes > 0, else Accepts is always false.
  Coalescer(int64_t max_delay_us, uint64_t max_bytes, PutFn put, GetFn get);
  // Every call must have returned.
  ~Coalescer() = default;
  Coalescer(const Coalescer&) = delete;
  Coalescer& operator=(const Coalescer&) = delete;

  // True when a call carrying `payload_bytes` (Put: payload sizes; Get: buffer sizes) is
  // coalesced: enabled and payload_bytes <= max_bytes / 2.
  bool Accepts(uint64_t payload_bytes) const;

  // PutBlocks' result for `blocks` alone, or its error (see the class comment).
  absl::StatusOr<PutResult> Put(std::string_view ns, std::span<const PutBlock> blocks,
                                kvtier::v1::PayloadFormat format, Deadline deadline);

  // GetBlocksInto's result for `keys` alone, or its error. buffers.size() == keys.size().
  absl::StatusOr<std::vector<kvtier::v1::GetBlockInfo>> GetInto(
      std::string_view ns, std::span<const std::string> keys,
      std::span<const std::span<uint8_t>> buffers, kvtier::v1::PayloadFormat format,
      Deadline deadline);

  // Monotonic counters: calls through the coalescer, streams sent for batches (a batch
  // of one call counts too), batches that failed and were re-sent call by call.
  struct Counters {
    uint64_t calls = 0;
    uint64_t batches = 0;
    uint64_t splits = 0;
  };
  Counters counters() const;

 private:
  struct Call;
  struct Batch;
  struct Group {
    Batch* open = nullptr;  // the batch calls join now (owned by its leader's stack)
    int in_flight = 0;      // batches of this group on the wire
    size_t last_calls = 0;  // calls in the group's last batch
  };
  using GroupKey = std::tuple<bool, std::string, int>;  // is_put, namespace, format

  // Queues `call`, sends its batch if it leads one, and returns once the call has its
  // result (call->status and its result fields).
  void Submit(Call* call);
  // Sends `batch` as one stream and hands each call its share (or marks it for a re-send).
  void SendBatch(const Batch& batch);
  // Sends one call's part alone.
  void SendAlone(Call* call);

  const int64_t max_delay_us_;
  const uint64_t max_bytes_;
  const PutFn put_;
  const GetFn get_;

  common::Mutex mu_;
  common::CondVar changed_;  // a batch was sealed, sent or finished
  std::map<GroupKey, Group> groups_ ABSL_GUARDED_BY(mu_);

  std::atomic<uint64_t> calls_{0};
  std::atomic<uint64_t> batches_{0};
  std::atomic<uint64_t> splits_{0};
};

}  // namespace kvtier::client::internal

#endif  // KVTIER_CLIENT_COALESCER_H_
