// Renders deploy/base and every overlay with `kubectl kustomize` and checks what would
// otherwise only break at deploy time: the kvtierd config in the ConfigMap parses as a
// kvtier.v1.ServerConfig (and passes `kvtierd --check-config` once kvtierd is built), the
// container, Service and probe ports equal the config's ports, the headless Service is
// the StatefulSet's serviceName and the config's peer DNS name, memory covers the hot
// tier, the volume covers the cold tier, the data dir is on the volume, selectors match.
// The same-node shared-memory socket (--shm-socket, else shm_socket, else
// <data_dir>/kvtierd.sock) must be on a writable volume; when it is on a hostPath (the
// deploy/components/same-node-shm component, rendered on top of overlays/prod) the pods
// also need required anti-affinity per node and an init container handing the node
// directory to kvtierd's uid:gid. With TLS (deploy/components/tls on top of overlays/prod)
// the certificate files, their cert-manager Certificate and the exec probes are checked
// too (tests/deploy/tls_checks.h), and --check-config runs on test certificates.
//
// Skips (GTEST_SKIP) when kubectl is not installed.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "kvtier/v1/kvtier.pb.h"
#include "storage/write_back.h"
#include "tests/deploy/mini_yaml.h"
#include "tests/deploy/tls_checks.h"
#include "tests/testing/server_process.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_certs.h"

namespace kvtier::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr uint64_t kMiB = 1024 * 1024;

std::string SourceDir() {
  const char* dir = std::getenv("KVTIER_SOURCE_DIR");
  return dir != nullptr ? dir : ".";
}

bool HaveKubectl() { return std::system("command -v kubectl >/dev/null 2>&1") == 0; }

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

CommandResult RunCommand(const std::string& command) {
  CommandResult result;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return result;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) result.output.append(buf, n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

// Parses a Kubernetes quantity ("17920Mi", "1Gi", "500M", "1024") into bytes.
std::optional<uint64_t> ParseQuantity(const std::string& q) {
  static const std::vector<std::pair<std::string, uint64_t>> kSuffixes = {
      {"Ki", 1ULL << 10}, {"Mi", 1ULL << 20}, {"Gi", 1ULL << 30},   {"Ti", 1ULL << 40},
      {"k", 1000ULL},     {"M", 1000000ULL},  {"G", 1000000000ULL}, {"T", 1000000000000ULL}};
  for (const auto& [suffix, mult] : kSuffixes) {
    if (absl::EndsWith(q, suffix)) {
      uint64_t v;
      if (!absl::SimpleAtoi(q.substr(0, q.size() - suffix.size()), &v)) return std::nullopt;
      return v * mult;
    }
  }
  uint64_t v;
  if (!absl::SimpleAtoi(q, &v)) return std::nullopt;
  return v;
}

int ScalarInt(const YamlNode* node, int fallback = -1) {
  int v;
  if (node == nullptr || !node->is_scalar() || !absl::SimpleAtoi(node->scalar, &v)) {
    return fallback;
  }
  return v;
}

// True if every label in `selector` (a map node) is in `labels`.
bool SelectorMatches(const YamlNode* selector, const YamlNode* labels) {
  if (selector == nullptr || !selector->is_map() || selector->map.empty()) return false;
  if (labels == nullptr || !labels->is_map()) return false;
  for (const auto& [k, v] : selector->map) {
    const YamlNode* l = labels->Child(k);
    if (l == nullptr || l->scalar != v.scalar) return false;
  }
  return true;
}

struct Rendering {
  std::vector<YamlNode> docs;
  std::string config_text;  // the kvtierd config extracted from the ConfigMap
  kvtier::v1::ServerConfig config;
  int replicas = -1;
  std::vector<std::string> args;  // kvtierd's container args
  // The shared-memory socket kvtierd will create ("off" or empty when none), whether it
  // came from --shm-socket, and the volume its directory is on.
  std::string shm_socket;
  bool shm_socket_from_flag = false;
  std::string shm_mount_path;   // mountPath of that volume
  std::string shm_volume_type;  // "hostPath", "emptyDir", "persistentVolumeClaim", ...
  bool required_hostname_anti_affinity = false;
  TlsRendering tls;
};

// What a rendering must additionally have.
struct Expect {
  // --shm-socket names a socket directly in a hostPath volume's mountPath.
  bool same_node_shm = false;
  // kvtierd serves TLS (--tls-cert ...).
  bool tls = false;
};

const YamlNode* FindDoc(const std::vector<YamlNode>& docs, std::string_view kind,
                        std::string_view name = "") {
  for (const YamlNode& d : docs) {
    if (d.Str("kind") == kind && (name.empty() || d.Str("metadata.name") == name)) return &d;
  }
  return nullptr;
}

std::string Dirname(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// Checks one rendering; returns the problems found (empty = consistent) and fills `out`.
std::vector<std::string> CheckDeployment(const std::string& yaml, Rendering* out,
                                         Expect expect = {}) {
  std::vector<std::string> problems;
  auto problem = [&](std::string p) { problems.push_back(std::move(p)); };
  absl::StatusOr<std::vector<YamlNode>> docs = ParseYamlDocuments(yaml);
  if (!docs.ok()) return {absl::StrCat("rendered yaml: ", docs.status().ToString())};
  out->docs = std::move(*docs);
  const std::vector<YamlNode>& all = out->docs;

  const YamlNode* sts = FindDoc(all, "StatefulSet");
  if (sts == nullptr) return {"no StatefulSet rendered"};
  out->replicas = ScalarInt(sts->Get("spec.replicas"));
  const std::string ns = sts->Str("metadata.namespace");
  const YamlNode* pod = sts->Get("spec.template.spec");
  const YamlNode* pod_labels = sts->Get("spec.template.metadata.labels");
  if (pod == nullptr) return {"StatefulSet has no pod template"};
  if (!SelectorMatches(sts->Get("spec.selector.matchLabels"), pod_labels)) {
    problem("StatefulSet selector does not match its pod labels");
  }

  const YamlNode* container = nullptr;
  if (const YamlNode* cs = pod->Child("containers"); cs != nullptr && cs->is_seq()) {
    for (const YamlNode& c : cs->seq) {
      if (c.Str("name") == "kvtierd") container = &c;
    }
  }
  if (container == nullptr) return {"no container named kvtierd"};

  // Container ports by name.
  std::map<std::string, int> ports;
  if (const YamlNode* ps = container->Child("ports"); ps != nullptr && ps->is_seq()) {
    for (const YamlNode& p : ps->seq) ports[p.Str("name")] = ScalarInt(p.Child("containerPort"));
  }

  // The config: --config PATH must be a key of the ConfigMap mounted at dirname(PATH).
  std::string config_path;
  std::string shm_flag;
  bool have_shm_flag = false;
  if (const YamlNode* args = container->Child("args"); args != nullptr && args->is_seq()) {
    for (const YamlNode& a : args->seq) out->args.push_back(a.scalar);
    for (size_t i = 0; i < args->seq.size(); ++i) {
      const std::string& a = args->seq[i].scalar;
      if (a == "--config" && i + 1 < args->seq.size()) config_path = args->seq[i + 1].scalar;
      if (absl::StartsWith(a, "--config=")) config_path = a.substr(9);
      if (a == "--shm-socket" && i + 1 < args->seq.size()) {
        have_shm_flag = true;
        shm_flag = args->seq[i + 1].scalar;
      }
      if (absl::StartsWith(a, "--shm-socket=")) {
        have_shm_flag = true;
        shm_flag = a.substr(13);
      }
    }
  }
  if (config_path.empty()) return {"kvtierd args have no --config"};
  const size_t slash = config_path.rfind('/');
  const std::string config_dir = config_path.substr(0, slash);
  const std::string config_key = config_path.substr(slash + 1);
  std::map<std::string, std::string> mounts;    // volume name -> mountPath
  std::map<std::string, bool> mount_read_only;  // volume name -> readOnly
  if (const YamlNode* vm = container->Child("volumeMounts"); vm != nullptr && vm->is_seq()) {
    for (const YamlNode& m : vm->seq) {
      mounts[m.Str("name")] = m.Str("mountPath");
      mount_read_only[m.Str("name")] = m.Str("readOnly") == "true";
    }
  }
  std::string configmap_name;
  if (const YamlNode* vols = pod->Child("volumes"); vols != nullptr && vols->is_seq()) {
    for (const YamlNode& v : vols->seq) {
      if (mounts[v.Str("name")] == config_dir && v.Get("configMap") != nullptr) {
        configmap_name = v.Str("configMap.name");
      }
    }
  }
  if (configmap_name.empty()) return {absl::StrCat("no ConfigMap volume mounted at ", config_dir)};
  const YamlNode* cm = FindDoc(all, "ConfigMap", configmap_name);
  if (cm == nullptr) return {absl::StrCat("ConfigMap ", configmap_name, " is not rendered")};
  const YamlNode* data = cm->Get("data");
  const YamlNode* text = data != nullptr ? data->Child(config_key) : nullptr;
  if (text == nullptr || !text->is_scalar()) {
    return {absl::StrCat("ConfigMap ", configmap_name, " has no key ", config_key)};
  }
  out->config_text = text->scalar;
  if (!google::protobuf::TextFormat::ParseFromString(out->config_text, &out->config)) {
    return {"config does not parse as kvtier.v1.ServerConfig"};
  }
  const kvtier::v1::ServerConfig& cfg = out->config;

  // Ports: the file's port (default 50051) is the gRPC port; metrics must be on.
  const int grpc_port = cfg.port() != 0 ? static_cast<int>(cfg.port()) : 50051;
  const std::string& listen = cfg.listen_address();
  if (listen != "0.0.0.0" && listen != "::" && listen != "[::]") {
    problem(absl::StrCat("listen_address \"", listen,
                         "\" is not reachable by probes and peers (use 0.0.0.0)"));
  }
  if (ports["grpc"] != grpc_port) {
    problem(absl::StrCat("container port grpc=", ports["grpc"], " but config port=", grpc_port));
  }
  if (cfg.metrics_port() == 0) {
    problem("config metrics_port is 0 (off) but the manifests expose a metrics port");
  } else if (ports["metrics"] != static_cast<int>(cfg.metrics_port())) {
    problem(absl::StrCat("container port metrics=", ports["metrics"],
                         " but config metrics_port=", cfg.metrics_port()));
  }
  const bool tls = std::find(out->args.begin(), out->args.end(), "--tls-cert") != out->args.end();
  // KV events: a bound endpoint's port (tcp://*:PORT) is the container port of that name.
  const auto bound_port = [](const std::string& endpoint) {
    int port = 0;
    const size_t colon = endpoint.rfind(':');
    if (endpoint.find('*') == std::string::npos || colon == std::string::npos ||
        !absl::SimpleAtoi(endpoint.substr(colon + 1), &port)) {
      return 0;
    }
    return port;
  };
  for (const auto& [name, endpoint] :
       {std::pair<std::string, std::string>{"kv-events", cfg.events().endpoint()},
        std::pair<std::string, std::string>{"kv-replay", cfg.events().replay_endpoint()}}) {
    const int port = bound_port(endpoint);
    if (port == 0 && ports.count(name) != 0) {
      problem(absl::StrCat("the manifests expose ", name, " but the config's events endpoint \"",
                           endpoint, "\" is not a bound tcp://*:PORT"));
    } else if (port != 0 && ports[name] != port) {
      problem(absl::StrCat("container port ", name, "=", ports[name], " but config events ",
                           "endpoint ", endpoint));
    }
  }
  for (const char* probe : {"livenessProbe", "readinessProbe", "startupProbe"}) {
    const YamlNode* p = container->Child(probe);
    if (p == nullptr) {
      problem(absl::StrCat(probe, " missing"));
    } else if (tls) {
      // Exec probes over TLS: CheckTls.
    } else if (p->Get("grpc") == nullptr) {
      problem(absl::StrCat(probe, " is not a native gRPC probe"));
    } else if (ScalarInt(p->Get("grpc.port")) != grpc_port) {
      problem(
          absl::StrCat(probe, " targets port ", p->Str("grpc.port"), ", gRPC port is ", grpc_port));
    }
  }

  // Services: the headless one is the StatefulSet's serviceName and the peer DNS name.
  const YamlNode* headless = nullptr;
  for (const YamlNode& d : all) {
    if (d.Str("kind") != "Service") continue;
    if (!SelectorMatches(d.Get("spec.selector"), pod_labels)) {
      problem(absl::StrCat("Service ", d.Str("metadata.name"), " selects no kvtierd pod"));
    }
    if (d.Str("spec.clusterIP") == "None") headless = &d;
    if (const YamlNode* sp = d.Get("spec.ports"); sp != nullptr && sp->is_seq()) {
      for (const YamlNode& p : sp->seq) {
        const std::string target = p.Str("targetPort", p.Str("port"));
        int target_port;
        if (absl::SimpleAtoi(target, &target_port)) {
          bool found = false;
          for (const auto& [n, cp] : ports) found |= cp == target_port;
          if (!found) {
            problem(absl::StrCat("Service ", d.Str("metadata.name"), " targets port ", target,
                                 " that kvtierd does not expose"));
          }
        } else if (ports.count(target) == 0) {
          problem(
              absl::StrCat("Service ", d.Str("metadata.name"), " targets unknown port ", target));
        }
      }
    }
  }
  if (headless == nullptr) {
    problem("no headless Service (clusterIP: None) for peer discovery");
  } else {
    const std::string hname = headless->Str("metadata.name");
    if (sts->Str("spec.serviceName") != hname) {
      problem(absl::StrCat("StatefulSet serviceName ", sts->Str("spec.serviceName"),
                           " != headless Service ", hname));
    }
    const std::string& dns = cfg.cluster().peer_dns();
    if (cfg.cluster().static_peers().empty()) {
      const std::vector<std::string> labels = absl::StrSplit(dns, '.');
      if (dns.empty()) {
        problem("config has neither cluster.peer_dns nor cluster.static_peers");
      } else if (labels[0] != hname) {
        problem(absl::StrCat("cluster.peer_dns ", dns, " does not name headless Service ", hname));
      } else if (labels.size() >= 2 && labels[1] != headless->Str("metadata.namespace")) {
        problem(absl::StrCat("cluster.peer_dns ", dns, " is not in namespace ",
                             headless->Str("metadata.namespace")));
      }
    }
    if (cfg.cluster().peer_port() != 0 &&
        static_cast<int>(cfg.cluster().peer_port()) != grpc_port) {
      problem(absl::StrCat("cluster.peer_port ", cfg.cluster().peer_port(), " != gRPC port ",
                           grpc_port));
    }
  }
  for (std::string& p :
       CheckTls(all, *pod, *container, out->args, grpc_port,
                headless != nullptr ? headless->Str("metadata.name") : "", ns, &out->tls)) {
    problem(std::move(p));
  }
  if (expect.tls && !out->tls.on) problem("kvtierd args have no --tls-cert (TLS expected)");

  // Memory: requests == limits >= hot tier + gRPC quota + 512 MiB; the hot tier is pinned.
  const uint64_t quota = cfg.memory_quota_bytes() != 0 ? cfg.memory_quota_bytes() : 1024 * kMiB;
  const uint64_t hot = cfg.hot_capacity_bytes() != 0 ? cfg.hot_capacity_bytes() : 256 * kMiB;
  const auto limit = ParseQuantity(container->Str("resources.limits.memory"));
  const auto request = ParseQuantity(container->Str("resources.requests.memory"));
  if (!limit || !request) {
    problem("kvtierd memory requests/limits missing or unparsable");
  } else {
    if (*limit < hot + quota + 512 * kMiB) {
      problem(absl::StrCat("memory limit ", *limit, " < hot_capacity_bytes + memory_quota_bytes",
                           " + 512 MiB = ", hot + quota + 512 * kMiB));
    }
    if (*request != *limit) problem("memory request != limit (pinned memory needs Guaranteed)");
  }

  // Data dir on the PVC, and the PVC large enough for the cold tier.
  const std::string data_dir = cfg.data_dir().empty() ? "./kvtier-data" : cfg.data_dir();
  const YamlNode* claims = sts->Get("spec.volumeClaimTemplates");
  bool on_claim = false;
  if (claims != nullptr && claims->is_seq()) {
    for (const YamlNode& c : claims->seq) {
      const std::string mount = mounts[c.Str("metadata.name")];
      if (mount.empty() || !(data_dir == mount || absl::StartsWith(data_dir, mount + "/"))) {
        continue;
      }
      on_claim = true;
      const auto storage = ParseQuantity(c.Str("spec.resources.requests.storage"));
      const uint64_t cold =
          cfg.cold_capacity_bytes() != 0 ? cfg.cold_capacity_bytes() : 16ULL * 1024 * kMiB;
      if (!storage || *storage < cold) {
        problem(absl::StrCat("volume ", c.Str("metadata.name"), " (",
                             c.Str("spec.resources.requests.storage"),
                             ") is smaller than cold_capacity_bytes ", cold));
      }
    }
  }
  if (!on_claim) problem(absl::StrCat("data_dir ", data_dir, " is not on a volumeClaimTemplate"));

  // Pod anti-affinity required per node (a hostPath socket needs it; recorded for all).
  if (const YamlNode* req =
          pod->Get("affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution");
      req != nullptr && req->is_seq()) {
    for (const YamlNode& term : req->seq) {
      if (term.Str("topologyKey") == "kubernetes.io/hostname" &&
          SelectorMatches(term.Get("labelSelector.matchLabels"), pod_labels)) {
        out->required_hostname_anti_affinity = true;
      }
    }
  }

  // Same-node shared-memory socket: the flag overrides the config, whose default is
  // <data_dir>/kvtierd.sock. kvtierd binds it after opening the store, so its directory
  // must exist and be writable: a volume's mountPath, or the data dir kvtierd creates.
  out->shm_socket_from_flag = have_shm_flag;
  out->shm_socket = have_shm_flag                     ? shm_flag
                    : !cfg.shm_socket().empty()       ? cfg.shm_socket()
                    : absl::StartsWith(data_dir, "/") ? data_dir + "/kvtierd.sock"
                                                      : "";
  if (expect.same_node_shm && !have_shm_flag) {
    problem("kvtierd args have no --shm-socket (same-node shared memory expected)");
  }
  if (!out->shm_socket.empty() && out->shm_socket != "off") {
    const std::string& sock = out->shm_socket;
    const std::string sock_dir = Dirname(sock);
    std::string volume;  // the mount holding sock_dir (the longest mountPath prefix)
    size_t volume_path_size = 0;
    for (const auto& [name, path] : mounts) {
      if (!path.empty() && (sock_dir == path || absl::StartsWith(sock_dir, path + "/")) &&
          path.size() > volume_path_size) {
        volume = name;
        volume_path_size = path.size();
      }
    }
    if (!absl::StartsWith(sock, "/")) {
      problem(absl::StrCat("shm socket ", sock, " is not an absolute path"));
    } else if (volume.empty()) {
      problem(absl::StrCat("shm socket ", sock, ": directory ", sock_dir,
                           " is not on a volume (the root filesystem is read-only)"));
    } else {
      out->shm_mount_path = mounts[volume];
      if (mount_read_only[volume]) {
        problem(absl::StrCat("shm socket ", sock, " is on read-only mount ", out->shm_mount_path));
      }
      if (sock_dir != out->shm_mount_path && sock_dir != data_dir) {
        problem(absl::StrCat("shm socket ", sock, ": directory ", sock_dir,
                             " does not exist in the container (use the mountPath ",
                             out->shm_mount_path, ")"));
      }
      const YamlNode* vol_node = nullptr;
      if (const YamlNode* vols = pod->Child("volumes"); vols != nullptr && vols->is_seq()) {
        for (const YamlNode& v : vols->seq) {
          if (v.Str("name") == volume) vol_node = &v;
        }
      }
      if (vol_node != nullptr) {
        for (const auto& [k, v] : vol_node->map) {
          if (k != "name") out->shm_volume_type = k;
        }
      } else if (claims != nullptr && claims->is_seq()) {
        for (const YamlNode& c : claims->seq) {
          if (c.Str("metadata.name") == volume) out->shm_volume_type = "persistentVolumeClaim";
        }
      }
      if (expect.same_node_shm) {
        if (out->shm_volume_type != "hostPath") {
          problem(absl::StrCat("shm socket ", sock, ": volume ", volume,
                               " is not a hostPath volume (", out->shm_volume_type,
                               "), workers on the node cannot reach it"));
        } else if (sock_dir != out->shm_mount_path) {
          problem(absl::StrCat("shm socket ", sock, " is not directly in the hostPath mount ",
                               out->shm_mount_path));
        }
      }
      if (out->shm_volume_type == "hostPath") {
        const std::string type = vol_node->Str("hostPath.type");
        if (type != "DirectoryOrCreate" && type != "Directory") {
          problem(absl::StrCat("hostPath volume ", volume, " has type \"", type,
                               "\" (want DirectoryOrCreate or Directory)"));
        }
        // One socket path per node: a second kvtierd on the node would replace the socket.
        if (!out->required_hostname_anti_affinity) {
          problem(absl::StrCat("shm socket on hostPath volume ", volume,
                               " without required pod anti-affinity on kubernetes.io/hostname "
                               "selecting the kvtierd pods"));
        }
        // The kubelet creates the directory root-owned and fsGroup does not apply to
        // hostPath: an init container must hand it to kvtierd's uid:gid, or bind fails.
        const std::string uid =
            container->Str("securityContext.runAsUser", pod->Str("securityContext.runAsUser"));
        const std::string gid =
            container->Str("securityContext.runAsGroup", pod->Str("securityContext.runAsGroup"));
        bool chowned = false;
        if (const YamlNode* inits = pod->Child("initContainers");
            inits != nullptr && inits->is_seq() && !uid.empty() && !gid.empty()) {
          for (const YamlNode& ic : inits->seq) {
            std::string init_mount;
            if (const YamlNode* vm = ic.Child("volumeMounts"); vm != nullptr && vm->is_seq()) {
              for (const YamlNode& m : vm->seq) {
                if (m.Str("name") == volume) init_mount = m.Str("mountPath");
              }
            }
            if (init_mount.empty()) continue;
            std::string cmd;
            for (const char* field : {"command", "args"}) {
              if (const YamlNode* c = ic.Child(field); c != nullptr && c->is_seq()) {
                for (const YamlNode& part : c->seq) absl::StrAppend(&cmd, part.scalar, " ");
              }
            }
            chowned |=
                absl::StrContains(cmd, absl::StrCat("chown ", uid, ":", gid, " ", init_mount));
          }
        }
        if (!chowned) {
          problem(absl::StrCat("hostPath volume ", volume, " is not chowned to kvtierd's ", uid,
                               ":", gid, " by an init container (bind would fail)"));
        }
      }
    }
  }

  // Security: non-root with IPC_LOCK for pinned memory.
  if (pod->Str("securityContext.runAsNonRoot") != "true") problem("pod is not runAsNonRoot");
  bool ipc_lock = false;
  if (const YamlNode* add = container->Get("securityContext.capabilities.add");
      add != nullptr && add->is_seq()) {
    for (const YamlNode& c : add->seq) ipc_lock |= c.scalar == "IPC_LOCK";
  }
  if (!ipc_lock) problem("kvtierd lacks the IPC_LOCK capability");
  // SIGTERM: in-flight calls and the bounded write-back flush fit shutdown_grace_ms
  // (storage/write_back.h); the pod's grace is derived from it: + 5 s for the exit.
  const int64_t grace_s = int64_t{ScalarInt(pod->Get("terminationGracePeriodSeconds"), 30)};
  const int64_t shutdown_ms = cfg.shutdown_grace_ms() != 0 ? cfg.shutdown_grace_ms() : 10000;
  const int64_t want_s = (shutdown_ms + 999) / 1000 + 5;
  if (grace_s != want_s) {
    problem(absl::StrCat("terminationGracePeriodSeconds (", grace_s,
                         " s) != shutdown_grace_ms + 5 s (", want_s, " s)"));
  }
  const storage::WriteBackBounds bounds = storage::WriteBackBoundsForGrace(shutdown_ms);
  if (cfg.max_unflushed_bytes() > bounds.max_unflushed_bytes ||
      cfg.max_unflushed_blocks() > bounds.max_unflushed_blocks) {
    problem(absl::StrCat("max_unflushed_bytes / _blocks exceed what half of shutdown_grace_ms "
                         "flushes (", bounds.max_unflushed_bytes, " bytes, ",
                         bounds.max_unflushed_blocks, " blocks)"));
  }

  // Disruption budget and network policy apply to the kvtierd pods.
  const YamlNode* pdb = FindDoc(all, "PodDisruptionBudget");
  if (pdb == nullptr || !SelectorMatches(pdb->Get("spec.selector.matchLabels"), pod_labels)) {
    problem("no PodDisruptionBudget selecting the kvtierd pods");
  }
  const YamlNode* np = FindDoc(all, "NetworkPolicy");
  if (np == nullptr || !SelectorMatches(np->Get("spec.podSelector.matchLabels"), pod_labels)) {
    problem("no NetworkPolicy selecting the kvtierd pods");
  }
  return problems;
}

// Renders deploy/<spec> with `kubectl kustomize`. `spec` is a kustomization directory, or
// "DIR+COMPONENT+..." for DIR with components applied: that writes a kustomization into a
// temp dir naming them by relative paths (kustomize refuses absolute resource roots).
CommandResult RenderSpec(const std::string& spec) {
  const std::vector<std::string> parts = absl::StrSplit(spec, '+');
  const std::filesystem::path deploy = std::filesystem::absolute(SourceDir() + "/deploy");
  if (parts.size() == 1) {
    return RunCommand(absl::StrCat("kubectl kustomize '", (deploy / spec).string(), "'"));
  }
  TempDir tmp;
  auto rel = [&](const std::string& p) {
    return std::filesystem::relative(deploy / p, tmp.path()).string();
  };
  std::string k = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n";
  absl::StrAppend(&k, "  - ", rel(parts[0]), "\ncomponents:\n");
  for (size_t i = 1; i < parts.size(); ++i) absl::StrAppend(&k, "  - ", rel(parts[i]), "\n");
  std::ofstream(tmp.Sub("kustomization.yaml")) << k;
  return RunCommand(absl::StrCat("kubectl kustomize '", tmp.path(), "'"));
}

constexpr char kProdWithShm[] = "overlays/prod+components/same-node-shm";
constexpr char kProdWithTls[] = "overlays/prod+components/tls";
// The cross-node UCX data path: kvtierd's flags, a container port, the peers Service port.
constexpr char kProdWithUcx[] = "overlays/prod+components/ucx";
// The Grafana dashboard component adds a ConfigMap and must leave the deployment as is.
constexpr char kProdWithDashboard[] = "overlays/prod+components/grafana-dashboard";

class KustomizeTest : public ::testing::TestWithParam<std::string> {
 protected:
  // Renders GetParam() (see RenderSpec); skips without kubectl.
  std::string Render() {
    CommandResult r = RenderSpec(GetParam());
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return r.output;
  }
  Expect Expectations() const {
    return {.same_node_shm = GetParam() == kProdWithShm, .tls = GetParam() == kProdWithTls};
  }
};

TEST_P(KustomizeTest, RendersConsistently) {
  if (!HaveKubectl()) GTEST_SKIP() << "kubectl not installed";
  Rendering rendering;
  const std::vector<std::string> problems = CheckDeployment(Render(), &rendering, Expectations());
  EXPECT_THAT(problems, IsEmpty()) << absl::StrJoin(problems, "\n");
  if (GetParam() == "overlays/dev") {
    EXPECT_EQ(rendering.replicas, 1);
  }
  if (GetParam() == "overlays/prod" || GetParam() == kProdWithShm ||
      GetParam() == kProdWithTls || GetParam() == kProdWithDashboard ||
      GetParam() == kProdWithUcx) {
    EXPECT_EQ(rendering.replicas, 3);
    // Three nodes with R=2 survive losing any one of them without misses.
    EXPECT_GE(rendering.config.cluster().replication_factor(), 2u);
  }
  if (GetParam() == kProdWithDashboard) {
    // The dashboard JSON reaches Grafana's sidecar as a labelled ConfigMap.
    const std::string out = Render();
    EXPECT_THAT(out, HasSubstr("name: kvtier-grafana-dashboard"));
    EXPECT_THAT(out, HasSubstr("grafana_dashboard: \"1\""));
    EXPECT_THAT(out, HasSubstr("kvtier-dashboard.json: |"));
    EXPECT_THAT(out, HasSubstr("kvtier_leases_granted_total"));
  }
  if (GetParam() == kProdWithUcx) {
    // kvtierd listens for UCX on 50061, the pod and the peers Service expose it, and the
    // NetworkPolicy admits UCX's data connections (ephemeral ports) too.
    EXPECT_THAT(rendering.args, ::testing::IsSupersetOf({"--ucx", "--ucx-port", "50061"}));
    const std::string out = Render();
    EXPECT_THAT(out, HasSubstr("containerPort: 50061"));
    EXPECT_THAT(out, HasSubstr("targetPort: ucx"));
    EXPECT_THAT(out, HasSubstr("endPort: 65535"));
  }
  if (GetParam() == kProdWithShm) {
    // The component's contract, spelled out (CheckDeployment enforces it too).
    EXPECT_TRUE(rendering.shm_socket_from_flag);
    EXPECT_EQ(rendering.shm_socket, "/var/run/kvtier/kvtierd.sock");
    EXPECT_EQ(rendering.shm_volume_type, "hostPath");
    EXPECT_EQ(Dirname(rendering.shm_socket), rendering.shm_mount_path);
    EXPECT_TRUE(rendering.required_hostname_anti_affinity);
    EXPECT_THAT(rendering.args,
                ::testing::ElementsAre("--config", "/etc/kvtier/kvtierd.textproto", "--shm-socket",
                                       "/var/run/kvtier/kvtierd.sock"));
  } else if (GetParam() == kProdWithTls) {
    EXPECT_TRUE(rendering.tls.on);
    EXPECT_TRUE(rendering.tls.require_client_cert);
    EXPECT_EQ(rendering.tls.secret_name, "kvtier-tls");
    EXPECT_NE(rendering.shm_volume_type, "hostPath");
  } else {
    // Without the component the socket stays on the pod's own data volume.
    EXPECT_FALSE(rendering.shm_socket_from_flag);
    EXPECT_NE(rendering.shm_volume_type, "hostPath");
  }
}

TEST_P(KustomizeTest, ConfigPassesKvtierdCheckConfig) {
  if (!HaveKubectl()) GTEST_SKIP() << "kubectl not installed";
  Rendering rendering;
  const std::vector<std::string> problems = CheckDeployment(Render(), &rendering, Expectations());
  ASSERT_FALSE(rendering.config_text.empty()) << absl::StrJoin(problems, "\n");
  const std::string kvtierd = KvtierdPath();
  if (access(kvtierd.c_str(), X_OK) != 0) {
    GTEST_SKIP() << "kvtierd is not built (" << kvtierd
                 << "): the ConfigMap config was only parsed as a ServerConfig textproto, "
                    "not validated by kvtierd --check-config";
  }
  TempDir tmp;
  const std::string path = tmp.Sub("kvtierd.textproto");
  std::ofstream(path) << rendering.config_text;
  // The TLS files live in a Secret at deploy time: check with test files in their place.
  std::map<std::string, std::string> files;
  if (rendering.tls.on) {
    auto ca = TestCa::Create(tmp.path(), "ca");
    ASSERT_OK(ca);
    auto node = ca->Issue("node", "kvtier-node", {"DNS:kvtier-peers.kvtier.svc.cluster.local"});
    ASSERT_OK(node);
    files = {{rendering.tls.cert_file, node->cert_file},
             {rendering.tls.key_file, node->key_file},
             {rendering.tls.ca_file, ca->ca_file()}};
  }
  // The container's other args (e.g. --shm-socket) are validated with the file, as
  // kvtierd applies them on top of it at start.
  auto check = [&](const std::vector<std::string>& args) {
    std::string command = absl::StrCat("'", kvtierd, "' --check-config '", path, "'");
    for (size_t i = 0; i < args.size(); ++i) {
      if (args[i] == "--config") {
        ++i;
      } else if (!absl::StartsWith(args[i], "--config=")) {
        auto f = files.find(args[i]);
        absl::StrAppend(&command, " '", f != files.end() ? f->second : args[i], "'");
      }
    }
    return RunCommand(command);
  };
  CommandResult r = check(rendering.args);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("ok"));
  if (GetParam() == kProdWithShm) {
    // The args do reach kvtierd's validation: a socket path too long for sun_path fails.
    std::vector<std::string> bad = rendering.args;
    for (std::string& a : bad) {
      if (a == rendering.shm_socket) a = "/var/run/" + std::string(120, 'k') + "/kvtierd.sock";
    }
    CommandResult rb = check(bad);
    EXPECT_NE(rb.exit_code, 0) << rb.output;
    EXPECT_THAT(rb.output, HasSubstr("shm_socket"));
  }
  if (GetParam() == kProdWithTls) {
    // The TLS files reach validation too: a key that is not the certificate's fails.
    std::swap(files[rendering.tls.key_file], files[rendering.tls.ca_file]);
    CommandResult rb = check(rendering.args);
    EXPECT_NE(rb.exit_code, 0) << rb.output;
    EXPECT_THAT(rb.output, HasSubstr("tls.key_file"));
    // UCX on top of TLS is refused unless the config opts into plaintext payloads.
    std::vector<std::string> with_ucx = rendering.args;
    with_ucx.push_back("--ucx");
    std::swap(files[rendering.tls.key_file], files[rendering.tls.ca_file]);
    CommandResult ru = check(with_ucx);
    EXPECT_NE(ru.exit_code, 0) << ru.output;
    EXPECT_THAT(ru.output, HasSubstr("allow_plaintext_with_tls"));
  }
}

INSTANTIATE_TEST_SUITE_P(Deploy, KustomizeTest,
                         ::testing::Values("base", "overlays/dev", "overlays/prod", kProdWithShm,
                                           kProdWithTls, kProdWithDashboard, kProdWithUcx),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& c : name) {
                             if (c == '/' || c == '-') c = '_';
                             if (c == '+') c = 'X';
                           }
                           return name;
                         });

// One deliberate breakage: the first `from` in a good rendering becomes `to`, and the
// checker must report a problem containing `expect`.
struct Mutation {
  std::string from, to, expect;
};

void ExpectMutationsCaught(const std::string& good, const std::vector<Mutation>& mutations,
                           Expect expect = {}) {
  {
    Rendering ok;
    ASSERT_THAT(CheckDeployment(good, &ok, expect), IsEmpty());
  }
  for (const Mutation& m : mutations) {
    const size_t at = good.find(m.from);
    ASSERT_NE(at, std::string::npos) << m.from;
    std::string bad = good;
    bad.replace(at, m.from.size(), m.to);
    Rendering rendering;
    const std::vector<std::string> problems = CheckDeployment(bad, &rendering, expect);
    EXPECT_THAT(absl::StrJoin(problems, "\n"), HasSubstr(m.expect))
        << "mutation " << m.from << " -> " << m.to;
  }
}

// The checker itself must catch the breakages it exists for: each mutation of a good
// rendering is reported.
TEST(KustomizeCheckerTest, CatchesDeployTimeBreakages) {
  if (!HaveKubectl()) GTEST_SKIP() << "kubectl not installed";
  CommandResult r =
      RunCommand(absl::StrCat("kubectl kustomize '", SourceDir(), "/deploy/overlays/prod'"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<Mutation> mutations = {
      {"containerPort: 9090", "containerPort: 9091", "container port metrics=9091"},
      {"\n    port: 50051\n", "\n    port: 50052\n", "container port grpc=50051"},
      {"serviceName: kvtier-peers", "serviceName: kvtier-peer", "serviceName kvtier-peer"},
      {"peer_dns: \"kvtier-peers.kvtier.", "peer_dns: \"kvtier.kvtier.", "does not name headless"},
      {"peer_dns: \"kvtier-peers.kvtier.", "peer_dns: \"kvtier-peers.default.",
       "is not in namespace"},
      {"memory: 17920Mi", "memory: 16Gi", "memory limit"},
      {"listen_address: \"0.0.0.0\"", "listen_address: \"127.0.0.1\"", "listen_address"},
      {"storage: 200Gi", "storage: 100Gi", "smaller than cold_capacity_bytes"},
      {"mountPath: /var/lib/kvtier\n", "mountPath: /data\n", "not on a volumeClaimTemplate"},
      {"- IPC_LOCK", "- NET_BIND_SERVICE", "IPC_LOCK"},
      {"hot_allocator: \"auto\"", "hot_allocator: auto\"", "does not parse"},
      {"targetPort: metrics", "targetPort: metric", "unknown port metric"},
      {"containerPort: 5557", "containerPort: 5559", "container port kv-events=5559"},
      {"replay_endpoint: \"tcp://*:5558\"", "replay_endpoint: \"\"", "expose kv-replay"},
      {"terminationGracePeriodSeconds: 25", "terminationGracePeriodSeconds: 20",
       "terminationGracePeriodSeconds (20 s) != shutdown_grace_ms + 5 s (25 s)"},
      {"shutdown_grace_ms: 20000", "shutdown_grace_ms: 20000 max_unflushed_bytes: 4294967296",
       "max_unflushed_bytes / _blocks exceed"},
  };
  ExpectMutationsCaught(r.output, mutations);
}

// Same for the same-node shared-memory component on top of prod.
TEST(KustomizeCheckerTest, CatchesSameNodeShmBreakages) {
  if (!HaveKubectl()) GTEST_SKIP() << "kubectl not installed";
  CommandResult r = RenderSpec(kProdWithShm);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<Mutation> mutations = {
      // Socket outside every volume (read-only root filesystem): bind fails.
      {"- /var/run/kvtier/kvtierd.sock", "- /var/run/kvtier2/kvtierd.sock", "is not on a volume"},
      // Socket in a subdirectory nobody creates.
      {"- /var/run/kvtier/kvtierd.sock", "- /var/run/kvtier/s/kvtierd.sock",
       "does not exist in the container"},
      // Flag dropped: the socket falls back to the pod's PVC, unreachable from workers.
      {"\n        - --shm-socket\n        - /var/run/kvtier/kvtierd.sock\n", "\n",
       "no --shm-socket"},
      // Socket on the pod's own data volume instead of the node's hostPath.
      {"- /var/run/kvtier/kvtierd.sock", "- /var/lib/kvtier/kvtierd.sock",
       "is not a hostPath volume (persistentVolumeClaim)"},
      {"- hostPath:\n          path: /var/run/kvtier\n          type: DirectoryOrCreate\n",
       "- emptyDir: {}\n", "is not a hostPath volume (emptyDir)"},
      {"type: DirectoryOrCreate", "type: Socket", "has type \"Socket\""},
      // Anti-affinity only preferred, or per the wrong topology: two kvtierd on one node.
      {"requiredDuringSchedulingIgnoredDuringExecution:",
       "preferredDuringSchedulingIgnoredDuringExecution:", "required pod anti-affinity"},
      {"topologyKey: kubernetes.io/hostname", "topologyKey: kubernetes.io/os",
       "required pod anti-affinity"},
      // The init container chowns to a uid kvtierd does not run as.
      {"chown 10001:10001", "chown 10002:10002", "not chowned to kvtierd's 10001:10001"},
      {"runAsUser: 10001", "runAsUser: 10003", "not chowned to kvtierd's 10003:10001"},
  };
  ExpectMutationsCaught(r.output, mutations, Expect{.same_node_shm = true});
}

// Same for the tls component on top of prod.
TEST(KustomizeCheckerTest, CatchesTlsBreakages) {
  if (!HaveKubectl()) GTEST_SKIP() << "kubectl not installed";
  CommandResult r = RenderSpec(kProdWithTls);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<Mutation> mutations = {
      // A subPath mount is never updated when cert-manager renews the Secret.
      {"mountPath: /etc/kvtier-tls\n", "mountPath: /etc/kvtier-tls\n          subPath: tls.crt\n",
       "subPath"},
      {"- --tls-cert\n        - /etc/kvtier-tls/tls.crt",
       "- --tls-cert\n        - /etc/tls/tls.crt", "is not next to"},
      {"secretName: kvtier-tls\n", "secretName: kvtier-cert\n", "writes Secret kvtier-cert"},
      {"\n  - client auth", "", "lack \"client auth\""},
      {"- '*.kvtier-peers.kvtier.svc.cluster.local'", "- '*.kvtier.kvtier.svc.cluster.local'",
       "do not cover the pods' names"},
      {"kind: Issuer\n    name: kvtier-ca", "kind: Issuer\n    name: kvtier-root",
       "Issuer/kvtier-root is not rendered"},
      {"- kvtier\n            - health", "- grpc_health_probe\n            - health",
       "not an exec of `kvtier health`"},
      {"- 127.0.0.1:50051", "- 127.0.0.1:50052", "--server is not 127.0.0.1:50051"},
      {"- --tls-server-name\n            - kvtier-peers.kvtier.svc.cluster.local",
       "- --tls-server-name\n            - kvtier-0.example", "is not a DNS name"},
  };
  ExpectMutationsCaught(r.output, mutations, Expect{.tls = true});
}

TEST(MiniYamlTest, ParsesKustomizeSubset) {
  const std::string text =
      "a:\n"
      "  b: \"x: y\"\n"
      "  list:\n"
      "  - name: one\n"
      "    port: 1\n"
      "  - two\n"
      "  - 'it''s'\n"
      "  empty: {}\n"
      "  text: |\n"
      "    line1\n"
      "\n"
      "      indented\n"
      "  after: z\n"
      "---\n"
      "kind: Second\n";
  absl::StatusOr<std::vector<YamlNode>> docs = ParseYamlDocuments(text);
  ASSERT_OK(docs);
  ASSERT_EQ(docs->size(), 2u);
  const YamlNode& d = (*docs)[0];
  EXPECT_EQ(d.Str("a.b"), "x: y");
  const YamlNode* list = d.Get("a.list");
  ASSERT_NE(list, nullptr);
  ASSERT_TRUE(list->is_seq());
  ASSERT_EQ(list->seq.size(), 3u);
  EXPECT_EQ(list->seq[0].Str("name"), "one");
  EXPECT_EQ(list->seq[0].Str("port"), "1");
  EXPECT_EQ(list->seq[1].scalar, "two");
  EXPECT_EQ(list->seq[2].scalar, "it's");
  EXPECT_TRUE(d.Get("a.empty")->is_map());
  EXPECT_EQ(d.Str("a.text"), "line1\n\n  indented\n");
  EXPECT_EQ(d.Str("a.after"), "z");
  EXPECT_EQ((*docs)[1].Str("kind"), "Second");
}

TEST(MiniYamlTest, RejectsWhatItCannotRead) {
  EXPECT_FALSE(ParseYamlDocuments("a: [1, 2]\n").ok());
  EXPECT_FALSE(ParseYamlDocuments("a: &anchor x\n").ok());
  EXPECT_FALSE(ParseYamlDocuments("a: 1\n   b: 2\n").ok());
  EXPECT_FALSE(ParseYamlDocuments("a: 1\na: 2\n").ok());
  EXPECT_FALSE(ParseYamlDocuments("a: >\n  folded\n").ok());
}

}  // namespace
}  // namespace kvtier::testing
