// UcxChannel: the client's end of kvtierd's cross-node UCX data path
// (dataplane/ucx_server.h; ucx/am_protocol.h). One per Client: one UCX worker with its
// progress thread and one endpoint to the server, plus the session id the server issued
// to that endpoint in the handshake.
//
//   Put: SendPut starts one rendezvous active message per block (the server fetches the
//        payload straight from the caller's memory) while the gRPC Put stream carries the
//        header naming (session, transfer); Wait returns once UCX no longer reads the
//        caller's memory.
//   Put calls: a server that offers them (serves_calls()) takes the Put's call frame as a
//        UCX message too (Call): no gRPC call at all (docs/dataplane.md, "Put calls over
//        UCX").
//   Get: ExpectGet registers the transfer before the gRPC Get names it; each payload
//        message is received straight into the destination the caller's DestinationFn
//        gives; Wait returns once the `expected` payloads are in.
//
// Once the endpoint fails (server gone), healthy() turns false for good and every
// pending transfer fails with UNAVAILABLE; the Client then uses gRPC streams.
//
// Thread-safe.
#ifndef KVTIER_CLIENT_UCX_CHANNEL_H_
#define KVTIER_CLIENT_UCX_CHANNEL_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "protocol/shm_wire.h"
#include "protocol/wire.h"
#include "ucx/ucx_worker.h"

namespace kvtier::client {

class UcxChannel {
 public:
  using Deadline = std::chrono::system_clock::time_point;

  // Connects to host:port, says hello to the server `instance_id` names and waits for
  // its session until `deadline`. UNAVAILABLE when UCX cannot start or connect, the
  // server refuses or does not answer in time.
  static absl::StatusOr<std::unique_ptr<UcxChannel>> Open(const std::string& host, uint16_t port,
                                                          std::string_view instance_id,
                                                          const std::string& transports,
                                                          Deadline deadline);
  ~UcxChannel();

  const std::string& session() const { return session_; }
  // False once the endpoint failed; then every call fails fast.
  bool healthy() const { return healthy_.load(); }
  // A fresh transfer id (never 0, never reused by this channel).
  uint64_t NewTransfer() { return next_transfer_.fetch_add(1); }

  // The payload sends of one Put.
  class PutSends {
   public:
    // Returns once no send reads the payloads any more: OK when the server took every
    // payload, else the first error. Past `deadline` the endpoint is closed (the channel
    // turns unhealthy), which ends the sends, and the result is UNAVAILABLE.
    absl::Status Wait(Deadline deadline);

   private:
    friend class UcxChannel;
    common::Mutex mu;
    size_t left ABSL_GUARDED_BY(mu) = 0;
    absl::Status status ABSL_GUARDED_BY(mu);
    UcxChannel* channel = nullptr;
  };
  // Starts one payload message per entry (block i of the Put is payloads[i]); the
  // memory must stay valid until Wait returned.
  std::shared_ptr<PutSends> SendPut(uint64_t transfer,
                                    std::span<const std::span<const uint8_t>> payloads);

  // One Get's incoming payloads.
  class GetTransfer {
   public:
    // Waits until `expected` payloads landed. OK, the destination's error, UNAVAILABLE
    // (endpoint failed) or DEADLINE_EXCEEDED.
    absl::Status Wait(size_t expected, Deadline deadline);

   private:
    friend class UcxChannel;
    common::Mutex mu;
    size_t landed ABSL_GUARDED_BY(mu) = 0;
    size_t in_flight ABSL_GUARDED_BY(mu) = 0;
    absl::Status status ABSL_GUARDED_BY(mu);
    protocol::GetStreamParser::DestinationFn destination;  // progress thread only
  };
  // Registers `transfer`: payload message i is received into destination(i, info) where
  // info.size() is its length. End it with EndGet (also after errors).
  std::shared_ptr<GetTransfer> ExpectGet(uint64_t transfer,
                                         protocol::GetStreamParser::DestinationFn destination);
  // Forgets `transfer`; later messages for it are dropped. Returns once no receive into
  // its destinations is in flight.
  void EndGet(uint64_t transfer, const std::shared_ptr<GetTransfer>& t);

  // Whether the server answers call frames over UCX (its hello reply said so).
  bool serves_calls() const { return serves_calls_; }
  // The largest call frame Call sends (UCX's AM header limit).
  size_t max_call_frame() const { return worker_->max_header(); }
  // Sends `request` as a call frame (protocol/shm_wire.h) and waits for its reply until
  // `deadline`. INVALID_ARGUMENT when the frame exceeds max_call_frame(), UNAVAILABLE
  // when the endpoint failed (nothing known of the call's outcome beyond what a lost gRPC
  // call tells), DEADLINE_EXCEEDED when no reply came in time.
  absl::StatusOr<protocol::shm::CallReply> Call(protocol::shm::FrameOp op,
                                                std::string_view request, Deadline deadline);

 private:
  UcxChannel() = default;
  struct PendingCall;
  void OnGetData(std::string_view header, ucx::Incoming in);
  void OnCallReply(std::string_view frame);
  void OnEndpointError();
  void Fail(const absl::Status& status);

  std::unique_ptr<ucx::Worker> worker_;
  ucx::EndpointId ep_ = 0;
  std::string session_;
  std::atomic<bool> healthy_{true};
  std::atomic<uint64_t> next_transfer_{1};
  std::atomic<uint64_t> next_call_{1};
  bool serves_calls_ = false;  // set by Open

  common::Mutex mu_;
  absl::flat_hash_map<uint64_t, std::shared_ptr<GetTransfer>> gets_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, std::shared_ptr<PendingCall>> calls_ ABSL_GUARDED_BY(mu_);
  // The handshake's answer (empty until it came).
  bool hello_done_ ABSL_GUARDED_BY(mu_) = false;
  std::string hello_session_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvtier::client

#endif  // KVTIER_CLIENT_UCX_CHANNEL_H_
