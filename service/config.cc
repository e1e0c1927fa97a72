#include "service/config.h"

#include <cctype>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/byte_size.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "kv/prefix_key.h"
#include "protocol/convert.h"
#include "protocol/tls.h"
#include "service/auth.h"
#include "service/limits.h"
#include "service/membership.h"
#include "service/tenant_quotas.h"
#include "service/ucx_put.h"
#include "storage/write_back.h"

namespace kvtier::service {
namespace {

class CollectFirstError : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    if (error_.empty()) error_ = absl::StrCat(line + 1, ":", column + 1, ": ", message);
  }
  const std::string& error() const { return error_; }

 private:
  std::string error_;
};

bool ValidNamespaceName(const std::string& name) {
  if (name.empty() || name.size() > 128) return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '/' &&
        c != '-') {
      return false;
    }
  }
  return true;
}

absl::StatusOr<uint32_t> ParseU32(std::string_view text, std::string_view flag) {
  uint32_t v = 0;
  if (!absl::SimpleAtoi(Sv(text), &v)) {
    return absl::InvalidArgumentError(
        absl::StrCat(Sv(flag), ": expected a non-negative integer, got \"", Sv(text), "\""));
  }
  return v;
}

// The tls block: files readable, certificate and key parse and match, options coherent.
absl::Status ValidateTlsConfig(const v1::ServerConfig& c) {
  if (!c.has_tls()) return absl::OkStatus();
  const v1::TlsConfig& t = c.tls();
  if (t.cert_file().empty() || t.key_file().empty()) {
    return absl::InvalidArgumentError("tls.cert_file and tls.key_file are required with tls");
  }
  if ((t.require_client_cert() || t.identities_size() > 0) && t.client_ca_file().empty()) {
    return absl::InvalidArgumentError(
        "tls.client_ca_file is required with tls.require_client_cert or tls.identities");
  }
  absl::Status s = protocol::CheckTlsFiles(
      {.cert_file = t.cert_file(), .key_file = t.key_file(), .ca_file = t.client_ca_file()},
      "tls");
  if (!s.ok()) {
    // CheckTlsFiles names ca_file; the config field is client_ca_file.
    std::string m(s.message());
    if (m.rfind("tls.ca_file", 0) == 0) m.replace(0, 11, "tls.client_ca_file");
    return absl::InvalidArgumentError(m);
  }
  return absl::OkStatus();
}

// INVALID_ARGUMENT naming the bad events.<field>.
absl::Status ValidateEventsConfig(const v1::ServerConfig& c) {
  const v1::EventsConfig& e = c.events();
  if (!e.format().empty()) RETURN_IF_ERROR(events::ParseBatchFormat(e.format()).status());
  if (e.endpoint().empty()) {
    if (!e.replay_endpoint().empty()) {
      return absl::InvalidArgumentError(
          "events.replay_endpoint is set but events.endpoint is empty (events are off)");
    }
    return absl::OkStatus();
  }
  const std::string node_id = c.cluster().node_id().empty() ? "kvtier" : c.cluster().node_id();
  return ToEventsConfig(c, node_id).Validate();
}

}  // namespace

const char* HashSchemeVersion() { return kv::kHashSchemeVersion; }

absl::StatusOr<v1::ServerConfig> ParseConfigText(std::string_view text) {
  v1::ServerConfig config;
  google::protobuf::TextFormat::Parser parser;
  CollectFirstError errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(std::string(text), &config)) {
    return absl::InvalidArgumentError(absl::StrCat("config: ", errors.error()));
  }
  return config;
}

absl::StatusOr<v1::ServerConfig> LoadConfigFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("config file ", path, " cannot be read"));
  std::stringstream ss;
  ss << in.rdbuf();
  auto config = ParseConfigText(ss.str());
  if (!config.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", config.status().message()));
  }
  return config;
}

void ApplyDefaults(v1::ServerConfig& c) {
  // Storage and service defaults live in StoreOptions and ServiceLimits; the rest here.
  const storage::StoreOptions store;
  const ServiceLimits limits;
  if (c.listen_address().empty()) c.set_listen_address("127.0.0.1");
  if (c.port() == 0) c.set_port(kDefaultPort);
  if (c.data_dir().empty()) c.set_data_dir(store.data_dir);
  if (c.hot_capacity_bytes() == 0) c.set_hot_capacity_bytes(store.hot_capacity_bytes);
  if (c.cold_capacity_bytes() == 0) c.set_cold_capacity_bytes(store.cold_capacity_bytes);
  if (c.high_watermark() == 0) c.set_high_watermark(store.high_watermark);
  if (c.low_watermark() == 0) c.set_low_watermark(store.low_watermark);
  if (c.eviction_policy().empty()) c.set_eviction_policy(storage::EvictionPolicyName(store.policy));
  if (c.hot_allocator().empty()) c.set_hot_allocator(store.hot_allocator);
  if (c.executor_threads() == 0) {
    c.set_executor_threads(std::max(2u, std::thread::hardware_concurrency()));
  }
  if (c.executor_queue() == 0) c.set_executor_queue(1024);
  if (c.max_message_bytes() == 0) c.set_max_message_bytes(4ull << 20);
  if (c.max_keys_per_request() == 0) c.set_max_keys_per_request(limits.max_keys_per_request);
  if (c.keepalive_time_ms() == 0) c.set_keepalive_time_ms(30000);
  if (c.memory_quota_bytes() == 0) c.set_memory_quota_bytes(limits.put_budget_bytes);
  if (c.max_put_bytes() == 0) c.set_max_put_bytes(limits.max_put_bytes);
  if (c.put_progress_timeout_ms() == 0) {
    c.set_put_progress_timeout_ms(limits.put_progress_timeout_ms);
  }
  if (c.max_puts_per_connection() == 0) {
    c.set_max_puts_per_connection(limits.max_puts_per_connection);
  }
  if (c.max_leased_bytes() == 0) c.set_max_leased_bytes(store.max_leased_bytes);
  if (c.max_leased_bytes_per_tenant() == 0) {
    c.set_max_leased_bytes_per_tenant(store.max_leased_bytes_per_tenant);
  }
  if (c.max_lease_ms() == 0) c.set_max_lease_ms(limits.max_lease_ms);
  if (c.shutdown_grace_ms() == 0) c.set_shutdown_grace_ms(10000);
  const storage::WriteBackBounds write_back =
      storage::WriteBackBoundsForGrace(c.shutdown_grace_ms());
  if (c.max_unflushed_bytes() == 0) c.set_max_unflushed_bytes(write_back.max_unflushed_bytes);
  if (c.max_unflushed_blocks() == 0) c.set_max_unflushed_blocks(write_back.max_unflushed_blocks);
  if (c.max_concurrent_streams() == 0) c.set_max_concurrent_streams(256);
  if (c.shm_max_region_bytes() == 0) c.set_shm_max_region_bytes(1ull << 30);
  if (c.shm_max_sessions() == 0) c.set_shm_max_sessions(64);
  auto* cl = c.mutable_cluster();
  if (cl->dns_refresh_ms() == 0) cl->set_dns_refresh_ms(5000);
  if (cl->replication_factor() == 0) cl->set_replication_factor(1);
  if (cl->peer_deadline_ms() == 0) cl->set_peer_deadline_ms(200);
}

absl::Status ValidateConfig(const v1::ServerConfig& c) {
  if (c.listen_address().empty()) return absl::InvalidArgumentError("listen_address is empty");
  if (c.port() > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("port ", c.port(), " is out of range"));
  }
  if (c.metrics_port() > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics_port ", c.metrics_port(), " is out of range"));
  }
  if (c.data_dir().empty()) return absl::InvalidArgumentError("data_dir is empty");
  if (c.hot_capacity_bytes() < (1u << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("hot_capacity_bytes (", c.hot_capacity_bytes(), ") must be at least 1 MiB"));
  }
  if (!(c.high_watermark() > 0 && c.high_watermark() <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("high_watermark (", c.high_watermark(), ") must be in (0, 1]"));
  }
  if (!(c.low_watermark() > 0 && c.low_watermark() < c.high_watermark())) {
    return absl::InvalidArgumentError(absl::StrCat("low_watermark (", c.low_watermark(),
                                                   ") must be in (0, high_watermark (",
                                                   c.high_watermark(), "))"));
  }
  if (auto p = storage::ParseEvictionPolicy(c.eviction_policy()); !p.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("eviction_policy: ", p.status().message()));
  }
  const std::string& a = c.hot_allocator();
  if (a != "auto" && a != "cuda" && a != "mlock" && a != "malloc") {
    return absl::InvalidArgumentError(
        absl::StrCat("hot_allocator \"", a, "\" is not one of auto, cuda, mlock, malloc"));
  }
  RETURN_IF_ERROR(ValidateTlsConfig(c));
  if (auto auth = Authenticator::FromConfig(c); !auth.ok()) return auth.status();
  const bool clustered = !c.cluster().static_peers().empty() || !c.cluster().peer_dns().empty();
  bool operator_identity = false;
  for (const v1::TlsIdentity& id : c.tls().identities()) operator_identity |= id.tenant() == "*";
  if (clustered && (c.tenants_size() > 0 || c.tls().identities_size() > 0) &&
      c.cluster().peer_token_file().empty() && !operator_identity) {
    return absl::InvalidArgumentError(
        "cluster.peer_token_file (or a tls.identities entry with tenant \"*\" naming the "
        "nodes' certificate) is required with tenants in cluster mode (peers authenticate "
        "each other's fan-out calls as operators)");
  }
  if (c.shm_socket().size() > kMaxShmSocketPath) {
    return absl::InvalidArgumentError(absl::StrCat("shm_socket is ", c.shm_socket().size(),
                                                   " characters; a Unix socket path holds at most ",
                                                   kMaxShmSocketPath));
  }
  if (c.executor_threads() > 1024) {
    return absl::InvalidArgumentError("executor_threads must be at most 1024");
  }
  if (c.max_message_bytes() < (64u << 10) || c.max_message_bytes() > (1ull << 31) - 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_message_bytes (", c.max_message_bytes(), ") must be in [64 KiB, 2 GiB)"));
  }
  if (c.memory_quota_bytes() < (16u << 20)) {
    return absl::InvalidArgumentError("memory_quota_bytes must be at least 16 MiB");
  }
  if (c.max_put_bytes() < (1u << 20)) {
    return absl::InvalidArgumentError("max_put_bytes must be at least 1 MiB");
  }
  RETURN_IF_ERROR(ValidateClusterConfig(c.cluster()));
  if (c.cluster().replication_factor() > 16) {
    return absl::InvalidArgumentError("cluster.replication_factor must be at most 16");
  }
  RETURN_IF_ERROR(ValidateEventsConfig(c));
  RETURN_IF_ERROR(storage::ValidateTenantQuotas(TenantQuotasFromConfig(c)));
  RETURN_IF_ERROR(ValidateUcxConfig(c));
  for (int i = 0; i < c.namespaces_size(); ++i) {
    const std::string field = absl::StrCat("namespaces[", i, "]");
    auto ns = NamespaceFromProto(c.namespaces(i), field);
    if (!ns.ok()) return ns.status();
    for (int j = 0; j < i; ++j) {
      if (c.namespaces(j).name() == c.namespaces(i).name()) {
        return absl::InvalidArgumentError(absl::StrCat(field, ".name \"", c.namespaces(i).name(),
                                                       "\" duplicates namespaces[", j, "]"));
      }
    }
  }
  return absl::OkStatus();
}

namespace {

// One kvtierd flag: its name, the placeholder of its value (null: a boolean flag) and what
// it sets.
struct FlagSpec {
  const char* name;
  const char* value;
  const char* help;
};

constexpr FlagSpec kFlags[] = {
    {"--config", "FILE", "textproto kvtier.v1.ServerConfig to start from"},
    {"--check-config", "FILE", "load, default and validate FILE, then exit"},
    {"--listen", "ADDR", "listen_address"},
    {"--port", "N", "port; 0 binds a free port"},
    {"--data-dir", "DIR", "data_dir (RocksDB and the shm socket)"},
    {"--hot-capacity", "SIZE", "hot_capacity_bytes"},
    {"--cold-capacity", "SIZE", "cold_capacity_bytes"},
    {"--policy", "POLICY", "eviction_policy"},
    {"--hot-allocator", "A", "hot_allocator: auto, cuda, mlock or malloc"},
    {"--metrics-port", "N", "Prometheus /metrics port; 0 = off"},
    {"--node-id", "ID", "cluster.node_id"},
    {"--executor-threads", "N", "executor_threads"},
    {"--max-message-bytes", "SIZE", "max_message_bytes"},
    {"--shm-socket", "PATH|off", "shm_socket; off disables the shared-memory path"},
    {"--ucx", nullptr, "ucx.enabled: payloads between hosts over UCX"},
    {"--ucx-port", "N", "ucx.port; 0 (default) binds a free port"},
    {"--ucx-transports", "LIST", "ucx.transports (UCX_TLS), e.g. tcp or rc,tcp"},
    {"--tls-cert", "FILE", "tls.cert_file (PEM); with --tls-key turns TLS on"},
    {"--tls-key", "FILE", "tls.key_file (PEM)"},
    {"--tls-client-ca", "FILE", "tls.client_ca_file: verify client and peer certificates"},
    {"--tls-require-client-cert", nullptr, "tls.require_client_cert (mutual TLS)"},
    {"--events-endpoint", "ENDPOINT",
     "events.endpoint: ZMQ PUB endpoint of KV events (tcp://*:5557); empty = off"},
    {"--events-replay-endpoint", "ENDPOINT",
     "events.replay_endpoint: ZMQ ROUTER endpoint for replay (tcp://*:5558)"},
    {"--events-pod-id", "ID",
     "events.pod_id: the topic's pod id kv@<ID>@<model> (llm-d: the pod IP)"},
    {"--warm-from-cold", nullptr, "promote cold blocks into the hot tier on start"},
    {"--max-leased-bytes", "SIZE", "max_leased_bytes (Lookup leases, node-wide)"},
    {"--prefetch-on-lookup", nullptr,
     "prefetch_on_lookup: Lookups prefetch their cold prefix unless they say otherwise"},
    {"--tenant-quota", "TENANT:HOT[:COLD[:LEASED]]",
     "adds a tenant_quotas entry (SIZEs, 0 = unlimited); repeatable"},
    {"--recover", nullptr,
     "before serving, rebuild the cold tier's index and namespaces from cold.slab "
     "(docs/recovery.md; after a power loss or an unclean stop)"},
    {"--help", nullptr, "print this text"},
};

const FlagSpec* FindFlag(std::string_view name) {
  if (name == "-h") name = "--help";
  for (const FlagSpec& f : kFlags) {
    if (name == f.name) return &f;
  }
  return nullptr;
}

// Applies one flag (other than --config / --check-config / --recover / --help) to `c`.
absl::Status ApplyFlag(const std::string& flag, const std::string& value, v1::ServerConfig& c) {
  if (flag == "--port") {
    ASSIGN_OR_RETURN(uint32_t v, ParseU32(value, flag));
    c.set_port(v);
  } else if (flag == "--listen") {
    c.set_listen_address(value);
  } else if (flag == "--data-dir") {
    c.set_data_dir(value);
  } else if (flag == "--hot-capacity") {
    ASSIGN_OR_RETURN(uint64_t v, common::ParseByteSize(value, flag));
    c.set_hot_capacity_bytes(v);
  } else if (flag == "--cold-capacity") {
    ASSIGN_OR_RETURN(uint64_t v, common::ParseByteSize(value, flag));
    c.set_cold_capacity_bytes(v);
  } else if (flag == "--policy") {
    c.set_eviction_policy(value);
  } else if (flag == "--hot-allocator") {
    c.set_hot_allocator(value);
  } else if (flag == "--metrics-port") {
    ASSIGN_OR_RETURN(uint32_t v, ParseU32(value, flag));
    c.set_metrics_port(v);
  } else if (flag == "--node-id") {
    c.mutable_cluster()->set_node_id(value);
  } else if (flag == "--executor-threads") {
    ASSIGN_OR_RETURN(uint32_t v, ParseU32(value, flag));
    if (v == 0) return absl::InvalidArgumentError("--executor-threads must be > 0");
    c.set_executor_threads(v);
  } else if (flag == "--max-message-bytes") {
    ASSIGN_OR_RETURN(uint64_t v, common::ParseByteSize(value, flag));
    c.set_max_message_bytes(v);
  } else if (flag == "--shm-socket") {
    c.set_shm_socket(value);
  } else if (flag == "--ucx") {
    c.mutable_ucx()->set_enabled(true);
  } else if (flag == "--ucx-port") {
    ASSIGN_OR_RETURN(uint32_t v, ParseU32(value, flag));
    c.mutable_ucx()->set_port(v);
  } else if (flag == "--ucx-transports") {
    c.mutable_ucx()->set_transports(value);
  } else if (flag == "--tls-cert") {
    c.mutable_tls()->set_cert_file(value);
  } else if (flag == "--tls-key") {
    c.mutable_tls()->set_key_file(value);
  } else if (flag == "--tls-client-ca") {
    c.mutable_tls()->set_client_ca_file(value);
  } else if (flag == "--tls-require-client-cert") {
    c.mutable_tls()->set_require_client_cert(true);
  } else if (flag == "--events-endpoint") {
    c.mutable_events()->set_endpoint(value);
  } else if (flag == "--events-replay-endpoint") {
    c.mutable_events()->set_replay_endpoint(value);
  } else if (flag == "--events-pod-id") {
    c.mutable_events()->set_pod_id(value);
  } else if (flag == "--warm-from-cold") {
    c.set_warm_from_cold(true);
  } else if (flag == "--max-leased-bytes") {
    ASSIGN_OR_RETURN(uint64_t v, common::ParseByteSize(value, flag));
    c.set_max_leased_bytes(v);
  } else if (flag == "--prefetch-on-lookup") {
    c.set_prefetch_on_lookup(true);
  } else if (flag == "--tenant-quota") {
    RETURN_IF_ERROR(AddTenantQuotaFlag(value, &c));
  } else {
    return absl::InternalError(absl::StrCat("flag ", flag, " has no handler"));
  }
  return absl::OkStatus();
}

// Splits argv into (flag, value) pairs: `--flag value`, `--flag=value`, or a boolean
// `--flag`. INVALID_ARGUMENT for a positional argument, an unknown flag or a missing
// value.
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> SplitFlags(
    const std::vector<std::string>& args) {
  std::vector<std::pair<std::string, std::string>> flags;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i];
    std::string value;
    if (flag.rfind("-", 0) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument \"", flag, "\""));
    }
    const size_t eq = flag.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
    }
    const FlagSpec* spec = FindFlag(flag);
    if (spec == nullptr) return absl::InvalidArgumentError(absl::StrCat("unknown flag ", flag));
    flag = spec->name;
    if (spec->value != nullptr && !inline_value) {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(absl::StrCat(flag, ": missing value"));
      }
      value = args[++i];
    }
    flags.emplace_back(std::move(flag), std::move(value));
  }
  return flags;
}

}  // namespace

std::string UsageText() {
  v1::ServerConfig d;
  ApplyDefaults(d);
  std::string out =
      "usage: kvtierd [FLAGS]\n"
      "Serves the kvtier.v1 KvCache and KvCacheAdmin gRPC services. Once its port is bound\n"
      "it prints `kvtierd bound on HOST:PORT` (health NOT_SERVING while the index loads),\n"
      "once ready `kvtierd listening on HOST:PORT`, on stdout. Flags override --config FILE.\n";
  for (const FlagSpec& f : kFlags) {
    absl::StrAppend(&out, "  ", f.name, f.value != nullptr ? absl::StrCat(" ", f.value) : "",
                    "\n      ", f.help, "\n");
  }
  std::string policies;
  for (std::string_view name : storage::EvictionPolicyNames()) {
    absl::StrAppend(&policies, policies.empty() ? "" : ", ", Sv(name));
  }
  absl::StrAppend(&out, "POLICY: ", policies, "\n");
  absl::StrAppend(&out, "SIZE: ", Sv(common::kByteSizeSyntax), "\n");
  absl::StrAppend(&out, "Defaults: ", d.listen_address(), ":", d.port(), ", data_dir ",
                  d.data_dir(), ", hot ", d.hot_capacity_bytes(), " bytes, cold ",
                  d.cold_capacity_bytes(), " bytes, policy ", d.eviction_policy(),
                  ", allocator ", d.hot_allocator(), ", max_message_bytes ",
                  d.max_message_bytes(), ".\n");
  return out;
}

absl::StatusOr<CommandLine> ParseCommandLine(const std::vector<std::string>& args) {
  CommandLine cl;
  ASSIGN_OR_RETURN(auto flags, SplitFlags(args));
  std::string config_path;
  for (const auto& [flag, value] : flags) {
    if (flag == "--help") {
      cl.mode = CommandLine::Mode::kHelp;
      return cl;
    }
    if (flag == "--config" || flag == "--check-config") {
      if (!config_path.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(flag, ": only one config file"));
      }
      config_path = value;
      if (flag == "--check-config") cl.mode = CommandLine::Mode::kCheckConfig;
    }
  }
  if (!config_path.empty()) {
    ASSIGN_OR_RETURN(cl.config, LoadConfigFile(config_path));
  }
  ApplyDefaults(cl.config);
  for (const auto& [flag, value] : flags) {
    if (flag == "--config" || flag == "--check-config") continue;
    if (flag == "--recover") {
      cl.recover = true;
      continue;
    }
    RETURN_IF_ERROR(ApplyFlag(flag, value, cl.config));
  }
  RETURN_IF_ERROR(ValidateConfig(cl.config));
  return cl;
}

storage::StoreOptions ToStoreOptions(const v1::ServerConfig& c) {
  storage::StoreOptions o;
  o.data_dir = c.data_dir();
  o.hot_capacity_bytes = c.hot_capacity_bytes();
  o.cold_capacity_bytes = c.cold_capacity_bytes();
  o.high_watermark = c.high_watermark();
  o.low_watermark = c.low_watermark();
  if (auto p = storage::ParseEvictionPolicy(c.eviction_policy()); p.ok()) o.policy = *p;
  o.hot_allocator = c.hot_allocator();
  o.cold_sync = c.cold_sync();
  o.warm_from_cold = c.warm_from_cold();
  o.max_leased_bytes = c.max_leased_bytes();
  o.max_leased_bytes_per_tenant = c.max_leased_bytes_per_tenant();
  o.tenant_quotas = TenantQuotasFromConfig(c);
  o.max_unflushed_bytes = c.max_unflushed_bytes();
  o.max_unflushed_blocks = c.max_unflushed_blocks();
  return o;
}

events::EventsConfig ToEventsConfig(const v1::ServerConfig& c, std::string node_id) {
  const v1::EventsConfig& e = c.events();
  events::EventsConfig o;
  o.endpoint = e.endpoint();
  o.replay_endpoint = e.replay_endpoint();
  if (auto f = events::ParseBatchFormat(e.format()); f.ok()) o.format = *f;
  if (e.batch_ms() != 0) o.batch_ms = e.batch_ms();
  if (e.max_batch_events() != 0) o.max_batch_events = e.max_batch_events();
  if (e.queue_capacity_events() != 0) o.queue_capacity_events = e.queue_capacity_events();
  if (e.replay_buffer_batches() != 0) o.replay_buffer_batches = e.replay_buffer_batches();
  if (e.send_hwm() != 0) o.send_hwm = e.send_hwm();
  if (e.has_data_parallel_rank()) o.data_parallel_rank = e.data_parallel_rank();
  if (e.has_parent_wait_ms()) o.parent_wait_ms = e.parent_wait_ms();
  o.send_all_blocks_cleared = e.send_all_blocks_cleared();
  o.node_id = e.pod_id().empty() ? std::move(node_id) : e.pod_id();
  return o;
}

v1::Tier TierToProto(storage::Tier tier) {
  switch (tier) {
    case storage::Tier::kHot:
      return v1::TIER_HOT;
    case storage::Tier::kCold:
      return v1::TIER_COLD;
    case storage::Tier::kNone:
      return v1::TIER_NONE;
  }
  return v1::TIER_NONE;
}

absl::StatusOr<storage::NamespaceOptions> NamespaceFromProto(const v1::NamespaceSpec& spec,
                                                             std::string_view field) {
  storage::NamespaceOptions ns;
  if (!ValidNamespaceName(spec.name())) {
    return absl::InvalidArgumentError(absl::StrCat(
        Sv(field), ".name \"", spec.name(), "\" must be 1..128 characters of [A-Za-z0-9._/-]"));
  }
  ns.name = spec.name();
  ns.tenant = spec.tenant().empty() ? "default" : spec.tenant();
  ns.model_id = spec.model_id();
  if (!spec.has_layout()) {
    return absl::InvalidArgumentError(absl::StrCat(Sv(field), ".layout is missing"));
  }
  // No silent defaults: a namespace states its dtype (the proto default is UNSPECIFIED).
  if (spec.layout().dtype() != v1::DTYPE_FP16 && spec.layout().dtype() != v1::DTYPE_BF16) {
    return absl::InvalidArgumentError(
        absl::StrCat(Sv(field), ".layout.dtype must be DTYPE_FP16 or DTYPE_BF16, got ",
                     v1::Dtype_Name(spec.layout().dtype())));
  }
  if (spec.sink_blocks() > storage::kMaxSinkBlocks) {
    return absl::InvalidArgumentError(absl::StrCat(Sv(field), ".sink_blocks must be at most ",
                                                   storage::kMaxSinkBlocks, ", got ",
                                                   spec.sink_blocks()));
  }
  ns.layout = protocol::LayoutFromProtoUnchecked(spec.layout());
  if (absl::Status s = ns.layout.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(Sv(field), ".", s.message()));
  }
  if (spec.codec() == v1::CODEC_UNSPECIFIED) {
    ns.codec = ns.layout.dtype == kv::Dtype::kBf16 ? kv::CodecId::kBf16 : kv::CodecId::kFp16;
  } else {
    ASSIGN_OR_RETURN(ns.codec, protocol::CodecFromProto(spec.codec(), absl::StrCat(Sv(field), ".codec")));
  }
  if ((ns.codec == kv::CodecId::kFp16 && ns.layout.dtype != kv::Dtype::kFp16) ||
      (ns.codec == kv::CodecId::kBf16 && ns.layout.dtype != kv::Dtype::kBf16)) {
    return absl::InvalidArgumentError(absl::StrCat(Sv(field), ".codec ", kv::CodecName(ns.codec),
                                                   " does not match layout.dtype ",
                                                   kv::DtypeName(ns.layout.dtype)));
  }
  ns.keep_sinks = !spec.disable_sink_protection();
  ns.write_through = spec.write_through();
  ns.cold_zstd = spec.cold_zstd();
  ns.sink_blocks = spec.sink_blocks() == 0 ? 1 : spec.sink_blocks();
  return ns;
}

v1::NamespaceSpec NamespaceToProto(const storage::NamespaceOptions& ns) {
  v1::NamespaceSpec spec;
  spec.set_name(ns.name);
  spec.set_tenant(ns.tenant);
  spec.set_model_id(ns.model_id);
  *spec.mutable_layout() = protocol::ToProto(ns.layout);
  spec.set_codec(protocol::CodecToProto(ns.codec));
  spec.set_disable_sink_protection(!ns.keep_sinks);
  spec.set_write_through(ns.write_through);
  spec.set_cold_zstd(ns.cold_zstd);
  spec.set_sink_blocks(ns.sink_blocks);
  return spec;
}

}  // namespace kvtier::service
