#include "service/payload_paths.h"

#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/bulk_copy.h"
#include "common/status_macros.h"
#include "service/request_checks.h"
#include "service/tenant_quotas.h"
#include "service/ucx_put.h"

namespace kvtier::service {
namespace {

// Shared memory, Put: the payloads are in the client's region already; the blocks view it
// (the store copies them once, into the hot tier) and the server buffers nothing.
class ShmPutSource final : public dataplane::PutSource {
 public:
  ShmPutSource(ServiceContext* ctx, const Caller& caller, const v1::PutHeader& header)
      : ctx_(ctx), caller_(caller), header_(header) {}

  absl::Status Resolve() override {
    ASSIGN_OR_RETURN(region_,
                     FindShmSession(*ctx_, header_.shm_session(), "header.shm_session", caller_));
    if (!header_.ucx_session().empty()) {
      return absl::InvalidArgumentError(
          "header: shm_session and ucx_session are exclusive (one data path per Put)");
    }
    return absl::OkStatus();
  }
  absl::Status CheckBlock(int i, const v1::PutBlock& b) const override {
    if (!region_->Contains(b.shm_offset(), b.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "header.blocks[", i, "].shm_offset ", b.shm_offset(), " + size ", b.size(),
          " lies outside the shared-memory region of ", region_->size(), " bytes"));
    }
    return absl::OkStatus();
  }
  bool InStream() const override { return false; }
  absl::Status ChunkError() const override {
    return absl::InvalidArgumentError(
        "chunk: a Put with header.shm_session carries its payloads in shared memory, not in "
        "chunk messages");
  }
  absl::Status Open(const dataplane::PutOpen&, std::vector<std::string_view>* views,
                    std::function<void(absl::Status)> arrived) override {
    views->resize(header_.blocks_size());
    for (int i = 0; i < header_.blocks_size(); ++i) {
      const v1::PutBlock& b = header_.blocks(i);
      (*views)[i] = std::string_view(
          reinterpret_cast<const char*>(region_->base() + b.shm_offset()), b.size());
    }
    arrived(absl::OkStatus());
    return absl::OkStatus();
  }
  void Close() override { region_.reset(); }

 private:
  ServiceContext* const ctx_;
  const Caller caller_;
  const v1::PutHeader& header_;
  std::shared_ptr<dataplane::ShmRegion> region_;
};

// UCX, Put: the payloads arrive as rendezvous messages into landing room taken in the
// store (service/ucx_put.h).
class UcxPutSource final : public dataplane::PutSource {
 public:
  UcxPutSource(ServiceContext* ctx, const Caller& caller, const v1::PutHeader& header)
      : ctx_(ctx), caller_(caller), header_(header) {}

  absl::Status Resolve() override {
    return CheckUcxSession(*ctx_, caller_, header_.ucx_session(), "header.ucx_session");
  }
  bool OpensOnExecutor() const override { return true; }
  bool InStream() const override { return false; }
  bool HoldsServerMemory() const override { return true; }
  absl::Status ChunkError() const override {
    return absl::InvalidArgumentError(
        "chunk: a Put with header.ucx_session carries its payloads over UCX, not in chunk "
        "messages");
  }
  absl::Status Open(const dataplane::PutOpen& open, std::vector<std::string_view>* views,
                    std::function<void(absl::Status)> arrived) override {
    auto put = UcxPut::Create(ctx_, open.store, open.ns, header_, open.in_place, open.prefix);
    if (!put.ok()) return WithTenantQuotaDetail(put.status());
    put_ = *std::move(put);
    views->resize(header_.blocks_size());
    for (size_t i = 0; i < views->size(); ++i) (*views)[i] = put_->block(i);
    put_->Start([complete = complete_, arrived = std::move(arrived)](absl::Status s) {
      complete->store(s.ok());
      arrived(std::move(s));
    });
    return absl::OkStatus();
  }
  storage::PutReservation* Reservation(int i) const override {
    return put_ != nullptr ? put_->reservation(static_cast<size_t>(i)) : nullptr;
  }
  // A transfer still in flight ends (its buffers go with it); its payload messages that
  // come later are dropped. A transfer whose every payload arrived has ended already.
  void Close() override {
    if (!closed_ && !complete_->load()) {
      EndUcxPut(*ctx_, header_.ucx_session(), header_.ucx_transfer());
    }
    closed_ = true;
  }

 private:
  ServiceContext* const ctx_;
  const Caller caller_;
  const v1::PutHeader& header_;
  std::unique_ptr<UcxPut> put_;
  // Set on the UCX progress thread when every payload arrived, before `arrived` runs.
  std::shared_ptr<std::atomic<bool>> complete_ = std::make_shared<std::atomic<bool>>(false);
  bool closed_ = false;
};

// Shared memory, Get: each payload is copied into the client's region at its
// destination (or decoded there); the stream carries the header alone.
class ShmGetSink final : public dataplane::GetSink {
 public:
  ShmGetSink(ServiceContext* ctx, const Caller& caller, const v1::GetRequest& req)
      : ctx_(ctx), caller_(caller), req_(req) {}

  absl::Status Resolve(size_t num_keys) override {
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
    if (!req_.ucx_session().empty()) {
      return absl::InvalidArgumentError(
          "shm_session and ucx_session are exclusive (one data path per Get)");
    }
    return absl::OkStatus();
  }
  std::span<uint8_t> DecodeTarget(int i, uint64_t bytes) override {
    const v1::ShmRange& d = req_.shm_destinations(i);
    if (bytes > d.capacity()) return {};
    return std::span<uint8_t>(region_->base() + d.offset(), bytes);
  }
  absl::StatusOr<bool> Accept(int i, dataplane::GetPayload payload,
                              v1::GetBlockInfo* info) override {
    const v1::ShmRange& d = req_.shm_destinations(i);
    if (payload.bytes.size() > d.capacity()) {
      return absl::OutOfRangeError(absl::StrCat("shm_destinations[", i, "] holds ", d.capacity(),
                                                " bytes, block ", KeyForMessage(info->key()),
                                                " needs ", payload.bytes.size()));
    }
    uint8_t* to = region_->base() + d.offset();
    if (payload.bytes.data() != to) {
      common::BulkCopy(to, payload.bytes.data(), payload.bytes.size());
    }
    return false;
  }
  void Close() override { region_.reset(); }

 private:
  ServiceContext* const ctx_;
  const Caller caller_;
  const v1::GetRequest& req_;
  std::shared_ptr<dataplane::ShmRegion> region_;
};

// UCX, Get: the payloads go as active messages (dataplane/ucx_server.h), and the header
// follows once the client has them all.
class UcxGetSink final : public dataplane::GetSink {
 public:
  UcxGetSink(ServiceContext* ctx, const Caller& caller, const v1::GetRequest& req)
      : ctx_(ctx), caller_(caller), req_(req) {}

  absl::Status Resolve(size_t) override {
    return CheckUcxSession(*ctx_, caller_, req_.ucx_session(), "ucx_session");
  }
  absl::StatusOr<bool> Accept(int i, dataplane::GetPayload payload,
                              v1::GetBlockInfo* info) override {
    info->set_ucx(true);
    out_.push_back({static_cast<uint32_t>(i), payload.bytes, std::move(payload.owner)});
    return false;
  }
  void Deliver(std::function<void(absl::Status)> done) override {
    ctx_->ucx->SendGet(req_.ucx_session(), req_.ucx_transfer(), std::move(out_), std::move(done));
    out_.clear();
  }
  void Close() override { out_.clear(); }

 private:
  ServiceContext* const ctx_;
  const Caller caller_;
  const v1::GetRequest& req_;
  std::vector<dataplane::UcxOutgoing> out_;
};

}  // namespace

std::unique_ptr<dataplane::PutSource> PutSourceFor(ServiceContext* ctx, const Caller& caller,
                                                   const v1::PutHeader& header) {
  if (!header.shm_session().empty()) return std::make_unique<ShmPutSource>(ctx, caller, header);
  if (!header.ucx_session().empty()) return std::make_unique<UcxPutSource>(ctx, caller, header);
  return std::make_unique<dataplane::StreamPutSource>();
}

std::unique_ptr<dataplane::GetSink> GetSinkFor(ServiceContext* ctx, const Caller& caller,
                                               const v1::GetRequest& request) {
  if (!request.shm_session().empty()) return std::make_unique<ShmGetSink>(ctx, caller, request);
  if (!request.ucx_session().empty()) return std::make_unique<UcxGetSink>(ctx, caller, request);
  return std::make_unique<dataplane::StreamGetSink>();
}

bool NamesSharedRegion(const v1::PutHeader& header) { return !header.shm_session().empty(); }
bool NamesSharedRegion(const v1::GetRequest& request) { return !request.shm_session().empty(); }

}  // namespace kvtier::service
