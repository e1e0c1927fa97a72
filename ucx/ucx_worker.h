// kvtier::ucx::Worker: one UCX (UCP) context and worker with its own progress
// thread, the base of kvtier's cross-node data plane (docs/design.md §7; the service's
// end is dataplane/ucx_server.h, the client's client/ucx_channel.h).
//
// What it offers: a listener (ucp_listener on address:port; port 0 = ephemeral, reported
// by port()), outgoing endpoints (client-server sockaddr connections), and active
// messages: Send() posts one AM of a small header plus a payload, forced onto the
// rendezvous protocol so a large payload is fetched by the receiver straight into the
// buffer it chooses; an incoming AM reaches the handler registered for its id as an
// Incoming, which the handler may receive into a buffer of its choice (Receive), keep for
// later (move it away) or drop (let it go out of scope: the sender's send completes).
//
// Threading: every ucp call runs on the progress thread. Post() queues work for it from
// any thread (woken through an eventfd it polls next to UCX's, written only while the
// thread sleeps: a Put over UCX posts several tasks, and writing the eventfd for each
// while the thread was awake anyway cost a write and a read per task); handlers,
// completions and the endpoint error handler run on the progress thread and must not
// block. The public methods are thread-safe unless they say "progress thread only". The
// thread sleeps in poll() when UCX has nothing to do, except while a send or receive of
// at least 1 MiB is in flight: then it first polls UCX for up to 50 us (or until a task
// is posted). Over TCP such a transfer arrives as many segments some 10 us apart, and
// sleeping between them cost a wakeup each, paid mostly by the sending side's kernel
// (2 MiB blocks over UCX's TCP transport: Puts +19%, Gets +21-25%, less CPU per byte on
// both; docs/performance.md, "Cross-host path over UCX"). Smaller transfers never spin:
// at 256 KiB it only cost CPU.
//
// Endpoints are named by an EndpointId (never reused). An endpoint whose peer fails or
// closes is reported once to the error handler and then forgotten; every endpoint left
// is closed with ucp_ep_close_nbx when the Worker is destroyed.
#ifndef KVTIER_UCX_UCX_WORKER_H_
#define KVTIER_UCX_UCX_WORKER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"

namespace kvtier::ucx {

using EndpointId = uint64_t;

struct WorkerOptions {
  // UCX_TLS for this context (e.g. "tcp", "rc,tcp", "tcp,cma,posix"); empty: the
  // environment's UCX_TLS, else UCX's choice.
  std::string transports;
  // How often the tick handler runs (timeouts). Default: 100 ms.
  int tick_ms = 100;
};

class Worker;

// One received active message whose payload has not been consumed yet. Move-only; only
// handled on the progress thread. Destroying it without Receive() drops the payload.
class Incoming {
 public:
  Incoming() = default;
  ~Incoming();
  Incoming(Incoming&& other) noexcept;
  Incoming& operator=(Incoming&& other) noexcept;

  EndpointId from() const { return from_; }
  uint64_t length() const { return length_; }
  bool valid() const { return worker_ != nullptr; }

  // Receives the payload into [buffer, buffer + length()); `done` runs on the progress
  // thread with OK once the bytes are there, or the transport's error (UNAVAILABLE).
  // Progress thread only. Consumes this Incoming.
  void Receive(void* buffer, std::function<void(absl::Status)> done);

 private:
  friend class Worker;
  void Reset();

  Worker* worker_ = nullptr;
  EndpointId from_ = 0;
  uint64_t length_ = 0;
  void* desc_ = nullptr;  // UCX descriptor (rendezvous or persistent data); null: copy_
  bool rndv_ = false;     // desc_ is a rendezvous descriptor (fetched by Receive)
  std::string copy_;      // small eager payloads that UCX does not keep
};

// Called on the progress thread for each AM of a registered id: the sender's endpoint,
// the AM header and the payload.
using AmHandler = std::function<void(EndpointId from, std::string_view header, Incoming payload)>;

// Thread-safe (see the file comment).
class Worker {
 public:
  // Creates the context (features AM + wakeup) and the worker and starts the progress
  // thread. UNAVAILABLE when UCX cannot start (no usable transport).
  static absl::StatusOr<std::unique_ptr<Worker>> Create(const WorkerOptions& options);
  // Stops the listener, closes every endpoint, stops the thread, destroys the worker.
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Registers the handler for AM id `id` (1..63). Call before Listen / Connect.
  void SetHandler(uint16_t id, AmHandler handler);
  // Called once per endpoint that fails or is closed by its peer (progress thread).
  void SetErrorHandler(std::function<void(EndpointId, absl::Status)> handler);
  // Runs every tick_ms on the progress thread.
  void SetTickHandler(std::function<void()> handler);

  // Starts listening on address:port (port 0: ephemeral). Returns the bound port.
  // UNAVAILABLE when the listener cannot be created; FAILED_PRECONDITION if listening.
  absl::StatusOr<uint16_t> Listen(const std::string& address, uint16_t port);
  uint16_t port() const { return port_.load(); }

  // Opens an endpoint to host:port (a resolvable name or address). The connection is
  // established in the background: sends queue until it is. UNAVAILABLE when the
  // endpoint cannot be created.
  absl::StatusOr<EndpointId> Connect(const std::string& host, uint16_t port);

  // The largest AM header Send may carry (UCX's max_am_header for these transports; a
  // header-only message, such as a call frame, must fit it).
  size_t max_header() const;

  // Sends AM `id` with `header` and the payload [data, data + length) to endpoint `to`.
  // The payload must stay valid until `done` runs (progress thread) with OK (the
  // receiver has it, or dropped it) or an error (UNAVAILABLE: unknown or failed
  // endpoint). Never blocks.
  void Send(EndpointId to, uint16_t id, std::string header, const void* data, uint64_t length,
            std::function<void(absl::Status)> done);

  // Closes endpoint `ep` (no error handler call). Unknown ids are ignored.
  void Close(EndpointId ep);

  // Runs fn on the progress thread.
  void Post(std::function<void()> fn);

  // True on the progress thread.
  bool OnProgressThread() const;

 private:
  friend class Incoming;
  struct Impl;
  explicit Worker(std::unique_ptr<Impl> impl);
  void Loop();

  std::unique_ptr<Impl> impl_;
  std::atomic<uint16_t> port_{0};
  std::thread thread_;
};

}  // namespace kvtier::ucx

#endif  // KVTIER_UCX_UCX_WORKER_H_
