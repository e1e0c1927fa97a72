// The service's side of a Put or Get whose payloads move over UCX (dataplane/ucx_server.h):
// the session check and UcxPut, the landing room (reserved hot slots) and transfer of one
// Put, used by the UCX PutSource / GetSink (service/payload_paths.cc).
#ifndef KVTIER_SERVICE_UCX_PUT_H_
#define KVTIER_SERVICE_UCX_PUT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "service/auth.h"
#include "service/kv_cache_service.h"
#include "dataplane/ucx_server.h"
#include "storage/tiered_store.h"

namespace kvtier::service {

// OK if ctx has a UCX server and `session` is a live session of `caller` (bound to
// CallerIdentity(caller) on first use, as dataplane::ShmServer binds its sessions);
// FAILED_PRECONDITION with ErrorReason UCX_SESSION_UNKNOWN naming `field` otherwise
// (also when this server has UCX off).
absl::Status CheckUcxSession(const ServiceContext& ctx, const Caller& caller,
                             const std::string& session, std::string_view field);

// Fills the UCX fields of a StatsResponse (offer, sessions, bytes); none when UCX is off.
void FillUcxStats(const ServiceContext& ctx, v1::StatsResponse* response);

// One Put's UCX transfer and the room its payloads land in. Not thread-safe: the reactor
// drives it; its callback runs on the UCX progress thread.
class UcxPut {
 public:
  // Takes the landing room of every block of `header` in namespace `ns` of `store`.
  // With `in_place`, a hot slot reserved in the store (storage::PutReservation) of
  // `prefix` + the block's size bytes, the payload landing `prefix` bytes in (room for
  // the codec header a raw fp16/bf16 block gets): the block is then stored where it
  // landed, no copy. Otherwise a staging buffer of the block's size (a payload to
  // transcode). ReservePut's errors (RESOURCE_EXHAUSTED at the tenant's hot quota).
  static absl::StatusOr<std::unique_ptr<UcxPut>> Create(ServiceContext* ctx,
                                                        storage::TieredStore* store,
                                                        const std::string& ns,
                                                        const v1::PutHeader& header,
                                                        bool in_place, uint64_t prefix);

  // Block i's landed bytes (valid once Start's callback said OK, as long as this lives).
  std::string_view block(size_t i) const;
  // Block i's reservation (its first `prefix` bytes are the caller's to fill), null
  // when it is staged.
  storage::PutReservation* reservation(size_t i) const;

  // Expects the transfer; `done` runs exactly once (UcxServer::ExpectPut's statuses).
  void Start(std::function<void(absl::Status)> done);

 private:
  struct Room;
  UcxPut(ServiceContext* ctx, const v1::PutHeader& header);

  dataplane::UcxServer* const server_;
  const std::string session_;
  const uint64_t transfer_;
  std::shared_ptr<dataplane::UcxPutBuffers> buffers_;
  Room* room_ = nullptr;  // buffers_->owner
};

// Ends the Put transfer (session, transfer) whatever its state: an expected one fails
// with CANCELLED, its payload messages (early or late) are dropped. No-op without UCX.
void EndUcxPut(const ServiceContext& ctx, const std::string& session, uint64_t transfer);

// The ucx block of a ServerConfig: port in range, and with tls set, refused unless
// allow_plaintext_with_tls (UCX carries payloads unencrypted). INVALID_ARGUMENT naming
// the field.
absl::Status ValidateUcxConfig(const v1::ServerConfig& config);

// Starts the UCX server config.ucx asks for (listen_address defaults to the gRPC one),
// answering Put call frames for `ctx` (service/ucx_calls.h; ctx->ucx must be set to the
// result before any client connects; null ctx: no calls offered), or returns null when
// ucx.enabled is off.
// UcxServer::Start's errors.
absl::StatusOr<std::unique_ptr<dataplane::UcxServer>> StartUcxFromConfig(
    const v1::ServerConfig& config, ServiceContext* ctx);

}  // namespace kvtier::service

#endif  // KVTIER_SERVICE_UCX_PUT_H_
