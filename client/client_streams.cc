// Client::Impl's Put and Get streams: over gRPC (chunk frames whose slices point into the
// caller's buffers; Get streams parsed straight into destination buffers) or, on the
// server's host, over the shared region (offsets instead of payload bytes).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "client/client_impl.h"
#include "common/bulk_copy.h"
#include "common/status_macros.h"

namespace kvtier::client {
namespace {

namespace v1 = ::kvtier::v1;
using internal::Channel;
using internal::DeadlineAfter;
using internal::FromGrpc;
using internal::kGetMethod;
using internal::kPutMethod;
using internal::RunParallel;
using internal::SplitRanges;
using protocol::GetStreamParser;

// Adds one Put call's response to the result of the whole Put.
void AddPutResponse(const v1::PutResponse& response, PutResult* result) {
  result->blocks_stored += response.blocks_stored();
  result->bytes_stored += response.bytes_stored();
  result->block_bytes_stored.insert(result->block_bytes_stored.end(),
                                    response.block_bytes_stored().begin(),
                                    response.block_bytes_stored().end());
}
}  // namespace

absl::Status Client::Impl::PutRun(std::string_view ns, std::span<const PutBlock> blocks,
                                  v1::PayloadFormat format,
                                  std::chrono::system_clock::time_point deadline,
                                  PutResult* result) {
  if (std::shared_ptr<SharedRegion> r = PreferUcx() ? nullptr : Region()) {
    std::vector<uint64_t> offsets, staged;
    bool staged_all = true;
    for (const PutBlock& b : blocks) {
      if (auto at = r->OffsetOf(b.payload.data(), b.payload.size())) {
        offsets.push_back(*at);  // a SharedBuffer: no copy
        continue;
      }
      auto at = b.payload.empty() ? std::optional<uint64_t>(0) : r->Allocate(b.payload.size());
      if (!at) {
        staged_all = false;
        break;
      }
      if (!b.payload.empty()) {
        staged.push_back(*at);
        common::BulkCopy(r->base() + *at, b.payload.data(), b.payload.size());
      }
      offsets.push_back(*at);
    }
    absl::Status status;
    v1::PutResponse response;
    if (staged_all && options.shared_memory_socket_calls &&
        SocketCall(*r, protocol::shm::FrameOp::kPut,
                   PutHeaderMessage(ns, blocks, format, r->session(), offsets).SerializeAsString(),
                   deadline, "Put", &response, &status)) {
      if (status.ok()) AddPutResponse(response, result);
    } else if (staged_all) {
      SliceRefs unused;
      status = PutStream(ns, blocks, format, deadline, &unused, result, r->session(), offsets);
    }
    for (uint64_t at : staged) r->Free(at);
    if (staged_all && !IsLostSession(status)) return status;
    if (staged_all) DropRegion(r);
  }
  if (std::shared_ptr<UcxChannel> u = Ucx()) {
    absl::Status status = PutUcx(u, ns, blocks, format, deadline, result);
    if (!IsUcxFallback(status)) return status;
    if (!u->healthy() || protocol::HasErrorReason(status, v1::UCX_SESSION_UNKNOWN)) DropUcx(u);
  }
  SliceRefs refs;
  absl::Status status = PutStream(ns, blocks, format, deadline, &refs, result);
  refs.WaitForNone();
  return status;
}

absl::Status Client::Impl::PutStream(std::string_view ns, std::span<const PutBlock> blocks,
                                     v1::PayloadFormat format,
                                     std::chrono::system_clock::time_point deadline,
                                     SliceRefs* refs, PutResult* result,
                                     std::string_view shm_session,
                                     std::span<const uint64_t> shm_offsets,
                                     std::string_view ucx_session, uint64_t ucx_transfer) {
  Channel& ch = PickChannel();
  grpc::ClientContext ctx;
  ctx.set_deadline(deadline);
  Authorize(&ctx);
  v1::PutResponse response;
  std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer(
      grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(
          ch.channel.get(), *ch.put_method, &ctx, &response));

  v1::PutRequest header_msg = PutHeaderMessage(ns, blocks, format, shm_session, shm_offsets);
  if (!ucx_session.empty()) {
    header_msg.mutable_header()->set_ucx_session(std::string(ucx_session));
    header_msg.mutable_header()->set_ucx_transfer(ucx_transfer);
  }
  std::vector<uint64_t> sizes;
  sizes.reserve(blocks.size());
  for (const PutBlock& b : blocks) sizes.push_back(b.payload.size());
  bool stream_ok = true;
  {
    grpc::Slice slice(header_msg.SerializeAsString());
    grpc::ByteBuffer bb(&slice, 1);
    stream_ok = writer->Write(bb);
  }
  if (stream_ok && shm_session.empty() && ucx_session.empty()) {
    for (const auto& chunk : protocol::PlanChunks(sizes, options.chunk_bytes)) {
      // Points at the caller's memory (no copy); PutRun waits for its release.
      grpc::ByteBuffer bb = protocol::ChunkMessage(
          chunk, [&](size_t b) { return blocks[b].payload.data(); }, refs);
      if (!writer->Write(bb)) {
        stream_ok = false;
        break;
      }
    }
  }
  if (stream_ok) writer->WritesDone();
  const grpc::Status status = writer->Finish();
  if (!status.ok()) return FromGrpc("Put", status);
  AddPutResponse(response, result);
  return absl::OkStatus();
}

v1::PutRequest Client::Impl::PutHeaderMessage(std::string_view ns, std::span<const PutBlock> blocks,
                                              v1::PayloadFormat format,
                                              std::string_view shm_session,
                                              std::span<const uint64_t> shm_offsets) {
  v1::PutRequest header_msg;
  auto* header = header_msg.mutable_header();
  header->set_namespace_(std::string(ns));
  header->set_format(format);
  if (auto layout = KnownLayout(ns)) *header->mutable_layout() = *layout;
  if (!shm_session.empty()) header->set_shm_session(std::string(shm_session));
  for (size_t i = 0; i < blocks.size(); ++i) {
    const PutBlock& b = blocks[i];
    auto* pb = header->add_blocks();
    pb->set_key(b.key);
    pb->set_parent_key(b.parent_key);
    if (!b.token_ids.empty()) pb->mutable_token_ids()->Add(b.token_ids.begin(), b.token_ids.end());
    if (!b.lora_name.empty()) pb->set_lora_name(b.lora_name);
    for (const std::string& k : b.extra_keys) pb->add_extra_keys(k);
    pb->set_block_index(b.block_index);
    pb->set_size(b.payload.size());
    if (!shm_session.empty()) pb->set_shm_offset(shm_offsets[i]);
  }
  return header_msg;
}

bool Client::Impl::SocketCall(SharedRegion& r, protocol::shm::FrameOp op, std::string_view request,
                              std::chrono::system_clock::time_point deadline, const char* rpc,
                              google::protobuf::Message* response, absl::Status* status) {
  if (!options.shared_memory_socket_calls) return false;
  const int64_t deadline_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline.time_since_epoch()).count();
  absl::StatusOr<SharedRegion::Reply> reply = r.Call(op, request, deadline_ms);
  if (!reply.ok() && absl::IsDeadlineExceeded(reply.status())) {
    *status = absl::DeadlineExceededError(absl::StrCat(rpc, ": ", reply.status().message()));
    return true;
  }
  if (!reply.ok() || reply->code == grpc::StatusCode::UNAVAILABLE ||
      reply->code == grpc::StatusCode::UNAUTHENTICATED) {
    return false;
  }
  socket_calls.fetch_add(1, std::memory_order_relaxed);
  if (op != protocol::shm::FrameOp::kLookup && socket_lookup_offered) socket_lookup = true;
  const grpc::Status g(static_cast<grpc::StatusCode>(reply->code), reply->message, reply->details);
  if (!g.ok()) {
    *status = FromGrpc(rpc, g);
  } else if (!response->ParseFromString(reply->body)) {
    *status = absl::InternalError(
        absl::StrCat(rpc, ": the socket's reply does not parse as ", response->GetTypeName()));
  } else {
    *status = absl::OkStatus();
  }
  return true;
}

absl::Status Client::Impl::GetRun(std::string_view ns, std::span<const std::string> keys,
                                  const GetOptions& opts,
                                  std::chrono::system_clock::time_point deadline,
                                  const GetStreamParser::DestinationFn& destination,
                                  std::span<const std::span<uint8_t>> buffers,
                                  std::vector<v1::GetBlockInfo>* infos) {
  v1::GetRequest request;
  request.set_namespace_(std::string(ns));
  for (const auto& k : keys) request.add_keys(k);
  request.set_format(opts.format);
  request.set_lease_id(opts.lease_id);
  if (std::shared_ptr<SharedRegion> r = buffers.empty() || PreferUcx() ? nullptr : Region()) {
    std::vector<std::pair<size_t, uint64_t>> staged;  // key index, region offset
    bool staged_all = true;
    for (size_t i = 0; i < buffers.size() && staged_all; ++i) {
      std::optional<uint64_t> at = r->OffsetOf(buffers[i].data(), buffers[i].size());
      if (!at && !buffers[i].empty()) {
        at = r->Allocate(buffers[i].size());
        if (at) staged.emplace_back(i, *at);
      }
      if (!at && !buffers[i].empty()) staged_all = false;
      v1::ShmRange* d = request.add_shm_destinations();
      d->set_offset(at.value_or(0));
      d->set_capacity(at ? buffers[i].size() : 0);
    }
    absl::Status status;
    if (staged_all) {
      request.set_shm_session(r->session());
      v1::GetResponse response;
      if (SocketCall(*r, protocol::shm::FrameOp::kGet, request.SerializeAsString(), deadline, "Get",
                     &response, &status)) {
        if (status.ok()) {
          infos->assign(response.header().blocks().begin(), response.header().blocks().end());
        }
      } else {
        status = Call(
            "Get", 0, true,
            [&](grpc::ClientContext* ctx, Channel& ch) {
              return GetShmAttempt(ctx, ch, request, infos);
            },
            false, deadline);
      }
      if (status.ok() && infos->size() != keys.size()) {
        status = absl::InternalError(absl::StrCat("Get: header lists ", infos->size(),
                                                  " blocks for ", keys.size(), " keys"));
      }
      for (size_t i = 0; status.ok() && i < infos->size(); ++i) {
        if ((*infos)[i].found() && (*infos)[i].size() > buffers[i].size()) {
          status = absl::InternalError(absl::StrCat("Get: the server wrote ", (*infos)[i].size(),
                                                    " bytes into buffers[", i, "] of ",
                                                    buffers[i].size()));
        }
      }
      for (const auto& [i, at] : staged) {
        if (status.ok() && (*infos)[i].found()) {
          common::BulkCopy(buffers[i].data(), r->base() + at, (*infos)[i].size());
        }
      }
    }
    for (const auto& [i, at] : staged) r->Free(at);
    if (staged_all && !IsLostSession(status)) return status;
    if (staged_all) DropRegion(r);
    request.clear_shm_session();
    request.clear_shm_destinations();
  }
  if (std::shared_ptr<UcxChannel> u = Ucx()) {
    absl::Status status = GetUcx(u, request, destination, keys.size(), deadline, infos);
    if (!IsUcxFallback(status)) return status;
    if (!u->healthy() || protocol::HasErrorReason(status, v1::UCX_SESSION_UNKNOWN)) DropUcx(u);
  }
  return Call(
      "Get", 0, true,
      [&](grpc::ClientContext* ctx, Channel& ch) {
        return GetStreamAttempt(ctx, ch, request, destination, keys.size(), infos);
      },
      false, deadline);
}

grpc::Status Client::Impl::GetStreamAttempt(grpc::ClientContext* ctx, Channel& ch,
                                            const v1::GetRequest& request,
                                            const GetStreamParser::DestinationFn& destination,
                                            size_t n, std::vector<v1::GetBlockInfo>* infos) {
  std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
      grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(ch.channel.get(),
                                                                    *ch.get_method, ctx, request));
  GetStreamParser parser(destination);
  grpc::ByteBuffer bb;
  std::vector<grpc::Slice> slices;
  std::vector<std::span<const uint8_t>> spans;
  absl::Status parse_status;
  while (reader->Read(&bb)) {
    slices.clear();
    if (!bb.Dump(&slices).ok()) {
      parse_status = absl::InternalError("cannot read response slices");
      break;
    }
    spans.clear();
    for (const auto& sl : slices) spans.emplace_back(sl.begin(), sl.size());
    parse_status = parser.Consume(spans);
    if (!parse_status.ok()) break;
  }
  if (parse_status.ok()) {
    grpc::Status status = reader->Finish();
    if (!status.ok()) return status;
    parse_status = parser.Finish();
    if (parse_status.ok() && parser.header().blocks_size() != static_cast<int>(n)) {
      parse_status = absl::InternalError(
          absl::StrCat("header lists ", parser.header().blocks_size(), " blocks for ", n, " keys"));
    }
    if (parse_status.ok()) {
      infos->assign(parser.header().blocks().begin(), parser.header().blocks().end());
      return grpc::Status::OK;
    }
  } else {
    ctx->TryCancel();
    reader->Finish();
  }
  // Not retried: a malformed stream is not UNAVAILABLE.
  return grpc::Status(static_cast<grpc::StatusCode>(parse_status.code()),
                      std::string(parse_status.message()));
}

grpc::Status Client::Impl::GetShmAttempt(grpc::ClientContext* ctx, Channel& ch,
                                         const v1::GetRequest& request,
                                         std::vector<v1::GetBlockInfo>* infos) {
  std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
      grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(ch.channel.get(),
                                                                    *ch.get_method, ctx, request));
  grpc::ByteBuffer bb;
  v1::GetResponse msg;
  bool have_header = false, extra = false;
  while (reader->Read(&bb)) {
    if (have_header || !grpc::SerializationTraits<v1::GetResponse>::Deserialize(&bb, &msg).ok() ||
        !msg.has_header()) {
      extra = true;
      continue;
    }
    have_header = true;
  }
  grpc::Status status = reader->Finish();
  if (!status.ok()) return status;
  if (!have_header || extra) {
    return grpc::Status(grpc::StatusCode::INTERNAL,
                        "a shared-memory Get must answer with exactly one header message");
  }
  infos->assign(msg.header().blocks().begin(), msg.header().blocks().end());
  return grpc::Status::OK;
}

absl::Status Client::Impl::GetParallel(
    std::string_view ns, std::span<const std::string> keys, const GetOptions& opts,
    const std::function<GetStreamParser::DestinationFn(size_t base)>& make_destination,
    std::span<const std::span<uint8_t>> buffers, std::vector<v1::GetBlockInfo>* infos) {
  const auto deadline = DeadlineAfter(DeadlineMs(opts.deadline_ms));
  const auto ranges = SplitRanges(keys.size(), options.max_streams_per_call);
  std::vector<std::vector<v1::GetBlockInfo>> parts(ranges.size());
  // One stream ends the lease itself; several end it once all of them are done.
  GetOptions run_opts = opts;
  if (ranges.size() > 1) run_opts.lease_id = 0;
  RETURN_IF_ERROR(RunParallel(ranges.size(), [&](size_t r) {
    const auto [begin, end] = ranges[r];
    return GetRun(ns, keys.subspan(begin, end - begin), run_opts, deadline, make_destination(begin),
                  buffers.empty() ? buffers : buffers.subspan(begin, end - begin), &parts[r]);
  }));
  if (ranges.size() > 1 && opts.lease_id != 0) {
    v1::ReleaseLeaseRequest req;
    req.set_namespace_(std::string(ns));
    req.set_lease_id(opts.lease_id);
    v1::ReleaseLeaseResponse resp;
    RETURN_IF_ERROR(
        Unary("ReleaseLease", CallOptions{}, true, &v1::KvCache::Stub::ReleaseLease, req, &resp));
  }
  infos->clear();
  infos->reserve(keys.size());
  for (auto& p : parts) {
    for (auto& i : p) infos->push_back(std::move(i));
  }
  return absl::OkStatus();
}

}  // namespace kvtier::client
