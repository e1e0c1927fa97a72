// `kvtier stats` against a real kvtierd: lookup and get counts are separate columns, the
// `all` row counts a block held in both tiers once, the hot and cold rows split the
// lookup prefix by tier, and --help explains every column.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/server_process.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace kvtier {
namespace {

using ::testing::HasSubstr;

// Runs `command` (stderr folded in); returns its output.
std::string RunCommand(const std::string& command) {
  FILE* f = popen(absl::StrCat(command, " 2>&1").c_str(), "r");
  std::string out;
  char buf[512];
  while (size_t n = fread(buf, 1, sizeof(buf), f)) out.append(buf, n);
  pclose(f);
  return out;
}

std::string Kvtier() { return testing::BinaryDir() + "/client/cli/kvtier"; }

// The whitespace-separated cells of the first line of `table` starting with `first`.
std::vector<std::string> RowOf(const std::string& table, const std::string& first) {
  for (absl::string_view line : absl::StrSplit(table, '\n')) {
    std::vector<std::string> cells = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (!cells.empty() && cells[0] == first) return cells;
  }
  return {};
}

TEST(StatsCliTest, LookupAndGetColumnsAndDistinctBlocks) {
  testing::TempDir dir;
  auto server = testing::ServerProcess::StartKvtierd(dir.Sub("data"));
  ASSERT_OK(server);
  kv::Layout layout;
  layout.num_layers = 1;
  layout.num_kv_heads = 1;
  layout.head_dim = 8;
  layout.tokens_per_block = 4;
  client::ClientOptions o;
  o.server = server->address();
  o.shared_memory = false;
  v1::NamespaceSpec spec;
  spec.set_name("cli");
  *spec.mutable_layout() = client::ToProto(layout);
  o.namespace_spec = spec;
  auto c = client::Client::Connect(o);
  ASSERT_OK(c);
  const std::vector<uint8_t> raw(layout.BytesPerBlock(), 0x3c);
  const std::vector<std::string> keys = {"cli-key-00000000", "cli-key-00000001",
                                         "cli-key-00000002"};
  std::vector<client::PutBlock> blocks(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    blocks[i].key = keys[i];
    blocks[i].parent_key = i == 0 ? "" : keys[i - 1];
    blocks[i].block_index = static_cast<uint32_t>(i);
    blocks[i].payload = raw;
  }
  client::PutOptions po;
  po.format = v1::PAYLOAD_FORMAT_RAW;
  ASSERT_OK((*c)->PutBlocks("cli", blocks, po));
  ASSERT_OK((*c)->Flush("cli"));  // every block now in both tiers
  const std::vector<std::string> half = {keys[0], "cli-key-absent00"};
  ASSERT_OK((*c)->Lookup("cli", half));  // one lookup, 50% hit, no get

  const std::string table = RunCommand(absl::StrCat(Kvtier(), " stats --server ", server->address()));
  const std::vector<std::string> header = RowOf(table, "NAMESPACE");
  ASSERT_THAT(header, ::testing::ElementsAre("NAMESPACE", "TIER", "BLOCKS", "BYTES",
                                             "LOOKUP_KEYS", "LOOKUP_HIT", "LOOKUP_PREFIX",
                                             "GET_BLOCKS", "GET_HITS", "GET_MISSES", "GET_HIT",
                                             "EVICTIONS", "CODEC", "RATIO"))
      << table;
  const std::vector<std::string> all = RowOf(table, "cli");
  ASSERT_GE(all.size(), 12u) << table;
  EXPECT_EQ(all[1], "all");
  EXPECT_EQ(all[2], "3") << "a block in both tiers counts once\n" << table;
  EXPECT_EQ(all[4], "2");       // LOOKUP_KEYS
  EXPECT_EQ(all[5], "50.0%");   // LOOKUP_HIT
  EXPECT_EQ(all[6], "50.0%");   // LOOKUP_PREFIX
  EXPECT_EQ(all[7], "0");       // GET_BLOCKS
  EXPECT_EQ(all[10], "-");      // GET_HIT: no gets yet
  EXPECT_EQ(RowOf(table, "hot")[1], "3") << table;
  EXPECT_EQ(RowOf(table, "cold")[1], "3") << table;
  EXPECT_THAT(table, HasSubstr("leases: granted 0"));

  // The prefix split by tier: demote the last block, look the whole chain up. The
  // counters add up over both lookups: 5 keys asked, 4 in the prefix, 3 of them hot.
  ASSERT_OK((*c)->Evict("cli", std::vector<std::string>{keys[2]}, /*drop=*/false));
  ASSERT_OK((*c)->Lookup("cli", keys));
  const std::string split =
      RunCommand(absl::StrCat(Kvtier(), " stats --server ", server->address()));
  ASSERT_GE(RowOf(split, "cli").size(), 7u) << split;
  EXPECT_EQ(RowOf(split, "cli")[6], "80.0%") << split;  // LOOKUP_PREFIX, all tiers
  EXPECT_THAT(RowOf(split, "hot"), ::testing::Contains("60.0%")) << split;
  EXPECT_THAT(RowOf(split, "cold"), ::testing::Contains("20.0%")) << split;
  auto stats = (*c)->Stats("cli");
  ASSERT_OK(stats);
  ASSERT_EQ(stats->namespaces_size(), 1);
  EXPECT_EQ(stats->namespaces(0).lookup_prefix_hit_blocks(), 4u);
  EXPECT_EQ(stats->namespaces(0).lookup_prefix_hit_blocks_hot(), 3u);
  EXPECT_EQ(stats->namespaces(0).lookup_prefix_hit_blocks_cold(), 1u);

  const std::string help = RunCommand(absl::StrCat(Kvtier(), " stats --help"));
  for (const std::string& column : header) EXPECT_THAT(help, HasSubstr(column)) << column;
}

}  // namespace
}  // namespace kvtier
