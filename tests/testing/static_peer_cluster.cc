#include "tests/testing/static_peer_cluster.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"

namespace kvtier::testing {

std::vector<int> PickFreePorts(int n) {
  // Every socket stays bound until all are picked, so the kernel hands out n distinct
  // ports (closing each before the next let it give the same port twice).
  std::vector<int> fds, ports;
  for (int i = 0; i < n; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) break;
    fds.push_back(fd);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      break;
    }
    ports.push_back(ntohs(addr.sin_port));
  }
  for (int fd : fds) close(fd);
  if (static_cast<int>(ports.size()) != n) ports.clear();
  return ports;
}

int PickFreePort() {
  const std::vector<int> ports = PickFreePorts(1);
  return ports.empty() ? 0 : ports[0];
}

absl::StatusOr<StaticPeerCluster> StaticPeerCluster::Create(const Options& options) {
  if (options.num_nodes < 1) return absl::InvalidArgumentError("num_nodes must be >= 1");
  if (options.root_dir.empty()) return absl::InvalidArgumentError("root_dir is empty");
  StaticPeerCluster c(options);
  c.ports_ = PickFreePorts(options.num_nodes);
  if (c.ports_.empty()) return absl::InternalError("could not pick free ports");
  for (int port : c.ports_) c.ids_.push_back(absl::StrCat("127.0.0.1:", port));
  c.nodes_.resize(options.num_nodes);
  return c;
}

std::string StaticPeerCluster::ConfigFor(int i) const {
  std::string peers;
  for (const std::string& id : ids_) absl::StrAppend(&peers, "  static_peers: \"", id, "\"\n");
  return absl::StrCat("listen_address: \"127.0.0.1\"\nport: ", ports_[i], "\ndata_dir: \"",
                      options_.root_dir, "/node", i,
                      "\"\nhot_capacity_bytes: 67108864\ncold_capacity_bytes: 1073741824\n"
                      "executor_threads: 2\n",
                      options_.extra_config,
                      i < static_cast<int>(options_.node_config.size()) ? options_.node_config[i]
                                                                        : "",
                      "cluster {\n  node_id: \"", ids_[i], "\"\n", peers,
                      "  replication_factor: ", options_.replication_factor,
                      "\n  peer_deadline_ms: ", options_.peer_deadline_ms, "\n",
                      options_.extra_cluster_config, "}\n");
}

absl::Status StaticPeerCluster::StartNode(int i) {
  const std::string path = absl::StrCat(options_.root_dir, "/node", i, ".textproto");
  std::ofstream(path) << ConfigFor(i);
  absl::StatusOr<ServerProcess> proc = ServerProcess::Start(
      options_.kvtierd.empty() ? KvtierdPath() : options_.kvtierd, {"--config", path});
  if (!proc.ok()) return proc.status();
  nodes_[i].emplace(std::move(*proc));
  return absl::OkStatus();
}

absl::Status StaticPeerCluster::StartAll() {
  for (int i = 0; i < options_.num_nodes; ++i) {
    if (absl::Status s = StartNode(i); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace kvtier::testing
