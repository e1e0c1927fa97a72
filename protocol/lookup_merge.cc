#include "protocol/lookup_merge.h"

#include <algorithm>

namespace kvtier::protocol {
namespace {

// Tier preference when two owners answer: hot beats cold beats none.
int TierRank(v1::Tier t) { return t == v1::TIER_HOT ? 2 : t == v1::TIER_COLD ? 1 : 0; }

}  // namespace

LookupMerge::LookupMerge(const RendezvousRing& ring, uint32_t replication, std::string_view ns,
                         std::span<const std::string_view> keys, const Local* local)
    : ring_(ring),
      shares_(ring.size()),
      primary_(keys.size()),
      answers_(keys.size()),
      ranks_(keys.size(), SIZE_MAX) {
  const std::vector<std::string>& nodes = ring.nodes();
  if (local != nullptr) lease_limit_ = local->lease_limit;
  std::vector<size_t> owners;
  for (size_t i = 0; i < keys.size(); ++i) {
    ring.OwnersOfHashInto(RendezvousKeyHash(ns, keys[i]), replication, &owners);
    if (!owners.empty()) primary_[i] = nodes[owners[0]];
    if (local != nullptr && i < local->tiers.size() && local->tiers[i] != v1::TIER_NONE) {
      answers_[i] = {local->tiers[i], local->self,
                     i < local->lease_ids.size() ? local->lease_ids[i] : 0};
      ranks_[i] = 0;
      continue;
    }
    for (size_t r = 0; r < owners.size(); ++r) {
      if (local != nullptr && nodes[owners[r]] == local->self) continue;
      shares_[owners[r]].index.push_back(i);
      shares_[owners[r]].rank.push_back(r);
    }
  }
}

void LookupMerge::Add(size_t node, const v1::LookupResponse& answer, size_t first) {
  if (node >= shares_.size() || !CheckLookup(answer).ok()) return;
  const Share& share = shares_[node];
  const std::string_view owner = ring_.nodes()[node];
  const size_t n =
      std::min(share.index.size() - std::min(first, share.index.size()), LookupKeys(answer));
  if (lease_limit_ == v1::LEASE_LIMIT_NONE) lease_limit_ = answer.lease_limit();
  for (size_t j = 0; j < n; ++j) {
    const v1::Tier t = LookupTier(answer, j);
    if (t == v1::TIER_NONE) continue;
    const size_t k = share.index[first + j];
    const size_t rank = share.rank[first + j];
    KeyAnswer& a = answers_[k];
    if (a.tier == v1::TIER_NONE || rank < ranks_[k] ||
        (rank == ranks_[k] && TierRank(t) > TierRank(a.tier))) {
      a = {t, owner, LookupLeaseId(answer, j)};
      ranks_[k] = rank;
    }
  }
}

v1::LookupResponse LookupMerge::Result(bool compact) {
  v1::LookupResponse out;
  uint32_t prefix = 0;
  uint32_t leased = 0;
  bool contiguous = true;
  bool leased_so_far = true;
  for (size_t i = 0; i < answers_.size(); ++i) {
    KeyAnswer& a = answers_[i];
    const bool found = a.tier != v1::TIER_NONE;
    if (!found) a.owner = primary_[i];  // a miss names the key's primary owner
    contiguous &= found;
    prefix += contiguous ? 1 : 0;
    leased_so_far &= contiguous && a.lease_id != 0;
    leased += leased_so_far ? 1 : 0;
  }
  EncodeLookupAnswers(answers_, compact, &out);
  out.set_prefix_blocks(prefix);
  out.set_leased_blocks(leased);
  if (leased < prefix) out.set_lease_limit(lease_limit_);
  return out;
}

}  // namespace kvtier::protocol
