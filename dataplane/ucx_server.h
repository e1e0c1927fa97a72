// UcxServer: kvtierd's end of the cross-node UCX data path (ucx/ucx_worker.h,
// ucx/am_protocol.h; docs/design.md §7). gRPC stays the control plane: the Put and
// Get reactors validate, authorize and answer as always; only the payload bytes move as
// UCX active messages (rendezvous: the server fetches a Put's payload straight into the
// buffer reserved for it, and a Get's payload is fetched by the client straight from the
// stored block).
//
// Sessions: a client connects an endpoint and says hello; the server answers with a
// random 16-byte session id bound to that endpoint. The first gRPC call naming the
// session binds it to the caller's identity (an opaque string, service/auth.h
// CallerIdentity); a call of another identity, an unknown or closed session is
// FAILED_PRECONDITION with ErrorReason UCX_SESSION_UNKNOWN. A Put's payload messages are
// accepted only from the session's own endpoint and only for a transfer a Put header
// announced; anything else is dropped and changes nothing. When an endpoint fails (client gone), its session ends,
// its pending transfers fail with UNAVAILABLE (UCX_TRANSFER_FAILED) and their buffers are
// released; a transfer whose payloads do not all arrive within transfer_timeout_ms fails
// the same way.
//
// Calls: with options.serve_call set, the server also answers a Put's call frame sent as
// a UCX message (ucx/am_protocol.h kCall: the same frame and reply as the shared-memory
// socket's, protocol/shm_wire.h), so a Put whose payloads move over UCX needs no gRPC
// call at all (docs/dataplane.md, "Put calls over UCX"). The frame runs as the session of
// the endpoint that sent it.
//
// Thread-safe. Callbacks given to ExpectPut / SendGet and serve_call run on the UCX
// progress thread and must not block.
#ifndef KVTIER_DATAPLANE_UCX_SERVER_H_
#define KVTIER_DATAPLANE_UCX_SERVER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "kvtier/v1/kvtier.pb.h"
#include "ucx/ucx_worker.h"

namespace kvtier::dataplane {

struct UcxServerOptions {
  std::string listen_address = "127.0.0.1";
  uint16_t port = 0;        // 0: ephemeral (UcxServer::port() reports it)
  std::string transports;   // UCX_TLS; empty: UCX's choice
  uint32_t transfer_timeout_ms = 10000;
  uint32_t max_sessions = 1024;
  // Payload messages that arrived before their Put header, kept (as rendezvous
  // descriptors: the bytes stay on the client) until the header comes or the timeout.
  uint32_t max_early_messages = 4096;
  // Answers one call frame: `session` is the sending endpoint's session (empty: it has
  // none), `reply` sends the reply frame back to that endpoint (thread-safe, once; a reply
  // longer than max_call_frame() is dropped). Runs on the progress thread: must not
  // block. Empty: calls are not offered (the hello reply says so) and kCall is dropped.
  std::function<void(std::string session, std::string frame,
                     std::function<void(std::string reply)> reply)>
      serve_call;
};

// Where one Put's payloads land: block i's into data[i], of exactly the size
// header.blocks[i] declares (service/ucx_put.h: the block's reserved hot slot, or a
// staging buffer); `owner` keeps that memory alive while a receive may write into it.
// Not to be read until ExpectPut's callback said OK.
struct UcxPutBuffers {
  std::vector<std::span<uint8_t>> data;
  std::shared_ptr<void> owner;
};

// One payload a Get sends: key `index` of the request, the bytes and what keeps them alive.
struct UcxOutgoing {
  uint32_t index = 0;
  std::span<const uint8_t> bytes;
  std::shared_ptr<const void> owner;
};

class UcxServer {
 public:
  // Starts the UCX worker and its listener. UNAVAILABLE when UCX cannot start or listen.
  static absl::StatusOr<std::unique_ptr<UcxServer>> Start(const UcxServerOptions& options);
  // Stop(), closes all endpoints, stops the worker.
  ~UcxServer();

  // Fails every pending transfer (CANCELLED, their callbacks run before this returns);
  // afterwards ExpectPut fails at once and calls are dropped. For a shutdown that must
  // know no transfer completes OK later. Idempotent.
  void Stop();

  uint16_t port() const { return worker_->port(); }
  // The host clients should connect to: listen_address unless it is a wildcard
  // ("0.0.0.0", "::", empty), then empty (the host of the client's gRPC target).
  std::string advertised_host() const;
  const std::string& instance_id() const { return instance_id_; }
  size_t session_count() const;
  uint64_t put_bytes() const { return put_bytes_.load(); }
  uint64_t get_bytes() const { return get_bytes_.load(); }

  // OK if `session` is live and belongs to `identity` (binding it on first use);
  // FAILED_PRECONDITION with ErrorReason UCX_SESSION_UNKNOWN naming `field` otherwise.
  absl::Status CheckSession(std::string_view session, std::string_view identity,
                            std::string_view field);
  // The identity `session` is bound to ("" while no call has named it), or nullopt for
  // an unknown or closed session. Binds nothing.
  std::optional<std::string> BoundIdentity(std::string_view session) const;
  // The largest call or reply frame a UCX message carries.
  size_t max_call_frame() const { return worker_->max_header(); }

  // Receives the payloads of (session, transfer): block i into buffers->data[i] (a
  // message of another size than data[i] fails the transfer with
  // INVALID_ARGUMENT). `done` runs exactly once: OK when every block is in, else
  // UNAVAILABLE (endpoint failed, timeout) / INVALID_ARGUMENT / CANCELLED (CancelPut,
  // shutdown). A transfer id already expected on that session is INVALID_ARGUMENT.
  void ExpectPut(std::string session, uint64_t transfer, std::shared_ptr<UcxPutBuffers> buffers,
                 std::function<void(absl::Status)> done);
  // Ends a transfer whatever its state: an expected one's `done` runs with CANCELLED
  // (unless it ran); its payload messages, early or still to come (within
  // transfer_timeout_ms), are dropped. Idempotent.
  void CancelPut(std::string session, uint64_t transfer);

  // Sends `items` to the session's endpoint, tagged with `transfer`. `done` runs exactly
  // once when every send completed (OK: the client has the bytes) or one failed
  // (UNAVAILABLE).
  void SendGet(std::string session, uint64_t transfer, std::vector<UcxOutgoing> items,
               std::function<void(absl::Status)> done);

 private:
  struct Session {
    ucx::EndpointId ep = 0;
    std::string identity;  // empty until the first call names it
  };
  struct Transfer;
  using TransferKey = std::pair<std::string, uint64_t>;
  struct Early {
    ucx::Incoming payload;
    uint32_t index = 0;
    int64_t arrived_ms = 0;
  };

  explicit UcxServer(const UcxServerOptions& options);
  void OnHello(ucx::EndpointId from, std::string_view header);
  void OnPutData(ucx::EndpointId from, std::string_view header, ucx::Incoming in);
  void OnCall(ucx::EndpointId from, std::string_view frame);
  void OnEndpointError(ucx::EndpointId ep);
  void OnTick();
  void Deliver(const TransferKey& key, const std::shared_ptr<Transfer>& t, uint32_t index,
               ucx::Incoming in);
  void Complete(const TransferKey& key, absl::Status status);

  const UcxServerOptions options_;
  const std::string instance_id_;
  std::unique_ptr<ucx::Worker> worker_;
  std::atomic<uint64_t> put_bytes_{0};
  std::atomic<uint64_t> get_bytes_{0};

  mutable common::Mutex mu_;
  absl::flat_hash_map<std::string, Session> sessions_ ABSL_GUARDED_BY(mu_);

  // Progress thread only.
  absl::flat_hash_map<ucx::EndpointId, std::string> session_of_ep_;
  absl::flat_hash_map<TransferKey, std::shared_ptr<Transfer>> transfers_;
  absl::flat_hash_map<TransferKey, std::vector<Early>> early_;
  absl::flat_hash_map<TransferKey, int64_t> ended_;  // CancelPut'ed: dropped until then (ms)
  size_t early_count_ = 0;
  bool stopped_ = false;
};

}  // namespace kvtier::dataplane

#endif  // KVTIER_DATAPLANE_UCX_SERVER_H_
