#include "ucx/ucx_worker.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>
#include <ucp/api/ucp.h>

#include <chrono>
#include <cstring>
#include <future>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/strings.h"

namespace kvtier::ucx {

namespace {

absl::Status UcxError(std::string_view what, ucs_status_t s) {
  return absl::UnavailableError(absl::StrCat("ucx: ", Sv(what), ": ", ucs_status_string(s)));
}

// While a transfer of at least kLargeTransferBytes is in flight, the progress thread polls
// for up to kSpin before it sleeps (ucx/ucx_worker.h, "Threading").
constexpr uint64_t kLargeTransferBytes = 1 << 20;
constexpr auto kSpin = std::chrono::microseconds(50);

// Counts one large transfer in flight in *counter (null: not large) while it lives.
class LargeTransfer {
 public:
  LargeTransfer(size_t* counter, uint64_t length)
      : counter_(length >= kLargeTransferBytes ? counter : nullptr) {
    if (counter_ != nullptr) ++*counter_;
  }
  ~LargeTransfer() {
    if (counter_ != nullptr) --*counter_;
  }
  LargeTransfer(const LargeTransfer&) = delete;
  LargeTransfer& operator=(const LargeTransfer&) = delete;

 private:
  size_t* counter_;
};

struct SendOp {
  std::string header;
  std::function<void(absl::Status)> done;
  LargeTransfer large;
};

struct RecvOp {
  std::function<void(absl::Status)> done;
  LargeTransfer large;
};

// Polls `worker` for up to kSpin; true as soon as it made progress or `posted` is set.
bool Spin(ucp_worker_h worker, const std::atomic<bool>& posted) {
  const auto until = std::chrono::steady_clock::now() + kSpin;
  do {
    if (ucp_worker_progress(worker) != 0 || posted.load(std::memory_order_relaxed)) return true;
  } while (std::chrono::steady_clock::now() < until);
  return false;
}

// Resolves host:port into *addr. UNAVAILABLE if the name does not resolve.
absl::Status Resolve(const std::string& host, uint16_t port, sockaddr_storage* addr,
                     socklen_t* len) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = host.empty() ? AI_PASSIVE : 0;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  const int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("ucx: cannot resolve \"", host, "\": ", gai_strerror(rc)));
  }
  std::memcpy(addr, res->ai_addr, res->ai_addrlen);
  *len = res->ai_addrlen;
  freeaddrinfo(res);
  return absl::OkStatus();
}

}  // namespace

struct Worker::Impl {
  struct HandlerSlot {
    Impl* impl = nullptr;
    uint16_t id = 0;
    AmHandler fn;
  };

  WorkerOptions options;
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  ucp_listener_h listener = nullptr;
  int ucx_fd = -1;
  int wake_fd = -1;
  size_t max_header = 0;
  std::thread::id progress_thread;
  std::atomic<bool> stop{false};

  common::Mutex mu;
  std::deque<std::function<void()>> tasks ABSL_GUARDED_BY(mu);
  // Set by Post after it queued a task, cleared by the progress thread before it takes
  // the queue.
  std::atomic<bool> posted{false};
  // Set by the progress thread before it may sleep in poll(): only then does Post write
  // wake_fd (a write and a read per task otherwise, while the thread is awake anyway).
  std::atomic<bool> sleeping{false};

  // Progress thread only.
  absl::flat_hash_map<EndpointId, ucp_ep_h> eps;
  absl::flat_hash_map<ucp_ep_h, EndpointId> ids;
  EndpointId next_id = 1;
  std::vector<std::unique_ptr<HandlerSlot>> handlers;
  std::function<void(EndpointId, absl::Status)> on_error;
  std::function<void()> on_tick;
  std::vector<std::pair<ucp_ep_h, ucs_status_t>> failed;
  std::vector<void*> closing;  // ucp_ep_close_nbx requests still in progress
  std::vector<std::function<void()>> deferred;  // completions that finished inline
  size_t large_in_flight = 0;                   // sends and receives of >= kLargeTransferBytes

  EndpointId Adopt(ucp_ep_h ep) {
    const EndpointId id = next_id++;
    eps[id] = ep;
    ids[ep] = id;
    return id;
  }

  void CloseEp(ucp_ep_h ep) {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_EP_CLOSE_FLAG_FORCE;
    ucs_status_ptr_t r = ucp_ep_close_nbx(ep, &p);
    if (r != nullptr && !UCS_PTR_IS_ERR(r)) closing.push_back(r);
  }

  void Forget(EndpointId id) {
    auto it = eps.find(id);
    if (it == eps.end()) return;
    ids.erase(it->second);
    CloseEp(it->second);
    eps.erase(it);
  }

  static void OnEpError(void* arg, ucp_ep_h ep, ucs_status_t status) {
    static_cast<Impl*>(arg)->failed.emplace_back(ep, status);
  }

  static void OnConnRequest(ucp_conn_request_h req, void* arg) {
    Impl* impl = static_cast<Impl*>(arg);
    ucp_ep_params_t p{};
    p.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLER |
                   UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    p.conn_request = req;
    p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    p.err_handler.cb = &Impl::OnEpError;
    p.err_handler.arg = impl;
    ucp_ep_h ep = nullptr;
    const ucs_status_t s = ucp_ep_create(impl->worker, &p, &ep);
    if (s != UCS_OK) {
      KVTIER_LOG(WARNING) << "ucx: cannot accept a connection: " << ucs_status_string(s);
      return;
    }
    impl->Adopt(ep);
  }

  static ucs_status_t OnAm(void* arg, const void* header, size_t header_length, void* data,
                           size_t length, const ucp_am_recv_param_t* param) {
    HandlerSlot* slot = static_cast<HandlerSlot*>(arg);
    Impl* impl = slot->impl;
    EndpointId from = 0;
    if ((param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) != 0) {
      auto it = impl->ids.find(param->reply_ep);
      if (it != impl->ids.end()) from = it->second;
    }
    if (from == 0) return UCS_OK;  // not from an endpoint we know: dropped
    const bool keep = (param->recv_attr &
                       (UCP_AM_RECV_ATTR_FLAG_RNDV | UCP_AM_RECV_ATTR_FLAG_DATA)) != 0;
    const bool rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
    Incoming in;
    in.from_ = from;
    in.length_ = length;
    if (keep) {
      in.desc_ = data;
      in.rndv_ = rndv;
    } else if (length > 0) {
      in.copy_.assign(static_cast<const char*>(data), length);
    }
    in.worker_ = impl->self;
    slot->fn(from, std::string_view(static_cast<const char*>(header), header_length),
             std::move(in));
    // A kept descriptor is released or received by whoever holds the Incoming (a drop
    // releases it after this callback returns).
    return keep ? UCS_INPROGRESS : UCS_OK;
  }

  Worker* self = nullptr;

  void RunDeferred() {
    while (!deferred.empty()) {
      std::vector<std::function<void()>> now;
      now.swap(deferred);
      for (auto& fn : now) fn();
    }
  }

  void HandleFailed() {
    while (!failed.empty()) {
      auto now = std::move(failed);
      failed.clear();
      for (auto [ep, status] : now) {
        auto it = ids.find(ep);
        if (it == ids.end()) continue;
        const EndpointId id = it->second;
        Forget(id);
        if (on_error) on_error(id, UcxError("endpoint failed", status));
      }
    }
  }

  void ReapCloses() {
    std::vector<void*> left;
    for (void* r : closing) {
      if (ucp_request_check_status(r) == UCS_INPROGRESS) {
        left.push_back(r);
      } else {
        ucp_request_free(r);
      }
    }
    closing.swap(left);
  }
};

// ---------------------------------------------------------------------------------------
// Incoming

Incoming::~Incoming() { Reset(); }

Incoming::Incoming(Incoming&& other) noexcept { *this = std::move(other); }

Incoming& Incoming::operator=(Incoming&& other) noexcept {
  if (this != &other) {
    Reset();
    worker_ = std::exchange(other.worker_, nullptr);
    from_ = other.from_;
    length_ = other.length_;
    desc_ = std::exchange(other.desc_, nullptr);
    rndv_ = other.rndv_;
    copy_ = std::move(other.copy_);
  }
  return *this;
}

void Incoming::Reset() {
  if (worker_ != nullptr && desc_ != nullptr) {
    // Released once the AM callback that may be running has returned.
    Worker::Impl* impl = worker_->impl_.get();
    void* desc = desc_;
    impl->deferred.push_back([impl, desc] { ucp_am_data_release(impl->worker, desc); });
  }
  worker_ = nullptr;
  desc_ = nullptr;
  copy_.clear();
}

void Incoming::Receive(void* buffer, std::function<void(absl::Status)> done) {
  Worker::Impl* impl = worker_->impl_.get();
  if (desc_ == nullptr || !rndv_) {
    // Eager: the bytes are here already (kept by UCX, or copied).
    std::memcpy(buffer, desc_ != nullptr ? desc_ : copy_.data(), length_);
    Reset();  // releases a kept descriptor (deferred)
    impl->deferred.push_back([done = std::move(done)] { done(absl::OkStatus()); });
    return;
  }
  auto* op = new RecvOp{std::move(done), LargeTransfer(&impl->large_in_flight, length_)};
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.recv_am = [](void* request, ucs_status_t status, size_t, void* user_data) {
    std::unique_ptr<RecvOp> op(static_cast<RecvOp*>(user_data));
    op->done(status == UCS_OK ? absl::OkStatus() : UcxError("receive", status));
    ucp_request_free(request);
  };
  p.user_data = op;
  void* desc = std::exchange(desc_, nullptr);
  worker_ = nullptr;
  ucs_status_ptr_t r = ucp_am_recv_data_nbx(impl->worker, desc, buffer, length_, &p);
  if (r == nullptr || UCS_PTR_IS_ERR(r)) {
    const ucs_status_t s = r == nullptr ? UCS_OK : UCS_PTR_STATUS(r);
    impl->deferred.push_back([op, s] {
      std::unique_ptr<RecvOp> own(op);
      own->done(s == UCS_OK ? absl::OkStatus() : UcxError("receive", s));
    });
  }
}

// ---------------------------------------------------------------------------------------
// Worker

Worker::Worker(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) { impl_->self = this; }

absl::StatusOr<std::unique_ptr<Worker>> Worker::Create(const WorkerOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  ucp_config_t* config = nullptr;
  ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
  if (s != UCS_OK) return UcxError("read config", s);
  if (!options.transports.empty()) {
    s = ucp_config_modify(config, "TLS", options.transports.c_str());
    if (s != UCS_OK) {
      ucp_config_release(config);
      return absl::InvalidArgumentError(
          absl::StrCat("ucx: transports \"", options.transports, "\": ", ucs_status_string(s)));
    }
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  s = ucp_init(&params, config, &impl->context);
  ucp_config_release(config);
  if (s != UCS_OK) return UcxError("init", s);
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;  // every ucp call is on the progress thread
  s = ucp_worker_create(impl->context, &wp, &impl->worker);
  if (s != UCS_OK) {
    ucp_cleanup(impl->context);
    return UcxError("worker", s);
  }
  ucp_worker_attr_t attr{};
  attr.field_mask = UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER;
  if (ucp_worker_query(impl->worker, &attr) == UCS_OK) impl->max_header = attr.max_am_header;
  s = ucp_worker_get_efd(impl->worker, &impl->ucx_fd);
  impl->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (s != UCS_OK || impl->wake_fd < 0) {
    if (impl->wake_fd >= 0) close(impl->wake_fd);
    ucp_worker_destroy(impl->worker);
    ucp_cleanup(impl->context);
    return UcxError("wakeup fd", s);
  }
  std::unique_ptr<Worker> w(new Worker(std::move(impl)));
  w->thread_ = std::thread([p = w.get()] { p->Loop(); });
  return w;
}

Worker::~Worker() {
  // Stop the listener and close every endpoint on the progress thread, then end it.
  std::promise<void> closed;
  Post([this, &closed] {
    Impl& m = *impl_;
    if (m.listener != nullptr) ucp_listener_destroy(m.listener);
    m.listener = nullptr;
    std::vector<EndpointId> all;
    for (const auto& [id, ep] : m.eps) all.push_back(id);
    for (EndpointId id : all) m.Forget(id);
    closed.set_value();
  });
  closed.get_future().wait();
  impl_->stop.store(true);
  const uint64_t one = 1;
  (void)!write(impl_->wake_fd, &one, sizeof(one));
  thread_.join();
  // Closing endpoints whose peer does not answer: progress a little, then give up.
  for (int i = 0; i < 1000 && !impl_->closing.empty(); ++i) {
    ucp_worker_progress(impl_->worker);
    impl_->ReapCloses();
  }
  impl_->RunDeferred();
  ucp_worker_destroy(impl_->worker);
  ucp_cleanup(impl_->context);
  close(impl_->wake_fd);
}

void Worker::SetHandler(uint16_t id, AmHandler handler) {
  std::promise<void> done;
  Post([this, id, &handler, &done] {
    auto slot = std::make_unique<Impl::HandlerSlot>();
    slot->impl = impl_.get();
    slot->id = id;
    slot->fn = std::move(handler);
    ucp_am_handler_param_t p{};
    p.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                   UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
    p.id = id;
    p.cb = &Impl::OnAm;
    p.arg = slot.get();
    p.flags = UCP_AM_FLAG_WHOLE_MSG | UCP_AM_FLAG_PERSISTENT_DATA;
    const ucs_status_t s = ucp_worker_set_am_recv_handler(impl_->worker, &p);
    if (s != UCS_OK) KVTIER_LOG(ERROR) << "ucx: am handler " << id << ": " << ucs_status_string(s);
    impl_->handlers.push_back(std::move(slot));
    done.set_value();
  });
  done.get_future().wait();
}

void Worker::SetErrorHandler(std::function<void(EndpointId, absl::Status)> handler) {
  std::promise<void> done;
  Post([this, &handler, &done] {
    impl_->on_error = std::move(handler);
    done.set_value();
  });
  done.get_future().wait();
}

void Worker::SetTickHandler(std::function<void()> handler) {
  std::promise<void> done;
  Post([this, &handler, &done] {
    impl_->on_tick = std::move(handler);
    done.set_value();
  });
  done.get_future().wait();
}

absl::StatusOr<uint16_t> Worker::Listen(const std::string& address, uint16_t port) {
  std::promise<absl::StatusOr<uint16_t>> result;
  Post([this, &address, port, &result] {
    Impl& m = *impl_;
    if (m.listener != nullptr) {
      result.set_value(absl::FailedPreconditionError("ucx: already listening"));
      return;
    }
    sockaddr_storage addr{};
    socklen_t len = 0;
    if (absl::Status s = Resolve(address, port, &addr, &len); !s.ok()) {
      result.set_value(s);
      return;
    }
    ucp_listener_params_t p{};
    p.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
    p.sockaddr.addr = reinterpret_cast<const sockaddr*>(&addr);
    p.sockaddr.addrlen = len;
    p.conn_handler.cb = &Impl::OnConnRequest;
    p.conn_handler.arg = &m;
    ucs_status_t s = ucp_listener_create(m.worker, &p, &m.listener);
    if (s != UCS_OK) {
      m.listener = nullptr;
      result.set_value(UcxError(absl::StrCat("listen on ", address, ":", port), s));
      return;
    }
    ucp_listener_attr_t attr{};
    attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
    s = ucp_listener_query(m.listener, &attr);
    if (s != UCS_OK) {
      result.set_value(UcxError("listener query", s));
      return;
    }
    uint16_t bound = 0;
    if (attr.sockaddr.ss_family == AF_INET) {
      bound = ntohs(reinterpret_cast<const sockaddr_in*>(&attr.sockaddr)->sin_port);
    } else if (attr.sockaddr.ss_family == AF_INET6) {
      bound = ntohs(reinterpret_cast<const sockaddr_in6*>(&attr.sockaddr)->sin6_port);
    }
    port_.store(bound);
    result.set_value(bound);
  });
  return result.get_future().get();
}

absl::StatusOr<EndpointId> Worker::Connect(const std::string& host, uint16_t port) {
  std::promise<absl::StatusOr<EndpointId>> result;
  Post([this, &host, port, &result] {
    Impl& m = *impl_;
    sockaddr_storage addr{};
    socklen_t len = 0;
    if (absl::Status s = Resolve(host, port, &addr, &len); !s.ok()) {
      result.set_value(s);
      return;
    }
    ucp_ep_params_t p{};
    p.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                   UCP_EP_PARAM_FIELD_ERR_HANDLER | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    p.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    p.sockaddr.addr = reinterpret_cast<const sockaddr*>(&addr);
    p.sockaddr.addrlen = len;
    p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    p.err_handler.cb = &Impl::OnEpError;
    p.err_handler.arg = &m;
    ucp_ep_h ep = nullptr;
    const ucs_status_t s = ucp_ep_create(m.worker, &p, &ep);
    if (s != UCS_OK) {
      result.set_value(UcxError(absl::StrCat("connect to ", host, ":", port), s));
      return;
    }
    result.set_value(m.Adopt(ep));
  });
  return result.get_future().get();
}

void Worker::Send(EndpointId to, uint16_t id, std::string header, const void* data,
                  uint64_t length, std::function<void(absl::Status)> done) {
  Post([this, to, id, header = std::move(header), data, length,
        done = std::move(done)]() mutable {
    Impl& m = *impl_;
    auto it = m.eps.find(to);
    if (it == m.eps.end()) {
      done(absl::UnavailableError("ucx: the endpoint is closed (its peer failed or left)"));
      return;
    }
    auto* op =
        new SendOp{std::move(header), std::move(done), LargeTransfer(&m.large_in_flight, length)};
    ucp_request_param_t p{};
    p.op_attr_mask =
        UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
    // REPLY: the receiver learns which endpoint sent it. RNDV: the receiver fetches the
    // payload into the buffer it picks, no bounce buffer on either side.
    p.flags = UCP_AM_SEND_FLAG_REPLY | (length > 0 ? UCP_AM_SEND_FLAG_RNDV : 0);
    p.cb.send = [](void* request, ucs_status_t status, void* user_data) {
      std::unique_ptr<SendOp> op(static_cast<SendOp*>(user_data));
      op->done(status == UCS_OK ? absl::OkStatus() : UcxError("send", status));
      ucp_request_free(request);
    };
    p.user_data = op;
    ucs_status_ptr_t r = ucp_am_send_nbx(it->second, id, op->header.data(), op->header.size(),
                                         data, length, &p);
    if (r == nullptr || UCS_PTR_IS_ERR(r)) {
      std::unique_ptr<SendOp> own(op);
      own->done(r == nullptr ? absl::OkStatus() : UcxError("send", UCS_PTR_STATUS(r)));
    }
  });
}

void Worker::Close(EndpointId ep) {
  Post([this, ep] { impl_->Forget(ep); });
}

void Worker::Post(std::function<void()> fn) {
  {
    common::MutexLock lock(&impl_->mu);
    impl_->tasks.push_back(std::move(fn));
  }
  // With the Loop's store of `sleeping` then load of `posted` (both sequentially
  // consistent): either the Loop sees this task before it sleeps, or this sees it asleep.
  impl_->posted.store(true);
  if (!impl_->sleeping.exchange(false)) return;
  const uint64_t one = 1;
  (void)!write(impl_->wake_fd, &one, sizeof(one));
}

size_t Worker::max_header() const { return impl_->max_header; }

bool Worker::OnProgressThread() const {
  return std::this_thread::get_id() == impl_->progress_thread;
}

void Worker::Loop() {
  Impl& m = *impl_;
  m.progress_thread = std::this_thread::get_id();
  auto next_tick = std::chrono::steady_clock::now();
  while (!m.stop.load()) {
    std::deque<std::function<void()>> tasks;
    m.posted.store(false);
    {
      common::MutexLock lock(&m.mu);
      tasks.swap(m.tasks);
    }
    for (auto& fn : tasks) {
      fn();
      m.RunDeferred();
    }
    while (ucp_worker_progress(m.worker) != 0) m.RunDeferred();
    m.RunDeferred();
    m.HandleFailed();
    m.RunDeferred();
    m.ReapCloses();
    const auto now = std::chrono::steady_clock::now();
    if (now >= next_tick) {
      if (m.on_tick) m.on_tick();
      m.RunDeferred();
      next_tick = now + std::chrono::milliseconds(m.options.tick_ms);
    }
    if (!tasks.empty() || !m.deferred.empty() || !m.failed.empty()) continue;
    if (m.large_in_flight > 0 && Spin(m.worker, m.posted)) continue;
    if (ucp_worker_arm(m.worker) == UCS_ERR_BUSY) continue;
    m.sleeping.store(true);
    if (m.posted.load()) {  // queued since the swap (Post may not have seen `sleeping`)
      m.sleeping.store(false);
      continue;
    }
    pollfd fds[2] = {{m.ucx_fd, POLLIN, 0}, {m.wake_fd, POLLIN, 0}};
    const int timeout = std::max<int>(
        1, static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                next_tick - std::chrono::steady_clock::now())
                                .count()));
    (void)poll(fds, 2, timeout);
    m.sleeping.store(false);
    if ((fds[1].revents & POLLIN) != 0) {
      uint64_t v;
      (void)!read(m.wake_fd, &v, sizeof(v));
    }
  }
}

}  // namespace kvtier::ucx
