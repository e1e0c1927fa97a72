// The cluster-wide Lookup (and ClusterStatus): asks the other owners of the blocks this
// node does not hold, merges their answers, and keeps dead peers off the request path.
// docs/design.md §6 Cluster.
#ifndef KVTIER_SERVICE_PEER_FANOUT_H_
#define KVTIER_SERVICE_PEER_FANOUT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/clock.h"
#include "common/mutex.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "kvtier/v1/kvtier.grpc.pb.h"
#include "service/membership.h"
#include "service/peer_health.h"

namespace kvtier::service {

struct FanoutOptions {
  uint32_t replication_factor = 1;    // owners per block (cluster.replication_factor)
  int64_t peer_deadline_ms = 200;     // per peer call and probe (cluster.peer_deadline_ms)
  uint32_t max_keys_per_call = 1024;  // batch size per peer call (<= server's max)
  int failures_to_unhealthy = 3;      // consecutive failed calls before a peer is down
  int64_t unhealthy_retry_ms = 1000;  // at most one probe of a down peer per interval
  // Channel credentials for peer calls; null = insecure. With TLS the peer's certificate
  // must name the peer's host (see StubsFor).
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  // Called on every outgoing ClientContext (e.g. to attach an auth token); may be null.
  std::function<void(grpc::ClientContext*)> prepare_context;
};

// Returns the FanoutOptions for a ServerConfig (replication factor, peer deadline, batch
// size capped by max_keys_per_request).
FanoutOptions FanoutOptionsFromConfig(const v1::ServerConfig& config);

// The channel and stubs for one peer address. Immutable once made, and shared: a call
// keeps its PeerStubs alive, so a membership change that forgets the address never
// invalidates a call in flight. The stubs are thread-safe.
struct PeerStubs {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::KvCache::Stub> kv;
  std::unique_ptr<v1::KvCacheAdmin::Stub> admin;
  std::unique_ptr<grpc::GenericStub> generic;  // grpc.health.v1.Health/Check probes
};

// Cluster-wide Lookup. Thread-safe; `membership` and `clock` must outlive it.
//
// Given the keys of one prefix chain and this node's own tier for each key, asks the
// other owners (top-R of the ring, this node excluded) about the keys this node does not
// hold, with kvtier.v1.KvCache/Lookup local_only=true, batched per peer, every call with
// peer_deadline_ms. Requires that a peer's local Lookup reports a tier for every
// requested key (not only up to the first miss), because a peer is asked about a
// non-contiguous subset of the chain. A dead, slow or erroring peer's blocks count as
// misses; its failure is recorded in health().
//
// Dead peers (PeerHealth): once a peer is down, lookups skip it without any per-call
// cost and count its blocks as misses (or take them from another replica). A lookup that
// finds a down peer whose probe is due sends it one grpc.health.v1.Health/Check in the
// background (peer_deadline_ms) and does not wait for it; an answer other than
// NOT_SERVING brings the peer back for the following lookups.
class PeerFanout {
 public:
  PeerFanout(Membership* membership, FanoutOptions options,
             common::Clock* clock = common::RealClock());
  ~PeerFanout();  // waits for calls and probes still in flight

  // Calls `done` exactly once with the merged answer: blocks[i].tier = the best tier
  // found for keys[i] (local first, then owners in ring order), blocks[i].owner = the
  // node holding it (or, on a miss, the key's primary owner); prefix_blocks = leading
  // keys found anywhere. `local_tiers` has one entry per key (TIER_NONE = not here;
  // missing entries count as TIER_NONE). `done` runs on the calling thread when no peer
  // call is needed, otherwise on a gRPC thread; it must not block.
  void LookupAsync(const std::string& ns, const std::vector<std::string>& keys,
                   const std::vector<v1::Tier>& local_tiers,
                   std::function<void(v1::LookupResponse)> done);

  // This node's own answer to a leasing Lookup: its tiers (as local_tiers above), per key
  // the lease holding it here (0 = none; missing entries count as 0) and the bound that
  // stopped its lease short, if one did.
  struct LocalAnswer {
    std::vector<v1::Tier> tiers;
    std::vector<uint64_t> lease_ids;
    v1::LeaseLimit lease_limit = v1::LEASE_LIMIT_NONE;
  };
  // As above, and with lease_ms > 0 each peer asked also leases the keys it holds of
  // those it is asked for (LookupRequest.lease_ms): blocks[i].lease_id is the
  // owner's lease holding keys[i] (0 = none), leased_blocks the leading keys leased and
  // lease_limit the first bound an owner reported. A peer's copy that loses the merge to
  // another replica keeps its lease until it expires. With `compact` the answer comes in
  // the compact form (protocol/lookup_form.h) instead of `blocks`, same content.
  // The keys (and ns) need to live only until LookupAsync returns.
  void LookupAsync(std::string_view ns, std::span<const std::string_view> keys,
                   const LocalAnswer& local, uint64_t lease_ms, bool compact,
                   std::function<void(v1::LookupResponse)> done);

  // Blocking form of LookupAsync (returns within about peer_deadline_ms). Do not call
  // from a gRPC reaction; use LookupAsync there.
  v1::LookupResponse Lookup(const std::string& ns, const std::vector<std::string>& keys,
                            const std::vector<v1::Tier>& local_tiers);

  // Fills `response` (node_id, replication_factor, peers with address, health, ownership
  // share and last-seen) from membership and health; per-node stats are left to the
  // caller (PeerStatus.stats).
  void FillClusterStatus(v1::ClusterStatusResponse* response) const;

  // Answers the admin ClusterStatus RPC: FillClusterStatus(), plus every member's stats
  // (this node's from `self_stats`; the others' via KvCacheAdmin/Stats with
  // peer_deadline_ms, in parallel, down peers included, so this also refreshes their
  // health). A peer that does not answer in time has no stats and its failure is
  // recorded in health(). `done` runs once, on the calling thread when there is no other
  // member, otherwise on a gRPC thread; it must not block.
  void ClusterStatusAsync(v1::StatsResponse self_stats,
                          std::function<void(v1::ClusterStatusResponse)> done);

  // Returns the stubs for a peer address; never null. With TLS credentials the channel
  // checks that the peer's certificate names the dialed host, or the host of the peer's
  // id in the membership when that is a DNS name. Channels are cached per address
  // and reused; the result stays valid for as long as the caller holds it, even if the
  // peer leaves the membership meanwhile.
  std::shared_ptr<PeerStubs> StubsFor(const std::string& address);

  // Blocks until no peer call or probe started so far is in flight (tests; shutdown).
  void AwaitIdle();

  PeerHealth& health() { return health_; }
  const FanoutOptions& options() const { return options_; }

 private:
  class LookupCall;  // one LookupAsync in progress (peer_fanout.cc)
  class StatusCall;  // one ClusterStatusAsync in progress

  // On a membership change, forgets departed peers' health and channels.
  void SyncMembership(const std::vector<Peer>& peers);
  // Sends one health probe to `peer` (the caller took the slot with TakeProbe).
  void Probe(const Peer& peer);
  // The name a peer's TLS certificate must carry when it differs from the host of
  // `address`: the host of the peer's id when that is a DNS name; else "".
  std::string TlsNameFor(const std::string& address) const;
  // Sets the peer deadline and runs prepare_context on a new call's context.
  void PrepareContext(grpc::ClientContext* ctx) const;
  void CallsStarted(int n);
  void CallFinished();

  Membership* const membership_;
  const FanoutOptions options_;
  PeerHealth health_;

  common::Mutex mu_;
  std::map<std::string, std::shared_ptr<PeerStubs>> channels_ ABSL_GUARDED_BY(mu_);
  // Departed peers' stubs still held by calls in flight. Released here, never by a
  // call's completion, because the last reference to a grpc::Channel must not be
  // dropped on one of its own callback threads.
  std::vector<std::shared_ptr<PeerStubs>> retired_ ABSL_GUARDED_BY(mu_);
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t membership_version_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kvtier::service

#endif  // KVTIER_SERVICE_PEER_FANOUT_H_
