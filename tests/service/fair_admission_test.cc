// Fair admission across tenants (service/put_budget.h): an in-process kvtierd with two
// bearer-token tenants, one flooding Put streams that hold their payload while the
// other's Put goes through.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvtier/v1/kvtier.grpc.pb.h"
#include "protocol/convert.h"
#include "service/config.h"
#include "service/server.h"
#include "tests/testing/layouts.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace kvtier::service {
namespace {

using ::testing::HasSubstr;

// token-a / token-b and their SHA-256 (as in tests/integration/auth_test.cc).
constexpr char kShaA[] = "a70bf50e531ce1a817561f2f5d5b6645d4e806becf58ccc5e8cf6b8045a090a8";
constexpr char kShaB[] = "49e2bb7eab54cf09b409ffafd3fa8a8a955a60eb972faacaefbed3dbd3207132";

constexpr uint64_t kBudget = 64u << 20;  // memory_quota_bytes, the Put budget
constexpr uint64_t kMaxPut = 16u << 20;  // max_put_bytes
const uint64_t kBlock = testing::SmallLayout().BytesPerBlock();  // 32 KiB

class FairAdmissionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto cl = ParseCommandLine({"--port", "0", "--data-dir", dir_.Sub("data"), "--hot-capacity",
                                "64MiB", "--executor-threads", "2", "--max-message-bytes",
                                "64KiB", "--shm-socket", "off"});
    ASSERT_OK(cl);
    v1::ServerConfig config = cl->config;
    config.set_memory_quota_bytes(kBudget);
    config.set_max_put_bytes(kMaxPut);
    config.set_put_progress_timeout_ms(60000);  // the stalled streams are cancelled instead
    auto* a = config.add_tenants();
    a->set_tenant("team-a");
    a->set_token_sha256(kShaA);
    auto* b = config.add_tenants();
    b->set_tenant("team-b");
    b->set_token_sha256(kShaB);
    ASSERT_OK(ValidateConfig(config));
    auto server = KvtierServer::Start(config);
    ASSERT_OK(server);
    server_ = *std::move(server);
    ASSERT_OK(server_->OpenStore());
    stub_ = v1::KvCache::NewStub(
        grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials()));
    for (const char* t : {"a", "b"}) {
      v1::RegisterNamespaceRequest req;
      req.mutable_spec()->set_name(absl::StrCat(t, "-ns"));
      *req.mutable_spec()->mutable_layout() = protocol::ToProto(testing::SmallLayout());
      v1::RegisterNamespaceResponse resp;
      grpc::ClientContext ctx;
      Authorize(&ctx, t);
      const grpc::Status s = stub_->RegisterNamespace(&ctx, req, &resp);
      ASSERT_OK(s);
    }
  }

  static void Authorize(grpc::ClientContext* ctx, const std::string& tenant) {
    ctx->AddMetadata("authorization", absl::StrCat("Bearer token-", tenant));
  }

  // The messages of a raw Put of `n` blocks (one chain, keys "<prefix>-<i>") into
  // "<tenant>-ns": the header, then one chunk message per block.
  static std::vector<v1::PutRequest> PutMessages(const std::string& tenant,
                                                 const std::string& prefix, size_t n) {
    std::vector<v1::PutRequest> out(1);
    v1::PutHeader* h = out[0].mutable_header();
    h->set_namespace_(absl::StrCat(tenant, "-ns"));
    h->set_format(v1::PAYLOAD_FORMAT_RAW);
    for (size_t i = 0; i < n; ++i) {
      v1::PutBlock* b = h->add_blocks();
      b->set_key(absl::StrCat(prefix, "-", i));
      if (i > 0) b->set_parent_key(absl::StrCat(prefix, "-", i - 1));
      b->set_block_index(static_cast<uint32_t>(i));
      b->set_size(kBlock);
      out.emplace_back().set_chunk(std::string(kBlock, static_cast<char>('a' + i % 26)));
    }
    return out;
  }

  // A Put stream that sent `sent` of the `declared` blocks of its header, then waits.
  struct Stalled {
    grpc::ClientContext ctx;
    v1::PutResponse resp;
    std::unique_ptr<grpc::ClientWriter<v1::PutRequest>> writer;
    std::vector<v1::PutRequest> messages;
    size_t next = 0;  // next message to write
  };
  std::unique_ptr<Stalled> Open(const std::string& tenant, const std::string& prefix,
                                size_t declared, size_t sent) {
    auto stream = std::make_unique<Stalled>();
    Authorize(&stream->ctx, tenant);
    stream->writer = stub_->Put(&stream->ctx, &stream->resp);
    stream->messages = PutMessages(tenant, prefix, declared);
    Send(stream.get(), sent);
    return stream;
  }
  // Writes the header (if not yet) and `blocks` more chunks; false once the server ended
  // the stream.
  static bool Send(Stalled* stream, size_t blocks) {
    const size_t header = stream->next == 0 ? 1 : 0;
    const size_t until = std::min(stream->messages.size(), stream->next + blocks + header);
    for (; stream->next < until; ++stream->next) {
      if (!stream->writer->Write(stream->messages[stream->next])) return false;
    }
    return true;
  }
  // Waits until the server has charged exactly `bytes` to the Put budget (the writes
  // above may still be in flight). False after 20 s.
  bool WaitBuffered(uint64_t bytes) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (server_->context().put_budget.bytes_in_flight() != bytes) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::yield();
    }
    return true;
  }

  kvtier::testing::TempDir dir_;
  std::unique_ptr<KvtierServer> server_;
  std::unique_ptr<v1::KvCache::Stub> stub_;
};

TEST_F(FairAdmissionTest, AFloodingTenantIsHeldToItsShareWhileAnotherPutsAndMayUseAllAlone) {
  // b is putting: its stream holds one block.
  auto b = Open("b", "b", /*declared=*/8, /*sent=*/1);
  ASSERT_TRUE(WaitBuffered(kBlock));
  // a floods: two streams of 14 MiB (28 MiB, under its share of 64 / 2 = 32 MiB)...
  const size_t per_stream = (14u << 20) / kBlock;
  auto a1 = Open("a", "a1", per_stream + 1, per_stream);
  auto a2 = Open("a", "a2", per_stream + 1, per_stream);
  ASSERT_TRUE(WaitBuffered(kBlock + 2 * per_stream * kBlock));
  // ... and a third that would take it past its share is refused, although the budget
  // (64 MiB) has room: without fair admission it would be admitted.
  auto a3 = Open("a", "a3", (6u << 20) / kBlock, (6u << 20) / kBlock);
  const grpc::Status refused = a3->writer->Finish();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << refused.error_message();
  EXPECT_THAT(refused.error_message(), HasSubstr("tenant 'team-a'"));
  EXPECT_THAT(refused.error_message(), HasSubstr("its share"));
  // b's put completes.
  ASSERT_TRUE(Send(b.get(), 7));
  b->writer->WritesDone();
  const grpc::Status b_done = b->writer->Finish();
  EXPECT_OK(b_done);
  EXPECT_EQ(b->resp.blocks_stored(), 8u);
  // Alone again, a may take more than half of the budget.
  ASSERT_TRUE(WaitBuffered(2 * per_stream * kBlock));
  auto a4 = Open("a", "a4", (10u << 20) / kBlock + 1, (10u << 20) / kBlock);
  ASSERT_TRUE(WaitBuffered(2 * per_stream * kBlock + (10u << 20)));
  for (Stalled* s : {a1.get(), a2.get(), a4.get()}) {
    s->ctx.TryCancel();
    EXPECT_EQ(s->writer->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  EXPECT_TRUE(WaitBuffered(0));
}

}  // namespace
}  // namespace kvtier::service
