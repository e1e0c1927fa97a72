#include "service/server.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/resource_quota.h"
#include "protocol/tls.h"
#include "service/config.h"
#include "service/shm_calls.h"
#include "storage/write_back.h"

namespace kvtier::service {

std::string JoinHostPort(const std::string& host, int port) {
  if (host.find(':') != std::string::npos && host.front() != '[') {
    return absl::StrCat("[", host, "]:", port);
  }
  return absl::StrCat(host, ":", port);
}

namespace {

// What SIGTERM leaves in-flight calls: shutdown_grace_ms minus the time the store's
// write-back debt takes to flush at the conservative rates (storage/write_back.h), but at
// least half the grace (the debt bounds are sized to flush in the other half).
uint32_t InFlightGraceMs(const v1::ServerConfig& config, storage::TieredStore* store) {
  const uint64_t grace_ms = config.shutdown_grace_ms();
  if (store == nullptr) return static_cast<uint32_t>(grace_ms);
  const storage::StoreStats st = store->Stats();
  const uint64_t flush_ms =
      st.unflushed_bytes * 1000 / storage::kConservativeFlushBytesPerSecond +
      st.unflushed_blocks * 1000 / storage::kConservativeFlushBlocksPerSecond;
  return static_cast<uint32_t>(std::max(grace_ms / 2, grace_ms - std::min(grace_ms, flush_ms)));
}

protocol::TlsFiles ServerTlsFiles(const v1::TlsConfig& tls) {
  return {.cert_file = tls.cert_file(),
          .key_file = tls.key_file(),
          .ca_file = tls.client_ca_file(),
          .refresh_interval_s = tls.refresh_interval_s()};
}

}  // namespace

std::shared_ptr<grpc::ServerCredentials> ServerCredentialsFor(const v1::ServerConfig& config) {
  if (!config.has_tls()) return grpc::InsecureServerCredentials();
  const v1::TlsConfig& tls = config.tls();
  const protocol::ClientCertPolicy policy =
      tls.client_ca_file().empty() ? protocol::ClientCertPolicy::kNone
      : tls.require_client_cert()  ? protocol::ClientCertPolicy::kRequired
                                   : protocol::ClientCertPolicy::kOptional;
  return protocol::ServerTlsCredentials(ServerTlsFiles(tls), policy);
}

absl::StatusOr<std::unique_ptr<KvtierServer>> KvtierServer::Start(const v1::ServerConfig& config) {
  std::unique_ptr<KvtierServer> s(new KvtierServer());
  s->config_ = config;
  s->executor_ =
      std::make_unique<common::ThreadPool>(config.executor_threads(), config.executor_queue());
  ServiceContext& ctx = s->ctx_;
  ctx.executor = s->executor_.get();
  ASSIGN_OR_RETURN(ctx.auth, Authenticator::FromConfig(config));
  ctx.replication_factor = config.cluster().replication_factor();
  ctx.limits = ServiceLimits::FromConfig(config);
  s->put_watchdog_ = std::make_unique<PutWatchdog>(ctx.limits.put_progress_timeout_ms);
  ctx.put_watchdog = s->put_watchdog_.get();
  s->data_service_ = std::make_unique<KvCacheServiceImpl>(&ctx);
  s->admin_service_ = std::make_unique<KvCacheAdminImpl>(&ctx);
  if (config.events().grpc()) {
    const events::EventsConfig defaults;
    s->event_log_ = std::make_unique<events::EventLog>(
        config.events().grpc_buffer_events() != 0 ? config.events().grpc_buffer_events()
                                                  : defaults.queue_capacity_events,
        nullptr);
  }
  s->events_service_ = std::make_unique<KvEventsServiceImpl>(&ctx, s->event_log_.get());

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int selected_port = 0;
  builder.AddListeningPort(JoinHostPort(config.listen_address(), config.port()),
                           ServerCredentialsFor(config), &selected_port);
  builder.RegisterService(s->data_service_.get());
  builder.RegisterService(s->admin_service_.get());
  builder.RegisterService(s->events_service_.get());
  const int max_msg = static_cast<int>(config.max_message_bytes());
  builder.SetMaxReceiveMessageSize(max_msg);
  builder.SetMaxSendMessageSize(max_msg);
  grpc::ResourceQuota quota("kvtierd");
  quota.Resize(config.memory_quota_bytes());
  builder.SetResourceQuota(quota);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS,
                             static_cast<int>(config.keepalive_time_ms()));
  // A client between calls acks a ping only when gRPC's backup poller runs (every 5 s),
  // later on a loaded host: 20 s (gRPC's default) keeps such connections; at 10 s a
  // loaded client's idle connections were closed and its next Put broke ("Broken pipe").
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // Clients may ping as often as every 10 s without being told to go away.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                             static_cast<int>(config.max_concurrent_streams()));
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || selected_port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", JoinHostPort(config.listen_address(), config.port())));
  }
  // Not serving until the store is open. Health answers for the whole server ("") and
  // for each service by name; SetServingStatus(bool) later flips them all.
  grpc::HealthCheckServiceInterface* health = s->server_->GetHealthCheckService();
  for (const char* name : {v1::KvCache::service_full_name(), v1::KvCacheAdmin::service_full_name()}) {
    health->SetServingStatus(name, false);
  }
  health->SetServingStatus(false);
  s->port_ = selected_port;
  s->address_ = JoinHostPort(config.listen_address(), selected_port);
  ctx.node_id = config.cluster().node_id().empty() ? s->address_ : config.cluster().node_id();
  RETURN_IF_ERROR(s->StartCluster(selected_port));
  return s;
}

absl::Status KvtierServer::StartCluster(int selected_port) {
  const v1::ClusterConfig& cluster = config_.cluster();
  if (cluster.static_peers().empty() && cluster.peer_dns().empty()) return absl::OkStatus();
  // Ring identity: cluster.node_id; else our entry of static_peers (found by address and
  // port); else, with DNS, the host's FQDN, which is what peers get by reverse DNS.
  std::string self_id = cluster.node_id();
  if (self_id.empty()) {
    self_id = cluster.peer_dns().empty() ? address_ : DefaultNodeId(selected_port);
  }
  ASSIGN_OR_RETURN(membership_,
                   Membership::Create(MembershipOptionsFromConfig(
                       cluster, std::move(self_id), static_cast<uint32_t>(selected_port))));
  membership_->Start();
  FanoutOptions fanout = FanoutOptionsFromConfig(config_);
  if (config_.has_tls()) {
    // Mutual TLS between nodes: this node's own certificate, and the peers' must chain
    // to client_ca_file (the cluster CA) and name the peer (PeerFanout::StubsFor).
    fanout.credentials = protocol::ChannelTlsCredentials(ServerTlsFiles(config_.tls()));
  }
  if (!cluster.peer_token_file().empty()) {
    std::ifstream in(cluster.peer_token_file());
    std::string token;
    if (!std::getline(in, token) || token.empty()) {
      return absl::NotFoundError(absl::StrCat("cluster.peer_token_file ",
                                              cluster.peer_token_file(),
                                              " cannot be read or is empty"));
    }
    fanout.prepare_context = [header = "Bearer " + token](grpc::ClientContext* c) {
      c->AddMetadata("authorization", header);
    };
  }
  fanout_ = std::make_unique<PeerFanout>(membership_.get(), std::move(fanout));
  ctx_.node_id = membership_->self_id();
  ctx_.fanout = fanout_.get();
  return absl::OkStatus();
}

absl::Status KvtierServer::OpenStore() {
  storage::StoreOptions options = ToStoreOptions(config_);
  if (!config_.events().endpoint().empty()) {
    // Before the store opens, so the blocks it recovers are announced too.
    ASSIGN_OR_RETURN(events_,
                     events::ZmqEventPublisher::Create(ToEventsConfig(config_, ctx_.node_id)));
    options.events = events_.get();
    KVTIER_LOG(INFO) << "KV events on " << events_->endpoint() << ", topic kv@" << ctx_.node_id
                     << "@<model>"
                     << (events_->replay_endpoint().empty()
                             ? std::string()
                             : absl::StrCat(", replay on ", events_->replay_endpoint()));
  }
  if (event_log_ != nullptr) {
    event_log_->set_next(events_.get());  // both streams in the store's order
    options.events = event_log_.get();
  }
  const int64_t t0 = common::RealClock()->NowMicros();
  ASSIGN_OR_RETURN(store_, storage::TieredStore::Open(options));
  for (int i = 0; i < config_.namespaces_size(); ++i) {
    ASSIGN_OR_RETURN(
        storage::NamespaceOptions ns,
        NamespaceFromProto(config_.namespaces(i), absl::StrCat("namespaces[", i, "]")));
    auto r = store_->RegisterNamespace(ns);
    if (!r.ok()) {
      return absl::Status(r.status().code(), absl::StrCat("namespaces[", i, "] (", ns.name,
                                                          "): ", r.status().message()));
    }
  }
  if (config_.metrics_port() != 0) {
    ASSIGN_OR_RETURN(exporter_,
                     MetricsExporter::Start(config_.listen_address(), config_.metrics_port(),
                                            store_.get(), &ctx_.metrics, ctx_.node_id));
    if (events_ != nullptr) {
      exporter_->ExportEvents([pub = events_.get()] { return pub->stats(); });
    }
  }
  RETURN_IF_ERROR(StartShm());
  ASSIGN_OR_RETURN(ucx_, StartUcxFromConfig(config_, &ctx_));
  ctx_.ucx = ucx_.get();
  ctx_.open_micros = common::RealClock()->NowMicros();
  ctx_.store.store(store_.get(), std::memory_order_release);
  server_->GetHealthCheckService()->SetServingStatus(true);
  const storage::StoreStats st = store_->Stats();
  KVTIER_LOG(INFO) << "store open in " << (ctx_.open_micros - t0) / 1000
                   << " ms: " << config_.data_dir() << ", hot " << st.hot_capacity_bytes
                   << " bytes (" << st.hot_allocator << "), " << st.namespaces.size()
                   << " namespaces";
  return absl::OkStatus();
}

absl::Status KvtierServer::StartShm() {
  if (config_.shm_socket() == "off") return absl::OkStatus();
  dataplane::ShmServerOptions options;
  options.max_region_bytes = config_.shm_max_region_bytes();
  options.max_sessions = config_.shm_max_sessions();
  options.socket_path = config_.shm_socket();
  options.serve_frame = [ctx = &ctx_](std::string_view frame) { return ServeShmFrame(ctx, frame); };
  const bool derived = options.socket_path.empty();
  if (derived) {
    std::error_code ec;
    options.socket_path =
        std::filesystem::absolute(std::filesystem::path(config_.data_dir()) / "kvtierd.sock", ec)
            .lexically_normal();
    if (options.socket_path.size() > kMaxShmSocketPath) {
      // Only the default can be too long here (ValidateConfig checks a configured path).
      KVTIER_LOG(WARNING) << "shared-memory path off: " << options.socket_path
                          << " is too long for a Unix socket; set shm_socket";
      return absl::OkStatus();
    }
  }
  ASSIGN_OR_RETURN(shm_, dataplane::ShmServer::Start(options));
  ctx_.shm = shm_.get();
  KVTIER_LOG(INFO) << "same-node shared memory on " << options.socket_path;
  return absl::OkStatus();
}

absl::Status KvtierServer::Shutdown() {
  if (shut_down_) return absl::OkStatus();
  shut_down_ = true;
  if (server_ != nullptr) {
    // Refuse new calls, let the admitted ones finish until the grace deadline, then stop
    // gRPC with an immediate deadline (cancelling stragglers). Server::Shutdown alone would
    // wait out the whole deadline while idle client connections stay open.
    ctx_.draining.store(true);
    server_->GetHealthCheckService()->SetServingStatus(false);
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::milliseconds(InFlightGraceMs(config_, store_.get()));
    while (ctx_.in_flight.load() > 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    if (const int64_t left = ctx_.in_flight.load(); left > 0) {
      KVTIER_LOG(WARNING) << "shutdown: cancelling " << left << " calls after the grace period";
    }
    if (event_log_ != nullptr) event_log_->Close();  // wakes WatchEvents readers
    server_->Shutdown(std::chrono::system_clock::now());
    server_->Wait();
  }
  const int64_t t0 = common::RealClock()->NowMicros();
  // No UCX transfer completes after this (Put calls over UCX queue their store step on
  // the executor when their payloads are in), so the executor can go.
  if (ucx_ != nullptr) ucx_->Stop();
  executor_.reset();  // runs whatever is queued, joins
  shm_.reset();
  ucx_.reset();
  exporter_.reset();
  absl::Status flushed = absl::OkStatus();
  if (store_ != nullptr) {
    ctx_.store.store(nullptr, std::memory_order_release);
    const storage::StoreStats debt = store_->Stats();
    flushed = store_->Flush("");
    const int64_t t1 = common::RealClock()->NowMicros();
    KVTIER_LOG(INFO) << "shutdown: flushed " << debt.unflushed_blocks << " write-back blocks ("
                     << debt.unflushed_bytes << " bytes)";
    store_.reset();
    event_log_.reset();
    events_.reset();  // sends what the store reported last
    KVTIER_LOG(INFO) << "shutdown: grpc stopped; flush " << (t1 - t0) / 1000 << " ms, close "
                     << (common::RealClock()->NowMicros() - t1) / 1000 << " ms";
  }
  return flushed;
}

KvtierServer::~KvtierServer() {
  absl::Status s = Shutdown();
  if (!s.ok()) KVTIER_LOG(ERROR) << "shutdown: " << s.message();
}

}  // namespace kvtier::service
