// The client-streaming kvtier.v1.KvCache/Put reactor (raw grpc::ByteBuffer messages):
// a header message, then chunk messages whose slices the blocks view without copying,
// unless the header names another payload path (service/payload_paths.h: shared memory,
// UCX), whose dataplane::PutSource then brings the payloads and the stream carries the
// header alone (docs/design.md §3 Put / Get / Lookup data flow, docs/dataplane.md). The whole Put is validated (and transcoded) before anything is stored.
// One read in flight; header validation and the final transcode + store run on the
// executor.
#ifndef KVTIER_SERVICE_PUT_REACTOR_H_
#define KVTIER_SERVICE_PUT_REACTOR_H_

#include <functional>

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"
#include "service/auth.h"
#include "service/kv_cache_service.h"

namespace kvtier::service {

// Starts a Put call; the reactor deletes itself when the call is done. Errors (as the
// call's status): INVALID_ARGUMENT naming the header field or chunk at fault,
// NOT_FOUND / PERMISSION_DENIED for the namespace, FAILED_PRECONDITION for a layout or
// codec mismatch, the source's errors (dataplane::PutSource: FAILED_PRECONDITION with an
// ErrorDetail for an unknown session),
// RESOURCE_EXHAUSTED over max_put_bytes, the Put budget, max_puts_per_connection or a
// full executor, DEADLINE_EXCEEDED naming put_progress_timeout_ms for a stalled stream.
// REQUIRES: ctx outlives the call.
grpc::ServerReadReactor<grpc::ByteBuffer>* StartPut(ServiceContext* ctx,
                                                    grpc::CallbackServerContext* context,
                                                    grpc::ByteBuffer* response);

// The header of a Put's first message (`parsed`: whether it parsed as a PutRequest),
// moved out of *first. INVALID_ARGUMENT naming what is wrong otherwise.
absl::StatusOr<v1::PutHeader> PutHeaderOf(bool parsed, v1::PutRequest* first);

// The same Put arriving as a frame on a socket (service/shm_calls.h), run inline on the
// calling thread with the same checks, errors and store step as StartPut's. Its payload
// path must hold every payload in place at once (shared memory); INTERNAL otherwise.
// Fills *response on success.
absl::Status PutInline(ServiceContext* ctx, storage::TieredStore* store, const Caller& caller,
                       v1::PutHeader header, v1::PutResponse* response);

// The same Put arriving as a frame whose payloads come later by their own path (UCX:
// service/ucx_calls.h), with the same checks, errors and store step as StartPut's, and
// the Put budget charged as for a gRPC Put over that path. Validates and opens the path on
// the calling thread (the executor: opening may reserve store room, which may demote),
// then stores on the executor once every payload is in. `done` runs exactly once with
// the status and, when OK, the response: on the executor, or on the path's thread when
// the payloads did not arrive, or before this returns when the header fails its checks.
void PutAsync(ServiceContext* ctx, storage::TieredStore* store, const Caller& caller,
              v1::PutHeader header, std::function<void(absl::Status, v1::PutResponse)> done);

}  // namespace kvtier::service

#endif  // KVTIER_SERVICE_PUT_REACTOR_H_
