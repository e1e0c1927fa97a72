#include "client/coalescer.h"

#include <algorithm>
#include <utility>

namespace kvtier::client::internal {

namespace v1 = ::kvtier::v1;

// One caller's part of a batch, on the caller's stack.
struct Coalescer::Call {
  bool is_put = false;
  std::string_view ns;
  v1::PayloadFormat format = v1::PAYLOAD_FORMAT_ENCODED;
  Deadline deadline;
  uint64_t bytes = 0;
  std::span<const PutBlock> blocks;             // Put
  std::span<const std::string> keys;            // Get
  std::span<const std::span<uint8_t>> buffers;  // Get
  // Results, written by the batch's leader before `done` (or by the caller itself).
  absl::Status status;
  PutResult put_result;
  std::vector<v1::GetBlockInfo> infos;
  bool done = false;
  bool send_alone = false;  // the batch failed: the caller re-sends its part itself
};

struct Coalescer::Batch {
  std::vector<Call*> calls;
  uint64_t bytes = 0;
  bool sealed = false;  // no longer open for joining
};

Coalescer::Coalescer(int64_t max_delay_us, uint64_t max_bytes, PutFn put, GetFn get)
    : max_delay_us_(max_delay_us),
      max_bytes_(max_bytes),
      put_(std::move(put)),
      get_(std::move(get)) {}

bool Coalescer::Accepts(uint64_t payload_bytes) const {
  return max_delay_us_ > 0 && max_bytes_ > 0 && payload_bytes <= max_bytes_ / 2;
}

Coalescer::Counters Coalescer::counters() const {
  return Counters{.calls = calls_.load(), .batches = batches_.load(), .splits = splits_.load()};
}

absl::StatusOr<PutResult> Coalescer::Put(std::string_view ns, std::span<const PutBlock> blocks,
                                         v1::PayloadFormat format, Deadline deadline) {
  Call call;
  call.is_put = true;
  call.ns = ns;
  call.format = format;
  call.deadline = deadline;
  call.blocks = blocks;
  for (const PutBlock& b : blocks) call.bytes += b.payload.size();
  Submit(&call);
  if (!call.status.ok()) return call.status;
  return std::move(call.put_result);
}

absl::StatusOr<std::vector<v1::GetBlockInfo>> Coalescer::GetInto(
    std::string_view ns, std::span<const std::string> keys,
    std::span<const std::span<uint8_t>> buffers, v1::PayloadFormat format, Deadline deadline) {
  Call call;
  call.ns = ns;
  call.format = format;
  call.deadline = deadline;
  call.keys = keys;
  call.buffers = buffers;
  for (const auto& b : buffers) call.bytes += b.size();
  Submit(&call);
  if (!call.status.ok()) return call.status;
  return std::move(call.infos);
}

void Coalescer::Submit(Call* call) {
  calls_.fetch_add(1, std::memory_order_relaxed);
  Batch mine;  // used when this call leads a batch
  Group* group = nullptr;
  bool leader = false;
  {
    common::MutexLock lock(&mu_);
    group = &groups_[GroupKey(call->is_put, std::string(call->ns), call->format)];
    if (group->open != nullptr && group->open->bytes + call->bytes > max_bytes_) {
      group->open->sealed = true;  // full: it leaves now, this call starts the next one
      group->open = nullptr;
      changed_.SignalAll();
    }
    if (group->open == nullptr) {
      group->open = &mine;
      leader = true;
    }
    Batch* batch = group->open;
    batch->calls.push_back(call);
    batch->bytes += call->bytes;
    if (batch->bytes >= max_bytes_) {
      batch->sealed = true;
      group->open = nullptr;
    }
    if (!leader) changed_.SignalAll();  // the batch's leader may wait for this call
    if (!leader) {
      while (!call->done) changed_.Wait(&mu_);
    } else {
      // Leave when nothing of this group is on the wire and the batch holds as many calls
      // as the group's last one (the callers seen together: under steady load they come
      // back together), when it fills up, or once max_delay_us has passed.
      const auto until =
          std::chrono::steady_clock::now() + std::chrono::microseconds(max_delay_us_);
      while (!mine.sealed && (group->in_flight > 0 || mine.calls.size() < group->last_calls)) {
        const auto now = std::chrono::steady_clock::now();
        if (now >= until) break;
        changed_.WaitWithTimeout(&mu_, absl::FromChrono(until - now));
      }
      mine.sealed = true;
      if (group->open == &mine) group->open = nullptr;
      group->last_calls = mine.calls.size();
      ++group->in_flight;
    }
  }
  if (leader) {
    SendBatch(mine);
    common::MutexLock lock(&mu_);
    --group->in_flight;
    for (Call* c : mine.calls) c->done = true;
    changed_.SignalAll();
  }
  if (call->send_alone) SendAlone(call);
}

void Coalescer::SendAlone(Call* call) {
  call->send_alone = false;
  if (call->is_put) {
    call->put_result = PutResult{};
    call->status = put_(call->ns, call->blocks, call->format, call->deadline, &call->put_result);
  } else {
    call->infos.clear();
    call->status =
        get_(call->ns, call->keys, call->format, call->deadline, call->buffers, &call->infos);
  }
}

void Coalescer::SendBatch(const Batch& batch) {
  batches_.fetch_add(1, std::memory_order_relaxed);
  const std::vector<Call*>& calls = batch.calls;
  if (calls.size() == 1) return SendAlone(calls[0]);
  Deadline deadline = calls[0]->deadline;
  for (const Call* c : calls) deadline = std::min(deadline, c->deadline);
  const Call& first = *calls[0];
  absl::Status status;
  if (first.is_put) {
    std::vector<PutBlock> blocks;
    for (const Call* c : calls) blocks.insert(blocks.end(), c->blocks.begin(), c->blocks.end());
    PutResult total;
    status = put_(first.ns, blocks, first.format, deadline, &total);
    if (status.ok()) {
      // The server stores a Put's blocks all or none: each caller stored all of its own.
      const bool per_block = total.block_bytes_stored.size() == blocks.size();
      size_t at = 0;
      uint64_t bytes_left = total.bytes_stored;
      for (size_t ci = 0; ci < calls.size(); ++ci) {
        Call* c = calls[ci];
        PutResult& r = c->put_result;
        r.blocks_stored = static_cast<uint32_t>(c->blocks.size());
        if (per_block) {
          r.block_bytes_stored.assign(total.block_bytes_stored.begin() + at,
                                      total.block_bytes_stored.begin() + at + c->blocks.size());
          for (uint64_t b : r.block_bytes_stored) r.bytes_stored += b;
        } else if (ci + 1 == calls.size()) {
          r.bytes_stored = bytes_left;  // an older server: shares by payload size
        } else {
          r.bytes_stored = batch.bytes == 0 ? 0 : total.bytes_stored * c->bytes / batch.bytes;
        }
        bytes_left -= std::min(bytes_left, r.bytes_stored);
        at += c->blocks.size();
      }
    }
  } else {
    std::vector<std::string> keys;
    std::vector<std::span<uint8_t>> buffers;
    for (const Call* c : calls) {
      keys.insert(keys.end(), c->keys.begin(), c->keys.end());
      buffers.insert(buffers.end(), c->buffers.begin(), c->buffers.end());
    }
    std::vector<v1::GetBlockInfo> infos;
    status = get_(first.ns, keys, first.format, deadline, buffers, &infos);
    if (status.ok() && infos.size() != keys.size()) {
      status = absl::InternalError("Get: the batch's answer has the wrong length");
    }
    if (status.ok()) {
      size_t at = 0;
      for (Call* c : calls) {
        c->infos.assign(std::make_move_iterator(infos.begin() + at),
                        std::make_move_iterator(infos.begin() + at + c->keys.size()));
        at += c->keys.size();
      }
    }
  }
  if (!status.ok()) {
    splits_.fetch_add(1, std::memory_order_relaxed);
    for (Call* c : calls) c->send_alone = true;
  }
}

}  // namespace kvtier::client::internal
