// The kvtier.v1.KvCache (data plane) and kvtier.v1.KvCacheAdmin gRPC services on the
// callback API (docs/design.md §3 Put / Get / Lookup data flow, §5 Service, admission and
// limits). Pieces: admission and the unary helper (service/admission.h), request checks
// (service/request_checks.h), the Put and Get reactors (service/put_reactor.h,
// service/get_reactor.h), the handlers (service/data_handlers.cc,
// service/admin_handlers.cc), frames (protocol/wire.h).
//
// Reactions never block: every call that touches the store or a codec is queued on the
// bounded executor (common::ThreadPool::TrySchedule; a full queue answers
// RESOURCE_EXHAUSTED "server busy"). Streams keep one read and one write in flight.
// Put and Get are raw (grpc::ByteBuffer) methods:
//   - Put parses chunk frames itself and keeps the received slices (a reference each, no
//     copy); each block goes to the store as a list of pieces viewing them
//     (storage::BlockPut::pieces), which the store copies once, into the hot tier. Only a
//     block that must be transcoded is joined into one buffer first; raw fp16/bf16 blocks
//     for an fp16/bf16 namespace just get the codec header as one more piece. The whole
//     Put is validated (and transcoded) before anything is stored.
//   - Get hand-serializes GetResponse frames whose payload slices point into the store's
//     memory, kept alive by storage::BlockRef::owner() (zero payload copies in the server).
//   - Same-node clients (PutHeader.shm_session / GetRequest.shm_session, see
//     dataplane/shm_server.h): Put's blocks view the client's region and the store copies
//     them into the hot tier; Get copies each found payload into the region at its
//     destination and sends the header alone. Region ranges are checked against the
//     region's size before any byte is touched.
//
// Until the store is attached (SetStore) every RPC answers UNAVAILABLE.
#ifndef KVTIER_SERVICE_KV_CACHE_SERVICE_H_
#define KVTIER_SERVICE_KV_CACHE_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "common/mutex.h"
#include "common/thread_pool.h"
#include "grpcpp/grpcpp.h"
#include "kvtier/v1/kvtier.grpc.pb.h"
#include "service/auth.h"
#include "service/limits.h"
#include "service/metrics.h"
#include "service/put_budget.h"
#include "service/peer_fanout.h"
#include "service/put_watchdog.h"
#include "dataplane/shm_server.h"
#include "storage/tiered_store.h"

namespace kvtier::dataplane {
class UcxServer;  // dataplane/ucx_server.h
}  // namespace kvtier::dataplane

namespace kvtier::service {


// Namespaces seen by the service, so hot paths (Put headers) can check them inside a
// reaction without calling the store. A registered spec never changes; DropNamespace
// erases its entry, so entries never go stale. Thread-safe.
class NamespaceCache {
 public:
  // Returns the namespace or null if it is not cached.
  std::shared_ptr<const storage::NamespaceOptions> Find(const std::string& name) const;
  void Insert(const storage::NamespaceOptions& ns);
  // Forgets namespace `name` (dropped); nothing when it is not cached.
  void Erase(const std::string& name);

 private:
  mutable common::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<const storage::NamespaceOptions>> map_
      ABSL_GUARDED_BY(mu_);
};

// Put streams open per client connection (grpc::ServerContext::peer()), for
// ServiceLimits::max_puts_per_connection. Thread-safe.
class ConnectionPuts {
 public:
  // Counts one more stream for `peer` and returns true, or returns false (counting
  // nothing) when `peer` has `max` open already.
  bool Acquire(const std::string& peer, uint32_t max);
  // Ends a stream Acquire counted.
  void Release(const std::string& peer);

 private:
  common::Mutex mu_;
  absl::flat_hash_map<std::string, uint32_t> open_ ABSL_GUARDED_BY(mu_);
};

// State shared by both services. Thread-safe once constructed: `store` is published
// once (release) and never changes afterwards.
struct ServiceContext {
  std::atomic<storage::TieredStore*> store{nullptr};  // null until the store is open
  common::ThreadPool* executor = nullptr;             // not owned
  ServiceMetrics metrics;
  NamespaceCache namespaces;
  std::string node_id;
  uint32_t replication_factor = 1;
  ServiceLimits limits;
  int64_t open_micros = 0;  // when the store was opened (uptime)
  // Payload bytes buffered by Put streams (at most limits.put_budget_bytes), shared
  // fairly across tenants (service/put_budget.h).
  PutBudget put_budget;
  ConnectionPuts connection_puts;
  // Shutdown: once set, new calls are refused with UNAVAILABLE.
  std::atomic<bool> draining{false};
  std::atomic<int64_t> in_flight{0};  // calls admitted and not yet done
  PeerFanout* fanout = nullptr;       // cluster mode only (not owned); null = single node
  // Cancels stalled Put streams (not owned); null = no progress timeout.
  PutWatchdog* put_watchdog = nullptr;
  // Same-node shared-memory data path (not owned); null = off. Set before `store`.
  dataplane::ShmServer* shm = nullptr;
  // Cross-node UCX data path (not owned); null = off. Set before serving.
  dataplane::UcxServer* ucx = nullptr;
  // Who may call, and which tenant's namespaces they may use. Set before serving.
  Authenticator auth;
};

// Fills `offer` with the shared-memory data path of ctx (left empty when there is none).
void FillShmOffer(const ServiceContext& ctx, v1::SharedMemoryOffer* offer);
// Fills `offer` with the UCX data path of ctx (left empty when there is none).
void FillUcxOffer(const ServiceContext& ctx, v1::UcxOffer* offer);

// Drops the namespace and tenant entries of `stats` that `caller` may not see.
void RemoveOtherTenants(const Caller& caller, v1::StatsResponse* stats);

// Every method is raw (grpc::ByteBuffer): the services parse requests themselves, so
// bytes that do not parse get INVALID_ARGUMENT naming the method (service/admission.h
// RunParsed), and Put / Get handle their frames (protocol/wire.h).
using KvCacheBase = v1::KvCache::WithRawCallbackMethod_RegisterNamespace<
    v1::KvCache::WithRawCallbackMethod_Put<v1::KvCache::WithRawCallbackMethod_Get<
        v1::KvCache::WithRawCallbackMethod_Lookup<v1::KvCache::WithRawCallbackMethod_Pin<
            v1::KvCache::WithRawCallbackMethod_Unpin<v1::KvCache::WithRawCallbackMethod_ReportScores<
                v1::KvCache::WithRawCallbackMethod_Delete<
                    v1::KvCache::WithRawCallbackMethod_Compact<
                        v1::KvCache::WithRawCallbackMethod_ReleaseLease<
                            v1::KvCache::Service>>>>>>>>>>;

using KvCacheAdminBase = v1::KvCacheAdmin::WithRawCallbackMethod_Stats<
    v1::KvCacheAdmin::WithRawCallbackMethod_ListNamespaces<
        v1::KvCacheAdmin::WithRawCallbackMethod_Evict<v1::KvCacheAdmin::WithRawCallbackMethod_Flush<
            v1::KvCacheAdmin::WithRawCallbackMethod_ClusterStatus<
                v1::KvCacheAdmin::WithRawCallbackMethod_DropNamespace<
                    v1::KvCacheAdmin::WithRawCallbackMethod_Recover<
                        v1::KvCacheAdmin::Service>>>>>>>;

// Thread-safe. `ctx` must outlive the service.
class KvCacheServiceImpl final : public KvCacheBase {
 public:
  explicit KvCacheServiceImpl(ServiceContext* ctx) : ctx_(ctx) {}

  grpc::ServerUnaryReactor* RegisterNamespace(grpc::CallbackServerContext* context,
                                              const grpc::ByteBuffer* request,
                                              grpc::ByteBuffer* response) override;
  grpc::ServerReadReactor<grpc::ByteBuffer>* Put(grpc::CallbackServerContext* context,
                                                 grpc::ByteBuffer* response) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Get(grpc::CallbackServerContext* context,
                                                  const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* Lookup(grpc::CallbackServerContext* context,
                                   const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Pin(grpc::CallbackServerContext* context,
                                const grpc::ByteBuffer* request,
                                grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Unpin(grpc::CallbackServerContext* context,
                                  const grpc::ByteBuffer* request,
                                  grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ReportScores(grpc::CallbackServerContext* context,
                                         const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Delete(grpc::CallbackServerContext* context,
                                   const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Compact(grpc::CallbackServerContext* context,
                                    const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ReleaseLease(grpc::CallbackServerContext* context,
                                         const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) override;

 private:
  ServiceContext* ctx_;
};

// Thread-safe. `ctx` must outlive the service.
class KvCacheAdminImpl final : public KvCacheAdminBase {
 public:
  explicit KvCacheAdminImpl(ServiceContext* ctx) : ctx_(ctx) {}

  grpc::ServerUnaryReactor* Stats(grpc::CallbackServerContext* context,
                                  const grpc::ByteBuffer* request,
                                  grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ListNamespaces(grpc::CallbackServerContext* context,
                                           const grpc::ByteBuffer* request,
                                           grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Evict(grpc::CallbackServerContext* context,
                                  const grpc::ByteBuffer* request,
                                  grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Flush(grpc::CallbackServerContext* context,
                                  const grpc::ByteBuffer* request,
                                  grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ClusterStatus(grpc::CallbackServerContext* context,
                                          const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* DropNamespace(grpc::CallbackServerContext* context,
                                          const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* response) override;
  // RecoverRequest: operator only; runs on the executor for the whole scan.
  grpc::ServerUnaryReactor* Recover(grpc::CallbackServerContext* context,
                                    const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override;

 private:
  ServiceContext* ctx_;
};

// A Lookup that arrived as a frame on the shared-memory socket (service/shm_calls.h): the
// same request bytes, checks, answer (cluster fan-out included) and errors as the gRPC
// Lookup, run on the calling thread (it waits for a fan-out's peers). Appends the
// serialized LookupResponse to *response.
absl::Status LookupFromSharedMemory(ServiceContext* ctx, storage::TieredStore* store,
                                    const Caller& caller, std::string_view request,
                                    std::string* response);

}  // namespace kvtier::service

#endif  // KVTIER_SERVICE_KV_CACHE_SERVICE_H_
