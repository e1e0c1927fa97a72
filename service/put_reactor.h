// The client-streaming kvtier.v1.KvCache/Put reactor (raw grpc::ByteBuffer messages):
// a header message, then chunk messages whose slices the blocks view without copying,
// or, with header.shm_session, the header alone naming each payload's range in the
// client's shared region (docs/design.md §3 Put / Get / Lookup data flow, §7 Same-node
// shared memory). The whole Put is validated (and transcoded) before anything is stored.
// One read in flight; header validation and the final transcode + store run on the
// executor.
#ifndef KVTIER_SERVICE_PUT_REACTOR_H_
#define KVTIER_SERVICE_PUT_REACTOR_H_

#include "grpcpp/grpcpp.h"
#include "service/kv_cache_service.h"

namespace kvtier::service {

// Starts a Put call; the reactor deletes itself when the call is done. Errors (as the
// call's status): INVALID_ARGUMENT naming the header field or chunk at fault,
// NOT_FOUND / PERMISSION_DENIED for the namespace, FAILED_PRECONDITION for a layout or
// codec mismatch or an unknown shm session (with ErrorDetail SHM_SESSION_UNKNOWN),
// RESOURCE_EXHAUSTED over max_put_bytes, the Put budget or a full executor.
// REQUIRES: ctx outlives the call.
grpc::ServerReadReactor<grpc::ByteBuffer>* StartPut(ServiceContext* ctx,
                                                    grpc::CallbackServerContext* context,
                                                    grpc::ByteBuffer* response);

}  // namespace kvtier::service

#endif  // KVTIER_SERVICE_PUT_REACTOR_H_
