// Prefetch on Lookup against real kvtierd processes (docs/prefetch.md): a Lookup asking
// for it promotes a cold chain so the Gets that follow are served hot, counted in the
// Stats RPC and on /metrics; the server's prefetch_on_lookup default applies to Lookups
// that leave the field unset, and PREFETCH_OFF overrides it.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvtier/v1/kvtier.pb.h"
#include "protocol/lookup_form.h"
#include "tests/integration/sequences.h"
#include "tests/testing/http_get.h"
#include "tests/testing/namespace_spec.h"
#include "tests/testing/poll_until.h"
#include "tests/testing/server_process.h"
#include "tests/testing/static_peer_cluster.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace kvtier::client {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using testing::PollUntil;
using testing::ServerProcess;
using testing::TempDir;

// One 64 KiB fp16 block: 1 layer x 8 heads x 128 x 16 tokens.
kv::Layout MediumLayout() {
  kv::Layout l;
  l.num_layers = 1;
  return l;
}

class PrefetchTest : public ::testing::Test {
 protected:
  void Start(std::vector<std::string> extra) {
    metrics_port_ = testing::PickFreePort();
    extra.push_back("--metrics-port");
    extra.push_back(absl::StrCat(metrics_port_));
    auto p = ServerProcess::StartKvtierd(dir_.Sub("data"), extra);
    ASSERT_OK(p);
    server_ = std::make_unique<ServerProcess>(std::move(*p));
    ClientOptions o;
    o.server = server_->address();
    o.namespace_spec =
        testing::NamespaceSpecOf("pf", MediumLayout(), v1::CODEC_FP16, "", "prefetch-test");
    o.num_channels = 1;
    o.shared_memory = false;
    auto c = Client::Connect(o);
    ASSERT_OK(c);
    client_ = std::move(*c);
  }

  // Puts a chain of n blocks and makes it cold.
  Sequence PutColdChain(uint32_t n, uint64_t seed) {
    Sequence s = MakeSequence("pf", MediumLayout(), n, seed);
    auto put = client_->PutBlocks("pf", s.blocks);
    EXPECT_OK(put);
    auto moved = client_->Evict("pf", s.keys, /*drop=*/false);
    EXPECT_OK(moved);
    EXPECT_EQ(*moved, n);
    return s;
  }

  v1::LookupResponse Lookup(const Sequence& s, v1::Prefetch prefetch) {
    LookupOptions lo;
    lo.keep_compact = true;
    lo.prefetch = prefetch;
    auto r = client_->Lookup("pf", s.keys, lo);
    EXPECT_OK(r);
    return r.ok() ? *r : v1::LookupResponse();
  }

  v1::PrefetchStats PrefetchStats() {
    auto st = client_->Stats();
    EXPECT_OK(st);
    return st.ok() ? st->prefetch() : v1::PrefetchStats();
  }

  bool PrefetchedAtLeast(uint64_t n) {
    return PollUntil([&] { return PrefetchStats().prefetched_blocks() >= n; },
                     std::chrono::seconds(20));
  }

  // Gets every block; returns how many were served hot (and checks the bytes).
  int GetServedHot(const Sequence& s) {
    auto got = client_->GetBlocks("pf", s.keys);
    EXPECT_OK(got);
    if (!got.ok()) return -1;
    int hot = 0;
    for (size_t i = 0; i < got->size(); ++i) {
      const FetchedBlock& b = (*got)[i];
      EXPECT_TRUE(b.info.found()) << i;
      EXPECT_EQ(b.data, s.encoded[i]) << i;
      if (b.info.tier() == v1::TIER_HOT) ++hot;
    }
    return hot;
  }

  TempDir dir_;
  int metrics_port_ = 0;
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<Client> client_;
};

TEST_F(PrefetchTest, ALookupAskingForItMakesTheGetsHot) {
  Start({});
  const Sequence s = PutColdChain(16, 1);
  const v1::LookupResponse r = Lookup(s, v1::PREFETCH_ON);
  EXPECT_EQ(r.prefix_blocks(), 16u);
  for (size_t i = 0; i < 16; ++i) EXPECT_EQ(protocol::LookupTier(r, i), v1::TIER_COLD) << i;
  ASSERT_TRUE(PrefetchedAtLeast(16));
  EXPECT_EQ(GetServedHot(s), 16);
  const v1::PrefetchStats p = PrefetchStats();
  EXPECT_EQ(p.queued_blocks(), 16u);
  EXPECT_EQ(p.hits(), 16u);
  EXPECT_EQ(p.wasted_evicted() + p.wasted_expired(), 0u);
  // Every series carries the node label.
  const std::string metrics = testing::HttpGet(metrics_port_);
  EXPECT_THAT(metrics, HasSubstr("kvtier_prefetch_blocks_total{node=")) << metrics;
  EXPECT_THAT(metrics, ContainsRegex("kvtier_prefetch_blocks_total\\{[^}]*\\} 16\n"));
  EXPECT_THAT(metrics, ContainsRegex("kvtier_prefetch_hits_total\\{[^}]*\\} 16\n"));
  EXPECT_THAT(metrics,
              ContainsRegex("kvtier_prefetch_wasted_total\\{reason=\"evicted\"[^}]*\\} 0\n"));
  EXPECT_THAT(metrics, HasSubstr("kvtier_prefetch_get_wait_seconds_total{"));
}

// A cold Get larger than one read chunk (service/get_reactor.cc: 16 MiB of 64 KiB blocks
// is 256 keys, several chunks read at once on helper threads) answers every key in the
// request's order, missing keys included, with the stored bytes.
TEST_F(PrefetchTest, AColdGetOfManyChunksAnswersEveryKeyInOrder) {
  Start({});
  const Sequence s = PutColdChain(700, 7);
  std::vector<std::string> keys;
  std::vector<int> chain_index;  // -1: a key never stored
  for (size_t i = 0; i < s.keys.size(); ++i) {
    if (i % 97 == 0) {
      keys.push_back(absl::StrCat("never-stored-", i));
      chain_index.push_back(-1);
    }
    keys.push_back(s.keys[i]);
    chain_index.push_back(static_cast<int>(i));
  }
  ASSERT_GT(keys.size(), 2 * 256u);
  auto got = client_->GetBlocks("pf", keys);
  ASSERT_OK(got);
  ASSERT_EQ(got->size(), keys.size());
  for (size_t k = 0; k < keys.size(); ++k) {
    const FetchedBlock& b = (*got)[k];
    EXPECT_EQ(b.info.key(), keys[k]) << k;
    if (chain_index[k] < 0) {
      EXPECT_FALSE(b.info.found()) << k;
      continue;
    }
    ASSERT_TRUE(b.info.found()) << k;
    EXPECT_EQ(b.data, s.encoded[chain_index[k]]) << k;
    EXPECT_EQ(b.info.tier(), v1::TIER_COLD) << k;  // where it was read from
  }
}

TEST_F(PrefetchTest, OffByDefaultAndTheServerDefaultCanTurnItOn) {
  Start({});
  const Sequence a = PutColdChain(8, 2);
  Lookup(a, v1::PREFETCH_DEFAULT);
  EXPECT_EQ(GetServedHot(a), 0);
  EXPECT_EQ(PrefetchStats().queued_blocks(), 0u);
  server_.reset();
  client_.reset();

  Start({"--prefetch-on-lookup"});
  const Sequence b = PutColdChain(8, 3);
  Lookup(b, v1::PREFETCH_OFF);
  EXPECT_EQ(PrefetchStats().queued_blocks(), 0u);
  Lookup(b, v1::PREFETCH_DEFAULT);
  ASSERT_TRUE(PrefetchedAtLeast(8));
  EXPECT_EQ(GetServedHot(b), 8);
}

}  // namespace
}  // namespace kvtier::client
