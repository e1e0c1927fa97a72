// Entry points of the `kvtier` subcommands. Each takes the arguments after the
// subcommand name (argv[0] is the subcommand) and returns the process exit code:
// 0 success, 1 failure, 2 usage error.
#ifndef KVTIER_CLIENT_CLI_COMMANDS_H_
#define KVTIER_CLIENT_CLI_COMMANDS_H_

namespace kvtier::cli {

int RunEval(int argc, char** argv);        // eval codecs | eval compaction
int RunReplay(int argc, char** argv);      // replay a Mooncake trace against TieredStore
int RunBench(int argc, char** argv);       // load generator against kvtierd or Redis
int RunAdmin(int argc, char** argv);       // stats, namespaces, lookup, put, get, evict, flush

}  // namespace kvtier::cli

#endif  // KVTIER_CLIENT_CLI_COMMANDS_H_
