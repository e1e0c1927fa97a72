// Compact RPC core: turns a stored sequence into one compacted entry (docs/design.md §3 Put / Get / Lookup data flow).
// Pure function of a TieredStore; no gRPC types beyond the generated messages, so the
// kvtierd Compact handler is a thin wrapper:
//
//   grpc::Status Compact(ctx, const CompactRequest* req, CompactResponse* resp) {
//     auto r = service::RunCompact(*store_, *req);   // (after tenant / auth checks)
//     if (!r.ok()) return ToGrpcStatus(r.status());
//     *resp = *std::move(r);
//     return grpc::Status::OK;
//   }
//
// What RunCompact does:
//   1. Validates the request: namespace non-empty, 1..max keys, exactly one policy set,
//      policy parameters valid for the sequence length (see kv/compaction.h).
//      Errors are INVALID_ARGUMENT naming the field; nothing is stored.
//   2. Gets every key (block 0 first) from `store`; an unknown namespace or a missing
//      key is NOT_FOUND naming the key index (nothing is stored). Each block is decoded
//      with the codec its blob header names; every block but the last must hold
//      layout.tokens_per_block tokens. A blob whose layout differs from the namespace's
//      is FAILED_PRECONDITION.
//      Parameters are taken literally: proto3 cannot tell an unset n_sink from 0, so
//      n_sink = 0 means no sinks (the window-only baseline); workers should send 4.
//   3. Runs the selection (kv::SelectSinkWindow / SelectH2o / SelectSnapKv) over the whole
//      sequence and gathers the kept tokens' K/V per (layer, kv_head). With
//      POSITION_POLICY_REINDEX the kept keys are re-rotated to contiguous positions
//      0..kept-1 (kv::ReindexKeys, RoPE theta = request.rope_theta or 500000). Values are
//      never rotated. Re-indexing a quantized namespace is dequantize -> rotate ->
//      requantize.
//   4. Re-encodes the gathered KV with the namespace codec as "block 0" of kept tokens, so
//      with sink protection the first min(layout.sink_tokens, kept) tokens of every head
//      (the sinks when n_sink >= layout.sink_tokens) stay in the source dtype, and stores
//      it with TieredStore::Put(BlockPut{.key = entry_key, .standalone = true}).
//      REQUIRES of TieredStore::Put: a standalone payload for which kv::IsCompactedEntry
//      is true is validated as kv::ParseCompactedEntry + kv::ParseHeader(entry.blob)
//      (codec and layout checks on the inner blob) instead of ParseHeader(payload).
//
// Entry key: kv::CompactedEntryKey(last block key, canonical policy + parameters) — 16
// bytes, SHA-256 truncated; identical requests map to the same key (re-compaction
// replaces it).
//
// Entry payload (kv::SerializeCompactedEntry / kv::ParseCompactedEntry in
// kv/compaction.h): a compaction header (magic "KVTC", version, policy, position
// policy, per-head kept count, source tokens, positions) followed by ONE ordinary codec
// blob (kv/codec.h) whose layout is the namespace layout with
// tokens_per_block = kept tokens per head. Token t of (layer l, kv_head h) in that blob
// is the source token at positions[(l * num_kv_heads + h) * kept + t]; for sink_window
// every head keeps the same tokens. Every head keeps the same number of tokens, so
// per-head selections (H2O, SnapKV) fit the codec's rectangular layout.
//
// What the Get handler must do with every payload it serves: call
// DescribeStoredPayload(payload, &info). For an ordinary block it returns the payload
// unchanged and fills info.codec from the blob header. For a compacted entry it fills
// info.positions with the sorted union of kept positions (the same list
// CompactResponse.positions carries), info.codec from the inner blob header and
// info.block_index = 0, and returns the inner codec blob. With PAYLOAD_FORMAT_RAW decode
// the returned span (not the whole payload): the raw result is
// [layer][k|v][kv_head][kept][head_dim]. With PAYLOAD_FORMAT_ENCODED send the whole stored
// payload (header + blob), so a client can recover per-head positions with
// kv::ParseCompactedEntry (kv::IsCompactedEntry tells the two kinds apart).
//
// Unknown keys: NOT_FOUND (not INVALID_ARGUMENT), because the request is well formed but
// names data the server does not hold; the worker should re-push the blocks.
//
// Thread-safety: RunCompact is thread-safe if `store` is (TieredStore is).
#ifndef KVTIER_SERVICE_COMPACT_H_
#define KVTIER_SERVICE_COMPACT_H_

#include <cstdint>
#include <span>

#include "absl/status/statusor.h"
#include "kvtier/v1/kvtier.pb.h"
#include "storage/tiered_store.h"

namespace kvtier::service {

// Compacts the stored sequence request.keys() of request.namespace_() and stores the
// compacted entry in `store` (see the file comment). Returns the entry key, kept tokens
// per head, source tokens, encoded bytes stored and the union of kept positions (sorted).
// Errors: INVALID_ARGUMENT (malformed request or parameters), NOT_FOUND (unknown
// namespace or a key that is not stored), FAILED_PRECONDITION (stored blob layout differs
// from the namespace), or the store's Put error. On any error nothing is stored.
absl::StatusOr<kvtier::v1::CompactResponse> RunCompact(kvtier::storage::TieredStore& store,
                                                       const kvtier::v1::CompactRequest& request);

// For the Get handler (see the file comment): returns the codec blob to decode for RAW
// and fills info->codec (and, for a compacted entry, info->positions and
// info->block_index). The span views `payload`. INVALID_ARGUMENT / DATA_LOSS if the
// payload is neither a valid blob nor a valid compacted entry.
absl::StatusOr<std::span<const uint8_t>> DescribeStoredPayload(
    std::span<const uint8_t> payload, kvtier::v1::GetBlockInfo* info);

}  // namespace kvtier::service

#endif  // KVTIER_SERVICE_COMPACT_H_
