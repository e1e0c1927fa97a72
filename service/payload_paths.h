// The server's ends of the payload paths (dataplane/path.h): which path a Put or Get
// takes, chosen from its request alone, and the shared-memory and UCX implementations.
// The only service files that know a request's session fields; the reactors
// (service/put_reactor.cc, service/get_reactor.cc) see a dataplane::PutSource or
// dataplane::GetSink. docs/dataplane.md.
#ifndef KVTIER_SERVICE_PAYLOAD_PATHS_H_
#define KVTIER_SERVICE_PAYLOAD_PATHS_H_

#include <memory>

#include "dataplane/path.h"
#include "kvtier/v1/kvtier.pb.h"
#include "service/auth.h"
#include "service/kv_cache_service.h"

namespace kvtier::service {

// The source of a Put with `header` from `caller`: the client's shared region when the
// header names a shared-memory session, UCX when it names a UCX session, else the stream.
// Nothing is checked here (PutSource::Resolve does). REQUIRES: ctx and header outlive it.
std::unique_ptr<dataplane::PutSource> PutSourceFor(ServiceContext* ctx, const Caller& caller,
                                                   const v1::PutHeader& header);

// The sink of a Get of `request` from `caller`, chosen the same way. REQUIRES: ctx and
// request outlive it.
std::unique_ptr<dataplane::GetSink> GetSinkFor(ServiceContext* ctx, const Caller& caller,
                                               const v1::GetRequest& request);

// True if `header` / `request` names a shared-memory session (the only path a frame on
// the shared-memory socket may use).
bool NamesSharedRegion(const v1::PutHeader& header);
bool NamesSharedRegion(const v1::GetRequest& request);

}  // namespace kvtier::service

#endif  // KVTIER_SERVICE_PAYLOAD_PATHS_H_
