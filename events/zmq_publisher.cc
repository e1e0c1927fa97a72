#include "events/zmq_publisher.h"

#include <zmq.h>

#include <algorithm>
#include <optional>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>
#include <zmq.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/mutex.h"
#include "common/strings.h"
#include "events/coalesce.h"
#include "events/encoding.h"

namespace kvtier::events {

// The sockets, owned by the publisher thread once Create has returned. Members are
// destroyed in reverse order: sockets before the context.
struct ZmqEventPublisher::Sockets {
  zmq::context_t ctx{1};
  zmq::socket_t pub{ctx, zmq::socket_type::pub};
  zmq::socket_t replay;   // ROUTER; unset when replay is off
  zmq::socket_t monitor;  // PAIR receiving pub's connection events
  // Wakes the thread from zmq_poll: Flush and a full batch send on wake_in (under
  // wake_mu, the only socket touched outside the thread), the thread reads wake_out.
  common::Mutex wake_mu;
  zmq::socket_t wake_in ABSL_GUARDED_BY(wake_mu);
  zmq::socket_t wake_out;
};

namespace {

constexpr int kEndMarkerSeq = -1;

std::string BigEndian64(uint64_t v) {
  std::string out(8, '\0');
  for (int i = 7; i >= 0; --i) {
    out[i] = static_cast<char>(v & 0xff);
    v >>= 8;
  }
  return out;
}

uint64_t ParseBigEndian64(const zmq::message_t& m) {
  uint64_t v = 0;
  const auto* p = static_cast<const uint8_t*>(m.data());
  for (size_t i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}

absl::Status ZmqError(std::string_view what, std::string_view field, std::string_view endpoint) {
  return absl::InvalidArgumentError(absl::StrCat("events.", Sv(field), ": ", Sv(what), " '",
                                                 Sv(endpoint), "': ", zmq_strerror(zmq_errno())));
}

absl::Status SetInt(zmq::socket_t& s, int option, int value, std::string_view field) {
  if (zmq_setsockopt(s.handle(), option, &value, sizeof(value)) != 0) {
    return ZmqError("setsockopt failed on", field, std::to_string(option));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> LastEndpoint(zmq::socket_t& s) {
  char buf[256];
  size_t len = sizeof(buf);
  if (zmq_getsockopt(s.handle(), ZMQ_LAST_ENDPOINT, buf, &len) != 0 || len == 0) {
    return absl::InternalError("events: cannot read ZMQ_LAST_ENDPOINT");
  }
  return std::string(buf, len - 1);  // len counts the terminating NUL
}

// Sends `frames` as one multipart message without blocking. Returns false when the
// first frame is refused (EAGAIN: a peer is at its high-water mark) or on any error.
bool SendMultipart(zmq::socket_t& s, std::vector<zmq::message_t>& frames) {
  for (size_t i = 0; i < frames.size(); ++i) {
    int flags = ZMQ_DONTWAIT | (i + 1 < frames.size() ? ZMQ_SNDMORE : 0);
    if (zmq_msg_send(frames[i].handle(), s.handle(), flags) < 0) {
      // Later frames of an accepted first frame are never refused for the high-water mark.
      if (i > 0) KVTIER_LOG(WARNING) << "events: partial send: " << zmq_strerror(zmq_errno());
      return false;
    }
  }
  return true;
}

zmq::message_t CopyFrame(std::string_view s) { return zmq::message_t(s.data(), s.size()); }

// A frame that references `payload` (no copy); the message keeps it alive until ZMQ has
// written it, however long the peer takes.
zmq::message_t SharedFrame(const std::shared_ptr<const std::string>& payload) {
  auto* hint = new std::shared_ptr<const std::string>(payload);
  return zmq::message_t(
      const_cast<char*>(payload->data()), payload->size(),
      [](void*, void* h) { delete static_cast<std::shared_ptr<const std::string>*>(h); }, hint);
}

// Receives one multipart message without blocking; empty when none is waiting.
std::vector<zmq::message_t> RecvMultipart(zmq::socket_t& s) {
  std::vector<zmq::message_t> frames;
  while (true) {
    zmq::message_t m;
    if (zmq_msg_recv(m.handle(), s.handle(), frames.empty() ? ZMQ_DONTWAIT : 0) < 0) break;
    bool more = m.more();
    frames.push_back(std::move(m));
    if (!more) break;
  }
  return frames;
}

}  // namespace

bool EndpointBinds(std::string_view endpoint) {
  const absl::string_view e = Sv(endpoint);
  return absl::StrContains(e, "*") || absl::StrContains(e, "::") || absl::StartsWith(e, "ipc://") ||
         absl::StartsWith(e, "inproc://");
}

absl::StatusOr<std::unique_ptr<ZmqEventPublisher>> ZmqEventPublisher::Create(EventsConfig config) {
  if (absl::Status s = config.Validate(); !s.ok()) return s;
  std::unique_ptr<Sockets> sk;
  try {  // cppzmq throws only here (socket creation); everything after uses the C API
    sk = std::make_unique<Sockets>();
    if (!config.replay_endpoint.empty()) {
      sk->replay = zmq::socket_t(sk->ctx, zmq::socket_type::router);
    }
    sk->monitor = zmq::socket_t(sk->ctx, zmq::socket_type::pair);
    sk->wake_in = zmq::socket_t(sk->ctx, zmq::socket_type::pair);
    sk->wake_out = zmq::socket_t(sk->ctx, zmq::socket_type::pair);
  } catch (const zmq::error_t& e) {
    return absl::InternalError(absl::StrCat("events: cannot create sockets: ", e.what()));
  }
  zmq::socket_t& pub = sk->pub;
  if (absl::Status s = SetInt(pub, ZMQ_LINGER, 0, "endpoint"); !s.ok()) return s;
  if (absl::Status s = SetInt(pub, ZMQ_SNDHWM, static_cast<int>(config.send_hwm), "send_hwm");
      !s.ok()) {
    return s;
  }
  // Refuse a batch (counted) rather than let ZMQ drop it silently for one subscriber.
  if (absl::Status s = SetInt(pub, ZMQ_XPUB_NODROP, 1, "endpoint"); !s.ok()) return s;

  const std::string wake_addr =
      absl::StrCat("inproc://kvtier-events-wake-", reinterpret_cast<uintptr_t>(sk.get()));
  if (zmq_bind(sk->wake_out.handle(), wake_addr.c_str()) != 0 ||
      zmq_connect(sk->wake_in.handle(), wake_addr.c_str()) != 0) {
    return absl::InternalError(
        absl::StrCat("events: cannot create the wake-up pair: ", zmq_strerror(zmq_errno())));
  }
  for (zmq::socket_t* s : {&sk->wake_in, &sk->wake_out}) {
    if (absl::Status st = SetInt(*s, ZMQ_LINGER, 0, "endpoint"); !st.ok()) return st;
  }

  // The monitor must be attached before bind/connect to see the first connection.
  std::string monitor_addr =
      absl::StrCat("inproc://kvtier-events-monitor-", reinterpret_cast<uintptr_t>(sk.get()));
  if (zmq_socket_monitor(pub.handle(), monitor_addr.c_str(),
                         ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED) != 0 ||
      zmq_connect(sk->monitor.handle(), monitor_addr.c_str()) != 0) {
    return absl::InternalError(
        absl::StrCat("events: cannot monitor the PUB socket: ", zmq_strerror(zmq_errno())));
  }
  if (absl::Status s = SetInt(sk->monitor, ZMQ_LINGER, 0, "endpoint"); !s.ok()) return s;

  std::string endpoint = config.endpoint;
  if (EndpointBinds(config.endpoint)) {
    if (zmq_bind(pub.handle(), config.endpoint.c_str()) != 0) {
      return ZmqError("cannot bind", "endpoint", config.endpoint);
    }
    auto bound = LastEndpoint(pub);
    if (!bound.ok()) return bound.status();
    endpoint = *bound;
  } else {
    // Queue nothing for a subscriber that is not connected yet.
    if (absl::Status s = SetInt(pub, ZMQ_IMMEDIATE, 1, "endpoint"); !s.ok()) return s;
    if (zmq_connect(pub.handle(), config.endpoint.c_str()) != 0) {
      return ZmqError("cannot connect to", "endpoint", config.endpoint);
    }
  }
  std::string replay_endpoint;
  if (!config.replay_endpoint.empty()) {
    zmq::socket_t& replay = sk->replay;
    if (absl::Status s = SetInt(replay, ZMQ_LINGER, 0, "replay_endpoint"); !s.ok()) return s;
    // One whole replay (every buffered batch plus the end marker) must fit in a client's
    // queue, or ROUTER silently drops its tail. ZMQ learns of the reader's progress only
    // every hwm/2 messages, so twice that. Queued answers share the buffer's payloads
    // (SharedFrame), so a client that never reads costs little beyond the buffer.
    int hwm = static_cast<int>(
        std::min<uint64_t>(2 * (uint64_t{config.replay_buffer_batches} + 2), 1 << 30));
    if (absl::Status s = SetInt(replay, ZMQ_SNDHWM, hwm, "replay_endpoint"); !s.ok()) return s;
    if (zmq_bind(replay.handle(), config.replay_endpoint.c_str()) != 0) {
      return ZmqError("cannot bind", "replay_endpoint", config.replay_endpoint);
    }
    auto bound = LastEndpoint(replay);
    if (!bound.ok()) return bound.status();
    replay_endpoint = *bound;
  }
  std::unique_ptr<ZmqEventPublisher> p(new ZmqEventPublisher(std::move(config), std::move(sk)));
  p->endpoint_ = std::move(endpoint);
  p->replay_endpoint_ = std::move(replay_endpoint);
  p->thread_ = std::thread([raw = p.get()] { raw->Run(); });
  return p;
}

ZmqEventPublisher::ZmqEventPublisher(EventsConfig config, std::unique_ptr<Sockets> sockets)
    : config_(std::move(config)),
      sockets_(std::move(sockets)),
      order_(absl::Milliseconds(config_.parent_wait_ms), config_.queue_capacity_events) {}

ZmqEventPublisher::~ZmqEventPublisher() {
  {
    common::MutexLock l(&mu_);
    stop_ = true;
  }
  Wake();
  if (thread_.joinable()) thread_.join();
  zmq_socket_monitor(sockets_->pub.handle(), nullptr, 0);
  // The last batches (e.g. the hot tier's removals at shutdown) get kCloseLingerMs to
  // reach connected subscribers; a stuck one does not hold the process longer.
  constexpr int kCloseLingerMs = 200;
  zmq_setsockopt(sockets_->pub.handle(), ZMQ_LINGER, &kCloseLingerMs, sizeof(kCloseLingerMs));
}

void ZmqEventPublisher::Publish(BlockEvent event) {
  if (event.kind == EventKind::kAllCleared ? !config_.send_all_blocks_cleared
                                            : event.keys.empty()) {
    return;  // nothing to say, or not to this consumer
  }
  common::MutexLock l(&mu_);
  if (queue_.size() >= config_.queue_capacity_events) {
    ++stats_.events_dropped;
    queue_dropped_ = true;
    return;
  }
  if (queue_.empty()) first_queued_at_ = absl::Now();
  queue_.push_back(std::move(event));
  ++enqueued_;
  // A batch is due by count: wake the thread if it waits in zmq_poll (rare: once per
  // max_batch_events events).
  if (queue_.size() == config_.max_batch_events) Wake();
}

void ZmqEventPublisher::Wake() {
  common::MutexLock l(&sockets_->wake_mu);
  zmq_send(sockets_->wake_in.handle(), "", 0, ZMQ_DONTWAIT);  // full: a wake-up is pending
}

void ZmqEventPublisher::Flush() {
  common::MutexLock l(&mu_);
  struct Target {
    const ZmqEventPublisher* self;
    uint64_t processed;
  } target{this, enqueued_};
  ++flush_waiters_;
  Wake();
  mu_.Await(common::Condition(
      +[](Target* t) ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return t->self->processed_ >= t->processed && t->self->stats_.held_for_parent == 0;
      },
      &target));
  --flush_waiters_;
}

EventsStats ZmqEventPublisher::stats() const {
  common::MutexLock l(&mu_);
  EventsStats s = stats_;
  s.queued_events = queue_.size();
  return s;
}

bool ZmqEventPublisher::BatchDueLocked() const {
  return stop_ || flush_waiters_ > 0 || queue_.size() >= config_.max_batch_events;
}

void ZmqEventPublisher::Run() {
  while (true) {
    bool idle;
    bool release_all;
    {
      common::MutexLock l(&mu_);
      if (queue_.empty() && stop_ && order_.held() == 0) break;
      idle = queue_.empty();
      release_all = stop_ || flush_waiters_ > 0;
    }
    if (idle) {
      if (order_.held() > 0) {
        SendBatches({}, false, release_all);  // held events whose wait ended (or all)
        common::MutexLock l(&mu_);
        stats_.next_seq = next_seq_;
        stats_.replay_buffer_batches = replay_buffer_.size();
      }
      // A Publish during this wait is sent at most batch_ms later, which is the batching
      // window anyway; replay requests are answered at once; Flush, a full batch and the
      // destructor wake the poll; a held event's deadline ends it.
      int timeout_ms = static_cast<int>(config_.batch_ms);
      if (std::optional<absl::Time> d = order_.next_deadline(); d.has_value()) {
        timeout_ms = std::clamp<int>(
            static_cast<int>(absl::ToInt64Milliseconds(*d - absl::Now())) + 1, 0, timeout_ms);
      }
      PollSockets(timeout_ms);
      continue;
    }
    std::deque<BlockEvent> events;
    bool queue_dropped;
    release_all = false;
    {
      common::MutexLock l(&mu_);
      const bool timed_out =
          !mu_.AwaitWithDeadline(common::Condition(this, &ZmqEventPublisher::BatchDueLocked),
                                 first_queued_at_ + absl::Milliseconds(config_.batch_ms));
      if (timed_out || stop_ || flush_waiters_ > 0) {
        release_all = stop_ || flush_waiters_ > 0;
        events.swap(queue_);
        queue_dropped = queue_dropped_;
        queue_dropped_ = false;
      } else {
        // Due by count only: take whole batches and leave the rest to its deadline (the
        // queue may have grown past max_batch_events while this thread woke up).
        const size_t n = queue_.size() - queue_.size() % config_.max_batch_events;
        events.assign(std::make_move_iterator(queue_.begin()),
                      std::make_move_iterator(queue_.begin() + n));
        queue_.erase(queue_.begin(), queue_.begin() + n);
        queue_dropped = false;  // the drops came after the events still queued
        // first_queued_at_ stays: the rest leaves no later than the first event's deadline.
      }
    }
    const uint64_t n = events.size();
    SendBatches(std::move(events), queue_dropped, release_all);
    {
      common::MutexLock l(&mu_);
      processed_ += n;
      stats_.next_seq = next_seq_;
      stats_.replay_buffer_batches = replay_buffer_.size();
    }
    PollSockets(0);
  }
}

void ZmqEventPublisher::SendBatches(std::deque<BlockEvent> events, bool queue_dropped,
                                    bool release_all) {
  const absl::Time now = absl::Now();
  std::vector<BlockEvent> ready;
  ready.reserve(events.size());
  order_.Expire(now, &ready);
  for (BlockEvent& e : events) order_.Add(std::move(e), now, &ready);
  if (release_all) order_.ReleaseAll(&ready);
  {
    common::MutexLock l(&mu_);
    stats_.held_for_parent = order_.held();
    stats_.parent_waits_expired = order_.expired();
  }
  // Group by namespace, keeping each namespace's order; few namespaces, so a linear scan.
  std::vector<std::vector<BlockEvent>> groups;
  for (BlockEvent& e : ready) {
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const std::vector<BlockEvent>& g) { return g[0].ns == e.ns; });
    if (it == groups.end()) {
      groups.emplace_back();
      it = groups.end() - 1;
    }
    it->push_back(std::move(e));
  }
  for (std::vector<BlockEvent>& group : groups) {
    CoalesceChains(&group);  // one BlockStored per chain run, as vLLM sends them
    for (size_t i = 0; i < group.size(); i += config_.max_batch_events) {
      size_t end = std::min<size_t>(group.size(), i + config_.max_batch_events);
      SendBatch(std::vector<BlockEvent>(std::make_move_iterator(group.begin() + i),
                                        std::make_move_iterator(group.begin() + end)));
    }
  }
  if (queue_dropped) {
    ++next_seq_;  // the events Publish dropped: a gap no replay fills
    common::MutexLock l(&mu_);
    ++stats_.sequences_skipped;
  }
}

void ZmqEventPublisher::SendBatch(std::vector<BlockEvent> events) {
  const double ts = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  auto payload = std::make_shared<const std::string>(
      EncodeBatch(ts, events, config_.data_parallel_rank, config_.format));
  const uint64_t seq = next_seq_++;
  std::string topic = TopicFor(config_.node_id, events[0]);
  std::vector<zmq::message_t> frames;
  frames.push_back(CopyFrame(topic));
  frames.push_back(CopyFrame(BigEndian64(seq)));
  frames.push_back(SharedFrame(payload));
  const bool sent = SendMultipart(sockets_->pub, frames);
  replay_buffer_.push_back({seq, std::move(payload), std::move(topic)});
  while (replay_buffer_.size() > config_.replay_buffer_batches) replay_buffer_.pop_front();
  common::MutexLock l(&mu_);
  if (sent) {
    ++stats_.batches_published;
    stats_.events_published += events.size();
  } else {
    ++stats_.batches_dropped;
    stats_.events_dropped += events.size();
  }
}

void ZmqEventPublisher::PollSockets(int timeout_ms) {
  zmq_pollitem_t items[3] = {{sockets_->wake_out.handle(), 0, ZMQ_POLLIN, 0},
                             {sockets_->monitor.handle(), 0, ZMQ_POLLIN, 0},
                             {sockets_->replay.handle(), 0, ZMQ_POLLIN, 0}};
  const int n = sockets_->replay ? 3 : 2;
  if (zmq_poll(items, n, timeout_ms) <= 0) return;  // timeout, or EINTR: poll again later
  if (items[0].revents & ZMQ_POLLIN) {
    while (!RecvMultipart(sockets_->wake_out).empty()) {
    }
  }
  if (items[1].revents & ZMQ_POLLIN) ReadMonitorEvents();
  if (n == 3 && (items[2].revents & ZMQ_POLLIN)) ServeReplayRequests();
}

void ZmqEventPublisher::ReadMonitorEvents() {
  int64_t delta = 0;
  for (auto frames = RecvMultipart(sockets_->monitor); !frames.empty();
       frames = RecvMultipart(sockets_->monitor)) {
    if (frames[0].size() < 2) continue;
    uint16_t event;
    memcpy(&event, frames[0].data(), sizeof(event));
    if (event == ZMQ_EVENT_ACCEPTED || event == ZMQ_EVENT_CONNECTED) ++delta;
    if (event == ZMQ_EVENT_DISCONNECTED) --delta;
  }
  common::MutexLock l(&mu_);
  stats_.subscribers = std::max<int64_t>(0, stats_.subscribers + delta);
}

void ZmqEventPublisher::ServeReplayRequests() {
  zmq::socket_t& router = sockets_->replay;
  for (auto req = RecvMultipart(router); !req.empty(); req = RecvMultipart(router)) {
    // [identity, empty, seq] from REQ/DEALER with a delimiter, [identity, seq] without;
    // either may end with one more frame (kvtier's extension) asking for the topic.
    const bool delimited = req.size() >= 3 && req[1].size() == 0;
    const size_t seq_frame = delimited ? 2 : 1;
    if (req.size() < seq_frame + 1 || req.size() > seq_frame + 2 || req[seq_frame].size() != 8) {
      KVTIER_LOG(WARNING) << "events: ignoring a malformed replay request of " << req.size()
                          << " frames";
      continue;
    }
    {
      common::MutexLock l(&mu_);  // counted before answering: the client may read stats next
      ++stats_.replay_requests;
    }
    const bool with_topic = req.size() == seq_frame + 2;
    const uint64_t start = ParseBigEndian64(req[seq_frame]);
    auto reply = [&](std::string_view seq, zmq::message_t payload, std::string_view topic) {
      std::vector<zmq::message_t> frames;
      frames.push_back(CopyFrame(req[0].to_string_view()));
      if (delimited) frames.emplace_back();
      frames.push_back(CopyFrame(seq));
      frames.push_back(std::move(payload));
      if (with_topic) frames.push_back(CopyFrame(topic));
      SendMultipart(router, frames);  // ROUTER drops for a gone or full peer; never blocks
    };
    for (const SentBatch& b : replay_buffer_) {
      if (b.seq >= start) reply(BigEndian64(b.seq), SharedFrame(b.payload), b.topic);
    }
    reply(BigEndian64(static_cast<uint64_t>(static_cast<int64_t>(kEndMarkerSeq))), zmq::message_t(),
          "");
  }
}

}  // namespace kvtier::events
