#include "client/shared_region.h"

#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "common/mutex.h"
#include "protocol/shm_wire.h"

namespace kvtier::client {
namespace shm = ::kvtier::protocol::shm;

absl::StatusOr<std::shared_ptr<SharedRegion>> SharedRegion::Open(
    const std::string& socket_path, uint64_t bytes, std::string_view expected_instance,
    bool cuda_register) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.empty() || socket_path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared memory: socket path \"", socket_path, "\" is not a valid Unix socket path"));
  }
  if (bytes == 0) return absl::InvalidArgumentError("shared memory: region size is 0");
  std::memcpy(addr.sun_path, socket_path.data(), socket_path.size());
  const int sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (sock < 0) return absl::UnavailableError(absl::StrCat("shm socket: ", strerror(errno)));
  if (connect(sock, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int err = errno;
    close(sock);
    return absl::UnavailableError(
        absl::StrCat("shared memory: cannot connect to ", socket_path, ": ", strerror(err)));
  }
  shm::ShmRequest req{};
  std::memcpy(req.magic, shm::kMagic, sizeof(req.magic));
  req.region_bytes = bytes;
  if (expected_instance.size() == shm::kInstanceBytes) {
    std::memcpy(req.instance, expected_instance.data(), shm::kInstanceBytes);
  }
  shm::ShmReply reply{};
  int fd = -1;
  absl::Status s = shm::SendMessage(sock, &req, sizeof(req));
  if (s.ok()) s = shm::ReceiveMessage(sock, &reply, sizeof(reply), &fd);
  if (s.ok() && std::memcmp(reply.magic, shm::kMagic, sizeof(reply.magic)) != 0) {
    s = absl::FailedPreconditionError("shared memory: the server answered with a bad magic");
  }
  if (s.ok() && std::string_view(reinterpret_cast<const char*>(reply.instance),
                                 shm::kInstanceBytes) != expected_instance) {
    s = absl::FailedPreconditionError(absl::StrCat(
        "shared memory: ", socket_path, " belongs to another kvtierd than the one connected"));
  }
  if (s.ok() && (reply.ok != 1 || fd < 0)) {
    reply.error[sizeof(reply.error) - 1] = '\0';
    s = absl::ResourceExhaustedError(absl::StrCat("shared memory refused: ", reply.error));
  }
  if (s.ok() && reply.region_bytes != bytes) {
    s = absl::InternalError("shared memory: the server granted another size than asked");
  }
  struct stat fd_stat{};
  if (s.ok() && (fstat(fd, &fd_stat) != 0 || static_cast<uint64_t>(fd_stat.st_size) < bytes)) {
    s = absl::InternalError("shared memory: the server's region is smaller than it granted");
  }
  void* p = MAP_FAILED;
  if (s.ok()) {
    // Populated here, so the pages are faulted in (and charged to this process's memory
    // cgroup) before any payload moves, never on the server's data path.
    p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (p == MAP_FAILED) s = absl::InternalError(absl::StrCat("shared memory: mmap: ", strerror(errno)));
  }
  if (fd >= 0) close(fd);
  if (!s.ok()) {
    close(sock);
    return s;
  }
  const common::CudaRuntime* cuda = cuda_register ? common::LoadCudaRuntime() : nullptr;
  if (cuda != nullptr && cuda->host_register(p, bytes, /*cudaHostRegisterDefault=*/0) != 0) {
    cuda = nullptr;
  }
  return std::shared_ptr<SharedRegion>(new SharedRegion(
      socket_path, sock, static_cast<uint8_t*>(p), bytes,
      std::string(reinterpret_cast<const char*>(reply.session), shm::kSessionBytes), cuda));
}

SharedRegion::SharedRegion(std::string socket_path, int sock, uint8_t* base, uint64_t size,
                           std::string session, const common::CudaRuntime* cuda)
    : sock_(sock),
      base_(base),
      size_(size),
      session_(std::move(session)),
      cuda_(cuda),
      calls_(std::move(socket_path)) {
  free_[0] = size_;
}

SharedRegion::~SharedRegion() {
  if (cuda_ != nullptr) cuda_->host_unregister(base_);
  munmap(base_, size_);
  close(sock_);  // the server ends the session
}

absl::StatusOr<SharedRegion::Reply> SharedRegion::Call(shm::FrameOp op, std::string_view request,
                                                       int64_t deadline_unix_ms) {
  return calls_.Call(op, request, deadline_unix_ms);
}

std::optional<uint64_t> SharedRegion::Allocate(uint64_t n) {
  if (n == 0) return std::nullopt;
  n = (n + 4095) & ~uint64_t{4095};
  common::MutexLock lock(&mu_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < n) continue;
    const uint64_t offset = it->first;
    const uint64_t rest = it->second - n;
    free_.erase(it);
    if (rest > 0) free_[offset + n] = rest;
    used_[offset] = n;
    return offset;
  }
  return std::nullopt;
}

void SharedRegion::Free(uint64_t offset) {
  common::MutexLock lock(&mu_);
  auto u = used_.find(offset);
  if (u == used_.end()) return;
  uint64_t start = offset, len = u->second;
  used_.erase(u);
  auto next = free_.lower_bound(start);
  if (next != free_.end() && next->first == start + len) {
    len += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      len += prev->second;
      free_.erase(prev);
    }
  }
  free_[start] = len;
}

std::optional<uint64_t> SharedRegion::OffsetOf(const void* p, uint64_t n) const {
  const auto at = reinterpret_cast<uintptr_t>(p);
  const auto base = reinterpret_cast<uintptr_t>(base_);
  if (at < base || at - base > size_ || n > size_ - (at - base)) return std::nullopt;
  return at - base;
}

}  // namespace kvtier::client
