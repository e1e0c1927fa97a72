#include "client/client.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/client_impl.h"
#include "client/prefix_keys.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "protocol/convert.h"
#include "protocol/lookup_form.h"
#include "protocol/shm_wire.h"
#include "protocol/tls.h"

namespace kvtier::client {
namespace {
namespace v1 = ::kvtier::v1;
using internal::Channel;
using internal::DeadlineAfter;
using internal::FromGrpc;
using internal::kGetMethod;
using internal::kLookupMethod;
using internal::kPutMethod;
using internal::RunParallel;
using internal::SplitRanges;
using protocol::CheckSpecMatches;
using protocol::GetStreamParser;
}  // namespace

// A request naming a namespace and its keys (Lookup, Pin, Unpin, ReportScores, Delete,
// Evict all carry these two fields).
template <typename Request>
Request KeyedRequest(std::string_view ns, std::span<const std::string> keys) {
  Request req;
  req.set_namespace_(std::string(ns));
  for (const auto& k : keys) req.add_keys(k);
  return req;
}

namespace {

// Insecure, or TLS from the options' files (checked first: INVALID_ARGUMENT naming the
// option).
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ClientCredentials(
    const ClientOptions& o) {
  const bool tls = o.tls || !o.tls_ca_file.empty() || !o.tls_cert_file.empty() ||
                   !o.tls_key_file.empty() || !o.tls_server_name.empty();
  if (!tls) return grpc::InsecureChannelCredentials();
  const protocol::TlsFiles files{
      .cert_file = o.tls_cert_file, .key_file = o.tls_key_file, .ca_file = o.tls_ca_file};
  RETURN_IF_ERROR(protocol::CheckTlsFiles(files, "options.tls"));
  return protocol::ChannelTlsCredentials(files);
}

// GetBlocksInto's destinations: block i of a stream starting at key `base` goes to
// buffers[base + i]; OUT_OF_RANGE when it does not fit.
GetStreamParser::DestinationFn BufferDestination(std::span<const std::span<uint8_t>> buffers,
                                                 size_t base) {
  return [buffers, base](size_t i,
                         const v1::GetBlockInfo& info) -> absl::StatusOr<std::span<uint8_t>> {
    std::span<uint8_t> buf = buffers[base + i];
    if (buf.size() < info.size()) {
      return absl::OutOfRangeError(absl::StrCat("buffers[", base + i, "] holds ", buf.size(),
                                                " bytes, block needs ", info.size()));
    }
    return buf;
  };
}

// A Lookup's answer as the caller asked for it: checked, and expanded to the verbose
// form unless `keep_compact`. DATA_LOSS when it is malformed.
absl::StatusOr<v1::LookupResponse> CheckedLookup(v1::LookupResponse resp, bool keep_compact) {
  absl::Status s = keep_compact ? protocol::CheckLookup(resp) : protocol::ExpandLookup(&resp);
  if (!s.ok()) return absl::DataLossError(absl::StrCat("Lookup: ", s.message()));
  return resp;
}

}  // namespace

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
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> credentials,
                   ClientCredentials(options));
  for (int i = 0; i < options.num_channels; ++i) {
    grpc::ChannelArguments args;
    if (!options.tls_server_name.empty()) args.SetSslTargetNameOverride(options.tls_server_name);
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
    ch.channel = grpc::CreateCustomChannel(options.server, credentials, args);
    ch.data = v1::KvCache::NewStub(ch.channel);
    ch.admin = v1::KvCacheAdmin::NewStub(ch.channel);
    ch.put_method = std::make_unique<grpc::internal::RpcMethod>(
        kPutMethod, grpc::internal::RpcMethod::CLIENT_STREAMING, ch.channel);
    ch.put_one_method = std::make_unique<grpc::internal::RpcMethod>(
        kPutMethod, grpc::internal::RpcMethod::NORMAL_RPC, ch.channel);
    ch.get_method = std::make_unique<grpc::internal::RpcMethod>(
        kGetMethod, grpc::internal::RpcMethod::SERVER_STREAMING, ch.channel);
    ch.lookup_method = std::make_unique<grpc::internal::RpcMethod>(
        kLookupMethod, grpc::internal::RpcMethod::NORMAL_RPC, ch.channel);
    impl->channels.push_back(std::move(ch));
  }
  if (options.coalesce_max_delay_us > 0 && options.coalesce_max_bytes > 0) {
    Impl* raw = impl.get();  // the coalescers are members of *raw
    auto make = [&](uint64_t max_bytes) {
      return std::make_unique<internal::Coalescer>(
          options.coalesce_max_delay_us, max_bytes,
          [raw](std::string_view ns, std::span<const PutBlock> blocks, v1::PayloadFormat format,
                internal::Coalescer::Deadline deadline,
                PutResult* result) { return raw->PutRun(ns, blocks, format, deadline, result); },
          [raw](std::string_view ns, std::span<const std::string> keys, v1::PayloadFormat format,
                internal::Coalescer::Deadline deadline, std::span<const std::span<uint8_t>> buffers,
                std::vector<v1::GetBlockInfo>* infos) {
            GetOptions opts;
            opts.format = format;
            return raw->GetRun(ns, keys, opts, deadline, BufferDestination(buffers, 0), buffers,
                               infos);
          });
    };
    impl->coalescer = make(options.coalesce_max_bytes);
    if (options.ucx && options.ucx_coalesce_max_bytes > 0) {
      impl->ucx_coalescer = make(options.ucx_coalesce_max_bytes);
    }
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
    im.OpenUcx(resp.ucx());
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
    im.OpenUcx(resp.ucx());
  }
  return client;
}

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

const ClientOptions& Client::options() const { return impl_->options; }
const ConnectInfo& Client::connect_info() const { return impl_->info; }

bool Client::uses_shared_memory() const { return impl_->Region() != nullptr; }

uint64_t Client::shared_memory_socket_calls() const { return impl_->socket_calls.load(); }
uint64_t Client::ucx_calls() const { return impl_->ucx_calls.load(); }

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
    return absl::ResourceExhaustedError(
        absl::StrCat("AllocateSharedBuffer: no free range of ", bytes, " bytes in the ", r->size(),
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
  uint64_t bytes = 0;
  for (const PutBlock& b : blocks) bytes += b.payload.size();
  if (internal::Coalescer* c = impl_->CoalescerFor(bytes, /*put=*/true)) {
    return c->Put(ns, blocks, options.format, deadline);
  }
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
    total.block_bytes_stored.insert(total.block_bytes_stored.end(), p.block_bytes_stored.begin(),
                                    p.block_bytes_stored.end());
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
  if (options.lease_id == 0) {
    uint64_t bytes = 0;
    for (const auto& b : buffers) bytes += b.size();
    if (internal::Coalescer* c = impl_->CoalescerFor(bytes, /*put=*/false)) {
      return c->GetInto(ns, keys, buffers, options.format,
                        DeadlineAfter(impl_->DeadlineMs(options.deadline_ms)));
    }
  }
  std::vector<v1::GetBlockInfo> infos;
  RETURN_IF_ERROR(impl_->GetParallel(
      ns, keys, options,
      [&](size_t base) -> GetStreamParser::DestinationFn {
        return BufferDestination(buffers, base);
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
  LookupOptions options;
  options.local_only = local_only;
  return Lookup(ns, keys, options, call);
}

absl::StatusOr<v1::LookupResponse> Client::Lookup(std::string_view ns,
                                                  std::span<const std::string> keys,
                                                  const LookupOptions& options,
                                                  const CallOptions& call) {
  // Encoded straight from `keys` (no per-key copy); servers that predate the compact
  // form ignore it and answer verbosely.
  return LookupEncoded(protocol::EncodeLookupRequest(ns, keys, options.local_only,
                                                     options.lease_ms, /*compact=*/true,
                                                     options.prefetch),
                       options, call);
}

absl::StatusOr<v1::LookupResponse> Client::Lookup(std::string_view ns,
                                                  std::span<const std::string_view> keys,
                                                  const LookupOptions& options,
                                                  const CallOptions& call) {
  std::vector<size_t> which(keys.size());
  for (size_t i = 0; i < which.size(); ++i) which[i] = i;
  return LookupEncoded(protocol::EncodeLookupRequest(ns, keys, which, options.local_only,
                                                     options.lease_ms, /*compact=*/true,
                                                     options.prefetch),
                       options, call);
}

absl::StatusOr<v1::LookupResponse> Client::LookupEncoded(const std::string& request,
                                                         const LookupOptions& options,
                                                         const CallOptions& call) {
  grpc::Slice body(request);
  v1::LookupResponse resp;
  if (std::shared_ptr<SharedRegion> r = impl_->socket_lookup ? impl_->Region() : nullptr) {
    // Same host: a frame on the region's socket, no gRPC hops (docs/performance.md).
    const std::string frame = protocol::shm::JoinSessionAndRequest(
        r->session(), std::string_view(reinterpret_cast<const char*>(body.begin()), body.size()));
    if (frame.size() + sizeof(protocol::shm::FrameHeader) <= protocol::shm::kMaxFrameBytes) {
      absl::Status status;
      if (impl_->SocketCall(*r, protocol::shm::FrameOp::kLookup, frame,
                            internal::DeadlineAfter(impl_->DeadlineMs(call.deadline_ms)), "Lookup",
                            &resp, &status)) {
        RETURN_IF_ERROR(status);
        return CheckedLookup(std::move(resp), options.keep_compact);
      }
      impl_->socket_lookup = false;
    }
  }
  const grpc::ByteBuffer req(&body, 1);
  RETURN_IF_ERROR(impl_->Call("Lookup", impl_->DeadlineMs(call.deadline_ms), true,
                              [&](grpc::ClientContext* ctx, Channel& ch) {
                                return grpc::internal::BlockingUnaryCall(
                                    ch.channel.get(), *ch.lookup_method, ctx, req, &resp);
                              }));
  return CheckedLookup(std::move(resp), options.keep_compact);
}

void Client::LookupAsync(std::string_view ns, std::span<const std::string_view> keys,
                         std::span<const size_t> which, const LookupOptions& options,
                         const CallOptions& call,
                         std::function<void(absl::StatusOr<v1::LookupResponse>)> done) {
  // Owned by the completion callback.
  struct Pending {
    grpc::ClientContext ctx;
    grpc::ByteBuffer request;
    v1::LookupResponse response;
  };
  auto* p = new Pending;
  grpc::Slice body(protocol::EncodeLookupRequest(ns, keys, which, options.local_only,
                                                 options.lease_ms, /*compact=*/true,
                                                 options.prefetch));
  p->request = grpc::ByteBuffer(&body, 1);
  p->ctx.set_deadline(internal::DeadlineAfter(impl_->DeadlineMs(call.deadline_ms)));
  impl_->Authorize(&p->ctx);
  Channel& ch = impl_->PickChannel();
  grpc::internal::CallbackUnaryCall<grpc::ByteBuffer, v1::LookupResponse, grpc::ByteBuffer,
                                    grpc::protobuf::MessageLite>(
      ch.channel.get(), *ch.lookup_method, &p->ctx, &p->request, &p->response,
      [p, keep_compact = options.keep_compact, done = std::move(done)](grpc::Status status) {
        std::unique_ptr<Pending> owned(p);
        const absl::Status s = internal::FromGrpc("Lookup", status);
        done(s.ok() ? CheckedLookup(std::move(p->response), keep_compact) : s);
      });
}

absl::StatusOr<uint64_t> Client::ReleaseLease(std::string_view ns, uint64_t lease_id,
                                              const CallOptions& call) {
  v1::ReleaseLeaseRequest req;
  req.set_namespace_(std::string(ns));
  req.set_lease_id(lease_id);
  v1::ReleaseLeaseResponse resp;
  RETURN_IF_ERROR(
      impl_->Unary("ReleaseLease", call, true, &v1::KvCache::Stub::ReleaseLease, req, &resp));
  return resp.blocks();
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

absl::StatusOr<std::string> Client::UnaryRaw(std::string_view method, std::string_view request,
                                             bool idempotent, bool wait_for_ready,
                                             const CallOptions& call) {
  constexpr std::string_view kServices[] = {"/kvtier.v1.KvCache/", "/kvtier.v1.KvCacheAdmin/"};
  std::string_view rpc;
  for (std::string_view service : kServices) {
    if (method.size() > service.size() && method.substr(0, service.size()) == service &&
        method.find('/', service.size()) == std::string_view::npos) {
      rpc = method.substr(service.size());
    }
  }
  if (rpc.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "method \"", Sv(method), "\" is not a method of kvtier.v1.KvCache or KvCacheAdmin"));
  }
  const std::string name(method);  // RpcMethod keeps the pointer for the call
  const std::string rpc_name(rpc);
  const grpc::internal::RpcMethod rpc_method(name.c_str(), grpc::internal::RpcMethod::NORMAL_RPC);
  grpc::Slice slice(request.data(), request.size());
  const grpc::ByteBuffer req(&slice, 1);
  grpc::ByteBuffer resp;
  RETURN_IF_ERROR(impl_->Call(
      rpc_name.c_str(), impl_->DeadlineMs(call.deadline_ms), idempotent,
      [&](grpc::ClientContext* ctx, Channel& ch) {
        resp.Clear();
        return grpc::internal::BlockingUnaryCall(ch.channel.get(), rpc_method, ctx, req, &resp);
      },
      wait_for_ready));
  if (resp.Length() == 0) return std::string();  // an empty message
  grpc::Slice flat;
  if (!resp.TrySingleSlice(&flat).ok() && !resp.DumpToSingleSlice(&flat).ok()) {
    return absl::InternalError(absl::StrCat(rpc_name, ": cannot read the response"));
  }
  return std::string(reinterpret_cast<const char*>(flat.begin()), flat.size());
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

absl::StatusOr<v1::FlushResponse> Client::FlushStep(std::string_view ns, uint32_t max_ms,
                                                    const CallOptions& call) {
  v1::FlushRequest req;
  req.set_namespace_(std::string(ns));
  req.set_max_ms(max_ms);
  v1::FlushResponse resp;
  RETURN_IF_ERROR(impl_->Unary("Flush", call, true, &v1::KvCacheAdmin::Stub::Flush, req, &resp));
  return resp;
}

absl::Status Client::Flush(std::string_view ns, const CallOptions& call) {
  while (true) {
    ASSIGN_OR_RETURN(v1::FlushResponse resp, FlushStep(ns, 0, call));
    if (resp.done()) return absl::OkStatus();
    if (resp.flushed_blocks() == 0) {
      return absl::DeadlineExceededError(absl::StrCat(
          "flush: no block written within the call deadline; ", resp.remaining_blocks(),
          " blocks remain"));
    }
  }
}

absl::StatusOr<uint64_t> Client::DropNamespace(std::string_view ns, bool force,
                                               const CallOptions& call) {
  v1::DropNamespaceRequest req;
  req.set_namespace_(std::string(ns));
  req.set_force(force);
  v1::DropNamespaceResponse resp;
  RETURN_IF_ERROR(impl_->Unary("DropNamespace", call, false,
                               &v1::KvCacheAdmin::Stub::DropNamespace, req, &resp));
  return resp.blocks();
}

absl::StatusOr<v1::RecoverResponse> Client::Recover(bool verify, const CallOptions& call) {
  v1::RecoverRequest req;
  req.set_mode(verify ? v1::RecoverRequest::VERIFY : v1::RecoverRequest::REBUILD);
  v1::RecoverResponse resp;
  RETURN_IF_ERROR(
      impl_->Unary("Recover", call, false, &v1::KvCacheAdmin::Stub::Recover, req, &resp));
  return resp;
}

absl::StatusOr<v1::ClusterStatusResponse> Client::ClusterStatus(const CallOptions& call) {
  v1::ClusterStatusResponse resp;
  RETURN_IF_ERROR(impl_->Unary("ClusterStatus", call, true, &v1::KvCacheAdmin::Stub::ClusterStatus,
                               v1::ClusterStatusRequest(), &resp));
  return resp;
}

}  // namespace kvtier::client
