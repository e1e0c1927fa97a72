// The liveness rule (protocol/peer_liveness.h) equals the shared golden file
// tests/data/peer_liveness.txt, which the Python ClusterClient is checked against too
// (tests/python/test_golden.py), so both clients and the server's fan-out count the same
// statuses as "node down".
#include "protocol/peer_liveness.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"

namespace kvtier::protocol {
namespace {

TEST(PeerLivenessTest, EveryStatusCodeIsClassifiedAsTheGoldenFileSays) {
  const char* src = std::getenv("KVTIER_SOURCE_DIR");
  ASSERT_NE(src, nullptr) << "KVTIER_SOURCE_DIR is not set (run through ctest)";
  std::ifstream f(absl::StrCat(src, "/tests/data/peer_liveness.txt"));
  ASSERT_TRUE(f.good());
  int rows = 0;
  for (std::string line; std::getline(f, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream in(line);
    int code = -1, unreachable = -1;
    std::string name;
    in >> code >> name >> unreachable;
    ASSERT_EQ(code, rows) << "rows must list the codes 0..16 in order: " << line;
    EXPECT_EQ(IsPeerUnreachable(static_cast<grpc::StatusCode>(code)), unreachable == 1) << line;
    EXPECT_EQ(IsPeerUnreachable(absl::Status(static_cast<absl::StatusCode>(code), "x")),
              unreachable == 1 && code != 0)
        << line;
    ++rows;
  }
  EXPECT_EQ(rows, 17);
}

}  // namespace
}  // namespace kvtier::protocol
