#include "service/put_reactor.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kv/codec.h"
#include "protocol/convert.h"
#include "protocol/error_detail.h"
#include "protocol/wire.h"
#include "service/admission.h"
#include "service/payload_paths.h"
#include "service/put_watchdog.h"
#include "service/request_checks.h"
#include "service/tenant_quotas.h"
#include "storage/tiered_store.h"

namespace kvtier::service {
namespace {

// Bounds on the router-only block fields, so one block's event stays small.
constexpr size_t kMaxLoraNameBytes = 256;
constexpr int kMaxExtraKeys = 64;
constexpr size_t kMaxExtraKeyBytes = 256;

// The checks and the store step of one Put, whatever carried it (a gRPC stream, or a frame
// on a socket) and whatever path its payloads took (source_, dataplane/path.h): the
// header checked against its namespace, then every block validated, transcoded when
// needed, and stored.
class PutCore {
 protected:
  explicit PutCore(ServiceContext* ctx) : ctx_(ctx) {}
  virtual ~PutCore() = default;

  struct Block {
    // Payload as received: views into held_ / owned_, no copy. `size` bytes in all.
    std::vector<std::string_view> pieces;
    uint64_t size = 0;
    std::string data;     // the pieces joined, when the payload must be re-encoded
    std::string encoded;  // transcoded blob, or the codec header put in front of raw pieces
  };

  // Finds header_'s namespace (as caller_) and checks the header against it.
  absl::Status Resolve() {
    ASSIGN_OR_RETURN(ns_, FindNamespace(*ctx_, *store_, header_.namespace_(), caller_));
    return ValidateHeader();
  }

  // Checks header.blocks[i]: key, parent key, size for the format, and what the payload
  // path checks of it (PutSource::CheckBlock).
  absl::Status ValidateBlock(int i) const {
    const v1::PutBlock& b = header_.blocks(i);
    const uint64_t raw_size = ns_.layout.BytesPerBlock();
    // Generous bound for an encoded blob: the raw size plus header and codec metadata.
    const uint64_t max_encoded = raw_size + raw_size / 4 + 4096;
    if (b.key().empty() || b.key().size() > storage::kMaxKeyBytes) {  // names it only then
      return CheckKey(b.key(), absl::StrCat("header.blocks[", i, "].key"));
    }
    if (b.parent_key().size() > storage::kMaxKeyBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "header.blocks[", i, "].parent_key must be at most ", storage::kMaxKeyBytes, " bytes"));
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
    // The router-only fields (token_ids, lora_name, extra_keys) are bounded so an event
    // stays small.
    if (static_cast<uint64_t>(b.token_ids_size()) > ns_.layout.tokens_per_block) {
      return absl::InvalidArgumentError(absl::StrCat(
          "header.blocks[", i, "].token_ids holds ", b.token_ids_size(),
          " tokens; a block holds at most ", ns_.layout.tokens_per_block));
    }
    if (b.lora_name().size() > kMaxLoraNameBytes || b.extra_keys_size() > kMaxExtraKeys) {
      return absl::InvalidArgumentError(
          absl::StrCat("header.blocks[", i, "].lora_name (at most ", kMaxLoraNameBytes,
                       " bytes) or extra_keys (at most ", kMaxExtraKeys, ") too long"));
    }
    for (const std::string& k : b.extra_keys()) {
      if (k.size() > kMaxExtraKeyBytes) {
        return absl::InvalidArgumentError(
            absl::StrCat("header.blocks[", i, "].extra_keys: an entry exceeds ",
                         kMaxExtraKeyBytes, " bytes"));
      }
    }
    return source_->CheckBlock(i, b);
  }

  // Checks the header against ns_.
  absl::Status ValidateHeader() {
    if (header_.format() != v1::PAYLOAD_FORMAT_ENCODED &&
        header_.format() != v1::PAYLOAD_FORMAT_RAW) {
      return absl::InvalidArgumentError(
          absl::StrCat("header.format ", static_cast<int>(header_.format()), " is unknown"));
    }
    if (header_.has_layout()) {
      RETURN_IF_ERROR(
          CompareLayouts(ns_.layout, protocol::LayoutFromProtoUnchecked(header_.layout()),
                         "header.layout", true));
    }
    const int n = header_.blocks_size();
    if (n == 0) return absl::InvalidArgumentError("header.blocks is empty");
    if (static_cast<uint64_t>(n) > ctx_->limits.max_keys_per_request) {
      return absl::InvalidArgumentError(absl::StrCat("header.blocks: ", n,
                                                     " blocks exceed max_keys_per_request (",
                                                     ctx_->limits.max_keys_per_request, ")"));
    }
    if (source_ == nullptr) source_ = PutSourceFor(ctx_, caller_, header_);
    RETURN_IF_ERROR(source_->Resolve());
    total_ = 0;
    for (int i = 0; i < n; ++i) {
      RETURN_IF_ERROR(ValidateBlock(i));
      total_ += header_.blocks(i).size();
    }
    if (total_ > ctx_->limits.max_put_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat("header.blocks: ", total_,
                                                       " payload bytes exceed max_put_bytes (",
                                                       ctx_->limits.max_put_bytes, ")"));
    }
    blocks_.resize(n);
    return absl::OkStatus();
  }

  // After a valid header, a source whose payloads do not come in the stream: opens it
  // (the caller charged the Put budget when it HoldsServerMemory) and lets the blocks
  // view its bytes. `arrived` as dataplane::PutSource::Open's.
  absl::Status OpenSource(std::function<void(absl::Status)> arrived) {
    dataplane::PutOpen open;
    open.store = store_;
    open.ns = ns_.name;
    open.header = &header_;
    const bool raw = header_.format() == v1::PAYLOAD_FORMAT_RAW;
    // Blocks stored as they arrive (encoded ones; raw ones for an fp16/bf16 namespace,
    // behind the codec header PrepareBlock writes) may land where they are stored; raw
    // ones to transcode are staged.
    open.in_place = !raw || RawCodec();
    open.prefix = raw ? kv::kEncodedHeaderBytes : 0;
    std::vector<std::string_view> views;
    RETURN_IF_ERROR(source_->Open(open, &views, std::move(arrived)));
    for (size_t i = 0; i < blocks_.size(); ++i) {
      blocks_[i].pieces.push_back(views[i]);
      blocks_[i].size = header_.blocks(static_cast<int>(i)).size();
    }
    return absl::OkStatus();
  }

  // Validates (and transcodes) every block, then stores them all.
  absl::Status StoreAll(v1::PutResponse* resp) {
    const int n = header_.blocks_size();
    std::vector<storage::BlockPut> puts(n);
    std::vector<std::vector<std::string>> extra_keys(n);  // viewed by puts[i].extra_keys
    uint64_t bytes = 0;
    resp->mutable_block_bytes_stored()->Reserve(n);
    for (int i = 0; i < n; ++i) {
      const v1::PutBlock& b = header_.blocks(i);
      Block& blk = blocks_[i];
      ASSIGN_OR_RETURN(std::string_view payload, PrepareBlock(i));
      puts[i].key = b.key();
      puts[i].parent_key = b.parent_key();
      puts[i].block_index = b.block_index();
      // Event-only fields: carried into the BlockStored event, never stored.
      puts[i].token_ids = std::span<const uint32_t>(b.token_ids().data(), b.token_ids_size());
      if (!b.lora_name().empty()) puts[i].lora_name = b.lora_name();
      if (b.extra_keys_size() > 0) {
        extra_keys[i].assign(b.extra_keys().begin(), b.extra_keys().end());
        puts[i].extra_keys = extra_keys[i];
      }
      uint64_t stored = payload.size();
      if (!payload.empty()) {
        puts[i].payload = payload;
      } else if (storage::PutReservation* r = Reservation(i)) {
        puts[i].reservation = r;  // stored where it landed
        stored = r->data().size();
      } else {
        puts[i].pieces = blk.pieces;
        stored = blk.size;
      }
      bytes += stored;
      resp->add_block_bytes_stored(stored);
    }
    // At a tenant quota: RESOURCE_EXHAUSTED with ErrorDetail TENANT_QUOTA_EXHAUSTED.
    RETURN_IF_ERROR(WithTenantQuotaDetail(store_->Put(ns_.name, puts)));
    resp->set_blocks_stored(static_cast<uint32_t>(n));
    resp->set_bytes_stored(bytes);
    return absl::OkStatus();
  }

  // Makes block i storable in the namespace codec. Returns the contiguous blob to store,
  // or an empty view when blk.pieces are stored as they are.
  absl::StatusOr<std::string_view> PrepareBlock(int i) {
    Block& blk = blocks_[i];
    const std::string field = absl::StrCat("blocks[", i, "]");
    if (header_.format() == v1::PAYLOAD_FORMAT_RAW && RawCodec()) {
      // fp16/bf16 store the raw bytes unchanged: put the codec header in front of them.
      // (ValidateHeader checked the size; the layout is the registered one.)
      const auto tokens = static_cast<uint32_t>(blk.size / ns_.layout.BytesPerToken());
      if (storage::PutReservation* r = Reservation(i)) {
        // Landed in a reserved slot behind room for the header.
        kv::EncodeRawHeader(ns_.codec, ns_.layout, tokens, tokens, blk.size, r->data().data());
        return std::string_view();
      }
      blk.encoded.assign(kv::kEncodedHeaderBytes, '\0');
      kv::EncodeRawHeader(ns_.codec, ns_.layout, tokens, tokens, blk.size,
                          reinterpret_cast<uint8_t*>(blk.encoded.data()));
      blk.pieces.insert(blk.pieces.begin(), blk.encoded);
      blk.size += blk.encoded.size();
      return std::string_view();
    }
    if (header_.format() == v1::PAYLOAD_FORMAT_RAW) {
      blk.data = storage::JoinPieces(blk.pieces);
      blk.pieces.clear();
      return Reencode(i, kv::AsBytes(blk.data), field);
    }
    auto info = storage::ParsePiecesHeader(blk.pieces);
    if (!info.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".payload is not a valid encoded block: ", info.status().message()));
    }
    if (info->encoded_bytes != blk.size) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".payload header says ", info->encoded_bytes, " bytes but size is ", blk.size));
    }
    RETURN_IF_ERROR(CompareLayouts(ns_.layout, info->layout, field + ".payload.layout",
                                   /*check_tokens=*/false));
    if (info->num_tokens > ns_.layout.tokens_per_block) {
      return absl::FailedPreconditionError(
          absl::StrCat(field, ".payload holds ", info->num_tokens,
                       " tokens but namespace tokens_per_block is ", ns_.layout.tokens_per_block));
    }
    if (info->codec == ns_.codec) return std::string_view();
    if (info->codec != kv::CodecId::kFp16 && info->codec != kv::CodecId::kBf16) {
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
    blk.data = *std::move(raw);
    return Reencode(i, kv::AsBytes(blk.data), field);
  }

  // Whether the namespace codec stores raw bytes unchanged (behind its header).
  bool RawCodec() const {
    return ns_.codec == kv::CodecId::kFp16 || ns_.codec == kv::CodecId::kBf16;
  }

  // Block i's hot slot reserved in the store when its payload landed there, else null.
  storage::PutReservation* Reservation(int i) const { return source_->Reservation(i); }

  // Encodes raw bytes of block i in the namespace codec into blk.encoded (freeing
  // blk.data) and returns it.
  absl::StatusOr<std::string_view> Reencode(int i, std::span<const uint8_t> raw,
                                            const std::string& field) {
    Block& blk = blocks_[i];
    kv::CodecOptions copts;
    copts.keep_sinks = ns_.keep_sinks;
    auto enc = kv::Encode(ns_.codec, ns_.layout, header_.blocks(i).block_index(), raw, copts);
    if (!enc.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": cannot encode: ", enc.status().message()));
    }
    blk.encoded = std::move(*enc);
    blk.data = std::string();
    return std::string_view(blk.encoded);
  }

  ServiceContext* const ctx_;
  storage::TieredStore* store_ = nullptr;
  Caller caller_;
  v1::PutHeader header_;
  storage::NamespaceOptions ns_;
  std::vector<Block> blocks_;
  std::unique_ptr<dataplane::PutSource> source_;  // the payload path (dataplane/path.h)
  uint64_t total_ = 0;                            // payload bytes declared by the header

  friend absl::Status service::PutInline(ServiceContext* ctx, storage::TieredStore* store,
                                         const Caller& caller, v1::PutHeader header,
                                         v1::PutResponse* response);
};

// A Put whose call is a frame and whose payloads come later by their own path (PutAsync).
// Deletes itself once `done_` ran.
class AsyncPut final : private PutCore {
 public:
  using Done = std::function<void(absl::Status, v1::PutResponse)>;

  static void Start(ServiceContext* ctx, storage::TieredStore* store, const Caller& caller,
                    v1::PutHeader header, Done done) {
    auto* p = new AsyncPut(ctx, std::move(done));
    p->store_ = store;
    p->caller_ = caller;
    p->header_ = std::move(header);
    p->source_ = PutSourceFor(ctx, caller, p->header_);
    absl::Status s = p->Resolve();
    if (s.ok() && p->source_->InStream()) {
      s = absl::InvalidArgumentError(
          "header: a Put sent as a frame names the payload path its bytes take, not the stream");
    }
    if (s.ok() && p->source_->HoldsServerMemory()) {
      ctx->put_budget.OpenStream(caller.tenant);
      p->budget_open_ = true;
      s = ctx->put_budget.Charge(caller.tenant, p->total_, ctx->limits.put_budget_bytes);
      if (s.ok()) p->charged_ = p->total_;
    }
    if (s.ok()) {
      s = p->OpenSource([p](absl::Status arrival) {
        p->arrival_ = std::move(arrival);
        p->StepDone();
      });
    }
    if (!s.ok()) return p->Finish(s);  // `arrived` never runs
    p->StepDone();
  }

 private:
  AsyncPut(ServiceContext* ctx, Done done) : PutCore(ctx), done_(std::move(done)) {}

  // One of {Start has set the blocks up, the path's bytes are in} is done; the second
  // goes on: a failed path finishes on its own thread (nothing to store), a complete one
  // stores on the executor.
  void StepDone() {
    if (pending_.fetch_sub(1) != 1) return;
    if (!arrival_.ok()) return Finish(arrival_);
    if (!ctx_->executor->TrySchedule(caller_.tenant, [this] {
          v1::PutResponse response;
          absl::Status s = StoreAll(&response);
          Finish(s, std::move(response));
        })) {
      Finish(absl::ResourceExhaustedError(BusyStatus().error_message()));
    }
  }

  void Finish(const absl::Status& s, v1::PutResponse response = {}) {
    source_->Close();
    blocks_.clear();
    if (budget_open_) ctx_->put_budget.CloseStream(caller_.tenant, charged_);
    Done done = std::move(done_);
    delete this;
    done(s, std::move(response));
  }

  Done done_;
  absl::Status arrival_;
  std::atomic<int> pending_{2};
  bool budget_open_ = false;
  uint64_t charged_ = 0;
};

// Client-streaming Put: header, then payload chunks. One read in flight; header
// validation and the final transcode + store run on the executor.
class PutReactor final : public grpc::ServerReadReactor<grpc::ByteBuffer>, private PutCore {
 public:
  PutReactor(ServiceContext* ctx, grpc::CallbackServerContext* context, grpc::ByteBuffer* response)
      : PutCore(ctx), context_(context), response_(response), start_(NowMicros()) {
    if (grpc::Status admit = Admit(ctx_, context, &store_, &caller_); !admit.ok()) {
      Finish(admit);
      return;
    }
    if (!ctx_->connection_puts.Acquire(context->peer(), ctx_->limits.max_puts_per_connection)) {
      FinishAndRecord(grpc::Status(
          grpc::StatusCode::RESOURCE_EXHAUSTED,
          absl::StrCat("put: this connection has max_puts_per_connection (",
                       ctx_->limits.max_puts_per_connection, ") Put streams open")));
      return;
    }
    peer_ = context->peer();
    ctx_->put_budget.OpenStream(caller_.tenant);
    if (ctx_->put_watchdog != nullptr) watch_ = ctx_->put_watchdog->Watch([this] { TimedOut(); });
    ReadNext();
  }

  void OnReadDone(bool ok) override {
    if (watch_ != nullptr) watch_->StopWaiting();
    // Lost the race with the watchdog: the call is finished already.
    if (int waiting = kWaiting; !state_.compare_exchange_strong(waiting, kBusy)) return;
    if (!ok) {
      EndOfStream();
      return;
    }
    if (!have_header_) {
      v1::PutRequest req;
      const bool parsed = grpc::SerializationTraits<v1::PutRequest>::Deserialize(&in_, &req).ok();
      auto header = PutHeaderOf(parsed, &req);
      if (!header.ok()) return Fail(header.status());
      have_header_ = true;
      header_ = *std::move(header);
      source_ = PutSourceFor(ctx_, caller_, header_);
      // A source that reserves store room (which may demote) opens on the executor.
      if (!source_->OpensOnExecutor() && ctx_->namespaces.Find(header_.namespace_())) {
        // Known namespace: validation is pure CPU on the header, no store call.
        absl::Status s = Resolve();
        if (s.ok()) s = StartPayloads();
        if (!s.ok()) return Fail(s);
        ReadNext();
        return;
      }
      if (!ctx_->executor->TrySchedule(caller_.tenant, [this] {
            absl::Status s = Resolve();
            if (s.ok()) s = StartPayloads();
            if (!s.ok()) return Fail(s);
            ReadNext();
          })) {
        FinishAndRecord(BusyStatus());
      }
      return;
    }
    absl::Status s = ConsumeChunkMessage();
    in_.Clear();
    if (!s.ok()) return Fail(s);
    ReadNext();
  }

  void OnDone() override {
    if (watch_ != nullptr) watch_->Close();
    if (!peer_.empty()) ctx_->connection_puts.Release(peer_);
    ctx_->in_flight.fetch_sub(1);
    Unref();
  }

 private:
  // state_: kBusy while a reaction or executor task works on the stream, kWaiting while a
  // read is outstanding (the watchdog may then finish the call), kFinished once Finish
  // was called.
  enum State : int { kBusy, kWaiting, kFinished };

  // Waits for the client's next message.
  void ReadNext() {
    state_.store(kWaiting);
    if (watch_ != nullptr) watch_->StartWaiting(PutWatchdog::NowMs());
    StartRead(&in_);
  }

  // The watchdog saw no message for put_progress_timeout_ms.
  void TimedOut() {
    if (int waiting = kWaiting; !state_.compare_exchange_strong(waiting, kBusy)) return;
    FinishAndRecord(grpc::Status(
        grpc::StatusCode::DEADLINE_EXCEEDED,
        absl::StrCat("put: no message from the client for put_progress_timeout_ms (",
                     ctx_->put_watchdog->timeout_ms(), " ms); the stream is cancelled")));
  }

  // After a valid header: the payloads come in the stream's chunk messages, or by the
  // source's own path; then the Put goes on once both the path's bytes and the stream's
  // end are in (PathStepDone).
  absl::Status StartPayloads() {
    if (source_->InStream()) return absl::OkStatus();
    if (source_->HoldsServerMemory()) RETURN_IF_ERROR(Charge(total_));
    received_ = total_;
    path_pending_.store(2);
    refs_.fetch_add(1);
    absl::Status s = OpenSource([this](absl::Status s) {
      path_status_ = std::move(s);
      PathStepDone();
      Unref();
    });
    if (!s.ok()) refs_.fetch_sub(1);  // `arrived` never runs
    return s;
  }

  // One of the two things a Put whose payloads take another path waits for (the path's
  // bytes, its stream's end) is done.
  void PathStepDone() {
    if (path_pending_.fetch_sub(1) != 1) return;
    if (!path_status_.ok()) return Fail(path_status_);
    ScheduleStore();
  }

  void Unref() {
    if (refs_.fetch_sub(1) == 1) delete this;
  }

  // Charges `bytes` just received to the server-wide Put budget, fairly shared across
  // tenants (ServiceContext::put_budget, service/put_budget.h). Payload is charged as it
  // arrives, not as the header declares it, so streams that send a header and then stall
  // hold none of the budget. RESOURCE_EXHAUSTED "server busy" over the budget or the
  // tenant's share of it.
  absl::Status Charge(uint64_t bytes) {
    RETURN_IF_ERROR(ctx_->put_budget.Charge(caller_.tenant, bytes, ctx_->limits.put_budget_bytes));
    reserved_ += bytes;
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
    if (!source_->InStream()) return source_->ChunkError();
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
    protocol::SliceCursor cur(spans);
    if (protocol::ReadChunkPrefix(cur)) {
      RETURN_IF_ERROR(Charge(cur.remaining()));
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
    RETURN_IF_ERROR(Charge(req.chunk().size()));
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
    if (!source_->InStream()) return PathStepDone();
    if (received_ != total_) {
      const int i = static_cast<int>(std::min<size_t>(cur_, blocks_.size() - 1));
      return Fail(absl::InvalidArgumentError(
          absl::StrCat("chunk: the stream ended after ", received_, " of ", total_,
                       " payload bytes (in header.blocks[", i, "], key ",
                       KeyForMessage(header_.blocks(i).key()), ")")));
    }
    ScheduleStore();
  }

  // Transcodes and stores every block on the executor, then answers.
  void ScheduleStore() {
    if (!ctx_->executor->TrySchedule(caller_.tenant, [this] {
          v1::PutResponse resp;
          absl::Status s = StoreAll(&resp);
          if (s.ok()) s = SerializeResponse(resp, response_);
          if (!s.ok()) return Fail(s);
          ReleaseBuffers();
          FinishAndRecord(grpc::Status::OK);
        })) {
      FinishAndRecord(BusyStatus());
    }
  }

  void ReleaseBuffers() {
    blocks_.clear();
    held_.clear();
    owned_.clear();
    if (source_ != nullptr) source_->Close();
  }

  void Fail(const absl::Status& s) { FinishAndRecord(protocol::ToGrpcStatus(s)); }

  void FinishAndRecord(const grpc::Status& s) {
    if (state_.exchange(kFinished) == kFinished) return;
    ctx_->metrics.Record(Op::kPut, NowMicros() - start_, s.ok());
    // A transfer still in flight ends (dataplane::PutSource::Close).
    ReleaseBuffers();
    // Release the connection's slot and the stream's budget before the status goes out,
    // so a client that saw this stream end may open another at once (OnDone runs later).
    if (!peer_.empty()) {
      ctx_->put_budget.CloseStream(caller_.tenant, reserved_);
      ctx_->connection_puts.Release(peer_);
      peer_.clear();
    }
    reserved_ = 0;
    Finish(s);
  }

  grpc::CallbackServerContext* const context_;
  grpc::ByteBuffer* const response_;
  const int64_t start_;
  grpc::ByteBuffer in_;
  bool have_header_ = false;
  std::deque<grpc::Slice> held_;   // received message slices the blocks' pieces view
  std::deque<std::string> owned_;  // chunks of messages that took the parsing path
  size_t cur_ = 0;                 // block receiving bytes
  uint64_t received_ = 0;          // payload bytes received
  std::atomic<int> state_{kBusy};
  std::shared_ptr<PutWatch> watch_;  // null without a watchdog
  std::string peer_;                 // counted in ctx_->connection_puts (empty: not counted)
  uint64_t reserved_ = 0;          // bytes charged to ServiceContext::put_budget
  // A source with its own path: its result, and how many of {the path's bytes, end of
  // stream} are still awaited.
  absl::Status path_status_;
  std::atomic<int> path_pending_{0};
  // gRPC's reference (dropped in OnDone) plus one while the source may call back.
  std::atomic<int> refs_{1};
};
}  // namespace

grpc::ServerReadReactor<grpc::ByteBuffer>* StartPut(ServiceContext* ctx,
                                                    grpc::CallbackServerContext* context,
                                                    grpc::ByteBuffer* response) {
  return new PutReactor(ctx, context, response);
}

absl::StatusOr<v1::PutHeader> PutHeaderOf(bool parsed, v1::PutRequest* first) {
  if (!parsed) return absl::InvalidArgumentError("header: cannot parse PutRequest");
  if (!first->has_header()) {
    return absl::InvalidArgumentError("header: the first message of a Put must carry the header");
  }
  return std::move(*first->mutable_header());
}

absl::Status PutInline(ServiceContext* ctx, storage::TieredStore* store, const Caller& caller,
                       v1::PutHeader header, v1::PutResponse* response) {
  PutCore core(ctx);
  core.store_ = store;
  core.caller_ = caller;
  core.header_ = std::move(header);
  core.source_ = PutSourceFor(ctx, caller, core.header_);
  absl::Status status = core.Resolve();
  if (status.ok() && (core.source_->InStream() || core.source_->HoldsServerMemory())) {
    status = absl::InternalError("an inline Put's payload path must hold its bytes in place");
  }
  bool arrived = false;
  absl::Status arrival;
  if (status.ok()) {
    status = core.OpenSource([&](absl::Status s) {
      arrival = std::move(s);
      arrived = true;
    });
  }
  if (status.ok() && !arrived) {
    status = absl::InternalError("an inline Put's payloads arrive later");
  }
  if (status.ok()) status = arrival;
  if (status.ok()) status = core.StoreAll(response);
  core.source_->Close();
  return status;
}

void PutAsync(ServiceContext* ctx, storage::TieredStore* store, const Caller& caller,
              v1::PutHeader header, std::function<void(absl::Status, v1::PutResponse)> done) {
  AsyncPut::Start(ctx, store, caller, std::move(header), std::move(done));
}

}  // namespace kvtier::service
