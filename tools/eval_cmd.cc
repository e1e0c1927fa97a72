// `kvtier eval <codecs|compaction|model>`: dispatches to the offline evaluations.
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "tools/commands.h"
#include "tools/eval_commands.h"

namespace kvtier::tools {
namespace {

constexpr char kEvalUsage[] =
    "usage: kvtier eval <codecs|compaction|model> [flags]\n"
    "  codecs      codec size vs attention fidelity on synthetic K/V\n"
    "  compaction  token compaction vs needle retrieval on synthetic K/V\n"
    "  model       codecs and compaction on a real model's K/V through kvtierd (Python)\n"
    "Run `kvtier eval <name> --help` for its flags.\n";

// `kvtier eval model`: the real-model evaluation is Python (kvtier.eval_model, torch and
// transformers). Execs the interpreter of the venv scripts/model_env.sh creates
// ($KVTIER_MODEL_PYTHON overrides it) with the build tree's package (<this binary's
// folder>/../../python) ahead of PYTHONPATH; returns only when that fails.
int RunEvalModel(int argc, char** argv) {
  std::string python;
  if (const char* p = std::getenv("KVTIER_MODEL_PYTHON")) python = p;
  if (python.empty()) {
    const char* cache = std::getenv("KVTIER_CACHE");
    const char* home = std::getenv("HOME");
    python = (cache != nullptr ? std::string(cache)
                               : std::string(home != nullptr ? home : "") + "/.cache/kvtier") +
             "/venv-model/bin/python";
  }
  if (access(python.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "kvtier eval model: %s is missing: run scripts/model_env.sh\n",
                 python.c_str());
    return 1;
  }
  char exe[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) {
    std::string package(exe, static_cast<size_t>(n));
    package = package.substr(0, package.rfind('/')) + "/../../python";
    if (const char* old = std::getenv("PYTHONPATH"); old != nullptr && *old != '\0') {
      package += std::string(":") + old;
    }
    setenv("PYTHONPATH", package.c_str(), 1);
  }
  std::vector<char*> args = {python.data(), const_cast<char*>("-m"),
                             const_cast<char*>("kvtier.eval_model")};
  for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  execv(python.c_str(), args.data());
  std::perror("kvtier eval model: exec");
  return 1;
}

}  // namespace

int RunEval(int argc, char** argv) {
  if (argc < 2) {
    std::fputs(kEvalUsage, stderr);
    return 2;
  }
  const std::string_view sub = argv[1];
  if (sub == "codecs") return RunEvalCodecs(argc - 1, argv + 1);
  if (sub == "compaction") return RunEvalCompaction(argc - 1, argv + 1);
  if (sub == "model") return RunEvalModel(argc - 1, argv + 1);
  if (sub == "--help" || sub == "-h" || sub == "help") {
    std::fputs(kEvalUsage, stdout);
    return 0;
  }
  std::fprintf(stderr, "kvtier eval: unknown evaluation '%s'\n%s", argv[1], kEvalUsage);
  return 2;
}

}  // namespace kvtier::tools
