#include "client/client.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/rpc_method.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>
#include <grpcpp/support/sync_stream.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/prefix_keys.h"
#include "client/shared_region.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "kvtier/v1/kvtier.grpc.pb.h"
#include "protocol/convert.h"
#include "protocol/error_detail.h"
#include "protocol/wire.h"

namespace kvtier::client {
namespace {

namespace v1 = ::kvtier::v1;

constexpr char kPutMethod[] = "/kvtier.v1.KvCache/Put";
constexpr char kGetMethod[] = "/kvtier.v1.KvCache/Get";

using protocol::CheckSpecMatches;
using protocol::GetStreamParser;

absl::Status FromGrpc(const char* rpc, const grpc::Status& status) {
  return protocol::FromGrpcStatus(rpc, status);
}

std::chrono::system_clock::time_point DeadlineAfter(int64_t ms) {
  return std::chrono::system_clock::now() + std::chrono::milliseconds(ms);
}

// One HTTP/2 connection and the stubs and raw methods bound to it.
struct Channel {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::KvCache::Stub> data;
  std::unique_ptr<v1::KvCacheAdmin::Stub> admin;
  std::unique_ptr<grpc::internal::RpcMethod> put_method;
  std::unique_ptr<grpc::internal::RpcMethod> get_method;
};

// Splits [0, n) into at most `parts` contiguous non-empty ranges.
std::vector<std::pair<size_t, size_t>> SplitRanges(size_t n, size_t parts) {
  std::vector<std::pair<size_t, size_t>> ranges;
  if (n == 0) return ranges;
  parts = std::max<size_t>(1, std::min(parts, n));
  size_t begin = 0;
  for (size_t p = 0; p < parts; ++p) {
    const size_t end = begin + (n - begin) / (parts - p);
    ranges.emplace_back(begin, end);
    begin = end;
  }
  return ranges;
}

// Runs fn(i) for every i in [0, count): i = 0 on the calling thread, the rest on their
// own threads; returns the first error in index order.
template <typename Fn>
absl::Status RunParallel(size_t count, Fn fn) {
  std::vector<absl::Status> results(count);
  std::vector<std::thread> threads;
  threads.reserve(count > 0 ? count - 1 : 0);
  for (size_t i = 1; i < count; ++i) {
    threads.emplace_back([&results, &fn, i] { results[i] = fn(i); });
  }
  if (count > 0) results[0] = fn(0);
  for (auto& t : threads) t.join();
  for (auto& s : results) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

struct Client::Impl {
  ClientOptions options;
  ConnectInfo info;
  std::vector<Channel> channels;
  std::atomic<uint64_t> next_channel{0};

  // Layouts of the namespaces registered through this client, sent with every Put.
  absl::Mutex mu;
  std::map<std::string, v1::Layout, std::less<>> layouts ABSL_GUARDED_BY(mu);

  void RememberLayout(const v1::NamespaceSpec& spec) {
    absl::MutexLock lock(&mu);
    layouts[spec.name()] = spec.layout();
  }
  std::optional<v1::Layout> KnownLayout(std::string_view ns) {
    absl::MutexLock lock(&mu);
    auto it = layouts.find(ns);
    if (it == layouts.end()) return std::nullopt;
    return it->second;
  }

  // The shared region while the shared-memory path is in use, else null.
  absl::Mutex region_mu;
  std::shared_ptr<SharedRegion> region ABSL_GUARDED_BY(region_mu);

  std::shared_ptr<SharedRegion> Region() {
    absl::MutexLock lock(&region_mu);
    return region;
  }
  // The server no longer knows `r`'s session (it restarted): use TCP from now on.
  void DropRegion(const std::shared_ptr<SharedRegion>& r) {
    absl::MutexLock lock(&region_mu);
    if (region == r) region.reset();
  }
  static bool IsLostSession(const absl::Status& s) {
    return protocol::HasErrorReason(s, v1::SHM_SESSION_UNKNOWN);
  }

  // Opens the shared region `offer` describes, or records why not.
  void OpenSharedMemory(const v1::SharedMemoryOffer& offer) {
    if (!options.shared_memory || offer.socket_path().empty()) return;
    const std::string& path = options.shared_memory_socket.empty() ? offer.socket_path()
                                                                   : options.shared_memory_socket;
    auto r = SharedRegion::Open(path,
                                std::min(options.shared_memory_bytes, offer.max_region_bytes()),
                                offer.instance_id(), options.shared_memory_cuda_register);
    if (!r.ok()) {
      info.shared_memory_error = std::string(r.status().message());
      return;
    }
    info.shared_memory_cuda_registered = (*r)->cuda_registered();
    absl::MutexLock lock(&region_mu);
    region = *std::move(r);
  }

  Channel& PickChannel() {
    return channels[next_channel.fetch_add(1, std::memory_order_relaxed) % channels.size()];
  }

  int64_t DeadlineMs(int64_t ms) const { return ms > 0 ? ms : options.default_deadline_ms; }

  void Authorize(grpc::ClientContext* ctx) const {
    if (!options.auth_token.empty()) {
      ctx->AddMetadata("authorization", "Bearer " + options.auth_token);
    }
  }

  // Runs `attempt(ctx, channel)` with one overall deadline; retries UNAVAILABLE when
  // `idempotent`. `wait_for_ready` makes the call wait for a connection instead of failing
  // fast (used by Connect).
  // `at`, when set, is the deadline (deadline_ms is then ignored).
  template <typename Fn>
  absl::Status Call(const char* rpc, int64_t deadline_ms, bool idempotent, Fn attempt,
                    bool wait_for_ready = false,
                    std::optional<std::chrono::system_clock::time_point> at = std::nullopt) {
    const auto deadline = at.value_or(DeadlineAfter(deadline_ms));
    int64_t backoff_ms = options.retry_backoff_ms;
    const int max_attempts = idempotent ? std::max(1, options.max_attempts) : 1;
    grpc::Status status;
    for (int a = 0; a < max_attempts; ++a) {
      grpc::ClientContext ctx;
      ctx.set_deadline(deadline);
      Authorize(&ctx);
      if (wait_for_ready) ctx.set_wait_for_ready(true);
      status = attempt(&ctx, PickChannel());
      if (status.ok() || status.error_code() != grpc::StatusCode::UNAVAILABLE) break;
      if (a + 1 == max_attempts) break;
      const auto wake = std::chrono::system_clock::now() + std::chrono::milliseconds(backoff_ms);
      if (wake >= deadline) break;
      std::this_thread::sleep_until(wake);
      backoff_ms *= 2;
    }
    return FromGrpc(rpc, status);
  }

  // One unary RPC through a generated stub method, on the data-plane or the admin stub,
  // with Call's deadline and retry rules.
  template <typename Req, typename Resp>
  absl::Status Unary(const char* rpc, const CallOptions& call, bool idempotent,
                     grpc::Status (v1::KvCache::Stub::*method)(grpc::ClientContext*, const Req&,
                                                               Resp*),
                     const Req& req, Resp* resp) {
    return Call(rpc, DeadlineMs(call.deadline_ms), idempotent,
                [&](grpc::ClientContext* ctx, Channel& ch) {
                  return ((*ch.data).*method)(ctx, req, resp);
                });
  }
  template <typename Req, typename Resp>
  absl::Status Unary(const char* rpc, const CallOptions& call, bool idempotent,
                     grpc::Status (v1::KvCacheAdmin::Stub::*method)(grpc::ClientContext*,
                                                                    const Req&, Resp*),
                     const Req& req, Resp* resp) {
    return Call(rpc, DeadlineMs(call.deadline_ms), idempotent,
                [&](grpc::ClientContext* ctx, Channel& ch) {
                  return ((*ch.admin).*method)(ctx, req, resp);
                });
  }

  // Counts the gRPC slices that still reference caller memory, so PutRun returns only
  // after gRPC has let go of all of them (even when a stream fails half-way).
  struct SliceRefs {
    absl::Mutex mu;
    int live ABSL_GUARDED_BY(mu) = 0;
    static void Release(void* self) {
      auto* refs = static_cast<SliceRefs*>(self);
      absl::MutexLock lock(&refs->mu);
      --refs->live;
    }
  };

  // Puts `blocks` through the shared region when there is one and it has room for the
  // payloads that are not in it already; else (or if the server lost the session) over
  // the stream.
  absl::Status PutRun(std::string_view ns, std::span<const PutBlock> blocks,
                      v1::PayloadFormat format, std::chrono::system_clock::time_point deadline,
                      PutResult* result) {
    if (std::shared_ptr<SharedRegion> r = Region()) {
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
          std::memcpy(r->base() + *at, b.payload.data(), b.payload.size());
        }
        offsets.push_back(*at);
      }
      absl::Status status;
      if (staged_all) {
        SliceRefs unused;
        status = PutStream(ns, blocks, format, deadline, &unused, result, r->session(), offsets);
      }
      for (uint64_t at : staged) r->Free(at);
      if (staged_all && !IsLostSession(status)) return status;
      if (staged_all) DropRegion(r);
    }
    SliceRefs refs;
    absl::Status status = PutStream(ns, blocks, format, deadline, &refs, result);
    absl::MutexLock lock(&refs.mu);
    refs.mu.Await(absl::Condition(
        +[](int* live) { return *live == 0; }, &refs.live));
    return status;
  }

  // One Put stream carrying `blocks`: the header message, then chunk messages whose
  // payload slices point into the callers' buffers; or, with `shm_session`, the header
  // alone, naming each payload's offset in the shared region.
  absl::Status PutStream(std::string_view ns, std::span<const PutBlock> blocks,
                         v1::PayloadFormat format, std::chrono::system_clock::time_point deadline,
                         SliceRefs* refs, PutResult* result, std::string_view shm_session = {},
                         std::span<const uint64_t> shm_offsets = {}) {
    Channel& ch = PickChannel();
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline);
    Authorize(&ctx);
    v1::PutResponse response;
    std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer(
        grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(
            ch.channel.get(), *ch.put_method, &ctx, &response));

    v1::PutRequest header_msg;
    auto* header = header_msg.mutable_header();
    header->set_namespace_(std::string(ns));
    header->set_format(format);
    if (auto layout = KnownLayout(ns)) *header->mutable_layout() = *layout;
    if (!shm_session.empty()) header->set_shm_session(std::string(shm_session));
    std::vector<uint64_t> sizes;
    sizes.reserve(blocks.size());
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
      sizes.push_back(b.payload.size());
    }
    bool stream_ok = true;
    {
      grpc::Slice slice(header_msg.SerializeAsString());
      grpc::ByteBuffer bb(&slice, 1);
      stream_ok = writer->Write(bb);
    }
    if (stream_ok && shm_session.empty()) {
      std::vector<grpc::Slice> slices;
      for (const auto& chunk : protocol::PlanChunks(sizes, options.chunk_bytes)) {
        uint64_t len = 0;
        for (const auto& piece : chunk) len += piece.bytes;
        uint8_t prefix[protocol::kMaxFramePrefixBytes];
        const size_t prefix_len = protocol::EncodeChunkPrefix(len, prefix);
        slices.clear();
        slices.emplace_back(prefix, prefix_len);  // copied: a few bytes
        for (const auto& piece : chunk) {
          // Points at the caller's memory (no copy); PutRun waits for its release.
          {
            absl::MutexLock lock(&refs->mu);
            ++refs->live;
          }
          slices.emplace_back(
              const_cast<uint8_t*>(blocks[piece.block].payload.data() + piece.offset), piece.bytes,
              &SliceRefs::Release, refs);
        }
        grpc::ByteBuffer bb(slices.data(), slices.size());
        if (!writer->Write(bb)) {
          stream_ok = false;
          break;
        }
      }
    }
    if (stream_ok) writer->WritesDone();
    const grpc::Status status = writer->Finish();
    if (!status.ok()) return FromGrpc("Put", status);
    result->blocks_stored += response.blocks_stored();
    result->bytes_stored += response.bytes_stored();
    return absl::OkStatus();
  }

  // One Get stream for keys[0, n) into buffers / allocated strings. With `buffers` (one
  // per key) and a shared region with room, the server writes the payloads into the
  // region (straight into buffers that are SharedBuffers, else into staging copied out
  // here); otherwise they arrive in the stream.
  absl::Status GetRun(std::string_view ns, std::span<const std::string> keys,
                      const GetOptions& opts, std::chrono::system_clock::time_point deadline,
                      const GetStreamParser::DestinationFn& destination,
                      std::span<const std::span<uint8_t>> buffers,
                      std::vector<v1::GetBlockInfo>* infos) {
    v1::GetRequest request;
    request.set_namespace_(std::string(ns));
    for (const auto& k : keys) request.add_keys(k);
    request.set_format(opts.format);
    if (std::shared_ptr<SharedRegion> r = buffers.empty() ? nullptr : Region()) {
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
        status = Call("Get", 0, true, [&](grpc::ClientContext* ctx, Channel& ch) {
          return GetShmAttempt(ctx, ch, request, infos);
        }, false, deadline);
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
            std::memcpy(buffers[i].data(), r->base() + at, (*infos)[i].size());
          }
        }
      }
      for (const auto& [i, at] : staged) r->Free(at);
      if (staged_all && !IsLostSession(status)) return status;
      if (staged_all) DropRegion(r);
      request.clear_shm_session();
      request.clear_shm_destinations();
    }
    return Call("Get", 0, true, [&](grpc::ClientContext* ctx, Channel& ch) {
      return GetStreamAttempt(ctx, ch, request, destination, keys.size(), infos);
    }, false, deadline);
  }

  // One attempt of a Get whose payloads come in the stream.
  grpc::Status GetStreamAttempt(grpc::ClientContext* ctx, Channel& ch,
                                const v1::GetRequest& request,
                                const GetStreamParser::DestinationFn& destination, size_t n,
                                std::vector<v1::GetBlockInfo>* infos) {
    std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
        grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(
            ch.channel.get(), *ch.get_method, ctx, request));
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
        parse_status = absl::InternalError(absl::StrCat(
            "header lists ", parser.header().blocks_size(), " blocks for ", n, " keys"));
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

  // One attempt of a Get whose payloads the server writes into the shared region: the
  // stream is the header alone.
  grpc::Status GetShmAttempt(grpc::ClientContext* ctx, Channel& ch, const v1::GetRequest& request,
                             std::vector<v1::GetBlockInfo>* infos) {
    std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
        grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(
            ch.channel.get(), *ch.get_method, ctx, request));
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

  absl::Status GetParallel(
      std::string_view ns, std::span<const std::string> keys, const GetOptions& opts,
      const std::function<GetStreamParser::DestinationFn(size_t base)>& make_destination,
      std::span<const std::span<uint8_t>> buffers, std::vector<v1::GetBlockInfo>* infos) {
    const auto deadline = DeadlineAfter(DeadlineMs(opts.deadline_ms));
    const auto ranges = SplitRanges(keys.size(), options.max_streams_per_call);
    std::vector<std::vector<v1::GetBlockInfo>> parts(ranges.size());
    RETURN_IF_ERROR(RunParallel(ranges.size(), [&](size_t r) {
      const auto [begin, end] = ranges[r];
      return GetRun(ns, keys.subspan(begin, end - begin), opts, deadline, make_destination(begin),
                    buffers.empty() ? buffers : buffers.subspan(begin, end - begin), &parts[r]);
    }));
    infos->clear();
    infos->reserve(keys.size());
    for (auto& p : parts) {
      for (auto& i : p) infos->push_back(std::move(i));
    }
    return absl::OkStatus();
  }
};

// A request naming a namespace and its keys (Lookup, Pin, Unpin, ReportScores, Delete,
// Evict all carry these two fields).
template <typename Request>
Request KeyedRequest(std::string_view ns, std::span<const std::string> keys) {
  Request req;
  req.set_namespace_(std::string(ns));
  for (const auto& k : keys) req.add_keys(k);
  return req;
}

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  if (options.server.empty()) return absl::InvalidArgumentError("options.server is empty");
  if (options.num_channels < 1) {
    return absl::InvalidArgumentError("options.num_channels must be >= 1");
  }
  if (options.chunk_bytes == 0) return absl::InvalidArgumentError("options.chunk_bytes is 0");
  if (options.max_streams_per_call < 1) {
    return absl::InvalidArgumentError("options.max_streams_per_call must be >= 1");
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  if (impl->options.hash_scheme.empty()) impl->options.hash_scheme = CanonicalHashScheme();
  for (int i = 0; i < options.num_channels; ++i) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(options.max_receive_message_bytes);
    args.SetMaxSendMessageSize(-1);
    // A separate TCP connection per channel: one HTTP/2 connection is bound by one
    // core's worth of framing work.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetInt("kvtier.channel_id", i);
    if (options.http2_stream_window_bytes > 0) {
      args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, options.http2_stream_window_bytes);
    }
    if (options.http2_max_frame_bytes > 0) {
      args.SetInt(GRPC_ARG_HTTP2_MAX_FRAME_SIZE, options.http2_max_frame_bytes);
    }
    if (options.tcp_min_read_chunk_bytes > 0) {
      args.SetInt(GRPC_ARG_TCP_MIN_READ_CHUNK_SIZE, options.tcp_min_read_chunk_bytes);
      args.SetInt(GRPC_ARG_TCP_READ_CHUNK_SIZE, options.tcp_min_read_chunk_bytes);
    }
    Channel ch;
    ch.channel =
        grpc::CreateCustomChannel(options.server, grpc::InsecureChannelCredentials(), args);
    ch.data = v1::KvCache::NewStub(ch.channel);
    ch.admin = v1::KvCacheAdmin::NewStub(ch.channel);
    ch.put_method = std::make_unique<grpc::internal::RpcMethod>(
        kPutMethod, grpc::internal::RpcMethod::CLIENT_STREAMING, ch.channel);
    ch.get_method = std::make_unique<grpc::internal::RpcMethod>(
        kGetMethod, grpc::internal::RpcMethod::SERVER_STREAMING, ch.channel);
    impl->channels.push_back(std::move(ch));
  }
  std::unique_ptr<Client> client(new Client(std::move(impl)));
  Impl& im = *client->impl_;
  if (im.options.namespace_spec.has_value()) {
    v1::RegisterNamespaceRequest req;
    *req.mutable_spec() = *im.options.namespace_spec;
    req.set_hash_scheme(im.options.hash_scheme);
    v1::RegisterNamespaceResponse resp;
    RETURN_IF_ERROR(im.Call(
        "RegisterNamespace", im.options.connect_deadline_ms, true,
        [&](grpc::ClientContext* ctx, Channel& ch) {
          return ch.data->RegisterNamespace(ctx, req, &resp);
        },
        /*wait_for_ready=*/true));
    im.info.node_id = resp.node_id();
    im.info.server_hash_scheme = resp.hash_scheme();
    im.info.namespace_created = resp.created();
    im.info.stored_spec = resp.spec();
    if (!resp.hash_scheme().empty() && resp.hash_scheme() != im.options.hash_scheme) {
      return absl::FailedPreconditionError(
          absl::StrCat("hash_scheme mismatch: client uses '", im.options.hash_scheme, "', server '",
                       im.options.server, "' uses '", resp.hash_scheme(), "'"));
    }
    if (resp.has_spec()) {
      RETURN_IF_ERROR(CheckSpecMatches(*im.options.namespace_spec, resp.spec()));
      im.RememberLayout(resp.spec());
    }
    im.OpenSharedMemory(resp.shared_memory());
  } else {
    v1::StatsRequest req;
    v1::StatsResponse resp;
    RETURN_IF_ERROR(im.Call(
        "Stats", im.options.connect_deadline_ms, true,
        [&](grpc::ClientContext* ctx, Channel& ch) { return ch.admin->Stats(ctx, req, &resp); },
        /*wait_for_ready=*/true));
    im.info.node_id = resp.node_id();
    im.info.server_hash_scheme = resp.hash_scheme();
    if (!resp.hash_scheme().empty() && resp.hash_scheme() != im.options.hash_scheme) {
      return absl::FailedPreconditionError(
          absl::StrCat("hash_scheme mismatch: client uses '", im.options.hash_scheme, "', server '",
                       im.options.server, "' uses '", resp.hash_scheme(), "'"));
    }
    im.OpenSharedMemory(resp.shared_memory());
  }
  return client;
}

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

const ClientOptions& Client::options() const { return impl_->options; }
const ConnectInfo& Client::connect_info() const { return impl_->info; }

bool Client::uses_shared_memory() const { return impl_->Region() != nullptr; }

absl::StatusOr<SharedBuffer> Client::AllocateSharedBuffer(uint64_t bytes) {
  std::shared_ptr<SharedRegion> r = impl_->Region();
  if (r == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "AllocateSharedBuffer: no shared-memory path to the server",
        impl_->info.shared_memory_error.empty() ? "" : ": ", impl_->info.shared_memory_error));
  }
  if (bytes == 0) return absl::InvalidArgumentError("AllocateSharedBuffer: bytes is 0");
  std::optional<uint64_t> at = r->Allocate(bytes);
  if (!at) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "AllocateSharedBuffer: no free range of ", bytes, " bytes in the ", r->size(),
        "-byte shared region (ClientOptions::shared_memory_bytes)"));
  }
  SharedBuffer b;
  b.region_ = std::move(r);
  b.offset_ = *at;
  b.data_ = b.region_->base() + *at;
  b.size_ = bytes;
  return b;
}

SharedBuffer::~SharedBuffer() {
  if (region_ != nullptr) region_->Free(offset_);
}

SharedBuffer::SharedBuffer(SharedBuffer&& other) noexcept
    : region_(std::move(other.region_)),
      offset_(other.offset_),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

SharedBuffer& SharedBuffer::operator=(SharedBuffer&& other) noexcept {
  if (this != &other) {
    if (region_ != nullptr) region_->Free(offset_);
    region_ = std::move(other.region_);
    offset_ = other.offset_;
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

absl::StatusOr<v1::RegisterNamespaceResponse> Client::RegisterNamespace(
    const v1::NamespaceSpec& spec, const CallOptions& call) {
  v1::RegisterNamespaceRequest req;
  *req.mutable_spec() = spec;
  req.set_hash_scheme(impl_->options.hash_scheme);
  v1::RegisterNamespaceResponse resp;
  RETURN_IF_ERROR(impl_->Unary("RegisterNamespace", call, true,
                               &v1::KvCache::Stub::RegisterNamespace, req, &resp));
  if (!resp.hash_scheme().empty() && resp.hash_scheme() != impl_->options.hash_scheme) {
    return absl::FailedPreconditionError(absl::StrCat("hash_scheme mismatch: client uses '",
                                                      impl_->options.hash_scheme,
                                                      "', server uses '", resp.hash_scheme(), "'"));
  }
  if (resp.has_spec()) {
    RETURN_IF_ERROR(CheckSpecMatches(spec, resp.spec()));
    impl_->RememberLayout(resp.spec());
  }
  return resp;
}

absl::StatusOr<PutResult> Client::PutBlocks(std::string_view ns, std::span<const PutBlock> blocks,
                                            const PutOptions& options) {
  PutResult total;
  if (blocks.empty()) return total;
  const auto deadline = DeadlineAfter(impl_->DeadlineMs(options.deadline_ms));
  const auto ranges = SplitRanges(blocks.size(), impl_->options.max_streams_per_call);
  std::vector<PutResult> parts(ranges.size());
  RETURN_IF_ERROR(RunParallel(ranges.size(), [&](size_t r) {
    const auto [begin, end] = ranges[r];
    return impl_->PutRun(ns, blocks.subspan(begin, end - begin), options.format, deadline,
                         &parts[r]);
  }));
  for (const auto& p : parts) {
    total.blocks_stored += p.blocks_stored;
    total.bytes_stored += p.bytes_stored;
  }
  return total;
}

absl::StatusOr<std::vector<v1::GetBlockInfo>> Client::GetBlocksInto(
    std::string_view ns, std::span<const std::string> keys,
    std::span<const std::span<uint8_t>> buffers, const GetOptions& options) {
  if (buffers.size() != keys.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("buffers: ", buffers.size(), " buffers for ", keys.size(), " keys"));
  }
  std::vector<v1::GetBlockInfo> infos;
  RETURN_IF_ERROR(impl_->GetParallel(
      ns, keys, options,
      [&](size_t base) -> GetStreamParser::DestinationFn {
        return [&, base](size_t i,
                         const v1::GetBlockInfo& info) -> absl::StatusOr<std::span<uint8_t>> {
          std::span<uint8_t> buf = buffers[base + i];
          if (buf.size() < info.size()) {
            return absl::OutOfRangeError(absl::StrCat("buffers[", base + i, "] holds ",
                                                      buf.size(), " bytes, block needs ",
                                                      info.size()));
          }
          return buf;
        };
      },
      buffers, &infos));
  return infos;
}

absl::StatusOr<std::vector<FetchedBlock>> Client::GetBlocks(std::string_view ns,
                                                            std::span<const std::string> keys,
                                                            const GetOptions& options) {
  std::vector<FetchedBlock> out(keys.size());
  std::vector<v1::GetBlockInfo> infos;
  RETURN_IF_ERROR(impl_->GetParallel(
      ns, keys, options,
      [&](size_t base) -> GetStreamParser::DestinationFn {
        return [&, base](size_t i,
                         const v1::GetBlockInfo& info) -> absl::StatusOr<std::span<uint8_t>> {
          std::string& data = out[base + i].data;
          data.resize(info.size());
          return std::span<uint8_t>(reinterpret_cast<uint8_t*>(data.data()), data.size());
        };
      },
      /*buffers=*/{}, &infos));
  for (size_t i = 0; i < infos.size(); ++i) {
    if (!infos[i].found()) out[i].data.clear();
    out[i].info = std::move(infos[i]);
  }
  return out;
}

absl::StatusOr<v1::LookupResponse> Client::Lookup(std::string_view ns,
                                                  std::span<const std::string> keys,
                                                  bool local_only, const CallOptions& call) {
  auto req = KeyedRequest<v1::LookupRequest>(ns, keys);
  req.set_local_only(local_only);
  v1::LookupResponse resp;
  RETURN_IF_ERROR(impl_->Unary("Lookup", call, true, &v1::KvCache::Stub::Lookup, req, &resp));
  return resp;
}

absl::StatusOr<uint64_t> Client::Pin(std::string_view ns, std::span<const std::string> keys,
                                     uint64_t ttl_ms, const CallOptions& call) {
  auto req = KeyedRequest<v1::PinRequest>(ns, keys);
  req.set_ttl_ms(ttl_ms);
  v1::PinResponse resp;
  RETURN_IF_ERROR(impl_->Unary("Pin", call, true, &v1::KvCache::Stub::Pin, req, &resp));
  return resp.blocks();
}

absl::StatusOr<uint64_t> Client::Unpin(std::string_view ns, std::span<const std::string> keys,
                                       const CallOptions& call) {
  v1::UnpinResponse resp;
  RETURN_IF_ERROR(impl_->Unary("Unpin", call, true, &v1::KvCache::Stub::Unpin,
                               KeyedRequest<v1::UnpinRequest>(ns, keys), &resp));
  return resp.blocks();
}

absl::Status Client::ReportScores(std::string_view ns, std::span<const std::string> keys,
                                  std::span<const float> scores, const CallOptions& call) {
  if (keys.size() != scores.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("scores: ", scores.size(), " scores for ", keys.size(), " keys"));
  }
  auto req = KeyedRequest<v1::ReportScoresRequest>(ns, keys);
  for (float s : scores) req.add_scores(s);
  v1::ReportScoresResponse resp;
  // Not retried: scores accumulate on the server.
  return impl_->Unary("ReportScores", call, false, &v1::KvCache::Stub::ReportScores, req, &resp);
}

absl::StatusOr<v1::CompactResponse> Client::Compact(const v1::CompactRequest& request,
                                                    const CallOptions& call) {
  v1::CompactResponse resp;
  RETURN_IF_ERROR(
      impl_->Unary("Compact", call, false, &v1::KvCache::Stub::Compact, request, &resp));
  return resp;
}

absl::StatusOr<uint64_t> Client::Delete(std::string_view ns, std::span<const std::string> keys,
                                        const CallOptions& call) {
  v1::DeleteResponse resp;
  RETURN_IF_ERROR(impl_->Unary("Delete", call, true, &v1::KvCache::Stub::Delete,
                               KeyedRequest<v1::DeleteRequest>(ns, keys), &resp));
  return resp.blocks();
}

absl::StatusOr<v1::StatsResponse> Client::Stats(std::string_view ns, const CallOptions& call) {
  v1::StatsRequest req;
  req.set_namespace_(std::string(ns));
  v1::StatsResponse resp;
  RETURN_IF_ERROR(impl_->Unary("Stats", call, true, &v1::KvCacheAdmin::Stub::Stats, req, &resp));
  return resp;
}

absl::StatusOr<v1::ListNamespacesResponse> Client::ListNamespaces(const CallOptions& call) {
  v1::ListNamespacesResponse resp;
  RETURN_IF_ERROR(impl_->Unary("ListNamespaces", call, true,
                               &v1::KvCacheAdmin::Stub::ListNamespaces, v1::ListNamespacesRequest(),
                               &resp));
  return resp;
}

absl::StatusOr<uint64_t> Client::Evict(std::string_view ns, std::span<const std::string> keys,
                                       bool drop, const CallOptions& call) {
  auto req = KeyedRequest<v1::EvictRequest>(ns, keys);
  req.set_drop(drop);
  v1::EvictResponse resp;
  RETURN_IF_ERROR(impl_->Unary("Evict", call, true, &v1::KvCacheAdmin::Stub::Evict, req, &resp));
  return resp.blocks();
}

absl::Status Client::Flush(std::string_view ns, const CallOptions& call) {
  v1::FlushRequest req;
  req.set_namespace_(std::string(ns));
  v1::FlushResponse resp;
  return impl_->Unary("Flush", call, true, &v1::KvCacheAdmin::Stub::Flush, req, &resp);
}

absl::StatusOr<v1::ClusterStatusResponse> Client::ClusterStatus(const CallOptions& call) {
  v1::ClusterStatusResponse resp;
  RETURN_IF_ERROR(impl_->Unary("ClusterStatus", call, true, &v1::KvCacheAdmin::Stub::ClusterStatus,
                               v1::ClusterStatusRequest(), &resp));
  return resp;
}

}  // namespace kvtier::client
