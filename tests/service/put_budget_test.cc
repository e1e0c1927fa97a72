// The Put budget shared fairly across tenants (service/put_budget.h).
#include "service/put_budget.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace kvtier::service {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kBudget = 1000;

TEST(PutBudgetTest, ATenantAloneMayUseTheWholeBudget) {
  PutBudget budget;
  budget.OpenStream("a");
  budget.OpenStream("a");
  EXPECT_OK(budget.Charge("a", 600, kBudget));
  EXPECT_OK(budget.Charge("a", 400, kBudget));
  const absl::Status full = budget.Charge("a", 1, kBudget);
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(full.message(), HasSubstr("would exceed put_budget_bytes (1000)"));
  EXPECT_EQ(budget.bytes_in_flight(), 1000u);
  budget.CloseStream("a", 600);
  budget.CloseStream("a", 400);
  EXPECT_EQ(budget.bytes_in_flight(), 0u);
}

TEST(PutBudgetTest, AFloodingTenantIsHeldToItsShareWhileAnotherPuts) {
  PutBudget budget;
  budget.OpenStream("a");
  EXPECT_OK(budget.Charge("a", 300, kBudget));
  budget.OpenStream("b");  // b starts putting: a's share is now half the budget
  EXPECT_OK(budget.Charge("a", 200, kBudget));
  const absl::Status over = budget.Charge("a", 1, kBudget);
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(over.message(), HasSubstr("tenant 'a'"));
  EXPECT_THAT(over.message(), HasSubstr("its share (500)"));
  // b gets its half although a asked first.
  EXPECT_OK(budget.Charge("b", 500, kBudget));
  EXPECT_FALSE(budget.Charge("b", 1, kBudget).ok());
  // Once b is done, a may grow again.
  budget.CloseStream("b", 500);
  EXPECT_OK(budget.Charge("a", 500, kBudget));
  EXPECT_EQ(budget.bytes_in_flight(), 1000u);
  budget.CloseStream("a", 1000);
  EXPECT_EQ(budget.bytes_in_flight(), 0u);
}

TEST(PutBudgetTest, ATenantThatFilledTheBudgetAloneCannotLockOthersOut) {
  PutBudget budget;
  budget.OpenStream("a");
  ASSERT_OK(budget.Charge("a", 1000, kBudget));  // e.g. stalled streams
  budget.OpenStream("b");
  EXPECT_OK(budget.Charge("b", 400, kBudget));  // over the full budget, in its share
  EXPECT_FALSE(budget.Charge("b", 101, kBudget).ok());
  EXPECT_FALSE(budget.Charge("a", 1, kBudget).ok());
  EXPECT_EQ(budget.bytes_in_flight(), 1400u);  // at most twice the budget
  budget.CloseStream("b", 400);
  budget.CloseStream("a", 1000);
  EXPECT_EQ(budget.bytes_in_flight(), 0u);
}

}  // namespace
}  // namespace kvtier::service
