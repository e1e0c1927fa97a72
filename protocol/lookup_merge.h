// The cluster-wide answer to a Lookup, assembled from the owners' answers about their
// shares of the chain. Both fan-outs use it: kvtierd's (PeerFanout, one member asks the
// others) and the ClusterClient's (the client asks every owner itself, one hop).
//
// Plan: each key goes to every one of its top-R owners (rendezvous placement over the
// ring), except a key the asking node already holds itself. Merge: of the copies reported
// for a key, the one at the lowest ring rank (the primary's) wins, then the faster tier.
// Result: the merged answer per key (a miss names the key's primary owner),
// prefix_blocks, leased_blocks and, when the lease stopped short, the first lease_limit
// reported.
//
// Thread-compatible: callers that merge answers from several threads hold their own lock.
#ifndef KVTIER_PROTOCOL_LOOKUP_MERGE_H_
#define KVTIER_PROTOCOL_LOOKUP_MERGE_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "kvtier/v1/kvtier.pb.h"
#include "protocol/lookup_form.h"
#include "protocol/rendezvous.h"

namespace kvtier::protocol {

class LookupMerge {
 public:
  // The asking node's own answer: key i is resident here in tiers[i] (entries missing at
  // the end count as TIER_NONE) under lease lease_ids[i] (0 = none; may be shorter), and
  // the bound that stopped its lease short, if one did.
  struct Local {
    std::string_view self;  // the asking node's ring id
    std::span<const v1::Tier> tiers;
    std::span<const uint64_t> lease_ids;
    v1::LeaseLimit lease_limit = v1::LEASE_LIMIT_NONE;
  };

  // Plans the Lookup of `keys` in namespace `ns` over `ring` with `replication` owners
  // per key. `local`, when given, is the asking node's own answer: the keys it holds are
  // answered (ring rank 0, owner local->self) and asked of nobody, and it is never asked
  // itself. `ring` (its node ids name the owners) and local->self must outlive this
  // object; the keys need live only during the call.
  LookupMerge(const RendezvousRing& ring, uint32_t replication, std::string_view ns,
              std::span<const std::string_view> keys, const Local* local = nullptr);

  // What to ask ring node `node` (an index into ring.nodes()): the indices of the keys it
  // owns that are still unanswered, in chain order, and at which ring rank it owns each.
  // Empty for a node with nothing to answer.
  struct Share {
    std::vector<size_t> index;
    std::vector<size_t> rank;
  };
  const std::vector<Share>& shares() const { return shares_; }

  // Takes the answer of ring node `node` about its share, or about the part of it from
  // shares()[node].index[first] on (a share asked in several calls): a LookupResponse, in
  // either form, listing those keys in that order. A malformed answer (not CheckLookup-
  // clean) adds nothing: its keys stay misses.
  void Add(size_t node, const v1::LookupResponse& answer, size_t first = 0);

  // The merged response (the compact form when `compact`). Call once, after the last Add.
  v1::LookupResponse Result(bool compact);

 private:
  const RendezvousRing& ring_;
  std::vector<Share> shares_;              // per ring node
  std::vector<std::string_view> primary_;  // primary owner per key ("" = none)
  std::vector<KeyAnswer> answers_;         // best copy per key
  std::vector<size_t> ranks_;              // ring rank of answers_[i].owner
  v1::LeaseLimit lease_limit_ = v1::LEASE_LIMIT_NONE;
};

}  // namespace kvtier::protocol

#endif  // KVTIER_PROTOCOL_LOOKUP_MERGE_H_
