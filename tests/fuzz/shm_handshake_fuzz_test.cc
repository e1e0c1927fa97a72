// Mutation fuzzing of the shared-memory handshake (protocol/shm_wire.h) at both ends:
// mutated ShmRequest bytes against a real ShmServer (dataplane/shm_server.h), and mutated
// ShmReply bytes from a fake server against the real client (client/shared_region.h).
// Every message of the right size gets an answer (a granted region or a NUL-terminated
// reason), every other message a closed connection; nothing crashes or hangs, and the
// server keeps granting well-formed requests afterwards.
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/shared_region.h"
#include "dataplane/shm_server.h"
#include "gtest/gtest.h"
#include "protocol/shm_wire.h"
#include "tests/testing/mutator.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace kvtier::dataplane {
namespace {

namespace shm = protocol::shm;

constexpr uint64_t kRegionBytes = 4096;

template <typename T>
std::string Bytes(const T& v) {
  return std::string(reinterpret_cast<const char*>(&v), sizeof(v));
}

int Connect(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  const int sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (sock < 0) return -1;
  if (connect(sock, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(sock);
    return -1;
  }
  return sock;
}

// Waits up to 10 s for a message or EOF; returns the received bytes (empty on EOF) and
// sets *fd to an attached descriptor or -1. Fails the test on a timeout (a hang).
std::string ReceiveWithin10s(int sock, int* fd) {
  *fd = -1;
  pollfd p{sock, POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 10000), 1) << "no answer within 10 s";
  char buf[1024];
  char control[CMSG_SPACE(sizeof(int))];
  iovec iov{buf, sizeof(buf)};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  const ssize_t n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      std::memcpy(fd, CMSG_DATA(c), sizeof(int));
    }
  }
  return n > 0 ? std::string(buf, n) : std::string();
}

TEST(ShmHandshakeFuzzTest, ServerAnswersEveryMutatedRequestAndKeepsServing) {
  testing::TempDir dir;
  ShmServerOptions options;
  options.socket_path = dir.Sub("kvtierd.sock");
  options.max_region_bytes = 1 << 20;
  options.max_sessions = 1 << 20;
  auto server = ShmServer::Start(options);
  ASSERT_OK(server);
  shm::ShmRequest good{};
  std::memcpy(good.magic, shm::kMagic, sizeof(good.magic));
  good.region_bytes = kRegionBytes;
  std::memcpy(good.instance, (*server)->instance_id().data(), shm::kInstanceBytes);
  const std::string seed = Bytes(good);

  testing::Mutator m(7);
  int granted = 0, refused = 0, closed = 0;
  for (int it = 0; it < 3000; ++it) {
    SCOPED_TRACE(absl::StrCat("iteration ", it));
    std::string req = m.Mutate(seed);
    if (m.Below(2) == 0) req.resize(seed.size());  // half keep the size, to reach the checks
    const int sock = Connect(options.socket_path);
    ASSERT_GE(sock, 0);
    // An empty message cannot be told from EOF on SOCK_SEQPACKET; send at least one byte.
    if (req.empty()) req.push_back('\0');
    ASSERT_OK(shm::SendMessage(sock, req.data(), req.size()));
    int fd = -1;
    const std::string reply_bytes = ReceiveWithin10s(sock, &fd);
    if (reply_bytes.empty()) {
      ++closed;
      EXPECT_NE(req.size(), seed.size()) << "a request of the right size got no answer";
    } else {
      ASSERT_EQ(reply_bytes.size(), sizeof(shm::ShmReply));
      shm::ShmReply reply;
      std::memcpy(&reply, reply_bytes.data(), sizeof(reply));
      EXPECT_EQ(std::memcmp(reply.magic, shm::kMagic, sizeof(reply.magic)), 0);
      if (reply.ok == 1) {
        ++granted;
        EXPECT_GE(fd, 0);
        EXPECT_GE(reply.region_bytes, 1u);
        EXPECT_LE(reply.region_bytes, options.max_region_bytes);
      } else {
        ++refused;
        EXPECT_LT(fd, 0);
        const size_t len = strnlen(reply.error, sizeof(reply.error));
        EXPECT_LT(len, sizeof(reply.error)) << "reason is not NUL-terminated";
        EXPECT_GT(len, 0u) << "refused without a reason";
      }
    }
    if (fd >= 0) close(fd);
    close(sock);
  }
  EXPECT_GT(granted, 0);
  EXPECT_GT(refused, 0);
  EXPECT_GT(closed, 0);
  auto region = client::SharedRegion::Open(options.socket_path, kRegionBytes,
                                           (*server)->instance_id());
  ASSERT_OK(region);
}

TEST(ShmHandshakeFuzzTest, ClientRejectsEveryMutatedReplyWithAMessage) {
  testing::TempDir dir;
  const std::string path = dir.Sub("fake.sock");
  const int listener = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  ASSERT_GE(listener, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(listener, 16), 0);

  const std::string instance(shm::kInstanceBytes, 'i');
  shm::ShmReply good{};
  std::memcpy(good.magic, shm::kMagic, sizeof(good.magic));
  good.ok = 1;
  good.region_bytes = kRegionBytes;
  std::memset(good.session, 's', sizeof(good.session));
  std::memcpy(good.instance, instance.data(), shm::kInstanceBytes);
  testing::Mutator m(11);
  constexpr int kIterations = 2000;
  std::vector<std::string> replies;
  std::vector<uint64_t> attach;  // memfd size to attach; 0: none
  for (int it = 0; it < kIterations; ++it) {
    std::string r = m.Mutate(Bytes(good));
    if (m.Below(2) == 0) r.resize(sizeof(good));
    if (r.empty()) r.push_back('\0');
    replies.push_back(r);
    const uint64_t sizes[] = {0, kRegionBytes / 2, kRegionBytes, kRegionBytes, kRegionBytes};
    attach.push_back(sizes[m.Below(5)]);
  }
  // The fake server: one connection per iteration, answering the precomputed reply with
  // a memfd attached most of the time (sometimes one smaller than the region granted).
  std::thread fake([&] {
    for (int it = 0; it < kIterations; ++it) {
      const int conn = accept(listener, nullptr, nullptr);
      if (conn < 0) return;
      char req[sizeof(shm::ShmRequest)];
      int stray = -1;
      (void)shm::ReceiveMessage(conn, req, sizeof(req), &stray);
      if (stray >= 0) close(stray);
      int fd = -1;
      if (attach[it] > 0) {
        fd = memfd_create("fuzz", MFD_CLOEXEC);
        if (fd >= 0 && ftruncate(fd, static_cast<off_t>(attach[it])) != 0) {
          close(fd);
          fd = -1;
        }
      }
      (void)shm::SendMessage(conn, replies[it].data(), replies[it].size(), fd);
      if (fd >= 0) close(fd);
      close(conn);
    }
  });
  int opened = 0;
  for (int it = 0; it < kIterations; ++it) {
    SCOPED_TRACE(absl::StrCat("iteration ", it));
    auto region = client::SharedRegion::Open(path, kRegionBytes, instance);
    if (region.ok()) {
      ++opened;
      EXPECT_EQ((*region)->size(), kRegionBytes);
    } else {
      EXPECT_FALSE(region.status().message().empty());
    }
  }
  fake.join();
  close(listener);
  EXPECT_GT(opened, 0);
}

}  // namespace
}  // namespace kvtier::dataplane
