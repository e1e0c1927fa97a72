// Cross-language golden vectors: the prefix keys (client/prefix_keys.h) and rendezvous
// owners (protocol/rendezvous.h) of 10,000 generated inputs each, stored in
// tests/data/golden_vectors.txt and checked here and by the Python client
// (tests/python/test_golden.py), so both compute the same keys and placement.
//
// Inputs come from a splitmix64 stream seeded per case (the generator below, mirrored in
// tests/python/golden.py); the file holds the outputs:
//   P <case> <number of keys> <last key hex or ->        (keys are chained, so the last
//                                                          one covers every earlier one)
//   R <case> <owner indices into the sorted node list, comma-separated, or ->
// Regenerate (only when a scheme version changes):
//   KVTIER_WRITE_GOLDEN=tests/data/golden_vectors.txt build/tests/client/golden_vectors_test
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/prefix_keys.h"
#include "gtest/gtest.h"
#include "protocol/rendezvous.h"
#include "tests/testing/status_matchers.h"

namespace kvtier::client {
namespace {

using ::kvtier::protocol::RendezvousRing;

constexpr int kCases = 10000;
constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789._/-";

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint64_t Below(uint64_t n) { return Next() % n; }
  std::string Name(size_t max_len) {
    std::string s(1 + Below(max_len), 'x');
    for (char& c : s) c = kAlphabet[Below(sizeof(kAlphabet) - 1)];
    return s;
  }
  std::string Bytes(size_t min_len, size_t max_len) {
    std::string s(min_len + Below(max_len - min_len + 1), '\0');
    for (char& c : s) c = static_cast<char>(Next() & 0xff);
    return s;
  }

 private:
  uint64_t state_;
};

std::string PrefixLine(int i) {
  SplitMix64 g(0x6b76746965720000ull + static_cast<uint64_t>(i));
  PrefixKeyParams p;
  p.namespace_name = g.Name(24);
  p.tenant = g.Below(3) == 0 ? "" : g.Name(12);
  p.tokens_per_block = static_cast<uint32_t>(1 + g.Below(16));
  const size_t n = g.Below(97);
  const bool small = g.Below(2) == 0;
  std::vector<uint32_t> tokens(n);
  for (uint32_t& t : tokens) t = static_cast<uint32_t>(small ? g.Below(200000) : g.Next());
  if (g.Below(4) == 0) p.extra = g.Bytes(1, 8);
  auto keys = PrefixKeysForTokens(p, tokens);
  EXPECT_OK(keys);
  if (!keys.ok()) return "";
  return absl::StrCat("P ", i, " ", keys->size(), " ",
                      keys->empty() ? "-" : KeyToHex(keys->back()));
}

std::string RingLine(int i) {
  SplitMix64 g(0x72656e6400000000ull + static_cast<uint64_t>(i));
  const size_t n = 1 + g.Below(8);
  std::vector<std::string> nodes;
  for (size_t k = 0; k < n; ++k) {
    nodes.push_back(g.Below(2) == 0 ? absl::StrCat("127.0.0.1:", 1024 + g.Below(60000))
                                    : g.Name(20));
  }
  const std::string ns = g.Name(24);
  const std::string key = g.Bytes(1, 32);
  const size_t r = g.Below(5);
  RendezvousRing ring(nodes);
  const std::vector<size_t> owners = ring.Owners(ns, key, r);
  return absl::StrCat("R ", i, " ", owners.empty() ? "-" : absl::StrJoin(owners, ","));
}

std::vector<std::string> AllLines() {
  std::vector<std::string> lines;
  for (int i = 0; i < kCases; ++i) lines.push_back(PrefixLine(i));
  for (int i = 0; i < kCases; ++i) lines.push_back(RingLine(i));
  return lines;
}

TEST(GoldenVectorsTest, PrefixKeysAndRingOwnersMatchTheSharedFile) {
  const std::vector<std::string> lines = AllLines();
  if (const char* out = std::getenv("KVTIER_WRITE_GOLDEN"); out != nullptr && *out) {
    std::ofstream f(out);
    f << "# kvtier golden vectors (tests/client/golden_vectors_test.cc): prefix keys\n"
         "# (kvtier-prefix-sha256-v1) and rendezvous owners (rendezvous-v1).\n";
    for (const std::string& l : lines) f << l << "\n";
    ASSERT_TRUE(f.good()) << "cannot write " << out;
    return;
  }
  const char* src = std::getenv("KVTIER_SOURCE_DIR");
  ASSERT_NE(src, nullptr) << "KVTIER_SOURCE_DIR is not set (run through ctest)";
  std::ifstream f(absl::StrCat(src, "/tests/data/golden_vectors.txt"));
  ASSERT_TRUE(f.good());
  std::vector<std::string> want;
  for (std::string l; std::getline(f, l);) {
    if (!l.empty() && l[0] != '#') want.push_back(l);
  }
  ASSERT_EQ(want.size(), lines.size());
  int mismatches = 0;
  for (size_t i = 0; i < lines.size() && mismatches < 10; ++i) {
    if (lines[i] != want[i]) {
      ++mismatches;
      ADD_FAILURE() << "got \"" << lines[i] << "\", golden file has \"" << want[i] << "\"";
    }
  }
}

}  // namespace
}  // namespace kvtier::client
