// kvtierd configuration: the textproto kvtier.v1.ServerConfig, its defaults, validation,
// command-line overrides and the conversions between proto and storage types.
//
// Precedence: built-in defaults < --config FILE < flags. Every ServerConfig field left
// at its proto zero value gets the documented default (see kvtier.proto), except `port`,
// where 0 from a file means "default 50051" and only the --port flag can ask for 0 (bind
// a free port).
#ifndef KVTIER_SERVICE_CONFIG_H_
#define KVTIER_SERVICE_CONFIG_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "events/config.h"
#include "kv/codec.h"
#include "kvtier/v1/kvtier.pb.h"
#include "storage/store_types.h"

namespace kvtier::service {

inline constexpr uint32_t kDefaultPort = 50051;
// Longest Unix socket path (sockaddr_un.sun_path less the terminating NUL).
inline constexpr size_t kMaxShmSocketPath = 107;

// Parses a textproto ServerConfig (no defaults applied). INVALID_ARGUMENT with the
// parser's line:column message on a syntax error.
absl::StatusOr<v1::ServerConfig> ParseConfigText(std::string_view text);

// Reads and parses `path`. NOT_FOUND if it cannot be read, else as ParseConfigText.
absl::StatusOr<v1::ServerConfig> LoadConfigFile(const std::string& path);

// Fills every zero-valued field of `config` (and its namespaces' optional fields) with
// its default.
void ApplyDefaults(v1::ServerConfig& config);

// Checks a defaulted config. The tls files are read: certificate and key must parse and
// match (protocol::CheckTlsFiles). INVALID_ARGUMENT naming the first bad field (e.g.
// "low_watermark (0.95) must be below high_watermark (0.9)", "namespaces[1].layout...").
absl::Status ValidateConfig(const v1::ServerConfig& config);

// What main() should do.
struct CommandLine {
  enum class Mode { kServe, kCheckConfig, kHelp };
  Mode mode = Mode::kServe;
  v1::ServerConfig config;  // defaulted and validated (kServe / kCheckConfig)
  // --recover: rebuild the cold tier's index and namespaces from its slab before serving
  // (storage/rocksdb_cold_tier.h, docs/recovery.md).
  bool recover = false;
};

// Parses argv[1..] (`--flag value` or `--flag=value`): --config FILE, --check-config
// FILE, --port, --listen, --data-dir, --hot-capacity, --cold-capacity (sizes as
// common/byte_size.h), --policy, --hot-allocator, --metrics-port, --node-id,
// --executor-threads, --max-message-bytes, --warm-from-cold, --shm-socket, --tls-cert,
// --tls-key, --tls-client-ca, --tls-require-client-cert, --events-endpoint,
// --events-replay-endpoint, --recover, --help (-h).
// Loads the file, applies defaults, then the flags, then validates. INVALID_ARGUMENT
// naming the flag ("unknown flag --x", "--port: missing value") or field; NOT_FOUND for
// an unreadable config file.
absl::StatusOr<CommandLine> ParseCommandLine(const std::vector<std::string>& args);

// Usage text for --help: every flag, every eviction policy, the size syntax and the
// defaults.
std::string UsageText();

// Store options for a validated config.
storage::StoreOptions ToStoreOptions(const v1::ServerConfig& config);

// Event publisher options for a config: ServerConfig.events, its zero fields replaced by
// the events::EventsConfig defaults, with `node_id` as the topic's node id. Unknown
// format names leave the default (ValidateConfig refuses them).
events::EventsConfig ToEventsConfig(const v1::ServerConfig& config, std::string node_id);

// Proto <-> storage conversions (layouts and codecs: protocol/convert.h). FromProto
// returns INVALID_ARGUMENT naming the field (prefixed with `field`, e.g.
// "spec.layout.head_dim ...") when the spec is invalid.
absl::StatusOr<storage::NamespaceOptions> NamespaceFromProto(const v1::NamespaceSpec& spec,
                                                             std::string_view field);
v1::NamespaceSpec NamespaceToProto(const storage::NamespaceOptions& ns);
v1::Tier TierToProto(storage::Tier tier);

// The server's prefix-key hash scheme version (kv/prefix_key.h when present).
const char* HashSchemeVersion();

}  // namespace kvtier::service

#endif  // KVTIER_SERVICE_CONFIG_H_
