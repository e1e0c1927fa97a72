// SharedRegion: the client's end of the same-node shared-memory data path (handshake in
// protocol/shm_wire.h, server in dataplane/shm_server.h). Open() connects to kvtierd's Unix
// socket, receives a sealed memfd region and maps it populated (allocated up front, in
// this process's memory accounting); Put and Get then pass offsets into it instead of
// payload bytes. The region also serves as an allocator: Client uses it for
// staging copies and for SharedBuffers that callers fill (or read) in place.
//
// Call() carries a Put, Get or Lookup to the server as a frame on the same socket path (the
// same-node control path, protocol/shm_wire.h): over a small pool of extra connections,
// one per concurrent call, opened on demand and kept.
//
// The session lasts while this object lives (it holds the socket open).
// Thread-safe.
#ifndef KVTIER_CLIENT_SHARED_REGION_H_
#define KVTIER_CLIENT_SHARED_REGION_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/cuda_runtime.h"
#include "common/mutex.h"
#include "protocol/shm_wire.h"

namespace kvtier::client {

class SharedRegion {
 public:
  // Connects to `socket_path`, asks for `bytes` and maps the region. FAILED_PRECONDITION
  // if the server answering there is not `expected_instance` (another kvtierd, e.g. the
  // one of this node while the client talks to a remote one); UNAVAILABLE if the socket
  // cannot be reached; RESOURCE_EXHAUSTED / INVALID_ARGUMENT with the server's reason
  // when it refuses.
  // With `cuda_register`, when a CUDA runtime and device are present the region is also
  // page-locked with cudaHostRegister, so buffers in it copy to and from the GPU at pinned
  // speed (best effort: cuda_registered() says whether it worked).
  static absl::StatusOr<std::shared_ptr<SharedRegion>> Open(const std::string& socket_path,
                                                            uint64_t bytes,
                                                            std::string_view expected_instance,
                                                            bool cuda_register = false);
  ~SharedRegion();
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;

  uint8_t* base() const { return base_; }
  uint64_t size() const { return size_; }
  const std::string& session() const { return session_; }
  bool cuda_registered() const { return cuda_ != nullptr; }

  // A call's answer (protocol/shm_wire.h).
  using Reply = protocol::shm::CallReply;
  // Sends `request` as one frame over a pooled call connection and waits for its reply:
  // protocol::shm::CallConnections::Call.
  absl::StatusOr<Reply> Call(protocol::shm::FrameOp op, std::string_view request,
                             int64_t deadline_unix_ms);

  // Reserves `n` bytes (n > 0, rounded up to 4 KiB) and returns their offset, or nullopt
  // when no free range is large enough. First fit.
  std::optional<uint64_t> Allocate(uint64_t n);
  // Returns a range from Allocate. REQUIRES: offset came from Allocate and is not freed.
  void Free(uint64_t offset);
  // The offset of [p, p + n) when it lies wholly inside the region.
  std::optional<uint64_t> OffsetOf(const void* p, uint64_t n) const;

 private:
  SharedRegion(std::string socket_path, int sock, uint8_t* base, uint64_t size, std::string session,
               const common::CudaRuntime* cuda);

  const int sock_;
  uint8_t* const base_;
  const uint64_t size_;
  const std::string session_;
  const common::CudaRuntime* const cuda_;  // set when the region is cudaHostRegister'ed
  common::Mutex mu_;
  std::map<uint64_t, uint64_t> free_ ABSL_GUARDED_BY(mu_);  // offset -> length, coalesced
  std::map<uint64_t, uint64_t> used_ ABSL_GUARDED_BY(mu_);  // offset -> length
  protocol::shm::CallConnections calls_;
};

}  // namespace kvtier::client

#endif  // KVTIER_CLIENT_SHARED_REGION_H_
