// ShmServer: kvtierd's end of the same-node shared-memory data path (the handshake is in
// protocol/shm_wire.h). It listens on a Unix socket; each connection may ask once for a
// region, gets a sealed memfd of that size (mapped here too) and a random 16-byte session
// id, and keeps the session for as long as the connection stays open. The shared-memory
// PutSource / GetSink (service/payload_paths.cc) resolve PutHeader.shm_session /
// GetRequest.shm_session with Find() and copy between the region and the store: one
// server-side copy per block, no socket copies.
//
// Safety: the client can write the region at any time, so the server treats region
// bytes as untrusted input (a Put copies them into the hot tier before the store
// checksums them, so a racing writer can only corrupt its own block). The memfd is sealed
// (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), so a client cannot truncate it under the
// server's mapping. Who may connect is decided by the socket file's mode (0660) and its
// directory.
//
// Calls over the socket (protocol/shm_wire.h frames): a connection that starts with a
// frame instead of a ShmRequest is served on a thread of its own, one frame at a time,
// by ShmServerOptions::serve_frame, inline (no executor hand-off): concurrency is the
// number of such connections (a client keeps a few). A session carries the identity of
// the first authenticated gRPC call that named it (Bind), which is what its socket calls
// run as: the socket itself authenticates nobody.
#ifndef KVTIER_DATAPLANE_SHM_SERVER_H_
#define KVTIER_DATAPLANE_SHM_SERVER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"

namespace kvtier::dataplane {

// A client's region mapped into the server. Unmapped when the last reference goes.
class ShmRegion {
 public:
  ShmRegion(uint8_t* base, uint64_t size) : base_(base), size_(size) {}
  ~ShmRegion();
  ShmRegion(const ShmRegion&) = delete;
  ShmRegion& operator=(const ShmRegion&) = delete;

  uint8_t* base() const { return base_; }
  uint64_t size() const { return size_; }
  // True if [offset, offset + n) lies inside the region (overflow-safe).
  bool Contains(uint64_t offset, uint64_t n) const { return offset <= size_ && n <= size_ - offset; }

 private:
  uint8_t* const base_;
  const uint64_t size_;
};

struct ShmServerOptions {
  std::string socket_path;               // created (an old socket file is replaced)
  uint64_t max_region_bytes = 1ull << 30;
  uint32_t max_sessions = 64;
  uint32_t max_call_connections = 256;  // connections carrying frames, all sessions
  // Answers one request frame with its reply frame (both whole messages). Called on the
  // connection's own thread, concurrently for different connections. Null: connections
  // that send frames are closed.
  std::function<std::string(std::string_view frame)> serve_frame;
};

// Thread-safe.
class ShmServer {
 public:
  // Binds the socket (mode 0660) and starts the accept/session thread. INVALID_ARGUMENT
  // if the path is too long for a Unix socket; UNAVAILABLE if it cannot be bound.
  static absl::StatusOr<std::unique_ptr<ShmServer>> Start(const ShmServerOptions& options);
  // Stops the thread, closes every connection and removes the socket file. Regions in use
  // by calls stay mapped until those calls drop them.
  ~ShmServer();

  // The region of a live session, or null (unknown or closed session).
  std::shared_ptr<ShmRegion> Find(std::string_view session) const;
  // Records `identity` (the service's encoding of its caller; opaque here) as the
  // identity of `session` unless it has one already (a no-op for an unknown session).
  void Bind(std::string_view session, std::string identity);
  // The identity Bind recorded for `session`, or nullopt (unbound or unknown).
  std::optional<std::string> BoundIdentity(std::string_view session) const;

  const std::string& socket_path() const { return options_.socket_path; }
  // 16 random bytes, fixed for this server's lifetime.
  const std::string& instance_id() const { return instance_id_; }
  uint64_t max_region_bytes() const { return options_.max_region_bytes; }
  size_t session_count() const;

 private:
  explicit ShmServer(const ShmServerOptions& options);
  void Loop();
  // Answers one request on `conn`; returns the new session id (empty if refused).
  std::string Serve(int conn);
  // True if the next message on `conn` is a call frame rather than a ShmRequest.
  static bool StartsWithFrame(int conn);
  // Serves `conn`'s frames on a thread of its own until it closes (or the server stops).
  void StartCallConnection(int conn);

  struct Session {
    std::shared_ptr<ShmRegion> region;
    std::optional<std::string> identity;  // set by Bind
  };
  struct CallConnection {
    int fd;
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };

  const ShmServerOptions options_;
  std::string instance_id_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: ends Loop()
  std::thread thread_;
  mutable common::Mutex mu_;
  absl::flat_hash_map<std::string, Session> sessions_ ABSL_GUARDED_BY(mu_);
  std::vector<CallConnection> calls_;  // used by the accept thread only
};

}  // namespace kvtier::dataplane

#endif  // KVTIER_DATAPLANE_SHM_SERVER_H_
