#include "tools/replay.h"

#include <stdlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "storage/hot_arena.h"
#include "storage/slab_file.h"

namespace kvtier::tools {
namespace {

constexpr char kNamespace[] = "replay";

// Removes the temp directory on scope exit.
class TempDirGuard {
 public:
  explicit TempDirGuard(std::string path) : path_(std::move(path)) {}
  ~TempDirGuard() {
    if (path_.empty()) return;
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

absl::StatusOr<std::string> MakeTempDir() {
  std::error_code ec;
  std::filesystem::path base = std::filesystem::temp_directory_path(ec);
  if (ec) base = "/tmp";
  std::string tmpl = (base / "kvtier-replay-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("data_dir: cannot create temp dir ", tmpl));
  }
  return tmpl;
}

}  // namespace

std::string TraceKey(uint64_t hash_id) {
  std::string key(16, '\0');
  for (int i = 0; i < 8; ++i) key[i] = static_cast<char>((hash_id >> (8 * i)) & 0xff);
  return key;
}

kv::Layout ReplayLayout() {
  kv::Layout layout;
  layout.num_layers = 1;
  layout.num_kv_heads = 1;
  layout.head_dim = 16;
  layout.tokens_per_block = 4;
  layout.sink_tokens = 0;
  return layout;
}

absl::StatusOr<ReplayResult> ReplayTrace(const Trace& trace, const ReplayOptions& options) {
  RETURN_IF_ERROR(options.layout.Validate());
  // One payload for every block: the replay measures residency, not content. Encoding
  // real bytes keeps the store's validation and checksum paths in the measurement.
  std::vector<uint8_t> raw(options.layout.BytesPerBlock());
  for (size_t i = 0; i < raw.size(); i += 2) raw[i + 1] = 0x3c;  // fp16 1.0
  ASSIGN_OR_RETURN(std::string payload0,
                   kv::Encode(options.codec, options.layout, 0, raw));
  ASSIGN_OR_RETURN(std::string payload,
                   kv::Encode(options.codec, options.layout, 1, raw));
  ReplayResult result;
  result.policy = storage::EvictionPolicyName(options.policy);
  result.block_bytes = payload.size();
  // The hot arena rounds every slot up to its alignment: size the cache in slots.
  const uint64_t slot_bytes = storage::HotArena::RoundUp(payload.size());
  uint64_t hot_bytes = options.capacity_bytes;
  if (hot_bytes == 0) hot_bytes = options.capacity_blocks * slot_bytes;
  result.capacity_blocks = hot_bytes / slot_bytes;
  result.slot_bytes = slot_bytes;
  hot_bytes = result.capacity_blocks * slot_bytes;
  if (result.capacity_blocks == 0) {
    return absl::InvalidArgumentError("capacity_blocks: must be > 0");
  }
  size_t end = options.measure_end == 0
                   ? trace.requests.size()
                   : std::min(options.measure_end, trace.requests.size());
  if (options.measure_begin >= end) return absl::InvalidArgumentError("measure range: empty");

  std::string dir = options.data_dir;
  std::string temp;
  if (dir.empty()) {
    ASSIGN_OR_RETURN(temp, MakeTempDir());
    dir = temp;
  }
  TempDirGuard cleanup(temp);

  storage::StoreOptions so;
  so.data_dir = dir;
  so.hot_capacity_bytes = hot_bytes;
  const uint64_t cold_blocks = std::max<uint64_t>(
      1, static_cast<uint64_t>(options.cold_capacities *
                               static_cast<double>(result.capacity_blocks)));
  // The store counts a cold block as its slab extent (whole 4 KiB units), so the model's
  // "cold_blocks records" is that many extents.
  so.cold_capacity_bytes =
      cold_blocks * storage::SlabFile::Round(payload.size() + kColdRecordOverheadBytes);
  result.cold_capacity_bytes = so.cold_capacity_bytes;
  // The cache being sized is exactly the hot tier: demote only when a block does not fit.
  so.high_watermark = 1.0;
  so.low_watermark = 1.0;
  so.policy = options.policy;
  so.hot_allocator = "malloc";
  so.background_demotion = false;
  ASSIGN_OR_RETURN(std::unique_ptr<storage::TieredStore> store, storage::TieredStore::Open(so));

  storage::NamespaceOptions ns;
  ns.name = kNamespace;
  ns.layout = options.layout;
  ns.codec = options.codec;
  ns.keep_sinks = false;
  ns.sink_blocks = options.sink_blocks;
  RETURN_IF_ERROR(store->RegisterNamespace(ns).status());

  std::vector<std::string> keys;
  std::vector<storage::BlockPut> batch;
  for (size_t q = 0; q < trace.requests.size(); ++q) {
    const std::vector<uint64_t>& ids = trace.requests[q].hash_ids;
    keys.clear();
    for (uint64_t id : ids) keys.push_back(TraceKey(id));
    auto fail = [q](const absl::Status& st) {
      return absl::Status(st.code(), absl::StrCat("request ", q, ": ", st.message()));
    };
    absl::StatusOr<storage::LookupResult> lookup = store->Lookup(kNamespace, keys);
    if (!lookup.ok()) return fail(lookup.status());
    if (q >= options.measure_begin && q < end) CountRequest(lookup->tiers, &result.store);
    CountRequest(lookup->tiers, &result.halves[q < trace.requests.size() / 2 ? 0 : 1]);
    batch.clear();
    auto flush = [&]() -> absl::Status {
      if (batch.empty()) return absl::OkStatus();
      absl::Status st = store->Put(kNamespace, batch);
      batch.clear();
      return st;
    };
    for (size_t i = 0; i < ids.size(); ++i) {
      if (lookup->tiers[i] != storage::Tier::kNone) {
        if (absl::Status st = flush(); !st.ok()) return fail(st);
        absl::StatusOr<storage::BlockRef> ref = store->Get(kNamespace, keys[i]);
        // A block demoted and then dropped between Lookup and Get is simply re-put.
        if (ref.ok()) continue;
        if (!absl::IsNotFound(ref.status())) return fail(ref.status());
      }
      storage::BlockPut put;
      put.key = keys[i];
      put.parent_key = i == 0 ? std::string_view() : std::string_view(keys[i - 1]);
      put.block_index = static_cast<uint32_t>(i);
      put.payload = i == 0 ? payload0 : payload;
      batch.push_back(put);
    }
    if (absl::Status st = flush(); !st.ok()) return fail(st);
    if ((q & 63) == 0 || q + 1 == trace.requests.size()) {
      storage::StoreStats stats = store->Stats();
      for (const storage::NamespaceStats& n : stats.namespaces) {
        result.max_hot_blocks = std::max(result.max_hot_blocks, n.hot.blocks);
      }
    }
    if (options.progress) options.progress(q + 1, trace.requests.size());
  }
  storage::StoreStats stats = store->Stats();
  for (const storage::NamespaceStats& n : stats.namespaces) {
    result.hot_evictions += n.demotions + n.evictions_hot_capacity;
    result.store.evictions += n.demotions;
  }
  store.reset();
  return result;
}

}  // namespace kvtier::tools
