// The server-streaming kvtier.v1.KvCache/Get reactor (raw grpc::ByteBuffer messages):
// loads every block on the executor, then writes the header and chunk frames of about
// limits.chunk_bytes whose payload slices reference the store's memory, kept alive by
// storage::BlockRef::owner() (zero payload copies in the server), unless the request
// names another payload path (service/payload_paths.h: shared memory, UCX), whose
// dataplane::GetSink then takes every found payload and the header goes alone
// (docs/design.md §3 Put / Get / Lookup data flow, docs/dataplane.md). One write in
// flight; the last frame carries the status.
#ifndef KVTIER_SERVICE_GET_REACTOR_H_
#define KVTIER_SERVICE_GET_REACTOR_H_

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"
#include "service/auth.h"
#include "service/kv_cache_service.h"

namespace kvtier::service {

// Starts a Get call; the reactor deletes itself when the call is done. Errors (as the
// call's status): INVALID_ARGUMENT for a request that does not parse or names a bad
// field (keys, format, the path's fields), NOT_FOUND / PERMISSION_DENIED for the
// namespace, the sink's errors (dataplane::GetSink: FAILED_PRECONDITION with an
// ErrorDetail for an unknown session, OUT_OF_RANGE when a block does not fit its
// destination), RESOURCE_EXHAUSTED for a full executor. A missing or unreadable block is a miss (found = false).
// REQUIRES: ctx outlives the call.
grpc::ServerWriteReactor<grpc::ByteBuffer>* StartGet(ServiceContext* ctx,
                                                     grpc::CallbackServerContext* context,
                                                     const grpc::ByteBuffer* request);

// The same Get arriving as a frame on a socket (service/shm_calls.h), run inline on the
// calling thread with the same checks, errors and loads as StartGet's. Its payload path
// must carry every payload and deliver at once (shared memory); INTERNAL otherwise. Fills
// *response with the header on success.
absl::Status GetInline(ServiceContext* ctx, storage::TieredStore* store, const Caller& caller,
                       v1::GetRequest request, v1::GetResponse* response);

}  // namespace kvtier::service

#endif  // KVTIER_SERVICE_GET_REACTOR_H_
