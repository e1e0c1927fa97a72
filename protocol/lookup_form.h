// The two forms of a kvtier.v1.LookupResponse: the verbose one (one BlockLocation per
// key, `blocks`) that every client understands, and the compact one a client asks for with
// LookupRequest.compact (tiers as one byte per key, holders by index into a small
// owners table; see the proto). At 2,048 keys the compact form is about 2 KiB where the
// verbose one is 2,048 sub-messages each carrying its owner's node id.
// Pure functions; thread-safe.
#ifndef KVTIER_PROTOCOL_LOOKUP_FORM_H_
#define KVTIER_PROTOCOL_LOOKUP_FORM_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "kvtier/v1/kvtier.pb.h"

namespace kvtier::protocol {

// The serialized kvtier.v1.LookupRequest for these fields (byte-for-byte what
// LookupRequest::SerializeAsString gives), written straight from `keys` into one buffer:
// a generated request would copy every key into its own heap string first.
std::string EncodeLookupRequest(std::string_view ns, std::span<const std::string> keys,
                                bool local_only, uint64_t lease_ms, bool compact);

// True when `response` carries the compact form (it has tiers or owners) rather than
// `blocks`.
bool IsCompactLookup(const v1::LookupResponse& response);

// Rewrites a verbose `response` into the compact form: `blocks` is cleared and tiers,
// owners, owner_lease_ids and owner_index are set (owner_index and owner_lease_ids left
// empty when every resident key has holder 0 / no key is leased). prefix_blocks,
// leased_blocks and lease_limit are kept. A response already compact is left as is.
void CompactLookup(v1::LookupResponse* response);

// OK for a verbose response and for a well-formed compact one; DATA_LOSS naming the
// field when owner_index is neither empty nor one per key, names a holder past the table,
// or owner_lease_ids is neither empty nor one per holder.
absl::Status CheckLookup(const v1::LookupResponse& response);

// Key i of a response that passed CheckLookup, in either form (i < LookupKeys):
// its tier, its owner (empty when absent) and the owner's lease holding it (0 = none).
size_t LookupKeys(const v1::LookupResponse& response);
v1::Tier LookupTier(const v1::LookupResponse& response, size_t i);
std::string_view LookupOwner(const v1::LookupResponse& response, size_t i);
uint64_t LookupLeaseId(const v1::LookupResponse& response, size_t i);

// Rewrites a compact `response` into the verbose form: one BlockLocation per key in
// `blocks` (owner and lease_id empty / 0 for TIER_NONE keys, as servers send them) and the
// compact fields cleared. A verbose response is left as is. CheckLookup's DATA_LOSS when
// it is malformed; `response` is then unchanged.
absl::Status ExpandLookup(v1::LookupResponse* response);

// Builds a compact response key by key; for servers answering from one node.
//   CompactLookupBuilder b(&response, node_id);
//   for (...) b.Add(tier, lease_id);
class CompactLookupBuilder {
 public:
  // Appends to `response` (not owned; it must outlive the builder), whose keys are all
  // held by `owner` when resident.
  CompactLookupBuilder(v1::LookupResponse* response, std::string_view owner);

  // Appends the next key: resident in `tier` (TIER_NONE: absent), held under `lease_id`
  // (0 = not leased; ignored for absent keys).
  void Add(v1::Tier tier, uint64_t lease_id);

 private:
  v1::LookupResponse* const response_;
  std::string* const tiers_;
  const std::string owner_;
  uint32_t keys_ = 0;           // keys added so far (including any already in response)
  uint64_t last_lease_id_ = 0;  // the last lease seen and its holder entry
  uint32_t last_holder_ = 0;
};

}  // namespace kvtier::protocol

#endif  // KVTIER_PROTOCOL_LOOKUP_FORM_H_
