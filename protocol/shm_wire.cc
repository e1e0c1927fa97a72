#include "protocol/shm_wire.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace kvtier::protocol::shm {

absl::Status SendMessage(int sock, const void* data, size_t n, int fd) {
  iovec iov{const_cast<void*>(data), n};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  }
  ssize_t sent;
  do {
    sent = sendmsg(sock, &msg, MSG_NOSIGNAL);
  } while (sent < 0 && errno == EINTR);
  if (sent != static_cast<ssize_t>(n)) {
    return absl::UnavailableError(absl::StrCat("shm socket send: ", strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status ReceiveMessage(int sock, void* data, size_t n, int* fd) {
  *fd = -1;
  iovec iov{data, n};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t got;
  do {
    got = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  } while (got < 0 && errno == EINTR);
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
        c->cmsg_len == CMSG_LEN(sizeof(int))) {
      std::memcpy(fd, CMSG_DATA(c), sizeof(int));
    }
  }
  if (got == static_cast<ssize_t>(n) && (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) == 0) {
    return absl::OkStatus();
  }
  if (*fd >= 0) {
    close(*fd);
    *fd = -1;
  }
  if (got == 0) return absl::UnavailableError("shm socket: closed by peer");
  if (got < 0) return absl::UnavailableError(absl::StrCat("shm socket receive: ", strerror(errno)));
  return absl::UnavailableError(
      absl::StrCat("shm socket: message of ", got, " bytes, expected ", n));
}

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

absl::StatusOr<std::string_view> ReceiveFrame(int sock, std::string* buffer) {
  buffer->resize(kMaxFrameBytes);
  ssize_t got;
  do {
    got = recv(sock, buffer->data(), buffer->size(), MSG_TRUNC);
  } while (got < 0 && errno == EINTR);
  if (got == 0) return absl::UnavailableError("shm socket: closed by peer");
  if (got < 0) return absl::UnavailableError(absl::StrCat("shm socket receive: ", strerror(errno)));
  if (static_cast<size_t>(got) > kMaxFrameBytes) {
    return absl::UnavailableError(
        absl::StrCat("shm socket: frame of ", got, " bytes exceeds ", kMaxFrameBytes));
  }
  return std::string_view(buffer->data(), static_cast<size_t>(got));
}

}  // namespace kvtier::protocol::shm
