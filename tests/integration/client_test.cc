// kvtier::client::Client and the `kvtier` CLI against a real kvtierd on 127.0.0.1:0.
#include "client/client.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/prefix_keys.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "kv/codec.h"
#include "tests/integration/sequences.h"
#include "tests/testing/namespace_spec.h"
#include "tests/testing/server_process.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace kvtier::client {
namespace {

namespace v1 = ::kvtier::v1;
using ::testing::HasSubstr;
using testing::BinaryDir;
using testing::ServerProcess;
using testing::StatusIs;
using testing::WaitUntilStopped;
using testing::TempDir;

// 24 layers x 8 heads x 128 x 16 tokens fp16 = 1.5 MiB per block: larger than a chunk.
kv::Layout BigLayout() {
  kv::Layout l;
  l.num_layers = 24;
  return l;
}

v1::NamespaceSpec Spec(const std::string& name, const kv::Layout& layout,
                       v1::Codec codec = v1::CODEC_FP16) {
  return testing::NamespaceSpecOf(name, layout, codec, "", "client-test");
}

class ClientTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    auto server = ServerProcess::StartKvtierd(dir_->Sub("data"));
    ASSERT_OK(server);
    server_ = new ServerProcess(std::move(*server));
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
    delete dir_;
    dir_ = nullptr;
  }

  ClientOptions Options(std::optional<v1::NamespaceSpec> spec = std::nullopt) {
    ClientOptions o;
    o.server = server_->address();
    o.namespace_spec = std::move(spec);
    o.num_channels = 2;
    // These tests cover the gRPC stream framing; shared_memory_test covers the same-node
    // shared-memory path.
    o.shared_memory = false;
    return o;
  }

  std::unique_ptr<Client> MustConnect(ClientOptions o) {
    auto c = Client::Connect(o);
    EXPECT_OK(c);
    return c.ok() ? std::move(*c) : nullptr;
  }

  static TempDir* dir_;
  static ServerProcess* server_;
};

TempDir* ClientTest::dir_ = nullptr;
ServerProcess* ClientTest::server_ = nullptr;

TEST_F(ClientTest, ConnectRegistersNamespaceAndChecksHashScheme) {
  auto c1 = MustConnect(Options(Spec("handshake", BigLayout())));
  ASSERT_NE(c1, nullptr);
  EXPECT_TRUE(c1->connect_info().namespace_created);
  EXPECT_EQ(c1->connect_info().server_hash_scheme, CanonicalHashScheme());
  EXPECT_FALSE(c1->connect_info().node_id.empty());
  auto c2 = MustConnect(Options(Spec("handshake", BigLayout())));
  ASSERT_NE(c2, nullptr);
  EXPECT_FALSE(c2->connect_info().namespace_created);
  EXPECT_EQ(c2->connect_info().stored_spec.layout().num_layers(), 24u);

  auto list = c2->ListNamespaces();
  ASSERT_OK(list);
  bool seen = false;
  for (const auto& s : list->namespaces()) seen |= s.name() == "handshake";
  EXPECT_TRUE(seen);
}

TEST_F(ClientTest, LayoutMismatchFailsAtConnect) {
  ASSERT_NE(MustConnect(Options(Spec("mismatch", BigLayout()))), nullptr);
  kv::Layout other = BigLayout();
  other.num_layers = 32;
  auto c = Client::Connect(Options(Spec("mismatch", other)));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition) << c.status();
  EXPECT_NE(c.status().message().find("num_layers"), std::string::npos) << c.status();

  auto codec = Client::Connect(Options(Spec("mismatch", BigLayout(), v1::CODEC_INT8)));
  EXPECT_EQ(codec.status().code(), absl::StatusCode::kFailedPrecondition) << codec.status();
}

TEST_F(ClientTest, HashSchemeMismatchFailsAtConnect) {
  ClientOptions o = Options(Spec("scheme", BigLayout()));
  o.hash_scheme = "someone-elses-hash-v0";
  auto c = Client::Connect(o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition) << c.status();
}

TEST_F(ClientTest, PutThenGetIsBitExactAcrossChunksAndStreams) {
  const kv::Layout layout = BigLayout();
  ASSERT_GT(layout.BytesPerBlock(), 1u << 20);
  for (int streams : {1, 4}) {
    ClientOptions o = Options(Spec("bitexact", layout));
    o.max_streams_per_call = streams;
    auto client = MustConnect(o);
    ASSERT_NE(client, nullptr);
    Sequence s = MakeSequence("bitexact", layout, 5, 100 + streams);
    auto put = client->PutBlocks("bitexact", s.blocks);
    ASSERT_OK(put);
    EXPECT_EQ(put->blocks_stored, 5u);

    std::vector<std::string> keys = s.keys;
    keys.insert(keys.begin() + 2, std::string(16, 'x'));  // a miss in the middle
    auto got = client->GetBlocks("bitexact", keys);
    ASSERT_OK(got);
    ASSERT_EQ(got->size(), 6u);
    EXPECT_FALSE((*got)[2].info.found());
    for (size_t i = 0, j = 0; i < keys.size(); ++i) {
      if (i == 2) continue;
      ASSERT_TRUE((*got)[i].info.found()) << i;
      EXPECT_EQ((*got)[i].info.block_index(), j);
      EXPECT_TRUE((*got)[i].data == s.encoded[j]) << "block " << j << " differs";
      ++j;
    }

    // Raw format: the server decodes the (lossless fp16) blob back to the source bytes.
    GetOptions raw;
    raw.format = v1::PAYLOAD_FORMAT_RAW;
    auto got_raw = client->GetBlocks("bitexact", std::span(s.keys).subspan(0, 2), raw);
    ASSERT_OK(got_raw);
    EXPECT_TRUE((*got_raw)[0].data == s.raw[0]);
    EXPECT_TRUE((*got_raw)[1].data == s.raw[1]);
  }
}

TEST_F(ClientTest, GetBlocksIntoCallerBuffers) {
  const kv::Layout layout = BigLayout();
  ClientOptions o = Options(Spec("into", layout));
  o.chunk_bytes = 300 * 1024;  // chunks that straddle block boundaries
  o.max_streams_per_call = 2;
  auto client = MustConnect(o);
  ASSERT_NE(client, nullptr);
  Sequence s = MakeSequence("into", layout, 3, 7);
  ASSERT_OK(client->PutBlocks("into", s.blocks));

  std::vector<std::string> storage(3, std::string(s.encoded[0].size() + 100, '\x5a'));
  std::vector<std::span<uint8_t>> bufs;
  for (auto& b : storage) bufs.emplace_back(reinterpret_cast<uint8_t*>(b.data()), b.size());
  auto infos = client->GetBlocksInto("into", s.keys, bufs);
  ASSERT_OK(infos);
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_TRUE((*infos)[i].found());
    ASSERT_EQ((*infos)[i].size(), s.encoded[i].size());
    EXPECT_TRUE(storage[i].compare(0, s.encoded[i].size(), s.encoded[i]) == 0) << i;
    // Nothing written past the block.
    EXPECT_EQ(storage[i].substr(s.encoded[i].size()), std::string(100, '\x5a'));
  }

  // A buffer too small is reported, naming it.
  std::string small(1000, 0);
  std::vector<std::span<uint8_t>> one = {
      std::span<uint8_t>(reinterpret_cast<uint8_t*>(small.data()), small.size())};
  auto too_small = client->GetBlocksInto("into", std::span(s.keys).subspan(0, 1), one);
  EXPECT_EQ(too_small.status().code(), absl::StatusCode::kOutOfRange) << too_small.status();
  // Mismatched counts.
  EXPECT_EQ(client->GetBlocksInto("into", s.keys, one).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(ClientTest, LargeGetGoesAsPipelinedPiecesWithTheSameAnswer) {
  const kv::Layout layout = BigLayout();  // 1.5 MiB blocks
  ClientOptions o = Options(Spec("pieces", layout));
  o.max_streams_per_call = 1;
  o.get_piece_bytes = 2 * (1536 * 1024 + 4096);  // pieces of two keys, the last of one
  auto client = MustConnect(o);
  ASSERT_NE(client, nullptr);
  Sequence s = MakeSequence("pieces", layout, 7, 11);
  // Key 3 is never stored: a miss in the middle piece, the others found.
  std::vector<PutBlock> stored;
  for (size_t i = 0; i < s.blocks.size(); ++i) {
    if (i != 3) stored.push_back(s.blocks[i]);
  }
  ASSERT_OK(client->PutBlocks("pieces", stored));

  std::vector<std::string> storage(7, std::string(s.encoded[0].size() + 4096, '\x5a'));
  std::vector<std::span<uint8_t>> bufs;
  for (auto& b : storage) bufs.emplace_back(reinterpret_cast<uint8_t*>(b.data()), b.size());
  // Leased: the lease is released once, after the last piece.
  LookupOptions leased;
  leased.lease_ms = 60000;
  auto held = client->Lookup("pieces", s.keys, leased);
  ASSERT_OK(held);
  ASSERT_EQ(held->leased_blocks(), 3u);
  auto before = client->Stats();
  ASSERT_OK(before);
  ASSERT_GE(before->leases().active(), 1u);
  GetOptions get;
  get.lease_id = held->blocks(0).lease_id();
  auto infos = client->GetBlocksInto("pieces", s.keys, bufs, get);
  ASSERT_OK(infos);
  ASSERT_EQ(infos->size(), 7u);
  for (size_t i = 0; i < 7; ++i) {
    EXPECT_EQ((*infos)[i].key(), s.keys[i]) << i;
    if (i == 3) {
      EXPECT_FALSE((*infos)[i].found());
      EXPECT_EQ(storage[i], std::string(s.encoded[0].size() + 4096, '\x5a'));
      continue;
    }
    ASSERT_TRUE((*infos)[i].found()) << i;
    ASSERT_EQ((*infos)[i].size(), s.encoded[i].size());
    EXPECT_TRUE(storage[i].compare(0, s.encoded[i].size(), s.encoded[i]) == 0) << i;
  }
  auto after = client->Stats();
  ASSERT_OK(after);
  EXPECT_EQ(after->leases().active(), before->leases().active() - 1);

  // The same Get in one call answers the same.
  o.get_piece_bytes = 0;
  auto whole = MustConnect(o);
  ASSERT_NE(whole, nullptr);
  std::vector<std::string> storage2(7, std::string(s.encoded[0].size() + 4096, '\x5a'));
  std::vector<std::span<uint8_t>> bufs2;
  for (auto& b : storage2) bufs2.emplace_back(reinterpret_cast<uint8_t*>(b.data()), b.size());
  auto infos2 = whole->GetBlocksInto("pieces", s.keys, bufs2);
  ASSERT_OK(infos2);
  for (size_t i = 0; i < 7; ++i) {
    EXPECT_EQ((*infos2)[i].found(), (*infos)[i].found()) << i;
    EXPECT_EQ(storage2[i], storage[i]) << i;
  }

  // A piece that fails fails the call: a buffer too small for key 5 (in the third piece).
  std::string small(1000, 0);
  bufs[5] = std::span<uint8_t>(reinterpret_cast<uint8_t*>(small.data()), small.size());
  auto failed = client->GetBlocksInto("pieces", s.keys, bufs);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kOutOfRange) << failed.status();
}

TEST_F(ClientTest, LookupReportsTheResidentPrefix) {
  const kv::Layout layout = BigLayout();
  auto client = MustConnect(Options(Spec("lookup", layout)));
  ASSERT_NE(client, nullptr);
  Sequence s = MakeSequence("lookup", layout, 5, 9);
  ASSERT_OK(client->PutBlocks("lookup", std::span(s.blocks).subspan(0, 3)));
  auto r = client->Lookup("lookup", s.keys);
  ASSERT_OK(r);
  EXPECT_EQ(r->prefix_blocks(), 3u);
  ASSERT_EQ(r->blocks_size(), 5);
  for (int i = 0; i < 3; ++i) EXPECT_NE(r->blocks(i).tier(), v1::TIER_NONE) << i;
  for (int i = 3; i < 5; ++i) EXPECT_EQ(r->blocks(i).tier(), v1::TIER_NONE) << i;

  auto stats = client->Stats("lookup");
  ASSERT_OK(stats);
  ASSERT_EQ(stats->namespaces_size(), 1);
  EXPECT_EQ(stats->namespaces(0).hot().blocks() + stats->namespaces(0).cold().blocks(), 3u);
  EXPECT_EQ(stats->namespaces(0).lookup_prefix_hit_blocks(), 3u);

  // Unknown namespace: NOT_FOUND, not retried into a timeout.
  EXPECT_EQ(client->Lookup("no-such-namespace", s.keys).status().code(),
            absl::StatusCode::kNotFound);

  // The same keys as views (the Python binding's form): the same answer, both forms.
  const std::vector<std::string_view> views(s.keys.begin(), s.keys.end());
  for (bool compact : {false, true}) {
    client::LookupOptions options;
    options.keep_compact = compact;
    auto by_view = client->Lookup("lookup", views, options);
    auto by_string = client->Lookup("lookup", s.keys, options);
    ASSERT_OK(by_view);
    ASSERT_OK(by_string);
    EXPECT_EQ(by_view->SerializeAsString(), by_string->SerializeAsString()) << compact;
    EXPECT_EQ(by_view->prefix_blocks(), 3u);
  }
}

TEST_F(ClientTest, PinScoresEvictDeleteFlush) {
  const kv::Layout layout = BigLayout();
  auto client = MustConnect(Options(Spec("admin", layout)));
  ASSERT_NE(client, nullptr);
  Sequence s = MakeSequence("admin", layout, 4, 11);
  ASSERT_OK(client->PutBlocks("admin", s.blocks));

  auto pinned = client->Pin("admin", std::span(s.keys).subspan(0, 1), 60000);
  ASSERT_OK(pinned);
  EXPECT_EQ(*pinned, 1u);
  auto unpinned = client->Unpin("admin", std::span(s.keys).subspan(0, 1));
  ASSERT_OK(unpinned);
  EXPECT_EQ(*unpinned, 1u);

  const std::vector<float> scores = {0.5f, 0.25f, 0.125f, 0.125f};
  EXPECT_OK(client->ReportScores("admin", s.keys, scores));
  EXPECT_EQ(client->ReportScores("admin", s.keys, std::span(scores).subspan(0, 2)).code(),
            absl::StatusCode::kInvalidArgument);

  EXPECT_OK(client->Flush("admin"));
  // Drop the leaf, delete its parent: the resident prefix shrinks to 2 blocks.
  auto dropped = client->Evict("admin", std::span(s.keys).subspan(3, 1), /*drop=*/true);
  ASSERT_OK(dropped);
  EXPECT_EQ(*dropped, 1u);
  auto deleted = client->Delete("admin", std::span(s.keys).subspan(2, 1));
  ASSERT_OK(deleted);
  EXPECT_EQ(*deleted, 1u);
  auto r = client->Lookup("admin", s.keys);
  ASSERT_OK(r);
  EXPECT_EQ(r->prefix_blocks(), 2u);
  auto got = client->GetBlocks("admin", std::span(s.keys).subspan(2, 2));
  ASSERT_OK(got);
  EXPECT_FALSE((*got)[0].info.found());
  EXPECT_FALSE((*got)[1].info.found());
}

TEST_F(ClientTest, UnaryRawCallsAMethodByNameWithSerializedMessages) {
  auto client = MustConnect(Options(Spec("raw", BigLayout())));
  ASSERT_NE(client, nullptr);
  v1::StatsRequest req;
  req.set_namespace_("raw");
  auto bytes = client->UnaryRaw("/kvtier.v1.KvCacheAdmin/Stats", req.SerializeAsString(),
                                /*idempotent=*/true);
  ASSERT_OK(bytes);
  v1::StatsResponse resp;
  ASSERT_TRUE(resp.ParseFromString(*bytes));
  ASSERT_EQ(resp.namespaces_size(), 1);
  EXPECT_EQ(resp.namespaces(0).name(), "raw");
  // The server's status, prefixed with the method's short name as the typed calls are.
  req.set_namespace_("no-such-namespace");
  EXPECT_THAT(client->UnaryRaw("/kvtier.v1.KvCacheAdmin/Stats", req.SerializeAsString(), true),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("Stats: namespace")));
  // Only the two kvtier services.
  EXPECT_THAT(client->UnaryRaw("/grpc.health.v1.Health/Check", "", true),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("Health/Check")));
  EXPECT_THAT(client->UnaryRaw("/kvtier.v1.KvCache/", "", true),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(ClientTest, CompactStoresAnEntryFetchedLikeABlock) {
  kv::Layout layout;
  layout.num_layers = 2;
  layout.num_kv_heads = 2;
  layout.head_dim = 32;
  auto client = MustConnect(Options(Spec("compact", layout, v1::CODEC_INT8)));
  ASSERT_NE(client, nullptr);
  Sequence s = MakeSequence("compact", layout, 4, 21);  // 64 tokens
  ASSERT_OK(client->PutBlocks("compact", s.blocks));

  v1::CompactRequest req;
  req.set_namespace_("compact");
  for (const auto& k : s.keys) req.add_keys(k);
  req.mutable_sink_window()->set_n_sink(4);
  req.mutable_sink_window()->set_window(12);
  auto resp = client->Compact(req);
  ASSERT_OK(resp);
  EXPECT_EQ(resp->source_tokens(), 64u);
  ASSERT_EQ(resp->kept_tokens(), 16u);

  auto got = client->GetBlocks("compact", std::vector<std::string>{resp->entry_key()});
  ASSERT_OK(got);
  ASSERT_TRUE((*got)[0].info.found());
  const auto& pos = (*got)[0].info.positions();
  ASSERT_EQ(pos.size(), 16);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(pos[i], static_cast<uint32_t>(i));   // sinks
  for (int i = 4; i < 16; ++i) EXPECT_EQ(pos[i], static_cast<uint32_t>(48 + i));  // window

  req.mutable_sink_window()->set_window(0);
  req.mutable_sink_window()->set_n_sink(0);
  req.clear_keys();
  EXPECT_EQ(client->Compact(req).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ClientTest, FailedPutReportsTheServerErrorAndReleasesPayloads) {
  const kv::Layout layout = BigLayout();
  auto client = MustConnect(Options(Spec("failing", layout)));
  ASSERT_NE(client, nullptr);
  Sequence s = MakeSequence("failing", layout, 3, 5);
  // The server rejects the stream after the header, while megabytes are still queued.
  auto put = client->PutBlocks("no-such-namespace", s.blocks);
  EXPECT_EQ(put.status().code(), absl::StatusCode::kNotFound) << put.status();
  // A payload that is not an encoded blob of this layout.
  std::string junk(s.encoded[0].size(), '\x01');
  PutBlock bad = s.blocks[0];
  bad.payload = kv::AsBytes(junk);
  auto put_bad = client->PutBlocks("failing", std::span(&bad, 1));
  EXPECT_EQ(put_bad.status().code(), absl::StatusCode::kInvalidArgument) << put_bad.status();
  // The client still works afterwards.
  EXPECT_OK(client->PutBlocks("failing", s.blocks));
}

TEST_F(ClientTest, RejectsBadOptions) {
  ClientOptions o = Options();
  o.num_channels = 0;
  EXPECT_EQ(Client::Connect(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = Options();
  o.server = "";
  EXPECT_EQ(Client::Connect(o).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ClientTest, UnreachableServerFailsQuickly) {
  // A socket that accepts TCP connections (backlog) but never speaks HTTP/2.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 16), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  ClientOptions o;
  o.server = absl::StrCat("127.0.0.1:", ntohs(addr.sin_port));
  o.connect_deadline_ms = 300;
  o.namespace_spec = Spec("silent", BigLayout());
  const auto t0 = std::chrono::steady_clock::now();
  auto c = Client::Connect(o);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  close(fd);
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(c.status().code() == absl::StatusCode::kDeadlineExceeded ||
              c.status().code() == absl::StatusCode::kUnavailable)
      << c.status();
  EXPECT_LT(s, 3.0);
}

TEST_F(ClientTest, SlowServerHitsTheCallDeadline) {
  auto client = MustConnect(Options(Spec("slow", BigLayout())));
  ASSERT_NE(client, nullptr);
  // Freeze the server: calls must give up at their deadline, not hang.
  ASSERT_EQ(kill(server_->pid(), SIGSTOP), 0);
  ASSERT_TRUE(WaitUntilStopped(server_->pid()));
  const auto t0 = std::chrono::steady_clock::now();
  auto r = client->Lookup("slow", std::vector<std::string>{std::string(16, 'a')}, false,
                          CallOptions{.deadline_ms = 200});
  auto st = client->Stats("", CallOptions{.deadline_ms = 200});
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(kill(server_->pid(), SIGCONT), 0);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
  EXPECT_EQ(st.status().code(), absl::StatusCode::kDeadlineExceeded) << st.status();
  EXPECT_LT(s, 3.0);
  // And it recovers.
  EXPECT_OK(client->Stats());
}

// Runs the CLI and returns its stdout; exit code in *rc.
std::string RunCli(const std::string& args, int* rc) {
  const std::string cmd = absl::StrCat(BinaryDir(), "/client/cli/kvtier ", args, " 2>/dev/null");
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  if (p == nullptr) {
    *rc = -1;
    return out;
  }
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  *rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

TEST_F(ClientTest, CliSmoke) {
  const std::string server = absl::StrCat("--server ", server_->address());
  int rc;
  std::string out = RunCli(absl::StrCat("put ", server,
                                        " --namespace cli --layout 2x2x64x16 --codec int8"
                                        " --generate 4 --seed 3 --json"),
                           &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("\"blocks_stored\":4"), std::string::npos) << out;
  out = RunCli(absl::StrCat("lookup ", server, " --namespace cli --generate 6 --seed 3 --json"),
               &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("\"prefix_blocks\":4"), std::string::npos) << out;

  out = RunCli(absl::StrCat("stats ", server, " --json"), &rc);
  ASSERT_EQ(rc, 0) << out;
  v1::StatsResponse stats;
  ASSERT_OK(google::protobuf::util::JsonStringToMessage(out, &stats)) << out;
  EXPECT_FALSE(stats.node_id().empty());
  bool seen = false;
  for (const auto& ns : stats.namespaces()) {
    if (ns.name() == "cli") {
      seen = true;
      EXPECT_EQ(ns.codec(), v1::CODEC_INT8);
      EXPECT_EQ(ns.hot().blocks() + ns.cold().blocks(), 4u);
    }
  }
  EXPECT_TRUE(seen) << out;

  // Usage errors exit 2; an unreachable server exits 1.
  RunCli("stats --no-such-flag", &rc);
  EXPECT_EQ(rc, 2);
  RunCli("stats --server 127.0.0.1:1 --timeout-ms 200", &rc);
  EXPECT_EQ(rc, 1);
}

}  // namespace
}  // namespace kvtier::client
