// The msgpack payload, decoded by field name (map form) and by position (array form) as
// vLLM's KVEventBatch declares them, and the configuration checks.
#include "events/encoding.h"

#include <msgpack.hpp>
#include <string>
#include <vector>

#include "events/config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/events/event_test_util.h"
#include "tests/events/recording_sink.h"
#include "tests/testing/status_matchers.h"

namespace kvtier::events {
namespace {

using ::kvtier::events::testing::Bin;
using ::kvtier::events::testing::Bins;
using ::kvtier::events::testing::Field;
using ::kvtier::events::testing::Str;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// vLLM's declaration order (vllm/distributed/kv_events.py), the order of the array form.
const std::vector<std::string> kStoredFields = {"block_hashes",
                                                "parent_block_hash",
                                                "token_ids",
                                                "block_size",
                                                "lora_id",
                                                "medium",
                                                "lora_name",
                                                "extra_keys",
                                                "group_idx",
                                                "kv_cache_spec_kind",
                                                "kv_cache_spec_sliding_window"};
const std::vector<std::string> kRemovedFields = {"block_hashes", "medium", "group_idx"};

std::vector<BlockEvent> SampleEvents() {
  BlockEvent stored = BlockEvent::Stored("ns1", "llama-3-8b", {std::string("k\0\1", 3), "k2"},
                                         std::string("parent"), 16, Medium::kCpuPinned);
  stored.token_ids = {1, 2, 3, 70000};
  stored.lora_name = "adapter";
  stored.extra_keys = {{"mm-hash-1", "salt"}, {}};
  return {stored, BlockEvent::Removed("ns1", "llama-3-8b", {"k2"}, Medium::kDisk),
          BlockEvent::AllCleared("ns1", "llama-3-8b")};
}

std::vector<std::string> Keys(const msgpack::object& map) {
  std::vector<std::string> out;
  for (uint32_t i = 0; i < map.via.map.size; ++i) out.push_back(Str(map.via.map.ptr[i].key));
  return out;
}

std::vector<uint64_t> Ints(const msgpack::object& o) {
  std::vector<uint64_t> out;
  for (uint32_t i = 0; i < o.via.array.size; ++i) out.push_back(o.via.array.ptr[i].as<uint64_t>());
  return out;
}

TEST(EncodingTest, MapFormHasEveryFieldByNameInDeclarationOrder) {
  std::vector<BlockEvent> events = SampleEvents();
  std::string payload = EncodeBatch(1733050000.5, events, std::nullopt, BatchFormat::kMap);
  msgpack::object_handle oh = msgpack::unpack(payload.data(), payload.size());
  const msgpack::object& batch = oh.get();
  ASSERT_EQ(batch.type, msgpack::type::MAP);
  EXPECT_THAT(Keys(batch), ElementsAre("ts", "events", "data_parallel_rank"));
  EXPECT_EQ(Field(batch, "ts")->type, msgpack::type::FLOAT64);
  EXPECT_DOUBLE_EQ(Field(batch, "ts")->as<double>(), 1733050000.5);
  EXPECT_TRUE(Field(batch, "data_parallel_rank")->is_nil());
  const msgpack::object& list = *Field(batch, "events");
  ASSERT_EQ(list.via.array.size, 3u);

  const msgpack::object& s = list.via.array.ptr[0];
  std::vector<std::string> stored_keys = {"type"};
  stored_keys.insert(stored_keys.end(), kStoredFields.begin(), kStoredFields.end());
  EXPECT_EQ(Keys(s), stored_keys);
  EXPECT_EQ(Str(*Field(s, "type")), "BlockStored");
  EXPECT_THAT(Bins(*Field(s, "block_hashes")), ElementsAre(std::string("k\0\1", 3), "k2"));
  EXPECT_EQ(Bin(*Field(s, "parent_block_hash")), "parent");
  EXPECT_THAT(Ints(*Field(s, "token_ids")), ElementsAre(1, 2, 3, 70000));
  EXPECT_EQ(Field(s, "block_size")->as<uint32_t>(), 16u);
  EXPECT_TRUE(Field(s, "lora_id")->is_nil());
  EXPECT_EQ(Str(*Field(s, "medium")), "CPU");
  EXPECT_EQ(Str(*Field(s, "lora_name")), "adapter");
  const msgpack::object& extra = *Field(s, "extra_keys");
  ASSERT_EQ(extra.via.array.size, 2u);
  EXPECT_EQ(Str(extra.via.array.ptr[0].via.array.ptr[0]), "mm-hash-1");
  EXPECT_EQ(Str(extra.via.array.ptr[0].via.array.ptr[1]), "salt");
  EXPECT_TRUE(extra.via.array.ptr[1].is_nil());
  EXPECT_EQ(Field(s, "group_idx")->as<int>(), 0);
  EXPECT_EQ(Str(*Field(s, "kv_cache_spec_kind")), "full_attention");
  EXPECT_TRUE(Field(s, "kv_cache_spec_sliding_window")->is_nil());

  const msgpack::object& r = list.via.array.ptr[1];
  std::vector<std::string> removed_keys = {"type"};
  removed_keys.insert(removed_keys.end(), kRemovedFields.begin(), kRemovedFields.end());
  EXPECT_EQ(Keys(r), removed_keys);
  EXPECT_EQ(Str(*Field(r, "type")), "BlockRemoved");
  EXPECT_THAT(Bins(*Field(r, "block_hashes")), ElementsAre("k2"));
  EXPECT_EQ(Str(*Field(r, "medium")), "DISK");

  const msgpack::object& c = list.via.array.ptr[2];
  EXPECT_THAT(Keys(c), ElementsAre("type"));
  EXPECT_EQ(Str(*Field(c, "type")), "AllBlocksCleared");
}

TEST(EncodingTest, AbsentOptionalFieldsAreNilOrEmpty) {
  std::vector<BlockEvent> events = {
      BlockEvent::Stored("ns", "", {"k"}, std::nullopt, 32, Medium::kDisk)};
  std::string payload = EncodeBatch(1.0, events, 3, BatchFormat::kMap);
  msgpack::object_handle oh = msgpack::unpack(payload.data(), payload.size());
  EXPECT_EQ(Field(oh.get(), "data_parallel_rank")->as<int>(), 3);
  const msgpack::object& s = Field(oh.get(), "events")->via.array.ptr[0];
  EXPECT_TRUE(Field(s, "parent_block_hash")->is_nil());
  EXPECT_EQ(Field(s, "token_ids")->via.array.size, 0u) << "token_ids is a list, never nil";
  EXPECT_TRUE(Field(s, "lora_name")->is_nil());
  EXPECT_TRUE(Field(s, "extra_keys")->is_nil());
}

TEST(EncodingTest, ArrayFormIsPositionalWithTheTagFirst) {
  std::vector<BlockEvent> events = SampleEvents();
  std::string payload = EncodeBatch(2.25, events, 1, BatchFormat::kArray);
  msgpack::object_handle oh = msgpack::unpack(payload.data(), payload.size());
  const msgpack::object& batch = oh.get();
  ASSERT_EQ(batch.type, msgpack::type::ARRAY);
  ASSERT_EQ(batch.via.array.size, 3u);  // [ts, events, data_parallel_rank]
  EXPECT_DOUBLE_EQ(batch.via.array.ptr[0].as<double>(), 2.25);
  EXPECT_EQ(batch.via.array.ptr[2].as<int>(), 1);
  const msgpack::object& list = batch.via.array.ptr[1];
  ASSERT_EQ(list.via.array.size, 3u);

  const msgpack::object& s = list.via.array.ptr[0];
  ASSERT_EQ(s.type, msgpack::type::ARRAY);
  ASSERT_EQ(s.via.array.size, 1 + kStoredFields.size());
  const msgpack::object* f = s.via.array.ptr;
  EXPECT_EQ(Str(f[0]), "BlockStored");
  EXPECT_THAT(Bins(f[1]), ElementsAre(std::string("k\0\1", 3), "k2"));  // block_hashes
  EXPECT_EQ(Bin(f[2]), "parent");                                       // parent_block_hash
  EXPECT_THAT(Ints(f[3]), ElementsAre(1, 2, 3, 70000));                 // token_ids
  EXPECT_EQ(f[4].as<uint32_t>(), 16u);                                  // block_size
  EXPECT_TRUE(f[5].is_nil());                                           // lora_id
  EXPECT_EQ(Str(f[6]), "CPU");                                   // medium
  EXPECT_EQ(Str(f[7]), "adapter");                                      // lora_name
  EXPECT_EQ(f[8].via.array.size, 2u);                                   // extra_keys
  EXPECT_EQ(f[9].as<int>(), 0);                                         // group_idx
  EXPECT_EQ(Str(f[10]), "full_attention");                              // kv_cache_spec_kind
  EXPECT_TRUE(f[11].is_nil());  // kv_cache_spec_sliding_window

  const msgpack::object& r = list.via.array.ptr[1];
  ASSERT_EQ(r.via.array.size, 1 + kRemovedFields.size());
  EXPECT_EQ(Str(r.via.array.ptr[0]), "BlockRemoved");
  EXPECT_THAT(Bins(r.via.array.ptr[1]), ElementsAre("k2"));
  EXPECT_EQ(Str(r.via.array.ptr[2]), "DISK");
  EXPECT_EQ(r.via.array.ptr[3].as<int>(), 0);

  const msgpack::object& c = list.via.array.ptr[2];
  ASSERT_EQ(c.via.array.size, 1u);
  EXPECT_EQ(Str(c.via.array.ptr[0]), "AllBlocksCleared");
}

TEST(EncodingTest, TopicUsesTheModelIdElseTheNamespace) {
  EXPECT_EQ(TopicFor("node-a", BlockEvent::AllCleared("ns1", "llama")), "kv@node-a@llama");
  EXPECT_EQ(TopicFor("node-a", BlockEvent::AllCleared("ns1", "")), "kv@node-a@ns1");
}

TEST(EventsConfigTest, ValidateNamesTheBadField) {
  EventsConfig ok;
  ok.endpoint = "tcp://*:5557";
  EXPECT_OK(ok.Validate());
  EXPECT_TRUE(ok.enabled());
  EXPECT_FALSE(EventsConfig{}.enabled());

  auto message = [](EventsConfig c) {
    absl::Status s = c.Validate();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    return std::string(s.message());
  };
  EXPECT_THAT(message(EventsConfig{}), HasSubstr("events.endpoint"));
  EventsConfig c = ok;
  c.endpoint = "localhost:5557";
  EXPECT_THAT(message(c), HasSubstr("events.endpoint"));
  c = ok;
  c.replay_endpoint = "nonsense";
  EXPECT_THAT(message(c), HasSubstr("events.replay_endpoint"));
  c = ok;
  c.batch_ms = 0;
  EXPECT_THAT(message(c), HasSubstr("events.batch_ms"));
  c = ok;
  c.max_batch_events = 0;
  EXPECT_THAT(message(c), HasSubstr("events.max_batch_events"));
  c = ok;
  c.queue_capacity_events = 0;
  EXPECT_THAT(message(c), HasSubstr("events.queue_capacity_events"));
  c = ok;
  c.replay_buffer_batches = 0;
  EXPECT_THAT(message(c), HasSubstr("events.replay_buffer_batches"));
  c = ok;
  c.send_hwm = 0;
  EXPECT_THAT(message(c), HasSubstr("events.send_hwm"));
  c = ok;
  c.node_id = "a@b";
  EXPECT_THAT(message(c), HasSubstr("events.pod_id"));
}

TEST(EventsConfigTest, ParsesFormats) {
  EXPECT_EQ(*ParseBatchFormat("map"), BatchFormat::kMap);
  EXPECT_EQ(*ParseBatchFormat("array"), BatchFormat::kArray);
  EXPECT_EQ(BatchFormatName(BatchFormat::kArray), std::string("array"));
  absl::StatusOr<BatchFormat> bad = ParseBatchFormat("json");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("events.format"));
}

TEST(RecordingEventSinkTest, KeepsEventsInOrder) {
  testing::RecordingEventSink sink;
  EventSink& as_sink = sink;
  as_sink.Publish(BlockEvent::Removed("ns", "", {"a"}, Medium::kDisk));
  as_sink.Publish(BlockEvent::AllCleared("ns", ""));
  std::vector<BlockEvent> got = sink.Take();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].kind, EventKind::kRemoved);
  EXPECT_EQ(got[1].kind, EventKind::kAllCleared);
  EXPECT_TRUE(sink.Take().empty());
}

}  // namespace
}  // namespace kvtier::events
