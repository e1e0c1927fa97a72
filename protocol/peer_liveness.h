// The one liveness rule for every caller of a kvtierd node: the server's peer fan-out
// (service/peer_fanout.cc), the C++ ClusterClient (client/cluster_client.cc) and the
// Python ClusterClient (client/python/kvtier/cluster.py, pinned to this list by the
// golden file tests/data/peer_liveness.txt).
//
// A call's status says either "the node did not answer" (unreachable: the caller counts
// the node down, and a client moves the key on to its next owner) or "a live kvtierd
// answered" (every other status, errors included: the fan-out counts the node up and its
// keys as misses; a client returns the error to its caller, since another owner would
// give the same answer). Unreachable: UNAVAILABLE (no connection, or it broke) and
// DEADLINE_EXCEEDED (no answer in time). A busy node (RESOURCE_EXHAUSTED) or a failed
// request (INTERNAL, UNKNOWN, CANCELLED) is an answer, not a dead node: counting it down
// would steer a whole cluster's traffic away from a node over one tenant's quota.
#ifndef KVTIER_PROTOCOL_PEER_LIVENESS_H_
#define KVTIER_PROTOCOL_PEER_LIVENESS_H_

#include <grpcpp/support/status.h>

#include <array>

#include "absl/status/status.h"

namespace kvtier::protocol {

// The gRPC status codes after which a node counts as unreachable, in ascending order.
inline constexpr std::array<grpc::StatusCode, 2> kUnreachableCodes = {
    grpc::StatusCode::DEADLINE_EXCEEDED, grpc::StatusCode::UNAVAILABLE};

// True if a call that ended with `code` got no answer from the node.
constexpr bool IsPeerUnreachable(grpc::StatusCode code) {
  for (grpc::StatusCode c : kUnreachableCodes) {
    if (c == code) return true;
  }
  return false;
}

// The same for an absl::Status (absl and gRPC share the code numbers).
inline bool IsPeerUnreachable(const absl::Status& s) {
  return IsPeerUnreachable(static_cast<grpc::StatusCode>(s.code()));
}

}  // namespace kvtier::protocol

#endif  // KVTIER_PROTOCOL_PEER_LIVENESS_H_
