// Client::Impl: the state behind client/client.h's Client and the helpers its source files
// share (client.cc: connect and the unary calls; client_streams.cc: the Put and Get loops
// and streams; client_paths.cc: the payload paths; client_ucx.cc: the UCX channel).
// Private to the client library: not an API.
// Thread-safe, as Client is.
#ifndef KVTIER_CLIENT_CLIENT_IMPL_H_
#define KVTIER_CLIENT_CLIENT_IMPL_H_

#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/client_unary_call.h>
#include <grpcpp/impl/rpc_method.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>
#include <grpcpp/support/sync_stream.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "client/client_paths.h"
#include "client/coalescer.h"
#include "client/prefix_keys.h"
#include "client/shared_region.h"
#include "client/ucx_channel.h"
#include "common/mutex.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "kvtier/v1/kvtier.grpc.pb.h"
#include "protocol/convert.h"
#include "protocol/error_detail.h"
#include "protocol/shm_wire.h"
#include "protocol/slice_refs.h"
#include "protocol/tls.h"
#include "protocol/wire.h"

namespace kvtier::client {
namespace internal {

namespace v1 = ::kvtier::v1;

inline constexpr char kPutMethod[] = "/kvtier.v1.KvCache/Put";
inline constexpr char kGetMethod[] = "/kvtier.v1.KvCache/Get";
inline constexpr char kLookupMethod[] = "/kvtier.v1.KvCache/Lookup";

inline absl::Status FromGrpc(const char* rpc, const grpc::Status& status) {
  return protocol::FromGrpcStatus(rpc, status);
}

// A call frame's reply (the shared-memory socket's or UCX's) as the call's outcome, as
// FromGrpc(rpc, ...) gives it over gRPC; when OK, *response is parsed from its body
// (INTERNAL when it does not parse).
inline absl::Status FromCallReply(const protocol::shm::CallReply& reply, const char* rpc,
                                  google::protobuf::Message* response) {
  const grpc::Status g(static_cast<grpc::StatusCode>(reply.code), reply.message, reply.details);
  if (!g.ok()) return FromGrpc(rpc, g);
  if (!response->ParseFromString(reply.body)) {
    return absl::InternalError(
        absl::StrCat(rpc, ": the call's reply does not parse as ", response->GetTypeName()));
  }
  return absl::OkStatus();
}

inline std::chrono::system_clock::time_point DeadlineAfter(int64_t ms) {
  return std::chrono::system_clock::now() + std::chrono::milliseconds(ms);
}

// One HTTP/2 connection and the stubs and raw methods bound to it.
struct Channel {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::KvCache::Stub> data;
  std::unique_ptr<v1::KvCacheAdmin::Stub> admin;
  std::unique_ptr<grpc::internal::RpcMethod> put_method;
  // The same Put method sent as one batch (metadata, the header message, the end of the
  // stream, then the answer): a Put whose payloads take another path is one message.
  std::unique_ptr<grpc::internal::RpcMethod> put_one_method;
  std::unique_ptr<grpc::internal::RpcMethod> get_method;
  std::unique_ptr<grpc::internal::RpcMethod> lookup_method;  // raw request bytes
};

// Splits [0, n) into at most `parts` contiguous non-empty ranges.
inline std::vector<std::pair<size_t, size_t>> SplitRanges(size_t n, size_t parts) {
  std::vector<std::pair<size_t, size_t>> ranges;
  if (n == 0) return ranges;
  parts = std::max<size_t>(1, std::min(parts, n));
  size_t begin = 0;
  for (size_t p = 0; p < parts; ++p) {
    const size_t end = begin + (n - begin) / (parts - p);
    ranges.emplace_back(begin, end);
    begin = end;
  }
  return ranges;
}

// Runs fn(i) for every i in [0, count): i = 0 on the calling thread, the rest on their
// own threads; returns the first error in index order.
template <typename Fn>
absl::Status RunParallel(size_t count, Fn fn) {
  std::vector<absl::Status> results(count);
  std::vector<std::thread> threads;
  threads.reserve(count > 0 ? count - 1 : 0);
  for (size_t i = 1; i < count; ++i) {
    threads.emplace_back([&results, &fn, i] { results[i] = fn(i); });
  }
  if (count > 0) results[0] = fn(0);
  for (auto& t : threads) t.join();
  for (auto& s : results) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace internal

struct Client::Impl {
  using Channel = internal::Channel;

  ClientOptions options;
  ConnectInfo info;
  std::vector<Channel> channels;
  std::atomic<uint64_t> next_channel{0};
  // Batch concurrent small Put / Get calls (null when coalescing is off): coalescer for
  // the gRPC and shared-memory paths, ucx_coalescer (ucx_coalesce_max_bytes) for UCX.
  std::unique_ptr<internal::Coalescer> coalescer;
  std::unique_ptr<internal::Coalescer> ucx_coalescer;

  // Layouts of the namespaces registered through this client, sent with every Put.
  common::Mutex mu;
  std::map<std::string, v1::Layout, std::less<>> layouts ABSL_GUARDED_BY(mu);

  void RememberLayout(const v1::NamespaceSpec& spec) {
    common::MutexLock lock(&mu);
    layouts[spec.name()] = spec.layout();
  }
  std::optional<v1::Layout> KnownLayout(std::string_view ns) {
    common::MutexLock lock(&mu);
    auto it = layouts.find(ns);
    if (it == layouts.end()) return std::nullopt;
    return it->second;
  }

  // The server answers Lookup frames on the shared region's socket (its offer said so).
  bool socket_lookup_offered = false;
  // Lookups go over the socket: offered, and no socket Lookup was refused since the last
  // socket Put or Get was answered. A refusal (UNAUTHENTICATED: under auth, a session no
  // Put or Get has bound yet; or a socket failure) sends Lookups over gRPC until then.
  std::atomic<bool> socket_lookup{false};
  // The shared region while the shared-memory path is in use, else null.
  common::Mutex region_mu;
  std::shared_ptr<SharedRegion> region ABSL_GUARDED_BY(region_mu);

  std::shared_ptr<SharedRegion> Region() {
    common::MutexLock lock(&region_mu);
    return region;
  }
  // The server no longer knows `r`'s session (it restarted): use TCP from now on.
  void DropRegion(const std::shared_ptr<SharedRegion>& r) {
    common::MutexLock lock(&region_mu);
    if (region == r) region.reset();
  }
  static bool IsLostSession(const absl::Status& s) {
    return protocol::HasErrorReason(s, v1::SHM_SESSION_UNKNOWN);
  }

  // Opens the shared region `offer` describes, or records why not.
  void OpenSharedMemory(const v1::SharedMemoryOffer& offer) {
    if (!options.shared_memory || offer.socket_path().empty()) return;
    const std::string& path =
        options.shared_memory_socket.empty() ? offer.socket_path() : options.shared_memory_socket;
    auto r =
        SharedRegion::Open(path, std::min(options.shared_memory_bytes, offer.max_region_bytes()),
                           offer.instance_id(), options.shared_memory_cuda_register);
    if (!r.ok()) {
      info.shared_memory_error = std::string(r.status().message());
      return;
    }
    info.shared_memory_cuda_registered = (*r)->cuda_registered();
    socket_lookup_offered = offer.socket_lookup();
    socket_lookup = socket_lookup_offered;
    common::MutexLock lock(&region_mu);
    region = *std::move(r);
  }

  // True if small Put / Get calls should go through the coalescer: it is on, and the calls
  // do not go over the shared region's socket (where batching cost more than it saved:
  // docs/performance.md, "Per-call cost").
  bool Coalesces() {
    return coalescer != nullptr &&
           !(options.shared_memory_socket_calls && !PreferUcx() && Region() != nullptr);
  }
  // The coalescer a call carrying `payload_bytes` goes through (the UCX one while the
  // call's payloads would move over UCX), or null when the call is sent on its own. A
  // Put whose call would go as a UCX call frame (ClientOptions::ucx_calls) is sent on its
  // own: the frame costs no gRPC call, and a batch only made its Puts wait for each other
  // (docs/dataplane.md, "Put calls over UCX").
  internal::Coalescer* CoalescerFor(uint64_t payload_bytes, bool put) {
    if (!Coalesces()) return nullptr;
    internal::Coalescer* c = coalescer.get();
    // The call's payloads would move over UCX (PreferUcx, or no shared region).
    if (std::shared_ptr<UcxChannel> u = Ucx();
        u != nullptr && (options.ucx_over_shared_memory || Region() == nullptr)) {
      if (put && options.ucx_calls && u->serves_calls()) return nullptr;
      if (ucx_coalescer != nullptr) c = ucx_coalescer.get();
    }
    return c->Accepts(payload_bytes) ? c : nullptr;
  }

  // The UCX channel while the UCX path is usable, else null (client/client_ucx.cc).
  common::Mutex ucx_mu;
  std::shared_ptr<UcxChannel> ucx ABSL_GUARDED_BY(ucx_mu);
  // Opens the UCX channel `offer` describes, or records why not.
  void OpenUcx(const v1::UcxOffer& offer);
  std::shared_ptr<UcxChannel> Ucx();
  // `u` failed (endpoint down, session lost): use the other paths from now on.
  void DropUcx(const std::shared_ptr<UcxChannel>& u);
  // True if payloads should take UCX rather than the shared region.
  bool PreferUcx() { return options.ucx_over_shared_memory && Ucx() != nullptr; }
  // A Put of `blocks` over UCX. Its status, or a status IsUcxFallback accepts when the
  // call should be redone over the stream (nothing was stored).
  absl::Status PutUcx(const std::shared_ptr<UcxChannel>& u, std::string_view ns,
                      std::span<const PutBlock> blocks, v1::PayloadFormat format,
                      std::chrono::system_clock::time_point deadline, PutResult* result);
  // PutUcx's call as a frame over UCX (ClientOptions::ucx_calls), its payloads sent as
  // `transfer` already. nullopt when it did not go that way (off, not offered, too large
  // for a UCX message, or refused before the transfer was touched): the header then goes
  // over gRPC. Otherwise the Put's status, with UCX_TRANSFER_FAILED when the endpoint
  // failed.
  std::optional<absl::Status> PutUcxCall(const std::shared_ptr<UcxChannel>& u,
                                         std::string_view ns, std::span<const PutBlock> blocks,
                                         v1::PayloadFormat format,
                                         std::chrono::system_clock::time_point deadline,
                                         uint64_t transfer, PutResult* result);
  // A Get of `request`'s keys over UCX into `destination`.
  absl::Status GetUcx(const std::shared_ptr<UcxChannel>& u, v1::GetRequest request,
                      const protocol::GetStreamParser::DestinationFn& destination, size_t n,
                      std::chrono::system_clock::time_point deadline,
                      std::vector<v1::GetBlockInfo>* infos);
  // True if a UCX call's `status` means "redo it over the stream".
  static bool IsUcxFallback(const absl::Status& s);

  Channel& PickChannel() {
    return channels[next_channel.fetch_add(1, std::memory_order_relaxed) % channels.size()];
  }

  int64_t DeadlineMs(int64_t ms) const { return ms > 0 ? ms : options.default_deadline_ms; }

  void Authorize(grpc::ClientContext* ctx) const {
    if (!options.auth_token.empty()) {
      ctx->AddMetadata("authorization", "Bearer " + options.auth_token);
    }
  }

  // Runs `attempt(ctx, channel)` with one overall deadline; retries UNAVAILABLE when
  // `idempotent`. `wait_for_ready` makes the call wait for a connection instead of failing
  // fast (used by Connect).
  // `at`, when set, is the deadline (deadline_ms is then ignored).
  template <typename Fn>
  absl::Status Call(const char* rpc, int64_t deadline_ms, bool idempotent, Fn attempt,
                    bool wait_for_ready = false,
                    std::optional<std::chrono::system_clock::time_point> at = std::nullopt) {
    const auto deadline = at.value_or(internal::DeadlineAfter(deadline_ms));
    int64_t backoff_ms = options.retry_backoff_ms;
    const int max_attempts = idempotent ? std::max(1, options.max_attempts) : 1;
    grpc::Status status;
    for (int a = 0; a < max_attempts; ++a) {
      grpc::ClientContext ctx;
      ctx.set_deadline(deadline);
      Authorize(&ctx);
      if (wait_for_ready) ctx.set_wait_for_ready(true);
      status = attempt(&ctx, PickChannel());
      if (status.ok() || status.error_code() != grpc::StatusCode::UNAVAILABLE) break;
      if (a + 1 == max_attempts) break;
      const auto wake = std::chrono::system_clock::now() + std::chrono::milliseconds(backoff_ms);
      if (wake >= deadline) break;
      std::this_thread::sleep_until(wake);
      backoff_ms *= 2;
    }
    return internal::FromGrpc(rpc, status);
  }

  // One unary RPC through a generated stub method, on the data-plane or the admin stub,
  // with Call's deadline and retry rules.
  template <typename Req, typename Resp>
  absl::Status Unary(const char* rpc, const CallOptions& call, bool idempotent,
                     grpc::Status (v1::KvCache::Stub::*method)(grpc::ClientContext*, const Req&,
                                                               Resp*),
                     const Req& req, Resp* resp) {
    return Call(rpc, DeadlineMs(call.deadline_ms), idempotent,
                [&](grpc::ClientContext* ctx, Channel& ch) {
                  return ((*ch.data).*method)(ctx, req, resp);
                });
  }
  template <typename Req, typename Resp>
  absl::Status Unary(const char* rpc, const CallOptions& call, bool idempotent,
                     grpc::Status (v1::KvCacheAdmin::Stub::*method)(grpc::ClientContext*,
                                                                    const Req&, Resp*),
                     const Req& req, Resp* resp) {
    return Call(rpc, DeadlineMs(call.deadline_ms), idempotent,
                [&](grpc::ClientContext* ctx, Channel& ch) {
                  return ((*ch.admin).*method)(ctx, req, resp);
                });
  }

  using SliceRefs = protocol::SliceRefs;

  // The payload paths in fallback order (client/client_paths.h, docs/dataplane.md).
  internal::PutPaths MakePutPaths();
  internal::GetPaths MakeGetPaths();
  const internal::PutPaths put_paths = MakePutPaths();
  const internal::GetPaths get_paths = MakeGetPaths();

  // Puts `blocks` over the first payload path that takes them (put_paths).
  absl::Status PutRun(std::string_view ns, std::span<const PutBlock> blocks,
                      v1::PayloadFormat format, std::chrono::system_clock::time_point deadline,
                      PutResult* result);

  // The header message of a Put of `blocks` (with `shm_session`: naming each payload's
  // offset in the shared region).
  v1::PutRequest PutHeaderMessage(std::string_view ns, std::span<const PutBlock> blocks,
                                  v1::PayloadFormat format, std::string_view shm_session,
                                  std::span<const uint64_t> shm_offsets);

  // Calls handled as frames on the shared region's socket (ClientOptions::
  // shared_memory_socket_calls), for Client::shared_memory_socket_calls().
  std::atomic<uint64_t> socket_calls{0};
  // Puts answered over UCX's call frames (ClientOptions::ucx_calls), for
  // Client::ucx_calls().
  std::atomic<uint64_t> ucx_calls{0};
  // Sends `request` as one call over `r`'s socket. True when the socket answered it:
  // *status is the call's outcome (as FromGrpc(rpc, ...) would give it over gRPC) and, if
  // OK, *response is parsed. False when the call must go over gRPC instead: the option is
  // off, the request does not fit a frame, the socket failed, or the server answered
  // UNAVAILABLE or UNAUTHENTICATED (a session not yet bound to this client's identity:
  // the gRPC call binds it).
  bool SocketCall(SharedRegion& r, protocol::shm::FrameOp op, std::string_view request,
                  std::chrono::system_clock::time_point deadline, const char* rpc,
                  google::protobuf::Message* response, absl::Status* status);

  // One Put stream carrying `blocks`: the header message, then chunk messages whose
  // payload slices point into the callers' buffers; or, with `shm_session`, the header
  // alone, naming each payload's offset in the shared region. Retried on UNAVAILABLE
  // within the deadline (a new stream each time), except a UCX transfer's header.
  absl::Status PutStream(std::string_view ns, std::span<const PutBlock> blocks,
                         v1::PayloadFormat format, std::chrono::system_clock::time_point deadline,
                         SliceRefs* refs, PutResult* result, std::string_view shm_session = {},
                         std::span<const uint64_t> shm_offsets = {},
                         std::string_view ucx_session = {}, uint64_t ucx_transfer = 0);

  // One Get of keys[0, n) into buffers / allocated strings, over the first payload path
  // that takes it (get_paths). With `buffers` (one per key) and a shared region with
  // room, the server writes the payloads into the region (straight into buffers that are
  // SharedBuffers, else into staging copied out here); otherwise they arrive over UCX or
  // in the stream.
  absl::Status GetRun(std::string_view ns, std::span<const std::string> keys,
                      const GetOptions& opts, std::chrono::system_clock::time_point deadline,
                      const protocol::GetStreamParser::DestinationFn& destination,
                      std::span<const std::span<uint8_t>> buffers,
                      std::vector<v1::GetBlockInfo>* infos,
                      const std::function<void()>* on_header = nullptr);

  // How a Get into `buffers` goes (GetParallel): in pieces of `bytes` (GetPieces; 0: not
  // in pieces, when options.get_piece_bytes is 0 or not exceeded, or a UCX channel is in
  // use), staged in the shared region one stream of them at a time (`in_region`: a piece
  // of at most a third of the region holds at least one buffer) or over the stream.
  struct PiecePlan {
    uint64_t bytes = 0;
    bool in_region = false;
  };
  PiecePlan PiecesFor(std::span<const std::span<uint8_t>> buffers);

  // GetRun for keys[0, n), or, when `buffers` add up to more than piece_bytes (not 0), as
  // consecutive GetRuns of about that many bytes, the next started once the server has
  // the one before (GetCall::on_header) or it is done, at most two in flight. Returns the
  // first error in key order; no piece starts after one failed.
  absl::Status GetPieces(std::string_view ns, std::span<const std::string> keys,
                         const GetOptions& opts, std::chrono::system_clock::time_point deadline,
                         const std::function<protocol::GetStreamParser::DestinationFn(
                             size_t base)>& make_destination,
                         size_t base, std::span<const std::span<uint8_t>> buffers,
                         uint64_t piece_bytes,
                         std::vector<v1::GetBlockInfo>* infos);

  // One attempt of a Get whose payloads come in the stream; calls *on_header (when set)
  // once the header has arrived.
  grpc::Status GetStreamAttempt(grpc::ClientContext* ctx, Channel& ch,
                                const v1::GetRequest& request,
                                const protocol::GetStreamParser::DestinationFn& destination,
                                size_t n, std::vector<v1::GetBlockInfo>* infos,
                                const std::function<void()>* on_header = nullptr);

  // One attempt of a Get whose payloads do not come in the stream (shared region or
  // UCX): the stream is the header alone.
  grpc::Status GetShmAttempt(grpc::ClientContext* ctx, Channel& ch, const v1::GetRequest& request,
                             std::vector<v1::GetBlockInfo>* infos);

  absl::Status GetParallel(
      std::string_view ns, std::span<const std::string> keys, const GetOptions& opts,
      const std::function<protocol::GetStreamParser::DestinationFn(size_t base)>& make_destination,
      std::span<const std::span<uint8_t>> buffers, std::vector<v1::GetBlockInfo>* infos);
};

}  // namespace kvtier::client

#endif  // KVTIER_CLIENT_CLIENT_IMPL_H_
