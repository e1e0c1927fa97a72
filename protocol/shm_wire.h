// The same-node shared-memory handshake between a client (client/shared_region.h) and
// kvtierd (dataplane/shm_server.h), over a Unix SOCK_SEQPACKET socket.
//
//   client -> server  ShmRequest  {magic, region_bytes, instance}
//   server -> client  ShmReply    {magic, ok, region_bytes, session, instance, error}
//                     with the region's memfd attached (SCM_RIGHTS) when ok
//
// The server creates the memfd, sizes it and seals it against shrinking and growing
// before passing it on, so the client can never make the server's mapping fault. The
// session lasts as long as the connection: when the client closes it (or exits) the
// server forgets the session; the mapping itself goes once no call uses it any more.
//
// Calls (the same-node control path): a connection whose first message is a frame
// rather than a ShmRequest carries Put, Get and Lookup calls, one at a time, each one request
// frame and one reply frame (each a single message of at most kMaxFrameBytes):
//
//   client -> server  FrameHeader {magic, op, request_id, deadline_unix_ms}
//                     + the serialized kvtier.v1.PutRequest holding only its header (op
//                       kPut) or GetRequest (kGet),
//                       exactly what the gRPC call sends, naming its shm session;
//                       or (kLookup) the caller's session and the serialized
//                       LookupRequest (SessionAndRequest below)
//   server -> client  ReplyHeader {magic, code, request_id, message_bytes, details_bytes}
//                     + the status message, the serialized grpc-status-details (as gRPC's
//                       error_details), and, when code is 0, the serialized PutResponse /
//                       GetResponse (the Get header; the payloads are in the region) /
//                       LookupResponse
//
// Such a connection names no session of its own: every request names one, as over gRPC.
// Plain structs, a few syscall wrappers and the client's call connections; no gRPC and no
// protobuf.
#ifndef KVTIER_PROTOCOL_SHM_WIRE_H_
#define KVTIER_PROTOCOL_SHM_WIRE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"

namespace kvtier::protocol::shm {

inline constexpr char kMagic[8] = {'K', 'V', 'T', 'S', 'H', 'M', '0', '1'};
inline constexpr size_t kSessionBytes = 16;
inline constexpr size_t kInstanceBytes = 16;

struct ShmRequest {
  char magic[8];
  uint64_t region_bytes;              // size of the region asked for
  uint8_t instance[kInstanceBytes];   // the server the client means (from the handshake);
                                      // another server answers !ok and creates nothing
};

struct ShmReply {
  char magic[8];
  uint32_t ok;              // 1: fd attached, session valid; 0: see error
  uint32_t reserved;
  uint64_t region_bytes;    // size of the region granted
  uint8_t session[kSessionBytes];    // names the region in PutHeader / GetRequest
  uint8_t instance[kInstanceBytes];  // SharedMemoryOffer.instance_id of this server
  char error[200];                   // NUL-terminated reason when !ok
};

inline constexpr char kFrameMagic[4] = {'K', 'V', 'F', '1'};
inline constexpr size_t kMaxFrameBytes = 128 << 10;  // below a Unix socket's send buffer

enum class FrameOp : uint32_t { kPut = 1, kGet = 2, kLookup = 3 };

// A kLookup frame's body: the caller's shm session (a LookupRequest names none), then the
// serialized kvtier.v1.LookupRequest: u16 session length (little-endian), session bytes,
// request bytes. The session only names the caller's identity (with auth on, the one
// bound to it); a Lookup touches no region.
struct SessionAndRequest {
  std::string_view session;
  std::string_view request;
};
std::string JoinSessionAndRequest(std::string_view session, std::string_view request);
// INVALID_ARGUMENT "frame: ..." when `body` is shorter than its session length says.
absl::StatusOr<SessionAndRequest> SplitSessionAndRequest(std::string_view body);

struct FrameHeader {
  char magic[4];
  uint32_t op;               // FrameOp
  uint64_t request_id;       // echoed in the reply
  int64_t deadline_unix_ms;  // the call's deadline (CLOCK_REALTIME), 0 for none
};

// The clock of FrameHeader.deadline_unix_ms: milliseconds since the Unix epoch
// (CLOCK_REALTIME), as both ends read it.
int64_t NowUnixMs();

struct ReplyHeader {
  char magic[4];
  int32_t code;  // grpc::StatusCode
  uint64_t request_id;
  uint32_t message_bytes;
  uint32_t details_bytes;
};

// A call frame: the FrameHeader, then `request`.
std::string EncodeFrame(FrameOp op, uint64_t request_id, int64_t deadline_unix_ms,
                        std::string_view request);
// The header of a call frame. INVALID_ARGUMENT "frame: ..." when it is shorter than its
// header or its magic is wrong.
absl::StatusOr<FrameHeader> DecodeFrameHeader(std::string_view frame);
// The request id a frame's header carries, whatever its magic (0 when the frame is shorter
// than a header): a reply echoes it even to a bad frame, so the client reads why.
uint64_t RequestIdOf(std::string_view frame);

// A reply frame: ReplyHeader, message, details, then `body` (the serialized response,
// empty unless code is 0). When that exceeds `max_bytes`, an UNAVAILABLE reply saying so
// instead (the client redoes such a call over gRPC).
std::string EncodeReply(uint64_t request_id, int code, std::string_view message,
                        std::string_view details, std::string_view body, size_t max_bytes);

// Sends one message of `n` bytes, with `fd` attached when fd >= 0. Retries EINTR.
// UNAVAILABLE with errno's text on failure.
absl::Status SendMessage(int sock, const void* data, size_t n, int fd = -1);

// Receives one message of exactly `n` bytes; *fd gets an attached descriptor (the caller
// owns it) or -1. UNAVAILABLE on EOF, errors or a message of another size.
absl::Status ReceiveMessage(int sock, void* data, size_t n, int* fd);

// Receives one message of at most kMaxFrameBytes into *buffer (sized kMaxFrameBytes once,
// reused across calls) and returns its bytes. UNAVAILABLE on EOF, errors or a longer
// message.
absl::StatusOr<std::string_view> ReceiveFrame(int sock, std::string* buffer);

// A call's answer as the server sent it: a gRPC status code, message and
// grpc-status-details, and the serialized response when code is 0.
struct CallReply {
  int code = 0;
  std::string message;
  std::string details;
  std::string body;
};

// The reply frame answering `request_id`; UNAVAILABLE "...: malformed reply" (`what` names
// the path) when it is short, of another request or its lengths do not add up.
absl::StatusOr<CallReply> DecodeReply(std::string_view frame, uint64_t request_id,
                                      std::string_view what);

// The client's end of the calls: connections to one socket path, one per concurrent call,
// opened on demand and kept for the next call while they answer well (the C++ client's
// SharedRegion and the Python client's kvtier._native use it). Thread-safe; no memory of
// the region is touched here.
class CallConnections {
 public:
  // REQUIRES: socket_path fits sockaddr_un::sun_path (checked by the handshake).
  explicit CallConnections(std::string socket_path);
  ~CallConnections();  // closes the idle connections
  CallConnections(const CallConnections&) = delete;
  CallConnections& operator=(const CallConnections&) = delete;

  // Sends `request` (a serialized PutRequest for kPut, GetRequest for kGet) as one frame
  // and waits for its reply until `deadline_unix_ms` (0: no deadline). UNAVAILABLE when
  // the socket fails (the server went away; nothing is known about the call's outcome
  // beyond what a lost gRPC call would tell), DEADLINE_EXCEEDED when the reply is late,
  // INVALID_ARGUMENT when the request is too large for a frame. A connection that failed
  // or timed out is closed, never reused.
  absl::StatusOr<CallReply> Call(FrameOp op, std::string_view request, int64_t deadline_unix_ms);

 private:
  // An idle connection, or a new one; -1 with *error set when none can be opened.
  int Take(std::string* error);

  const std::string socket_path_;
  common::Mutex mu_;
  std::vector<int> idle_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> next_request_id_{1};
};

}  // namespace kvtier::protocol::shm

#endif  // KVTIER_PROTOCOL_SHM_WIRE_H_
