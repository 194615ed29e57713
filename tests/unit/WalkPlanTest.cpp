// Note [Walk-forward]: calendar periods and the folds cut from them. The references are dates
// worked out by hand (and by `date -u -d ... +%s`); the Python test tests/walk/test_walk.py
// checks the same against pandas' to_period on real files.
#include <gtest/gtest.h>

#include "common/Error.h"
#include "common/TimeText.h"
#include "walk/WalkPlan.h"

namespace mb::walk {
namespace {

std::int64_t day(const std::string& text) {
  std::string problem;
  return parseTimeText(text, TimeUnit::kDays, &problem).value();
}

TEST(WalkPlan, PeriodStartsAreCalendarBoundaries) {
  EXPECT_EQ(periodStart(day("2024-01-04"), train::Period::kWeek), day("2024-01-01"));  // a Monday
  EXPECT_EQ(periodStart(day("2024-01-07"), train::Period::kWeek), day("2024-01-01"));  // Sunday
  EXPECT_EQ(periodStart(day("1969-12-31"), train::Period::kWeek), day("1969-12-29"));  // before 0
  EXPECT_EQ(periodStart(day("2024-02-29"), train::Period::kMonth), day("2024-02-01"));
  EXPECT_EQ(periodStart(day("2024-08-15"), train::Period::kQuarter), day("2024-07-01"));
  EXPECT_EQ(periodStart(day("2024-12-31"), train::Period::kYear), day("2024-01-01"));
  EXPECT_EQ(periodStart(day("2024-12-31"), train::Period::kDay), day("2024-12-31"));
}

TEST(WalkPlan, ShiftsCrossYearsBothWays) {
  EXPECT_EQ(shiftPeriods(day("2024-11-01"), train::Period::kMonth, 3), day("2025-02-01"));
  EXPECT_EQ(shiftPeriods(day("2024-02-01"), train::Period::kMonth, -14), day("2022-12-01"));
  EXPECT_EQ(shiftPeriods(day("2024-10-01"), train::Period::kQuarter, -4), day("2023-10-01"));
  EXPECT_EQ(shiftPeriods(day("2023-12-25"), train::Period::kWeek, 1), day("2024-01-01"));
  EXPECT_EQ(shiftPeriods(day("2024-01-01"), train::Period::kYear, -1), day("2023-01-01"));
}

TEST(WalkPlan, TheFirstPeriodStartsAtFromAndTheLastEndsAtTo) {
  WalkConfig walk;
  walk.from = "2024-01-03";  // a Wednesday
  walk.to = "2024-01-20";
  walk.every = "week";
  const auto periods = walkPeriods(walk, TimeUnit::kSeconds, 0, "");
  ASSERT_EQ(periods.size(), 3u);
  EXPECT_EQ(periods[0].from, "2024-01-03");
  EXPECT_EQ(periods[0].to, "2024-01-08");
  EXPECT_EQ(periods[0].label, "2024-01-01/2024-01-07");
  EXPECT_EQ(periods[2].from, "2024-01-15");
  EXPECT_EQ(periods[2].to, "2024-01-20");
}

TEST(WalkPlan, WithoutToTheLastPeriodHoldsTheLastSample) {
  WalkConfig walk;
  walk.from = "2024-01-01";
  walk.every = "month";
  const std::int64_t lastSample = 1709251200 + 3600;  // 2024-03-01T01:00Z
  const auto periods = walkPeriods(walk, TimeUnit::kSeconds, lastSample, "");
  ASSERT_EQ(periods.size(), 3u);
  EXPECT_EQ(periods.back().label, "2024-03");
  EXPECT_EQ(periods.back().to, "2024-04-01");
}

TEST(WalkPlan, FoldsCutValAndSlidingTrainFromThePeriodGrid) {
  WalkConfig walk;
  walk.from = "2024-04-01";
  walk.to = "2024-10-01";
  walk.every = "month";
  walk.val = 2;
  walk.trainWindow = 6;
  walk.retrainEvery = 2;
  SplitConfig base;
  base.trainFrom = "2023-09-15";  // later than the window's start for the first fold only
  const auto folds =
      planFolds(walk, base, TimeUnit::kSeconds, walkPeriods(walk, TimeUnit::kSeconds, 0, ""));
  ASSERT_EQ(folds.size(), 3u);
  EXPECT_EQ(folds[0].name, "2024-04-01");
  EXPECT_EQ(folds[0].predictTo, "2024-06-01");
  EXPECT_EQ(folds[0].split.valFrom, "2024-02-01");
  EXPECT_EQ(folds[0].split.valUntil, "2024-04-01");
  EXPECT_EQ(folds[0].split.trainFrom, "2023-09-15");  // 2023-08-01 is before train_from
  EXPECT_EQ(folds[1].split.trainFrom, "2023-10-01");
  EXPECT_EQ(folds[2].name, "2024-08-01");
  EXPECT_EQ(folds[2].predictTo, "2024-10-01");
}

TEST(WalkPlan, NoValSplitCutsValFromAtTheFoldsPeriod) {
  WalkConfig walk;
  walk.from = "2024-01-01";
  walk.to = "2024-01-03";
  walk.every = "day";
  walk.val = 0;
  const auto folds =
      planFolds(walk, {}, TimeUnit::kSeconds, walkPeriods(walk, TimeUnit::kSeconds, 0, ""));
  ASSERT_EQ(folds.size(), 2u);
  EXPECT_EQ(folds[1].split.valFrom, "2024-01-02");
  EXPECT_EQ(folds[1].split.valUntil, "2024-01-02");
}

TEST(WalkPlan, BadWalksAreNamed) {
  WalkConfig walk;
  walk.from = "2024-01-05";
  walk.to = "2024-01-01";
  EXPECT_THROW(walkPeriods(walk, TimeUnit::kSeconds, 0, ""), DataError);
  walk.to.clear();
  walk.every = "fortnight";
  EXPECT_THROW(walkPeriods(walk, TimeUnit::kSeconds, 1 << 30, ""), ConfigError);
}

}  // namespace
}  // namespace mb::walk
