// KvtierServer: the whole kvtierd process minus flag parsing and signals. Owns the gRPC
// server (KvCache, KvCacheAdmin, grpc.health.v1 for "" and both service names,
// reflection; TLS per config.tls), the bounded executor, the TieredStore and the optional
// Prometheus exporter (always plaintext: scrape it inside the pod network).
//
// Lifecycle: Start() binds and serves with health NOT_SERVING (data RPCs answer
// UNAVAILABLE); OpenStore() opens the store, registers the config's namespaces, starts the
// same-node shared-memory socket (dataplane/shm_server.h) and flips health to SERVING
// (with ServerConfig.events, a ZmqEventPublisher is created first and the store reports
// every tier change into it); Shutdown() stops accepting, lets in-flight calls finish for
// the part of shutdown_grace_ms the store's write-back debt does not need (at least half;
// the debt is bounded by max_unflushed_bytes / _blocks, storage/write_back.h), drains the
// executor and flushes the store, so the whole stop fits the grace.
#ifndef KVTIER_SERVICE_SERVER_H_
#define KVTIER_SERVICE_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/thread_pool.h"
#include "events/event_log.h"
#include "events/zmq_publisher.h"
#include "grpcpp/grpcpp.h"
#include "kvtier/v1/kvtier.pb.h"
#include "service/events_service.h"
#include "service/kv_cache_service.h"
#include "service/peer_fanout.h"
#include "service/metrics.h"
#include "service/put_watchdog.h"
#include "dataplane/shm_server.h"
#include "dataplane/ucx_server.h"
#include "service/ucx_put.h"
#include "storage/tiered_store.h"

namespace kvtier::service {

// Thread-compatible: call Start, OpenStore and Shutdown from one thread, in that order.
class KvtierServer {
 public:
  // Builds and starts the gRPC server on config.listen_address:config.port (port 0 binds
  // a free port). REQUIRES: ValidateConfig(config).ok(). UNAVAILABLE if it cannot bind.
  static absl::StatusOr<std::unique_ptr<KvtierServer>> Start(const v1::ServerConfig& config);

  ~KvtierServer();  // Shutdown() if not done yet

  // Opens the store and registers the config's namespaces; then health is SERVING.
  // Errors from TieredStore::Open / RegisterNamespace / the metrics exporter.
  absl::Status OpenStore();

  // Stops the server (in-flight calls: config.shutdown_grace_ms less the estimated flush
  // time), drains the executor and flushes the store. Returns the flush status.
  // Idempotent.
  absl::Status Shutdown();

  // "HOST:PORT" actually bound.
  const std::string& address() const { return address_; }
  int port() const { return port_; }
  const std::string& node_id() const { return ctx_.node_id; }
  // The state the services share (tests read e.g. put_budget from it).
  const ServiceContext& context() const { return ctx_; }

 private:
  KvtierServer() = default;
  // Cluster mode (static_peers or peer_dns): starts membership_ and fanout_ and takes the
  // ring identity as node id. OK and nothing in single-node mode.
  absl::Status StartCluster(int selected_port);
  // Starts shm_ unless config.shm_socket is "off".
  absl::Status StartShm();

  v1::ServerConfig config_;
  std::string address_;
  int port_ = 0;
  std::unique_ptr<common::ThreadPool> executor_;
  std::unique_ptr<PutWatchdog> put_watchdog_;  // outlives every Put reactor (Shutdown)
  ServiceContext ctx_;
  std::unique_ptr<KvCacheServiceImpl> data_service_;
  std::unique_ptr<KvCacheAdminImpl> admin_service_;
  std::unique_ptr<KvEventsServiceImpl> events_service_;  // serves event_log_ (may be null)
  std::unique_ptr<grpc::Server> server_;
  // ServerConfig.events; null when off. Outlive the store, which reports into them
  // (into the log when events.grpc is on, which forwards to the publisher).
  std::unique_ptr<events::ZmqEventPublisher> events_;
  std::unique_ptr<events::EventLog> event_log_;
  std::unique_ptr<storage::TieredStore> store_;
  std::unique_ptr<MetricsExporter> exporter_;
  std::unique_ptr<dataplane::ShmServer> shm_;  // null when shm_socket is "off" (or unusable)
  std::unique_ptr<dataplane::UcxServer> ucx_;  // null unless ucx.enabled
  // Cluster mode (static_peers or peer_dns); destroyed before the members above, after
  // Shutdown() has stopped the server.
  std::unique_ptr<Membership> membership_;
  std::unique_ptr<PeerFanout> fanout_;
  bool shut_down_ = false;
};

// The gRPC port's credentials: insecure without config.tls, else TLS from its files
// (reloaded as they change), asking for client certificates when client_ca_file is set
// and requiring them with require_client_cert.
std::shared_ptr<grpc::ServerCredentials> ServerCredentialsFor(const v1::ServerConfig& config);

// Formats host:port, bracketing IPv6 literals.
std::string JoinHostPort(const std::string& host, int port);

}  // namespace kvtier::service

#endif  // KVTIER_SERVICE_SERVER_H_
