#include "client/prefix_keys.h"

#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "kv/prefix_key.h"
#include "tests/testing/status_matchers.h"
#include "tools/synthetic_blocks.h"

namespace kvtier::client {
namespace {

PrefixKeyParams Params(std::string ns = "llama3", std::string tenant = "") {
  PrefixKeyParams p;
  p.namespace_name = std::move(ns);
  p.tenant = std::move(tenant);
  p.tokens_per_block = 16;
  return p;
}

TEST(PrefixKeysTest, OneKeyPerFullBlockMatchingTheCanonicalScheme) {
  const auto tokens = tools::SyntheticTokens(3, 5, 0, 16);
  std::vector<uint32_t> with_tail = tokens;
  with_tail.insert(with_tail.end(), {1, 2, 3});  // a partial block gets no key
  auto keys = PrefixKeysForTokens(Params(), with_tail);
  ASSERT_OK(keys);
  ASSERT_EQ(keys->size(), 5u);
  const auto seed = kv::MakePrefixSeed("llama3", "default");
  auto want = kv::ComputePrefixKeys(seed, tokens, 16);
  ASSERT_OK(want);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ((*keys)[i], kv::PrefixKeyBytes((*want)[i])) << i;
    EXPECT_EQ((*keys)[i].size(), 16u);
  }
  EXPECT_EQ(CanonicalHashScheme(), kv::kHashSchemeVersion);
}

TEST(PrefixKeysTest, SharedPrefixSharesKeysAndDivergesAfter) {
  const auto a = tools::SyntheticTokens(1, 6, 3, 16);
  const auto b = tools::SyntheticTokens(2, 6, 3, 16);
  auto ka = PrefixKeysForTokens(Params(), a);
  auto kb = PrefixKeysForTokens(Params(), b);
  ASSERT_OK(ka);
  ASSERT_OK(kb);
  for (int i = 0; i < 3; ++i) EXPECT_EQ((*ka)[i], (*kb)[i]) << i;
  // Chained: once a block differs, every later key differs too.
  for (int i = 3; i < 6; ++i) EXPECT_NE((*ka)[i], (*kb)[i]) << i;
}

TEST(PrefixKeysTest, NamespaceTenantAndExtraChangeEveryKey) {
  const auto tokens = tools::SyntheticTokens(1, 2, 0, 16);
  std::set<std::string> first_keys;
  for (const auto& p : {Params("a"), Params("b"), Params("a", "acme")}) {
    auto k = PrefixKeysForTokens(p, tokens);
    ASSERT_OK(k);
    first_keys.insert((*k)[0]);
  }
  auto p = Params("a");
  p.extra = "lora-7";
  first_keys.insert((*PrefixKeysForTokens(p, tokens))[0]);
  EXPECT_EQ(first_keys.size(), 4u);
  // The default tenant may be spelled out.
  EXPECT_EQ(*PrefixKeysForTokens(Params("a", ""), tokens),
            *PrefixKeysForTokens(Params("a", "default"), tokens));
}

TEST(PrefixKeysTest, RejectsBadParams) {
  const std::vector<uint32_t> tokens(32, 1);
  auto p = Params();
  p.tokens_per_block = 0;
  EXPECT_EQ(PrefixKeysForTokens(p, tokens).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PrefixKeysForTokens(Params(""), tokens).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(KeyHexTest, RoundTripsAndRejectsJunk) {
  const std::string key("\x00\x01\xab\xff", 4);
  EXPECT_EQ(KeyToHex(key), "0001abff");
  EXPECT_EQ(*KeyFromHex("0001ABff"), key);
  EXPECT_FALSE(KeyFromHex("").ok());
  EXPECT_FALSE(KeyFromHex("abc").ok());
  EXPECT_FALSE(KeyFromHex("zz").ok());
}

}  // namespace
}  // namespace kvtier::client
