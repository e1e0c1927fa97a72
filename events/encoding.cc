#include "events/encoding.h"

#include <msgpack.hpp>

#include "absl/strings/str_cat.h"
#include "common/strings.h"

namespace kvtier::events {
namespace {

using Packer = msgpack::packer<msgpack::sbuffer>;

void PackStr(Packer& pk, std::string_view s) {
  pk.pack_str(static_cast<uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

void PackBin(Packer& pk, std::string_view s) {
  pk.pack_bin(static_cast<uint32_t>(s.size()));
  pk.pack_bin_body(s.data(), static_cast<uint32_t>(s.size()));
}

void PackKeys(Packer& pk, const std::vector<std::string>& keys) {
  pk.pack_array(static_cast<uint32_t>(keys.size()));
  for (const std::string& key : keys) PackBin(pk, key);
}

// One field: its name in map form (nothing in array form), then the value `pack_value`
// writes. Keeps the two forms from drifting apart: both walk the same field list.
template <typename F>
void Field(Packer& pk, BatchFormat format, std::string_view name, F pack_value) {
  if (format == BatchFormat::kMap) PackStr(pk, name);
  pack_value();
}

// Fields per event kind, counting the "type" tag.
constexpr uint32_t kStoredFields = 12;
constexpr uint32_t kRemovedFields = 4;
constexpr uint32_t kClearedFields = 1;

void PackEvent(Packer& pk, const BlockEvent& e, BatchFormat format) {
  uint32_t n = e.kind == EventKind::kStored    ? kStoredFields
               : e.kind == EventKind::kRemoved ? kRemovedFields
                                               : kClearedFields;
  if (format == BatchFormat::kMap) {
    pk.pack_map(n);
  } else {
    pk.pack_array(n);
  }
  Field(pk, format, "type", [&] { PackStr(pk, EventKindName(e.kind)); });
  switch (e.kind) {
    case EventKind::kStored:
      Field(pk, format, "block_hashes", [&] { PackKeys(pk, e.keys); });
      Field(pk, format, "parent_block_hash", [&] {
        if (e.parent_key.has_value()) {
          PackBin(pk, *e.parent_key);
        } else {
          pk.pack_nil();
        }
      });
      Field(pk, format, "token_ids", [&] {
        pk.pack_array(static_cast<uint32_t>(e.token_ids.size()));
        for (uint32_t t : e.token_ids) pk.pack_uint32(t);
      });
      Field(pk, format, "block_size", [&] { pk.pack_uint32(e.block_size); });
      Field(pk, format, "lora_id", [&] { pk.pack_nil(); });
      Field(pk, format, "medium", [&] { PackStr(pk, MediumName(e.medium)); });
      Field(pk, format, "lora_name", [&] {
        if (e.lora_name.has_value()) {
          PackStr(pk, *e.lora_name);
        } else {
          pk.pack_nil();
        }
      });
      Field(pk, format, "extra_keys", [&] {
        if (e.extra_keys.empty()) {
          pk.pack_nil();
          return;
        }
        pk.pack_array(static_cast<uint32_t>(e.extra_keys.size()));
        for (const std::vector<std::string>& block : e.extra_keys) {
          if (block.empty()) {
            pk.pack_nil();
            continue;
          }
          pk.pack_array(static_cast<uint32_t>(block.size()));
          for (const std::string& k : block) PackStr(pk, k);
        }
      });
      Field(pk, format, "group_idx", [&] { pk.pack_uint32(0); });
      Field(pk, format, "kv_cache_spec_kind", [&] { PackStr(pk, "full_attention"); });
      Field(pk, format, "kv_cache_spec_sliding_window", [&] { pk.pack_nil(); });
      break;
    case EventKind::kRemoved:
      Field(pk, format, "block_hashes", [&] { PackKeys(pk, e.keys); });
      Field(pk, format, "medium", [&] { PackStr(pk, MediumName(e.medium)); });
      Field(pk, format, "group_idx", [&] { pk.pack_uint32(0); });
      break;
    case EventKind::kAllCleared:
      break;
  }
}

}  // namespace

std::string TopicFor(std::string_view node_id, const BlockEvent& event) {
  return absl::StrCat("kv@", Sv(node_id), "@", event.model_id.empty() ? event.ns : event.model_id);
}

std::string EncodeBatch(double ts, std::span<const BlockEvent> events,
                        std::optional<int32_t> data_parallel_rank, BatchFormat format) {
  msgpack::sbuffer buf;
  Packer pk(buf);
  if (format == BatchFormat::kMap) {
    pk.pack_map(3);
  } else {
    pk.pack_array(3);
  }
  Field(pk, format, "ts", [&] { pk.pack_double(ts); });
  Field(pk, format, "events", [&] {
    pk.pack_array(static_cast<uint32_t>(events.size()));
    for (const BlockEvent& e : events) PackEvent(pk, e, format);
  });
  Field(pk, format, "data_parallel_rank", [&] {
    if (data_parallel_rank.has_value()) {
      pk.pack_int32(*data_parallel_rank);
    } else {
      pk.pack_nil();
    }
  });
  return std::string(buf.data(), buf.size());
}

}  // namespace kvtier::events
