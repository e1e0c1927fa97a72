#include "tools/flags.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/byte_size.h"
#include "common/strings.h"

namespace kvtier::tools {

Flags Flags::Parse(int argc, char** argv, int first,
                   std::initializer_list<std::string_view> bool_flags) {
  Flags flags;
  for (int i = first; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg.size() < 3 || arg.substr(0, 2) != "--") {
      flags.positional_.emplace_back(arg);
      continue;
    }
    arg.remove_prefix(2);
    if (auto eq = arg.find('='); eq != std::string_view::npos) {
      flags.values_[std::string(arg.substr(0, eq))] = std::string(arg.substr(eq + 1));
      continue;
    }
    const bool is_bool =
        std::find(bool_flags.begin(), bool_flags.end(), arg) != bool_flags.end();
    if (!is_bool && i + 1 < argc && std::string_view(argv[i + 1]).substr(0, 2) != "--") {
      flags.values_[std::string(arg)] = argv[++i];
    } else {
      flags.values_[std::string(arg)] = "true";
    }
  }
  return flags;
}

absl::Status Flags::CheckKnown(std::initializer_list<std::string_view> known) const {
  for (const auto& [name, value] : values_) {
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    }
  }
  return absl::OkStatus();
}

bool Flags::Has(std::string_view name) const { return values_.find(name) != values_.end(); }

std::string Flags::GetString(std::string_view name, std::string_view def) const {
  auto it = values_.find(name);
  return it == values_.end() ? std::string(def) : it->second;
}

absl::StatusOr<int64_t> Flags::GetInt(std::string_view name, int64_t def) const {
  auto it = values_.find(name);
  if (it == values_.end()) return def;
  int64_t v;
  if (!absl::SimpleAtoi(it->second, &v)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", Sv(name), " expects an integer, got '", it->second, "'"));
  }
  return v;
}

absl::StatusOr<double> Flags::GetDouble(std::string_view name, double def) const {
  auto it = values_.find(name);
  if (it == values_.end()) return def;
  double v;
  if (!absl::SimpleAtod(it->second, &v)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", Sv(name), " expects a number, got '", it->second, "'"));
  }
  return v;
}

absl::StatusOr<uint64_t> Flags::GetBytes(std::string_view name, uint64_t def) const {
  auto it = values_.find(name);
  if (it == values_.end()) return def;
  return common::ParseByteSize(it->second, absl::StrCat("--", Sv(name)));
}

std::string AuthTokenFromFlags(const Flags& flags) {
  const char* env = std::getenv("KVTIER_AUTH_TOKEN");
  return flags.GetString("auth-token", env != nullptr ? env : "");
}

TlsFlags TlsFromFlags(const Flags& flags) {
  TlsFlags t;
  t.ca_file = flags.GetString("tls-ca", "");
  t.cert_file = flags.GetString("tls-cert", "");
  t.key_file = flags.GetString("tls-key", "");
  t.server_name = flags.GetString("tls-server-name", "");
  t.tls = flags.Has("tls") || !t.ca_file.empty() || !t.cert_file.empty() ||
          !t.key_file.empty() || !t.server_name.empty();
  return t;
}

}  // namespace kvtier::tools
