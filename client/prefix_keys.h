// Turns token ids into kvtier's canonical chained prefix keys (docs/design.md §2 Data model):
//   key_0 = SHA-256(seed || tokens_0 || extra), key_i = SHA-256(key_{i-1} || tokens_i ||
//   extra), truncated to 16 bytes, seed derived from namespace and tenant.
// A thin wrapper over kv/prefix_key.h (the one implementation, shared with the
// server) shaped for workers: whole sequences in, one key per full block out.
#ifndef KVTIER_CLIENT_PREFIX_KEYS_H_
#define KVTIER_CLIENT_PREFIX_KEYS_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace kvtier::client {

// Returns the version string of the canonical scheme (what Connect sends as
// RegisterNamespaceRequest.hash_scheme).
std::string CanonicalHashScheme();

struct PrefixKeyParams {
  std::string namespace_name;   // the namespace the keys live in
  std::string tenant;           // salt of the seed; empty = "default"
  uint32_t tokens_per_block = 16;
  std::string extra;            // LoRA / adapter ids etc.; empty = none
};

// One key per *full* block of `tokens` (a trailing partial block gets no key, because only
// full blocks are stored). INVALID_ARGUMENT if tokens_per_block is 0 or the namespace
// name is empty.
absl::StatusOr<std::vector<std::string>> PrefixKeysForTokens(
    const PrefixKeyParams& params, std::span<const uint32_t> tokens);

// Hex form of a key for logs and the CLI ("3f9a..."), and back (INVALID_ARGUMENT on
// odd length or non-hex characters).
std::string KeyToHex(std::string_view key);
absl::StatusOr<std::string> KeyFromHex(std::string_view hex);

}  // namespace kvtier::client

#endif  // KVTIER_CLIENT_PREFIX_KEYS_H_
