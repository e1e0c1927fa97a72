// The two forms of a kvtier.v1.LookupResponse: the verbose one (one BlockLocation per
// key, `blocks`) that every client understands, and the compact one a client asks for with
// LookupRequest.compact (tiers as one byte per key, owners and leases by index into a
// small holders table; the proto states the rules). At 2,048 keys on one node the compact
// form is about 2 KiB where the verbose one is 2,048 sub-messages each naming its owner.
// Also the LookupRequest encoder the C++ client uses, and the reader the server uses. Pure
// functions; thread-safe.
#ifndef KVTIER_PROTOCOL_LOOKUP_FORM_H_
#define KVTIER_PROTOCOL_LOOKUP_FORM_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "kvtier/v1/kvtier.pb.h"

namespace kvtier::protocol {

// The serialized kvtier.v1.LookupRequest for these fields (byte-for-byte what
// LookupRequest::SerializeAsString gives), written straight from `keys` into one buffer:
// a generated request would copy every key into its own heap string first.
// `prefetch`: LookupRequest.prefetch (a v1::Prefetch value; 0 = not written).
std::string EncodeLookupRequest(std::string_view ns, std::span<const std::string> keys,
                                bool local_only, uint64_t lease_ms, bool compact,
                                uint32_t prefetch = 0);
// The same for the keys keys[which[0]], keys[which[1]], ... in that order (a peer's share
// of a chain). REQUIRES: every entry of `which` < keys.size().
std::string EncodeLookupRequest(std::string_view ns, std::span<const std::string_view> keys,
                                std::span<const size_t> which, bool local_only, uint64_t lease_ms,
                                bool compact, uint32_t prefetch = 0);

// The fields of a kvtier.v1.LookupRequest, viewing the serialized bytes they came from
// (or the strings of a parsed message).
struct LookupRequestView {
  std::string_view ns;
  std::vector<std::string_view> keys;
  bool local_only = false;
  uint64_t lease_ms = 0;
  bool compact = false;
  uint32_t prefetch = 0;  // LookupRequest.prefetch (v1::Prefetch value)
};

// Reads a serialized LookupRequest into `out` without copying a key: what a server does
// per Lookup, where protobuf's parse allocates a string per key (a third of the server's
// CPU for a 2,048-key Lookup). Reads what protobuf would, for the fields above; unknown
// fields are skipped, as protobuf skips them. Returns false (out unspecified) when the
// bytes are not a well-formed message of that shape or hold anything it does not read
// the way protobuf does: a known field with another wire type, a namespace with a
// non-ASCII byte (protobuf checks UTF-8), a group. Parse those with protobuf instead.
bool ReadLookupRequest(std::string_view bytes, LookupRequestView* out);

// True when `response` carries the compact form (it has tiers or owners) rather than
// `blocks`.
bool IsCompactLookup(const v1::LookupResponse& response);

// Appends the compact form of one node's answer to `response` (whose blocks and compact
// fields are empty): key i is in tiers[i] and, when resident, held by `owner` under
// lease_ids[i] (0 = not leased). tiers.size() == lease_ids.size().
void EncodeCompactLookup(std::span<const v1::Tier> tiers, std::span<const uint64_t> lease_ids,
                         std::string_view owner, v1::LookupResponse* response);

// One key of an answer: its tier, the node named for it (its holder; a cluster answer
// also names an absent key's primary owner; empty = none) and the holder's lease on it
// (0 = none). `owner` must outlive the call it is passed to.
struct KeyAnswer {
  v1::Tier tier = v1::TIER_NONE;
  std::string_view owner;
  uint64_t lease_id = 0;
};

// Appends `answers` to `response` (whose blocks and compact fields are empty): in the
// compact form when `compact`, else as one BlockLocation per key (owner and lease_id as
// given). Either way ExpandLookup of the result gives the same blocks.
void EncodeLookupAnswers(std::span<const KeyAnswer> answers, bool compact,
                         v1::LookupResponse* response);

// OK for a verbose response and for a well-formed compact one; DATA_LOSS naming the
// field when owner_index is neither empty nor one per key or names a holder past the
// table, owner_lease_ids is neither empty nor one per holder, or resident keys have no
// holder (owners empty).
absl::Status CheckLookup(const v1::LookupResponse& response);

// Key i of a response that passed CheckLookup, in either form (i < LookupKeys): its tier,
// its owner (empty when none) and the owner's lease holding it (0 = none).
size_t LookupKeys(const v1::LookupResponse& response);
v1::Tier LookupTier(const v1::LookupResponse& response, size_t i);
std::string_view LookupOwner(const v1::LookupResponse& response, size_t i);
uint64_t LookupLeaseId(const v1::LookupResponse& response, size_t i);

// Rewrites a compact `response` into the verbose form: one BlockLocation per key in
// `blocks` and the compact fields cleared. A verbose response is left as is. CheckLookup's
// DATA_LOSS when it is malformed; `response` is then unchanged.
absl::Status ExpandLookup(v1::LookupResponse* response);

}  // namespace kvtier::protocol

#endif  // KVTIER_PROTOCOL_LOOKUP_FORM_H_
