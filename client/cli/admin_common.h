// Helpers shared by the `kvtier` server subcommands (admin_cmd.cc, stats_cmd.cc):
// connecting from flags and formatting output. Thread-compatible (they print to stdout).
#ifndef KVTIER_CLIENT_CLI_ADMIN_COMMON_H_
#define KVTIER_CLIENT_CLI_ADMIN_COMMON_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/client.h"
#include "google/protobuf/message.h"
#include "kvtier/v1/kvtier.pb.h"
#include "tools/flags.h"

namespace kvtier::cli {

// The command-line parser and the TLS / auth-token flag conventions, shared with the
// offline commands in tools/.
using tools::AuthTokenFromFlags;
using tools::ApplyTlsFlags;
using tools::Flags;
using tools::TlsFromFlags;

// A client for --server (default 127.0.0.1:50051) with --auth-token and --timeout-ms
// (default 5000 ms, connect and per call); no shared memory. The connect errors.
absl::StatusOr<std::unique_ptr<client::Client>> ConnectFromFlags(const Flags& flags);

// "512B", "1.5KiB", "2.0MiB", ...
std::string HumanBytes(double bytes);
// "12.5%" for 0.125.
std::string Pct(double fraction);
// The codec's name ("source" for CODEC_UNSPECIFIED).
std::string CodecLabel(v1::Codec codec);
// The message as JSON with proto field names and every primitive field.
std::string ProtoJson(const google::protobuf::Message& message);
// Prints rows as left-aligned columns separated by two spaces.
void PrintTable(const std::vector<std::vector<std::string>>& rows);

// `kvtier stats` (stats_cmd.cc). INVALID_ARGUMENT for bad flags; the server's errors.
absl::Status RunStats(const Flags& flags);

}  // namespace kvtier::cli

#endif  // KVTIER_CLIENT_CLI_ADMIN_COMMON_H_
