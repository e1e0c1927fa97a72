// Client::Impl's Put and Get: one loop each over the payload paths (client/client_paths.h),
// and the primitives the paths use: Put streams (chunk frames whose slices point into the
// caller's buffers, or the header alone naming the shared region's offsets or a UCX
// transfer), Get streams (parsed straight into destination buffers, or the header
// alone), and calls as frames on the shared region's socket.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "client/client_impl.h"
#include "common/status_macros.h"

namespace kvtier::client {
namespace {

namespace v1 = ::kvtier::v1;
using internal::Channel;
using internal::DeadlineAfter;
using internal::FromGrpc;
using internal::RunParallel;
using internal::SplitRanges;
using protocol::GetStreamParser;
using internal::AddPutResponse;
}  // namespace

absl::Status Client::Impl::PutRun(std::string_view ns, std::span<const PutBlock> blocks,
                                  v1::PayloadFormat format,
                                  std::chrono::system_clock::time_point deadline,
                                  PutResult* result) {
  internal::PutCall call{ns, blocks, format, deadline, result, std::nullopt};
  return dataplane::RunPaths<internal::PutCall>(put_paths, call);
}

absl::Status Client::Impl::PutStream(std::string_view ns, std::span<const PutBlock> blocks,
                                     v1::PayloadFormat format,
                                     std::chrono::system_clock::time_point deadline,
                                     SliceRefs* refs, PutResult* result,
                                     std::string_view shm_session,
                                     std::span<const uint64_t> shm_offsets,
                                     std::string_view ucx_session, uint64_t ucx_transfer) {
  v1::PutRequest header_msg = PutHeaderMessage(ns, blocks, format, shm_session, shm_offsets);
  if (!ucx_session.empty()) {
    header_msg.mutable_header()->set_ucx_session(std::string(ucx_session));
    header_msg.mutable_header()->set_ucx_transfer(ucx_transfer);
  }
  grpc::Slice header_slice(header_msg.SerializeAsString());
  const grpc::ByteBuffer header_bb(&header_slice, 1);
  std::vector<uint64_t> sizes;
  sizes.reserve(blocks.size());
  for (const PutBlock& b : blocks) sizes.push_back(b.payload.size());
  v1::PutResponse response;
  // A Put stores each block under a key its content is bound to, so storing it again after
  // a connection broke mid-call (the server closed an idle connection the client had not
  // yet seen close: "Broken pipe") leaves the same state: retried like the idempotent
  // calls. A UCX transfer is one-shot; its path falls back on its own.
  const bool retry = ucx_session.empty();
  return Call("Put", 0, retry, [&](grpc::ClientContext* ctx, Channel& ch) {
    response.Clear();
    if (!shm_session.empty() || !ucx_session.empty()) {
      // The payloads take another path, so the stream is the header alone: sent as one
      // batch (metadata, the message, the end of the stream, the answer awaited), which is
      // the same bytes on the wire as the stream but one wait for the caller's thread and
      // one reaction of the server's instead of four (docs/dataplane.md, "UCX Put against
      // the bare transport").
      const grpc::Status status = grpc::internal::BlockingUnaryCall(
          ch.channel.get(), *ch.put_one_method, ctx, header_bb, &response);
      if (status.ok()) AddPutResponse(response, result);
      return status;
    }
    // The metadata goes out with the header message, the end of the stream with the last
    // chunk.
    ctx->set_initial_metadata_corked(true);
    std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer(
        grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(
            ch.channel.get(), *ch.put_method, ctx, &response));
    bool stream_ok = writer->Write(header_bb);
    bool ended = false;  // the last chunk went with the end of the stream
    if (stream_ok) {
      const auto chunks = protocol::PlanChunks(sizes, options.chunk_bytes);
      for (size_t c = 0; c < chunks.size(); ++c) {
        // Points at the caller's memory (no copy); PutRun waits for its release.
        grpc::ByteBuffer bb = protocol::ChunkMessage(
            chunks[c], [&](size_t b) { return blocks[b].payload.data(); }, refs);
        const bool last = c + 1 == chunks.size();
        if (!writer->Write(bb, last ? grpc::WriteOptions().set_last_message()
                                    : grpc::WriteOptions())) {
          stream_ok = false;
          break;
        }
        ended = last;
      }
    }
    if (stream_ok && !ended) writer->WritesDone();
    const grpc::Status status = writer->Finish();
    if (status.ok()) AddPutResponse(response, result);
    return status;
  }, false, deadline);
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
  *status = internal::FromCallReply(*reply, rpc, response);
  return true;
}

absl::Status Client::Impl::GetRun(std::string_view ns, std::span<const std::string> keys,
                                  const GetOptions& opts,
                                  std::chrono::system_clock::time_point deadline,
                                  const GetStreamParser::DestinationFn& destination,
                                  std::span<const std::span<uint8_t>> buffers,
                                  std::vector<v1::GetBlockInfo>* infos,
                                  const std::function<void()>* on_header) {
  internal::GetCall call{keys, deadline, &destination, buffers, infos, {}, std::nullopt};
  call.on_header = on_header;
  call.request.set_namespace_(std::string(ns));
  for (const auto& k : keys) call.request.add_keys(k);
  call.request.set_format(opts.format);
  call.request.set_lease_id(opts.lease_id);
  return dataplane::RunPaths<internal::GetCall>(get_paths, call);
}

grpc::Status Client::Impl::GetStreamAttempt(grpc::ClientContext* ctx, Channel& ch,
                                            const v1::GetRequest& request,
                                            const GetStreamParser::DestinationFn& destination,
                                            size_t n, std::vector<v1::GetBlockInfo>* infos,
                                            const std::function<void()>* on_header) {
  std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
      grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(ch.channel.get(),
                                                                    *ch.get_method, ctx, request));
  GetStreamParser parser(destination);
  grpc::ByteBuffer bb;
  std::vector<grpc::Slice> slices;
  std::vector<std::span<const uint8_t>> spans;
  absl::Status parse_status;
  bool header_seen = false;
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
    if (on_header != nullptr && !header_seen && parser.has_header()) {
      header_seen = true;
      (*on_header)();
    }
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
  // Pieces staged in the shared region go as one stream of them: two in flight keep the
  // server busy (it writes one into the region while the other is copied out), and more
  // would not fit the region.
  const PiecePlan plan = PiecesFor(buffers);
  const auto ranges =
      SplitRanges(keys.size(), plan.in_region ? 1 : options.max_streams_per_call);
  std::vector<std::vector<v1::GetBlockInfo>> parts(ranges.size());
  // One call ends the lease itself; several (streams or pieces) end it once all of them
  // are done.
  const bool several = ranges.size() > 1 || plan.bytes != 0;
  GetOptions run_opts = opts;
  if (several) run_opts.lease_id = 0;
  RETURN_IF_ERROR(RunParallel(ranges.size(), [&](size_t r) {
    const auto [begin, end] = ranges[r];
    return GetPieces(ns, keys.subspan(begin, end - begin), run_opts, deadline, make_destination,
                     begin, buffers.empty() ? buffers : buffers.subspan(begin, end - begin),
                     plan.bytes, &parts[r]);
  }));
  if (several && opts.lease_id != 0) {
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

Client::Impl::PiecePlan Client::Impl::PiecesFor(std::span<const std::span<uint8_t>> buffers) {
  // Over the stream the next piece goes once the one before has its header, over shared
  // memory once it is sent. Over UCX the header comes last and the payloads land where
  // they go: pieces would only run one after another.
  if (options.get_piece_bytes == 0 || buffers.empty() || Ucx() != nullptr) return {};
  uint64_t total = 0, largest = 0;
  for (const auto& b : buffers) {
    total += b.size();
    largest = std::max<uint64_t>(largest, b.size());
  }
  if (total <= options.get_piece_bytes) return {};
  if (std::shared_ptr<SharedRegion> r = Region(); r != nullptr) {
    // Two pieces staged at once with a third of the region to spare (other calls, 4 KiB
    // rounding); when not even one buffer fits such a piece, the pieces take the stream.
    const uint64_t share = r->size() / 3;
    if (share >= largest + 4096) return {std::min(options.get_piece_bytes, share), true};
  }
  return {options.get_piece_bytes, false};
}

absl::Status Client::Impl::GetPieces(
    std::string_view ns, std::span<const std::string> keys, const GetOptions& opts,
    std::chrono::system_clock::time_point deadline,
    const std::function<GetStreamParser::DestinationFn(size_t base)>& make_destination,
    size_t base, std::span<const std::span<uint8_t>> buffers, uint64_t piece_bytes,
    std::vector<v1::GetBlockInfo>* infos) {
  // Pieces of whole keys, each at least one key and about piece_bytes of buffers.
  std::vector<std::pair<size_t, size_t>> pieces;
  if (piece_bytes != 0) {
    size_t begin = 0;
    uint64_t bytes = 0;
    for (size_t i = 0; i < buffers.size(); ++i) {
      bytes += buffers[i].size();
      if (bytes >= piece_bytes && i + 1 < buffers.size()) {
        pieces.emplace_back(begin, i + 1);
        begin = i + 1;
        bytes = 0;
      }
    }
    pieces.emplace_back(begin, buffers.size());
  }
  if (pieces.size() <= 1) {
    return GetRun(ns, keys, opts, deadline, make_destination(base), buffers, infos);
  }
  // Each piece's progress: started once the server has it (GetCall::on_header) or it is
  // done.
  struct Progress {
    common::Mutex mu;
    bool started ABSL_GUARDED_BY(mu) = false;
    bool done ABSL_GUARDED_BY(mu) = false;
    absl::Status status ABSL_GUARDED_BY(mu);
    std::vector<v1::GetBlockInfo> infos;  // written by the piece's thread, read after join
  };
  std::vector<Progress> progress(pieces.size());
  std::vector<std::thread> threads;
  threads.reserve(pieces.size());
  auto run_piece = [&](size_t p) {
    Progress& pr = progress[p];
    const auto [begin, end] = pieces[p];
    const std::function<void()> on_header = [&pr] {
      common::MutexLock lock(&pr.mu);
      pr.started = true;
    };
    absl::Status s = GetRun(ns, keys.subspan(begin, end - begin), opts, deadline,
                            make_destination(base + begin), buffers.subspan(begin, end - begin),
                            &pr.infos, &on_header);
    common::MutexLock lock(&pr.mu);
    pr.started = true;
    pr.done = true;
    pr.status = std::move(s);
  };
  bool failed = false;
  for (size_t p = 0; p < pieces.size() && !failed; ++p) {
    // At most two in flight: the one being sent and the one the server is reading.
    if (p >= 2) threads[p - 2].join();
    threads.emplace_back(run_piece, p);
    Progress& pr = progress[p];
    common::MutexLock lock(&pr.mu);
    pr.mu.Await(common::Condition(&pr.started));
    failed = pr.done && !pr.status.ok();
    if (!failed && p >= 1) {
      Progress& before = progress[p - 1];
      common::MutexLock lock_before(&before.mu);
      failed = before.done && !before.status.ok();
    }
  }
  for (std::thread& t : threads) {
    if (t.joinable()) t.join();
  }
  infos->clear();
  infos->reserve(keys.size());
  for (size_t p = 0; p < threads.size(); ++p) {
    common::MutexLock lock(&progress[p].mu);
    if (!progress[p].status.ok()) return progress[p].status;
  }
  for (size_t p = 0; p < threads.size(); ++p) {
    for (auto& i : progress[p].infos) infos->push_back(std::move(i));
  }
  return absl::OkStatus();
}

}  // namespace kvtier::client
