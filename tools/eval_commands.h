// Entry points of the `kvtier eval` subcommands (offline evaluation, no server). Each takes
// the arguments after `eval` (argv[0] is the subcommand name, "codecs" or "compaction")
// and returns the process exit code: 0 success, 1 failure, 2 usage error. They print to
// stdout/stderr; run one at a time.
#ifndef KVTIER_TOOLS_EVAL_COMMANDS_H_
#define KVTIER_TOOLS_EVAL_COMMANDS_H_

namespace kvtier::tools {

// `kvtier eval codecs [--json] [--seed N] ...`: codec size vs attention fidelity on
// synthetic K/V (tools/eval_codecs.cc).
int RunEvalCodecs(int argc, char** argv);

// `kvtier eval compaction [--json] ...`: token compaction vs needle retrieval
// (tools/eval_compaction.cc).
int RunEvalCompaction(int argc, char** argv);

}  // namespace kvtier::tools

#endif  // KVTIER_TOOLS_EVAL_COMMANDS_H_
