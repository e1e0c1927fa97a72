// Who the cluster members are: the static peer list or the DNS-resolved headless
// Service, this node's ring identity, and the rendezvous ring over the member ids.
// docs/design.md §6 Cluster.
//
// Ring identity. Every node and client must name a node the same way, because the ring
// hashes node ids (client/rendezvous.h):
//   - static peers: the id of a peer is its "host:port" entry exactly as written; this
//     node is the entry equal to cluster.node_id, or else the entry whose host is one of
//     this machine's addresses and whose port is our port;
//   - DNS (Kubernetes headless Service): each resolved IP is named by its reverse DNS
//     name (CoreDNS answers "kvtier-0.kvtier-peers.ns.svc.cluster.local" for a
//     StatefulSet pod) plus ":peer_port", falling back to "ip:port". The id survives a pod
//     restart even though the IP changes, so a restarted pod owns its old keys again.
//     This node's id must be the same name: DefaultNodeId() (the canonical FQDN of the
//     host name, which the kubelet puts in /etc/hosts) gives exactly that.
#ifndef KVTIER_SERVICE_MEMBERSHIP_H_
#define KVTIER_SERVICE_MEMBERSHIP_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "protocol/rendezvous.h"
#include "kvtier/v1/kvtier.pb.h"

namespace kvtier::service {

// One cluster member. A value type.
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

// How to find the members. Validated by Membership::Create().
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
  // Returns this node's ring id: the static_peers entry naming this node if there is
  // one, else options.self_id. Fixed by Create().
  const std::string& self_id() const { return options_.self_id; }
  // Returns a counter that increases whenever the member list changes.
  uint64_t version() const;

 private:
  explicit Membership(MembershipOptions options);
  void Install(std::vector<Peer> peers);
  void RefreshLoop();

  MembershipOptions options_;
  std::unique_ptr<Resolver> owned_resolver_;
  Resolver* resolver_ = nullptr;
  common::Notification stop_;
  std::thread refresher_;

  mutable common::Mutex mu_;
  std::vector<Peer> peers_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const protocol::RendezvousRing> ring_ ABSL_GUARDED_BY(mu_);
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kvtier::service

#endif  // KVTIER_SERVICE_MEMBERSHIP_H_
