#include "client/ucx_channel.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "ucx/am_protocol.h"

namespace kvtier::client {
namespace {

namespace tp = ::kvtier::ucx;

absl::Time ToAbsl(UcxChannel::Deadline d) { return absl::FromChrono(d); }

}  // namespace

// One call waiting for its reply frame.
struct UcxChannel::PendingCall {
  common::Mutex mu;
  bool answered ABSL_GUARDED_BY(mu) = false;
  std::string reply ABSL_GUARDED_BY(mu);
  absl::Status status ABSL_GUARDED_BY(mu);  // the endpoint's failure
};

absl::StatusOr<std::unique_ptr<UcxChannel>> UcxChannel::Open(const std::string& host,
                                                             uint16_t port,
                                                             std::string_view instance_id,
                                                             const std::string& transports,
                                                             Deadline deadline) {
  if (instance_id.size() != tp::kInstanceBytes) {
    return absl::UnavailableError("ucx: the server's offer has no valid instance id");
  }
  std::unique_ptr<UcxChannel> c(new UcxChannel());
  tp::WorkerOptions wo;
  wo.transports = transports;
  auto worker = tp::Worker::Create(wo);
  if (!worker.ok()) return worker.status();
  c->worker_ = *std::move(worker);
  UcxChannel* self = c.get();
  c->worker_->SetHandler(tp::kAmHelloReply, [self](tp::EndpointId, std::string_view header,
                                                   tp::Incoming) {
    auto reply = tp::ParseHeader<tp::HelloReplyHeader>(header);
    common::MutexLock lock(&self->mu_);
    self->hello_done_ = true;
    if (reply && reply->ok == 1 &&
        std::memcmp(reply->magic, tp::kAmMagic, sizeof(tp::kAmMagic)) == 0) {
      self->hello_session_.assign(reinterpret_cast<const char*>(reply->session),
                                  tp::kSessionBytes);
      self->serves_calls_ = (reply->features & tp::kFeatureCalls) != 0;
    }
  });
  c->worker_->SetHandler(tp::kAmCallReply, [self](tp::EndpointId, std::string_view header,
                                                  tp::Incoming) { self->OnCallReply(header); });
  c->worker_->SetHandler(tp::kAmGetData,
                         [self](tp::EndpointId, std::string_view header, tp::Incoming in) {
                           self->OnGetData(header, std::move(in));
                         });
  c->worker_->SetErrorHandler([self](tp::EndpointId, absl::Status) { self->OnEndpointError(); });
  auto ep = c->worker_->Connect(host, port);
  if (!ep.ok()) return ep.status();
  c->ep_ = *ep;
  tp::HelloHeader hello{};
  std::memcpy(hello.magic, tp::kAmMagic, sizeof(hello.magic));
  std::memcpy(hello.instance, instance_id.data(), tp::kInstanceBytes);
  c->worker_->Send(c->ep_, tp::kAmHello, tp::HeaderBytes(hello), nullptr, 0, [](absl::Status) {});
  common::MutexLock lock(&c->mu_);
  auto answered = +[](UcxChannel* ch) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return ch->hello_done_ || !ch->healthy_.load();
  };
  if (!c->mu_.AwaitWithDeadline(common::Condition(answered, c.get()), ToAbsl(deadline)) ||
      c->hello_session_.empty()) {
    return absl::UnavailableError(absl::StrCat(
        "ucx: no session from ", host, ":", port,
        c->hello_done_ ? " (the server refused: another server, or too many sessions)"
                       : " (no answer: unreachable, or the transports do not match)"));
  }
  c->session_ = c->hello_session_;
  return c;
}

UcxChannel::~UcxChannel() {
  // The worker closes the endpoint and joins its thread; pending transfers are failed
  // by their owners before (Wait / EndGet return only when nothing is in flight).
  worker_.reset();
}

void UcxChannel::Fail(const absl::Status& status) {
  healthy_.store(false);
  common::MutexLock lock(&mu_);
  for (auto& [id, t] : gets_) {
    common::MutexLock tl(&t->mu);
    if (t->status.ok()) t->status = status;
  }
  for (auto& [id, c] : calls_) {
    common::MutexLock cl(&c->mu);
    if (c->status.ok()) c->status = status;
  }
}

absl::StatusOr<protocol::shm::CallReply> UcxChannel::Call(protocol::shm::FrameOp op,
                                                          std::string_view request,
                                                          Deadline deadline) {
  const uint64_t id = next_call_.fetch_add(1);
  const int64_t deadline_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline.time_since_epoch()).count();
  std::string frame = protocol::shm::EncodeFrame(op, id, deadline_ms, request);
  if (frame.size() > max_call_frame()) {
    return absl::InvalidArgumentError(absl::StrCat("ucx: a call frame of ", frame.size(),
                                                   " bytes exceeds UCX's limit of ",
                                                   max_call_frame()));
  }
  auto call = std::make_shared<PendingCall>();
  {
    common::MutexLock lock(&mu_);
    calls_[id] = call;
  }
  if (!healthy_.load()) {
    common::MutexLock cl(&call->mu);
    call->status = absl::UnavailableError("ucx: the endpoint to the server failed");
  }
  worker_->Send(ep_, tp::kAmCall, std::move(frame), nullptr, 0, [](absl::Status) {});
  absl::StatusOr<protocol::shm::CallReply> result;
  {
    common::MutexLock cl(&call->mu);
    auto ready = +[](PendingCall* c) ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return c->answered || !c->status.ok();
    };
    if (!call->mu.AwaitWithDeadline(common::Condition(ready, call.get()), ToAbsl(deadline))) {
      result = absl::DeadlineExceededError("ucx: no reply to the call before the deadline");
    } else if (call->answered) {
      result = protocol::shm::DecodeReply(call->reply, id, "ucx");
    } else {
      result = call->status;
    }
  }
  common::MutexLock lock(&mu_);
  calls_.erase(id);
  return result;
}

void UcxChannel::OnCallReply(std::string_view frame) {
  protocol::shm::ReplyHeader r{};
  if (frame.size() < sizeof(r)) return;  // dropped: its call runs into its deadline
  std::memcpy(&r, frame.data(), sizeof(r));
  std::shared_ptr<PendingCall> call;
  {
    common::MutexLock lock(&mu_);
    auto it = calls_.find(r.request_id);
    if (it == calls_.end()) return;  // a call that gave up: dropped
    call = it->second;
  }
  common::MutexLock cl(&call->mu);
  call->reply.assign(frame);
  call->answered = true;
}

void UcxChannel::OnEndpointError() {
  Fail(absl::UnavailableError("ucx: the endpoint to the server failed"));
}

std::shared_ptr<UcxChannel::PutSends> UcxChannel::SendPut(
    uint64_t transfer, std::span<const std::span<const uint8_t>> payloads) {
  auto sends = std::make_shared<PutSends>();
  sends->channel = this;
  {
    common::MutexLock lock(&sends->mu);
    sends->left = payloads.size();
  }
  for (size_t i = 0; i < payloads.size(); ++i) {
    tp::PutDataHeader h{};
    std::memcpy(h.session, session_.data(), tp::kSessionBytes);
    h.transfer = transfer;
    h.index = static_cast<uint32_t>(i);
    worker_->Send(ep_, tp::kAmPutData, tp::HeaderBytes(h), payloads[i].data(), payloads[i].size(),
                  [sends](absl::Status s) {
                    common::MutexLock lock(&sends->mu);
                    if (!s.ok() && sends->status.ok()) sends->status = s;
                    --sends->left;
                  });
  }
  return sends;
}

absl::Status UcxChannel::PutSends::Wait(Deadline deadline) {
  common::MutexLock lock(&mu);
  auto done = +[](PutSends* s) ABSL_NO_THREAD_SAFETY_ANALYSIS { return s->left == 0; };
  if (!mu.AwaitWithDeadline(common::Condition(done, this), ToAbsl(deadline))) {
    // UCX may still read the caller's memory: close the endpoint, which ends every send.
    channel->healthy_.store(false);
    channel->worker_->Close(channel->ep_);
    mu.Await(common::Condition(done, this));
    return absl::UnavailableError("ucx: the Put's payloads were not taken before the deadline");
  }
  return status;
}

std::shared_ptr<UcxChannel::GetTransfer> UcxChannel::ExpectGet(
    uint64_t transfer, protocol::GetStreamParser::DestinationFn destination) {
  auto t = std::make_shared<GetTransfer>();
  t->destination = std::move(destination);
  common::MutexLock lock(&mu_);
  gets_[transfer] = t;
  if (!healthy_.load()) {
    common::MutexLock tl(&t->mu);
    t->status = absl::UnavailableError("ucx: the endpoint to the server failed");
  }
  return t;
}

void UcxChannel::EndGet(uint64_t transfer, const std::shared_ptr<GetTransfer>& t) {
  {
    common::MutexLock lock(&mu_);
    gets_.erase(transfer);
  }
  common::MutexLock tl(&t->mu);
  auto idle = +[](GetTransfer* g) ABSL_NO_THREAD_SAFETY_ANALYSIS { return g->in_flight == 0; };
  if (!t->mu.AwaitWithTimeout(common::Condition(idle, t.get()), absl::Seconds(5))) {
    // A receive that does not finish: end the endpoint so it cannot write any more.
    t->mu.Unlock();
    healthy_.store(false);
    worker_->Close(ep_);
    t->mu.Lock();
    t->mu.Await(common::Condition(idle, t.get()));
  }
}

absl::Status UcxChannel::GetTransfer::Wait(size_t expected, Deadline deadline) {
  common::MutexLock lock(&mu);
  struct Arg {
    GetTransfer* t;
    size_t expected;
  } arg{this, expected};
  auto done = +[](Arg* a) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return !a->t->status.ok() || a->t->landed >= a->expected;
  };
  if (!mu.AwaitWithDeadline(common::Condition(done, &arg), ToAbsl(deadline))) {
    return absl::DeadlineExceededError(absl::StrCat("ucx: ", landed, " of ", expected,
                                                    " payloads arrived before the deadline"));
  }
  return status;
}

void UcxChannel::OnGetData(std::string_view header, tp::Incoming in) {
  auto h = tp::ParseHeader<tp::GetDataHeader>(header);
  if (!h) return;
  std::shared_ptr<GetTransfer> t;
  {
    common::MutexLock lock(&mu_);
    auto it = gets_.find(h->transfer);
    if (it == gets_.end()) return;  // stale (an ended Get): dropped
    t = it->second;
  }
  kvtier::v1::GetBlockInfo info;
  info.set_size(in.length());
  info.set_found(true);
  absl::StatusOr<std::span<uint8_t>> dest = t->destination(h->index, info);
  common::MutexLock tl(&t->mu);
  if (!dest.ok() || dest->size() < in.length()) {
    if (t->status.ok()) {
      t->status = dest.ok() ? absl::OutOfRangeError("ucx: a payload exceeds its destination")
                            : dest.status();
    }
    return;  // dropped
  }
  ++t->in_flight;
  in.Receive(dest->data(), [t](absl::Status s) {
    common::MutexLock lock(&t->mu);
    --t->in_flight;
    if (s.ok()) {
      ++t->landed;
    } else if (t->status.ok()) {
      t->status = s;
    }
  });
}

}  // namespace kvtier::client
