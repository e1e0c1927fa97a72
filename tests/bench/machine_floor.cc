// What the machine itself costs, below anything kvtier does (not a test, not CI): the
// round trip of a 64-byte ping-pong between two processes over loopback TCP and over a
// Unix socket (the floor of any same-host call, gRPC or socket frame), and the cost of
// touching fresh anonymous memory, one write per 4 KiB page, in several rounds (a VM may
// back a guest page slowly the first time it is used; later rounds reuse pages).
//
//   build/tests/bench/machine_floor [--round-trips N] [--touch-gib G] [--touch-rounds R]
//
// Prints one line per measurement: p50 / p99 of the round trips in us, and us per page.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kMessage = 64;

bool WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = write(fd, p, n);
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool ReadAll(int fd, char* p, size_t n) {
  while (n > 0) {
    const ssize_t r = read(fd, p, n);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// Echoes 64-byte messages on `fd` until the peer closes it.
[[noreturn]] void Echo(int fd) {
  char b[kMessage];
  while (ReadAll(fd, b, kMessage) && WriteAll(fd, b, kMessage)) {
  }
  _exit(0);
}

// Times `n` round trips on `fd` (a connected socket whose peer echoes); prints p50 / p99.
void TimeRoundTrips(const char* what, int fd, int n) {
  std::vector<double> us;
  us.reserve(n);
  char b[kMessage] = {};
  for (int i = 0; i < n; ++i) {
    const auto t0 = Clock::now();
    if (!WriteAll(fd, b, kMessage) || !ReadAll(fd, b, kMessage)) {
      std::fprintf(stderr, "%s: the echo process went away\n", what);
      std::exit(1);
    }
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  std::sort(us.begin(), us.end());
  std::printf("%-24s p50 %7.1f us  p99 %7.1f us  (%d round trips)\n", what, us[us.size() / 2],
              us[us.size() * 99 / 100], n);
}

void UnixPingPong(int n) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) std::exit(1);
  const pid_t child = fork();
  if (child == 0) {
    close(sv[0]);
    Echo(sv[1]);
  }
  close(sv[1]);
  TimeRoundTrips("unix socket ping-pong", sv[0], n);
  close(sv[0]);
  waitpid(child, nullptr, 0);
}

void TcpPingPong(int n) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(listener, 1) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    std::exit(1);
  }
  const int one = 1;
  const pid_t child = fork();
  if (child == 0) {
    const int c = accept(listener, nullptr, nullptr);
    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    Echo(c);
  }
  close(listener);
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) std::exit(1);
  setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  TimeRoundTrips("loopback TCP ping-pong", s, n);
  close(s);
  waitpid(child, nullptr, 0);
}

void TouchRounds(size_t gib, int rounds) {
  const size_t bytes = gib << 30;
  for (int r = 0; r < rounds; ++r) {
    const auto t0 = Clock::now();
    auto* p = static_cast<char*>(
        mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (p == MAP_FAILED) std::exit(1);
    for (size_t i = 0; i < bytes; i += 4096) p[i] = 1;
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    munmap(p, bytes);
    std::printf("first touch, %zu GiB, round %d  %5.2f us per 4 KiB page\n", gib, r + 1,
                us / static_cast<double>(bytes / 4096));
  }
}

}  // namespace

int main(int argc, char** argv) {
  int round_trips = 20000;
  size_t touch_gib = 1;
  int touch_rounds = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--round-trips") {
      round_trips = std::max(1, std::atoi(argv[i + 1]));
    } else if (flag == "--touch-gib") {
      touch_gib = static_cast<size_t>(std::max(1, std::atoi(argv[i + 1])));
    } else if (flag == "--touch-rounds") {
      touch_rounds = std::max(1, std::atoi(argv[i + 1]));
    } else {
      std::fprintf(stderr, "unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  TcpPingPong(round_trips);
  UnixPingPong(round_trips);
  TouchRounds(touch_gib, touch_rounds);
  return 0;
}
