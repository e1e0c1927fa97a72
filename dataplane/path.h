// A payload path: one way a Put's or Get's payload bytes move between a client and kvtierd
// while the call itself (its header, its status) goes over gRPC or the shared-memory
// socket (docs/dataplane.md). kvtier has three:
//   stream         the bytes ride in the gRPC stream's chunk frames (protocol/wire.h);
//                  always available, the last resort;
//   shared memory  same host: the bytes sit in the client's region (protocol/shm_wire.h),
//                  named by offset; the call is a frame on the region's socket or a gRPC
//                  stream naming the region's session;
//   UCX            cross-node: the bytes move as UCX rendezvous active messages
//                  (ucx/), the gRPC stream carries the header.
//
// This header holds what every path shares at both ends:
//   - the server's end: PutSource (where a Put's payloads come from) and GetSink (where a
//     Get's payloads go), so the Put and Get reactors (service/put_reactor.cc,
//     service/get_reactor.cc) never branch on a path;
//   - the client's end: the fallback rule (After) and the loop over paths (RunPaths) that
//     the C++ client's Put and Get share (client/client_streams.cc, client/client_paths.h).
// Implementations: the stream's here (StreamPutSource, StreamGetSink); shared memory's
// and UCX's in service/payload_paths.cc (server) and client/client_paths.cc (client).
#ifndef KVTIER_DATAPLANE_PATH_H_
#define KVTIER_DATAPLANE_PATH_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kvtier/v1/kvtier.pb.h"

namespace kvtier::storage {
class PutReservation;  // storage/tiered_store.h
class TieredStore;
}  // namespace kvtier::storage

namespace kvtier::dataplane {

namespace v1 = ::kvtier::v1;

// ---------------------------------------------------------------------------------------
// Server end.

// What a PutSource needs to take a Put whose header validated.
struct PutOpen {
  storage::TieredStore* store = nullptr;
  std::string ns;                          // the namespace's name
  const v1::PutHeader* header = nullptr;   // outlives the source
  // Whether a block may land where it is stored (an encoded block, or a raw one for an
  // fp16/bf16 namespace), and the bytes to leave in front of it (room for the codec
  // header a raw block gets). See storage::TieredStore::ReservePut.
  bool in_place = false;
  uint64_t prefix = 0;
};

// Where one Put's payloads come from. Driven by one Put (not thread-safe); only the
// `arrived` callback of Open may run on another thread.
//
// Lifecycle: Resolve, CheckBlock for every block, then Open; Close once the Put is over
// (any outcome). An error from Resolve, CheckBlock or Open is the Put's status.
class PutSource {
 public:
  virtual ~PutSource() = default;

  // Checks what the path needs of the request (a live session of this caller).
  // FAILED_PRECONDITION with an ErrorReason naming the session for an unknown one.
  virtual absl::Status Resolve() = 0;
  // Checks block i of the header against the path (a range inside the region).
  // INVALID_ARGUMENT naming `header.blocks[i]`'s field.
  virtual absl::Status CheckBlock(int /*i*/, const v1::PutBlock& /*block*/) const {
    return absl::OkStatus();
  }
  // Whether Resolve and Open must run on the executor (they may reserve store room,
  // which may demote) rather than inside a gRPC reaction.
  virtual bool OpensOnExecutor() const { return false; }
  // Whether the payloads come in the stream's chunk messages. If not, a chunk message is
  // an error (ChunkError).
  virtual bool InStream() const = 0;
  // Whether the path holds the payloads in server memory (charged to the Put budget by
  // the caller before Open).
  virtual bool HoldsServerMemory() const { return false; }
  // The status of a chunk message on a Put whose payloads do not come in the stream.
  virtual absl::Status ChunkError() const = 0;

  // Starts taking the payloads (never called when InStream()). `views[i]` gets block i's
  // bytes, valid until Close (readable once `arrived` said OK). `arrived` runs exactly
  // once if Open returns OK, never otherwise, possibly before Open returns or on another
  // thread: OK once every byte is in, else the Put's error.
  virtual absl::Status Open(const PutOpen& open, std::vector<std::string_view>* views,
                            std::function<void(absl::Status)> arrived) = 0;
  // Block i's store reservation its payload landed in (stored there, no copy), or null.
  virtual storage::PutReservation* Reservation(int /*i*/) const { return nullptr; }
  // The Put is over: ends any transfer still in flight and lets go of the payloads'
  // memory (views die). Idempotent.
  virtual void Close() {}
};

// One found block's payload as the Get reactor loaded it: `bytes`, alive while `owner`.
struct GetPayload {
  std::shared_ptr<const void> owner;
  std::span<const uint8_t> bytes;
};

// Where one Get's payloads go. Driven by one Get (not thread-safe); only the `done`
// callback of Deliver may run on another thread.
//
// Lifecycle: Resolve; for each found block DecodeTarget (raw answers only) then Accept;
// Deliver; Close once the Get is over.
class GetSink {
 public:
  virtual ~GetSink() = default;

  // Checks what the path needs of a request for `num_keys` keys (a live session of this
  // caller, one destination per key inside its region). FAILED_PRECONDITION with an
  // ErrorReason for an unknown session, INVALID_ARGUMENT naming the field otherwise.
  virtual absl::Status Resolve(size_t num_keys) = 0;
  // Memory of `bytes` bytes where key i's payload may be decoded directly (its
  // destination), or an empty span.
  virtual std::span<uint8_t> DecodeTarget(int /*i*/, uint64_t /*bytes*/) { return {}; }
  // Takes key i's payload. Returns true if the gRPC stream must carry it (after the
  // header), false if the path carries it; may mark `info` (GetBlockInfo.ucx). OUT_OF_RANGE
  // when it does not fit its destination.
  virtual absl::StatusOr<bool> Accept(int i, GetPayload payload, v1::GetBlockInfo* info) = 0;
  // Sends what the path carries; `done` runs exactly once (possibly before Deliver
  // returns, or on another thread): OK when the client has it all, then the header goes.
  virtual void Deliver(std::function<void(absl::Status)> done) { done(absl::OkStatus()); }
  // The Get is over: lets go of the path's memory. Idempotent.
  virtual void Close() {}
};

// The stream path's ends: payloads in chunk frames.
class StreamPutSource final : public PutSource {
 public:
  absl::Status Resolve() override { return absl::OkStatus(); }
  bool InStream() const override { return true; }
  absl::Status ChunkError() const override { return absl::OkStatus(); }
  absl::Status Open(const PutOpen&, std::vector<std::string_view>*,
                    std::function<void(absl::Status)>) override {
    return absl::InternalError("the stream path's payloads come in chunk messages");
  }
};

class StreamGetSink final : public GetSink {
 public:
  absl::Status Resolve(size_t) override { return absl::OkStatus(); }
  absl::StatusOr<bool> Accept(int, GetPayload, v1::GetBlockInfo*) override { return true; }
};

// ---------------------------------------------------------------------------------------
// Client end.

// What a client does after one path's attempt at a call.
enum class After {
  kReturn,        // the attempt's status is the call's (success or a real error)
  kNextPath,      // nothing was stored or read: try the next path
  kDropThenNext,  // as kNextPath, and the path has stopped offering itself to this client
                  // (it dropped the session the attempt used: the server lost it, or
                  // the endpoint is down)
};

// One payload path at a client, for calls of type Call. Thread-safe: calls of many
// threads try the same paths.
template <typename Call>
class ClientPath {
 public:
  virtual ~ClientPath() = default;
  // Short name for messages and docs ("shared-memory socket", "shared memory", "ucx",
  // "stream").
  virtual std::string_view name() const = 0;
  // Tries `call` over this path; *status is the attempt's outcome when it tried.
  // kNextPath without trying when the path is closed or cannot take the call (no room
  // to stage it, the server did not answer the frame). Fallback rules (docs/dataplane.md):
  // a lost shared-memory session drops the region (kDropThenNext); a UCX refusal (the
  // session unknown, the transfer failed before anything was stored) is kNextPath, and
  // kDropThenNext when the endpoint is down or the session unknown.
  virtual After Try(Call& call, absl::Status* status) = 0;
};

// Tries `call` on each path in order until one's outcome is kReturn; returns that
// status. The last path (the stream) always returns kReturn; if none does, the last
// failed attempt's status, or UNAVAILABLE when no path tried.
template <typename Call>
absl::Status RunPaths(std::span<const std::unique_ptr<ClientPath<Call>>> paths, Call& call) {
  absl::Status status = absl::UnavailableError("no payload path took the call");
  for (const std::unique_ptr<ClientPath<Call>>& path : paths) {
    absl::Status attempt;
    const After after = path->Try(call, &attempt);
    if (after == After::kReturn) return attempt;
    if (!attempt.ok()) status = std::move(attempt);
  }
  return status;
}

}  // namespace kvtier::dataplane

#endif  // KVTIER_DATAPLANE_PATH_H_
