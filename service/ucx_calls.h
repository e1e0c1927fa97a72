// Put calls that arrive as frames over UCX (dataplane/ucx_server.h, UcxServerOptions::
// serve_call): the same frame and reply as the shared-memory socket's (protocol/shm_wire.h),
// so a Put whose payloads move over UCX needs no gRPC call (docs/dataplane.md, "Put calls
// over UCX"). The frame's PutHeader names the UCX session of the endpoint that sent it and
// a transfer; the Put runs as service/put_reactor.h PutAsync, with the same checks,
// errors, Put budget and store step as a gRPC Put over UCX.
//
// Identity: a frame runs as the caller its session is bound to (the first gRPC call that
// named the session). With auth on, a session no gRPC call has named yet is refused
// UNAUTHENTICATED, before anything of the transfer is touched, so the client sends that
// Put's header over gRPC instead; with auth off, frames run as the anonymous operator the
// gRPC path uses. Admission (draining, loading), ServiceContext::in_flight and the Put
// metrics apply as over gRPC. Only Put is served this way (a Get's header answers
// before its payloads move, so it gains nothing); another op is INVALID_ARGUMENT.
#ifndef KVTIER_SERVICE_UCX_CALLS_H_
#define KVTIER_SERVICE_UCX_CALLS_H_

#include <functional>
#include <string>

#include "service/kv_cache_service.h"

namespace kvtier::service {

// Answers one call frame from the endpoint of `session` (empty: it has none) through
// `reply`, exactly once, possibly later and on another thread. Called on the UCX progress
// thread: parses the frame there and queues the rest on the executor (a full queue is
// RESOURCE_EXHAUSTED "server busy"). REQUIRES: ctx->ucx is set and ctx outlives the call.
void ServeUcxCall(ServiceContext* ctx, std::string session, std::string frame,
                  std::function<void(std::string reply)> reply);

}  // namespace kvtier::service

#endif  // KVTIER_SERVICE_UCX_CALLS_H_
