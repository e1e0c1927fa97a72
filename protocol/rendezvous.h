// Rendezvous (highest-random-weight) hashing: which cluster nodes own a block.
//
// Every node and every client must place a block on the same nodes, so the hash is part
// of the wire contract ("rendezvous-v1") and pinned by golden values in
// tests/protocol/rendezvous_test.cc:
//
//   key_hash(ns, key)      = XXH3_64(u32le(len(ns)) || ns || key, seed 0)
//   node_hash(node_id)     = XXH3_64(node_id, seed 0)
//   score(ns, key, node)   = XXH3_64(u64le(key_hash), seed node_hash)
//
// The owners of (ns, key) are the R nodes with the highest score, best first; equal
// scores (practically never) are ordered by node id. Adding or removing a node moves
// only the keys that node gains or loses (about 1/n of them), which is what lets a
// restarted node take back exactly its old blocks.
#ifndef KVTIER_PROTOCOL_RENDEZVOUS_H_
#define KVTIER_PROTOCOL_RENDEZVOUS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvtier::protocol {

// Name of the placement scheme implemented here; advertise it if it ever changes.
inline constexpr std::string_view kRendezvousScheme = "rendezvous-v1";

// Returns the stable 64-bit hash of (namespace, key) used for placement.
uint64_t RendezvousKeyHash(std::string_view ns, std::string_view key);

// Returns the stable 64-bit hash of a node id.
uint64_t RendezvousNodeHash(std::string_view node_id);

// Returns the score of a key for a node (higher wins), from the two hashes above.
uint64_t RendezvousScore(uint64_t key_hash, uint64_t node_hash);

// An immutable set of node ids with their hashes precomputed. Thread-safe (immutable);
// cheap to rebuild whenever membership changes (O(n) hashes).
class RendezvousRing {
 public:
  // Builds a ring over `node_ids`; duplicates and empty ids are dropped and the rest are
  // kept sorted, so two rings built from the same set in any order are identical.
  explicit RendezvousRing(std::vector<std::string> node_ids);
  RendezvousRing() = default;

  // Returns the node ids, sorted. Indices returned by Owners() index this vector.
  const std::vector<std::string>& nodes() const { return nodes_; }
  size_t size() const { return nodes_.size(); }
  bool empty() const { return nodes_.empty(); }

  // Returns the indices of the min(r, size()) owners of (ns, key), highest score first.
  // r = 0 is treated as 1. Returns an empty vector when the ring is empty.
  std::vector<size_t> Owners(std::string_view ns, std::string_view key, size_t r) const;
  // Same as Owners() but from a precomputed RendezvousKeyHash().
  std::vector<size_t> OwnersOfHash(uint64_t key_hash, size_t r) const;
  // Same as OwnersOfHash() into `*out` (replacing its contents); allocates nothing once
  // `out` has the capacity, for loops over many keys.
  void OwnersOfHashInto(uint64_t key_hash, size_t r, std::vector<size_t>* out) const;

  // Returns the ids of the owners (see Owners()).
  std::vector<std::string> OwnerIds(std::string_view ns, std::string_view key, size_t r) const;

  // Returns the index of the primary (highest-score) owner of (ns, key).
  // REQUIRES: !empty().
  size_t Primary(std::string_view ns, std::string_view key) const;

  // Returns true if `node_id` is among the top-r owners of (ns, key).
  bool IsOwner(std::string_view node_id, std::string_view ns, std::string_view key, size_t r) const;

  // Groups keys by owner for routing a batch: returns one list per node (same order as
  // nodes()) of indices into `keys`, in input order; each key is listed under each of its
  // min(r, size()) owners. Returns an empty vector when the ring is empty.
  std::vector<std::vector<size_t>> GroupByOwner(std::string_view ns,
                                                const std::vector<std::string>& keys,
                                                size_t r) const;

  // Returns, per node (same order as nodes()), the fraction of the key space it holds a
  // copy of with replication factor r, divided by min(r, size()) so the shares sum to 1.
  // Estimated over `samples` deterministic synthetic keys (the estimate is exact in
  // expectation: HRW gives every node 1/n); used for ClusterStatus' ownership_share.
  std::vector<double> OwnershipShares(size_t r, size_t samples = 65536) const;

 private:
  std::vector<std::string> nodes_;
  std::vector<uint64_t> node_hashes_;
};

}  // namespace kvtier::protocol

#endif  // KVTIER_PROTOCOL_RENDEZVOUS_H_
