#include "dataplane/shm_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/mutex.h"
#include "protocol/shm_wire.h"
#include "common/logging.h"
#include "common/strings.h"

namespace kvtier::dataplane {
namespace {

namespace shm = ::kvtier::protocol::shm;

std::string RandomBytes(size_t n) {
  std::random_device rd;
  std::string out(n, '\0');
  for (char& c : out) c = static_cast<char>(rd());
  return out;
}

void CopyError(shm::ShmReply* reply, std::string_view text) {
  const size_t n = std::min(text.size(), sizeof(reply->error) - 1);
  std::memcpy(reply->error, text.data(), n);
  reply->error[n] = '\0';
}

// Creates a sealed memfd of `bytes` and maps it. Returns the fd (caller closes) or -1.
int CreateRegion(uint64_t bytes, uint8_t** base, std::string* error) {
  const int fd = memfd_create("kvtier-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) {
    *error = absl::StrCat("memfd_create: ", strerror(errno));
    return -1;
  }
  void* p = MAP_FAILED;
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0 ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0 ||
      (p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
    *error = absl::StrCat("region of ", bytes, " bytes: ", strerror(errno));
    close(fd);
    return -1;
  }
  *base = static_cast<uint8_t*>(p);
  return fd;
}

}  // namespace

ShmRegion::~ShmRegion() { munmap(base_, size_); }

ShmServer::ShmServer(const ShmServerOptions& options)
    : options_(options), instance_id_(RandomBytes(shm::kInstanceBytes)) {}

absl::StatusOr<std::unique_ptr<ShmServer>> ShmServer::Start(const ShmServerOptions& options) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (options.socket_path.empty() || options.socket_path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("shm_socket \"", options.socket_path, "\" must be 1..",
                     sizeof(addr.sun_path) - 1, " characters (a Unix socket path)"));
  }
  std::memcpy(addr.sun_path, options.socket_path.data(), options.socket_path.size());
  std::unique_ptr<ShmServer> s(new ShmServer(options));
  s->listen_fd_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  s->wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (s->listen_fd_ < 0 || s->wake_fd_ < 0) {
    return absl::UnavailableError(absl::StrCat("shm socket: ", strerror(errno)));
  }
  // A socket file left by a previous run (crash, SIGKILL) is ours to replace; anything
  // else at that path is not.
  struct stat st;
  if (lstat(options.socket_path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) {
    unlink(options.socket_path.c_str());
  }
  if (bind(s->listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      chmod(options.socket_path.c_str(), 0660) != 0 || listen(s->listen_fd_, 64) != 0) {
    return absl::UnavailableError(absl::StrCat("shm socket ", options.socket_path,
                                               ": cannot listen: ", strerror(errno)));
  }
  s->thread_ = std::thread([p = s.get()] { p->Loop(); });
  return s;
}

ShmServer::~ShmServer() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
    thread_.join();
  }
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    unlink(options_.socket_path.c_str());
  }
  if (wake_fd_ >= 0) close(wake_fd_);
}

std::shared_ptr<ShmRegion> ShmServer::Find(std::string_view session) const {
  common::MutexLock lock(&mu_);
  auto it = sessions_.find(Sv(session));
  return it == sessions_.end() ? nullptr : it->second.region;
}

void ShmServer::Bind(std::string_view session, std::string identity) {
  common::MutexLock lock(&mu_);
  auto it = sessions_.find(Sv(session));
  if (it != sessions_.end() && !it->second.identity.has_value()) {
    it->second.identity = std::move(identity);
  }
}

std::optional<std::string> ShmServer::BoundIdentity(std::string_view session) const {
  common::MutexLock lock(&mu_);
  auto it = sessions_.find(Sv(session));
  return it == sessions_.end() ? std::nullopt : it->second.identity;
}

bool ShmServer::StartsWithFrame(int conn) {
  char magic[sizeof(shm::kFrameMagic)] = {};
  ssize_t got;
  do {
    got = recv(conn, magic, sizeof(magic), MSG_PEEK | MSG_DONTWAIT);
  } while (got < 0 && errno == EINTR);
  return got == static_cast<ssize_t>(sizeof(magic)) &&
         std::memcmp(magic, shm::kFrameMagic, sizeof(magic)) == 0;
}

void ShmServer::StartCallConnection(int conn) {
  // Reap the threads of connections that ended.
  for (auto it = calls_.begin(); it != calls_.end();) {
    if (it->done->load()) {
      it->thread.join();
      close(it->fd);
      it = calls_.erase(it);
    } else {
      ++it;
    }
  }
  if (!options_.serve_frame || calls_.size() >= options_.max_call_connections) {
    close(conn);
    return;
  }
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::thread t([this, conn, done] {
    std::string buffer;
    for (;;) {
      absl::StatusOr<std::string_view> frame = shm::ReceiveFrame(conn, &buffer);
      if (!frame.ok()) break;
      const std::string reply = options_.serve_frame(*frame);
      if (!shm::SendMessage(conn, reply.data(), reply.size()).ok()) break;
    }
    done->store(true);
  });
  calls_.push_back({conn, std::move(t), std::move(done)});
}

size_t ShmServer::session_count() const {
  common::MutexLock lock(&mu_);
  return sessions_.size();
}

std::string ShmServer::Serve(int conn) {
  shm::ShmRequest req;
  int stray_fd = -1;
  if (!shm::ReceiveMessage(conn, &req, sizeof(req), &stray_fd).ok()) return "";
  if (stray_fd >= 0) close(stray_fd);
  shm::ShmReply reply{};
  std::memcpy(reply.magic, shm::kMagic, sizeof(reply.magic));
  std::memcpy(reply.instance, instance_id_.data(), shm::kInstanceBytes);
  std::string error;
  if (std::memcmp(req.magic, shm::kMagic, sizeof(req.magic)) != 0) {
    error = "request: bad magic (not a kvtier shared-memory client of this version)";
  } else if (std::memcmp(req.instance, instance_id_.data(), shm::kInstanceBytes) != 0) {
    error = "request: this socket belongs to another kvtierd than the one connected";
  } else if (req.region_bytes == 0 || req.region_bytes > options_.max_region_bytes) {
    error = absl::StrCat("region_bytes ", req.region_bytes, " is not in 1..",
                         options_.max_region_bytes, " (shm_max_region_bytes)");
  } else if (session_count() >= options_.max_sessions) {
    error = absl::StrCat("server has its maximum of ", options_.max_sessions,
                         " shared-memory sessions (shm_max_sessions)");
  }
  uint8_t* base = nullptr;
  const int fd = error.empty() ? CreateRegion(req.region_bytes, &base, &error) : -1;
  if (fd < 0) {
    CopyError(&reply, error);
    (void)shm::SendMessage(conn, &reply, sizeof(reply));
    return "";
  }
  auto region = std::make_shared<ShmRegion>(base, req.region_bytes);
  const std::string session = RandomBytes(shm::kSessionBytes);
  reply.ok = 1;
  reply.region_bytes = req.region_bytes;
  std::memcpy(reply.session, session.data(), shm::kSessionBytes);
  {
    // Registered before the reply goes out: the client may use it at once.
    common::MutexLock lock(&mu_);
    sessions_[session] = Session{std::move(region), std::nullopt};
  }
  const absl::Status sent = shm::SendMessage(conn, &reply, sizeof(reply), fd);
  close(fd);  // the mapping keeps the memory; the client has its own descriptor
  if (!sent.ok()) {
    common::MutexLock lock(&mu_);
    sessions_.erase(session);
    return "";
  }
  return session;
}

void ShmServer::Loop() {
  struct Conn {
    int fd;
    std::string session;
  };
  std::vector<Conn> conns;
  std::vector<pollfd> fds;
  for (;;) {
    fds.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    for (const Conn& c : conns) fds.push_back({c.fd, POLLIN, 0});
    if (poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      KVTIER_LOG(ERROR) << "shm socket: poll: " << strerror(errno);
      break;
    }
    if (fds[0].revents != 0) break;
    // Sessions first (fds[2..] match conns), then new connections.
    std::vector<Conn> kept;
    for (size_t i = 0; i < conns.size(); ++i) {
      Conn& c = conns[i];
      const short ev = fds[i + 2].revents;
      if (ev == 0) {
        kept.push_back(std::move(c));
        continue;
      }
      if (c.session.empty() && (ev & POLLIN) != 0 && StartsWithFrame(c.fd)) {
        StartCallConnection(c.fd);  // the connection is its thread's now
        continue;
      }
      if (c.session.empty() && (ev & POLLIN) != 0) {
        c.session = Serve(c.fd);
        if (!c.session.empty()) {
          kept.push_back(std::move(c));
          continue;
        }
      }
      // Anything after the handshake (EOF, errors, stray bytes) ends the session.
      if (!c.session.empty()) {
        common::MutexLock lock(&mu_);
        sessions_.erase(c.session);
      }
      close(c.fd);
    }
    conns = std::move(kept);
    if ((fds[1].revents & POLLIN) != 0) {
      for (;;) {
        const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0) break;
        if (conns.size() >= options_.max_sessions + 16) {  // idle connections pile up
          close(fd);
          continue;
        }
        conns.push_back({fd, ""});
      }
    }
  }
  for (const Conn& c : conns) close(c.fd);
  // Wake the call threads (a blocked receive returns EOF) and wait for them.
  for (CallConnection& c : calls_) shutdown(c.fd, SHUT_RDWR);
  for (CallConnection& c : calls_) {
    c.thread.join();
    close(c.fd);
  }
  calls_.clear();
  common::MutexLock lock(&mu_);
  sessions_.clear();
}

}  // namespace kvtier::dataplane
