// Entry points of the `kvtier eval` subcommands (offline evaluation, no server). Each takes
// the arguments after `eval` (argv[0] is the subcommand name, "codecs" or "compaction")
// and returns the process exit code: 0 success, 1 failure, 2 usage error.
#ifndef KVTIER_CLIENT_CLI_EVAL_COMMANDS_H_
#define KVTIER_CLIENT_CLI_EVAL_COMMANDS_H_

namespace kvtier::cli {

// `kvtier eval codecs [--json] [--seed N] ...`: codec size vs attention fidelity on
// synthetic K/V (client/cli/eval_codecs.cc).
int RunEvalCodecs(int argc, char** argv);

// `kvtier eval compaction [--json] ...`: token compaction vs needle retrieval
// (client/cli/eval_compaction.cc).
int RunEvalCompaction(int argc, char** argv);

}  // namespace kvtier::cli

#endif  // KVTIER_CLIENT_CLI_EVAL_COMMANDS_H_
