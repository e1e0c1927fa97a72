// Client::Impl's UCX data path (client/ucx_channel.h): opening the channel at Connect,
// and Put / Get whose payloads move as UCX active messages while the gRPC stream carries
// the headers. Any UCX failure before the server stored anything makes the call redo
// itself on the next payload path, the gRPC stream (client/client_paths.cc).
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "client/client_impl.h"
#include "common/status_macros.h"

namespace kvtier::client {
namespace {

namespace v1 = ::kvtier::v1;

// The host part of a gRPC target ("host:port", "[v6]:port", "dns:///host:port").
std::string TargetHost(std::string target) {
  if (auto p = target.rfind('/'); p != std::string::npos) target = target.substr(p + 1);
  if (!target.empty() && target.front() == '[') {
    const size_t close = target.find(']');
    return close == std::string::npos ? target : target.substr(1, close - 1);
  }
  const size_t colon = target.find(':');
  if (colon != std::string::npos && target.find(':', colon + 1) == std::string::npos) {
    return target.substr(0, colon);
  }
  return target;
}

// Past the gRPC call, how long UCX may still take to give the caller's memory back.
constexpr std::chrono::seconds kUcxDrainGrace(5);

}  // namespace

bool Client::uses_ucx() const {
  std::shared_ptr<UcxChannel> u = impl_->Ucx();
  return u != nullptr && u->healthy();
}

void Client::Impl::OpenUcx(const v1::UcxOffer& offer) {
  if (!options.ucx || offer.port() == 0) return;
  std::string host = offer.host();
  if (host.empty()) host = options.ucx_host.empty() ? TargetHost(options.server) : options.ucx_host;
  auto u = UcxChannel::Open(host, static_cast<uint16_t>(offer.port()), offer.instance_id(),
                            options.ucx_transports,
                            internal::DeadlineAfter(options.connect_deadline_ms));
  if (!u.ok()) {
    info.ucx_error = std::string(u.status().message());
    return;
  }
  common::MutexLock lock(&ucx_mu);
  ucx = *std::move(u);
}

std::shared_ptr<UcxChannel> Client::Impl::Ucx() {
  common::MutexLock lock(&ucx_mu);
  return ucx != nullptr && ucx->healthy() ? ucx : nullptr;
}

void Client::Impl::DropUcx(const std::shared_ptr<UcxChannel>& u) {
  common::MutexLock lock(&ucx_mu);
  // The channel itself stays alive while calls still hold it.
  if (ucx == u) ucx.reset();
}

bool Client::Impl::IsUcxFallback(const absl::Status& s) {
  return protocol::HasErrorReason(s, v1::UCX_SESSION_UNKNOWN) ||
         protocol::HasErrorReason(s, v1::UCX_TRANSFER_FAILED);
}

absl::Status Client::Impl::PutUcx(const std::shared_ptr<UcxChannel>& u, std::string_view ns,
                                  std::span<const PutBlock> blocks, v1::PayloadFormat format,
                                  std::chrono::system_clock::time_point deadline,
                                  PutResult* result) {
  const uint64_t transfer = u->NewTransfer();
  std::vector<std::span<const uint8_t>> payloads;
  payloads.reserve(blocks.size());
  for (const PutBlock& b : blocks) payloads.push_back(b.payload);
  // The payloads go first: the server keeps early ones (as rendezvous descriptors, the
  // bytes stay here) until the header has been checked.
  std::shared_ptr<UcxChannel::PutSends> sends = u->SendPut(transfer, payloads);
  std::optional<absl::Status> status =
      PutUcxCall(u, ns, blocks, format, deadline, transfer, result);
  if (!status.has_value()) {
    SliceRefs unused;
    PutResult part;
    status =
        PutStream(ns, blocks, format, deadline, &unused, &part, {}, {}, u->session(), transfer);
    if (status->ok()) {
      result->blocks_stored += part.blocks_stored;
      result->bytes_stored += part.bytes_stored;
    }
  }
  const absl::Status sent = sends->Wait(std::max(deadline, std::chrono::system_clock::now()) +
                                        kUcxDrainGrace);
  // The server's answer decides (it stores nothing unless every payload arrived); a
  // send error alone means the server dropped payloads it did not want.
  (void)sent;
  return *status;
}

std::optional<absl::Status> Client::Impl::PutUcxCall(
    const std::shared_ptr<UcxChannel>& u, std::string_view ns, std::span<const PutBlock> blocks,
    v1::PayloadFormat format, std::chrono::system_clock::time_point deadline, uint64_t transfer,
    PutResult* result) {
  if (!options.ucx_calls || !u->serves_calls()) return std::nullopt;
  v1::PutRequest request = PutHeaderMessage(ns, blocks, format, {}, {});
  request.mutable_header()->set_ucx_session(u->session());
  request.mutable_header()->set_ucx_transfer(transfer);
  const std::string bytes = request.SerializeAsString();
  if (sizeof(protocol::shm::FrameHeader) + bytes.size() > u->max_call_frame()) {
    return std::nullopt;  // too many blocks for one UCX message: the header goes over gRPC
  }
  absl::StatusOr<protocol::shm::CallReply> reply =
      u->Call(protocol::shm::FrameOp::kPut, bytes, deadline);
  if (!reply.ok()) {
    if (absl::IsDeadlineExceeded(reply.status())) {
      return absl::DeadlineExceededError(absl::StrCat("Put: ", reply.status().message()));
    }
    // The endpoint failed: the call falls back like a failed transfer.
    return protocol::WithErrorDetail(
        absl::UnavailableError(absl::StrCat("Put: ", reply.status().message())),
        v1::UCX_TRANSFER_FAILED, "");
  }
  // Refused before the transfer was touched (a session no authenticated gRPC call named
  // yet): this Put's header goes over gRPC, which binds the session.
  if (reply->code == grpc::StatusCode::UNAUTHENTICATED) return std::nullopt;
  ucx_calls.fetch_add(1, std::memory_order_relaxed);
  v1::PutResponse response;
  absl::Status status = internal::FromCallReply(*reply, "Put", &response);
  if (status.ok()) internal::AddPutResponse(response, result);
  return status;
}

absl::Status Client::Impl::GetUcx(const std::shared_ptr<UcxChannel>& u, v1::GetRequest request,
                                  const protocol::GetStreamParser::DestinationFn& destination,
                                  size_t n, std::chrono::system_clock::time_point deadline,
                                  std::vector<v1::GetBlockInfo>* infos) {
  const uint64_t transfer = u->NewTransfer();
  std::shared_ptr<UcxChannel::GetTransfer> t = u->ExpectGet(transfer, destination);
  request.set_ucx_session(u->session());
  request.set_ucx_transfer(transfer);
  absl::Status status = Call(
      "Get", 0, /*idempotent=*/false,
      [&](grpc::ClientContext* ctx, Channel& ch) {
        return GetShmAttempt(ctx, ch, request, infos);
      },
      false, deadline);
  if (status.ok() && infos->size() != n) {
    status = absl::InternalError(
        absl::StrCat("Get: header lists ", infos->size(), " blocks for ", n, " keys"));
  }
  if (status.ok()) {
    size_t expected = 0;
    for (const v1::GetBlockInfo& info : *infos) expected += info.found() && info.ucx() ? 1 : 0;
    status = t->Wait(expected, deadline);
    if (!status.ok() && !u->healthy()) {
      status = protocol::WithErrorDetail(
          absl::UnavailableError(absl::StrCat("Get: ucx: ", status.message())),
          v1::UCX_TRANSFER_FAILED, "");
    }
  }
  u->EndGet(transfer, t);
  return status;
}

}  // namespace kvtier::client
