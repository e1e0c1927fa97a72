// Mutation fuzzing of kvtierd's textproto configuration (service/config.h): mutated
// versions of the shipped deploy/ configs and of a config with every section. Each
// either parses, gets its defaults and validates (and then converts to store options),
// or is answered INVALID_ARGUMENT with a message; nothing crashes or hangs.
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "service/config.h"
#include "tests/testing/mutator.h"
#include "tests/testing/status_matchers.h"

namespace kvtier::service {
namespace {

constexpr char kFullConfig[] = R"pb(
  listen_address: "127.0.0.1"
  port: 50051
  data_dir: "/tmp/kvtier-fuzz"
  hot_capacity_bytes: 67108864
  cold_capacity_bytes: 1073741824
  low_watermark: 0.8
  high_watermark: 0.9
  eviction_policy: "lru"
  namespaces {
    name: "llama"
    model_id: "m"
    layout { num_layers: 2 num_kv_heads: 2 head_dim: 64 tokens_per_block: 16 dtype: DTYPE_FP16 }
  }
  cluster { peer_dns: "peers.local" peer_port: 50051 replication_factor: 1 }
)pb";

std::vector<std::string> Seeds() {
  std::vector<std::string> seeds = {kFullConfig};
  const char* src = std::getenv("KVTIER_SOURCE_DIR");
  if (src != nullptr) {
    for (const char* rel :
         {"deploy/base/kvtierd.textproto", "deploy/overlays/dev/kvtierd.textproto",
          "deploy/overlays/prod/kvtierd.textproto"}) {
      std::ifstream in(absl::StrCat(src, "/", rel));
      std::stringstream ss;
      ss << in.rdbuf();
      if (!ss.str().empty()) seeds.push_back(ss.str());
    }
  }
  return seeds;
}

TEST(ConfigFuzzTest, MutatedConfigsParseAndValidateOrAreInvalidArgument) {
  const std::vector<std::string> seeds = Seeds();
  for (const std::string& seed : seeds) {
    auto c = ParseConfigText(seed);
    ASSERT_OK(c) << c.status() << "\n" << seed;
  }
  testing::Mutator m(2026);
  int valid = 0, rejected = 0;
  for (int it = 0; it < 20000; ++it) {
    const std::string text = m.Mutate(seeds[m.Below(seeds.size())]);
    SCOPED_TRACE(absl::StrCat("iteration ", it));
    auto config = ParseConfigText(text);
    absl::Status s = config.status();
    if (config.ok()) {
      ApplyDefaults(*config);
      s = ValidateConfig(*config);
      if (s.ok()) {
        ++valid;
        (void)ToStoreOptions(*config);
        continue;
      }
    }
    ++rejected;
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_FALSE(s.message().empty());
  }
  EXPECT_GT(valid, 0);
  EXPECT_GT(rejected, 0);
}

}  // namespace
}  // namespace kvtier::service
