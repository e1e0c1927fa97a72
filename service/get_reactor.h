// The server-streaming kvtier.v1.KvCache/Get reactor (raw grpc::ByteBuffer messages):
// loads every block on the executor, then writes the header and chunk frames of about
// limits.chunk_bytes whose payload slices reference the store's memory, kept alive by
// storage::BlockRef::owner() (zero payload copies in the server). With
// GetRequest.shm_session each found payload is copied into the client's region at its
// destination and the header goes alone (docs/design.md §3 Put / Get / Lookup data flow,
// §7 Same-node shared memory). One write in flight; the last frame carries the status.
#ifndef KVTIER_SERVICE_GET_REACTOR_H_
#define KVTIER_SERVICE_GET_REACTOR_H_

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"
#include "service/auth.h"
#include "service/kv_cache_service.h"

namespace kvtier::service {

// Starts a Get call; the reactor deletes itself when the call is done. Errors (as the
// call's status): INVALID_ARGUMENT for a request that does not parse or names a bad
// field (keys, format, shm_destinations), NOT_FOUND / PERMISSION_DENIED for the
// namespace, FAILED_PRECONDITION with ErrorDetail SHM_SESSION_UNKNOWN for an unknown shm
// session, OUT_OF_RANGE when a block does not fit its shm destination, RESOURCE_EXHAUSTED
// for a full executor. A missing or unreadable block is a miss (found = false).
// REQUIRES: ctx outlives the call.
grpc::ServerWriteReactor<grpc::ByteBuffer>* StartGet(ServiceContext* ctx,
                                                     grpc::CallbackServerContext* context,
                                                     const grpc::ByteBuffer* request);

// The same Get arriving as a frame on the shared-memory socket (service/shm_calls.h):
// every payload goes into request.shm_session's region. Runs inline on the calling thread
// with the same checks, errors and loads as StartGet's; INVALID_ARGUMENT if
// request.shm_session is empty. Fills *response with the header on success.
absl::Status GetFromSharedMemory(ServiceContext* ctx, storage::TieredStore* store,
                                 const Caller& caller, v1::GetRequest request,
                                 v1::GetResponse* response);

}  // namespace kvtier::service

#endif  // KVTIER_SERVICE_GET_REACTOR_H_
