#include "tests/testing/status_matchers.h"
#include "tools/trace.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvtier::tools {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ParseTraceLineTest, ParsesMooncakeLine) {
  absl::StatusOr<TraceRequest> r = ParseTraceLine(
      R"({"timestamp": 27482, "input_length": 6955, "output_length": 52, )"
      R"("hash_ids": [46, 47, 48]})");
  ASSERT_OK(r);
  EXPECT_EQ(r->timestamp_ms, 27482u);
  EXPECT_EQ(r->input_length, 6955u);
  EXPECT_EQ(r->output_length, 52u);
  EXPECT_THAT(r->hash_ids, ElementsAre(46, 47, 48));
}

TEST(ParseTraceLineTest, IgnoresUnknownKeysAndWhitespace) {
  absl::StatusOr<TraceRequest> r = ParseTraceLine(
      " { \"hash_ids\" : [ 1 ,2 ] , \"extra\": {\"a\": [1, \"x\", null, true]}, "
      "\"s\": \"q\\\"}\" }\r");
  ASSERT_OK(r);
  EXPECT_THAT(r->hash_ids, ElementsAre(1, 2));
  EXPECT_EQ(r->timestamp_ms, 0u);
}

TEST(ParseTraceLineTest, AcceptsEmptyIdsAndIntegralFloats) {
  absl::StatusOr<TraceRequest> r = ParseTraceLine(R"({"timestamp": 1.5e3, "hash_ids": []})");
  ASSERT_OK(r);
  EXPECT_EQ(r->timestamp_ms, 1500u);
  EXPECT_TRUE(r->hash_ids.empty());
}

TEST(ParseTraceLineTest, RejectsMalformedLines) {
  struct Case {
    const char* line;
    const char* error;
  };
  for (const Case& c : {
           Case{R"({"timestamp": 1})", "missing field hash_ids"},
           Case{R"({"hash_ids": 5})", "field hash_ids: expected an array"},
           Case{R"({"hash_ids": [1, -2]})", "field hash_ids: expected a non-negative"},
           Case{R"({"hash_ids": [1.5]})", "field hash_ids: expected a non-negative"},
           Case{R"({"hash_ids": ["1"]})", "field hash_ids: expected a number"},
           Case{R"({"hash_ids": [1, 1]})", "id 1 repeated"},
           Case{R"({"hash_ids": [1]} x)", "trailing characters"},
           Case{R"({"hash_ids": [1)", "malformed json"},
           Case{R"({"input_length": "big", "hash_ids": []})", "field input_length"},
           Case{R"([1, 2])", "expected '{'"},
           Case{R"({"hash_ids": [99999999999999999999999]})", "out of range"},
       }) {
    absl::StatusOr<TraceRequest> r = ParseTraceLine(c.line);
    ASSERT_FALSE(r.ok()) << c.line;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.line;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(c.error)) << c.line;
  }
}

TEST(ParseTraceTest, CountsBlocksAndSkipsBlankLines) {
  absl::StatusOr<Trace> t = ParseTrace(
      "{\"hash_ids\": [0, 1, 2]}\n\n  \n{\"hash_ids\": [0, 1, 3]}\n{\"hash_ids\": [4]}");
  ASSERT_OK(t);
  EXPECT_EQ(t->requests.size(), 3u);
  EXPECT_EQ(t->total_blocks, 7u);
  EXPECT_EQ(t->unique_blocks, 5u);
  Trace tail = t->Slice(1, 10);
  EXPECT_EQ(tail.requests.size(), 2u);
  EXPECT_EQ(tail.total_blocks, 4u);
  EXPECT_EQ(tail.unique_blocks, 4u);
}

TEST(ParseTraceTest, ErrorNamesTheLine) {
  absl::StatusOr<Trace> t =
      ParseTrace("{\"hash_ids\": [0]}\n\n{\"hash_ids\": [0, x]}\n{\"hash_ids\": [1]}\n");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("line 3: "));
}

TEST(ParseTraceTest, RejectsTraceThatIsNotPrefixChained) {
  // Id 2 follows 1 on line 1 but 7 on line 2.
  absl::StatusOr<Trace> t = ParseTrace("{\"hash_ids\": [0, 1, 2]}\n{\"hash_ids\": [7, 2]}\n");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()),
              HasSubstr("line 2: field hash_ids: id 2 has a different parent than on line 1"));
  // A root id that later appears as a child is also a different parent.
  EXPECT_FALSE(ParseTrace("{\"hash_ids\": [5]}\n{\"hash_ids\": [4, 5]}\n").ok());
}

TEST(ParseTraceTest, RejectsEmptyTrace) {
  EXPECT_FALSE(ParseTrace("").ok());
  EXPECT_FALSE(ParseTrace("\n  \n").ok());
}

TEST(ReadTraceTest, ReadsFileAndReportsMissingFile) {
  std::filesystem::path dir = std::filesystem::temp_directory_path() /
                              ("kvtier_trace_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string path = (dir / "t.jsonl").string();
  {
    std::ofstream out(path);
    out << "{\"timestamp\": 0, \"hash_ids\": [0, 1]}\n{\"timestamp\": 3, \"hash_ids\": [0]}\n";
  }
  absl::StatusOr<Trace> t = ReadTrace(path);
  ASSERT_OK(t);
  EXPECT_EQ(t->requests.size(), 2u);
  EXPECT_EQ(t->requests[1].timestamp_ms, 3u);

  {
    std::ofstream out(path);
    out << "{\"hash_ids\": [0]}\n{\"hash_ids\": [0,}\n";
  }
  t = ReadTrace(path);
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()), HasSubstr(path + ": line 2: "));

  absl::StatusOr<Trace> missing = ReadTrace((dir / "none.jsonl").string());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  std::filesystem::remove_all(dir);
}

TEST(ReuseStatsTest, CountsOnceReferencedBlocksAndReuseGaps) {
  // Requests: 0:[1,2] 1:[1,3] 2:[4] 3:[1,2]. Block 1 is referenced at 0,1,3; block 2 at
  // 0,3; blocks 3 and 4 once.
  absl::StatusOr<Trace> t = ParseTrace(
      "{\"hash_ids\": [1, 2]}\n{\"hash_ids\": [1, 3]}\n{\"hash_ids\": [4]}\n"
      "{\"hash_ids\": [1, 2]}\n");
  ASSERT_OK(t);
  const ReuseStats r = ComputeReuseStats(*t);
  EXPECT_EQ(r.unique_blocks, 4u);
  EXPECT_DOUBLE_EQ(r.referenced_once, 0.5);
  EXPECT_DOUBLE_EQ(r.reused_after_first, 0.5);
  // 2nd+ references: block 1 at 1 (followed by 3) and 3 (last), block 2 at 3 (last).
  EXPECT_DOUBLE_EQ(r.reused_after_repeat, 1.0 / 3.0);
  EXPECT_EQ(r.median_first_gap, 3u);   // gaps {1 (block 1), 3 (block 2)}
  EXPECT_EQ(r.median_repeat_gap, 2u);  // block 1: 1 -> 3
}

}  // namespace
}  // namespace kvtier::tools
