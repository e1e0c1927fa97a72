// Entry point of the `kvtier` server subcommands implemented in this folder (the offline
// ones are in tools/commands.h). Takes the arguments after the subcommand name (argv[0] is
// the subcommand) and returns the process exit code: 0 success, 1 failure, 2 usage error.
#ifndef KVTIER_CLIENT_CLI_COMMANDS_H_
#define KVTIER_CLIENT_CLI_COMMANDS_H_

namespace kvtier::cli {

// stats, namespaces, lookup, put, get, evict, flush, drop-namespace
int RunAdmin(int argc, char** argv);
int RunHealth(int argc, char** argv);  // health (grpc.health.v1, for exec probes)

}  // namespace kvtier::cli

#endif  // KVTIER_CLIENT_CLI_COMMANDS_H_
