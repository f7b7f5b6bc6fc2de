// Budget periods (daemon_budgets.cc) in UTC: a week from Monday 00:00, a month from the 1st.
#include <gtest/gtest.h>

#include "daemon/daemon.h"

using gpurun::queue::budget_period_start;

TEST(BudgetPeriod, WeeksStartOnMondayAndMonthsOnTheFirstInUtc) {
  const int64_t wed = 1795564800000;  // 2026-11-25T00:00:00Z, a Wednesday
  const int64_t monday = 1795392000000;  // 2026-11-23T00:00:00Z
  EXPECT_EQ(budget_period_start("week", wed + 13 * 3600 * 1000), monday);
  EXPECT_EQ(budget_period_start("week", monday), monday) << "Monday 00:00 is its own week";
  EXPECT_EQ(budget_period_start("week", monday - 1), monday - 7 * 86400000LL);
  EXPECT_EQ(budget_period_start("month", wed), 1793491200000);  // 2026-11-01T00:00:00Z
  EXPECT_EQ(budget_period_start("month", 1793491200000 - 1), 1790812800000);  // October 1st
  EXPECT_EQ(budget_period_start("total", wed), 0);
}
