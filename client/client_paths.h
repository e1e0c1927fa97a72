// The C++ client's ends of the payload paths (dataplane/path.h) and the two calls they
// carry. Client::Impl's PutRun and GetRun are one loop each (dataplane::RunPaths) over
// these paths, in fallback order (docs/dataplane.md):
//   1. shared-memory socket: the call as a frame on the shared region's socket, the
//      payloads in the region (ClientOptions::shared_memory_socket_calls);
//   2. shared memory: a gRPC stream naming the region's session and offsets;
//   3. UCX: payloads as UCX active messages, the header on a gRPC stream;
//   4. stream: payloads in the gRPC stream's chunk frames (always takes the call).
// A lost shared-memory session drops the region; a UCX refusal falls through, dropping
// the UCX channel when its endpoint is down or its session unknown. With
// ClientOptions::ucx_over_shared_memory and a live UCX channel, 1 and 2 step aside.
// Private to the client library: not an API.
#ifndef KVTIER_CLIENT_CLIENT_PATHS_H_
#define KVTIER_CLIENT_CLIENT_PATHS_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "client/client.h"
#include "client/shared_region.h"
#include "dataplane/path.h"
#include "kvtier/v1/kvtier.pb.h"
#include "protocol/wire.h"

namespace kvtier::client::internal {

// Payloads staged in the shared region for one call (by the first shared-memory path
// that needs them); the staging copies are freed when it goes.
struct ShmStaging {
  explicit ShmStaging(std::shared_ptr<SharedRegion> r) : region(std::move(r)) {}
  ~ShmStaging() {
    for (uint64_t at : allocated) region->Free(at);
  }
  ShmStaging(const ShmStaging&) = delete;
  ShmStaging& operator=(const ShmStaging&) = delete;

  std::shared_ptr<SharedRegion> region;
  bool complete = false;           // every payload (or destination) has its range
  std::vector<uint64_t> offsets;   // Put: block i's offset in the region
  std::vector<uint64_t> allocated; // staging copies this call allocated
  std::vector<std::pair<size_t, uint64_t>> staged;  // Get: key index, staging offset
};

// One Put (one stream's worth of blocks).
struct PutCall {
  std::string_view ns;
  std::span<const PutBlock> blocks;
  v1::PayloadFormat format;
  std::chrono::system_clock::time_point deadline;
  PutResult* result;
  std::optional<ShmStaging> staging;
};

// One Get (one stream's worth of keys). `request` is the GetRequest without path fields;
// a path adds its own and clears them when it falls through.
struct GetCall {
  std::span<const std::string> keys;
  std::chrono::system_clock::time_point deadline;
  const protocol::GetStreamParser::DestinationFn* destination;
  std::span<const std::span<uint8_t>> buffers;  // one per key, or empty
  std::vector<v1::GetBlockInfo>* infos;
  v1::GetRequest request;
  std::optional<ShmStaging> staging;
  // Called, if set, once the server has the call and the next piece of a Get may go
  // (GetPieces): over the stream when its header arrived (the server has read the call's
  // blocks and is sending them), over shared memory when the call is sent (the server
  // writes into the region while the piece before is copied out). UCX never calls it.
  const std::function<void()>* on_header = nullptr;
};

// Adds one Put call's response to the result of the whole Put.
void AddPutResponse(const v1::PutResponse& response, PutResult* result);

using PutPaths = std::vector<std::unique_ptr<dataplane::ClientPath<PutCall>>>;
using GetPaths = std::vector<std::unique_ptr<dataplane::ClientPath<GetCall>>>;

// Client::Impl::MakePutPaths / MakeGetPaths (client/client_paths.cc) build them, in
// fallback order.

}  // namespace kvtier::client::internal

#endif  // KVTIER_CLIENT_CLIENT_PATHS_H_
