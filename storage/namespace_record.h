// The namespace record: how a NamespaceOptions is persisted in the cold tier
// (ColdTier::PutNamespace). Little-endian u32 fields and u32-length-prefixed strings, in
// this order: version, name, tenant, model_id, layout (num_layers, num_kv_heads,
// head_dim, tokens_per_block, dtype, sink_tokens), codec, keep_sinks, write_through,
// cold_zstd, sink_blocks. The format only grows by appending fields under a new version.
// Pure functions; thread-safe.
#ifndef KVTIER_STORAGE_NAMESPACE_RECORD_H_
#define KVTIER_STORAGE_NAMESPACE_RECORD_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "storage/store_types.h"

namespace kvtier::storage {

// The version written first in every record.
inline constexpr uint32_t kNamespaceRecordVersion = 1;

// Returns the record of `ns` (not validated: call ns.Validate() first).
std::string SerializeNamespace(const NamespaceOptions& ns);
// Parses a record. DATA_LOSS for an unknown version, a truncated / overlong record, an
// enum or flag field out of range, or a spec that fails NamespaceOptions::Validate (the
// message says which).
absl::StatusOr<NamespaceOptions> ParseNamespace(std::string_view record);
// Returns the name of the first persisted field (other than `name`) in which a and b
// differ, e.g. "layout.head_dim", or "" when they are the same spec.
std::string FirstNamespaceDifference(const NamespaceOptions& a, const NamespaceOptions& b);

}  // namespace kvtier::storage

#endif  // KVTIER_STORAGE_NAMESPACE_RECORD_H_
