#include "service/ucx_put.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/strings.h"
#include "kvtier/v1/kvtier.pb.h"
#include "protocol/error_detail.h"

namespace kvtier::service {

std::string UcxIdentity(const Caller& caller) {
  return caller.is_operator ? "*" : caller.tenant;
}

absl::Status CheckUcxSession(const ServiceContext& ctx, const Caller& caller,
                             const std::string& session, std::string_view field) {
  if (ctx.ucx == nullptr) {
    return protocol::WithErrorDetail(
        absl::FailedPreconditionError(absl::StrCat(
            Sv(field), ": this server has no UCX data path (ucx.enabled is off): send the "
            "payloads in the stream")),
        v1::UCX_SESSION_UNKNOWN, field);
  }
  return ctx.ucx->CheckSession(session, UcxIdentity(caller), field);
}

UcxPut::UcxPut(ServiceContext* ctx, std::string session, uint64_t transfer,
               std::span<const uint64_t> sizes)
    : server_(ctx->ucx), session_(std::move(session)), transfer_(transfer),
      buffers_(std::make_shared<UcxPutBuffers>()) {
  for (uint64_t n : sizes) {
    buffers_->data.emplace_back(new char[n > 0 ? n : 1]);
    buffers_->sizes.push_back(n);
  }
}

std::string_view UcxPut::block(size_t i) const {
  return std::string_view(buffers_->data[i].get(), buffers_->sizes[i]);
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

}  // namespace kvtier::service
