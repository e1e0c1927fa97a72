// The Put, Get and Lookup calls that arrive as frames on the shared-memory socket (the same-node
// control path: frames in protocol/shm_wire.h, connections in dataplane/shm_server.h,
// docs/design.md §7). Each frame carries the same request message as the gRPC call and
// is answered with the same status, message, ErrorDetail and response, by the same code
// (PutFromSharedMemory, GetFromSharedMemory, LookupFromSharedMemory), run inline on the
// connection's thread.
//
// Identity: a frame runs as the caller its session is bound to (the first gRPC call that
// named the session, ShmServer::Bind). With auth on, a session no gRPC call has named
// yet is refused UNAUTHENTICATED; with auth off, frames run as the anonymous operator the
// gRPC path uses; a refused frame binds nothing. Admission (draining, loading),
// ServiceContext::in_flight and the Put / Get / Lookup metrics apply as over gRPC; tenant quotas
// and events come from the store step.
#ifndef KVTIER_SERVICE_SHM_CALLS_H_
#define KVTIER_SERVICE_SHM_CALLS_H_

#include <string>
#include <string_view>

#include "service/kv_cache_service.h"

namespace kvtier::service {

// Answers one request frame with its reply frame. Thread-safe (calls for different
// connections run concurrently). REQUIRES: ctx->shm is set and ctx outlives the call.
std::string ServeShmFrame(ServiceContext* ctx, std::string_view frame);

}  // namespace kvtier::service

#endif  // KVTIER_SERVICE_SHM_CALLS_H_
