// Status matchers for GoogleTest, so a failing assertion prints the status it got instead
// of "Value of: s.ok() Actual: false" (header only).
//
//   EXPECT_THAT(store->Put(...), IsOk());
//   EXPECT_THAT(client.Get(...), StatusIs(absl::StatusCode::kNotFound, HasSubstr("key")));
//   ASSERT_OK(cold->Open());           // ASSERT_THAT(expr, IsOk())
//   ASSERT_OK_AND_ASSIGN(auto v, F()); // ASSERT_OK on a StatusOr, then binds its value
//
// Each matcher takes an absl::Status, an absl::StatusOr<T>, anything with the
// `ok()` / `error_code()` / `error_message()` shape of grpc::Status, or anything with
// `ok()` / `ToString()` (rocksdb::Status; StatusIs sees those as UNKNOWN when not OK).
#ifndef KVTIER_TESTS_TESTING_STATUS_MATCHERS_H_
#define KVTIER_TESTS_TESTING_STATUS_MATCHERS_H_

#include <ostream>
#include <string>
#include <utility>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvtier::testing {
namespace status_internal {

// A status reduced to what the matchers compare and print: absl's code numbering (gRPC's
// codes are the same numbers) and the message.
struct Summary {
  absl::StatusCode code;
  std::string message;
  std::string ToString() const {
    return code == absl::StatusCode::kOk
               ? std::string("OK")
               : absl::StatusCodeToString(code) + ": " + message;
  }
};

inline Summary Summarize(const absl::Status& s) {
  return {s.code(), std::string(s.message())};
}
template <typename T>
Summary Summarize(const absl::StatusOr<T>& s) {
  return Summarize(s.status());
}
template <typename S>
auto Summarize(const S& s) -> decltype(s.error_code(), s.error_message(), Summary()) {
  return {static_cast<absl::StatusCode>(s.error_code()), std::string(s.error_message())};
}
// Any other status type with ok() and ToString() (rocksdb::Status, protobuf's
// util::Status): not OK reads as UNKNOWN with its ToString() as the message.
template <typename S>
auto Summarize(const S& s) -> decltype(s.ok(), s.ToString(), Summary()) {
  return s.ok() ? Summary{absl::StatusCode::kOk, ""}
                : Summary{absl::StatusCode::kUnknown, std::string(s.ToString())};
}

class IsOkMatcher {
 public:
  template <typename S>
  bool MatchAndExplain(const S& actual, ::testing::MatchResultListener* listener) const {
    const Summary s = Summarize(actual);
    *listener << "which is " << s.ToString();
    return s.code == absl::StatusCode::kOk;
  }
  void DescribeTo(std::ostream* os) const { *os << "is OK"; }
  void DescribeNegationTo(std::ostream* os) const { *os << "is not OK"; }
};

class StatusIsMatcher {
 public:
  StatusIsMatcher(absl::StatusCode code, ::testing::Matcher<const std::string&> message)
      : code_(code), message_(std::move(message)) {}

  template <typename S>
  bool MatchAndExplain(const S& actual, ::testing::MatchResultListener* listener) const {
    const Summary s = Summarize(actual);
    *listener << "which is " << s.ToString();
    return s.code == code_ && message_.Matches(s.message);
  }
  void DescribeTo(std::ostream* os) const {
    *os << "has code " << absl::StatusCodeToString(code_) << " and a message that ";
    message_.DescribeTo(os);
  }
  void DescribeNegationTo(std::ostream* os) const {
    *os << "does not have code " << absl::StatusCodeToString(code_)
        << " or has a message that ";
    message_.DescribeNegationTo(os);
  }

 private:
  absl::StatusCode code_;
  ::testing::Matcher<const std::string&> message_;
};

}  // namespace status_internal

// Matches an OK status; on failure prints the code and message it got.
inline ::testing::PolymorphicMatcher<status_internal::IsOkMatcher> IsOk() {
  return ::testing::MakePolymorphicMatcher(status_internal::IsOkMatcher());
}

// Matches a status with `code` and a message matched by `message` (default: any message).
inline ::testing::PolymorphicMatcher<status_internal::StatusIsMatcher> StatusIs(
    absl::StatusCode code,
    ::testing::Matcher<const std::string&> message = ::testing::A<const std::string&>()) {
  return ::testing::MakePolymorphicMatcher(
      status_internal::StatusIsMatcher(code, std::move(message)));
}

}  // namespace kvtier::testing

#define ASSERT_OK(expr) ASSERT_THAT((expr), ::kvtier::testing::IsOk())
#define EXPECT_OK(expr) EXPECT_THAT((expr), ::kvtier::testing::IsOk())

#define KVTIER_TESTING_CONCAT_INNER(a, b) a##b
#define KVTIER_TESTING_CONCAT(a, b) KVTIER_TESTING_CONCAT_INNER(a, b)
// Evaluates `rexpr` (a StatusOr), asserts it is OK, and move-assigns its value to `lhs`,
// which may be a declaration (`auto v`).
#define ASSERT_OK_AND_ASSIGN(lhs, rexpr)                                        \
  auto KVTIER_TESTING_CONCAT(status_or_, __LINE__) = (rexpr);                   \
  ASSERT_OK(KVTIER_TESTING_CONCAT(status_or_, __LINE__));                       \
  lhs = std::move(KVTIER_TESTING_CONCAT(status_or_, __LINE__)).value()

#endif  // KVTIER_TESTS_TESTING_STATUS_MATCHERS_H_
