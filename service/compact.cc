#include "service/compact.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kv/codec.h"
#include "kv/compaction.h"
#include "service/request_checks.h"

namespace kvtier::service {
namespace {

constexpr int kMaxCompactKeys = 65536;

absl::Status ValidateRequest(const v1::CompactRequest& request) {
  if (request.namespace_().empty()) {
    return absl::InvalidArgumentError("namespace must not be empty");
  }
  if (request.keys_size() == 0) return absl::InvalidArgumentError("keys must not be empty");
  if (request.keys_size() > kMaxCompactKeys) {
    return absl::InvalidArgumentError(
        absl::StrCat("keys has ", request.keys_size(), " entries; the limit is ", kMaxCompactKeys));
  }
  for (int i = 0; i < request.keys_size(); ++i) {
    RETURN_IF_ERROR(CheckKey(request.keys(i), absl::StrCat("keys[", i, "]")));
  }
  if (request.policy_case() == v1::CompactRequest::POLICY_NOT_SET) {
    return absl::InvalidArgumentError("policy must be set (sink_window, h2o or snapkv)");
  }
  if (request.position_policy() != v1::POSITION_POLICY_KEEP_ORIGINAL &&
      request.position_policy() != v1::POSITION_POLICY_REINDEX) {
    return absl::InvalidArgumentError(
        absl::StrCat("position_policy ", request.position_policy(), " is unknown"));
  }
  if (request.rope_theta() < 0.0f || !std::isfinite(request.rope_theta())) {
    return absl::InvalidArgumentError("rope_theta must be a finite non-negative number");
  }
  return absl::OkStatus();
}

// Reads and decodes the sequence request.keys (block 0 first) of namespace `ns`.
absl::StatusOr<kv::KvSequence> ReadSequence(storage::TieredStore& store,
                                            const storage::NamespaceOptions& ns,
                                            const v1::CompactRequest& request) {
  const kv::Layout& layout = ns.layout;
  std::vector<std::string> raw_blocks;
  raw_blocks.reserve(request.keys_size());
  for (int i = 0; i < request.keys_size(); ++i) {
    absl::StatusOr<storage::BlockRef> ref = store.Get(ns.name, request.keys(i));
    if (!ref.ok()) {
      if (ref.status().code() == absl::StatusCode::kNotFound) {
        return absl::NotFoundError(absl::StrCat("keys[", i, "] is not stored in namespace ",
                                                ns.name));
      }
      return ref.status();
    }
    std::span<const uint8_t> payload = ref->payload();
    if (kv::IsCompactedEntry(payload)) {
      return absl::InvalidArgumentError(
          absl::StrCat("keys[", i, "] names a compacted entry, not a block"));
    }
    ASSIGN_OR_RETURN(kv::EncodedInfo info, kv::ParseHeader(payload));
    if (kv::FirstDifference(layout, info.layout, /*compare_tokens=*/false).has_value()) {
      return absl::FailedPreconditionError(
          absl::StrCat("keys[", i, "] holds layout ", info.layout.DebugString(),
                       ", namespace has ", layout.DebugString()));
    }
    if (i + 1 < request.keys_size() && info.num_tokens != layout.tokens_per_block) {
      return absl::FailedPreconditionError(
          absl::StrCat("keys[", i, "] holds ", info.num_tokens,
                       " tokens; every block but the last must hold tokens_per_block = ",
                       layout.tokens_per_block));
    }
    ASSIGN_OR_RETURN(std::string raw, kv::DecodeToString(payload));
    raw_blocks.push_back(std::move(raw));
  }
  return kv::KvSequenceFromRawBlocks(layout, raw_blocks);
}

// What the request's policy selected, and the parameters that name the entry.
struct Selected {
  kv::CompactionPolicy policy;
  std::string params;
  kv::Selection selection;
};

absl::StatusOr<Selected> Select(const v1::CompactRequest& request, const kv::KvSequence& seq,
                                kv::PositionPolicy pos_policy) {
  const float theta = request.rope_theta();
  Selected out;
  absl::StatusOr<kv::Selection> sel;
  switch (request.policy_case()) {
    case v1::CompactRequest::kSinkWindow: {
      out.policy = kv::CompactionPolicy::kSinkWindow;
      const kv::SinkWindowParams p{.n_sink = request.sink_window().n_sink(),
                                   .window = request.sink_window().window()};
      sel = kv::SelectSinkWindow(seq.num_layers, seq.num_kv_heads, seq.num_tokens, p);
      out.params = kv::CompactionParamsString(p, pos_policy, theta);
      break;
    }
    case v1::CompactRequest::kH2O: {
      out.policy = kv::CompactionPolicy::kH2o;
      const v1::H2oParams& h = request.h2o();
      const kv::H2oParams p{.n_sink = h.n_sink(), .heavy = h.heavy(), .recent = h.recent()};
      std::span<const float> scores(h.scores().data(), h.scores_size());
      sel = kv::SelectH2o(seq.num_layers, seq.num_kv_heads, seq.num_tokens, p, scores);
      out.params = kv::CompactionParamsString(p, scores, pos_policy, theta);
      break;
    }
    case v1::CompactRequest::kSnapkv: {
      out.policy = kv::CompactionPolicy::kSnapKv;
      const v1::SnapKvParams& s = request.snapkv();
      const kv::SnapKvParams p{.n_sink = s.n_sink(),
                               .obs_window = s.obs_window(),
                               .pool_kernel = s.pool_kernel(),
                               .capacity = s.capacity(),
                               .num_query_heads = s.num_query_heads()};
      std::span<const float> queries(s.obs_queries().data(), s.obs_queries_size());
      sel = kv::SelectSnapKv(seq, p, queries);
      out.params = kv::CompactionParamsString(p, queries, pos_policy, theta);
      break;
    }
    default:
      return absl::InvalidArgumentError("policy must be set (sink_window, h2o or snapkv)");
  }
  if (!sel.ok()) return sel.status();
  out.selection = *std::move(sel);
  return out;
}

}  // namespace

absl::StatusOr<v1::CompactResponse> RunCompact(storage::TieredStore& store,
                                               const v1::CompactRequest& request) {
  RETURN_IF_ERROR(ValidateRequest(request));
  const std::string& ns_name = request.namespace_();
  ASSIGN_OR_RETURN(storage::NamespaceOptions ns, store.GetNamespace(ns_name));
  const kv::Layout& layout = ns.layout;
  ASSIGN_OR_RETURN(kv::KvSequence seq, ReadSequence(store, ns, request));
  const kv::PositionPolicy pos_policy = request.position_policy() == v1::POSITION_POLICY_REINDEX
                                            ? kv::PositionPolicy::kReindex
                                            : kv::PositionPolicy::kKeepOriginal;
  ASSIGN_OR_RETURN(Selected selected, Select(request, seq, pos_policy));
  const kv::Selection* sel = &selected.selection;

  // Gather, re-index, re-encode with the namespace codec.
  ASSIGN_OR_RETURN(kv::KvSequence kept, kv::Gather(seq, *sel));
  seq = kv::KvSequence();
  if (pos_policy == kv::PositionPolicy::kReindex) {
    RETURN_IF_ERROR(kv::ReindexKeys(kept, *sel, request.rope_theta()));
  }
  kv::Layout blob_layout = layout;
  blob_layout.tokens_per_block = sel->kept;
  blob_layout.sink_tokens = std::min(layout.sink_tokens, sel->kept);
  const std::string raw = kv::KvSequenceToRaw(kept, layout.dtype);
  kv::CodecOptions codec_options;
  codec_options.keep_sinks = ns.keep_sinks;
  ASSIGN_OR_RETURN(std::string blob,
                   kv::Encode(ns.codec, blob_layout, /*block_index=*/0, kv::AsBytes(raw),
                              codec_options));
  ASSIGN_OR_RETURN(std::string payload,
                   kv::SerializeCompactedEntry(selected.policy, pos_policy, *sel, blob));

  const std::string entry_key =
      kv::CompactedEntryKey(request.keys(request.keys_size() - 1), selected.params);
  storage::BlockPut put;
  put.key = entry_key;
  put.block_index = 0;
  put.payload = payload;
  put.standalone = true;
  RETURN_IF_ERROR(store.Put(ns_name, std::span<const storage::BlockPut>(&put, 1)));

  v1::CompactResponse response;
  response.set_entry_key(entry_key);
  response.set_kept_tokens(sel->kept);
  response.set_source_tokens(sel->source_tokens);
  response.set_bytes(payload.size());
  for (uint32_t p : sel->UnionPositions()) response.add_positions(p);
  return response;
}

absl::StatusOr<std::span<const uint8_t>> DescribeStoredPayload(std::span<const uint8_t> payload,
                                                               v1::GetBlockInfo* info) {
  if (!kv::IsCompactedEntry(payload)) {
    ASSIGN_OR_RETURN(kv::EncodedInfo header, kv::ParseHeader(payload));
    info->set_codec(static_cast<v1::Codec>(header.codec));
    return payload;
  }
  ASSIGN_OR_RETURN(kv::CompactedEntry entry, kv::ParseCompactedEntry(payload));
  ASSIGN_OR_RETURN(kv::EncodedInfo header, kv::ParseHeader(entry.blob));
  info->set_codec(static_cast<v1::Codec>(header.codec));
  info->set_block_index(0);
  info->clear_positions();
  for (uint32_t p : entry.selection.UnionPositions()) info->add_positions(p);
  return entry.blob;
}

}  // namespace kvtier::service
