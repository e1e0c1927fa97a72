#include "service/kv_cache_service.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "service/config.h"
#include "storage/kv/codec.h"

#if __has_include("service/compact.h")
#include "service/compact.h"
#define KVTIER_HAVE_COMPACT 1
#endif

namespace kvtier::service {
namespace {

using google::protobuf::RepeatedPtrField;

int64_t NowMicros() { return common::RealClock()->NowMicros(); }

const grpc::Status& UnavailableStatus() {
  static const grpc::Status* s =
      new grpc::Status(grpc::StatusCode::UNAVAILABLE, "store is not open yet");
  return *s;
}

grpc::Status DrainingStatus() {
  return grpc::Status(grpc::StatusCode::UNAVAILABLE, "server is shutting down");
}

// Counts the call in ServiceContext::in_flight from construction to OnDone, identifies
// the caller (Authenticator) and returns the status to refuse the call with (OK:
// admitted).
grpc::Status Admit(ServiceContext* ctx, grpc::CallbackServerContext* context,
                   storage::TieredStore** store, Caller* caller) {
  ctx->in_flight.fetch_add(1);
  if (ctx->draining.load()) return DrainingStatus();
  *store = ctx->store.load(std::memory_order_acquire);
  if (*store == nullptr) return UnavailableStatus();
  absl::StatusOr<Caller> who = ctx->auth.Authenticate(context->client_metadata());
  if (!who.ok()) return ToGrpcStatus(who.status());
  *caller = *std::move(who);
  return grpc::Status::OK;
}

// Calls work(store, caller), or work(store) for work that does not look at the caller.
template <typename Work, typename... Rest>
auto InvokeWork(Work& work, storage::TieredStore& store, const Caller& caller, Rest&&... rest) {
  if constexpr (std::is_invocable_v<Work&, storage::TieredStore&, const Caller&, Rest...>) {
    return work(store, caller, std::forward<Rest>(rest)...);
  } else {
    return work(store, std::forward<Rest>(rest)...);
  }
}

// A unary reactor that keeps ServiceContext::in_flight accurate.
class UnaryReactor final : public grpc::ServerUnaryReactor {
 public:
  explicit UnaryReactor(ServiceContext* ctx) : ctx_(ctx) {}
  void OnDone() override {
    ctx_->in_flight.fetch_sub(1);
    delete this;
  }

 private:
  ServiceContext* const ctx_;
};

grpc::Status BusyStatus() {
  return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "server busy: executor queue is full");
}

std::string KeyForMessage(std::string_view key) {
  return absl::BytesToHexString(Sv(key.substr(0, 32)));
}

absl::Status CheckKey(std::string_view key, std::string_view field) {
  if (key.empty() || key.size() > kMaxKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(Sv(field), " must be 1..", kMaxKeyBytes, " bytes, got ", key.size()));
  }
  return absl::OkStatus();
}

// Checks count and lengths of a request's keys and copies them into a vector.
absl::StatusOr<std::vector<std::string>> CheckKeys(const RepeatedPtrField<std::string>& keys,
                                                   const ServiceContext& ctx, bool allow_empty) {
  if (keys.empty() && !allow_empty) return absl::InvalidArgumentError("keys is empty");
  if (static_cast<uint64_t>(keys.size()) > ctx.max_keys_per_request) {
    return absl::InvalidArgumentError(absl::StrCat("keys: ", keys.size(),
                                                   " keys exceed max_keys_per_request (",
                                                   ctx.max_keys_per_request, ")"));
  }
  for (int i = 0; i < keys.size(); ++i) {
    RETURN_IF_ERROR(CheckKey(keys[i], absl::StrCat("keys[", i, "]")));
  }
  return std::vector<std::string>(keys.begin(), keys.end());
}

// The namespace `name` if it exists and `caller` may use it (NOT_FOUND /
// PERMISSION_DENIED otherwise).
absl::StatusOr<storage::NamespaceOptions> FindNamespace(ServiceContext& ctx,
                                                        storage::TieredStore& store,
                                                        const std::string& name,
                                                        const Caller& caller) {
  if (name.empty()) return absl::InvalidArgumentError("namespace is empty");
  if (auto cached = ctx.namespaces.Find(name)) {
    RETURN_IF_ERROR(CheckNamespaceAccess(caller, name, cached->tenant));
    return *cached;
  }
  auto ns = store.GetNamespace(name);
  if (!ns.ok() && absl::IsNotFound(ns.status())) {
    return absl::NotFoundError(absl::StrCat("namespace \"", name, "\" is not registered"));
  }
  if (!ns.ok()) return ns;
  ctx.namespaces.Insert(*ns);
  RETURN_IF_ERROR(CheckNamespaceAccess(caller, name, ns->tenant));
  return ns;
}

// The region of a shared-memory session named in request field `field`.
// FAILED_PRECONDITION when the server has no such session (the client then falls back to
// sending payloads in the stream: client/client.cc keys on "shm_session").
absl::StatusOr<std::shared_ptr<ShmRegion>> FindShmSession(const ServiceContext& ctx,
                                                          const std::string& session,
                                                          std::string_view field) {
  std::shared_ptr<ShmRegion> region = ctx.shm == nullptr ? nullptr : ctx.shm->Find(session);
  if (region == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        Sv(field), " names no open shared-memory session of this server (closed, or the "
        "server restarted): reconnect, or send the payloads in the stream"));
  }
  return region;
}

// Returns FAILED_PRECONDITION naming the first field of `got` that differs from `want`.
absl::Status CompareLayouts(const kv::Layout& want, const kv::Layout& got, std::string_view field,
                            bool check_tokens) {
  auto differ = [&](const char* name, uint64_t w, uint64_t g) {
    return absl::FailedPreconditionError(
        absl::StrCat(Sv(field), ".", name, " is ", g, " but namespace layout has ", w));
  };
  if (want.num_layers != got.num_layers) {
    return differ("num_layers", want.num_layers, got.num_layers);
  }
  if (want.num_kv_heads != got.num_kv_heads) {
    return differ("num_kv_heads", want.num_kv_heads, got.num_kv_heads);
  }
  if (want.head_dim != got.head_dim) return differ("head_dim", want.head_dim, got.head_dim);
  if (want.dtype != got.dtype) {
    return absl::FailedPreconditionError(
        absl::StrCat(Sv(field), ".dtype is ", kv::DtypeName(got.dtype),
                     " but namespace layout has ", kv::DtypeName(want.dtype)));
  }
  if (check_tokens) {
    if (want.tokens_per_block != got.tokens_per_block) {
      return differ("tokens_per_block", want.tokens_per_block, got.tokens_per_block);
    }
    if (want.sink_tokens != got.sink_tokens) {
      return differ("sink_tokens", want.sink_tokens, got.sink_tokens);
    }
  }
  return absl::OkStatus();
}

// Runs `work(store)` on the executor and finishes the call with its status.
template <typename Work>
grpc::ServerUnaryReactor* RunUnary(ServiceContext* ctx, grpc::CallbackServerContext* context, Op op,
                                   Work work) {
  grpc::ServerUnaryReactor* reactor = new UnaryReactor(ctx);
  const int64_t start = NowMicros();
  storage::TieredStore* store = nullptr;
  Caller caller;
  if (grpc::Status admit = Admit(ctx, context, &store, &caller); !admit.ok()) {
    reactor->Finish(admit);
    return reactor;
  }
  const bool queued = ctx->executor->TrySchedule([ctx, reactor, op, start, store, caller, work] {
    absl::Status s = InvokeWork(work, *store, caller);
    ctx->metrics.Record(op, NowMicros() - start, s.ok());
    reactor->Finish(ToGrpcStatus(s));
  });
  if (!queued) {
    ctx->metrics.Record(op, NowMicros() - start, false);
    reactor->Finish(BusyStatus());
  }
  return reactor;
}

// Like RunUnary, but `work(store, finish)` may complete later (after peer calls): it
// must call finish(status) exactly once, from any thread, and never block.
template <typename Work>
grpc::ServerUnaryReactor* RunUnaryAsync(ServiceContext* ctx, grpc::CallbackServerContext* context,
                                        Op op, Work work) {
  grpc::ServerUnaryReactor* reactor = new UnaryReactor(ctx);
  const int64_t start = NowMicros();
  storage::TieredStore* store = nullptr;
  Caller caller;
  if (grpc::Status admit = Admit(ctx, context, &store, &caller); !admit.ok()) {
    reactor->Finish(admit);
    return reactor;
  }
  std::function<void(absl::Status)> finish = [ctx, reactor, op, start](absl::Status s) {
    ctx->metrics.Record(op, NowMicros() - start, s.ok());
    reactor->Finish(ToGrpcStatus(s));
  };
  const bool queued = ctx->executor->TrySchedule(
      [store, caller, work, finish]() mutable { InvokeWork(work, *store, caller, finish); });
  if (!queued) {
    ctx->metrics.Record(op, NowMicros() - start, false);
    reactor->Finish(BusyStatus());
  }
  return reactor;
}

// RunUnary for the calls shaped (namespace, keys) -> a block count: Pin, Unpin, Delete,
// Evict. `op_on_store(store, ns_name, keys)` returns the count.
template <typename Request, typename Response, typename StoreOp>
grpc::ServerUnaryReactor* RunKeyedCount(ServiceContext* ctx, grpc::CallbackServerContext* context,
                                        Op op, const Request* request, Response* response,
                                        bool allow_empty_keys, StoreOp op_on_store) {
  return RunUnary(ctx, context, op,
                  [=](storage::TieredStore& store, const Caller& caller) -> absl::Status {
    ASSIGN_OR_RETURN(storage::NamespaceOptions ns,
                     FindNamespace(*ctx, store, request->namespace_(), caller));
    ASSIGN_OR_RETURN(std::vector<std::string> keys,
                     CheckKeys(request->keys(), *ctx, allow_empty_keys));
    ASSIGN_OR_RETURN(uint64_t n, op_on_store(store, ns.name, keys));
    response->set_blocks(n);
    return absl::OkStatus();
  });
}

// Reads bytes across the slices of one received message.
class SliceCursor {
 public:
  explicit SliceCursor(std::vector<std::span<const uint8_t>> slices) : slices_(std::move(slices)) {
    for (const auto& s : slices_) remaining_ += s.size();
  }
  size_t remaining() const { return remaining_; }

  bool ReadByte(uint8_t* b) {
    if (remaining_ == 0) return false;
    Skip();
    *b = slices_[idx_][off_];
    Advance(1);
    return true;
  }
  bool ReadVarint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b;
      if (!ReadByte(&b)) return false;
      *v |= uint64_t{b & 0x7fu} << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  }
  // Returns the next contiguous piece of at most `max` bytes (empty at the end).
  std::span<const uint8_t> Next(size_t max) {
    if (remaining_ == 0) return {};
    Skip();
    const size_t n = std::min(max, slices_[idx_].size() - off_);
    std::span<const uint8_t> out = slices_[idx_].subspan(off_, n);
    Advance(n);
    return out;
  }

 private:
  void Skip() {
    while (off_ == slices_[idx_].size()) {
      ++idx_;
      off_ = 0;
    }
  }
  void Advance(size_t n) {
    off_ += n;
    remaining_ -= n;
  }
  std::vector<std::span<const uint8_t>> slices_;
  size_t idx_ = 0;
  size_t off_ = 0;
  size_t remaining_ = 0;
};

// The 40-byte codec header of a fp16/bf16 blob holding `raw_bytes` of raw payload for
// `layout` (ENCODED FORMAT in storage/kv/codec.h): what kv::Encode puts in front of the
// unchanged raw bytes for these codecs. REQUIRES: raw_bytes a multiple of BytesPerToken.
std::string RawCodecHeader(kv::CodecId codec, const kv::Layout& layout, uint64_t raw_bytes) {
  std::string h(kv::kEncodedHeaderBytes, '\0');
  char* o = h.data();
  auto put32 = [&o](size_t at, uint32_t v) { std::memcpy(o + at, &v, 4); };
  const uint16_t version = 1;
  const auto tokens = static_cast<uint32_t>(raw_bytes / layout.BytesPerToken());
  const uint64_t body = raw_bytes;
  std::memcpy(o, "KVTB", 4);
  std::memcpy(o + 4, &version, 2);
  o[6] = static_cast<char>(codec);
  o[7] = static_cast<char>(layout.dtype);
  put32(8, layout.num_layers);
  put32(12, layout.num_kv_heads);
  put32(16, layout.head_dim);
  put32(20, tokens);
  put32(24, tokens);
  put32(28, 0);
  std::memcpy(o + 32, &body, 8);
  return h;
}

// Client-streaming Put: header, then payload chunks. One read in flight; header
// validation and the final transcode + store run on the executor.
class PutReactor final : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  PutReactor(ServiceContext* ctx, grpc::CallbackServerContext* context, grpc::ByteBuffer* response)
      : ctx_(ctx), context_(context), response_(response), start_(NowMicros()) {
    if (grpc::Status admit = Admit(ctx_, context, &store_, &caller_); !admit.ok()) {
      Finish(admit);
      return;
    }
    StartRead(&in_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      EndOfStream();
      return;
    }
    if (!have_header_) {
      v1::PutRequest req;
      grpc::Status ps = grpc::SerializationTraits<v1::PutRequest>::Deserialize(&in_, &req);
      if (!ps.ok()) return Fail(absl::InvalidArgumentError("header: cannot parse PutRequest"));
      if (!req.has_header()) {
        return Fail(
            absl::InvalidArgumentError("header: the first message of a Put must carry the header"));
      }
      have_header_ = true;
      header_ = std::move(*req.mutable_header());
      if (auto cached = ctx_->namespaces.Find(header_.namespace_())) {
        // Known namespace: validation is pure CPU on the header, no store call.
        ns_ = *cached;
        absl::Status s = CheckNamespaceAccess(caller_, ns_.name, ns_.tenant);
        if (s.ok()) s = ValidateHeader();
        if (!s.ok()) return Fail(s);
        StartRead(&in_);
        return;
      }
      if (!ctx_->executor->TrySchedule([this] {
            auto ns = FindNamespace(*ctx_, *store_, header_.namespace_(), caller_);
            absl::Status s = ns.status();
            if (s.ok()) {
              ns_ = std::move(*ns);
              s = ValidateHeader();
            }
            if (!s.ok()) return Fail(s);
            StartRead(&in_);
          })) {
        FinishAndRecord(BusyStatus());
      }
      return;
    }
    absl::Status s = ConsumeChunkMessage();
    in_.Clear();
    if (!s.ok()) return Fail(s);
    StartRead(&in_);
  }

  void OnDone() override {
    ctx_->in_flight.fetch_sub(1);
    delete this;
  }

 private:
  struct Block {
    // Payload as received: views into held_ / owned_, no copy. `size` bytes in all.
    std::vector<std::string_view> pieces;
    uint64_t size = 0;
    std::string data;     // the pieces joined, when the payload must be re-encoded
    std::string encoded;  // transcoded blob, or the codec header put in front of raw pieces
  };

  // Checks the header against ns_ and reserves its bytes in the Put budget.
  absl::Status ValidateHeader() {
    if (header_.format() != v1::PAYLOAD_FORMAT_ENCODED &&
        header_.format() != v1::PAYLOAD_FORMAT_RAW) {
      return absl::InvalidArgumentError(
          absl::StrCat("header.format ", static_cast<int>(header_.format()), " is unknown"));
    }
    if (header_.has_layout()) {
      RETURN_IF_ERROR(
          CompareLayouts(ns_.layout, LayoutFromProto(header_.layout()), "header.layout", true));
    }
    const int n = header_.blocks_size();
    if (n == 0) return absl::InvalidArgumentError("header.blocks is empty");
    if (static_cast<uint64_t>(n) > ctx_->max_keys_per_request) {
      return absl::InvalidArgumentError(absl::StrCat("header.blocks: ", n,
                                                     " blocks exceed max_keys_per_request (",
                                                     ctx_->max_keys_per_request, ")"));
    }
    if (!header_.shm_session().empty()) {
      ASSIGN_OR_RETURN(region_,
                       FindShmSession(*ctx_, header_.shm_session(), "header.shm_session"));
    }
    const uint64_t raw_size = ns_.layout.BytesPerBlock();
    // Generous bound for an encoded blob: the raw size plus header and codec metadata.
    const uint64_t max_encoded = raw_size + raw_size / 4 + 4096;
    total_ = 0;
    for (int i = 0; i < n; ++i) {
      const v1::PutBlock& b = header_.blocks(i);
      RETURN_IF_ERROR(CheckKey(b.key(), absl::StrCat("header.blocks[", i, "].key")));
      if (b.parent_key().size() > kMaxKeyBytes) {
        return absl::InvalidArgumentError(absl::StrCat(
            "header.blocks[", i, "].parent_key must be at most ", kMaxKeyBytes, " bytes"));
      }
      if (header_.format() == v1::PAYLOAD_FORMAT_RAW) {
        if (b.size() != raw_size) {
          return absl::InvalidArgumentError(absl::StrCat(
              "header.blocks[", i, "].size is ", b.size(), " but a raw block of layout ",
              ns_.layout.DebugString(), " is ", raw_size, " bytes"));
        }
      } else if (b.size() == 0 || b.size() > max_encoded) {
        return absl::InvalidArgumentError(absl::StrCat("header.blocks[", i, "].size ", b.size(),
                                                       " is not in 1..", max_encoded,
                                                       " for this layout"));
      }
      if (region_ != nullptr && !region_->Contains(b.shm_offset(), b.size())) {
        return absl::InvalidArgumentError(absl::StrCat(
            "header.blocks[", i, "].shm_offset ", b.shm_offset(), " + size ", b.size(),
            " lies outside the shared-memory region of ", region_->size(), " bytes"));
      }
      total_ += b.size();
    }
    if (total_ > ctx_->max_put_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat("header.blocks: ", total_,
                                                       " payload bytes exceed max_put_bytes (",
                                                       ctx_->max_put_bytes, ")"));
    }
    blocks_.resize(n);
    if (region_ != nullptr) {
      // The payloads are in the client's region already: the blocks view it, and the
      // server buffers nothing (no Put budget to reserve).
      for (int i = 0; i < n; ++i) {
        const v1::PutBlock& b = header_.blocks(i);
        blocks_[i].pieces.emplace_back(
            reinterpret_cast<const char*>(region_->base() + b.shm_offset()), b.size());
        blocks_[i].size = b.size();
      }
      received_ = total_;
      return absl::OkStatus();
    }
    // Reserve the stream's buffers against the server-wide budget.
    uint64_t cur = ctx_->put_bytes_in_flight.load();
    do {
      if (cur + total_ > ctx_->put_budget_bytes) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "server busy: ", cur, " payload bytes of other puts are buffered; this put's ", total_,
            " would exceed the budget of ", ctx_->put_budget_bytes));
      }
    } while (!ctx_->put_bytes_in_flight.compare_exchange_weak(cur, cur + total_));
    reserved_ = total_;
    return absl::OkStatus();
  }

  // Adds received payload bytes (which must stay valid: held_ / owned_ keep them) to the
  // current block(s), without copying them.
  absl::Status Feed(std::string_view bytes) {
    while (!bytes.empty()) {
      if (cur_ >= blocks_.size()) {
        return absl::InvalidArgumentError(absl::StrCat("chunk: the stream carries more than the ",
                                                       total_,
                                                       " payload bytes its header declares"));
      }
      const uint64_t want = header_.blocks(static_cast<int>(cur_)).size();
      Block& blk = blocks_[cur_];
      const size_t take = std::min<uint64_t>(bytes.size(), want - blk.size);
      blk.pieces.push_back(bytes.substr(0, take));
      blk.size += take;
      received_ += take;
      bytes.remove_prefix(take);
      if (blk.size == want) ++cur_;
    }
    return absl::OkStatus();
  }

  absl::Status ConsumeChunkMessage() {
    if (region_ != nullptr) {
      return absl::InvalidArgumentError(
          "chunk: a Put with header.shm_session carries its payloads in shared memory, not "
          "in chunk messages");
    }
    std::vector<grpc::Slice> slices;
    if (!in_.Dump(&slices).ok()) return absl::InternalError("chunk: cannot read message");
    // Keep the slices (a reference each, no copy) for the blocks' pieces. A deque never
    // moves its elements, so the bytes of an inlined slice stay where they are too.
    const size_t first = held_.size();
    std::vector<std::span<const uint8_t>> spans;
    spans.reserve(slices.size());
    for (grpc::Slice& s : slices) {
      held_.push_back(std::move(s));
      spans.emplace_back(held_.back().begin(), held_.back().size());
    }
    SliceCursor cur(std::move(spans));
    const size_t total = cur.remaining();
    uint8_t tag = 0;
    uint64_t len = 0;
    if (total > 0 && cur.ReadByte(&tag) && tag == 0x12 && cur.ReadVarint(&len) &&
        len == cur.remaining()) {
      // Fast path: the message is exactly one `chunk` field; its bytes stay in the slices.
      while (cur.remaining() > 0) {
        const std::span<const uint8_t> piece = cur.Next(cur.remaining());
        RETURN_IF_ERROR(
            Feed(std::string_view(reinterpret_cast<const char*>(piece.data()), piece.size())));
      }
      return absl::OkStatus();
    }
    held_.resize(first);
    // Anything else (empty message, header, unusual encodings): parse it properly.
    v1::PutRequest req;
    if (!grpc::SerializationTraits<v1::PutRequest>::Deserialize(&in_, &req).ok()) {
      return absl::InvalidArgumentError("chunk: cannot parse PutRequest");
    }
    if (req.has_header()) {
      return absl::InvalidArgumentError("header: only the first message may carry a header");
    }
    if (req.chunk().empty()) return absl::OkStatus();
    owned_.push_back(std::move(*req.mutable_chunk()));
    return Feed(owned_.back());
  }

  void EndOfStream() {
    if (context_->IsCancelled()) {
      FinishAndRecord(grpc::Status(grpc::StatusCode::CANCELLED, "put cancelled by client"));
      return;
    }
    if (!have_header_) {
      return Fail(absl::InvalidArgumentError("header: the stream ended before the header"));
    }
    if (received_ != total_) {
      const int i = static_cast<int>(std::min<size_t>(cur_, blocks_.size() - 1));
      return Fail(absl::InvalidArgumentError(
          absl::StrCat("chunk: the stream ended after ", received_, " of ", total_,
                       " payload bytes (in header.blocks[", i, "], key ",
                       KeyForMessage(header_.blocks(i).key()), ")")));
    }
    if (!ctx_->executor->TrySchedule([this] {
          absl::Status s = StoreAll();
          if (!s.ok()) return Fail(s);
          FinishAndRecord(grpc::Status::OK);
        })) {
      FinishAndRecord(BusyStatus());
    }
  }

  // Validates (and transcodes) every block, then stores them all.
  absl::Status StoreAll() {
    const int n = header_.blocks_size();
    std::vector<storage::BlockPut> puts(n);
    kv::CodecOptions copts;
    copts.keep_sinks = ns_.keep_sinks;
    uint64_t bytes = 0;
    for (int i = 0; i < n; ++i) {
      const v1::PutBlock& b = header_.blocks(i);
      Block& blk = blocks_[i];
      std::string_view payload;  // contiguous payload; empty: the pieces are stored as is
      const std::string field = absl::StrCat("blocks[", i, "]");
      const bool raw_codec = ns_.codec == kv::CodecId::kFp16 || ns_.codec == kv::CodecId::kBf16;
      if (header_.format() == v1::PAYLOAD_FORMAT_RAW && raw_codec) {
        // fp16/bf16 store the raw bytes unchanged: put the codec header in front of them.
        // (ValidateHeader checked the size; the layout is the registered one.)
        blk.encoded = RawCodecHeader(ns_.codec, ns_.layout, blk.size);
        blk.pieces.insert(blk.pieces.begin(), blk.encoded);
        blk.size += blk.encoded.size();
      } else if (header_.format() == v1::PAYLOAD_FORMAT_RAW) {
        blk.data = storage::JoinPieces(blk.pieces);
        blk.pieces.clear();
        auto enc = kv::Encode(ns_.codec, ns_.layout, b.block_index(), kv::AsBytes(blk.data), copts);
        if (!enc.ok()) {
          return absl::InvalidArgumentError(
              absl::StrCat(field, ": cannot encode: ", enc.status().message()));
        }
        blk.encoded = std::move(*enc);
        blk.data = std::string();
        payload = blk.encoded;
      } else {
        auto info = storage::ParsePiecesHeader(blk.pieces);
        if (!info.ok()) {
          return absl::InvalidArgumentError(absl::StrCat(
              field, ".payload is not a valid encoded block: ", info.status().message()));
        }
        if (info->encoded_bytes != blk.size) {
          return absl::InvalidArgumentError(absl::StrCat(field, ".payload header says ",
                                                         info->encoded_bytes, " bytes but size is ",
                                                         blk.size));
        }
        RETURN_IF_ERROR(CompareLayouts(ns_.layout, info->layout, field + ".payload.layout",
                                       /*check_tokens=*/false));
        if (info->num_tokens > ns_.layout.tokens_per_block) {
          return absl::FailedPreconditionError(absl::StrCat(
              field, ".payload holds ", info->num_tokens,
              " tokens but namespace tokens_per_block is ", ns_.layout.tokens_per_block));
        }
        if (info->codec != ns_.codec) {
          const bool lossless_source =
              info->codec == kv::CodecId::kFp16 || info->codec == kv::CodecId::kBf16;
          if (!lossless_source) {
            return absl::FailedPreconditionError(
                absl::StrCat(field, ".payload codec ", kv::CodecName(info->codec),
                             " does not match namespace codec ", kv::CodecName(ns_.codec)));
          }
          // An unquantized blob for a quantized namespace: transcode it.
          blk.data = storage::JoinPieces(blk.pieces);
          blk.pieces.clear();
          auto raw = kv::DecodeToString(kv::AsBytes(blk.data));
          if (!raw.ok()) {
            return absl::InvalidArgumentError(
                absl::StrCat(field, ".payload cannot be decoded: ", raw.status().message()));
          }
          auto enc = kv::Encode(ns_.codec, ns_.layout, b.block_index(), kv::AsBytes(*raw), copts);
          if (!enc.ok()) {
            return absl::InvalidArgumentError(
                absl::StrCat(field, ": cannot encode: ", enc.status().message()));
          }
          blk.encoded = std::move(*enc);
          blk.data = std::string();
          payload = blk.encoded;
        }
      }
      puts[i].key = b.key();
      puts[i].parent_key = b.parent_key();
      puts[i].block_index = b.block_index();
      if (!payload.empty()) {
        puts[i].payload = payload;
        bytes += payload.size();
      } else {
        puts[i].pieces = blk.pieces;
        bytes += blk.size;
      }
    }
    RETURN_IF_ERROR(store_->Put(ns_.name, puts));
    v1::PutResponse resp;
    resp.set_blocks_stored(static_cast<uint32_t>(n));
    resp.set_bytes_stored(bytes);
    bool own = false;
    if (!grpc::SerializationTraits<v1::PutResponse>::Serialize(resp, response_, &own).ok()) {
      return absl::InternalError("cannot serialize PutResponse");
    }
    ReleaseBuffers();
    return absl::OkStatus();
  }

  void ReleaseBuffers() {
    blocks_.clear();
    held_.clear();
    owned_.clear();
    region_.reset();
  }

  void Fail(const absl::Status& s) { FinishAndRecord(ToGrpcStatus(s)); }

  void FinishAndRecord(const grpc::Status& s) {
    ctx_->metrics.Record(Op::kPut, NowMicros() - start_, s.ok());
    ReleaseBuffers();
    ctx_->put_bytes_in_flight.fetch_sub(reserved_);
    reserved_ = 0;
    Finish(s);
  }

  ServiceContext* const ctx_;
  grpc::CallbackServerContext* const context_;
  grpc::ByteBuffer* const response_;
  const int64_t start_;
  storage::TieredStore* store_ = nullptr;
  Caller caller_;
  grpc::ByteBuffer in_;
  bool have_header_ = false;
  v1::PutHeader header_;
  storage::NamespaceOptions ns_;
  std::vector<Block> blocks_;
  std::deque<grpc::Slice> held_;   // received message slices the blocks' pieces view
  std::deque<std::string> owned_;  // chunks of messages that took the parsing path
  std::shared_ptr<ShmRegion> region_;  // header.shm_session's region: the blocks view it
  size_t cur_ = 0;                 // block receiving bytes
  uint64_t total_ = 0;             // payload bytes declared by the header
  uint64_t received_ = 0;          // payload bytes received
  uint64_t reserved_ = 0;          // bytes held in ServiceContext::put_bytes_in_flight
};

// Deleter for slices that point into memory owned by a shared_ptr.
void ReleaseOwner(void* p) { delete static_cast<std::shared_ptr<const void>*>(p); }

grpc::Slice OwnedSlice(const uint8_t* data, size_t n, const std::shared_ptr<const void>& owner) {
  return grpc::Slice(const_cast<uint8_t*>(data), n, &ReleaseOwner,
                     new std::shared_ptr<const void>(owner));
}

// Server-streaming Get: loads every block on the executor, then writes the header and
// ~chunk_bytes frames whose payload slices reference the blocks' memory.
class GetReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  GetReactor(ServiceContext* ctx, grpc::CallbackServerContext* context,
             const grpc::ByteBuffer* request)
      : ctx_(ctx), context_(context), start_(NowMicros()) {
    if (grpc::Status admit = Admit(ctx_, context, &store_, &caller_); !admit.ok()) {
      Finish(admit);
      return;
    }
    grpc::ByteBuffer copy(*request);  // shares the slices
    if (!grpc::SerializationTraits<v1::GetRequest>::Deserialize(&copy, &req_).ok()) {
      FinishAndRecord(
          grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "request: cannot parse GetRequest"));
      return;
    }
    if (!ctx_->executor->TrySchedule([this] {
          absl::Status s = Load();
          if (!s.ok()) return FinishAndRecord(ToGrpcStatus(s));
          WriteFrame();
        })) {
      FinishAndRecord(BusyStatus());
    }
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      FinishAndRecord(grpc::Status(grpc::StatusCode::CANCELLED, "get: write failed"));
      return;
    }
    NextFrame();
    WriteFrame();
  }

  void OnDone() override {
    ctx_->in_flight.fetch_sub(1);
    delete this;
  }

 private:
  struct Item {
    std::shared_ptr<const void> owner;
    std::span<const uint8_t> bytes;
  };

  absl::Status Load() {
    ASSIGN_OR_RETURN(storage::NamespaceOptions ns,
                     FindNamespace(*ctx_, *store_, req_.namespace_(), caller_));
    if (req_.format() != v1::PAYLOAD_FORMAT_ENCODED && req_.format() != v1::PAYLOAD_FORMAT_RAW) {
      return absl::InvalidArgumentError(
          absl::StrCat("format ", static_cast<int>(req_.format()), " is unknown"));
    }
    ASSIGN_OR_RETURN(std::vector<std::string> keys, CheckKeys(req_.keys(), *ctx_, false));
    std::shared_ptr<ShmRegion> region;
    if (!req_.shm_session().empty()) {
      ASSIGN_OR_RETURN(region, FindShmSession(*ctx_, req_.shm_session(), "shm_session"));
      if (req_.shm_destinations_size() != static_cast<int>(keys.size())) {
        return absl::InvalidArgumentError(absl::StrCat("shm_destinations: ",
                                                       req_.shm_destinations_size(),
                                                       " ranges for ", keys.size(), " keys"));
      }
      for (int i = 0; i < req_.shm_destinations_size(); ++i) {
        const v1::ShmRange& d = req_.shm_destinations(i);
        if (!region->Contains(d.offset(), d.capacity())) {
          return absl::InvalidArgumentError(absl::StrCat(
              "shm_destinations[", i, "] (offset ", d.offset(), ", capacity ", d.capacity(),
              ") lies outside the shared-memory region of ", region->size(), " bytes"));
        }
      }
    }
    const bool raw = req_.format() == v1::PAYLOAD_FORMAT_RAW;
    v1::GetResponse header_msg;
    v1::GetHeader* header = header_msg.mutable_header();
    items_.reserve(keys.size());
    for (const std::string& key : keys) {
      v1::GetBlockInfo* info = header->add_blocks();
      info->set_key(key);
      auto ref = store_->Get(ns.name, key);
      if (!ref.ok()) {
        if (absl::IsNotFound(ref.status())) continue;  // a miss
        return ref.status();
      }
      // A compacted entry wraps its codec blob in a header of kept positions; this
      // fills info.positions (and codec) and returns the blob either way.
      absl::StatusOr<std::span<const uint8_t>> blob = DescribeStoredPayload(ref->payload(), info);
      absl::StatusOr<kv::EncodedInfo> parsed =
          blob.ok() ? kv::ParseHeader(*blob) : absl::StatusOr<kv::EncodedInfo>(blob.status());
      if (!parsed.ok()) {
        info->clear_positions();
        KVTIER_LOG(ERROR) << "namespace " << ns.name << " key " << KeyForMessage(key)
                          << ": stored blob is unreadable: " << parsed.status().message();
        continue;
      }
      Item item;
      const bool raw_codec =
          parsed->codec == kv::CodecId::kFp16 || parsed->codec == kv::CodecId::kBf16;
      if (raw && raw_codec && parsed->encoded_bytes >= parsed->raw_bytes &&
          parsed->encoded_bytes == blob->size()) {
        // fp16/bf16 blobs are the header followed by the raw elements: serve the tail.
        item.owner = ref->owner();
        item.bytes = blob->subspan(parsed->encoded_bytes - parsed->raw_bytes);
      } else if (raw) {
        // Decoded straight into the client's region when the block fits its destination;
        // otherwise into a buffer of our own.
        const v1::ShmRange* dest =
            region != nullptr ? &req_.shm_destinations(header->blocks_size() - 1) : nullptr;
        std::shared_ptr<std::string> decoded;
        std::span<uint8_t> out;
        if (dest != nullptr && parsed->raw_bytes <= dest->capacity()) {
          out = std::span<uint8_t>(region->base() + dest->offset(), parsed->raw_bytes);
        } else {
          decoded = std::make_shared<std::string>(parsed->raw_bytes, '\0');
          out = std::span<uint8_t>(reinterpret_cast<uint8_t*>(decoded->data()), decoded->size());
        }
        absl::Status ds = kv::Decode(*blob, out);
        if (!ds.ok()) {
          KVTIER_LOG(ERROR) << "namespace " << ns.name << " key " << KeyForMessage(key)
                            << ": cannot decode stored blob: " << ds.message();
          info->clear_positions();
          continue;
        }
        item.bytes = out;
        item.owner = std::move(decoded);
      } else {
        item.owner = ref->owner();
        item.bytes = ref->payload();
      }
      info->set_found(true);
      info->set_size(item.bytes.size());
      info->set_tier(TierToProto(ref->tier()));
      info->set_block_index(ref->block_index());
      info->set_codec(CodecToProto(parsed->codec));
      if (region != nullptr) {
        // Same-node client: one copy into its region, nothing in the stream.
        const int i = header->blocks_size() - 1;
        const v1::ShmRange& d = req_.shm_destinations(i);
        if (item.bytes.size() > d.capacity()) {
          return absl::OutOfRangeError(absl::StrCat(
              "shm_destinations[", i, "] holds ", d.capacity(), " bytes, block ",
              KeyForMessage(key), " needs ", item.bytes.size()));
        }
        uint8_t* to = region->base() + d.offset();
        if (item.bytes.data() != to) std::memcpy(to, item.bytes.data(), item.bytes.size());
        continue;
      }
      remaining_ += item.bytes.size();
      items_.push_back(std::move(item));
    }
    bool own = false;
    if (!grpc::SerializationTraits<v1::GetResponse>::Serialize(header_msg, &frame_, &own).ok()) {
      return absl::InternalError("cannot serialize GetResponse header");
    }
    return absl::OkStatus();
  }

  // Writes frame_; the last frame goes out together with the status (one reaction less,
  // and no OnWriteDone for it).
  void WriteFrame() {
    if (remaining_ > 0) {
      StartWrite(&frame_);
      return;
    }
    ctx_->metrics.Record(Op::kGet, NowMicros() - start_, true);
    StartWriteAndFinish(&frame_, grpc::WriteOptions(), grpc::Status::OK);
  }

  // Builds the next chunk frame into frame_; false when every payload byte was sent.
  bool NextFrame() {
    if (remaining_ == 0) return false;
    const uint64_t n = std::min<uint64_t>(remaining_, ctx_->chunk_bytes);
    slices_.clear();
    uint8_t prefix[11];
    size_t plen = 0;
    prefix[plen++] = 0x12;  // field 2 (chunk), length-delimited
    uint64_t v = n;
    while (v >= 0x80) {
      prefix[plen++] = static_cast<uint8_t>(v | 0x80);
      v >>= 7;
    }
    prefix[plen++] = static_cast<uint8_t>(v);
    slices_.emplace_back(prefix, plen);  // copies the few prefix bytes
    uint64_t left = n;
    while (left > 0) {
      Item& item = items_[item_idx_];
      const size_t avail = item.bytes.size() - item_off_;
      const size_t take = std::min<uint64_t>(avail, left);
      if (take > 0) {
        slices_.push_back(OwnedSlice(item.bytes.data() + item_off_, take, item.owner));
      }
      item_off_ += take;
      left -= take;
      if (item_off_ == item.bytes.size()) {
        item.owner.reset();  // the slices hold their own references
        ++item_idx_;
        item_off_ = 0;
      }
    }
    remaining_ -= n;
    frame_ = grpc::ByteBuffer(slices_.data(), slices_.size());
    return true;
  }

  void FinishAndRecord(const grpc::Status& s) {
    ctx_->metrics.Record(Op::kGet, NowMicros() - start_, s.ok());
    items_.clear();
    Finish(s);
  }

  ServiceContext* const ctx_;
  grpc::CallbackServerContext* const context_;
  const int64_t start_;
  storage::TieredStore* store_ = nullptr;
  Caller caller_;
  v1::GetRequest req_;
  std::vector<Item> items_;
  size_t item_idx_ = 0;
  size_t item_off_ = 0;
  uint64_t remaining_ = 0;
  std::vector<grpc::Slice> slices_;
  grpc::ByteBuffer frame_;
};

}  // namespace

std::shared_ptr<const storage::NamespaceOptions> NamespaceCache::Find(
    const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = map_.find(name);
  return it == map_.end() ? nullptr : it->second;
}

void NamespaceCache::Insert(const storage::NamespaceOptions& ns) {
  auto entry = std::make_shared<const storage::NamespaceOptions>(ns);
  absl::MutexLock lock(&mu_);
  map_.try_emplace(ns.name, std::move(entry));
}

void FillShmOffer(const ServiceContext& ctx, v1::SharedMemoryOffer* offer) {
  if (ctx.shm == nullptr) return;
  offer->set_socket_path(ctx.shm->socket_path());
  offer->set_instance_id(ctx.shm->instance_id());
  offer->set_max_region_bytes(ctx.shm->max_region_bytes());
}

void RemoveOtherTenants(const Caller& caller,
                        google::protobuf::RepeatedPtrField<v1::NamespaceStats>* namespaces) {
  if (caller.is_operator) return;
  for (int i = namespaces->size() - 1; i >= 0; --i) {
    if (!caller.MayUse(namespaces->Get(i).tenant())) namespaces->DeleteSubrange(i, 1);
  }
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

grpc::ServerUnaryReactor* KvCacheServiceImpl::RegisterNamespace(
    grpc::CallbackServerContext* context, const v1::RegisterNamespaceRequest* request,
    v1::RegisterNamespaceResponse* response) {
  ServiceContext* ctx = ctx_;
  return RunUnary(
      ctx_, context, Op::kRegisterNamespace,
      [ctx, request, response](storage::TieredStore& store, const Caller& caller) -> absl::Status {
        if (!request->hash_scheme().empty() && request->hash_scheme() != HashSchemeVersion()) {
          return absl::FailedPreconditionError(
              absl::StrCat("hash_scheme \"", request->hash_scheme(),
                           "\" differs from the server's \"", HashSchemeVersion(), "\""));
        }
        if (!request->has_spec()) {
          return absl::InvalidArgumentError("spec is missing");
        }
        ASSIGN_OR_RETURN(storage::NamespaceOptions ns, NamespaceFromProto(request->spec(), "spec"));
        if (!caller.is_operator) {
          // A tenant registers for itself: an empty spec.tenant means its own.
          if (!request->spec().tenant().empty() && request->spec().tenant() != caller.tenant) {
            return absl::PermissionDeniedError(absl::StrCat(
                "spec.tenant \"", request->spec().tenant(), "\" is not the caller's tenant \"",
                caller.tenant, "\""));
          }
          ns.tenant = caller.tenant;
        }
        auto prior = store.GetNamespace(ns.name);
        const bool existed = prior.ok();
        if (existed) RETURN_IF_ERROR(CheckNamespaceAccess(caller, ns.name, prior->tenant));
        ASSIGN_OR_RETURN(storage::NamespaceOptions stored, store.RegisterNamespace(ns));
        ctx->namespaces.Insert(stored);
        *response->mutable_spec() = NamespaceToProto(stored);
        response->set_created(!existed);
        response->set_hash_scheme(HashSchemeVersion());
        response->set_node_id(ctx->node_id);
        FillShmOffer(*ctx, response->mutable_shared_memory());
        return absl::OkStatus();
      });
}

grpc::ServerReadReactor<grpc::ByteBuffer>* KvCacheServiceImpl::Put(
    grpc::CallbackServerContext* context, grpc::ByteBuffer* response) {
  return new PutReactor(ctx_, context, response);
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* KvCacheServiceImpl::Get(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  return new GetReactor(ctx_, context, request);
}

grpc::ServerUnaryReactor* KvCacheServiceImpl::Lookup(grpc::CallbackServerContext* context,
                                                     const v1::LookupRequest* request,
                                                     v1::LookupResponse* response) {
  ServiceContext* ctx = ctx_;
  return RunUnaryAsync(
      ctx_, context, Op::kLookup,
      [ctx, request, response](storage::TieredStore& store, const Caller& caller,
                               std::function<void(absl::Status)> finish) {
        std::vector<std::string> keys;
        std::string ns_name;
        storage::LookupResult r;
        absl::Status s = [&]() -> absl::Status {
          ASSIGN_OR_RETURN(storage::NamespaceOptions ns,
                           FindNamespace(*ctx, store, request->namespace_(), caller));
          ns_name = ns.name;
          ASSIGN_OR_RETURN(keys, CheckKeys(request->keys(), *ctx, false));
          ASSIGN_OR_RETURN(r, store.Lookup(ns.name, keys));
          return absl::OkStatus();
        }();
        if (!s.ok()) return finish(s);
        std::vector<v1::Tier> tiers;
        for (size_t i = 0; i < keys.size(); ++i) {
          tiers.push_back(TierToProto(i < r.tiers.size() ? r.tiers[i] : storage::Tier::kNone));
        }
        if (ctx->fanout != nullptr && !request->local_only()) {
          // Cluster-wide: ask the owners of the keys not held here (peer_deadline_ms).
          ctx->fanout->LookupAsync(ns_name, keys, tiers,
                                   [response, finish](v1::LookupResponse merged) {
                                     *response = std::move(merged);
                                     finish(absl::OkStatus());
                                   });
          return;
        }
        response->set_prefix_blocks(r.prefix_blocks);
        for (const v1::Tier t : tiers) {
          v1::BlockLocation* loc = response->add_blocks();
          loc->set_tier(t);
          if (t != v1::TIER_NONE) loc->set_owner(ctx->node_id);
        }
        finish(absl::OkStatus());
      });
}

grpc::ServerUnaryReactor* KvCacheServiceImpl::Pin(grpc::CallbackServerContext* context,
                                                  const v1::PinRequest* request,
                                                  v1::PinResponse* response) {
  return RunKeyedCount(ctx_, context, Op::kPin, request, response, false,
                       [request](storage::TieredStore& store, const std::string& ns,
                                 const std::vector<std::string>& keys) {
                         return store.Pin(ns, keys, request->ttl_ms());
                       });
}

grpc::ServerUnaryReactor* KvCacheServiceImpl::Unpin(grpc::CallbackServerContext* context,
                                                    const v1::UnpinRequest* request,
                                                    v1::UnpinResponse* response) {
  return RunKeyedCount(ctx_, context, Op::kUnpin, request, response, false,
                       [](storage::TieredStore& store, const std::string& ns,
                          const std::vector<std::string>& keys) { return store.Unpin(ns, keys); });
}

grpc::ServerUnaryReactor* KvCacheServiceImpl::ReportScores(grpc::CallbackServerContext* context,
                                                           const v1::ReportScoresRequest* request,
                                                           v1::ReportScoresResponse* /*response*/) {
  ServiceContext* ctx = ctx_;
  return RunUnary(
      ctx_, context, Op::kReportScores,
      [ctx, request](storage::TieredStore& store, const Caller& caller) -> absl::Status {
        ASSIGN_OR_RETURN(storage::NamespaceOptions ns,
                         FindNamespace(*ctx, store, request->namespace_(), caller));
        ASSIGN_OR_RETURN(std::vector<std::string> keys, CheckKeys(request->keys(), *ctx, false));
        if (request->scores_size() != request->keys_size()) {
          return absl::InvalidArgumentError(absl::StrCat("scores has ", request->scores_size(),
                                                         " values but keys has ",
                                                         request->keys_size()));
        }
        std::vector<float> scores(request->scores().begin(), request->scores().end());
        return store.ReportScores(ns.name, keys, scores);
      });
}

grpc::ServerUnaryReactor* KvCacheServiceImpl::Delete(grpc::CallbackServerContext* context,
                                                     const v1::DeleteRequest* request,
                                                     v1::DeleteResponse* response) {
  return RunKeyedCount(ctx_, context, Op::kDelete, request, response, false,
                       [](storage::TieredStore& store, const std::string& ns,
                          const std::vector<std::string>& keys) { return store.Delete(ns, keys); });
}

grpc::ServerUnaryReactor* KvCacheServiceImpl::Compact(grpc::CallbackServerContext* context,
                                                      const v1::CompactRequest* request,
                                                      v1::CompactResponse* response) {
#ifdef KVTIER_HAVE_COMPACT
  ServiceContext* ctx = ctx_;
  return RunUnary(ctx_, context, Op::kCompact,
                  [ctx, request, response](storage::TieredStore& store,
                                           const Caller& caller) -> absl::Status {
                    ASSIGN_OR_RETURN(storage::NamespaceOptions ns,
                                     FindNamespace(*ctx, store, request->namespace_(), caller));
                    RETURN_IF_ERROR(CheckKeys(request->keys(), *ctx, false).status());
                    ASSIGN_OR_RETURN(*response, RunCompact(store, *request));
                    return absl::OkStatus();
                  });
#else
  (void)request;
  (void)response;
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(
      grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "Compact is not available in this build"));
  return reactor;
#endif
}

// ---------------------------------------------------------------------------------------
// Admin.

grpc::ServerUnaryReactor* KvCacheAdminImpl::Stats(grpc::CallbackServerContext* context,
                                                  const v1::StatsRequest* request,
                                                  v1::StatsResponse* response) {
  ServiceContext* ctx = ctx_;
  return RunUnary(ctx_, context, Op::kStats,
                  [ctx, request, response](storage::TieredStore& store,
                                           const Caller& caller) -> absl::Status {
                    if (!request->namespace_().empty()) {
                      RETURN_IF_ERROR(
                          FindNamespace(*ctx, store, request->namespace_(), caller).status());
                    }
                    FillStats(store.Stats(), request->namespace_(), response);
                    RemoveOtherTenants(caller, response->mutable_namespaces());
                    response->set_node_id(ctx->node_id);
                    response->set_hash_scheme(HashSchemeVersion());
                    response->set_uptime_ms((NowMicros() - ctx->open_micros) / 1000);
                    FillShmOffer(*ctx, response->mutable_shared_memory());
                    if (ctx->shm != nullptr) {
                      response->set_shm_sessions(
                          static_cast<uint32_t>(ctx->shm->session_count()));
                    }
                    ctx->metrics.AppendLatencies(response);
                    return absl::OkStatus();
                  });
}

grpc::ServerUnaryReactor* KvCacheAdminImpl::ListNamespaces(
    grpc::CallbackServerContext* context, const v1::ListNamespacesRequest* /*request*/,
    v1::ListNamespacesResponse* response) {
  return RunUnary(ctx_, context, Op::kStats,
                  [response](storage::TieredStore& store, const Caller& caller) -> absl::Status {
                    for (const auto& ns : store.ListNamespaces()) {
                      if (caller.MayUse(ns.tenant)) *response->add_namespaces() = NamespaceToProto(ns);
                    }
                    return absl::OkStatus();
                  });
}

grpc::ServerUnaryReactor* KvCacheAdminImpl::Evict(grpc::CallbackServerContext* context,
                                                  const v1::EvictRequest* request,
                                                  v1::EvictResponse* response) {
  return RunKeyedCount(ctx_, context, Op::kEvict, request, response, true,
                       [request](storage::TieredStore& store, const std::string& ns,
                                 const std::vector<std::string>& keys) {
                         return store.Evict(ns, keys, request->drop());
                       });
}

grpc::ServerUnaryReactor* KvCacheAdminImpl::Flush(grpc::CallbackServerContext* context,
                                                  const v1::FlushRequest* request,
                                                  v1::FlushResponse* /*response*/) {
  ServiceContext* ctx = ctx_;
  return RunUnary(ctx_, context, Op::kFlush,
                  [ctx, request](storage::TieredStore& store, const Caller& caller) -> absl::Status {
                    if (request->namespace_().empty()) {
                      if (!caller.is_operator) {
                        return absl::PermissionDeniedError(
                            "namespace: flushing every namespace needs an operator token");
                      }
                    } else {
                      RETURN_IF_ERROR(
                          FindNamespace(*ctx, store, request->namespace_(), caller).status());
                    }
                    return store.Flush(request->namespace_());
                  });
}

grpc::ServerUnaryReactor* KvCacheAdminImpl::ClusterStatus(
    grpc::CallbackServerContext* context, const v1::ClusterStatusRequest* /*request*/,
    v1::ClusterStatusResponse* response) {
  ServiceContext* ctx = ctx_;
  return RunUnaryAsync(
      ctx_, context, Op::kStats,
      [ctx, response](storage::TieredStore& store, const Caller& caller,
                      std::function<void(absl::Status)> finish) {
        v1::StatsResponse st;
        FillStats(store.Stats(), "", &st);
        RemoveOtherTenants(caller, st.mutable_namespaces());
        st.set_node_id(ctx->node_id);
        st.set_hash_scheme(HashSchemeVersion());
        st.set_uptime_ms((NowMicros() - ctx->open_micros) / 1000);
        if (ctx->fanout != nullptr) {
          // Membership, health, ownership shares and every peer's Stats.
          ctx->fanout->ClusterStatusAsync(
              std::move(st), [response, finish, caller](v1::ClusterStatusResponse r) {
                // Peers answered the operator peer token: keep this caller's tenant only.
                for (v1::PeerStatus& p : *r.mutable_peers()) {
                  RemoveOtherTenants(caller, p.mutable_stats()->mutable_namespaces());
                }
                *response = std::move(r);
                finish(absl::OkStatus());
              });
          return;
        }
        response->set_node_id(ctx->node_id);
        response->set_replication_factor(ctx->replication_factor);
        v1::PeerStatus* self = response->add_peers();
        self->set_node_id(ctx->node_id);
        self->set_address(ctx->node_id);
        self->set_healthy(true);
        self->set_ownership_share(1.0);
        self->set_last_seen_ms_ago(0);
        *self->mutable_stats() = std::move(st);
        finish(absl::OkStatus());
      });
}

}  // namespace kvtier::service
