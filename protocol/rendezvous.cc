#include "protocol/rendezvous.h"

// Inlined: a ring scores every key once per node, and XXH3 of a few bytes is cheaper
// than the call into the shared library (half the time of a 2,048-key, 5-node Lookup
// merge). Same functions, same values (golden tests in rendezvous_test.cc).
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <utility>

namespace kvtier::protocol {
namespace {

void PutLe32(uint32_t v, unsigned char* out) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<unsigned char>(v >> (8 * i));
}

void PutLe64(uint64_t v, unsigned char* out) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<unsigned char>(v >> (8 * i));
}

}  // namespace

uint64_t RendezvousKeyHash(std::string_view ns, std::string_view key) {
  // Length-prefix the namespace so ("ab", "c") and ("a", "bc") never collide by
  // construction. Namespaces are <= 128 chars and keys <= 32 bytes, so the stack buffer
  // covers every valid input; longer inputs take the streaming path.
  unsigned char len[4];
  PutLe32(static_cast<uint32_t>(ns.size()), len);
  unsigned char buf[256];
  const size_t total = 4 + ns.size() + key.size();
  if (total <= sizeof(buf)) {
    std::memcpy(buf, len, 4);
    if (!ns.empty()) std::memcpy(buf + 4, ns.data(), ns.size());
    if (!key.empty()) std::memcpy(buf + 4 + ns.size(), key.data(), key.size());
    return XXH3_64bits(buf, total);
  }
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  XXH3_64bits_update(state, len, 4);
  XXH3_64bits_update(state, ns.data(), ns.size());
  XXH3_64bits_update(state, key.data(), key.size());
  const uint64_t h = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return h;
}

uint64_t RendezvousNodeHash(std::string_view node_id) {
  return XXH3_64bits(node_id.data(), node_id.size());
}

uint64_t RendezvousScore(uint64_t key_hash, uint64_t node_hash) {
  unsigned char buf[8];
  PutLe64(key_hash, buf);
  return XXH3_64bits_withSeed(buf, sizeof(buf), node_hash);
}

RendezvousRing::RendezvousRing(std::vector<std::string> node_ids) {
  node_ids.erase(std::remove(node_ids.begin(), node_ids.end(), std::string()), node_ids.end());
  std::sort(node_ids.begin(), node_ids.end());
  node_ids.erase(std::unique(node_ids.begin(), node_ids.end()), node_ids.end());
  nodes_ = std::move(node_ids);
  node_hashes_.reserve(nodes_.size());
  for (const std::string& id : nodes_) node_hashes_.push_back(RendezvousNodeHash(id));
}

std::vector<size_t> RendezvousRing::OwnersOfHash(uint64_t key_hash, size_t r) const {
  std::vector<size_t> out;
  OwnersOfHashInto(key_hash, r, &out);
  return out;
}

void RendezvousRing::OwnersOfHashInto(uint64_t key_hash, size_t r, std::vector<size_t>* out) const {
  const size_t n = nodes_.size();
  out->clear();
  if (n == 0) return;
  r = std::min(std::max<size_t>(r, 1), n);
  // r selection passes (r is the replication factor: small), so no scratch vector.
  // Highest score first; on a tie the smaller index (= smaller node id, nodes_ is
  // sorted) wins, so every caller agrees. A pass only takes nodes ranked below the
  // previous pick's (score, index).
  uint64_t prev_score = 0;
  size_t prev_index = 0;
  for (size_t pick = 0; pick < r; ++pick) {
    bool found = false;
    uint64_t best_score = 0;
    size_t best = 0;
    for (size_t i = 0; i < n; ++i) {
      const uint64_t s = RendezvousScore(key_hash, node_hashes_[i]);
      const bool after_prev = pick == 0 || s < prev_score || (s == prev_score && i > prev_index);
      if (after_prev && (!found || s > best_score)) {  // strict: ties keep the smaller index
        found = true;
        best_score = s;
        best = i;
      }
    }
    out->push_back(best);
    prev_score = best_score;
    prev_index = best;
  }
}

std::vector<size_t> RendezvousRing::Owners(std::string_view ns, std::string_view key,
                                           size_t r) const {
  return OwnersOfHash(RendezvousKeyHash(ns, key), r);
}

std::vector<std::string> RendezvousRing::OwnerIds(std::string_view ns, std::string_view key,
                                                  size_t r) const {
  std::vector<std::string> out;
  for (size_t i : Owners(ns, key, r)) out.push_back(nodes_[i]);
  return out;
}

size_t RendezvousRing::Primary(std::string_view ns, std::string_view key) const {
  const uint64_t kh = RendezvousKeyHash(ns, key);
  size_t best = 0;
  uint64_t best_score = RendezvousScore(kh, node_hashes_[0]);
  for (size_t i = 1; i < nodes_.size(); ++i) {
    const uint64_t s = RendezvousScore(kh, node_hashes_[i]);
    if (s > best_score) {  // strict: ties keep the smaller index, as in OwnersOfHash
      best = i;
      best_score = s;
    }
  }
  return best;
}

bool RendezvousRing::IsOwner(std::string_view node_id, std::string_view ns, std::string_view key,
                             size_t r) const {
  for (size_t i : Owners(ns, key, r)) {
    if (nodes_[i] == node_id) return true;
  }
  return false;
}

std::vector<std::vector<size_t>> RendezvousRing::GroupByOwner(std::string_view ns,
                                                              const std::vector<std::string>& keys,
                                                              size_t r) const {
  if (nodes_.empty()) return {};
  std::vector<std::vector<size_t>> groups(nodes_.size());
  for (size_t k = 0; k < keys.size(); ++k) {
    for (size_t i : Owners(ns, keys[k], r)) groups[i].push_back(k);
  }
  return groups;
}

std::vector<double> RendezvousRing::OwnershipShares(size_t r, size_t samples) const {
  const size_t n = nodes_.size();
  std::vector<double> shares(n, 0.0);
  if (n == 0 || samples == 0) return shares;
  const size_t copies = std::min(r == 0 ? size_t{1} : r, n);
  std::vector<uint64_t> counts(n, 0);
  for (size_t s = 0; s < samples; ++s) {
    // Synthetic key hashes: a fixed, well-mixed sequence, so the estimate is the same on
    // every node and every run.
    unsigned char buf[8];
    PutLe64(s, buf);
    const uint64_t kh = XXH3_64bits_withSeed(buf, sizeof(buf), 0x6b767469657221ULL);
    for (size_t i : OwnersOfHash(kh, copies)) ++counts[i];
  }
  for (size_t i = 0; i < n; ++i) {
    shares[i] = static_cast<double>(counts[i]) / static_cast<double>(samples * copies);
  }
  return shares;
}

}  // namespace kvtier::protocol
