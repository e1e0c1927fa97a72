#include "service/get_reactor.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/bulk_copy.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "protocol/convert.h"
#include "protocol/error_detail.h"
#include "protocol/wire.h"
#include "service/admission.h"
#include "service/compact.h"
#include "service/config.h"
#include "service/request_checks.h"
#include "service/ucx_put.h"
#include "storage/kv/codec.h"

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
// the shared-memory socket): the request checked, every key read, and each payload either
// copied into the client's region or kept in items_ for the stream.
class GetCore {
 protected:
  explicit GetCore(ServiceContext* ctx) : ctx_(ctx) {}

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
    if (!req_.shm_session().empty()) RETURN_IF_ERROR(OpenDestinations(keys.size()));
    if (!req_.ucx_session().empty()) {
      if (region_ != nullptr) {
        return absl::InvalidArgumentError(
            "shm_session and ucx_session are exclusive (one data path per Get)");
      }
      RETURN_IF_ERROR(CheckUcxSession(*ctx_, caller_, req_.ucx_session(), "ucx_session"));
      ucx_ = true;
    }
    v1::GetHeader* header = header_msg->mutable_header();
    items_.reserve(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      v1::GetBlockInfo* info = header->add_blocks();
      info->set_key(keys[i]);
      RETURN_IF_ERROR(LoadOne(ns.name, keys[i], static_cast<int>(i), info));
    }
    // The lease Lookup granted for these blocks has done its job once they are read.
    if (req_.lease_id() != 0) (void)store_->ReleaseLease(ns.name, req_.lease_id());
    return absl::OkStatus();
  }

  // Finds the request's shm session (region_) and checks one destination per key, each
  // inside the region.
  absl::Status OpenDestinations(size_t num_keys) {
    ASSIGN_OR_RETURN(region_, FindShmSession(*ctx_, req_.shm_session(), "shm_session", caller_));
    if (req_.shm_destinations_size() != static_cast<int>(num_keys)) {
      return absl::InvalidArgumentError(absl::StrCat("shm_destinations: ",
                                                     req_.shm_destinations_size(), " ranges for ",
                                                     num_keys, " keys"));
    }
    for (int i = 0; i < req_.shm_destinations_size(); ++i) {
      const v1::ShmRange& d = req_.shm_destinations(i);
      if (!region_->Contains(d.offset(), d.capacity())) {
        return absl::InvalidArgumentError(absl::StrCat(
            "shm_destinations[", i, "] (offset ", d.offset(), ", capacity ", d.capacity(),
            ") lies outside the shared-memory region of ", region_->size(), " bytes"));
      }
    }
    return absl::OkStatus();
  }

  // Loads key i into `info` and items_ (or the client's region). A missing or unreadable
  // block leaves info.found false.
  absl::Status LoadOne(const std::string& ns, const std::string& key, int i,
                       v1::GetBlockInfo* info) {
    auto ref = store_->Get(ns, key);
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
    if (region_ != nullptr) {
      // Same-node client: one copy into its region, nothing in the stream.
      const v1::ShmRange& d = req_.shm_destinations(i);
      if (item.bytes.size() > d.capacity()) {
        return absl::OutOfRangeError(absl::StrCat("shm_destinations[", i, "] holds ",
                                                  d.capacity(), " bytes, block ",
                                                  KeyForMessage(key), " needs ",
                                                  item.bytes.size()));
      }
      uint8_t* to = region_->base() + d.offset();
      if (item.bytes.data() != to) common::BulkCopy(to, item.bytes.data(), item.bytes.size());
      return absl::OkStatus();
    }
    item.index = static_cast<uint32_t>(i);
    if (ucx_) {
      info->set_ucx(true);
    } else {
      remaining_ += item.bytes.size();
    }
    items_.push_back(std::move(item));
    return absl::OkStatus();
  }

  // Picks the bytes to answer key i with: the stored blob, the raw tail of an fp16/bf16
  // blob, or the blob decoded (into the client's region when it fits there).
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
    const v1::ShmRange* dest = region_ != nullptr ? &req_.shm_destinations(i) : nullptr;
    std::shared_ptr<std::string> decoded;
    std::span<uint8_t> out;
    if (dest != nullptr && parsed.raw_bytes <= dest->capacity()) {
      out = std::span<uint8_t>(region_->base() + dest->offset(), parsed.raw_bytes);
    } else {
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
  std::shared_ptr<ShmRegion> region_;  // req_.shm_session's region, or null
  bool ucx_ = false;                   // payloads go over UCX (req_.ucx_session)
  std::vector<Item> items_;            // payloads for the stream (or UCX)
  uint64_t remaining_ = 0;             // their bytes still to send in the stream

  friend absl::Status service::GetFromSharedMemory(ServiceContext* ctx, storage::TieredStore* store,
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
          if (ucx_) return SendOverUcx();
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
  // UCX client (req_.ucx_session): the payloads go as active messages, and the header
  // follows once the client has them all (service/ucx_server.h).
  void SendOverUcx() {
    std::vector<UcxOutgoing> out;
    out.reserve(items_.size());
    for (Item& item : items_) out.push_back({item.index, item.bytes, std::move(item.owner)});
    items_.clear();
    ctx_->ucx->SendGet(req_.ucx_session(), req_.ucx_transfer(), std::move(out),
                       [this](absl::Status s) {
                         if (!s.ok()) return FinishAndRecord(protocol::ToGrpcStatus(s));
                         WriteFrame();
                       });
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
    region_.reset();
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

absl::Status GetFromSharedMemory(ServiceContext* ctx, storage::TieredStore* store,
                                 const Caller& caller, v1::GetRequest request,
                                 v1::GetResponse* response) {
  if (request.shm_session().empty()) {
    return absl::InvalidArgumentError(
        "shm_session is empty: a Get over the shared-memory socket returns its payloads in "
        "the session's region");
  }
  GetCore core(ctx);
  core.store_ = store;
  core.caller_ = caller;
  core.req_ = std::move(request);
  return core.Load(response);
}

}  // namespace kvtier::service
