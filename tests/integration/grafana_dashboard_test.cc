// deploy/components/grafana-dashboard/kvtier-dashboard.json against a live kvtierd: every
// metric name the dashboard's queries use must appear in a /metrics scrape of a kvtierd
// that served some traffic (put, get, lookup with a lease), so a renamed or removed metric
// fails here instead of leaving an empty panel.
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "kv/codec.h"
#include "kvtier/v1/kvtier.pb.h"
#include "tests/testing/http_get.h"
#include "tests/testing/server_process.h"
#include "tests/testing/static_peer_cluster.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace kvtier {
namespace {

// Metrics that exist only while kvtierd publishes KV events (ServerConfig.events, another
// part of issue 15); the dashboard's "Events" row uses them. They are allowed to be absent
// from a scrape of a kvtierd without events.
const std::set<std::string> kOnlyWithEvents = {
    "kvtier_events_batches_published_total",
    "kvtier_events_dropped_total",
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Appends the strings under keys "expr", "query" and "definition" anywhere in `v`.
void CollectQueries(const google::protobuf::Value& v, std::vector<std::string>* out) {
  if (v.has_struct_value()) {
    for (const auto& [key, field] : v.struct_value().fields()) {
      if ((key == "expr" || key == "query" || key == "definition") && field.has_string_value()) {
        out->push_back(field.string_value());
      } else {
        CollectQueries(field, out);
      }
    }
  } else if (v.has_list_value()) {
    for (const auto& e : v.list_value().values()) CollectQueries(e, out);
  }
}

// The kvtier_* identifiers in a PromQL expression.
std::set<std::string> MetricNames(const std::string& expr) {
  std::set<std::string> names;
  for (size_t at = expr.find("kvtier_"); at != std::string::npos; at = expr.find("kvtier_", at)) {
    size_t end = at;
    while (end < expr.size() && (std::isalnum(static_cast<unsigned char>(expr[end])) ||
                                 expr[end] == '_')) {
      ++end;
    }
    names.insert(expr.substr(at, end - at));
    at = end;
  }
  return names;
}

// Whether the scrape exports `name`: a family of that name, or a histogram's series.
bool Exported(const std::string& page, const std::string& name) {
  if (page.find(absl::StrCat("# TYPE ", name, " ")) != std::string::npos) return true;
  for (const char* suffix : {"_bucket", "_sum", "_count"}) {
    const std::string s = suffix;
    if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
      const std::string base = name.substr(0, name.size() - s.size());
      if (page.find(absl::StrCat("# TYPE ", base, " histogram")) != std::string::npos) return true;
    }
  }
  return false;
}

TEST(GrafanaDashboardTest, EveryQueriedMetricExistsInALiveScrape) {
  const char* src = std::getenv("KVTIER_SOURCE_DIR");
  const std::string path = absl::StrCat(src != nullptr ? src : ".",
                                        "/deploy/components/grafana-dashboard/kvtier-dashboard.json");
  const std::string json = ReadFile(path);
  ASSERT_FALSE(json.empty()) << path;
  google::protobuf::Value dashboard;
  ASSERT_OK(google::protobuf::util::JsonStringToMessage(json, &dashboard)) << path;
  std::vector<std::string> queries;
  CollectQueries(dashboard, &queries);
  std::set<std::string> used;
  for (const std::string& q : queries) {
    for (const std::string& n : MetricNames(q)) used.insert(n);
  }
  ASSERT_GE(used.size(), 20u) << "the dashboard lost its queries?";
  for (const std::string& n : kOnlyWithEvents) EXPECT_TRUE(used.contains(n)) << n;

  testing::TempDir dir;
  const int metrics_port = testing::PickFreePort();
  auto server = testing::ServerProcess::StartKvtierd(
      dir.Sub("data"), {"--metrics-port", absl::StrCat(metrics_port)});
  ASSERT_OK(server);

  // Some traffic, so every per-namespace family has series.
  kv::Layout layout;
  layout.num_layers = 1;
  layout.num_kv_heads = 1;
  layout.head_dim = 8;
  layout.tokens_per_block = 4;
  client::ClientOptions o;
  o.server = server->address();
  o.shared_memory = false;
  v1::NamespaceSpec spec;
  spec.set_name("dash");
  *spec.mutable_layout() = client::ToProto(layout);
  o.namespace_spec = spec;
  auto c = client::Client::Connect(o);
  ASSERT_OK(c);
  const std::vector<uint8_t> raw(layout.BytesPerBlock(), 0x3c);
  std::vector<std::string> keys = {"dash-key-0000000", "dash-key-0000001"};
  std::vector<client::PutBlock> blocks(2);
  for (size_t i = 0; i < 2; ++i) {
    blocks[i].key = keys[i];
    blocks[i].parent_key = i == 0 ? "" : keys[i - 1];
    blocks[i].block_index = static_cast<uint32_t>(i);
    blocks[i].payload = raw;
  }
  client::PutOptions po;
  po.format = v1::PAYLOAD_FORMAT_RAW;
  ASSERT_OK((*c)->PutBlocks("dash", blocks, po));
  client::LookupOptions lease;
  lease.lease_ms = 10'000;
  auto lk = (*c)->Lookup("dash", keys, lease);
  ASSERT_OK(lk);
  client::GetOptions get;
  get.lease_id = lk->blocks(0).lease_id();
  ASSERT_OK((*c)->GetBlocks("dash", keys, get));

  const std::string page = testing::HttpGet(metrics_port);
  ASSERT_THAT(page, ::testing::HasSubstr("200 OK"));
  std::vector<std::string> missing;
  for (const std::string& n : used) {
    if (!Exported(page, n) && !kOnlyWithEvents.contains(n)) missing.push_back(n);
  }
  EXPECT_THAT(missing, ::testing::IsEmpty()) << "not in /metrics: " << absl::StrJoin(missing, ", ");
  EXPECT_THAT(page, ::testing::HasSubstr("kvtier_leases_released_total{node="));
}

}  // namespace
}  // namespace kvtier
