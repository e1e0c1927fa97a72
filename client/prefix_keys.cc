#include "client/prefix_keys.h"

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "kv/prefix_key.h"

namespace kvtier::client {

std::string CanonicalHashScheme() { return kv::kHashSchemeVersion; }

absl::StatusOr<std::vector<std::string>> PrefixKeysForTokens(
    const PrefixKeyParams& params, std::span<const uint32_t> tokens) {
  if (params.namespace_name.empty()) {
    return absl::InvalidArgumentError("namespace_name is empty");
  }
  if (params.tokens_per_block == 0) {
    return absl::InvalidArgumentError("tokens_per_block must be > 0");
  }
  // The salt is the tenant as the server stores it (empty means "default"), so keys do
  // not depend on whether a caller spelled the default tenant out.
  const std::string tenant = params.tenant.empty() ? "default" : params.tenant;
  const kv::PrefixSeed seed = kv::MakePrefixSeed(params.namespace_name, tenant);
  ASSIGN_OR_RETURN(auto keys,
                   kv::ComputePrefixKeys(seed, tokens, params.tokens_per_block,
                                         std::span<const uint8_t>(
                                             reinterpret_cast<const uint8_t*>(params.extra.data()),
                                             params.extra.size())));
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(kv::PrefixKeyBytes(k));
  return out;
}

std::string KeyToHex(std::string_view key) { return absl::BytesToHexString(Sv(key)); }

absl::StatusOr<std::string> KeyFromHex(std::string_view hex) {
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  if (hex.empty() || hex.size() % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("key '", Sv(hex), "' must be an even, non-zero number of hex digits"));
  }
  std::string out;
  out.reserve(hex.size() / 2);
  for (size_t i = 0; i < hex.size(); i += 2) {
    const int hi = nibble(hex[i]), lo = nibble(hex[i + 1]);
    if (hi < 0 || lo < 0) {
      return absl::InvalidArgumentError(absl::StrCat("key '", Sv(hex), "' is not hex"));
    }
    out.push_back(static_cast<char>(hi << 4 | lo));
  }
  return out;
}

}  // namespace kvtier::client
