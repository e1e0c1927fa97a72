// Cold-tier recovery through real kvtierd processes (docs/recovery.md, issue 33): 64
// blocks put write-through, kvtierd stopped (SIGKILL or SIGTERM), its RocksDB index
// damaged on disk (WAL bytes flipped, the database deleted, an SST or MANIFEST byte
// flipped), kvtierd restarted: all 64 come back bit-exact. A damaged slab extent costs
// exactly its block. The admin RPC Recover (and the client's Recover) finds and brings
// back index records a restart did not notice were lost, with its argument checks and
// operator-only auth.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "kvtier/v1/kvtier.grpc.pb.h"
#include "storage/slab_file.h"
#include "storage/slab_scan.h"
#include "tests/integration/sequences.h"
#include "tests/testing/cold_damage.h"
#include "tests/testing/namespace_spec.h"
#include "tests/testing/server_process.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace kvtier::client {
namespace {

namespace fs = std::filesystem;
using testing::ServerProcess;
using testing::TempDir;

constexpr uint32_t kBlocks = 64;
constexpr char kNs[] = "rec";

// 8 KiB fp16 blocks: 1 layer x 4 heads x 4 tokens x 128.
kv::Layout Layout() {
  kv::Layout l;
  l.num_layers = 1;
  l.num_kv_heads = 4;
  l.head_dim = 128;
  l.tokens_per_block = 4;
  l.sink_tokens = 0;
  return l;
}

std::vector<std::string> Args() { return {"--shm-socket", "off", "--executor-threads", "2"}; }

std::unique_ptr<Client> Connect(const std::string& address, bool with_spec = true,
                                const std::string& token = "") {
  ClientOptions o;
  o.server = address;
  if (with_spec) {
    v1::NamespaceSpec spec = testing::NamespaceSpecOf(kNs, Layout());
    spec.set_write_through(true);  // acknowledged = in the cold tier
    o.namespace_spec = spec;
  }
  o.num_channels = 1;
  o.shared_memory = false;
  o.auth_token = token;
  auto c = Client::Connect(o);
  EXPECT_OK(c);
  return c.ok() ? std::move(*c) : nullptr;
}

enum class Stop { kSigkill, kSigterm };

// A data directory holding the 64 blocks, kvtierd stopped as asked.
class RecoveryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data_ = dir_.Sub("data");
    seq_ = MakeSequence(kNs, Layout(), kBlocks, 33);
  }

  void PutAndStop(Stop stop) {
    auto server = ServerProcess::StartKvtierd(data_, Args());
    ASSERT_OK(server);
    auto client = Connect(server->address());
    ASSERT_NE(client, nullptr);
    auto put = client->PutBlocks(kNs, seq_.blocks);
    ASSERT_OK(put);
    client.reset();
    if (stop == Stop::kSigkill) {
      server->Kill();
    } else {
      auto code = server->Terminate();
      ASSERT_OK(code);
      ASSERT_EQ(*code, 0);
    }
  }

  // Restarts kvtierd (extra flags appended) and checks every block: those in `lost` are
  // misses, every other one bit-exact. Returns the running server.
  std::optional<ServerProcess> RestartAndCheck(const std::set<uint32_t>& lost,
                                               const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = Args();
    args.insert(args.end(), extra.begin(), extra.end());
    auto server = ServerProcess::StartKvtierd(data_, args);
    EXPECT_OK(server);
    if (!server.ok()) return std::nullopt;
    ExpectBlocks(server->address(), lost);
    return std::move(*server);
  }

  void ExpectBlocks(const std::string& address, const std::set<uint32_t>& lost) {
    auto client = Connect(address, /*with_spec=*/false);
    ASSERT_NE(client, nullptr);
    auto got = client->GetBlocks(kNs, seq_.keys);
    ASSERT_OK(got);
    ASSERT_EQ(got->size(), kBlocks);
    uint32_t served = 0;
    for (uint32_t i = 0; i < kBlocks; ++i) {
      if (lost.contains(i)) {
        EXPECT_FALSE((*got)[i].info.found()) << "block " << i << " should be lost";
        continue;
      }
      ASSERT_TRUE((*got)[i].info.found()) << "block " << i;
      ASSERT_EQ((*got)[i].data, seq_.encoded[i]) << "block " << i << ": wrong bytes";
      ++served;
    }
    EXPECT_EQ(served, kBlocks - lost.size());
  }

  // The RocksDB files of the data directory whose names start with `prefix` ("" = all,
  // ".log" / ".sst" by extension).
  std::vector<std::string> DbFiles(const std::string& kind) const {
    std::vector<std::string> out;
    for (const auto& f : fs::directory_iterator(data_)) {
      const std::string name = f.path().filename().string();
      if (!f.is_regular_file() || fs::file_size(f.path()) == 0 || name.rfind("cold.", 0) == 0) {
        continue;
      }
      if (f.path().extension() == kind || name.rfind(kind, 0) == 0) out.push_back(f.path());
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  static void FlipBytes(const std::string& path, int n, uint64_t seed) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good()) << path;
    const uint64_t size = fs::file_size(path);
    std::mt19937_64 rng(seed);
    for (int i = 0; i < n; ++i) {
      const uint64_t at = rng() % size;
      f.seekg(static_cast<std::streamoff>(at));
      char c = 0;
      f.read(&c, 1);
      c = static_cast<char>(c ^ (1 + rng() % 255));
      f.seekp(static_cast<std::streamoff>(at));
      f.write(&c, 1);
    }
    ASSERT_TRUE(f.good()) << path;
  }

  static void FlipByteAt(const std::string& path, uint64_t at) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good()) << path;
    f.seekg(static_cast<std::streamoff>(at));
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x5a);
    f.seekp(static_cast<std::streamoff>(at));
    f.write(&c, 1);
    ASSERT_TRUE(f.good()) << path;
  }

  // Where block i's extent lies in cold.slab.
  uint64_t ExtentOf(uint32_t i) const {
    auto slab = storage::SlabFile::Open(data_ + "/cold.slab", 0);
    EXPECT_OK(slab);
    auto scan = storage::ScanSlab(**slab);
    EXPECT_OK(scan);
    for (const storage::ScannedExtent& e : scan->extents) {
      if (e.header.record.key == seq_.keys[i]) return e.offset;
    }
    ADD_FAILURE() << "no extent for block " << i;
    return 0;
  }

  TempDir dir_;
  std::string data_;
  Sequence seq_;
};

TEST_F(RecoveryTest, SigkillThenFortyWalBytesFlippedLosesNoBlock) {
  PutAndStop(Stop::kSigkill);
  const auto wals = DbFiles(".log");
  ASSERT_FALSE(wals.empty()) << "no write-ahead log after SIGKILL";
  FlipBytes(wals.back(), 40, 1);
  RestartAndCheck({});
}

TEST_F(RecoveryTest, CleanStopThenDatabaseDeletedLosesNoBlock) {
  PutAndStop(Stop::kSigterm);
  for (const auto& f : fs::directory_iterator(data_)) {
    const std::string name = f.path().filename().string();
    if (name != "cold.slab" && name != "cold.meta") fs::remove_all(f.path());
  }
  RestartAndCheck({});
}

TEST_F(RecoveryTest, SigkillThenDatabaseDeletedLosesNoBlock) {
  PutAndStop(Stop::kSigkill);
  for (const auto& f : fs::directory_iterator(data_)) {
    const std::string name = f.path().filename().string();
    if (name != "cold.slab" && name != "cold.meta") fs::remove_all(f.path());
  }
  RestartAndCheck({});
}

TEST_F(RecoveryTest, FlippedSstOrManifestByteLosesNoBlockAndKeepsTheDamagedFilesAside) {
  PutAndStop(Stop::kSigterm);
  // A restart flushes the recovered log into a table file; stop cleanly again.
  {
    auto server = RestartAndCheck({});
    ASSERT_TRUE(server.has_value());
    ASSERT_EQ(*server->Terminate(), 0);
  }
  const auto ssts = DbFiles(".sst");
  ASSERT_FALSE(ssts.empty()) << "no table file";
  FlipByteAt(ssts.front(), 10);  // inside the first data block: its checksum fails
  auto server = RestartAndCheck({});
  ASSERT_TRUE(server.has_value());
  ASSERT_EQ(*server->Terminate(), 0);
  int aside = 0;
  for (const auto& f : fs::directory_iterator(data_)) {
    if (f.path().filename().string().rfind("damaged-db-", 0) == 0) ++aside;
  }
  EXPECT_EQ(aside, 1) << "the damaged database is kept for the operator";

  const auto manifests = DbFiles("MANIFEST");
  ASSERT_FALSE(manifests.empty());
  FlipBytes(manifests.back(), 1, 3);
  RestartAndCheck({});
}

TEST_F(RecoveryTest, DamagedSlabExtentCostsExactlyItsBlock) {
  PutAndStop(Stop::kSigterm);
  const uint64_t at = ExtentOf(17);
  FlipByteAt(data_ + "/cold.slab", at + 1000);  // a payload byte, past the header and keys
  {
    auto server = RestartAndCheck({17});
    ASSERT_TRUE(server.has_value());
    ASSERT_EQ(*server->Terminate(), 0);
  }
  // And through a rebuild from the slab (kvtierd --recover): the same one block.
  RestartAndCheck({17}, {"--recover"});
}

TEST_F(RecoveryTest, AdminRecoverBringsBackRecordsARestartDidNotMiss) {
  PutAndStop(Stop::kSigkill);
  const std::set<uint32_t> lost = {50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63};
  std::vector<std::string> keys;
  for (uint32_t i : lost) keys.push_back(seq_.keys[i]);
  ::kvtier::testing::LoseRecordsSilently(data_, 0, keys);
  auto server = RestartAndCheck(lost);
  ASSERT_TRUE(server.has_value());
  auto client = Connect(server->address(), /*with_spec=*/false);
  ASSERT_NE(client, nullptr);

  auto verify = client->Recover(/*verify=*/true);
  ASSERT_OK(verify);
  EXPECT_FALSE(verify->rebuilt());
  EXPECT_EQ(verify->extents_scanned(), kBlocks);
  EXPECT_EQ(verify->records_verified(), kBlocks - lost.size());
  EXPECT_EQ(verify->records_recreated(), lost.size());
  EXPECT_GE(verify->scan_bytes(), kBlocks * seq_.encoded[0].size());
  ExpectBlocks(server->address(), lost);  // verify changed nothing

  auto rebuild = client->Recover(/*verify=*/false);
  ASSERT_OK(rebuild);
  EXPECT_TRUE(rebuild->rebuilt());
  EXPECT_EQ(rebuild->records_recreated(), lost.size());
  EXPECT_EQ(rebuild->damaged_extents() + rebuild->damaged_records(), 0u);
  ExpectBlocks(server->address(), {});
  // The blocks are in the index again: Lookup sees the whole chain.
  auto lookup = client->Lookup(kNs, seq_.keys);
  ASSERT_OK(lookup);
  EXPECT_EQ(lookup->prefix_blocks(), kBlocks);

  // Unset or unknown mode: INVALID_ARGUMENT naming the field.
  auto channel = grpc::CreateChannel(server->address(), grpc::InsecureChannelCredentials());
  auto stub = v1::KvCacheAdmin::NewStub(channel);
  for (int mode : {0, 7}) {
    grpc::ClientContext ctx;
    v1::RecoverRequest req;
    req.set_mode(static_cast<v1::RecoverRequest::Mode>(mode));
    v1::RecoverResponse resp;
    grpc::Status s = stub->Recover(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << mode;
    EXPECT_NE(s.error_message().find("mode"), std::string::npos) << s.error_message();
  }
  ASSERT_EQ(*server->Terminate(), 0);
  // After a clean stop the blocks are still all there.
  RestartAndCheck({});
}

TEST_F(RecoveryTest, AdminRecoverNeedsAnOperator) {
  // token-a (tests/integration/auth_test.cc) is a tenant, not an operator.
  std::ofstream(dir_.Sub("auth.textproto"))
      << "tenants { tenant: \"team-a\" token_sha256: "
         "\"a70bf50e531ce1a817561f2f5d5b6645d4e806becf58ccc5e8cf6b8045a090a8\" }\n";
  std::vector<std::string> args = Args();
  args.insert(args.end(), {"--config", dir_.Sub("auth.textproto")});
  auto server = ServerProcess::StartKvtierd(data_, args);
  ASSERT_OK(server);
  auto client = Connect(server->address(), /*with_spec=*/false, "token-a");
  ASSERT_NE(client, nullptr);
  auto r = client->Recover(/*verify=*/true);
  EXPECT_TRUE(absl::IsPermissionDenied(r.status())) << r.status();
}

}  // namespace
}  // namespace kvtier::client
