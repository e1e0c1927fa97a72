// `kvtier eval <codecs|compaction>`: dispatches to the offline evaluations.
#include <cstdio>
#include <string_view>

#include "tools/commands.h"
#include "tools/eval_commands.h"

namespace kvtier::tools {
namespace {

constexpr char kEvalUsage[] =
    "usage: kvtier eval <codecs|compaction> [flags]\n"
    "  codecs      codec size vs attention fidelity on synthetic K/V\n"
    "  compaction  token compaction vs needle retrieval on synthetic K/V\n"
    "Run `kvtier eval <name> --help` for its flags.\n";

}  // namespace

int RunEval(int argc, char** argv) {
  if (argc < 2) {
    std::fputs(kEvalUsage, stderr);
    return 2;
  }
  const std::string_view sub = argv[1];
  if (sub == "codecs") return RunEvalCodecs(argc - 1, argv + 1);
  if (sub == "compaction") return RunEvalCompaction(argc - 1, argv + 1);
  if (sub == "--help" || sub == "-h" || sub == "help") {
    std::fputs(kEvalUsage, stdout);
    return 0;
  }
  std::fprintf(stderr, "kvtier eval: unknown evaluation '%s'\n%s", argv[1], kEvalUsage);
  return 2;
}

}  // namespace kvtier::tools
