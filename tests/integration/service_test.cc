// End-to-end tests of kvtierd: real server processes on 127.0.0.1 port 0, real RocksDB in
// temp dirs, talking gRPC through the generated stubs.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/client_unary_call.h"
#include "gtest/gtest.h"
#include "kv/codec.h"
#include "kv/half.h"
#include "kv/layout.h"
#include "kv/prefix_key.h"
#include "kvtier/v1/kvtier.grpc.pb.h"
#include "tests/testing/http_get.h"
#include "tests/testing/layouts.h"
#include "tests/testing/server_process.h"
#include "tests/testing/static_peer_cluster.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace kvtier {
namespace {

using ::testing::HasSubstr;
using testing::ServerProcess;
using testing::TempDir;

constexpr uint32_t kMaxKeys = 64;

// testing::SmallLayout() (L2 H2 D64 T32 fp16 sinks4) as the wire message.
v1::Layout SmallLayout() { return client::ToProto(testing::SmallLayout()); }

const uint64_t kBlockBytes = testing::SmallLayout().BytesPerBlock();

std::string RandomRawBlock(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::string out(kBlockBytes, '\0');
  for (size_t i = 0; i < kBlockBytes / 2; ++i) {
    const uint16_t h = kv::FloatToHalf(normal(rng));
    std::memcpy(&out[i * 2], &h, 2);
  }
  return out;
}

std::string Encode(kv::CodecId codec, uint32_t index, const std::string& raw) {
  auto enc = kv::Encode(codec, testing::SmallLayout(), index, kv::AsBytes(raw));
  EXPECT_OK(enc);
  return enc.ok() ? *enc : std::string();
}

struct Block {
  std::string key;
  std::string parent;
  uint32_t index = 0;
  std::string payload;
};

struct GetResult {
  grpc::Status status;
  std::vector<v1::GetBlockInfo> infos;
  std::vector<std::string> payloads;  // per info ("" for misses)
};

class KvtierdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_path_ = dir_.Sub("kvtierd.textproto");
    std::ofstream(config_path_) << "max_keys_per_request: " << kMaxKeys << "\n"
                                << "executor_threads: 2\n"
                                << "shutdown_grace_ms: 2000\n"
                                << "namespaces { name: \"cfg-ns\" layout { num_layers: 2 "
                                   "num_kv_heads: 2 head_dim: 64 tokens_per_block: 32 "
                                   "sink_tokens: 4 dtype: DTYPE_FP16 } codec: CODEC_INT8 }\n";
    StartServer();
  }

  void StartServer() {
    auto p = ServerProcess::Start(testing::KvtierdPath(),
                                  {"--config", config_path_, "--port", "0", "--data-dir",
                                   dir_.Sub("data"), "--hot-capacity", "32MiB"});
    ASSERT_OK(p);
    server_ = std::make_unique<ServerProcess>(std::move(*p));
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(64 << 20);
    args.SetMaxSendMessageSize(64 << 20);
    channel_ =
        grpc::CreateCustomChannel(server_->address(), grpc::InsecureChannelCredentials(), args);
    kv_ = v1::KvCache::NewStub(channel_);
    admin_ = v1::KvCacheAdmin::NewStub(channel_);
  }

  void RestartServer() {
    auto code = server_->Terminate();
    ASSERT_OK(code);
    EXPECT_EQ(*code, 0);
    StartServer();
  }

  grpc::Status Register(const std::string& name, v1::Codec codec,
                        v1::RegisterNamespaceResponse* resp = nullptr,
                        const std::string& hash_scheme = kv::kHashSchemeVersion,
                        v1::Layout layout = SmallLayout()) {
    v1::RegisterNamespaceRequest req;
    req.mutable_spec()->set_name(name);
    *req.mutable_spec()->mutable_layout() = layout;
    req.mutable_spec()->set_codec(codec);
    req.set_hash_scheme(hash_scheme);
    v1::RegisterNamespaceResponse local;
    grpc::ClientContext ctx;
    return kv_->RegisterNamespace(&ctx, req, resp ? resp : &local);
  }

  // Sends the header and then the concatenated payloads in `chunk`-byte messages
  // (cutting `drop_tail` bytes off the end).
  grpc::Status Put(const std::string& ns, v1::PayloadFormat format,
                   const std::vector<Block>& blocks, size_t chunk = 1 << 20, size_t drop_tail = 0,
                   v1::PutResponse* resp = nullptr,
                   const v1::PutHeader* header_override = nullptr) {
    size_t total = 0;
    for (const Block& b : blocks) total += b.payload.size();
    total -= std::min(drop_tail, total);
    std::vector<size_t> ends;
    for (size_t off = 0; off < total; off += chunk) ends.push_back(std::min(off + chunk, total));
    v1::PutResponse local;
    return PutSegments(ns, format, blocks, ends, resp ? resp : &local, header_override);
  }

  // Like Put, but cuts the concatenated payloads at the given stream offsets (ascending;
  // a repeated offset sends an empty chunk message).
  grpc::Status PutAtCuts(const std::string& ns, v1::PayloadFormat format,
                         const std::vector<Block>& blocks, const std::vector<size_t>& cuts,
                         v1::PutResponse* resp) {
    size_t total = 0;
    for (const Block& b : blocks) total += b.payload.size();
    std::vector<size_t> ends = cuts;
    ends.push_back(total);
    return PutSegments(ns, format, blocks, ends, resp, nullptr);
  }

  // Writes the Put header for `blocks` (or `header_override`), then one chunk message per
  // segment of the concatenated payloads, segment i ending at stream offset ends[i].
  grpc::Status PutSegments(const std::string& ns, v1::PayloadFormat format,
                           const std::vector<Block>& blocks, const std::vector<size_t>& ends,
                           v1::PutResponse* resp, const v1::PutHeader* header_override) {
    grpc::ClientContext ctx;
    auto writer = kv_->Put(&ctx, resp);
    v1::PutRequest req;
    v1::PutHeader* h = req.mutable_header();
    h->set_namespace_(ns);
    h->set_format(format);
    std::string all;
    for (const Block& b : blocks) {
      v1::PutBlock* pb = h->add_blocks();
      pb->set_key(b.key);
      pb->set_parent_key(b.parent);
      pb->set_block_index(b.index);
      pb->set_size(b.payload.size());
      all += b.payload;
    }
    if (header_override) *h = *header_override;
    bool ok = writer->Write(req);
    size_t at = 0;
    for (size_t end : ends) {
      if (!ok) break;
      v1::PutRequest c;
      c.set_chunk(all.substr(at, end - at));
      ok = writer->Write(c);
      at = end;
    }
    writer->WritesDone();
    return writer->Finish();
  }

  GetResult Get(const std::string& ns, const std::vector<std::string>& keys,
                v1::PayloadFormat format = v1::PAYLOAD_FORMAT_ENCODED) {
    GetResult r;
    v1::GetRequest req;
    req.set_namespace_(ns);
    for (const auto& k : keys) req.add_keys(k);
    req.set_format(format);
    grpc::ClientContext ctx;
    auto reader = kv_->Get(&ctx, req);
    v1::GetResponse msg;
    std::string stream;
    bool have_header = false;
    while (reader->Read(&msg)) {
      if (msg.has_header()) {
        EXPECT_FALSE(have_header);
        have_header = true;
        r.infos.assign(msg.header().blocks().begin(), msg.header().blocks().end());
      } else {
        EXPECT_TRUE(have_header);
        EXPECT_LE(msg.chunk().size(), 1u << 20);
        stream += msg.chunk();
      }
    }
    r.status = reader->Finish();
    size_t off = 0;
    for (const auto& info : r.infos) {
      r.payloads.push_back(stream.substr(off, info.size()));
      off += info.size();
    }
    EXPECT_EQ(off, stream.size());
    return r;
  }

  v1::LookupResponse Lookup(const std::string& ns, const std::vector<std::string>& keys,
                            grpc::Status* status = nullptr) {
    v1::LookupRequest req;
    req.set_namespace_(ns);
    for (const auto& k : keys) req.add_keys(k);
    v1::LookupResponse resp;
    grpc::ClientContext ctx;
    grpc::Status s = kv_->Lookup(&ctx, req, &resp);
    if (status) {
      *status = s;
    } else {
      EXPECT_OK(s);
    }
    return resp;
  }

  v1::StatsResponse Stats(const std::string& ns = "") {
    v1::StatsRequest req;
    req.set_namespace_(ns);
    v1::StatsResponse resp;
    grpc::ClientContext ctx;
    grpc::Status s = admin_->Stats(&ctx, req, &resp);
    EXPECT_OK(s);
    return resp;
  }

  static const v1::NamespaceStats* FindNs(const v1::StatsResponse& s, const std::string& n) {
    for (const auto& ns : s.namespaces()) {
      if (ns.name() == n) return &ns;
    }
    return nullptr;
  }

  TempDir dir_;
  std::string config_path_;
  std::unique_ptr<ServerProcess> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::KvCache::Stub> kv_;
  std::unique_ptr<v1::KvCacheAdmin::Stub> admin_;
};

// Sequences sharing prefixes: a tree where sequence s shares its first (s % 5) blocks with
// the base sequence. Returns per-sequence block lists.
std::vector<std::vector<Block>> MakeSequences(int num_seqs, int len, kv::CodecId codec, bool raw,
                                              std::map<std::string, std::string>* raw_by_key) {
  std::vector<std::vector<Block>> seqs;
  for (int s = 0; s < num_seqs; ++s) {
    const int shared = s % 5;
    std::vector<Block> seq;
    std::string parent;
    for (int i = 0; i < len; ++i) {
      Block b;
      b.key = i < shared ? absl::StrCat("base-", i) : absl::StrCat("s", s, "-b", i);
      b.parent = parent;
      b.index = static_cast<uint32_t>(i);
      const uint64_t seed = i < shared ? 1000 + i : 100000 + s * 100 + i;
      std::string raw_block = RandomRawBlock(seed);
      (*raw_by_key)[b.key] = raw_block;
      b.payload = raw ? raw_block : Encode(codec, b.index, raw_block);
      parent = b.key;
      seq.push_back(std::move(b));
    }
    seqs.push_back(std::move(seq));
  }
  return seqs;
}

std::vector<std::string> KeysOf(const std::vector<Block>& seq) {
  std::vector<std::string> keys;
  for (const auto& b : seq) keys.push_back(b.key);
  return keys;
}

TEST_F(KvtierdTest, HealthIsServingAndHandshakeReturnsHashScheme) {
  // grpc.health.v1.Health/Check with an empty request; response field 1 = status.
  grpc::ClientContext ctx;
  grpc::ByteBuffer req, resp;
  grpc::Slice empty("", 0);
  req = grpc::ByteBuffer(&empty, 1);
  grpc::internal::RpcMethod method("/grpc.health.v1.Health/Check",
                                   grpc::internal::RpcMethod::NORMAL_RPC);
  grpc::Status s = grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
      channel_.get(), method, &ctx, req, &resp);
  ASSERT_OK(s);
  grpc::Slice out;
  ASSERT_OK(resp.DumpToSingleSlice(&out));
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(out.begin()), out.size()),
            std::string("\x08\x01", 2));  // SERVING

  v1::RegisterNamespaceResponse reg;
  ASSERT_OK(Register("handshake", v1::CODEC_FP16, &reg));
  EXPECT_TRUE(reg.created());
  EXPECT_EQ(reg.hash_scheme(), kv::kHashSchemeVersion);
  EXPECT_EQ(reg.node_id(), server_->address());
  EXPECT_EQ(reg.spec().layout().head_dim(), 64u);
  ASSERT_OK(Register("handshake", v1::CODEC_FP16, &reg));
  EXPECT_FALSE(reg.created());

  v1::ListNamespacesResponse list;
  grpc::ClientContext lctx;
  ASSERT_OK(admin_->ListNamespaces(&lctx, v1::ListNamespacesRequest(), &list));
  std::vector<std::string> names;
  for (const auto& n : list.namespaces()) names.push_back(n.name());
  EXPECT_THAT(names, ::testing::UnorderedElementsAre("cfg-ns", "handshake"));
}

TEST_F(KvtierdTest, PrefixLookupAndBitExactGet) {
  ASSERT_OK(Register("fp16", v1::CODEC_FP16));
  std::map<std::string, std::string> raw;
  auto seqs = MakeSequences(12, 6, kv::CodecId::kFp16, /*raw=*/false, &raw);
  // Alternate chunk sizes so chunks straddle block boundaries.
  for (size_t s = 0; s < seqs.size(); ++s) {
    ASSERT_OK(Put("fp16", v1::PAYLOAD_FORMAT_ENCODED, seqs[s], s % 2 ? 10000 : 1 << 20));
  }
  for (const auto& seq : seqs) {
    std::vector<std::string> keys = KeysOf(seq);
    EXPECT_EQ(Lookup("fp16", keys).prefix_blocks(), 6u);
    // A query that follows the sequence for 3 blocks, then diverges.
    std::vector<std::string> q(keys.begin(), keys.begin() + 3);
    q.push_back("never-stored");
    q.push_back(keys[4]);  // resident, but after the gap: not part of the prefix
    v1::LookupResponse r = Lookup("fp16", q);
    EXPECT_EQ(r.prefix_blocks(), 3u);
    ASSERT_EQ(r.blocks_size(), 5);
    EXPECT_EQ(r.blocks(3).tier(), v1::TIER_NONE);
    EXPECT_EQ(r.blocks(0).owner(), server_->address());
    EXPECT_NE(r.blocks(4).tier(), v1::TIER_NONE);
  }
  EXPECT_EQ(Lookup("fp16", {"never-stored", "base-0"}).prefix_blocks(), 0u);

  // Encoded Get returns the stored blobs bit-exactly; raw Get returns the source fp16.
  std::vector<std::string> keys = KeysOf(seqs[7]);
  keys.insert(keys.begin() + 2, "missing-key");
  GetResult enc = Get("fp16", keys);
  ASSERT_OK(enc.status);
  ASSERT_EQ(enc.infos.size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(enc.infos[i].key(), keys[i]);
    if (keys[i] == "missing-key") {
      EXPECT_FALSE(enc.infos[i].found());
      continue;
    }
    ASSERT_TRUE(enc.infos[i].found()) << keys[i];
    EXPECT_EQ(enc.infos[i].codec(), v1::CODEC_FP16);
    const uint32_t idx = enc.infos[i].block_index();
    EXPECT_EQ(enc.payloads[i], Encode(kv::CodecId::kFp16, idx, raw[keys[i]])) << keys[i];
  }
  GetResult dec = Get("fp16", keys, v1::PAYLOAD_FORMAT_RAW);
  ASSERT_OK(dec.status);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i] == "missing-key") continue;
    EXPECT_EQ(dec.payloads[i], raw[keys[i]]) << keys[i];
  }
}

TEST_F(KvtierdTest, PayloadSplitAtOddOffsetsRoundTripsBitExactly) {
  // The server keeps the received buffers and stores each block from them (one copy into
  // the hot tier): every split, also through the 40-byte codec header, must be invisible.
  ASSERT_OK(Register("fp16", v1::CODEC_FP16));
  ASSERT_OK(Register("fp16-raw", v1::CODEC_FP16));
  std::map<std::string, std::string> raw;
  std::vector<Block> enc_seq = MakeSequences(1, 3, kv::CodecId::kFp16, /*raw=*/false, &raw)[0];
  std::vector<Block> raw_seq = MakeSequences(1, 3, kv::CodecId::kFp16, /*raw=*/true, &raw)[0];
  const size_t b = enc_seq[0].payload.size();
  // Through the first header (1, 7, 39), at its end (40), an empty message (41, 41), odd
  // offsets in the body, through the second block's header (b + 13, b + 27); the third
  // block arrives whole in one message with the tail of the second.
  const std::vector<size_t> cuts = {1, 7, 39, 40, 41, 41, 333, b - 1, b + 13, b + 27, 2 * b - 5};
  v1::PutResponse resp;
  grpc::Status st = PutAtCuts("fp16", v1::PAYLOAD_FORMAT_ENCODED, enc_seq, cuts, &resp);
  ASSERT_OK(st);
  EXPECT_EQ(resp.blocks_stored(), 3u);
  EXPECT_EQ(resp.bytes_stored(), 3 * b);
  // Raw fp16 payloads for an fp16 namespace get the codec header in front of the
  // received bytes; cut them at odd offsets too.
  const size_t r = kBlockBytes;
  const std::vector<size_t> raw_cuts = {3, 3, 41, r - 7, r + 1, 2 * r + 39};
  st = PutAtCuts("fp16-raw", v1::PAYLOAD_FORMAT_RAW, raw_seq, raw_cuts, &resp);
  ASSERT_OK(st);
  EXPECT_EQ(resp.bytes_stored(), 3 * b);
  for (const std::string ns : {"fp16", "fp16-raw"}) {
    const std::vector<std::string> keys = KeysOf(enc_seq);
    EXPECT_EQ(Lookup(ns, keys).prefix_blocks(), 3u) << ns;
    GetResult enc = Get(ns, keys);
    ASSERT_OK(enc.status);
    ASSERT_EQ(enc.payloads.size(), 3u);
    GetResult dec = Get(ns, keys, v1::PAYLOAD_FORMAT_RAW);
    ASSERT_OK(dec.status);
    for (size_t i = 0; i < 3; ++i) {
      ASSERT_TRUE(enc.infos[i].found()) << ns << " " << i;
      EXPECT_EQ(enc.payloads[i], enc_seq[i].payload) << ns << " " << i;
      EXPECT_EQ(dec.payloads[i], raw_seq[i].payload) << ns << " " << i;
    }
  }
  // After demotion the cold copies (checksummed from the hot copies) read back the same.
  v1::EvictRequest ev;
  ev.set_namespace_("fp16");
  v1::EvictResponse ev_resp;
  grpc::ClientContext ev_ctx;
  ASSERT_OK(admin_->Evict(&ev_ctx, ev, &ev_resp));
  GetResult cold = Get("fp16", KeysOf(enc_seq));
  ASSERT_OK(cold.status);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(cold.payloads[i], enc_seq[i].payload) << i;
}

TEST_F(KvtierdTest, RawPutToQuantizedNamespaceIsTranscoded) {
  ASSERT_OK(Register("kivi", v1::CODEC_KIVI2));
  std::map<std::string, std::string> raw;
  auto seqs = MakeSequences(3, 4, kv::CodecId::kKivi2, /*raw=*/true, &raw);
  v1::PutResponse resp;
  ASSERT_OK(Put("kivi", v1::PAYLOAD_FORMAT_RAW, seqs[1], 7777, 0, &resp));
  EXPECT_EQ(resp.blocks_stored(), 4u);
  // kivi2 (KVTB v2): 3-bit keys and 2-bit values plus int8 group ranges, about 3.6-4.1
  // bits per value here with the exact sink tokens: under 0.3 of the raw fp16 bytes.
  EXPECT_LT(resp.bytes_stored(), 4 * kBlockBytes * 3 / 10);

  std::vector<std::string> keys = KeysOf(seqs[1]);
  GetResult enc = Get("kivi", keys);
  ASSERT_OK(enc.status);
  GetResult dec = Get("kivi", keys, v1::PAYLOAD_FORMAT_RAW);
  ASSERT_OK(dec.status);
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(enc.infos[i].found());
    EXPECT_EQ(enc.infos[i].codec(), v1::CODEC_KIVI2);
    const std::string expected_blob = Encode(kv::CodecId::kKivi2, i, raw[keys[i]]);
    EXPECT_EQ(enc.payloads[i], expected_blob);
    auto expected_raw = kv::DecodeToString(kv::AsBytes(expected_blob));
    ASSERT_OK(expected_raw);
    EXPECT_EQ(dec.infos[i].size(), kBlockBytes);
    EXPECT_EQ(dec.payloads[i], *expected_raw) << i;
    EXPECT_NE(dec.payloads[i], raw[keys[i]]);  // lossy: this is really kivi2
  }

  // An fp16 blob put to the kivi2 namespace is transcoded as well.
  std::vector<Block> one = {seqs[2][0]};
  one[0].payload = Encode(kv::CodecId::kFp16, 0, raw[one[0].key]);
  ASSERT_OK(Put("kivi", v1::PAYLOAD_FORMAT_ENCODED, one));
  GetResult t = Get("kivi", {one[0].key});
  ASSERT_TRUE(t.infos[0].found());
  EXPECT_EQ(t.payloads[0], Encode(kv::CodecId::kKivi2, 0, raw[one[0].key]));
}

void ExpectStatus(const grpc::Status& s, grpc::StatusCode code, const std::string& needle) {
  EXPECT_EQ(s.error_code(), code) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr(needle));
}

TEST_F(KvtierdTest, BadInputGetsItsStatusAndChangesNothing) {
  ASSERT_OK(Register("ns", v1::CODEC_FP16));
  std::map<std::string, std::string> raw;
  auto seqs = MakeSequences(2, 3, kv::CodecId::kFp16, /*raw=*/true, &raw);
  ASSERT_OK(Put("ns", v1::PAYLOAD_FORMAT_RAW, seqs[0]));
  const v1::StatsResponse before = Stats("ns");
  const std::vector<Block>& fresh = seqs[1];  // never stored successfully

  // Unknown namespace.
  ExpectStatus(Put("nope", v1::PAYLOAD_FORMAT_RAW, fresh), grpc::StatusCode::NOT_FOUND,
               "namespace");
  EXPECT_EQ(Get("nope", {"k"}).status.error_code(), grpc::StatusCode::NOT_FOUND);
  grpc::Status ls;
  Lookup("nope", {"k"}, &ls);
  EXPECT_EQ(ls.error_code(), grpc::StatusCode::NOT_FOUND);

  // Layout mismatches.
  v1::Layout other = SmallLayout();
  other.set_head_dim(128);
  ExpectStatus(Register("ns", v1::CODEC_FP16, nullptr, kv::kHashSchemeVersion, other),
               grpc::StatusCode::FAILED_PRECONDITION, "head_dim");
  ExpectStatus(Register("ns2", v1::CODEC_FP16, nullptr, "some-other-scheme"),
               grpc::StatusCode::FAILED_PRECONDITION, "hash_scheme");
  {
    v1::PutHeader h;
    h.set_namespace_("ns");
    h.set_format(v1::PAYLOAD_FORMAT_RAW);
    *h.mutable_layout() = other;
    for (const Block& b : fresh) {
      auto* pb = h.add_blocks();
      pb->set_key(b.key);
      pb->set_size(b.payload.size());
    }
    ExpectStatus(Put("ns", v1::PAYLOAD_FORMAT_RAW, fresh, 1 << 20, 0, nullptr, &h),
                 grpc::StatusCode::FAILED_PRECONDITION, "header.layout.head_dim");
  }
  {
    kv::Layout big = testing::SmallLayout();
    big.num_layers = 1;
    std::string blob_raw(big.BytesPerBlock(), '\0');
    auto blob = kv::Encode(kv::CodecId::kFp16, big, 0, kv::AsBytes(blob_raw));
    ASSERT_OK(blob);
    std::vector<Block> bad = {fresh[0], fresh[1]};
    bad[1].payload = *blob;
    ExpectStatus(
        Put("ns", v1::PAYLOAD_FORMAT_ENCODED,
            {Block{fresh[0].key, "", 0, Encode(kv::CodecId::kFp16, 0, raw[fresh[0].key])}, bad[1]}),
        grpc::StatusCode::FAILED_PRECONDITION, "blocks[1].payload.layout.num_layers");
  }
  {
    // A quantized blob cannot be put into an fp16 namespace (no lossy re-encoding).
    std::vector<Block> int8 = {fresh[0]};
    int8[0].payload = Encode(kv::CodecId::kInt8, 0, raw[fresh[0].key]);
    ExpectStatus(Put("ns", v1::PAYLOAD_FORMAT_ENCODED, int8), grpc::StatusCode::FAILED_PRECONDITION,
                 "blocks[0].payload codec int8");
  }
  {
    std::vector<Block> bad = fresh;
    bad[1].payload = bad[1].payload.substr(0, kBlockBytes - 2);
    ExpectStatus(Put("ns", v1::PAYLOAD_FORMAT_RAW, bad), grpc::StatusCode::INVALID_ARGUMENT,
                 "header.blocks[1].size");
    std::vector<Block> garbage = {fresh[0]};  // raw bytes sent as an "encoded" blob
    ExpectStatus(Put("ns", v1::PAYLOAD_FORMAT_ENCODED, garbage), grpc::StatusCode::INVALID_ARGUMENT,
                 "blocks[0].payload");
  }
  // The chunk stream ends early / carries too much.
  ExpectStatus(Put("ns", v1::PAYLOAD_FORMAT_RAW, fresh, 5000, /*drop_tail=*/100),
               grpc::StatusCode::INVALID_ARGUMENT, "ended after");
  {
    v1::PutHeader h;
    h.set_namespace_("ns");
    h.set_format(v1::PAYLOAD_FORMAT_RAW);
    auto* pb = h.add_blocks();
    pb->set_key(fresh[0].key);
    pb->set_size(kBlockBytes);
    ExpectStatus(Put("ns", v1::PAYLOAD_FORMAT_RAW, {fresh[0], fresh[1]}, 1 << 20, 0, nullptr, &h),
                 grpc::StatusCode::INVALID_ARGUMENT, "more than");
  }
  // Keys: too long, too many.
  {
    std::vector<Block> bad = fresh;
    bad[2].key = std::string(33, 'k');
    ExpectStatus(Put("ns", v1::PAYLOAD_FORMAT_RAW, bad), grpc::StatusCode::INVALID_ARGUMENT,
                 "header.blocks[2].key");
    Lookup("ns", {"a", std::string(33, 'k')}, &ls);
    ExpectStatus(ls, grpc::StatusCode::INVALID_ARGUMENT, "keys[1]");
    std::vector<std::string> many(kMaxKeys + 1, "k");
    Lookup("ns", many, &ls);
    ExpectStatus(ls, grpc::StatusCode::INVALID_ARGUMENT, "max_keys_per_request");
    ExpectStatus(Get("ns", many).status, grpc::StatusCode::INVALID_ARGUMENT,
                 "max_keys_per_request");
  }
  // Too many blocks in one Put.
  {
    std::vector<Block> many;
    for (uint32_t i = 0; i <= kMaxKeys; ++i) {
      many.push_back(Block{absl::StrCat("many", i), "", 0, fresh[0].payload});
    }
    ExpectStatus(Put("ns", v1::PAYLOAD_FORMAT_RAW, many), grpc::StatusCode::INVALID_ARGUMENT,
                 "max_keys_per_request");
  }
  // A message over the server's 4 MiB limit: gRPC itself answers RESOURCE_EXHAUSTED.
  {
    v1::PutHeader h;
    h.set_namespace_("ns");
    h.set_format(v1::PAYLOAD_FORMAT_RAW);
    auto* pb = h.add_blocks();
    pb->set_key("big0");
    pb->set_size(kBlockBytes);
    std::vector<Block> big = {Block{"big0", "", 0, std::string(5 << 20, 'x')}};
    EXPECT_EQ(Put("ns", v1::PAYLOAD_FORMAT_RAW, big, 5 << 20, 0, nullptr, &h).error_code(),
              grpc::StatusCode::RESOURCE_EXHAUSTED);
    Lookup("ns", {std::string(5 << 20, 'k')}, &ls);
    EXPECT_EQ(ls.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_EQ(Lookup("ns", {"big0"}).prefix_blocks(), 0u);
  }
  // The first message must be the header.
  {
    grpc::ClientContext ctx;
    v1::PutResponse resp;
    auto w = kv_->Put(&ctx, &resp);
    v1::PutRequest c;
    c.set_chunk("xyz");
    w->Write(c);
    w->WritesDone();
    ExpectStatus(w->Finish(), grpc::StatusCode::INVALID_ARGUMENT, "header");
  }

  // Nothing changed: no fresh key is resident, stats count no new puts, old data intact.
  EXPECT_EQ(Lookup("ns", KeysOf(fresh)).prefix_blocks(), 0u);
  for (const Block& b : fresh) EXPECT_EQ(Lookup("ns", {b.key}).prefix_blocks(), 0u) << b.key;
  const v1::StatsResponse after = Stats("ns");
  ASSERT_EQ(after.namespaces_size(), 1);
  EXPECT_EQ(after.namespaces(0).puts(), before.namespaces(0).puts());
  EXPECT_EQ(after.namespaces(0).hot().blocks() + after.namespaces(0).cold().blocks(),
            before.namespaces(0).hot().blocks() + before.namespaces(0).cold().blocks());
  GetResult old = Get("ns", KeysOf(seqs[0]), v1::PAYLOAD_FORMAT_RAW);
  ASSERT_OK(old.status);
  for (size_t i = 0; i < seqs[0].size(); ++i) EXPECT_EQ(old.payloads[i], seqs[0][i].payload);
  // And the server keeps serving writes.
  ASSERT_OK(Put("ns", v1::PAYLOAD_FORMAT_RAW, fresh));
  EXPECT_EQ(Lookup("ns", KeysOf(fresh)).prefix_blocks(), 3u);
}

TEST_F(KvtierdTest, RestartServesColdBlocks) {
  ASSERT_OK(Register("persist", v1::CODEC_FP16));
  std::map<std::string, std::string> raw;
  auto seqs = MakeSequences(4, 3, kv::CodecId::kFp16, /*raw=*/true, &raw);
  for (const auto& seq : seqs) ASSERT_OK(Put("persist", v1::PAYLOAD_FORMAT_RAW, seq));
  RestartServer();  // SIGTERM flushes the hot tier to RocksDB; exit code checked

  for (const auto& seq : seqs) {
    v1::LookupResponse r = Lookup("persist", KeysOf(seq));
    EXPECT_EQ(r.prefix_blocks(), 3u);
    for (const auto& loc : r.blocks()) EXPECT_EQ(loc.tier(), v1::TIER_COLD);
  }
  for (const auto& seq : seqs) {
    GetResult g = Get("persist", KeysOf(seq), v1::PAYLOAD_FORMAT_RAW);
    ASSERT_OK(g.status);
    for (size_t i = 0; i < seq.size(); ++i) {
      ASSERT_TRUE(g.infos[i].found());
      EXPECT_EQ(g.payloads[i], seq[i].payload);
    }
  }
  // Namespaces registered by RPC survive the restart too.
  v1::RegisterNamespaceResponse reg;
  ASSERT_OK(Register("persist", v1::CODEC_FP16, &reg));
  EXPECT_FALSE(reg.created());
}

TEST_F(KvtierdTest, StatsMatchTheTraffic) {
  ASSERT_OK(Register("st", v1::CODEC_FP16));
  std::map<std::string, std::string> raw;
  auto seqs = MakeSequences(5, 4, kv::CodecId::kFp16, /*raw=*/true, &raw);
  // Sequences 0..4 share 0..4 base blocks; distinct keys: 4 + 4 + 3 + 2 + 1... count them.
  std::set<std::string> distinct;
  int put_blocks = 0;
  for (const auto& seq : seqs) {
    ASSERT_OK(Put("st", v1::PAYLOAD_FORMAT_RAW, seq));
    put_blocks += static_cast<int>(seq.size());
    for (const auto& b : seq) distinct.insert(b.key);
  }
  // Lookups: 2 calls, 4 + 3 keys, 4 + 1 hits, 4 + 1 prefix hits.
  Lookup("st", KeysOf(seqs[0]));
  Lookup("st", {seqs[1][0].key, "nope", seqs[1][2].key});
  // Gets: 3 keys, one miss.
  Get("st", {seqs[2][0].key, seqs[2][1].key, "nope"});

  const v1::StatsResponse s = Stats();
  EXPECT_EQ(s.node_id(), server_->address());
  EXPECT_EQ(s.hash_scheme(), kv::kHashSchemeVersion);
  const v1::NamespaceStats* ns = FindNs(s, "st");
  ASSERT_NE(ns, nullptr);
  EXPECT_EQ(ns->puts(), static_cast<uint64_t>(put_blocks));
  EXPECT_EQ(ns->hot().blocks() + ns->cold().blocks(), distinct.size());
  EXPECT_EQ(ns->lookups(), 2u);
  EXPECT_EQ(ns->lookup_blocks(), 7u);
  EXPECT_EQ(ns->lookup_hit_blocks(), 6u);
  EXPECT_EQ(ns->lookup_prefix_hit_blocks(), 5u);
  EXPECT_DOUBLE_EQ(ns->hit_rate(), 6.0 / 7.0);
  EXPECT_DOUBLE_EQ(ns->prefix_hit_rate(), 5.0 / 7.0);
  EXPECT_EQ(ns->gets(), 3u);
  EXPECT_EQ(ns->get_misses(), 1u);
  EXPECT_EQ(ns->codec(), v1::CODEC_FP16);
  EXPECT_NEAR(ns->compression_ratio(), 1.0, 0.01);
  std::map<std::string, uint64_t> counts;
  for (const auto& h : s.latencies()) counts[h.operation()] = h.count();
  EXPECT_EQ(counts["put"], seqs.size());
  EXPECT_EQ(counts["lookup"], 2u);
  EXPECT_EQ(counts["get"], 1u);
  EXPECT_EQ(counts["register_namespace"], 1u);

  EXPECT_EQ(FindNs(s, "cfg-ns")->codec(), v1::CODEC_INT8);
}

TEST_F(KvtierdTest, PinDeleteEvictAndFlush) {
  ASSERT_OK(Register("adm", v1::CODEC_FP16));
  std::map<std::string, std::string> raw;
  auto seqs = MakeSequences(2, 3, kv::CodecId::kFp16, /*raw=*/true, &raw);
  for (const auto& seq : seqs) ASSERT_OK(Put("adm", v1::PAYLOAD_FORMAT_RAW, seq));

  grpc::ClientContext c1;
  v1::PinRequest pin;
  pin.set_namespace_("adm");
  for (const auto& k : KeysOf(seqs[0])) pin.add_keys(k);
  v1::PinResponse pinned;
  ASSERT_OK(kv_->Pin(&c1, pin, &pinned));
  EXPECT_EQ(pinned.blocks(), 3u);

  grpc::ClientContext c2;
  v1::EvictRequest ev;
  ev.set_namespace_("adm");
  for (const auto& k : KeysOf(seqs[1])) ev.add_keys(k);
  v1::EvictResponse evicted;
  ASSERT_OK(admin_->Evict(&c2, ev, &evicted));
  EXPECT_EQ(evicted.blocks(), 3u);
  v1::LookupResponse r = Lookup("adm", KeysOf(seqs[1]));
  EXPECT_EQ(r.prefix_blocks(), 3u);
  EXPECT_EQ(r.blocks(2).tier(), v1::TIER_COLD);

  grpc::ClientContext c3;
  v1::DeleteRequest del;
  del.set_namespace_("adm");
  del.add_keys(seqs[1][2].key);
  del.add_keys("not-there");
  v1::DeleteResponse deleted;
  ASSERT_OK(kv_->Delete(&c3, del, &deleted));
  EXPECT_EQ(deleted.blocks(), 1u);
  EXPECT_EQ(Lookup("adm", KeysOf(seqs[1])).prefix_blocks(), 2u);
  EXPECT_EQ(Lookup("adm", KeysOf(seqs[0])).prefix_blocks(), 3u);

  grpc::ClientContext c4;
  v1::FlushResponse fr;
  v1::FlushRequest freq;
  ASSERT_OK(admin_->Flush(&c4, freq, &fr));

  grpc::ClientContext c5;
  v1::ReportScoresRequest rs;
  rs.set_namespace_("adm");
  rs.add_keys(seqs[0][0].key);
  v1::ReportScoresResponse rsr;
  ExpectStatus(kv_->ReportScores(&c5, rs, &rsr), grpc::StatusCode::INVALID_ARGUMENT, "scores");

  grpc::ClientContext c6;
  v1::ClusterStatusResponse cs;
  ASSERT_OK(admin_->ClusterStatus(&c6, v1::ClusterStatusRequest(), &cs));
  ASSERT_EQ(cs.peers_size(), 1);
  EXPECT_EQ(cs.peers(0).node_id(), server_->address());
  EXPECT_TRUE(cs.peers(0).healthy());
}

TEST_F(KvtierdTest, ConcurrentStreamsStayIsolated) {
  ASSERT_OK(Register("conc", v1::CODEC_FP16));
  constexpr int kThreads = 4;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 5; ++round) {
        std::vector<Block> seq;
        std::string parent;
        for (int i = 0; i < 3; ++i) {
          std::string key = absl::StrCat("t", t, "-r", round, "-b", i);
          seq.push_back(Block{key, parent, static_cast<uint32_t>(i),
                              RandomRawBlock(t * 1000 + round * 10 + i)});
          parent = key;
        }
        if (!Put("conc", v1::PAYLOAD_FORMAT_RAW, seq, 3000 + 1000 * t).ok()) ++failures;
        GetResult g = Get("conc", KeysOf(seq), v1::PAYLOAD_FORMAT_RAW);
        if (!g.status.ok() || g.payloads.size() != seq.size()) {
          ++failures;
          continue;
        }
        for (size_t i = 0; i < seq.size(); ++i) {
          if (g.payloads[i] != seq[i].payload) ++failures;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  const v1::StatsResponse s = Stats("conc");
  ASSERT_EQ(s.namespaces_size(), 1);
  EXPECT_EQ(s.namespaces(0).puts(), static_cast<uint64_t>(kThreads * 5 * 3));
}

TEST_F(KvtierdTest, PrometheusMetricsReflectTheTraffic) {
  const int metrics_port = testing::PickFreePort();
  auto code = server_->Terminate();
  ASSERT_OK(code);
  auto p = ServerProcess::Start(testing::KvtierdPath(),
                                {"--config", config_path_, "--port", "0", "--data-dir",
                                 dir_.Sub("data"), "--metrics-port", std::to_string(metrics_port)});
  ASSERT_OK(p);
  server_ = std::make_unique<ServerProcess>(std::move(*p));
  channel_ = grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials());
  kv_ = v1::KvCache::NewStub(channel_);
  ASSERT_OK(Register("prom", v1::CODEC_FP16));
  std::map<std::string, std::string> raw;
  auto seqs = MakeSequences(1, 3, kv::CodecId::kFp16, /*raw=*/true, &raw);
  ASSERT_OK(Put("prom", v1::PAYLOAD_FORMAT_RAW, seqs[0]));
  Lookup("prom", {seqs[0][0].key, "nope"});

  const std::string page = testing::HttpGet(metrics_port);
  EXPECT_THAT(page, HasSubstr("200 OK"));
  const std::string labels =
      absl::StrCat("{namespace=\"prom\",tenant=\"default\",node=\"", server_->address(), "\"}");
  EXPECT_THAT(page, HasSubstr("kvtier_put_blocks_total" + labels + " 3"));
  EXPECT_THAT(page, HasSubstr("kvtier_lookup_blocks_total" + labels + " 2"));
  EXPECT_THAT(page, HasSubstr("kvtier_lookup_prefix_hit_blocks_hot_total" + labels + " 1"));
  EXPECT_THAT(page, HasSubstr("kvtier_lookup_prefix_hit_blocks_cold_total" + labels + " 0"));
  EXPECT_THAT(page, HasSubstr("kvtier_lookup_hit_rate{namespace=\"prom\""));
  EXPECT_THAT(page, HasSubstr("kvtier_request_latency_seconds_count{node=\"" + server_->address() +
                              "\",op=\"put\"} 1"));
}

// Runs `kvtierd --check-config path`; returns (exit code, stdout).
std::pair<int, std::string> CheckConfig(const std::string& path) {
  std::string cmd = absl::StrCat(testing::KvtierdPath(), " --check-config ", path, " 2>&1");
  FILE* f = popen(cmd.c_str(), "r");
  std::string out;
  char buf[512];
  while (size_t n = fread(buf, 1, sizeof(buf), f)) out.append(buf, n);
  int status = pclose(f);
  return {WEXITSTATUS(status), out};
}

TEST(KvtierdCheckConfigTest, AcceptsGoodAndRejectsBadConfigs) {
  TempDir dir;
  std::ofstream(dir.Sub("good")) << "port: 7000 hot_capacity_bytes: 67108864\n";
  std::ofstream(dir.Sub("bad")) << "low_watermark: 0.99\n";
  auto good = CheckConfig(dir.Sub("good"));
  EXPECT_EQ(good.first, 0);
  EXPECT_EQ(good.second, "ok\n");
  auto bad = CheckConfig(dir.Sub("bad"));
  EXPECT_EQ(bad.first, 1);
  EXPECT_THAT(bad.second, HasSubstr("low_watermark"));
}

}  // namespace
}  // namespace kvtier
