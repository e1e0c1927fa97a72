// Cluster building blocks for kvtierd: who the peers are (Membership), whether they
// answer (PeerHealth), and a cluster-wide Lookup that asks the owners of the blocks this
// node does not hold (PeerFanout). DESIGN.md section 6.
//
// Ring identity. Every node and client must name a node the same way, because the ring
// hashes node ids (protocol/rendezvous.h):
//   - static peers: the id of a peer is its "host:port" entry exactly as written; this
//     node is the entry equal to cluster.node_id, or else the entry whose host is one of
//     this machine's addresses and whose port is our port;
//   - DNS (Kubernetes headless Service): each resolved IP is named by its reverse DNS
//     name (CoreDNS answers "kvtier-0.kvtier-peers.ns.svc.cluster.local" for a
//     StatefulSet pod) plus ":peer_port", falling back to "ip:port". The id survives a pod
//     restart even though the IP changes, so a restarted pod owns its old keys again.
//     This node's id must be the same name: DefaultNodeId() (the canonical FQDN of the
//     host name, which the kubelet puts in /etc/hosts) gives exactly that.
#ifndef KVTIER_SERVICE_CLUSTER_H_
#define KVTIER_SERVICE_CLUSTER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "protocol/rendezvous.h"
#include "common/clock.h"
#include "grpcpp/grpcpp.h"
#include "kvtier/v1/kvtier.grpc.pb.h"

namespace kvtier::service {

// One cluster member.
struct Peer {
  std::string id;       // ring identity (see file comment)
  std::string address;  // "host:port" to dial
  bool self = false;    // this node
  bool operator==(const Peer& o) const {
    return id == o.id && address == o.address && self == o.self;
  }
};

// Name resolution, injectable for tests. Implementations must be thread-safe.
class Resolver {
 public:
  virtual ~Resolver() = default;
  // Returns the IPv4/IPv6 addresses (numeric text) of `host`, deduplicated.
  // NOT_FOUND when the name does not exist or has no address, UNAVAILABLE on a
  // temporary failure.
  virtual absl::StatusOr<std::vector<std::string>> Resolve(const std::string& host) = 0;
  // Returns the reverse-DNS name of a numeric address (no trailing dot), or NOT_FOUND.
  virtual absl::StatusOr<std::string> ReverseLookup(const std::string& ip) = 0;
  // Returns true if `ip` is an address of this machine.
  virtual bool IsLocalAddress(const std::string& ip) = 0;
};

// Returns the system resolver (getaddrinfo / getnameinfo / getifaddrs). Never null.
std::unique_ptr<Resolver> NewSystemResolver();

// Returns "<canonical FQDN of this host>:<port>" (falls back to the plain host name).
// Use it as the default cluster.node_id: in a StatefulSet pod it equals the reverse-DNS
// name other nodes compute for this pod.
std::string DefaultNodeId(uint32_t port);

// Splits "host:port" or "[v6]:port". INVALID_ARGUMENT naming `field` when malformed.
absl::Status SplitHostPort(const std::string& address, const std::string& field, std::string* host,
                           uint32_t* port);

// Validates the cluster section of a ServerConfig (for ValidateConfig / --check-config):
// static_peers entries are host:port, static_peers and peer_dns are not both set,
// peer_port <= 65535, replication_factor <= number of static peers when the list is
// given. INVALID_ARGUMENT naming the field.
absl::Status ValidateClusterConfig(const v1::ClusterConfig& config);

struct MembershipOptions {
  std::string self_id;     // this node's ring id (cluster.node_id or DefaultNodeId())
  uint32_t self_port = 0;  // the port this node serves on
  // Exactly one of static_peers / peer_dns; neither = a single-node cluster of self.
  std::vector<std::string> static_peers;  // "host:port", this node included
  std::string peer_dns;                   // headless-Service name, resolved periodically
  uint32_t peer_port = 0;                 // port of DNS-found peers; 0 = self_port
  int64_t dns_refresh_ms = 5000;
  Resolver* resolver = nullptr;  // not owned; null = an internal system resolver
};

// Returns the MembershipOptions for a ServerConfig cluster section. `self_id`:
// cluster.node_id if set, else DefaultNodeId(port); `port`: the port actually bound.
MembershipOptions MembershipOptionsFromConfig(const v1::ClusterConfig& config, std::string self_id,
                                              uint32_t port);

// The current member list and ring. Thread-safe. In DNS mode a background thread
// re-resolves every dns_refresh_ms (Start()); a failed resolution keeps the previous
// list (a DNS hiccup never empties the ring). This node is always a member.
class Membership {
 public:
  // Validates options (INVALID_ARGUMENT naming the field: empty self_id, malformed
  // static peer, both static_peers and peer_dns) and performs a first resolution; a DNS
  // failure at this point is not an error (the list starts as just this node).
  static absl::StatusOr<std::unique_ptr<Membership>> Create(MembershipOptions options);
  ~Membership();  // stops the refresh thread
  Membership(const Membership&) = delete;
  Membership& operator=(const Membership&) = delete;

  // Starts the DNS refresh thread (no-op for static membership). Call once.
  void Start();

  // Resolves peer_dns now and installs the result; returns the resolver's error (the
  // previous list is kept). OK and no-op for static membership.
  absl::Status Refresh();

  // Returns the members sorted by id (this node included, marked self).
  std::vector<Peer> peers() const;
  // Returns the ring over the member ids; never null. Cheap (shared, immutable).
  std::shared_ptr<const protocol::RendezvousRing> ring() const;
  const std::string& self_id() const { return options_.self_id; }
  // Returns a counter that increases whenever the member list changes.
  uint64_t version() const;
  bool dns_mode() const { return !options_.peer_dns.empty(); }

 private:
  explicit Membership(MembershipOptions options);
  void Install(std::vector<Peer> peers);
  void RefreshLoop();

  MembershipOptions options_;
  std::unique_ptr<Resolver> owned_resolver_;
  Resolver* resolver_ = nullptr;
  absl::Notification stop_;
  std::thread refresher_;

  mutable absl::Mutex mu_;
  std::vector<Peer> peers_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const protocol::RendezvousRing> ring_ ABSL_GUARDED_BY(mu_);
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 0;
};

// Per-peer call outcomes. A peer is unhealthy after `failures_to_unhealthy` consecutive
// failed calls and healthy again after one success; calls to an unhealthy peer are
// skipped except one probe per `retry_ms`. Thread-safe.
class PeerHealth {
 public:
  PeerHealth(common::Clock* clock, int failures_to_unhealthy = 3, int64_t retry_ms = 1000);

  void RecordSuccess(const std::string& id);
  void RecordFailure(const std::string& id);
  // Returns false for an unhealthy peer (unknown peers are healthy).
  bool IsHealthy(const std::string& id) const;
  // Returns true if a call to `id` should be made now: healthy, or unhealthy and due for
  // a probe (then the probe slot is taken, so concurrent callers do not all probe).
  bool ShouldCall(const std::string& id);
  // Returns ms since the last successful call, or -1 if never.
  int64_t LastSeenMsAgo(const std::string& id) const;
  // Drops peers that are no longer members.
  void Retain(const std::vector<Peer>& members);

 private:
  struct State {
    int consecutive_failures = 0;
    int64_t last_success_ms = -1;
    int64_t next_probe_ms = 0;
  };
  common::Clock* const clock_;
  const int failures_to_unhealthy_;
  const int64_t retry_ms_;
  mutable absl::Mutex mu_;
  std::map<std::string, State> peers_ ABSL_GUARDED_BY(mu_);
};

struct FanoutOptions {
  uint32_t replication_factor = 1;    // owners per block (cluster.replication_factor)
  int64_t peer_deadline_ms = 200;     // per peer call (cluster.peer_deadline_ms)
  uint32_t max_keys_per_call = 1024;  // batch size per peer call (<= server's max)
  int failures_to_unhealthy = 3;
  int64_t unhealthy_retry_ms = 1000;
  // Channel credentials for peer calls; null = insecure.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  // Called on every outgoing ClientContext (e.g. to attach an auth token); may be null.
  std::function<void(grpc::ClientContext*)> prepare_context;
};

// Returns the FanoutOptions for a ServerConfig (replication factor, peer deadline, batch
// size capped by max_keys_per_request).
FanoutOptions FanoutOptionsFromConfig(const v1::ServerConfig& config);

// Cluster-wide Lookup. Thread-safe; `membership` and `clock` must outlive it.
//
// Given the keys of one prefix chain and this node's own tier for each key, asks the
// other owners (top-R of the ring, this node excluded) about the keys this node does not
// hold, with kvtier.v1.KvCache/Lookup local_only=true, batched per peer, every call with
// peer_deadline_ms. Requires that a peer's local Lookup reports a tier for every
// requested key (not only up to the first miss), because a peer is asked about a
// non-contiguous subset of the chain. A dead, slow or erroring peer's blocks count as
// misses; its failure is recorded in health().
class PeerFanout {
 public:
  PeerFanout(Membership* membership, FanoutOptions options,
             common::Clock* clock = common::RealClock());
  ~PeerFanout();  // waits for calls still in flight

  // Calls `done` exactly once with the merged answer: blocks[i].tier = the best tier
  // found for keys[i] (local first, then owners in ring order), blocks[i].owner = the
  // node holding it (or, on a miss, the key's primary owner); prefix_blocks = leading
  // keys found anywhere. `local_tiers` has one entry per key (TIER_NONE = not here;
  // missing entries count as TIER_NONE). `done` runs on the calling thread when no peer
  // call is needed, otherwise on a gRPC thread; it must not block.
  void LookupAsync(const std::string& ns, const std::vector<std::string>& keys,
                   const std::vector<v1::Tier>& local_tiers,
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
  // peer_deadline_ms, in parallel). A peer that does not answer in time has no stats and
  // its failure is recorded in health(). `done` runs once, on the calling thread when
  // there is no other member, otherwise on a gRPC thread; it must not block.
  void ClusterStatusAsync(v1::StatsResponse self_stats,
                          std::function<void(v1::ClusterStatusResponse)> done);

  // Returns the stub for a peer address. Channels are cached and reused; a departed
  // peer's channel is dropped at a membership change when no call is in flight, so do
  // not keep the pointer beyond the call it was taken for.
  v1::KvCache::Stub* StubFor(const std::string& address);
  v1::KvCacheAdmin::Stub* AdminStubFor(const std::string& address);

  PeerHealth& health() { return health_; }
  const FanoutOptions& options() const { return options_; }

 private:
  struct Channel {
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<v1::KvCache::Stub> stub;
    std::unique_ptr<v1::KvCacheAdmin::Stub> admin;
  };
  Channel* ChannelFor(const std::string& address);
  // On a membership change, forgets departed peers' health and channels.
  void SyncMembership(const std::vector<Peer>& peers);
  void CallStarted();
  void CallFinished();

  Membership* const membership_;
  const FanoutOptions options_;
  common::Clock* const clock_;
  PeerHealth health_;

  absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<Channel>> channels_ ABSL_GUARDED_BY(mu_);
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t membership_version_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kvtier::service

#endif  // KVTIER_SERVICE_CLUSTER_H_
