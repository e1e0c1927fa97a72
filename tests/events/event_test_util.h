// Helpers for the events tests: a consumer's side of the wire (SUB, replay DEALER) and
// msgpack decoding by field name. Decoding follows vLLM's schema, not events/encoding.cc.
#ifndef KVTIER_TESTS_EVENTS_EVENT_TEST_UTIL_H_
#define KVTIER_TESTS_EVENTS_EVENT_TEST_UTIL_H_

#include <zmq.h>

#include <cstdint>
#include <msgpack.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>
#include <zmq.hpp>

#include "events/zmq_publisher.h"
#include "gtest/gtest.h"

namespace kvtier::events::testing {

// Generous: only a broken publisher makes a test wait this long.
constexpr int kRecvTimeoutMs = 10000;

// Receives one multipart message; empty when none arrives within timeout_ms.
inline std::vector<zmq::message_t> Recv(zmq::socket_t& s, int timeout_ms = kRecvTimeoutMs) {
  std::vector<zmq::message_t> frames;
  zmq_pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
  if (zmq_poll(&item, 1, timeout_ms) <= 0) return frames;
  while (true) {
    zmq::message_t m;
    (void)s.recv(m, zmq::recv_flags::none);
    bool more = m.more();
    frames.push_back(std::move(m));
    if (!more) return frames;
  }
}

inline uint64_t BigEndian(const zmq::message_t& m) {
  EXPECT_EQ(m.size(), 8u);
  uint64_t v = 0;
  for (size_t i = 0; i < 8 && i < m.size(); ++i)
    v = (v << 8) | static_cast<const uint8_t*>(m.data())[i];
  return v;
}

inline std::string BigEndianBytes(uint64_t v) {
  std::string out(8, '\0');
  for (int i = 7; i >= 0; --i, v >>= 8) out[i] = static_cast<char>(v & 0xff);
  return out;
}

// A live message: topic, seq, payload.
struct LiveBatch {
  std::string topic;
  uint64_t seq = 0;
  std::string payload;
};

inline std::optional<LiveBatch> RecvBatch(zmq::socket_t& sub, int timeout_ms = kRecvTimeoutMs) {
  std::vector<zmq::message_t> f = Recv(sub, timeout_ms);
  if (f.empty()) return std::nullopt;
  EXPECT_EQ(f.size(), 3u) << "a KVEventBatch message has three frames";
  if (f.size() != 3) return std::nullopt;
  return LiveBatch{f[0].to_string(), BigEndian(f[1]), f[2].to_string()};
}

// A SUB socket connected to `endpoint`, subscribed to `prefix`.
inline zmq::socket_t Subscriber(zmq::context_t& ctx, const std::string& endpoint,
                                const std::string& prefix = "kv@") {
  zmq::socket_t sub(ctx, zmq::socket_type::sub);
  sub.set(zmq::sockopt::linger, 0);
  sub.set(zmq::sockopt::subscribe, prefix);
  sub.connect(endpoint);
  return sub;
}

// ZMQ gives no signal when a SUB's subscription has reached the PUB ("slow joiner"), so
// publish warm-up events of namespace "warmup" until one arrives, then a last one, and
// drain through it. Returns the sequence number the next batch will carry.
inline uint64_t WaitSubscribed(ZmqEventPublisher& pub, zmq::socket_t& sub) {
  for (int attempt = 0; attempt < 2000; ++attempt) {
    pub.Publish(BlockEvent::AllCleared("warmup", ""));
    pub.Flush();
    if (RecvBatch(sub, 5).has_value()) break;
  }
  pub.Publish(BlockEvent::AllCleared("warmup", ""));
  pub.Flush();
  const uint64_t last = pub.stats().next_seq - 1;
  while (true) {
    std::optional<LiveBatch> b = RecvBatch(sub);
    if (!b.has_value()) {
      ADD_FAILURE() << "the subscriber never received the warm-up batches";
      return last + 1;
    }
    if (b->seq == last) return last + 1;
  }
}

// A DEALER connected to a replay endpoint, as vLLM's consumers use.
inline zmq::socket_t ReplayClient(zmq::context_t& ctx, const std::string& endpoint) {
  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.connect(endpoint);
  return dealer;
}

// Asks for every batch from `start`; returns the (seq, payload) pairs before the end
// marker. `delimited`: send the empty delimiter frame first (as vLLM's consumers do),
// else only the 8 bytes.
inline std::vector<std::pair<uint64_t, std::string>> Replay(zmq::socket_t& dealer, uint64_t start,
                                                            bool delimited = true) {
  if (delimited) dealer.send(zmq::message_t(), zmq::send_flags::sndmore);
  dealer.send(zmq::buffer(BigEndianBytes(start)), zmq::send_flags::none);
  std::vector<std::pair<uint64_t, std::string>> out;
  while (true) {
    std::vector<zmq::message_t> f = Recv(dealer);
    if (f.empty()) {
      ADD_FAILURE() << "replay: no end marker";
      return out;
    }
    size_t i = 0;
    if (delimited) {
      EXPECT_EQ(f[0].size(), 0u) << "replay answers keep the delimiter";
      i = 1;
    }
    EXPECT_EQ(f.size(), i + 2);
    if (f.size() != i + 2) return out;
    const uint64_t seq = BigEndian(f[i]);
    if (static_cast<int64_t>(seq) == -1) {
      EXPECT_EQ(f[i + 1].size(), 0u) << "the end marker has an empty payload";
      return out;
    }
    out.emplace_back(seq, f[i + 1].to_string());
  }
}

inline std::vector<std::pair<uint64_t, std::string>> Replay(zmq::context_t& ctx,
                                                            const std::string& endpoint,
                                                            uint64_t start, bool delimited = true) {
  zmq::socket_t dealer = ReplayClient(ctx, endpoint);
  return Replay(dealer, start, delimited);
}

// msgpack by field name.
inline const msgpack::object* Field(const msgpack::object& map, std::string_view name) {
  if (map.type != msgpack::type::MAP) return nullptr;
  for (uint32_t i = 0; i < map.via.map.size; ++i) {
    const msgpack::object_kv& kv = map.via.map.ptr[i];
    if (kv.key.type == msgpack::type::STR &&
        std::string_view(kv.key.via.str.ptr, kv.key.via.str.size) == name) {
      return &kv.val;
    }
  }
  return nullptr;
}

inline std::string Str(const msgpack::object& o) {
  EXPECT_EQ(o.type, msgpack::type::STR);
  return o.type == msgpack::type::STR ? std::string(o.via.str.ptr, o.via.str.size) : "";
}

inline std::string Bin(const msgpack::object& o) {
  EXPECT_EQ(o.type, msgpack::type::BIN) << "block hashes are bytes";
  return o.type == msgpack::type::BIN ? std::string(o.via.bin.ptr, o.via.bin.size) : "";
}

inline std::vector<std::string> Bins(const msgpack::object& o) {
  std::vector<std::string> out;
  EXPECT_EQ(o.type, msgpack::type::ARRAY);
  if (o.type != msgpack::type::ARRAY) return out;
  for (uint32_t i = 0; i < o.via.array.size; ++i) out.push_back(Bin(o.via.array.ptr[i]));
  return out;
}

// The "events" list of a map-form batch.
inline std::vector<const msgpack::object*> MapEvents(const msgpack::object& batch) {
  std::vector<const msgpack::object*> out;
  const msgpack::object* events = Field(batch, "events");
  EXPECT_NE(events, nullptr);
  if (events == nullptr || events->type != msgpack::type::ARRAY) return out;
  for (uint32_t i = 0; i < events->via.array.size; ++i) out.push_back(&events->via.array.ptr[i]);
  return out;
}

// The keys of every event of a map-form batch, in order (empty list for AllBlocksCleared).
inline std::vector<std::vector<std::string>> EventKeys(const std::string& payload) {
  msgpack::object_handle oh = msgpack::unpack(payload.data(), payload.size());
  std::vector<std::vector<std::string>> out;
  for (const msgpack::object* e : MapEvents(oh.get())) {
    const msgpack::object* hashes = Field(*e, "block_hashes");
    out.push_back(hashes == nullptr ? std::vector<std::string>{} : Bins(*hashes));
  }
  return out;
}

}  // namespace kvtier::events::testing

#endif  // KVTIER_TESTS_EVENTS_EVENT_TEST_UTIL_H_
