// A tiny command-line flag parser for the `kvtier` subcommands (flags are read only in
// main() and the Run* entry points). Accepts `--name value`, `--name=value` and bare
// boolean `--name`; everything else is positional.
#ifndef KVTIER_TOOLS_FLAGS_H_
#define KVTIER_TOOLS_FLAGS_H_

#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvtier::tools {

// Thread-compatible.
class Flags {
 public:
  // Parses argv[first..argc). `bool_flags` names flags that never take a value (so
  // `--json file` keeps `file` positional).
  static Flags Parse(int argc, char** argv, int first,
                     std::initializer_list<std::string_view> bool_flags);

  // Returns INVALID_ARGUMENT naming the first flag not in `known`.
  absl::Status CheckKnown(std::initializer_list<std::string_view> known) const;

  bool Has(std::string_view name) const;
  std::string GetString(std::string_view name, std::string_view def) const;
  // INVALID_ARGUMENT naming the flag if the value does not parse.
  absl::StatusOr<int64_t> GetInt(std::string_view name, int64_t def) const;
  absl::StatusOr<double> GetDouble(std::string_view name, double def) const;
  // Parses common::ParseByteSize forms (512, 64K, 64KiB, 2MiB, 8GiB); INVALID_ARGUMENT
  // naming the flag otherwise (decimal units such as 4MB are refused).
  absl::StatusOr<uint64_t> GetBytes(std::string_view name, uint64_t def) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::map<std::string, std::string, std::less<>> values_;
  std::vector<std::string> positional_;
};

// The bearer token for servers with tenants: --auth-token, else $KVTIER_AUTH_TOKEN, else "".
std::string AuthTokenFromFlags(const Flags& flags);

// TLS to the server (client::ClientOptions::tls*): --tls (system roots), --tls-ca FILE,
// --tls-cert FILE, --tls-key FILE (client certificate), --tls-server-name NAME. Commands
// list these in CheckKnown and "tls" among the boolean flags.
struct TlsFlags {
  bool tls = false;  // any of the flags given
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
  std::string server_name;
};
TlsFlags TlsFromFlags(const Flags& flags);

// Copies TlsFromFlags(flags) into a client::ClientOptions (a template so this library
// needs no client headers).
template <typename ClientOptionsT>
void ApplyTlsFlags(const Flags& flags, ClientOptionsT* options) {
  TlsFlags t = TlsFromFlags(flags);
  options->tls = t.tls;
  options->tls_ca_file = std::move(t.ca_file);
  options->tls_cert_file = std::move(t.cert_file);
  options->tls_key_file = std::move(t.key_file);
  options->tls_server_name = std::move(t.server_name);
}

}  // namespace kvtier::tools

#endif  // KVTIER_TOOLS_FLAGS_H_
