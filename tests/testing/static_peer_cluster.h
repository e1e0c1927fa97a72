// N real kvtierd processes on 127.0.0.1 forming one cluster through a static peer list
// (cluster.static_peers in the textproto config, service/config.h).
//
// Peers must know each other's addresses before they start, so the ports are picked up
// front with PickFreePorts() instead of `--port 0`.
#ifndef KVTIER_TESTS_TESTING_STATIC_PEER_CLUSTER_H_
#define KVTIER_TESTS_TESTING_STATIC_PEER_CLUSTER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tests/testing/server_process.h"

namespace kvtier::testing {

// Returns a loopback TCP port that was free a moment ago (the kernel picks it), or 0 when
// no socket could be bound.
int PickFreePort();
// Returns n distinct such ports, or none when they could not all be bound.
std::vector<int> PickFreePorts(int n);

// Starts, restarts and stops the nodes of a static-peer cluster. Thread-compatible. The
// destructor SIGKILLs every running node.
class StaticPeerCluster {
 public:
  struct Options {
    // The kvtierd binary; empty = KvtierdPath().
    std::string kvtierd;
    int num_nodes = 3;
    uint32_t replication_factor = 1;
    int peer_deadline_ms = 300;
    // Node i keeps its data in `root_dir`/node<i> and its config in
    // `root_dir`/node<i>.textproto. Must exist; not owned (not removed).
    std::string root_dir;
    // Config text placed before the `cluster { ... }` block (e.g. `namespaces { ... }`);
    // each line must end with '\n'.
    std::string extra_config;
    // Per-node config text placed after extra_config (node i gets node_config[i] when
    // there is one, e.g. its own `tls { ... }`); each line must end with '\n'.
    std::vector<std::string> node_config;
    // Config text placed inside the `cluster { ... }` block (e.g. `peer_token_file: ...`);
    // each line must end with '\n'.
    std::string extra_cluster_config;
  };

  // Picks one free port per node; starts nothing. INTERNAL when no port could be picked,
  // INVALID_ARGUMENT when num_nodes < 1 or root_dir is empty.
  static absl::StatusOr<StaticPeerCluster> Create(const Options& options);

  StaticPeerCluster(StaticPeerCluster&&) = default;
  StaticPeerCluster& operator=(StaticPeerCluster&&) = default;

  int size() const { return options_.num_nodes; }
  // "127.0.0.1:PORT" of each node: its node_id and its address.
  const std::vector<std::string>& ids() const { return ids_; }
  int port(int i) const { return ports_[i]; }

  // The textproto config of node i: listen address, port, data dir, 64 MiB hot, 1 GiB
  // cold, 2 executor threads, extra_config, node_config[i], then the cluster block
  // (node_id, every node as a static peer, replication factor, peer deadline).
  std::string ConfigFor(int i) const;

  // Writes node i's config and starts it (again, after a Kill: same port and data dir).
  // Returns ServerProcess::Start's error.
  absl::Status StartNode(int i);
  // StartNode for every node in order; stops at the first error.
  absl::Status StartAll();

  // Node i's process; node i must have been started.
  ServerProcess& node(int i) { return *nodes_[i]; }

 private:
  explicit StaticPeerCluster(const Options& options) : options_(options) {}

  Options options_;
  std::vector<int> ports_;
  std::vector<std::string> ids_;
  std::vector<std::optional<ServerProcess>> nodes_;
};

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_TESTING_STATIC_PEER_CLUSTER_H_
