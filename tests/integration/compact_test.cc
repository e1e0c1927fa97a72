// End-to-end tests of the Compact RPC (service/compact.h): a real kvtierd on 127.0.0.1
// port 0 with RocksDB in a temp dir, driven through the generated gRPC stubs.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "kv/codec.h"
#include "kv/compaction.h"
#include "kv/layout.h"
#include "kvtier/v1/kvtier.grpc.pb.h"
#include "tests/testing/layouts.h"
#include "tests/testing/server_process.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace kvtier {
namespace {

using ::testing::ElementsAreArray;
using testing::ServerProcess;
using testing::TempDir;

constexpr uint32_t kBlocks = 4;
constexpr uint32_t kTokensPerBlock = testing::SmallLayout().tokens_per_block;
constexpr uint32_t kTokens = kBlocks * kTokensPerBlock;

// L2 H2 D64 T32 fp16 sinks4.
constexpr kv::Layout KvLayout() { return testing::SmallLayout(); }

v1::Layout ProtoLayout() { return client::ToProto(KvLayout()); }

// A sequence of kTokens tokens: random N(0, 1) K/V with RoPE (theta 10000) on the keys.
kv::KvSequence MakeSequence(uint64_t seed) {
  const kv::Layout l = KvLayout();
  kv::KvSequence s = kv::KvSequence::Zeros(l.num_layers, l.num_kv_heads, l.head_dim, kTokens);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& x : s.data) x = normal(rng);
  for (uint32_t layer = 0; layer < l.num_layers; ++layer) {
    for (uint32_t h = 0; h < l.num_kv_heads; ++h) {
      for (uint32_t t = 0; t < kTokens; ++t) {
        kv::RopeRotate(s.Key(layer, h, t), l.head_dim, t, 10000.0f);
      }
    }
  }
  return s;
}

// Raw fp16 block `b` of a sequence (layout order for tokens_per_block tokens).
std::string RawBlock(const kv::KvSequence& s, uint32_t b) {
  kv::KvSequence part = kv::KvSequence::Zeros(s.num_layers, s.num_kv_heads, s.head_dim,
                                              kTokensPerBlock);
  for (uint32_t l = 0; l < s.num_layers; ++l) {
    for (uint32_t kvi = 0; kvi < 2; ++kvi) {
      for (uint32_t h = 0; h < s.num_kv_heads; ++h) {
        for (uint32_t t = 0; t < kTokensPerBlock; ++t) {
          std::memcpy(&part.data[part.Index(l, kvi, h, t)],
                      &s.data[s.Index(l, kvi, h, b * kTokensPerBlock + t)],
                      sizeof(float) * s.head_dim);
        }
      }
    }
  }
  return kv::KvSequenceToRaw(part, kv::Dtype::kFp16);
}

struct GetResult {
  grpc::Status status;
  std::vector<v1::GetBlockInfo> infos;
  std::vector<std::string> payloads;
};

class CompactTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto p = ServerProcess::StartKvtierd(dir_.Sub("data"), {"--hot-capacity", "32MiB"});
    ASSERT_OK(p);
    server_ = std::make_unique<ServerProcess>(std::move(*p));
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(64 << 20);
    args.SetMaxSendMessageSize(64 << 20);
    auto channel = grpc::CreateCustomChannel(server_->address(),
                                             grpc::InsecureChannelCredentials(), args);
    kv_ = v1::KvCache::NewStub(channel);
    admin_ = v1::KvCacheAdmin::NewStub(channel);
    seq_ = MakeSequence(42);
  }

  void Register(const std::string& ns, v1::Codec codec) {
    v1::RegisterNamespaceRequest req;
    req.mutable_spec()->set_name(ns);
    *req.mutable_spec()->mutable_layout() = ProtoLayout();
    req.mutable_spec()->set_codec(codec);
    v1::RegisterNamespaceResponse resp;
    grpc::ClientContext ctx;
    grpc::Status s = kv_->RegisterNamespace(&ctx, req, &resp);
    ASSERT_OK(s);
  }

  // Pushes seq_ as raw blocks (the server encodes them with the namespace codec).
  void PushSequence(const std::string& ns) {
    grpc::ClientContext ctx;
    v1::PutResponse resp;
    auto writer = kv_->Put(&ctx, &resp);
    v1::PutRequest req;
    v1::PutHeader* h = req.mutable_header();
    h->set_namespace_(ns);
    h->set_format(v1::PAYLOAD_FORMAT_RAW);
    std::string all;
    keys_.clear();
    for (uint32_t b = 0; b < kBlocks; ++b) {
      const std::string raw = RawBlock(seq_, b);
      v1::PutBlock* pb = h->add_blocks();
      keys_.push_back(absl::StrCat("seq-block-", b));
      pb->set_key(keys_.back());
      pb->set_parent_key(b == 0 ? "" : keys_[b - 1]);
      pb->set_block_index(b);
      pb->set_size(raw.size());
      all += raw;
    }
    ASSERT_TRUE(writer->Write(req));
    v1::PutRequest chunk;
    chunk.set_chunk(all);
    ASSERT_TRUE(writer->Write(chunk));
    writer->WritesDone();
    grpc::Status s = writer->Finish();
    ASSERT_OK(s);
    ASSERT_EQ(resp.blocks_stored(), kBlocks);
  }

  v1::CompactRequest BaseRequest(const std::string& ns) {
    v1::CompactRequest req;
    req.set_namespace_(ns);
    for (const std::string& k : keys_) req.add_keys(k);
    return req;
  }

  grpc::Status Compact(const v1::CompactRequest& req, v1::CompactResponse* resp) {
    grpc::ClientContext ctx;
    return kv_->Compact(&ctx, req, resp);
  }

  GetResult Get(const std::string& ns, const std::string& key, v1::PayloadFormat format) {
    GetResult r;
    v1::GetRequest req;
    req.set_namespace_(ns);
    req.add_keys(key);
    req.set_format(format);
    grpc::ClientContext ctx;
    auto reader = kv_->Get(&ctx, req);
    v1::GetResponse msg;
    std::string stream;
    while (reader->Read(&msg)) {
      if (msg.has_header()) {
        r.infos.assign(msg.header().blocks().begin(), msg.header().blocks().end());
      } else {
        stream += msg.chunk();
      }
    }
    r.status = reader->Finish();
    size_t off = 0;
    for (const auto& info : r.infos) {
      r.payloads.push_back(stream.substr(off, info.size()));
      off += info.size();
    }
    return r;
  }

  uint64_t Puts(const std::string& ns) {
    v1::StatsRequest req;
    req.set_namespace_(ns);
    v1::StatsResponse resp;
    grpc::ClientContext ctx;
    grpc::Status s = admin_->Stats(&ctx, req, &resp);
    EXPECT_OK(s);
    for (const auto& n : resp.namespaces()) {
      if (n.name() == ns) return n.puts() + n.cold().blocks() + n.hot().blocks();
    }
    ADD_FAILURE() << "namespace " << ns << " missing from Stats";
    return 0;
  }

  TempDir dir_;
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<v1::KvCache::Stub> kv_;
  std::unique_ptr<v1::KvCacheAdmin::Stub> admin_;
  kv::KvSequence seq_;
  std::vector<std::string> keys_;
};

TEST_F(CompactTest, SinkWindowOnQuantizedNamespaceRoundTrips) {
  Register("cq-int8", v1::CODEC_INT8);
  PushSequence("cq-int8");
  v1::CompactRequest req = BaseRequest("cq-int8");
  req.mutable_sink_window()->set_n_sink(4);
  req.mutable_sink_window()->set_window(28);
  v1::CompactResponse resp;
  grpc::Status s = Compact(req, &resp);
  ASSERT_OK(s);
  std::vector<uint32_t> want;
  for (uint32_t t = 0; t < 4; ++t) want.push_back(t);
  for (uint32_t t = kTokens - 28; t < kTokens; ++t) want.push_back(t);
  EXPECT_EQ(resp.kept_tokens(), 32u);
  EXPECT_EQ(resp.source_tokens(), kTokens);
  EXPECT_THAT(resp.positions(), ElementsAreArray(want));
  EXPECT_EQ(resp.entry_key().size(), 16u);
  EXPECT_GT(resp.bytes(), 0u);
  // The key is the documented derivation, so a worker can recompute it.
  EXPECT_EQ(resp.entry_key(),
            kv::CompactedEntryKey(keys_.back(),
                                  kv::CompactionParamsString(kv::SinkWindowParams{4, 28},
                                                             kv::PositionPolicy::kKeepOriginal,
                                                             0)));

  // RAW Get: the kept tokens' K/V, positions reported, close to the source (int8 twice).
  GetResult raw = Get("cq-int8", resp.entry_key(), v1::PAYLOAD_FORMAT_RAW);
  ASSERT_OK(raw.status);
  ASSERT_EQ(raw.infos.size(), 1u);
  ASSERT_TRUE(raw.infos[0].found());
  EXPECT_THAT(raw.infos[0].positions(), ElementsAreArray(want));
  EXPECT_EQ(raw.infos[0].codec(), v1::CODEC_INT8);
  const kv::Layout lay = KvLayout();
  ASSERT_EQ(raw.payloads[0].size(), lay.BytesPerToken() * 32);
  kv::Layout kept_layout = lay;
  kept_layout.tokens_per_block = 32;
  auto got = kv::KvSequenceFromRawBlocks(kept_layout, std::vector<std::string>{raw.payloads[0]});
  ASSERT_OK(got);
  // fp16 source for the comparison (what the server received).
  auto src = kv::KvSequenceFromRawBlocks(
      kv::Layout{.num_layers = 2, .num_kv_heads = 2, .head_dim = 64, .tokens_per_block = 32},
      std::vector<std::string>{RawBlock(seq_, 0), RawBlock(seq_, 1), RawBlock(seq_, 2),
                               RawBlock(seq_, 3)});
  ASSERT_OK(src);
  double max_err = 0;
  for (uint32_t l = 0; l < 2; ++l) {
    for (uint32_t h = 0; h < 2; ++h) {
      for (uint32_t t = 0; t < 32; ++t) {
        for (uint32_t c = 0; c < 64; ++c) {
          const float k = got->Key(l, h, t)[c], ks = src->Key(l, h, want[t])[c];
          const float v = got->Value(l, h, t)[c], vs = src->Value(l, h, want[t])[c];
          if (t < 4) {  // sinks are stored unquantized in block 0 and in the entry
            ASSERT_EQ(k, ks) << "sink key l" << l << " h" << h << " t" << t;
            ASSERT_EQ(v, vs);
          }
          max_err = std::max({max_err, std::fabs(double{k} - ks), std::fabs(double{v} - vs)});
        }
      }
    }
  }
  EXPECT_LT(max_err, 0.08);  // two int8 round trips over a ~[-4, 4] range
  EXPECT_GT(max_err, 0.0);   // it really was quantized

  // ENCODED Get: the stored entry, per-head positions recoverable.
  GetResult enc = Get("cq-int8", resp.entry_key(), v1::PAYLOAD_FORMAT_ENCODED);
  ASSERT_OK(enc.status);
  ASSERT_TRUE(enc.infos[0].found());
  const auto bytes = kv::AsBytes(enc.payloads[0]);
  ASSERT_TRUE(kv::IsCompactedEntry(bytes));
  auto entry = kv::ParseCompactedEntry(bytes);
  ASSERT_OK(entry);
  EXPECT_EQ(entry->policy, kv::CompactionPolicy::kSinkWindow);
  EXPECT_THAT(entry->selection.Head(1, 1), ElementsAreArray(want));
  auto info = kv::ParseHeader(entry->blob);
  ASSERT_OK(info);
  EXPECT_EQ(info->codec, kv::CodecId::kInt8);
  EXPECT_EQ(info->num_tokens, 32u);
}

TEST_F(CompactTest, H2oAndSnapKvKeepPerHeadSelections) {
  Register("cq-fp16", v1::CODEC_FP16);
  PushSequence("cq-fp16");
  // H2O: head (l, h) prefers tokens 40 + 10 * (2l + h) and its neighbour.
  v1::CompactRequest req = BaseRequest("cq-fp16");
  v1::H2oParams* h2o = req.mutable_h2o();
  h2o->set_n_sink(4);
  h2o->set_heavy(2);
  h2o->set_recent(8);
  for (uint32_t l = 0; l < 2; ++l) {
    for (uint32_t h = 0; h < 2; ++h) {
      for (uint32_t t = 0; t < kTokens; ++t) {
        const uint32_t hot = 40 + 10 * (2 * l + h);
        h2o->add_scores(t == hot || t == hot + 1 ? 5.0f : 0.01f);
      }
    }
  }
  v1::CompactResponse resp;
  grpc::Status s = Compact(req, &resp);
  ASSERT_OK(s);
  EXPECT_EQ(resp.kept_tokens(), 14u);
  std::vector<uint32_t> want_union = {0, 1, 2, 3, 40, 41, 50, 51, 60, 61, 70, 71};
  for (uint32_t t = kTokens - 8; t < kTokens; ++t) want_union.push_back(t);
  EXPECT_THAT(resp.positions(), ElementsAreArray(want_union));
  GetResult enc = Get("cq-fp16", resp.entry_key(), v1::PAYLOAD_FORMAT_ENCODED);
  ASSERT_OK(enc.status);
  ASSERT_TRUE(enc.infos[0].found());
  EXPECT_THAT(enc.infos[0].positions(), ElementsAreArray(want_union));
  auto entry = kv::ParseCompactedEntry(kv::AsBytes(enc.payloads[0]));
  ASSERT_OK(entry);
  EXPECT_EQ(entry->selection.Head(1, 0)[4], 60u);
  // fp16 namespace: the gathered K/V are bit-exact copies of the source tokens.
  auto raw = kv::DecodeToString(entry->blob);
  ASSERT_OK(raw);
  kv::Layout kept_layout = KvLayout();
  kept_layout.tokens_per_block = 14;
  auto got = kv::KvSequenceFromRawBlocks(kept_layout, std::vector<std::string>{*raw});
  ASSERT_OK(got);
  const float want_v = kv::KvSequenceFromRawBlocks(KvLayout(), std::vector<std::string>{
                                                                   RawBlock(seq_, 1)})
                           ->Value(1, 0, 60 - 32)[5];
  EXPECT_EQ(got->Value(1, 0, 4)[5], want_v);

  // SnapKV: observation-window queries aligned with token 70's key in every head.
  v1::CompactRequest sreq = BaseRequest("cq-fp16");
  v1::SnapKvParams* snap = sreq.mutable_snapkv();
  snap->set_n_sink(4);
  snap->set_obs_window(8);
  snap->set_pool_kernel(3);
  snap->set_capacity(15);
  snap->set_num_query_heads(4);
  for (uint32_t l = 0; l < 2; ++l) {
    for (uint32_t qh = 0; qh < 4; ++qh) {
      for (uint32_t i = 0; i < 8; ++i) {
        const float* k = seq_.Key(l, qh / 2, 70);
        for (uint32_t c = 0; c < 64; ++c) snap->add_obs_queries(4.0f * k[c]);
      }
    }
  }
  v1::CompactResponse sresp;
  s = Compact(sreq, &sresp);
  ASSERT_OK(s);
  EXPECT_EQ(sresp.kept_tokens(), 15u);
  EXPECT_TRUE(std::binary_search(sresp.positions().begin(), sresp.positions().end(), 70u));
  EXPECT_NE(sresp.entry_key(), resp.entry_key());
}

TEST_F(CompactTest, ReindexReRotatesKeysToContiguousPositions) {
  Register("cq-re", v1::CODEC_FP16);
  PushSequence("cq-re");
  v1::CompactRequest req = BaseRequest("cq-re");
  req.mutable_sink_window()->set_n_sink(4);
  req.mutable_sink_window()->set_window(12);
  req.set_position_policy(v1::POSITION_POLICY_REINDEX);
  req.set_rope_theta(10000.0f);
  v1::CompactResponse resp;
  grpc::Status s = Compact(req, &resp);
  ASSERT_OK(s);
  GetResult raw = Get("cq-re", resp.entry_key(), v1::PAYLOAD_FORMAT_RAW);
  ASSERT_OK(raw.status);
  ASSERT_TRUE(raw.infos[0].found());
  kv::Layout kept_layout = KvLayout();
  kept_layout.tokens_per_block = 16;
  auto got = kv::KvSequenceFromRawBlocks(kept_layout, std::vector<std::string>{raw.payloads[0]});
  ASSERT_OK(got);
  // Token t (original position p) now carries RoPE at position t: rotating it by p - t
  // gives back the stored key (up to fp16 rounding).
  for (uint32_t t = 0; t < 16; ++t) {
    const uint32_t p = raw.infos[0].positions(t);
    std::vector<float> k(got->Key(0, 1, t), got->Key(0, 1, t) + 64);
    kv::RopeRotate(k.data(), 64, static_cast<double>(p) - t, 10000.0f);
    for (uint32_t c = 0; c < 64; ++c) EXPECT_NEAR(k[c], seq_.Key(0, 1, p)[c], 0.02) << t;
  }
}

TEST_F(CompactTest, InvalidRequestsAndUnknownKeysStoreNothing) {
  Register("cq-bad", v1::CODEC_INT8);
  PushSequence("cq-bad");
  const uint64_t before = Puts("cq-bad");
  v1::CompactResponse resp;

  v1::CompactRequest no_policy = BaseRequest("cq-bad");
  EXPECT_EQ(Compact(no_policy, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  v1::CompactRequest small = BaseRequest("cq-bad");
  small.mutable_snapkv()->set_n_sink(4);
  small.mutable_snapkv()->set_obs_window(8);
  small.mutable_snapkv()->set_pool_kernel(3);
  small.mutable_snapkv()->set_capacity(10);  // < n_sink + obs_window
  small.mutable_snapkv()->set_num_query_heads(2);
  for (int i = 0; i < 2 * 2 * 8 * 64; ++i) small.mutable_snapkv()->add_obs_queries(0.1f);
  grpc::Status s = Compact(small, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), ::testing::HasSubstr("capacity"));

  v1::CompactRequest bad_queries = small;
  bad_queries.mutable_snapkv()->set_capacity(20);
  bad_queries.mutable_snapkv()->mutable_obs_queries()->RemoveLast();
  s = Compact(bad_queries, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), ::testing::HasSubstr("obs_queries"));

  v1::CompactRequest bad_scores = BaseRequest("cq-bad");
  bad_scores.mutable_h2o()->set_n_sink(4);
  bad_scores.mutable_h2o()->set_heavy(4);
  bad_scores.mutable_h2o()->set_recent(4);
  for (uint32_t i = 0; i < kTokens; ++i) bad_scores.mutable_h2o()->add_scores(1.0f);
  s = Compact(bad_scores, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), ::testing::HasSubstr("scores"));

  v1::CompactRequest zero = BaseRequest("cq-bad");
  zero.mutable_sink_window()->set_n_sink(0);
  zero.mutable_sink_window()->set_window(0);
  EXPECT_EQ(Compact(zero, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  v1::CompactRequest unknown = BaseRequest("cq-bad");
  unknown.set_keys(2, "no-such-block");
  unknown.mutable_sink_window()->set_n_sink(4);
  unknown.mutable_sink_window()->set_window(8);
  s = Compact(unknown, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), ::testing::HasSubstr("keys[2]"));

  v1::CompactRequest unknown_ns = BaseRequest("no-such-namespace");
  unknown_ns.mutable_sink_window()->set_window(8);
  EXPECT_EQ(Compact(unknown_ns, &resp).error_code(), grpc::StatusCode::NOT_FOUND);

  EXPECT_EQ(Puts("cq-bad"), before);
  // The entry the unknown-key request names is absent (it shares the last key).
  const std::string key = kv::CompactedEntryKey(
      keys_.back(), kv::CompactionParamsString(kv::SinkWindowParams{4, 8},
                                               kv::PositionPolicy::kKeepOriginal, 0));
  GetResult g = Get("cq-bad", key, v1::PAYLOAD_FORMAT_ENCODED);
  ASSERT_OK(g.status);
  ASSERT_EQ(g.infos.size(), 1u);
  EXPECT_FALSE(g.infos[0].found());
}

}  // namespace
}  // namespace kvtier
