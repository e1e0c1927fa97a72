#include "service/config.h"

#include <fstream>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "service/limits.h"
#include "service/metrics.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_certs.h"

namespace kvtier::service {
namespace {

using ::testing::HasSubstr;

std::string WriteFile(const testing::TempDir& dir, const std::string& name,
                      const std::string& text) {
  std::string path = dir.Sub(name);
  std::ofstream(path) << text;
  return path;
}

constexpr char kNamespaceText[] = R"pb(
  namespaces {
    name: "llama3-8b"
    model_id: "meta-llama/Meta-Llama-3-8B@main"
    layout {
      num_layers: 32
      num_kv_heads: 8
      head_dim: 128
      tokens_per_block: 16
      dtype: DTYPE_FP16
      sink_tokens: 4
    }
    codec: CODEC_KIVI2
  }
)pb";

TEST(ConfigTest, NoArgumentsServesLocalhostWithDefaults) {
  auto cl = ParseCommandLine({});
  ASSERT_OK(cl);
  EXPECT_EQ(cl->mode, CommandLine::Mode::kServe);
  EXPECT_EQ(cl->config.listen_address(), "127.0.0.1");
  EXPECT_EQ(cl->config.port(), 50051u);
  EXPECT_EQ(cl->config.data_dir(), "./kvtier-data");
  EXPECT_EQ(cl->config.hot_capacity_bytes(), 256ull << 20);
  EXPECT_EQ(cl->config.eviction_policy(), "adaptive");
  EXPECT_EQ(cl->config.max_message_bytes(), 4ull << 20);
  EXPECT_EQ(cl->config.max_keys_per_request(), 4096u);
  EXPECT_EQ(cl->config.metrics_port(), 0u);
  EXPECT_GE(cl->config.executor_threads(), 2u);
}

TEST(ConfigTest, FlagsOverrideTheFileAndPortZeroOnlyViaFlag) {
  testing::TempDir dir;
  const std::string path = WriteFile(dir, "c.textproto",
                                     "port: 0\n"
                                     "data_dir: \"/var/lib/kvtier\"\n"
                                     "hot_capacity_bytes: 1073741824\n"
                                     "eviction_policy: \"lfu\"\n" +
                                         std::string(kNamespaceText));
  auto file_only = ParseCommandLine({"--config", path});
  ASSERT_OK(file_only);
  EXPECT_EQ(file_only->config.port(), 50051u);  // 0 in a file means the default
  EXPECT_EQ(file_only->config.data_dir(), "/var/lib/kvtier");
  EXPECT_EQ(file_only->config.hot_capacity_bytes(), 1ull << 30);
  EXPECT_EQ(file_only->config.eviction_policy(), "lfu");
  ASSERT_EQ(file_only->config.namespaces_size(), 1);

  auto flags =
      ParseCommandLine({"--config=" + path, "--port", "0", "--data-dir", "/tmp/x", "--hot-capacity",
                        "64MiB", "--cold-capacity=2G", "--policy", "heavy_hitter", "--metrics-port",
                        "9100", "--node-id", "n1", "--listen", "0.0.0.0"});
  ASSERT_OK(flags);
  EXPECT_EQ(flags->config.port(), 0u);
  EXPECT_EQ(flags->config.data_dir(), "/tmp/x");
  EXPECT_EQ(flags->config.hot_capacity_bytes(), 64ull << 20);
  EXPECT_EQ(flags->config.cold_capacity_bytes(), 2ull << 30);
  EXPECT_EQ(flags->config.eviction_policy(), "heavy_hitter");
  EXPECT_EQ(flags->config.metrics_port(), 9100u);
  EXPECT_EQ(flags->config.cluster().node_id(), "n1");
  EXPECT_EQ(flags->config.listen_address(), "0.0.0.0");
}

TEST(ConfigTest, CheckConfigModeValidatesTheFile) {
  testing::TempDir dir;
  auto good = ParseCommandLine({"--check-config", WriteFile(dir, "g", kNamespaceText)});
  ASSERT_OK(good);
  EXPECT_EQ(good->mode, CommandLine::Mode::kCheckConfig);

  auto syntax = ParseCommandLine({"--check-config", WriteFile(dir, "s", "port: \"abc\"\n")});
  EXPECT_EQ(syntax.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(syntax.status().message()), HasSubstr("1:"));

  auto missing = ParseCommandLine({"--check-config", dir.Sub("nope")});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

struct BadConfig {
  std::string text;
  std::string field;
};

TEST(ConfigTest, InvalidConfigsNameTheField) {
  const BadConfig cases[] = {
      {"low_watermark: 0.95 high_watermark: 0.9", "low_watermark"},
      {"high_watermark: 1.5", "high_watermark"},
      {"eviction_policy: \"random\"", "eviction_policy"},
      {"hot_allocator: \"gpu\"", "hot_allocator"},
      {"hot_capacity_bytes: 1000", "hot_capacity_bytes"},
      {"port: 70000", "port"},
      {"max_message_bytes: 100", "max_message_bytes"},
      {"namespaces { name: \"a b\" layout { num_layers: 1 num_kv_heads: 1 head_dim: 2 "
       "tokens_per_block: 1 dtype: DTYPE_FP16 } }",
       "namespaces[0].name"},
      {"namespaces { name: \"a\" }", "namespaces[0].layout"},
      {"namespaces { name: \"a\" layout { num_layers: 1 num_kv_heads: 1 head_dim: 2 "
       "tokens_per_block: 1 } }",
       "namespaces[0].layout.dtype"},
      {"namespaces { name: \"a\" layout { num_layers: 1 num_kv_heads: 1 head_dim: 3 "
       "tokens_per_block: 1 dtype: DTYPE_FP16 } }",
       "namespaces[0].layout.head_dim"},
      {"namespaces { name: \"a\" codec: CODEC_BF16 layout { num_layers: 1 num_kv_heads: 1 "
       "head_dim: 2 tokens_per_block: 1 dtype: DTYPE_FP16 } }",
       "namespaces[0].codec"},
      {"namespaces { name: \"a\" layout { num_layers: 1 num_kv_heads: 1 head_dim: 2 "
       "tokens_per_block: 1 dtype: DTYPE_FP16 } } namespaces { name: \"a\" layout { "
       "num_layers: 1 num_kv_heads: 1 head_dim: 2 tokens_per_block: 1 dtype: DTYPE_FP16 } }",
       "namespaces[1].name"},
      {"tenants { tenant: \"team a\" token_sha256: \"" + std::string(64, 'a') + "\" }",
       "tenants[0].tenant"},
      {"tenants { tenant: \"a\" token_sha256: \"ABC\" }", "tenants[0].token_sha256"},
      {"tenants { tenant: \"a\" token_sha256: \"" + std::string(64, 'a') +
           "\" } tenants { tenant: \"b\" token_sha256: \"" + std::string(64, 'a') + "\" }",
       "tenants[1].token_sha256 is listed twice"},
      {"tenants { tenant: \"a\" token_sha256: \"" + std::string(64, 'a') +
           "\" } cluster { static_peers: \"127.0.0.1:1\" }",
       "cluster.peer_token_file"},
      {"events { endpoint: \"tcp://*:5557\" format: \"json\" }", "events.format"},
      {"events { endpoint: \"tcp://*:5557\" batch_ms: 20000 }", "events.batch_ms"},
      {"events { replay_endpoint: \"tcp://*:5558\" }", "events.replay_endpoint"},
      {"events { endpoint: \"localhost:5557\" }", "events.endpoint"},
  };
  for (const BadConfig& c : cases) {
    auto config = ParseConfigText(c.text);
    ASSERT_OK(config) << c.text << ": " << config.status();
    ApplyDefaults(*config);
    absl::Status s = ValidateConfig(*config);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.field)) << c.text;
  }
}

TEST(ConfigTest, EventsFlagsAndDefaults) {
  auto off = ParseCommandLine({});
  ASSERT_OK(off);
  EXPECT_TRUE(off->config.events().endpoint().empty());  // off by default
  auto on = ParseCommandLine({"--events-endpoint", "tcp://127.0.0.1:*",
                              "--events-replay-endpoint=tcp://127.0.0.1:*"});
  ASSERT_OK(on);
  const events::EventsConfig e = ToEventsConfig(on->config, "node-1");
  EXPECT_EQ(e.endpoint, "tcp://127.0.0.1:*");
  EXPECT_EQ(e.replay_endpoint, "tcp://127.0.0.1:*");
  EXPECT_EQ(e.node_id, "node-1");
  const events::EventsConfig defaults;
  EXPECT_EQ(e.format, defaults.format);
  EXPECT_EQ(e.batch_ms, defaults.batch_ms);
  EXPECT_EQ(e.send_hwm, defaults.send_hwm);
  EXPECT_OK(e.Validate());
  auto array = ParseConfigText("events { endpoint: \"tcp://*:1\" format: \"array\" batch_ms: 7 }");
  ASSERT_OK(array);
  EXPECT_EQ(ToEventsConfig(*array, "n").format, events::BatchFormat::kArray);
  EXPECT_EQ(ToEventsConfig(*array, "n").batch_ms, 7u);
  // What llm-d's indexer needs: the array form by default, a pod id and rank of one's
  // choosing, the parents-first wait (0 turns it off), AllBlocksCleared only on request.
  EXPECT_EQ(defaults.format, events::BatchFormat::kArray);
  EXPECT_EQ(e.parent_wait_ms, 1000u);
  EXPECT_FALSE(e.data_parallel_rank.has_value());
  EXPECT_FALSE(e.send_all_blocks_cleared);
  auto llmd = ParseConfigText(
      "events { endpoint: \"tcp://*:1\" pod_id: \"10.0.0.7\" data_parallel_rank: 0 "
      "parent_wait_ms: 0 send_all_blocks_cleared: true }");
  ASSERT_OK(llmd);
  const events::EventsConfig l = ToEventsConfig(*llmd, "n");
  EXPECT_EQ(l.node_id, "10.0.0.7");
  EXPECT_EQ(l.data_parallel_rank, 0);
  EXPECT_EQ(l.parent_wait_ms, 0u);
  EXPECT_TRUE(l.send_all_blocks_cleared);
  auto flag = ParseCommandLine({"--events-endpoint", "tcp://*:1", "--events-pod-id", "pod-3"});
  ASSERT_OK(flag);
  EXPECT_EQ(ToEventsConfig(flag->config, "n").node_id, "pod-3");
  EXPECT_THAT(UsageText(), HasSubstr("--events-endpoint"));
}

TEST(ConfigTest, BadFlagsAreRejected) {
  EXPECT_THAT(std::string(ParseCommandLine({"--bogus", "1"}).status().message()),
              HasSubstr("--bogus"));
  EXPECT_THAT(std::string(ParseCommandLine({"--port", "x"}).status().message()),
              HasSubstr("--port"));
  EXPECT_THAT(std::string(ParseCommandLine({"--hot-capacity", "12XB"}).status().message()),
              HasSubstr("--hot-capacity"));
  EXPECT_THAT(std::string(ParseCommandLine({"--port"}).status().message()),
              HasSubstr("missing value"));
  // An unknown flag is named as such, with or without a value after it.
  EXPECT_THAT(std::string(ParseCommandLine({"--x"}).status().message()),
              HasSubstr("unknown flag --x"));
  EXPECT_THAT(std::string(ParseCommandLine({"--x=1"}).status().message()),
              HasSubstr("unknown flag --x"));
  EXPECT_EQ(ParseCommandLine({"-h"})->mode, CommandLine::Mode::kHelp);
  EXPECT_EQ(ParseCommandLine({"--help"})->mode, CommandLine::Mode::kHelp);
}

TEST(ConfigTest, SizeFlagsUseTheCommonByteSizeSyntax) {
  auto cl = ParseCommandLine({"--hot-capacity", "64M", "--cold-capacity=1T"});
  ASSERT_OK(cl);
  EXPECT_EQ(cl->config.hot_capacity_bytes(), 64ull << 20);
  EXPECT_EQ(cl->config.cold_capacity_bytes(), 1ull << 40);
  auto decimal = ParseCommandLine({"--hot-capacity", "64MB"});
  ASSERT_FALSE(decimal.ok());
  EXPECT_THAT(std::string(decimal.status().message()), HasSubstr("4MiB"));
}

TEST(ConfigTest, PrefetchOnLookupIsOffUnlessTheFlagTurnsItOn) {
  auto plain = ParseCommandLine({});
  ASSERT_OK(plain);
  EXPECT_FALSE(ServiceLimits::FromConfig(plain->config).prefetch_on_lookup);
  auto on = ParseCommandLine({"--prefetch-on-lookup"});
  ASSERT_OK(on);
  EXPECT_TRUE(on->config.prefetch_on_lookup());
  EXPECT_TRUE(ServiceLimits::FromConfig(on->config).prefetch_on_lookup);
  EXPECT_THAT(UsageText(), HasSubstr("--prefetch-on-lookup"));
}

TEST(ConfigTest, RecoverIsAFlagOfItsOwnListedInHelp) {
  auto plain = ParseCommandLine({"--port", "0"});
  ASSERT_OK(plain);
  EXPECT_FALSE(plain->recover);
  // Anywhere among the flags, and it sets nothing in the config.
  auto cl = ParseCommandLine({"--port", "0", "--recover", "--data-dir", "/tmp/x"});
  ASSERT_OK(cl);
  EXPECT_TRUE(cl->recover);
  EXPECT_EQ(cl->config.data_dir(), "/tmp/x");
  EXPECT_EQ(cl->mode, CommandLine::Mode::kServe);
  EXPECT_THAT(UsageText(), HasSubstr("--recover\n      before serving, rebuild the cold tier"));
}

TEST(ConfigTest, HelpListsEveryEvictionPolicyAndTheSizeSyntax) {
  const std::string usage = UsageText();
  for (const char* policy :
       {"lru", "prefix_lru", "lfu", "heavy_hitter", "reuse_lru", "adaptive"}) {
    EXPECT_THAT(usage, HasSubstr(policy));
  }
  EXPECT_THAT(usage, HasSubstr("4GiB"));
  for (const char* flag : {"--config", "--check-config", "--listen", "--port", "--data-dir",
                           "--hot-capacity", "--cold-capacity", "--policy", "--hot-allocator",
                           "--metrics-port", "--node-id", "--executor-threads",
                           "--max-message-bytes", "--shm-socket", "--warm-from-cold",
                           "--tls-cert", "--tls-key", "--tls-client-ca",
                           "--tls-require-client-cert"}) {
    EXPECT_THAT(usage, HasSubstr(flag));
  }
}

// --check-config reads the TLS files: they must exist, parse, and the key must match.
TEST(ConfigTest, TlsFlagsAreCheckedAgainstTheFiles) {
  testing::TempDir dir;
  auto ca = testing::TestCa::Create(dir.path(), "ca");
  ASSERT_OK(ca);
  auto a = ca->Issue("a", "a", {"DNS:a"});
  auto b = ca->Issue("b", "b", {"DNS:b"});
  ASSERT_OK(a);
  ASSERT_OK(b);
  auto ok = ParseCommandLine({"--tls-cert", a->cert_file, "--tls-key", a->key_file,
                              "--tls-client-ca", ca->ca_file(), "--tls-require-client-cert"});
  ASSERT_OK(ok);
  EXPECT_TRUE(ok->config.tls().require_client_cert());
  EXPECT_EQ(ok->config.tls().client_ca_file(), ca->ca_file());

  auto error = [](const std::vector<std::string>& args) {
    auto cl = ParseCommandLine(args);
    EXPECT_EQ(cl.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(cl.status().message());
  };
  EXPECT_THAT(error({"--tls-cert", a->cert_file}), HasSubstr("tls.key_file"));
  EXPECT_THAT(error({"--tls-cert", a->cert_file, "--tls-key", b->key_file}),
              HasSubstr("does not match cert_file"));
  EXPECT_THAT(error({"--tls-cert", dir.Sub("none.pem"), "--tls-key", a->key_file}),
              HasSubstr("tls.cert_file"));
  EXPECT_THAT(error({"--tls-cert", a->key_file, "--tls-key", a->key_file}),
              HasSubstr("not a PEM certificate"));
  EXPECT_THAT(error({"--tls-cert", a->cert_file, "--tls-key", a->key_file,
                     "--tls-require-client-cert"}),
              HasSubstr("tls.client_ca_file is required"));
  EXPECT_THAT(error({"--tls-cert", a->cert_file, "--tls-key", a->key_file, "--tls-client-ca",
                     dir.Sub("missing-ca.pem")}),
              HasSubstr("tls.client_ca_file"));
  const std::string identities = WriteFile(
      dir, "ids.textproto",
      absl::StrCat("tls { cert_file: \"", a->cert_file, "\" key_file: \"", a->key_file,
                   "\" client_ca_file: \"", ca->ca_file(),
                   "\" identities { tenant: \"t\" cert_name: \"x\" } identities { tenant: "
                   "\"u\" cert_name: \"x\" } }\n"));
  EXPECT_THAT(error({"--check-config", identities}), HasSubstr("listed twice"));
}

TEST(ConfigTest, DefaultsComeFromStoreOptionsAndServiceLimits) {
  v1::ServerConfig c;
  ApplyDefaults(c);
  const storage::StoreOptions store;
  const ServiceLimits limits;
  EXPECT_EQ(c.data_dir(), store.data_dir);
  EXPECT_EQ(c.hot_capacity_bytes(), store.hot_capacity_bytes);
  EXPECT_EQ(c.cold_capacity_bytes(), store.cold_capacity_bytes);
  EXPECT_EQ(c.eviction_policy(), storage::EvictionPolicyName(store.policy));
  EXPECT_EQ(c.max_keys_per_request(), limits.max_keys_per_request);
  EXPECT_EQ(c.max_put_bytes(), limits.max_put_bytes);
  const ServiceLimits from = ServiceLimits::FromConfig(c);
  EXPECT_EQ(from.max_keys_per_request, limits.max_keys_per_request);
  EXPECT_EQ(from.put_budget_bytes, limits.put_budget_bytes);
  EXPECT_EQ(from.chunk_bytes, limits.chunk_bytes);
}

TEST(ConfigTest, NamespaceRoundTripAndStoreOptions) {
  auto config = ParseConfigText(kNamespaceText);
  ASSERT_OK(config);
  ApplyDefaults(*config);
  auto ns = NamespaceFromProto(config->namespaces(0), "ns");
  ASSERT_OK(ns);
  EXPECT_EQ(ns->codec, kv::CodecId::kKivi2);
  EXPECT_EQ(ns->tenant, "default");
  EXPECT_EQ(ns->layout.BytesPerBlock(), 2ull << 20);
  EXPECT_TRUE(ns->keep_sinks);
  EXPECT_EQ(ns->sink_blocks, 1u);
  v1::NamespaceSpec back = NamespaceToProto(*ns);
  auto again = NamespaceFromProto(back, "ns");
  ASSERT_OK(again);
  EXPECT_EQ(again->layout, ns->layout);
  EXPECT_EQ(back.codec(), v1::CODEC_KIVI2);

  v1::NamespaceSpec unspecified = config->namespaces(0);
  unspecified.set_codec(v1::CODEC_UNSPECIFIED);
  EXPECT_EQ(NamespaceFromProto(unspecified, "ns")->codec, kv::CodecId::kFp16);

  // No silent defaults: an unspecified dtype and an absurd sink_blocks are refused,
  // naming the field, instead of being stored as fp16 and clamped.
  v1::NamespaceSpec no_dtype = config->namespaces(0);
  no_dtype.mutable_layout()->set_dtype(v1::DTYPE_UNSPECIFIED);
  absl::StatusOr<storage::NamespaceOptions> bad = NamespaceFromProto(no_dtype, "spec");
  ASSERT_TRUE(absl::IsInvalidArgument(bad.status())) << bad.status();
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("spec.layout.dtype"));
  v1::NamespaceSpec many_sinks = config->namespaces(0);
  many_sinks.set_sink_blocks(4294967295u);
  bad = NamespaceFromProto(many_sinks, "spec");
  ASSERT_TRUE(absl::IsInvalidArgument(bad.status())) << bad.status();
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("spec.sink_blocks"));
  many_sinks.set_sink_blocks(storage::kMaxSinkBlocks);
  EXPECT_OK(NamespaceFromProto(many_sinks, "spec"));

  config->set_eviction_policy("lfu");
  storage::StoreOptions so = ToStoreOptions(*config);
  EXPECT_EQ(so.policy, storage::EvictionPolicyKind::kLfu);
  EXPECT_EQ(so.data_dir, "./kvtier-data");
  EXPECT_EQ(so.hot_capacity_bytes, 256ull << 20);
}

TEST(LatencyHistogramTest, CountsLandInTheirBuckets) {
  LatencyHistogram h;
  h.Record(10);        // <= 50
  h.Record(50);        // <= 50
  h.Record(51);        // <= 100
  h.Record(2000000);   // <= 2.5 s
  h.Record(99000000);  // overflow
  v1::LatencyHistogram out;
  h.Snapshot(&out);
  ASSERT_EQ(out.counts_size(), out.bounds_us_size() + 1);
  EXPECT_EQ(out.count(), 5u);
  EXPECT_EQ(out.counts(0), 2u);
  EXPECT_EQ(out.counts(1), 1u);
  EXPECT_EQ(out.counts(14), 1u);
  EXPECT_EQ(out.counts(out.counts_size() - 1), 1u);
  EXPECT_DOUBLE_EQ(out.sum_us(), 10 + 50 + 51 + 2000000 + 99000000);
}

}  // namespace
}  // namespace kvtier::service
