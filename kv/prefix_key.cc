#include "kv/prefix_key.h"

#include <openssl/evp.h>

#include <bit>
#include <cstring>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "common/logging.h"

namespace kvtier::kv {
namespace {

static_assert(std::endian::native == std::endian::little,
              "token ids are hashed as the host's uint32 bytes");

struct CtxDeleter {
  void operator()(EVP_MD_CTX* ctx) const { EVP_MD_CTX_free(ctx); }
};
using Ctx = std::unique_ptr<EVP_MD_CTX, CtxDeleter>;

Ctx NewCtx() {
  Ctx ctx(EVP_MD_CTX_new());
  KVTIER_CHECK(ctx != nullptr) << "EVP_MD_CTX_new failed";
  return ctx;
}

void Update(EVP_MD_CTX* ctx, const void* data, size_t n) {
  if (n == 0) return;
  KVTIER_CHECK(EVP_DigestUpdate(ctx, data, n) == 1) << "EVP_DigestUpdate failed";
}

std::array<uint8_t, 32> Finish(EVP_MD_CTX* ctx) {
  std::array<uint8_t, 32> out{};
  unsigned int len = 0;
  KVTIER_CHECK(EVP_DigestFinal_ex(ctx, out.data(), &len) == 1 && len == 32)
      << "EVP_DigestFinal_ex failed";
  return out;
}

void Init(EVP_MD_CTX* ctx) {
  KVTIER_CHECK(EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) == 1) << "EVP_DigestInit_ex failed";
}

void UpdateLengthPrefixed(EVP_MD_CTX* ctx, std::string_view s) {
  const auto len = static_cast<uint32_t>(s.size());
  Update(ctx, &len, sizeof(len));
  Update(ctx, s.data(), s.size());
}

PrefixKey ChainWith(EVP_MD_CTX* ctx, std::span<const uint8_t> parent,
                    std::span<const uint32_t> block_tokens, std::span<const uint8_t> extra) {
  Init(ctx);
  Update(ctx, parent.data(), parent.size());
  Update(ctx, block_tokens.data(), block_tokens.size_bytes());
  Update(ctx, extra.data(), extra.size());
  const std::array<uint8_t, 32> digest = Finish(ctx);
  PrefixKey key;
  std::memcpy(key.data(), digest.data(), key.size());
  return key;
}

}  // namespace

PrefixSeed MakePrefixSeed(std::string_view namespace_name, std::string_view tenant_salt) {
  Ctx ctx = NewCtx();
  Init(ctx.get());
  Update(ctx.get(), kHashSchemeVersion, sizeof(kHashSchemeVersion));  // includes the NUL
  UpdateLengthPrefixed(ctx.get(), namespace_name);
  UpdateLengthPrefixed(ctx.get(), tenant_salt);
  return Finish(ctx.get());
}

PrefixKey ChainPrefixKey(std::span<const uint8_t> parent, std::span<const uint32_t> block_tokens,
                         std::span<const uint8_t> extra) {
  Ctx ctx = NewCtx();
  return ChainWith(ctx.get(), parent, block_tokens, extra);
}

absl::StatusOr<std::vector<PrefixKey>> ComputePrefixKeys(const PrefixSeed& seed,
                                                         std::span<const uint32_t> tokens,
                                                         uint32_t tokens_per_block,
                                                         std::span<const uint8_t> extra) {
  if (tokens_per_block == 0) {
    return absl::InvalidArgumentError("tokens_per_block must be > 0");
  }
  const size_t blocks = tokens.size() / tokens_per_block;
  std::vector<PrefixKey> keys;
  keys.reserve(blocks);
  Ctx ctx = NewCtx();
  for (size_t b = 0; b < blocks; ++b) {
    const std::span<const uint8_t> parent =
        b == 0 ? std::span<const uint8_t>(seed) : std::span<const uint8_t>(keys.back());
    keys.push_back(ChainWith(ctx.get(), parent,
                             tokens.subspan(b * tokens_per_block, tokens_per_block), extra));
  }
  return keys;
}

std::string PrefixKeyBytes(const PrefixKey& key) {
  return std::string(reinterpret_cast<const char*>(key.data()), key.size());
}

std::string PrefixKeyHex(std::span<const uint8_t> key) {
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(key.data()), key.size()));
}

}  // namespace kvtier::kv
