#include "protocol/convert.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace kvtier::protocol {
namespace {

using ::testing::HasSubstr;

kv::Layout Small() {
  kv::Layout l;
  l.num_layers = 2;
  l.num_kv_heads = 2;
  l.head_dim = 64;
  l.tokens_per_block = 16;
  l.dtype = kv::Dtype::kBf16;
  l.sink_tokens = 4;
  return l;
}

TEST(ConvertTest, LayoutRoundTrips) {
  auto back = FromProto(ToProto(Small()));
  ASSERT_OK(back);
  EXPECT_EQ(*back, Small());
}

TEST(ConvertTest, FromProtoRejectsUnspecifiedDtypeAndInvalidLayouts) {
  v1::Layout p = ToProto(Small());
  p.set_dtype(v1::DTYPE_UNSPECIFIED);
  EXPECT_EQ(FromProto(p).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LayoutFromProtoUnchecked(p).dtype, kv::Dtype::kFp16);
  p = ToProto(Small());
  p.set_head_dim(0);
  EXPECT_THAT(std::string(FromProto(p).status().message()), HasSubstr("head_dim"));
}

TEST(ConvertTest, EveryCodecOfTheStorageLayerConvertsBothWays) {
  for (const kv::CodecId c : kv::AllCodecs()) {
    auto back = CodecFromProto(CodecToProto(c), "spec.codec");
    ASSERT_OK(back) << kv::CodecName(c);
    EXPECT_EQ(*back, c);
  }
  EXPECT_FALSE(CodecFromProto(v1::CODEC_UNSPECIFIED, "spec.codec").ok());
  auto bad = CodecFromProto(static_cast<v1::Codec>(99), "spec.codec");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("spec.codec 99 is unknown"));
}

TEST(ConvertTest, CheckSpecMatchesNamesTheFirstDifferingField) {
  v1::NamespaceSpec a;
  a.set_name("ns");
  *a.mutable_layout() = ToProto(Small());
  v1::NamespaceSpec b = a;
  EXPECT_OK(CheckSpecMatches(a, b));
  b.mutable_layout()->set_head_dim(128);
  absl::Status s = CheckSpecMatches(a, b);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("layout.head_dim mismatch: client has 64, server has 128"));
  b = a;
  b.mutable_layout()->set_sink_tokens(0);
  EXPECT_THAT(std::string(CheckSpecMatches(a, b).message()), HasSubstr("layout.sink_tokens"));
  b = a;
  a.set_codec(v1::CODEC_INT8);
  b.set_codec(v1::CODEC_BF16);
  EXPECT_THAT(std::string(CheckSpecMatches(a, b).message()), HasSubstr("codec"));
  b.set_codec(v1::CODEC_UNSPECIFIED);  // only compared when both name one
  EXPECT_OK(CheckSpecMatches(a, b));
}

}  // namespace
}  // namespace kvtier::protocol
