// The C++ client's payload paths (client/client_paths.h), each a dataplane::ClientPath
// over Client::Impl's primitives: SocketCall (client_streams.cc), PutStream,
// GetShmAttempt, GetStreamAttempt, PutUcx / GetUcx (client_ucx.cc).
#include "client/client_paths.h"

#include <utility>

#include "client/client_impl.h"
#include "common/bulk_copy.h"

namespace kvtier::client {
namespace internal {

void AddPutResponse(const v1::PutResponse& response, PutResult* result) {
  result->blocks_stored += response.blocks_stored();
  result->bytes_stored += response.bytes_stored();
  result->block_bytes_stored.insert(result->block_bytes_stored.end(),
                                    response.block_bytes_stored().begin(),
                                    response.block_bytes_stored().end());
}

namespace {

using dataplane::After;

// Frees the call's staging copies and marks the shared-memory paths done for this call.
void EndStaging(std::optional<ShmStaging>* staging) {
  staging->reset();
  staging->emplace(nullptr);
}

// The outcome of a shared-memory attempt: a lost session drops the region (the server
// restarted) and the call goes on to the next path; anything else is the call's status.
template <typename Impl>
After AfterShm(Impl* impl, const ShmStaging& st, const absl::Status& status) {
  if (!Impl::IsLostSession(status)) return After::kReturn;
  impl->DropRegion(st.region);
  return After::kDropThenNext;
}

// The call's payloads staged in the region (blocks in it already are named in place,
// others copied into room allocated for them), or null when there is no region, UCX is
// preferred, the region lacks room, or the region was dropped since.
template <typename Impl>
ShmStaging* StagePut(Impl* impl, PutCall& call) {
  if (call.staging.has_value()) {
    return call.staging->complete && call.staging->region == impl->Region() ? &*call.staging
                                                                           : nullptr;
  }
  std::shared_ptr<SharedRegion> r = impl->PreferUcx() ? nullptr : impl->Region();
  if (r == nullptr) return nullptr;
  ShmStaging& st = call.staging.emplace(std::move(r));
  SharedRegion& region = *st.region;
  for (const PutBlock& b : call.blocks) {
    if (auto at = region.OffsetOf(b.payload.data(), b.payload.size())) {
      st.offsets.push_back(*at);  // a SharedBuffer: no copy
      continue;
    }
    auto at = b.payload.empty() ? std::optional<uint64_t>(0) : region.Allocate(b.payload.size());
    if (!at) {
      EndStaging(&call.staging);
      return nullptr;
    }
    if (!b.payload.empty()) {
      st.allocated.push_back(*at);
      common::BulkCopy(region.base() + *at, b.payload.data(), b.payload.size());
    }
    st.offsets.push_back(*at);
  }
  st.complete = true;
  return &st;
}

template <typename Impl>
class ShmSocketPut final : public dataplane::ClientPath<PutCall> {
 public:
  explicit ShmSocketPut(Impl* impl) : impl_(impl) {}
  std::string_view name() const override { return "shared-memory socket"; }
  After Try(PutCall& call, absl::Status* status) override {
    if (!impl_->options.shared_memory_socket_calls) return After::kNextPath;
    ShmStaging* st = StagePut(impl_, call);
    if (st == nullptr) return After::kNextPath;
    v1::PutResponse response;
    const std::string request =
        impl_->PutHeaderMessage(call.ns, call.blocks, call.format, st->region->session(),
                                st->offsets)
            .SerializeAsString();
    if (!impl_->SocketCall(*st->region, protocol::shm::FrameOp::kPut, request, call.deadline,
                           "Put", &response, status)) {
      return After::kNextPath;  // the gRPC stream naming the region goes next
    }
    if (status->ok()) AddPutResponse(response, call.result);
    const After after = AfterShm(impl_, *st, *status);
    EndStaging(&call.staging);
    return after;
  }

 private:
  Impl* const impl_;
};

template <typename Impl>
class ShmStreamPut final : public dataplane::ClientPath<PutCall> {
 public:
  explicit ShmStreamPut(Impl* impl) : impl_(impl) {}
  std::string_view name() const override { return "shared memory"; }
  After Try(PutCall& call, absl::Status* status) override {
    ShmStaging* st = StagePut(impl_, call);
    if (st == nullptr) return After::kNextPath;
    typename Impl::SliceRefs unused;
    *status = impl_->PutStream(call.ns, call.blocks, call.format, call.deadline, &unused,
                               call.result, st->region->session(), st->offsets);
    const After after = AfterShm(impl_, *st, *status);
    EndStaging(&call.staging);  // the staging copies go before any other path runs
    return after;
  }

 private:
  Impl* const impl_;
};

// UCX's outcome: a refusal (the server does not know the session, or the transfer failed
// before anything was stored) redoes the call on the next path; the channel is dropped
// when its endpoint is down or the session unknown.
template <typename Impl>
After AfterUcx(Impl* impl, const std::shared_ptr<UcxChannel>& u, const absl::Status& status) {
  if (!Impl::IsUcxFallback(status)) return After::kReturn;
  if (!u->healthy() || protocol::HasErrorReason(status, v1::UCX_SESSION_UNKNOWN)) {
    impl->DropUcx(u);
    return After::kDropThenNext;
  }
  return After::kNextPath;
}

template <typename Impl>
class UcxPutPath final : public dataplane::ClientPath<PutCall> {
 public:
  explicit UcxPutPath(Impl* impl) : impl_(impl) {}
  std::string_view name() const override { return "ucx"; }
  After Try(PutCall& call, absl::Status* status) override {
    std::shared_ptr<UcxChannel> u = impl_->Ucx();
    if (u == nullptr) return After::kNextPath;
    *status = impl_->PutUcx(u, call.ns, call.blocks, call.format, call.deadline, call.result);
    return AfterUcx(impl_, u, *status);
  }

 private:
  Impl* const impl_;
};

template <typename Impl>
class StreamPut final : public dataplane::ClientPath<PutCall> {
 public:
  explicit StreamPut(Impl* impl) : impl_(impl) {}
  std::string_view name() const override { return "stream"; }
  After Try(PutCall& call, absl::Status* status) override {
    typename Impl::SliceRefs refs;
    *status = impl_->PutStream(call.ns, call.blocks, call.format, call.deadline, &refs,
                               call.result);
    refs.WaitForNone();  // the chunk slices point into the caller's buffers
    return After::kReturn;
  }

 private:
  Impl* const impl_;
};

// Destinations in the region for every buffer of a Get (buffers that are SharedBuffers
// in place, others staged), named in call.request; null (request untouched) when there
// are no buffers, no region, UCX is preferred, or the region lacks room.
template <typename Impl>
ShmStaging* StageGet(Impl* impl, GetCall& call) {
  if (call.staging.has_value()) {
    return call.staging->complete && call.staging->region == impl->Region() ? &*call.staging
                                                                           : nullptr;
  }
  std::shared_ptr<SharedRegion> r =
      call.buffers.empty() || impl->PreferUcx() ? nullptr : impl->Region();
  if (r == nullptr) return nullptr;
  ShmStaging& st = call.staging.emplace(std::move(r));
  SharedRegion& region = *st.region;
  for (size_t i = 0; i < call.buffers.size(); ++i) {
    const std::span<uint8_t> buffer = call.buffers[i];
    std::optional<uint64_t> at = region.OffsetOf(buffer.data(), buffer.size());
    if (!at && !buffer.empty()) {
      at = region.Allocate(buffer.size());
      if (!at) {
        call.request.clear_shm_destinations();
        EndStaging(&call.staging);
        return nullptr;
      }
      st.allocated.push_back(*at);
      st.staged.emplace_back(i, *at);
    }
    v1::ShmRange* d = call.request.add_shm_destinations();
    d->set_offset(at.value_or(0));
    d->set_capacity(at ? buffer.size() : 0);
  }
  call.request.set_shm_session(region.session());
  st.complete = true;
  return &st;
}

// After a shared-memory Get answered: checks the header against the buffers, copies the
// staged blocks out, and frees the staging. A lost session drops the region and clears
// the request's region fields for the next path.
template <typename Impl>
After FinishShmGet(Impl* impl, GetCall& call, absl::Status* status) {
  ShmStaging& st = *call.staging;
  std::vector<v1::GetBlockInfo>& infos = *call.infos;
  if (status->ok() && infos.size() != call.keys.size()) {
    *status = absl::InternalError(absl::StrCat("Get: header lists ", infos.size(),
                                               " blocks for ", call.keys.size(), " keys"));
  }
  for (size_t i = 0; status->ok() && i < infos.size(); ++i) {
    if (infos[i].found() && infos[i].size() > call.buffers[i].size()) {
      *status = absl::InternalError(absl::StrCat("Get: the server wrote ", infos[i].size(),
                                                 " bytes into buffers[", i, "] of ",
                                                 call.buffers[i].size()));
    }
  }
  for (const auto& [i, at] : st.staged) {
    if (status->ok() && infos[i].found()) {
      common::BulkCopy(call.buffers[i].data(), st.region->base() + at, infos[i].size());
    }
  }
  const After after = AfterShm(impl, st, *status);
  EndStaging(&call.staging);
  if (after != After::kReturn) {
    call.request.clear_shm_session();
    call.request.clear_shm_destinations();
  }
  return after;
}

template <typename Impl>
class ShmSocketGet final : public dataplane::ClientPath<GetCall> {
 public:
  explicit ShmSocketGet(Impl* impl) : impl_(impl) {}
  std::string_view name() const override { return "shared-memory socket"; }
  After Try(GetCall& call, absl::Status* status) override {
    if (!impl_->options.shared_memory_socket_calls) return After::kNextPath;
    ShmStaging* st = StageGet(impl_, call);
    if (st == nullptr) return After::kNextPath;
    if (call.on_header != nullptr) (*call.on_header)();
    v1::GetResponse response;
    if (!impl_->SocketCall(*st->region, protocol::shm::FrameOp::kGet,
                           call.request.SerializeAsString(), call.deadline, "Get", &response,
                           status)) {
      return After::kNextPath;  // the gRPC stream naming the region goes next
    }
    if (status->ok()) {
      call.infos->assign(response.header().blocks().begin(), response.header().blocks().end());
    }
    return FinishShmGet(impl_, call, status);
  }

 private:
  Impl* const impl_;
};

template <typename Impl>
class ShmStreamGet final : public dataplane::ClientPath<GetCall> {
 public:
  explicit ShmStreamGet(Impl* impl) : impl_(impl) {}
  std::string_view name() const override { return "shared memory"; }
  After Try(GetCall& call, absl::Status* status) override {
    if (StageGet(impl_, call) == nullptr) return After::kNextPath;
    if (call.on_header != nullptr) (*call.on_header)();
    *status = impl_->Call(
        "Get", 0, true,
        [&](grpc::ClientContext* ctx, typename Impl::Channel& ch) {
          return impl_->GetShmAttempt(ctx, ch, call.request, call.infos);
        },
        false, call.deadline);
    return FinishShmGet(impl_, call, status);
  }

 private:
  Impl* const impl_;
};

template <typename Impl>
class UcxGetPath final : public dataplane::ClientPath<GetCall> {
 public:
  explicit UcxGetPath(Impl* impl) : impl_(impl) {}
  std::string_view name() const override { return "ucx"; }
  After Try(GetCall& call, absl::Status* status) override {
    std::shared_ptr<UcxChannel> u = impl_->Ucx();
    if (u == nullptr) return After::kNextPath;
    *status = impl_->GetUcx(u, call.request, *call.destination, call.keys.size(), call.deadline,
                            call.infos);
    return AfterUcx(impl_, u, *status);
  }

 private:
  Impl* const impl_;
};

template <typename Impl>
class StreamGet final : public dataplane::ClientPath<GetCall> {
 public:
  explicit StreamGet(Impl* impl) : impl_(impl) {}
  std::string_view name() const override { return "stream"; }
  After Try(GetCall& call, absl::Status* status) override {
    *status = impl_->Call(
        "Get", 0, true,
        [&](grpc::ClientContext* ctx, typename Impl::Channel& ch) {
          return impl_->GetStreamAttempt(ctx, ch, call.request, *call.destination,
                                         call.keys.size(), call.infos, call.on_header);
        },
        false, call.deadline);
    return After::kReturn;
  }

 private:
  Impl* const impl_;
};

}  // namespace
}  // namespace internal

internal::PutPaths Client::Impl::MakePutPaths() {
  internal::PutPaths paths;
  paths.push_back(std::make_unique<internal::ShmSocketPut<Impl>>(this));
  paths.push_back(std::make_unique<internal::ShmStreamPut<Impl>>(this));
  paths.push_back(std::make_unique<internal::UcxPutPath<Impl>>(this));
  paths.push_back(std::make_unique<internal::StreamPut<Impl>>(this));
  return paths;
}

internal::GetPaths Client::Impl::MakeGetPaths() {
  internal::GetPaths paths;
  paths.push_back(std::make_unique<internal::ShmSocketGet<Impl>>(this));
  paths.push_back(std::make_unique<internal::ShmStreamGet<Impl>>(this));
  paths.push_back(std::make_unique<internal::UcxGetPath<Impl>>(this));
  paths.push_back(std::make_unique<internal::StreamGet<Impl>>(this));
  return paths;
}

}  // namespace kvtier::client
