// kvtier: the command-line tool for kvtier operators and serving engineers.
#include <malloc.h>

#include <cstdio>
#include <string_view>

#include "client/cli/commands.h"
#include "tools/commands.h"

namespace {

constexpr char kUsage[] =
    "usage: kvtier <command> [flags]\n"
    "\n"
    "Talk to a server (all take --server HOST:PORT, default 127.0.0.1:50051, --json, and\n"
    "--auth-token T, default $KVTIER_AUTH_TOKEN, for servers with tenants, and the TLS\n"
    "flags --tls-ca FILE, --tls-cert FILE, --tls-key FILE, --tls-server-name NAME):\n"
    "  stats [--watch] [--cluster]   hit rates, bytes and evictions per namespace and tier\n"
    "  namespaces                    registered namespaces and their layouts\n"
    "  lookup                        how much of a prefix is cached, and where\n"
    "  put | get                     store or fetch blocks (a file or generated blocks)\n"
    "  evict | flush                 admin eviction, make hot blocks durable\n"
    "  drop-namespace                remove a namespace and all its blocks\n"
    "  recover [--verify]            rebuild (or check) the cold index from the slab\n"
    "  admin COMMAND ...             the same commands (`kvtier admin recover`)\n"
    "  health [--service NAME]       exit 0 when the server is SERVING (exec probes)\n"
    "  bench                         load generator (--server ADDR or --redis ADDR)\n"
    "\n"
    "Offline evaluation (no server):\n"
    "  eval codecs [--json] [--seed N]      codec size vs attention fidelity\n"
    "  eval compaction [--json]             token compaction vs needle retrieval\n"
    "  replay --trace FILE ...              hit rate of a Mooncake trace vs capacity\n"
    "\n"
    "Run `kvtier <command> --help` for a command's flags. A 5-minute tour:\n"
    "  kvtierd --port 50051 --data-dir /tmp/kvtier-demo &\n"
    "  kvtier put --namespace demo --layout 4x2x64x16 --codec kivi2 --generate 8 --seed 1 \\\n"
    "             --shared-prefix 4         # registers demo, stores 8 blocks\n"
    "  kvtier put --namespace demo --generate 6 --seed 2 --shared-prefix 4\n"
    "  kvtier lookup --namespace demo --generate 8 --seed 3 --shared-prefix 4\n"
    "  kvtier stats\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  const std::string_view command = argv[1];
  // Multi-MiB payload buffers (gRPC read slices, fetched blocks) churn through malloc. With
  // glibc's defaults each one is a fresh mmap (or a trimmed heap top) and every byte
  // written to it page-faults first: measured here that cost about 40% of the client CPU
  // of a 2 MiB Get. Keep such memory in the heap and do not give it back eagerly.
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
  if (command == "--help" || command == "-h" || command == "help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (command == "eval") return kvtier::tools::RunEval(argc - 1, argv + 1);
  if (command == "replay") return kvtier::tools::RunReplay(argc - 1, argv + 1);
  if (command == "bench") return kvtier::tools::RunBench(argc - 1, argv + 1);
  if (command == "health") return kvtier::cli::RunHealth(argc - 1, argv + 1);
  if (command == "stats" || command == "namespaces" || command == "lookup" ||
      command == "put" || command == "get" || command == "evict" || command == "flush" ||
      command == "drop-namespace" || command == "recover") {
    return kvtier::cli::RunAdmin(argc - 1, argv + 1);
  }
  // `kvtier admin COMMAND`: the admin commands under one word.
  if (command == "admin" && argc > 2) return kvtier::cli::RunAdmin(argc - 2, argv + 2);
  std::fprintf(stderr, "kvtier: unknown command '%s'\n\n%s", argv[1], kUsage);
  return 2;
}
