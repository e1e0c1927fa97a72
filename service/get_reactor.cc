#include "service/get_reactor.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <future>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "kv/codec.h"
#include "protocol/convert.h"
#include "protocol/error_detail.h"
#include "protocol/wire.h"
#include "service/admission.h"
#include "service/compact.h"
#include "service/config.h"
#include "service/payload_paths.h"
#include "service/request_checks.h"

namespace kvtier::service {
namespace {

// Deleter for slices that point into memory owned by a shared_ptr.
void ReleaseOwner(void* p) { delete static_cast<std::shared_ptr<const void>*>(p); }

grpc::Slice OwnedSlice(const uint8_t* data, size_t n, const std::shared_ptr<const void>& owner) {
  return grpc::Slice(const_cast<uint8_t*>(data), n, &ReleaseOwner,
                     new std::shared_ptr<const void>(owner));
}

bool IsRawCodec(kv::CodecId codec) {
  return codec == kv::CodecId::kFp16 || codec == kv::CodecId::kBf16;
}

// The checks and the loads of one Get, whatever carried it (a gRPC stream, or a frame on
// a socket): the request checked, every key read, and each payload handed to the call's
// payload path (sink_, dataplane/path.h) or kept in items_ for the stream.
class GetCore {
 protected:
  explicit GetCore(ServiceContext* ctx) : ctx_(ctx) {}

  // Bytes (of raw blocks) the store reads per GetMany call, at most kGetChunkMaxKeys
  // keys, and how many such calls run at once (4 MiB measured 10-15% faster from the
  // disk than 16 MiB: docs/prefetch.md).
  static constexpr uint64_t kGetChunkBytes = 4ull << 20;
  static constexpr uint64_t kGetChunkMaxKeys = 1024;
  static constexpr size_t kGetChunksAhead = 3;

  struct Item {
    std::shared_ptr<const void> owner;
    std::span<const uint8_t> bytes;
    uint32_t index = 0;  // position of its key in the request
  };

  // Checks the request and loads every key; *header_msg gets the header.
  absl::Status Load(v1::GetResponse* header_msg) {
    ASSIGN_OR_RETURN(storage::NamespaceOptions ns,
                     FindNamespace(*ctx_, *store_, req_.namespace_(), caller_));
    if (req_.format() != v1::PAYLOAD_FORMAT_ENCODED && req_.format() != v1::PAYLOAD_FORMAT_RAW) {
      return absl::InvalidArgumentError(
          absl::StrCat("format ", static_cast<int>(req_.format()), " is unknown"));
    }
    ASSIGN_OR_RETURN(std::vector<std::string> keys, CheckKeys(req_.keys(), ctx_->limits, false));
    if (sink_ == nullptr) sink_ = GetSinkFor(ctx_, caller_, req_);
    RETURN_IF_ERROR(sink_->Resolve(keys.size()));
    v1::GetHeader* header = header_msg->mutable_header();
    items_.reserve(keys.size());
    // The store reads the keys in chunks of about kGetChunkBytes (TieredStore::GetMany:
    // a chunk's cold blocks in slab order, in large reads), kGetChunksAhead chunks at a
    // time on helper threads, while this thread hands the chunk before them to the path:
    // the disk stays busy across chunks and the path's copies overlap the reads
    // (docs/prefetch.md, "Cold Get"). Chunks, not the whole Get: a path that copies each
    // block out releases it before later chunks are read, so a Get larger than the hot
    // tier still promotes into hot slots rather than heap copies. A Get of one chunk
    // reads on this thread.
    const std::span<const std::string> all(keys);
    const size_t chunk_keys = static_cast<size_t>(std::clamp<uint64_t>(
        kGetChunkBytes / std::max<uint64_t>(1, ns.layout.BytesPerBlock()), 1, kGetChunkMaxKeys));
    using Refs = std::vector<absl::StatusOr<storage::BlockRef>>;
    std::deque<std::future<Refs>> ahead;
    size_t launched = 0;  // keys whose chunk is being read
    // The next chunk's blocks, with up to kGetChunksAhead chunks being read.
    auto next_chunk = [&]() -> Refs {
      while (ahead.size() < kGetChunksAhead && launched < keys.size()) {
        const std::span<const std::string> chunk =
            all.subspan(launched, std::min(chunk_keys, keys.size() - launched));
        launched += chunk.size();
        ahead.push_back(std::async(std::launch::async | std::launch::deferred,
                                   [this, &ns, chunk] { return store_->GetMany(ns.name, chunk); }));
      }
      Refs refs = ahead.front().get();
      ahead.pop_front();
      return refs;
    };
    for (size_t base = 0; base < keys.size();) {
      Refs refs = keys.size() <= chunk_keys ? store_->GetMany(ns.name, all) : next_chunk();
      for (size_t j = 0; j < refs.size(); ++j) {
        const size_t i = base + j;
        v1::GetBlockInfo* info = header->add_blocks();
        info->set_key(keys[i]);
        RETURN_IF_ERROR(LoadOne(ns.name, keys[i], std::move(refs[j]), static_cast<int>(i), info));
      }
      base += refs.size();
    }
    // The lease Lookup granted for these blocks has done its job once they are read.
    if (req_.lease_id() != 0) (void)store_->ReleaseLease(ns.name, req_.lease_id());
    return absl::OkStatus();
  }

  // Loads key i into `info` and hands its payload to sink_ (or items_, for the stream). A
  // missing or unreadable block leaves info.found false.
  absl::Status LoadOne(const std::string& ns, const std::string& key,
                       absl::StatusOr<storage::BlockRef> ref, int i, v1::GetBlockInfo* info) {
    if (!ref.ok()) return absl::IsNotFound(ref.status()) ? absl::OkStatus() : ref.status();
    // A compacted entry wraps its codec blob in a header of kept positions; this fills
    // info.positions (and codec) and returns the blob either way.
    absl::StatusOr<std::span<const uint8_t>> blob = DescribeStoredPayload(ref->payload(), info);
    absl::StatusOr<kv::EncodedInfo> parsed =
        blob.ok() ? kv::ParseHeader(*blob) : absl::StatusOr<kv::EncodedInfo>(blob.status());
    if (!parsed.ok()) {
      info->clear_positions();
      KVTIER_LOG(ERROR) << "namespace " << ns << " key " << KeyForMessage(key)
                        << ": stored blob is unreadable: " << parsed.status().message();
      return absl::OkStatus();
    }
    Item item;
    if (absl::Status s = SelectPayload(*ref, *blob, *parsed, i, &item); !s.ok()) {
      KVTIER_LOG(ERROR) << "namespace " << ns << " key " << KeyForMessage(key)
                        << ": cannot decode stored blob: " << s.message();
      info->clear_positions();
      return absl::OkStatus();
    }
    info->set_found(true);
    info->set_size(item.bytes.size());
    info->set_tier(TierToProto(ref->tier()));
    info->set_block_index(ref->block_index());
    info->set_codec(protocol::CodecToProto(parsed->codec));
    ASSIGN_OR_RETURN(const bool in_stream, sink_->Accept(i, {item.owner, item.bytes}, info));
    if (!in_stream) return absl::OkStatus();
    remaining_ += item.bytes.size();
    items_.push_back(std::move(item));
    return absl::OkStatus();
  }

  // Picks the bytes to answer key i with: the stored blob, the raw tail of an fp16/bf16
  // blob, or the blob decoded (into the sink's destination when it has one that fits).
  absl::Status SelectPayload(const storage::BlockRef& ref, std::span<const uint8_t> blob,
                             const kv::EncodedInfo& parsed, int i, Item* item) {
    if (req_.format() != v1::PAYLOAD_FORMAT_RAW) {
      item->owner = ref.owner();
      item->bytes = ref.payload();
      return absl::OkStatus();
    }
    if (IsRawCodec(parsed.codec) && parsed.encoded_bytes >= parsed.raw_bytes &&
        parsed.encoded_bytes == blob.size()) {
      // fp16/bf16 blobs are the header followed by the raw elements: serve the tail.
      item->owner = ref.owner();
      item->bytes = blob.subspan(parsed.encoded_bytes - parsed.raw_bytes);
      return absl::OkStatus();
    }
    std::shared_ptr<std::string> decoded;
    std::span<uint8_t> out = sink_->DecodeTarget(i, parsed.raw_bytes);
    if (out.data() == nullptr) {
      decoded = std::make_shared<std::string>(parsed.raw_bytes, '\0');
      out = std::span<uint8_t>(reinterpret_cast<uint8_t*>(decoded->data()), decoded->size());
    }
    RETURN_IF_ERROR(kv::Decode(blob, out));
    item->bytes = out;
    item->owner = std::move(decoded);
    return absl::OkStatus();
  }

  ServiceContext* const ctx_;
  storage::TieredStore* store_ = nullptr;
  Caller caller_;
  v1::GetRequest req_;
  std::unique_ptr<dataplane::GetSink> sink_;  // the payload path (dataplane/path.h)
  std::vector<Item> items_;                    // payloads for the stream
  uint64_t remaining_ = 0;                     // their bytes still to send in the stream

  friend absl::Status service::GetInline(ServiceContext* ctx, storage::TieredStore* store,
                                         const Caller& caller, v1::GetRequest request,
                                         v1::GetResponse* response);
};

class GetReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer>, private GetCore {
 public:
  GetReactor(ServiceContext* ctx, grpc::CallbackServerContext* context,
             const grpc::ByteBuffer* request)
      : GetCore(ctx), start_(NowMicros()) {
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
    if (!ctx_->executor->TrySchedule(caller_.tenant, [this] {
          v1::GetResponse header_msg;
          absl::Status s = Load(&header_msg);
          if (s.ok()) s = SerializeResponse(header_msg, &frame_);
          if (!s.ok()) return FinishAndRecord(protocol::ToGrpcStatus(s));
          // The path's payloads first (UCX: the header follows once the client has them).
          sink_->Deliver([this](absl::Status s) {
            if (!s.ok()) return FinishAndRecord(protocol::ToGrpcStatus(s));
            WriteFrame();
          });
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
    const uint64_t n = std::min<uint64_t>(remaining_, ctx_->limits.chunk_bytes);
    slices_.clear();
    uint8_t prefix[protocol::kMaxFramePrefixBytes];
    const size_t prefix_len = protocol::EncodeChunkPrefix(n, prefix);
    slices_.emplace_back(prefix, prefix_len);  // copies the few prefix bytes
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
    if (sink_ != nullptr) sink_->Close();
    Finish(s);
  }

  const int64_t start_;
  size_t item_idx_ = 0;
  size_t item_off_ = 0;
  std::vector<grpc::Slice> slices_;
  grpc::ByteBuffer frame_;
};

}  // namespace

grpc::ServerWriteReactor<grpc::ByteBuffer>* StartGet(ServiceContext* ctx,
                                                     grpc::CallbackServerContext* context,
                                                     const grpc::ByteBuffer* request) {
  return new GetReactor(ctx, context, request);
}

absl::Status GetInline(ServiceContext* ctx, storage::TieredStore* store, const Caller& caller,
                       v1::GetRequest request, v1::GetResponse* response) {
  GetCore core(ctx);
  core.store_ = store;
  core.caller_ = caller;
  core.req_ = std::move(request);
  absl::Status status = core.Load(response);
  if (status.ok() && !core.items_.empty()) {
    status = absl::InternalError("an inline Get's payload path left payloads for a stream");
  }
  if (status.ok()) {
    bool delivered = false;
    core.sink_->Deliver([&](absl::Status s) {
      status = std::move(s);
      delivered = true;
    });
    if (!delivered) status = absl::InternalError("an inline Get's payload path delivers later");
  }
  if (core.sink_ != nullptr) core.sink_->Close();
  return status;
}

}  // namespace kvtier::service
