// ShmServer (kvtierd's shared-memory socket) against the real client end, SharedRegion:
// real Unix sockets and memfds in a temp dir.
#include "dataplane/shm_server.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "client/shared_region.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "protocol/shm_wire.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace kvtier::dataplane {
namespace {

using ::testing::HasSubstr;
namespace shm = ::kvtier::protocol::shm;

class ShmServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ShmServerOptions o;
    o.socket_path = dir_.Sub("kvtierd.sock");
    o.max_region_bytes = 8 << 20;
    o.max_sessions = 2;
    auto s = ShmServer::Start(o);
    ASSERT_OK(s);
    server_ = std::move(*s);
  }

  absl::StatusOr<std::shared_ptr<client::SharedRegion>> Open(uint64_t bytes) {
    return client::SharedRegion::Open(server_->socket_path(), bytes, server_->instance_id());
  }

  // Waits until the server has `n` sessions (it drops them asynchronously).
  bool WaitForSessions(size_t n) {
    for (int i = 0; i < 500; ++i) {
      if (server_->session_count() == n) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  testing::TempDir dir_;
  std::unique_ptr<ShmServer> server_;
};

TEST_F(ShmServerTest, ClientAndServerSeeTheSameBytes) {
  auto r = Open(1 << 20);
  ASSERT_OK(r);
  ASSERT_EQ((*r)->size(), 1u << 20);
  std::shared_ptr<ShmRegion> mine = server_->Find((*r)->session());
  ASSERT_NE(mine, nullptr);
  EXPECT_EQ(mine->size(), 1u << 20);
  std::memcpy((*r)->base() + 4096, "from the client", 15);
  EXPECT_EQ(std::memcmp(mine->base() + 4096, "from the client", 15), 0);
  std::memcpy(mine->base() + 100, "from the server", 15);
  EXPECT_EQ(std::memcmp((*r)->base() + 100, "from the server", 15), 0);
  EXPECT_EQ(server_->Find(std::string(shm::kSessionBytes, 'x')), nullptr);
}

TEST_F(ShmServerTest, ClosingTheClientEndsTheSessionButNotAMappingInUse) {
  auto r = Open(1 << 20);
  ASSERT_OK(r);
  const std::string session = (*r)->session();
  std::memcpy((*r)->base(), "kept", 4);
  std::shared_ptr<ShmRegion> in_use = server_->Find(session);
  ASSERT_NE(in_use, nullptr);
  r->reset();  // closes the socket
  ASSERT_TRUE(WaitForSessions(0));
  EXPECT_EQ(server_->Find(session), nullptr);
  EXPECT_EQ(std::memcmp(in_use->base(), "kept", 4), 0);  // still mapped for its user
}

TEST_F(ShmServerTest, RefusesOversizedRegionsAndTooManySessions) {
  auto big = Open((8 << 20) + 1);
  ASSERT_FALSE(big.ok());
  EXPECT_THAT(big.status().message(), HasSubstr("shm_max_region_bytes"));
  auto a = Open(4096), b = Open(4096);
  ASSERT_OK(a);
  ASSERT_OK(b);
  auto c = Open(4096);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(c.status().message(), HasSubstr("shm_max_sessions"));
  a->reset();
  ASSERT_TRUE(WaitForSessions(1));
  EXPECT_OK(Open(4096));
}

TEST_F(ShmServerTest, AnotherServersInstanceIdIsRefused) {
  auto r = client::SharedRegion::Open(server_->socket_path(), 4096,
                                      std::string(shm::kInstanceBytes, '\0'));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("another kvtierd"));
  EXPECT_EQ(server_->session_count(), 0u);  // refused before creating anything
  auto missing = client::SharedRegion::Open(dir_.Sub("nothing.sock"), 4096, "");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kUnavailable);
}

// Speaks the handshake by hand to hold the memfd: it must be sealed against resizing,
// and a request with a bad magic is answered with a reason, not a region.
TEST_F(ShmServerTest, RegionIsSealedAndBadRequestsAreRefused) {
  auto connect_raw = [&] {
    const int sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strcpy(addr.sun_path, server_->socket_path().c_str());
    EXPECT_EQ(connect(sock, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    return sock;
  };
  const int sock = connect_raw();
  shm::ShmRequest req{};
  std::memcpy(req.magic, shm::kMagic, sizeof(req.magic));
  req.region_bytes = 1 << 20;
  std::memcpy(req.instance, server_->instance_id().data(), shm::kInstanceBytes);
  ASSERT_OK(shm::SendMessage(sock, &req, sizeof(req)));
  shm::ShmReply reply{};
  int fd = -1;
  ASSERT_OK(shm::ReceiveMessage(sock, &reply, sizeof(reply), &fd));
  ASSERT_EQ(reply.ok, 1u);
  ASSERT_GE(fd, 0);
  EXPECT_NE(ftruncate(fd, 4096), 0);  // F_SEAL_SHRINK
  EXPECT_EQ(errno, EPERM);
  EXPECT_NE(ftruncate(fd, 2 << 20), 0);  // F_SEAL_GROW
  close(fd);
  close(sock);

  const int bad = connect_raw();
  std::memcpy(req.magic, "NOTKVTIE", 8);
  ASSERT_OK(shm::SendMessage(bad, &req, sizeof(req)));
  ASSERT_OK(shm::ReceiveMessage(bad, &reply, sizeof(reply), &fd));
  EXPECT_EQ(reply.ok, 0u);
  EXPECT_EQ(fd, -1);
  EXPECT_THAT(std::string(reply.error), HasSubstr("magic"));
  close(bad);
}

TEST_F(ShmServerTest, AllocatorReusesAndCoalescesFreedRanges) {
  auto r = Open(64 << 10);
  ASSERT_OK(r);
  client::SharedRegion& region = **r;
  std::vector<uint64_t> parts;
  for (int i = 0; i < 4; ++i) {
    auto at = region.Allocate(16 << 10);
    ASSERT_TRUE(at.has_value());
    parts.push_back(*at);
  }
  EXPECT_FALSE(region.Allocate(1).has_value());  // full
  region.Free(parts[1]);
  region.Free(parts[2]);
  auto joined = region.Allocate(32 << 10);  // needs the two freed neighbours as one range
  ASSERT_TRUE(joined.has_value());
  EXPECT_EQ(*joined, parts[1]);
  EXPECT_EQ(region.Allocate(1 << 20), std::nullopt);
  // Sizes round up to 4 KiB, so a 1-byte buffer still takes a page.
  region.Free(parts[3]);
  auto small = region.Allocate(1);
  ASSERT_TRUE(small.has_value());
  EXPECT_EQ(*small, parts[3]);
  EXPECT_EQ(region.OffsetOf(region.base() + 10, 20), 10u);
  EXPECT_EQ(region.OffsetOf(region.base() + (64 << 10) - 1, 2), std::nullopt);
  int outside = 0;
  EXPECT_EQ(region.OffsetOf(&outside, sizeof(outside)), std::nullopt);
}

TEST(ShmServerStartTest, TooLongPathIsRejectedByName) {
  ShmServerOptions o;
  o.socket_path = "/tmp/" + std::string(200, 'a');
  auto s = ShmServer::Start(o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("shm_socket"));
}

}  // namespace
}  // namespace kvtier::dataplane
