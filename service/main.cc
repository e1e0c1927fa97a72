// kvtierd: the kvtier server. See service/config.h for flags and service/server.h for the
// lifecycle. Ready contract (tests/testing/server_process.h): once the gRPC port is bound
// (health NOT_SERVING while the index loads) prints `kvtierd bound on HOST:PORT`, and once
// the store is open and health is SERVING exactly one line `kvtierd listening on
// HOST:PORT` to stdout; every log line goes to stderr. SIGTERM / SIGINT: graceful
// shutdown, store flushed, exit 0.
// --recover (service/config.h CommandLine::recover): before serving, rebuild the cold tier's index and
// namespaces from its slab (storage/rocksdb_cold_tier.h, docs/recovery.md); the rebuild's
// figures are logged. Open does the same by itself whenever it detects a loss.
#include <malloc.h>
#include <signal.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/logging.h"
#include "service/config.h"
#include "service/server.h"
#include "storage/rocksdb_cold_tier.h"

int main(int argc, char** argv) {
  using kvtier::service::CommandLine;
  std::vector<std::string> args(argv + 1, argv + argc);
  auto cl = kvtier::service::ParseCommandLine(args);
  const bool check =
      !args.empty() && (args[0] == "--check-config" || args[0].rfind("--check-config=", 0) == 0);
  if (!cl.ok()) {
    std::fprintf(stderr, "kvtierd: %s\n", std::string(cl.status().message()).c_str());
    if (!check) std::fputs(kvtier::service::UsageText().c_str(), stderr);
    return check ? 1 : 2;
  }
  if (cl->mode == CommandLine::Mode::kHelp) {
    std::fputs(kvtier::service::UsageText().c_str(), stdout);
    return 0;
  }
  if (cl->mode == CommandLine::Mode::kCheckConfig) {
    std::puts("ok");
    return 0;
  }

  if (cl->recover) {
    kvtier::storage::ColdTierOptions cold;
    cold.dir = kvtier::service::ToStoreOptions(cl->config).data_dir;
    cold.recover = true;
    auto tier = kvtier::storage::RocksDbColdTier::Open(cold);
    if (!tier.ok()) {
      KVTIER_LOG(ERROR) << "--recover: " << tier.status().message();
      return 1;
    }
  }

  // Payload-sized buffers (gRPC's TCP read slices, Put block buffers) would otherwise be
  // mmap'ed and unmapped per call, and first-touch page faults cost a third of the Put
  // path (perf). Keep them in the heap and reuse the pages.
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  // Debian's Abseil keeps mutex deadlock detection on; it shows in gRPC's hot paths.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  // Block the stop signals in every thread (threads inherit the mask); main waits for them.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto server = kvtier::service::KvtierServer::Start(cl->config);
  if (!server.ok()) {
    KVTIER_LOG(ERROR) << server.status().message();
    return 1;
  }
  // Bound, health NOT_SERVING while the store rebuilds its index from the cold tier.
  std::printf("kvtierd bound on %s\n", (*server)->address().c_str());
  std::fflush(stdout);
  if (absl::Status s = (*server)->OpenStore(); !s.ok()) {
    KVTIER_LOG(ERROR) << "cannot open the store: " << s.message();
    (void)(*server)->Shutdown();
    return 1;
  }
  KVTIER_LOG(INFO) << "node " << (*server)->node_id() << " serving kvtier.v1 on "
                   << (*server)->address();
  std::printf("kvtierd listening on %s\n", (*server)->address().c_str());
  std::fflush(stdout);

  int sig = 0;
  sigwait(&stop, &sig);
  KVTIER_LOG(INFO) << "signal " << sig << ": shutting down";
  absl::Status s = (*server)->Shutdown();
  if (!s.ok()) {
    KVTIER_LOG(ERROR) << "flush at shutdown failed: " << s.message();
    return 1;
  }
  KVTIER_LOG(INFO) << "store flushed, exiting";
  return 0;
}
