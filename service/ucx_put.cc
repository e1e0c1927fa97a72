#include "service/ucx_put.h"

#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "kvtier/v1/kvtier.pb.h"
#include "protocol/error_detail.h"
#include "service/ucx_calls.h"

namespace kvtier::service {

absl::Status CheckUcxSession(const ServiceContext& ctx, const Caller& caller,
                             const std::string& session, std::string_view field) {
  if (ctx.ucx == nullptr) {
    return protocol::WithErrorDetail(
        absl::FailedPreconditionError(absl::StrCat(
            Sv(field), ": this server has no UCX data path (ucx.enabled is off): send the "
            "payloads in the stream")),
        v1::UCX_SESSION_UNKNOWN, field);
  }
  return ctx.ucx->CheckSession(session, CallerIdentity(caller), field);
}

// The memory block payloads land in: reserved hot slots, or staging buffers.
struct UcxPut::Room {
  std::vector<std::unique_ptr<storage::PutReservation>> reserved;  // null when staged
  std::vector<std::unique_ptr<uint8_t[]>> staged;
};

UcxPut::UcxPut(ServiceContext* ctx, const v1::PutHeader& header)
    : server_(ctx->ucx), session_(header.ucx_session()), transfer_(header.ucx_transfer()),
      buffers_(std::make_shared<dataplane::UcxPutBuffers>()) {}

absl::StatusOr<std::unique_ptr<UcxPut>> UcxPut::Create(ServiceContext* ctx,
                                                       storage::TieredStore* store,
                                                       const std::string& ns,
                                                       const v1::PutHeader& header,
                                                       bool in_place, uint64_t prefix) {
  std::unique_ptr<UcxPut> put(new UcxPut(ctx, header));
  auto room = std::make_shared<Room>();
  put->room_ = room.get();
  for (const v1::PutBlock& b : header.blocks()) {
    const uint64_t n = b.size();
    uint8_t* at = nullptr;
    if (in_place) {
      ASSIGN_OR_RETURN(std::unique_ptr<storage::PutReservation> r,
                       store->ReservePut(ns, b.parent_key(), prefix + n));
      at = r->data().data() + prefix;
      room->reserved.push_back(std::move(r));
    } else {
      room->staged.emplace_back(new uint8_t[n > 0 ? n : 1]);
      at = room->staged.back().get();
      room->reserved.push_back(nullptr);
    }
    put->buffers_->data.emplace_back(at, n);
  }
  put->buffers_->owner = std::move(room);
  return put;
}

std::string_view UcxPut::block(size_t i) const {
  const std::span<uint8_t> d = buffers_->data[i];
  return std::string_view(reinterpret_cast<const char*>(d.data()), d.size());
}

storage::PutReservation* UcxPut::reservation(size_t i) const {
  return room_->reserved[i].get();
}

void UcxPut::Start(std::function<void(absl::Status)> done) {
  server_->ExpectPut(session_, transfer_, buffers_, std::move(done));
}

void EndUcxPut(const ServiceContext& ctx, const std::string& session, uint64_t transfer) {
  if (ctx.ucx != nullptr) ctx.ucx->CancelPut(session, transfer);
}

void FillUcxOffer(const ServiceContext& ctx, v1::UcxOffer* offer) {
  if (ctx.ucx == nullptr) return;
  offer->set_port(ctx.ucx->port());
  offer->set_host(ctx.ucx->advertised_host());
  offer->set_instance_id(ctx.ucx->instance_id());
}

void FillUcxStats(const ServiceContext& ctx, v1::StatsResponse* response) {
  if (ctx.ucx == nullptr) return;
  FillUcxOffer(ctx, response->mutable_ucx());
  response->set_ucx_sessions(static_cast<uint32_t>(ctx.ucx->session_count()));
  response->set_ucx_put_bytes(ctx.ucx->put_bytes());
  response->set_ucx_get_bytes(ctx.ucx->get_bytes());
}

absl::Status ValidateUcxConfig(const v1::ServerConfig& config) {
  if (!config.has_ucx()) return absl::OkStatus();
  const v1::UcxConfig& u = config.ucx();
  if (u.port() > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("ucx.port ", u.port(), " is out of range"));
  }
  if (u.enabled() && config.has_tls() && !u.allow_plaintext_with_tls()) {
    return absl::InvalidArgumentError(
        "ucx.enabled with tls: the UCX data path carries payloads unencrypted; set "
        "ucx.allow_plaintext_with_tls to accept that (e.g. on a private RDMA fabric), or "
        "turn UCX off");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<dataplane::UcxServer>> StartUcxFromConfig(
    const v1::ServerConfig& config, ServiceContext* ctx) {
  if (!config.ucx().enabled()) return std::unique_ptr<dataplane::UcxServer>();
  const v1::UcxConfig& u = config.ucx();
  dataplane::UcxServerOptions options;
  options.listen_address =
      u.listen_address().empty() ? config.listen_address() : u.listen_address();
  options.port = static_cast<uint16_t>(u.port());
  options.transports = u.transports();
  if (u.transfer_timeout_ms() > 0) options.transfer_timeout_ms = u.transfer_timeout_ms();
  if (ctx != nullptr) {
    options.serve_call = [ctx](std::string session, std::string frame,
                               std::function<void(std::string)> reply) {
      ServeUcxCall(ctx, std::move(session), std::move(frame), std::move(reply));
    };
  }
  ASSIGN_OR_RETURN(std::unique_ptr<dataplane::UcxServer> server, dataplane::UcxServer::Start(options));
  KVTIER_LOG(INFO) << "ucx data path on " << options.listen_address << ":" << server->port()
                   << (options.transports.empty() ? "" : " (transports ")
                   << options.transports << (options.transports.empty() ? "" : ")");
  return server;
}

}  // namespace kvtier::service
