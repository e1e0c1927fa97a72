// What UCX itself gives kvtier's cross-host data path, below anything the service does
// (not a test, not CI): two processes, each a ucx::Worker (ucx/ucx_worker.h),
// the parent sending active messages of --size bytes with --window of them in flight,
// the child receiving each (rendezvous) into one of 64 buffers in turn. No gRPC, no
// store, no headers to wait for: the ceiling of a Put over UCX on this machine, with the
// worker's own threading (progress thread, polling rule). Transports from UCX_TLS.
//
//   build/tests/bench/ucx_floor [--size SIZE] [--window W] [--seconds S]   (SIZE: 2MiB, 262144,
//   ...) [--sender-cpu N --receiver-cpu M]   (pin each process to one CPU, as two hosts)
//
// Prints one JSON object in `kvtier bench --json`'s form (system "ucx-floor", phase
// "put"): GB/s, p50 / p99 of a message from Send to its completion, and CPU seconds per
// GB of the sending and of the receiving process. tests/bench/redis_vs_kvtier.sh runs it
// next to Redis and kvtier over UCX.
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/byte_size.h"
#include "common/mutex.h"
#include "common/process_cpu.h"
#include "ucx/ucx_worker.h"

namespace {

namespace tp = ::kvtier::ucx;
using Clock = std::chrono::steady_clock;
constexpr uint16_t kAmData = 1;
constexpr size_t kSlots = 64;

// Pins this process (and the threads it starts later) to `cpu`; no-op when cpu < 0.
void PinTo(int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0) std::perror("ucx_floor: sched_setaffinity");
}

// The receiving process: writes its port to `port_fd`, receives until
// `stop_fd` reaches end of file (the parent closed it, or exited), then returns.
int Receiver(size_t size, int port_fd, int stop_fd) {
  auto worker = tp::Worker::Create(tp::WorkerOptions{});
  if (!worker.ok()) {
    std::fprintf(stderr, "ucx_floor: %s\n", std::string(worker.status().message()).c_str());
    return 1;
  }
  std::vector<uint8_t> slots(kSlots * size);
  size_t next = 0;  // progress thread only
  (*worker)->SetHandler(kAmData, [&](tp::EndpointId, std::string_view, tp::Incoming in) {
    if (in.length() != size) return;  // dropped
    in.Receive(slots.data() + (next++ % kSlots) * size, [](absl::Status) {});
  });
  auto port = (*worker)->Listen("127.0.0.1", 0);
  if (!port.ok()) return 1;
  const uint16_t p = *port;
  if (write(port_fd, &p, sizeof(p)) != sizeof(p)) return 1;
  char c;
  (void)!read(stop_fd, &c, 1);  // returns at EOF
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  size_t size = 2 << 20;
  size_t window = 4;
  double seconds = 5;
  int sender_cpu = -1, receiver_cpu = -1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--size") {
      auto bytes = kvtier::common::ParseByteSize(argv[i + 1], "--size");
      if (!bytes.ok() || *bytes == 0) {
        std::fprintf(
            stderr, "ucx_floor: %s\n",
            bytes.ok() ? "--size: must be > 0" : std::string(bytes.status().message()).c_str());
        return 2;
      }
      size = *bytes;
    } else if (flag == "--window") {
      window = std::max<size_t>(1, std::strtoull(argv[i + 1], nullptr, 10));
    } else if (flag == "--seconds") {
      seconds = std::strtod(argv[i + 1], nullptr);
    } else if (flag == "--sender-cpu") {
      sender_cpu = std::atoi(argv[i + 1]);
    } else if (flag == "--receiver-cpu") {
      receiver_cpu = std::atoi(argv[i + 1]);
    } else {
      std::fprintf(stderr,
                   "usage: ucx_floor [--size SIZE] [--window W] [--seconds S] "
                   "[--sender-cpu N --receiver-cpu M]\n");
      return 2;
    }
  }
  int port_pipe[2], stop_pipe[2];
  if (pipe(port_pipe) != 0 || pipe(stop_pipe) != 0) return 1;
  const pid_t child = fork();
  if (child == 0) {
    close(port_pipe[0]);
    close(stop_pipe[1]);
    PinTo(receiver_cpu);
    _exit(Receiver(size, port_pipe[1], stop_pipe[0]));
  }
  close(port_pipe[1]);
  close(stop_pipe[0]);
  uint16_t port = 0;
  if (read(port_pipe[0], &port, sizeof(port)) != sizeof(port)) {
    std::fprintf(stderr, "ucx_floor: the receiver did not start\n");
    return 1;
  }

  PinTo(sender_cpu);
  auto worker = tp::Worker::Create(tp::WorkerOptions{});
  if (!worker.ok()) return 1;
  auto ep = (*worker)->Connect("127.0.0.1", port);
  if (!ep.ok()) return 1;
  std::vector<uint8_t> payload(size, 0x5a);
  kvtier::common::Mutex mu;
  size_t in_flight = 0;
  size_t failed = 0;
  std::vector<double> latencies_us;
  auto send_one = [&] {
    const auto start = Clock::now();
    (*worker)->Send(
        *ep, kAmData, std::string(16, 'h'), payload.data(), size, [&, start](absl::Status s) {
          const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
          kvtier::common::MutexLock lock(&mu);
          --in_flight;
          if (s.ok()) {
            latencies_us.push_back(us);
          } else {
            ++failed;
          }
        });
  };
  auto below_window = +[](std::pair<size_t*, size_t>* a)
                           ABSL_NO_THREAD_SAFETY_ANALYSIS { return *a->first < a->second; };
  auto drained = +[](size_t* n) ABSL_NO_THREAD_SAFETY_ANALYSIS { return *n == 0; };
  std::pair<size_t*, size_t> arg{&in_flight, window};
  // One warm-up second (connection, first touches), then the measured phase.
  for (int phase = 0; phase < 2; ++phase) {
    const double length = phase == 0 ? 1.0 : seconds;
    const double self0 = kvtier::common::SelfCpuSeconds();
    const double child0 = kvtier::common::ProcessCpuSeconds(child);
    {
      kvtier::common::MutexLock lock(&mu);
      latencies_us.clear();
    }
    size_t sent = 0;
    const auto start = Clock::now();
    const auto until = start + std::chrono::duration<double>(length);
    while (Clock::now() < until) {
      {
        kvtier::common::MutexLock lock(&mu);
        mu.Await(kvtier::common::Condition(below_window, &arg));
        ++in_flight;
      }
      send_one();
      ++sent;
    }
    {
      kvtier::common::MutexLock lock(&mu);
      mu.Await(kvtier::common::Condition(drained, &in_flight));
    }
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    const double self1 = kvtier::common::SelfCpuSeconds();
    const double child1 = kvtier::common::ProcessCpuSeconds(child);
    if (phase == 0) continue;
    kvtier::common::MutexLock lock(&mu);
    if (failed > 0 || latencies_us.empty()) {
      std::fprintf(stderr, "ucx_floor: %zu sends failed\n", failed);
      return 1;
    }
    std::sort(latencies_us.begin(), latencies_us.end());
    auto pct = [&](double q) {
      return latencies_us[std::min(
          latencies_us.size() - 1,
          static_cast<size_t>(q * static_cast<double>(latencies_us.size())))];
    };
    const double gb = static_cast<double>(sent) * static_cast<double>(size) / 1e9;
    std::printf(
        "{\"system\":\"ucx-floor\",\"phase\":\"put\",\"block_bytes\":%zu,\"window\":%zu,"
        "\"ops\":%zu,\"seconds\":%.3f,\"gb_per_s\":%.3f,\"p50_us\":%.1f,\"p99_us\":%.1f,"
        "\"client_cpu_s_per_gb\":%.3f,\"server_cpu_s_per_gb\":%.3f}\n",
        size, window, sent, elapsed, gb / elapsed, pct(0.50), pct(0.99), (self1 - self0) / gb,
        (child1 - child0) / gb);
  }
  close(stop_pipe[1]);  // the receiver exits
  int status = 0;
  waitpid(child, &status, 0);
  return 0;
}
