// The kvtier.v1.KvEvents service: the block events over gRPC for consumers that do not
// speak ZMQ (ServerConfig.events.grpc). WatchEvents streams events::EventLog entries as
// protobuf KvEvents; EventsSnapshot returns the resident set per tier with the seq it is
// consistent with. Both see only namespaces the caller's tenant may use
// (service/auth.h). See kvtier.proto for the error codes.
//
// Each WatchEvents call has its own thread (waiting on the log, one write in flight);
// there are few such consumers (routers), and no executor slot is held while waiting.
#ifndef KVTIER_SERVICE_EVENTS_SERVICE_H_
#define KVTIER_SERVICE_EVENTS_SERVICE_H_

#include "events/event_log.h"
#include "grpcpp/grpcpp.h"
#include "kvtier/v1/kvtier.grpc.pb.h"
#include "service/kv_cache_service.h"

namespace kvtier::service {

// Thread-safe. `ctx` and `log` (null: events.grpc off) must outlive the service; calls
// still streaming when the server shuts down are cancelled by it (Close the log first).
class KvEventsServiceImpl final : public v1::KvEvents::CallbackService {
 public:
  KvEventsServiceImpl(ServiceContext* ctx, const events::EventLog* log) : ctx_(ctx), log_(log) {}

  grpc::ServerWriteReactor<v1::WatchEventsResponse>* WatchEvents(
      grpc::CallbackServerContext* context, const v1::WatchEventsRequest* request) override;
  grpc::ServerUnaryReactor* EventsSnapshot(grpc::CallbackServerContext* context,
                                           const v1::EventsSnapshotRequest* request,
                                           v1::EventsSnapshotResponse* response) override;

 private:
  ServiceContext* ctx_;
  const events::EventLog* log_;
};

// The protobuf form of one logged event.
void EventToProto(const events::EventLog::Entry& entry, v1::KvEvent* out);

}  // namespace kvtier::service

#endif  // KVTIER_SERVICE_EVENTS_SERVICE_H_
