#include "dataplane/ucx_server.h"

#include <chrono>
#include <cstring>
#include <future>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "kvtier/v1/kvtier.pb.h"
#include "protocol/error_detail.h"
#include "ucx/am_protocol.h"

namespace kvtier::dataplane {
namespace {

namespace tp = ::kvtier::ucx;

std::string RandomBytes(size_t n) {
  std::random_device rd;
  std::string out(n, '\0');
  for (char& c : out) c = static_cast<char>(rd());
  return out;
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

absl::Status TransferFailed(std::string_view why) {
  return protocol::WithErrorDetail(
      absl::UnavailableError(absl::StrCat("ucx transfer failed: ", Sv(why))),
      v1::UCX_TRANSFER_FAILED, "");
}

}  // namespace

// One expected Put transfer (progress thread only).
struct UcxServer::Transfer {
  std::shared_ptr<UcxPutBuffers> buffers;
  std::function<void(absl::Status)> done;
  std::vector<bool> seen;
  size_t landed = 0;
  int64_t deadline_ms = 0;
  bool failed = false;
};

UcxServer::UcxServer(const UcxServerOptions& options)
    : options_(options), instance_id_(RandomBytes(tp::kInstanceBytes)) {}

absl::StatusOr<std::unique_ptr<UcxServer>> UcxServer::Start(const UcxServerOptions& options) {
  std::unique_ptr<UcxServer> s(new UcxServer(options));
  tp::WorkerOptions wo;
  wo.transports = options.transports;
  auto worker = tp::Worker::Create(wo);
  if (!worker.ok()) return worker.status();
  s->worker_ = *std::move(worker);
  UcxServer* self = s.get();
  s->worker_->SetHandler(tp::kAmHello, [self](tp::EndpointId from, std::string_view header,
                                              tp::Incoming) { self->OnHello(from, header); });
  s->worker_->SetHandler(tp::kAmPutData,
                         [self](tp::EndpointId from, std::string_view header, tp::Incoming in) {
                           self->OnPutData(from, header, std::move(in));
                         });
  s->worker_->SetHandler(tp::kAmCall, [self](tp::EndpointId from, std::string_view header,
                                             tp::Incoming) { self->OnCall(from, header); });
  s->worker_->SetErrorHandler(
      [self](tp::EndpointId ep, const absl::Status&) { self->OnEndpointError(ep); });
  s->worker_->SetTickHandler([self] { self->OnTick(); });
  auto port = s->worker_->Listen(options.listen_address, options.port);
  if (!port.ok()) return port.status();
  return s;
}

UcxServer::~UcxServer() {
  Stop();
  worker_.reset();
}

void UcxServer::Stop() {
  std::promise<void> cleared;
  worker_->Post([this, &cleared] {
    stopped_ = true;
    std::vector<TransferKey> keys;
    for (const auto& [k, t] : transfers_) keys.push_back(k);
    for (const TransferKey& k : keys) {
      Complete(k, absl::CancelledError("ucx: the server is shutting down"));
    }
    early_.clear();
    early_count_ = 0;
    cleared.set_value();
  });
  cleared.get_future().wait();
}

std::string UcxServer::advertised_host() const {
  const std::string& a = options_.listen_address;
  if (a.empty() || a == "0.0.0.0" || a == "::" || a == "[::]") return "";
  return a;
}

size_t UcxServer::session_count() const {
  common::MutexLock lock(&mu_);
  return sessions_.size();
}

absl::Status UcxServer::CheckSession(std::string_view session, std::string_view identity,
                                     std::string_view field) {
  {
    common::MutexLock lock(&mu_);
    auto it = sessions_.find(Sv(session));
    if (it != sessions_.end()) {
      if (it->second.identity.empty()) it->second.identity = std::string(identity);
      if (it->second.identity == identity) return absl::OkStatus();
    }
  }
  return protocol::WithErrorDetail(
      absl::FailedPreconditionError(absl::StrCat(
          Sv(field), " names no UCX session of this caller on this server (closed, another "
          "client's, or the server restarted): reconnect, or send the payloads in the stream")),
      v1::UCX_SESSION_UNKNOWN, field);
}

std::optional<std::string> UcxServer::BoundIdentity(std::string_view session) const {
  common::MutexLock lock(&mu_);
  auto it = sessions_.find(Sv(session));
  if (it == sessions_.end()) return std::nullopt;
  return it->second.identity;
}

void UcxServer::OnCall(tp::EndpointId from, std::string_view frame) {
  if (!options_.serve_call || stopped_) return;  // dropped: the client's deadline ends it
  auto own = session_of_ep_.find(from);
  options_.serve_call(own == session_of_ep_.end() ? std::string() : own->second,
                      std::string(frame), [this, from](std::string reply) {
                        if (reply.size() > max_call_frame()) return;
                        worker_->Send(from, tp::kAmCallReply, std::move(reply), nullptr, 0,
                                      [](absl::Status) {});
                      });
}

void UcxServer::OnHello(tp::EndpointId from, std::string_view header) {
  auto hello = tp::ParseHeader<tp::HelloHeader>(header);
  tp::HelloReplyHeader reply{};
  std::memcpy(reply.magic, tp::kAmMagic, sizeof(reply.magic));
  std::string session;
  if (hello && std::memcmp(hello->magic, tp::kAmMagic, sizeof(tp::kAmMagic)) == 0 &&
      std::memcmp(hello->instance, instance_id_.data(), tp::kInstanceBytes) == 0 &&
      !session_of_ep_.contains(from)) {
    common::MutexLock lock(&mu_);
    if (sessions_.size() < options_.max_sessions) {
      session = RandomBytes(tp::kSessionBytes);
      sessions_[session] = Session{from, ""};
    }
  }
  if (!session.empty()) {
    session_of_ep_[from] = session;
    reply.ok = 1;
    reply.features = options_.serve_call ? tp::kFeatureCalls : 0;
    std::memcpy(reply.session, session.data(), tp::kSessionBytes);
  }
  worker_->Send(from, tp::kAmHelloReply, tp::HeaderBytes(reply), nullptr, 0, [](absl::Status) {});
}

void UcxServer::OnPutData(tp::EndpointId from, std::string_view header, tp::Incoming in) {
  auto h = tp::ParseHeader<tp::PutDataHeader>(header);
  if (!h) return;  // dropped
  std::string session(reinterpret_cast<const char*>(h->session), tp::kSessionBytes);
  auto own = session_of_ep_.find(from);
  if (own == session_of_ep_.end() || own->second != session) return;  // not this ep's session
  TransferKey key(std::move(session), h->transfer);
  auto it = transfers_.find(key);
  if (it != transfers_.end()) {
    Deliver(key, it->second, h->index, std::move(in));
    return;
  }
  if (ended_.contains(key)) return;                           // its Put is over: dropped
  if (early_count_ >= options_.max_early_messages) return;  // dropped
  early_[key].push_back(Early{std::move(in), h->index, NowMs()});
  ++early_count_;
}

void UcxServer::Deliver(const TransferKey& k, const std::shared_ptr<Transfer>& t, uint32_t index,
                        tp::Incoming in) {
  if (t->failed) return;
  if (index >= t->seen.size() || t->seen[index] ||
      in.length() != t->buffers->data[index].size()) {
    Complete(k, absl::InvalidArgumentError(absl::StrCat(
                    "ucx: payload message for block ", index, " of ", in.length(),
                    " bytes does not match the Put header")));
    return;
  }
  t->seen[index] = true;
  const uint64_t n = in.length();
  in.Receive(t->buffers->data[index].data(), [this, k, t, n](absl::Status s) {
    if (t->failed) return;
    if (!s.ok()) {
      Complete(k, TransferFailed(std::string_view(s.message().data(), s.message().size())));
      return;
    }
    put_bytes_.fetch_add(n);
    if (++t->landed == t->seen.size()) Complete(k, absl::OkStatus());
  });
}

void UcxServer::Complete(const TransferKey& key, absl::Status status) {
  auto it = transfers_.find(key);
  if (it == transfers_.end()) return;
  std::shared_ptr<Transfer> t = it->second;
  transfers_.erase(it);
  // Receives still in flight write into t->buffers, which their callbacks keep alive;
  // `failed` makes them no-ops.
  t->failed = true;
  auto done = std::move(t->done);
  t->done = nullptr;
  if (done) done(std::move(status));
}

void UcxServer::ExpectPut(std::string session, uint64_t transfer,
                          std::shared_ptr<UcxPutBuffers> buffers,
                          std::function<void(absl::Status)> done) {
  worker_->Post([this, key = TransferKey(std::move(session), transfer),
                 buffers = std::move(buffers), done = std::move(done)]() mutable {
    if (stopped_) {
      done(absl::CancelledError("ucx: the server is shutting down"));
      return;
    }
    if (transfers_.contains(key)) {
      done(absl::InvalidArgumentError(
          absl::StrCat("header.ucx_transfer ", key.second, " is already in use on this session")));
      return;
    }
    auto t = std::make_shared<Transfer>();
    t->seen.assign(buffers->data.size(), false);
    t->buffers = std::move(buffers);
    t->done = std::move(done);
    t->deadline_ms = NowMs() + options_.transfer_timeout_ms;
    transfers_[key] = t;
    auto early = early_.find(key);
    if (early != early_.end()) {
      std::vector<Early> msgs = std::move(early->second);
      early_.erase(early);
      early_count_ -= msgs.size();
      for (Early& e : msgs) Deliver(key, t, e.index, std::move(e.payload));
    }
  });
}

void UcxServer::CancelPut(std::string session, uint64_t transfer) {
  worker_->Post([this, key = TransferKey(std::move(session), transfer)] {
    Complete(key, absl::CancelledError("ucx: transfer cancelled"));
    ended_[key] = NowMs() + options_.transfer_timeout_ms;
    auto early = early_.find(key);
    if (early != early_.end()) {
      early_count_ -= early->second.size();
      early_.erase(early);
    }
  });
}

void UcxServer::SendGet(std::string session, uint64_t transfer, std::vector<UcxOutgoing> items,
                        std::function<void(absl::Status)> done) {
  tp::EndpointId ep = 0;
  {
    common::MutexLock lock(&mu_);
    auto it = sessions_.find(session);
    if (it != sessions_.end()) ep = it->second.ep;
  }
  if (ep == 0) {
    done(TransferFailed("the client's session ended"));
    return;
  }
  if (items.empty()) {
    done(absl::OkStatus());
    return;
  }
  struct State {
    size_t left;
    absl::Status status;
    std::function<void(absl::Status)> done;
    std::vector<UcxOutgoing> items;
  };
  auto st = std::make_shared<State>();
  st->left = items.size();
  st->done = std::move(done);
  st->items = std::move(items);
  for (const UcxOutgoing& item : st->items) {
    tp::GetDataHeader h{};
    h.transfer = transfer;
    h.index = item.index;
    const uint64_t n = item.bytes.size();
    worker_->Send(ep, tp::kAmGetData, tp::HeaderBytes(h), item.bytes.data(), n,
                  [this, st, n](absl::Status s) {
                    if (s.ok()) {
                      get_bytes_.fetch_add(n);
                    } else if (st->status.ok()) {
                      st->status = TransferFailed(
                          std::string_view(s.message().data(), s.message().size()));
                    }
                    if (--st->left == 0) {
                      st->items.clear();
                      st->done(st->status);
                    }
                  });
  }
}

void UcxServer::OnEndpointError(tp::EndpointId ep) {
  auto it = session_of_ep_.find(ep);
  if (it == session_of_ep_.end()) return;
  const std::string session = it->second;
  session_of_ep_.erase(it);
  {
    common::MutexLock lock(&mu_);
    sessions_.erase(session);
  }
  std::vector<TransferKey> keys;
  for (const auto& [k, t] : transfers_) {
    if (k.first == session) keys.push_back(k);
  }
  for (const TransferKey& k : keys) Complete(k, TransferFailed("the client's endpoint failed"));
  for (auto e = early_.begin(); e != early_.end();) {
    if (e->first.first == session) {
      early_count_ -= e->second.size();
      early_.erase(e++);
    } else {
      ++e;
    }
  }
}

void UcxServer::OnTick() {
  const int64_t now = NowMs();
  std::vector<TransferKey> expired;
  for (const auto& [k, t] : transfers_) {
    if (now >= t->deadline_ms) expired.push_back(k);
  }
  for (const TransferKey& k : expired) {
    Complete(k, TransferFailed(absl::StrCat("the payloads did not arrive within ",
                                            options_.transfer_timeout_ms,
                                            " ms (ucx.transfer_timeout_ms)")));
  }
  absl::erase_if(ended_, [now](const auto& e) { return now >= e.second; });
  for (auto e = early_.begin(); e != early_.end();) {
    auto& v = e->second;
    const size_t before = v.size();
    std::erase_if(v, [&](const Early& m) {
      return now - m.arrived_ms >= static_cast<int64_t>(options_.transfer_timeout_ms);
    });
    early_count_ -= before - v.size();
    if (v.empty()) {
      early_.erase(e++);
    } else {
      ++e;
    }
  }
}

}  // namespace kvtier::dataplane
