#include "protocol/shm_wire.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/strings.h"

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

CallConnections::CallConnections(std::string socket_path) : socket_path_(std::move(socket_path)) {}

CallConnections::~CallConnections() {
  common::MutexLock lock(&mu_);
  for (int fd : idle_) close(fd);
}

int CallConnections::Take(std::string* error) {
  {
    common::MutexLock lock(&mu_);
    if (!idle_.empty()) {
      const int fd = idle_.back();
      idle_.pop_back();
      return fd;
    }
  }
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, socket_path_.data(),
              std::min(socket_path_.size(), sizeof(addr.sun_path) - 1));
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) return fd;
  *error = absl::StrCat("shared memory: cannot connect to ", socket_path_, ": ", strerror(errno));
  if (fd >= 0) close(fd);
  return -1;
}

absl::StatusOr<CallReply> CallConnections::Call(FrameOp op, std::string_view request,
                                                int64_t deadline_unix_ms) {
  if (sizeof(FrameHeader) + request.size() > kMaxFrameBytes) {
    return absl::InvalidArgumentError(absl::StrCat("shared memory: a request of ", request.size(),
                                                   " bytes does not fit a frame"));
  }
  const uint64_t request_id = next_request_id_.fetch_add(1);
  const std::string frame = EncodeFrame(op, request_id, deadline_unix_ms, request);
  std::string error;
  const int fd = Take(&error);
  if (fd < 0) return absl::UnavailableError(error);
  absl::Status s = SendMessage(fd, frame.data(), frame.size());
  if (s.ok() && deadline_unix_ms != 0) {
    const int64_t now = NowUnixMs();
    pollfd p{fd, POLLIN, 0};
    int ready;
    do {
      ready =
          poll(&p, 1, static_cast<int>(std::clamp<int64_t>(deadline_unix_ms - now, 0, 1 << 30)));
    } while (ready < 0 && errno == EINTR);
    if (ready == 0) s = absl::DeadlineExceededError("shared memory: no reply before the deadline");
  }
  thread_local std::string buffer;  // sized once per thread (ReceiveFrame), not per call
  absl::StatusOr<std::string_view> got =
      s.ok() ? ReceiveFrame(fd, &buffer) : absl::StatusOr<std::string_view>(s);
  absl::StatusOr<CallReply> reply =
      got.ok() ? DecodeReply(*got, request_id, "shared memory") : got.status();
  if (!reply.ok()) {
    close(fd);  // its state is unknown: never reused
    return reply.status();
  }
  {
    common::MutexLock lock(&mu_);
    idle_.push_back(fd);
  }
  return reply;
}

std::string EncodeFrame(FrameOp op, uint64_t request_id, int64_t deadline_unix_ms,
                        std::string_view request) {
  FrameHeader h{};
  std::memcpy(h.magic, kFrameMagic, sizeof(h.magic));
  h.op = static_cast<uint32_t>(op);
  h.request_id = request_id;
  h.deadline_unix_ms = deadline_unix_ms;
  std::string frame(reinterpret_cast<const char*>(&h), sizeof(h));
  frame.append(request);
  return frame;
}

absl::StatusOr<FrameHeader> DecodeFrameHeader(std::string_view frame) {
  FrameHeader h{};
  if (frame.size() < sizeof(h)) return absl::InvalidArgumentError("frame: shorter than its header");
  std::memcpy(&h, frame.data(), sizeof(h));
  if (std::memcmp(h.magic, kFrameMagic, sizeof(h.magic)) != 0) {
    return absl::InvalidArgumentError("frame: bad magic");
  }
  return h;
}

uint64_t RequestIdOf(std::string_view frame) {
  FrameHeader h{};
  if (frame.size() < sizeof(h)) return 0;
  std::memcpy(&h, frame.data(), sizeof(h));
  return h.request_id;
}

std::string EncodeReply(uint64_t request_id, int code, std::string_view message,
                        std::string_view details, std::string_view body, size_t max_bytes) {
  ReplyHeader r{};
  std::memcpy(r.magic, kFrameMagic, sizeof(r.magic));
  r.code = code;
  r.request_id = request_id;
  r.message_bytes = static_cast<uint32_t>(message.size());
  r.details_bytes = static_cast<uint32_t>(details.size());
  const size_t size = sizeof(r) + message.size() + details.size() + body.size();
  if (size > max_bytes) {
    // The call ran, but its answer does not fit a frame.
    const std::string text =
        absl::StrCat("the reply of ", size, " bytes exceeds the path's frame limit");
    return EncodeReply(request_id, 14 /* UNAVAILABLE */, text, "", "", SIZE_MAX);
  }
  std::string reply(reinterpret_cast<const char*>(&r), sizeof(r));
  reply.reserve(size);
  reply.append(message);
  reply.append(details);
  reply.append(body);
  return reply;
}

absl::StatusOr<CallReply> DecodeReply(std::string_view frame, uint64_t request_id,
                                      std::string_view what) {
  ReplyHeader r{};
  if (frame.size() < sizeof(r)) {
    return absl::UnavailableError(absl::StrCat(Sv(what), ": short reply"));
  }
  std::memcpy(&r, frame.data(), sizeof(r));
  if (std::memcmp(r.magic, kFrameMagic, sizeof(r.magic)) != 0 || r.request_id != request_id ||
      uint64_t{r.message_bytes} + r.details_bytes > frame.size() - sizeof(r)) {
    return absl::UnavailableError(absl::StrCat(Sv(what), ": malformed reply"));
  }
  std::string_view rest = frame.substr(sizeof(r));
  CallReply reply;
  reply.code = r.code;
  reply.message = std::string(rest.substr(0, r.message_bytes));
  reply.details = std::string(rest.substr(r.message_bytes, r.details_bytes));
  reply.body = std::string(rest.substr(uint64_t{r.message_bytes} + r.details_bytes));
  return reply;
}

std::string JoinSessionAndRequest(std::string_view session, std::string_view request) {
  std::string body(2, '\0');
  body[0] = static_cast<char>(session.size() & 0xff);
  body[1] = static_cast<char>(session.size() >> 8);
  body.append(session);
  body.append(request);
  return body;
}

absl::StatusOr<SessionAndRequest> SplitSessionAndRequest(std::string_view body) {
  if (body.size() < 2) return absl::InvalidArgumentError("frame: no session length");
  const size_t n =
      static_cast<uint8_t>(body[0]) | static_cast<size_t>(static_cast<uint8_t>(body[1])) << 8;
  if (body.size() - 2 < n) {
    return absl::InvalidArgumentError("frame: shorter than its session length says");
  }
  return SessionAndRequest{body.substr(2, n), body.substr(2 + n)};
}

}  // namespace kvtier::protocol::shm
