#include "storage/namespace_record.h"

#include <cstring>
#include <string>

#include "gtest/gtest.h"
#include "tests/storage/store_test_util.h"
#include "tests/testing/status_matchers.h"

namespace kvtier::storage {
namespace {

TEST(NamespaceRecordTest, RoundTripsEveryField) {
  NamespaceOptions ns = testing::SmallNamespace("a/b", /*write_through=*/true);
  ns.tenant = "t1";
  ns.codec = kv::CodecId::kFp16;
  ns.keep_sinks = false;
  ns.cold_zstd = true;
  ns.sink_blocks = 3;
  ns.layout.sink_tokens = 2;
  auto parsed = ParseNamespace(SerializeNamespace(ns));
  ASSERT_OK(parsed);
  EXPECT_EQ(FirstNamespaceDifference(*parsed, ns), "");
  EXPECT_EQ(parsed->name, ns.name);
}

TEST(NamespaceRecordTest, StartsWithTheVersion) {
  const std::string rec = SerializeNamespace(testing::SmallNamespace());
  uint32_t version;
  std::memcpy(&version, rec.data(), 4);
  EXPECT_EQ(version, kNamespaceRecordVersion);
}

TEST(NamespaceRecordTest, UnknownVersionAndBadLengthsAreDataLoss) {
  std::string rec = SerializeNamespace(testing::SmallNamespace());
  std::string other_version = rec;
  other_version[0] = static_cast<char>(kNamespaceRecordVersion + 1);
  EXPECT_TRUE(absl::IsDataLoss(ParseNamespace(other_version).status()));
  EXPECT_TRUE(absl::IsDataLoss(ParseNamespace(rec.substr(0, rec.size() - 1)).status()));
  EXPECT_TRUE(absl::IsDataLoss(ParseNamespace(rec + "x").status()));
  EXPECT_TRUE(absl::IsDataLoss(ParseNamespace("").status()));
}

TEST(NamespaceRecordTest, FirstDifferenceNamesTheField) {
  NamespaceOptions a = testing::SmallNamespace();
  NamespaceOptions b = a;
  b.layout.head_dim *= 2;
  b.sink_blocks = 4;
  EXPECT_EQ(FirstNamespaceDifference(a, b), "layout.head_dim");
  b = a;
  b.write_through = !a.write_through;
  EXPECT_EQ(FirstNamespaceDifference(a, b), "write_through");
}

}  // namespace
}  // namespace kvtier::storage
