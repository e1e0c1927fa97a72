// Canonical chained prefix keys for KV blocks (docs/design.md §2 Data model). Pure functions;
// thread-safe.
//
// Scheme kHashSchemeVersion = "kvtier-prefix-sha256-v1":
//   seed   = SHA-256( "kvtier-prefix-sha256-v1" || 0x00
//                     || u32le(len(namespace))   || namespace
//                     || u32le(len(tenant_salt)) || tenant_salt )          (32 bytes)
//   key_0  = SHA-256( seed      || tokens_0 || extra )[0:16]
//   key_i  = SHA-256( key_{i-1} || tokens_i || extra )[0:16]              (i >= 1)
// where tokens_i are the tokens_per_block token ids of block i, each as a little-endian
// uint32, key_{i-1} is the 16-byte (truncated) parent key, and extra is the caller's
// opaque bytes (e.g. a LoRA/adapter id; empty for the base model), appended as is. A
// trailing partial block has no key. Changing any of this requires a new scheme version.
#ifndef KVTIER_KV_PREFIX_KEY_H_
#define KVTIER_KV_PREFIX_KEY_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace kvtier::kv {

inline constexpr char kHashSchemeVersion[] = "kvtier-prefix-sha256-v1";
inline constexpr size_t kPrefixKeyBytes = 16;

using PrefixSeed = std::array<uint8_t, 32>;
using PrefixKey = std::array<uint8_t, kPrefixKeyBytes>;

// Returns the seed of a namespace for a tenant (see the scheme above). Any bytes allowed.
PrefixSeed MakePrefixSeed(std::string_view namespace_name, std::string_view tenant_salt);

// Returns the key of one block given its parent: the seed for block 0 (32 bytes) or the
// previous block's key (16 bytes). `block_tokens` is the block's tokens (any count).
PrefixKey ChainPrefixKey(std::span<const uint8_t> parent, std::span<const uint32_t> block_tokens,
                         std::span<const uint8_t> extra = {});

// Returns the keys of the floor(tokens.size() / tokens_per_block) full blocks of `tokens`,
// in block order. INVALID_ARGUMENT if tokens_per_block is 0.
absl::StatusOr<std::vector<PrefixKey>> ComputePrefixKeys(const PrefixSeed& seed,
                                                         std::span<const uint32_t> tokens,
                                                         uint32_t tokens_per_block,
                                                         std::span<const uint8_t> extra = {});

// Returns the key as bytes (16-byte std::string) / lowercase hex (32 chars).
std::string PrefixKeyBytes(const PrefixKey& key);
std::string PrefixKeyHex(std::span<const uint8_t> key);

}  // namespace kvtier::kv

#endif  // KVTIER_KV_PREFIX_KEY_H_
