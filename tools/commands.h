// Entry points of the offline `kvtier` subcommands that live in tools/ (the CLI's main.cc
// dispatches to them). Each takes the arguments after the subcommand name (argv[0] is the
// subcommand) and returns the process exit code: 0 success, 1 failure, 2 usage error.
// Each prints to stdout/stderr and is meant to run once per process (not thread-safe).
#ifndef KVTIER_TOOLS_COMMANDS_H_
#define KVTIER_TOOLS_COMMANDS_H_

namespace kvtier::tools {

int RunEval(int argc, char** argv);    // eval codecs | eval compaction (tools/eval_cmd.cc)
int RunReplay(int argc, char** argv);  // replay a Mooncake trace (tools/replay_cmd.cc)
int RunBench(int argc, char** argv);   // load generator, kvtierd or Redis (tools/bench_cmd.cc)

}  // namespace kvtier::tools

#endif  // KVTIER_TOOLS_COMMANDS_H_
