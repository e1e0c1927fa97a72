// Mutation fuzzing of the namespace record (storage/namespace_record.h), which the store
// reads back from the cold tier at every start. A record either parses into a spec that
// passes NamespaceOptions::Validate (and serializes back to the same bytes) or is
// rejected with DATA_LOSS and a message; nothing crashes or reads out of bounds.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kv/codec.h"
#include "storage/namespace_record.h"
#include "tests/storage/store_test_util.h"
#include "tests/testing/mutator.h"
#include "tests/testing/status_matchers.h"

namespace kvtier::storage {
namespace {

std::vector<std::string> Seeds() {
  std::vector<std::string> seeds;
  for (kv::CodecId codec : kv::AllCodecs()) {
    NamespaceOptions ns = testing::SmallNamespace(absl::StrCat("ns/", static_cast<int>(codec)));
    ns.codec = codec;
    ns.tenant = "tenant-a";
    ns.sink_blocks = 2;
    ns.layout.sink_tokens = 1;
    if (codec == kv::CodecId::kBf16) ns.layout.dtype = kv::Dtype::kBf16;
    if (!ns.Validate().ok()) continue;
    seeds.push_back(SerializeNamespace(ns));
  }
  return seeds;
}

TEST(NamespaceRecordFuzzTest, MutatedRecordsAreValidSpecsOrDataLoss) {
  const std::vector<std::string> seeds = Seeds();
  ASSERT_GE(seeds.size(), 4u);
  kvtier::testing::Mutator m(1234);
  int accepted = 0, rejected = 0;
  for (int it = 0; it < 20000; ++it) {
    const std::string rec = m.Mutate(seeds[m.Below(seeds.size())]);
    SCOPED_TRACE(absl::StrCat("iteration ", it));
    auto ns = ParseNamespace(rec);
    if (ns.ok()) {
      ++accepted;
      ASSERT_OK(ns->Validate());
      EXPECT_EQ(SerializeNamespace(*ns), rec);
      // What the store computes from a restored spec must be computable.
      (void)kv::EncodedSize(ns->codec, ns->layout, ns->layout.tokens_per_block,
                            ns->keep_sinks ? ns->layout.sink_tokens : 0);
    } else {
      ++rejected;
      EXPECT_TRUE(absl::IsDataLoss(ns.status())) << ns.status();
      EXPECT_FALSE(ns.status().message().empty());
    }
  }
  EXPECT_GT(accepted, 0);
  EXPECT_GT(rejected, 0);
}

}  // namespace
}  // namespace kvtier::storage
