// Note [Forecast metrics] and [Baselines] on small cases worked out by hand (the Python tests
// compare whole evaluations with numpy and scipy): ties in the rank IC, the hit rate's zeros,
// a panel's empty date, the skill on the error rate, and the periods of --by.
#include <ATen/Functions.h>
#include <gtest/gtest.h>

#include "train/judge/Forecasts.h"
#include "train/judge/PeriodTable.h"

namespace mb::train {
namespace {

// Rows of one target term: sample i, prediction p[i], target y[i], weight 1.
at::Tensor rowsOf(const std::vector<double>& p, const std::vector<double>& y) {
  at::Tensor rows = at::zeros({static_cast<std::int64_t>(p.size()), kForecastWidth}, at::kDouble);
  for (std::size_t i = 0; i < p.size(); ++i) {
    const auto r = static_cast<std::int64_t>(i);
    rows[r][kRowSample] = static_cast<double>(i);
    rows[r][kRowWeight] = 1.0;
    rows[r][kRowPrediction] = p[i];
    rows[r][kRowTarget] = y[i];
  }
  return rows;
}

TEST(ForecastsTest, RankIcGivesTiesTheirAverageRank) {
  // Ranks of p: 1, 2.5, 2.5, 4; of y: 1, 2, 3, 4. scipy.stats.spearmanr gives 0.9486832980505138.
  data::DataInfo info;
  auto judged =
      judgeForecasts(ForecastKind::kRegression, rowsOf({1, 2, 2, 3}, {1, 2, 3, 4}), info, {});
  EXPECT_NEAR(judged.at("rank_ic"), 0.9486832980505138, 1e-12);
  EXPECT_NEAR(judged.at("ic"), 0.9486832980505138, 1e-12);  // the same values here
}

TEST(ForecastsTest, HitRateLeavesOutZeroTargetsAndCountsZeroPredictionsAsMisses) {
  data::DataInfo info;
  auto judged = judgeForecasts(ForecastKind::kRegression,
                               rowsOf({1, -1, 0, 5, 2}, {2, 1, -3, 0, 4}), info, {});
  EXPECT_DOUBLE_EQ(judged.at("hit_rate"), 2.0 / 4.0);  // hit, miss, miss (0), -, hit
}

TEST(ForecastsTest, BaselinesAndSkills) {
  data::DataInfo info;
  info.trainTargetMean = {1.0};
  auto judged = judgeForecasts(ForecastKind::kRegression, rowsOf({1, 1}, {2, 0}), info, {0, 0});
  EXPECT_DOUBLE_EQ(judged.at("mse"), 1.0);
  EXPECT_DOUBLE_EQ(judged.at("baseline_zero_mse"), 2.0);
  EXPECT_DOUBLE_EQ(judged.at("baseline_zero_skill"), 0.5);
  EXPECT_DOUBLE_EQ(judged.at("baseline_mean_mse"), 1.0);
  EXPECT_DOUBLE_EQ(judged.at("baseline_mean_skill"), 0.0);
  EXPECT_DOUBLE_EQ(judged.at("baseline_last_mse"), 2.0);
  EXPECT_EQ(judged.count("ic_ratio"), 0u);  // not a panel
}

TEST(ForecastsTest, AConstantPredictionHasNoIc) {
  data::DataInfo info;
  auto judged = judgeForecasts(ForecastKind::kRegression, rowsOf({3, 3, 3}, {1, 2, 3}), info, {});
  EXPECT_EQ(judged.at("ic"), 0.0);
  EXPECT_EQ(judged.at("rank_ic"), 0.0);
}

TEST(ForecastsTest, APanelDateWithoutInstrumentsCountsAsADate) {
  // Two dates of three instruments: the first has all three, the second none.
  data::Batch batch;
  batch.sampleIndex = at::tensor({10, 11}, at::kLong);
  batch.targets = at::tensor({1.0, 2.0, 3.0, 9.0, 9.0, 9.0}, at::kFloat).reshape({2, 3});
  at::Tensor present = at::tensor({1, 1, 1, 0, 0, 0}, at::kLong).to(at::kBool).reshape({2, 3});
  batch.inputs = {at::zeros({2, 3, 1, 1}), present};
  at::Tensor output = at::tensor({1.0, 2.0, 4.0, 0.0, 0.0, 0.0}, at::kFloat).reshape({2, 3});
  at::Tensor rows = forecastRows(ForecastKind::kPanelRegression, output, batch);
  ASSERT_EQ(rows.size(0), 4);  // three present, one for the empty date
  EXPECT_EQ(rows[3][kRowWeight].item<double>(), 0.0);
  data::DataInfo info;
  auto judged = judgeForecasts(ForecastKind::kPanelRegression, rows, info, {});
  // Date 1: MSE 1/3, zero MSE 14/3; date 2 adds 0; the loss divides by both dates.
  EXPECT_NEAR(judged.at("mse"), 1.0 / 6.0, 1e-12);
  EXPECT_NEAR(judged.at("baseline_zero_mse"), 14.0 / 6.0, 1e-12);
  // Daily ICs: corr((1,2,4), (1,2,3)) and 0.
  const double first = 0.9819805060619657;
  EXPECT_NEAR(judged.at("ic"), first / 2, 1e-12);
  EXPECT_NEAR(judged.at("ic_ratio"), (first / 2) / (first / std::sqrt(2.0)), 1e-12);
}

TEST(ForecastsTest, ClassificationSkillIsOnTheErrorRate) {
  data::DataInfo info;
  info.trainClassCounts = {3, 1};  // majority class 0; priors 0.75, 0.25
  at::Tensor rows = rowsOf({0, 1, 1, 0}, {0, 1, 0, 0});
  rows.select(1, kRowLogLoss).fill_(0.5);
  auto judged = judgeForecasts(ForecastKind::kClassification, rows, info, {});
  EXPECT_DOUBLE_EQ(judged.at("accuracy"), 0.75);
  EXPECT_DOUBLE_EQ(judged.at("baseline_majority_accuracy"), 0.75);
  EXPECT_DOUBLE_EQ(judged.at("baseline_majority_skill"), 0.0);
  const double prior = -(3 * std::log(0.75) + std::log(0.25)) / 4;
  EXPECT_NEAR(judged.at("baseline_prior_log_loss"), prior, 1e-12);
  EXPECT_NEAR(judged.at("baseline_prior_skill"), 1 - 0.5 / prior, 1e-12);
}

TEST(ForecastsTest, PeriodsAreNamedAsPandasNamesThem) {
  data::DataInfo info;
  // 2024-01-07 (a Sunday) and 2024-01-08 (a Monday), in days since 1970-01-01.
  const std::vector<std::int64_t> days{19729, 19730};
  auto weeks = resultsByPeriod(ForecastKind::kRegression, rowsOf({1, 2}, {1, 2}), days,
                               TimeUnit::kDays, Period::kWeek, info, {});
  ASSERT_EQ(weeks.size(), 2u);
  EXPECT_EQ(weeks[0].label, "2024-01-01/2024-01-07");
  EXPECT_EQ(weeks[1].label, "2024-01-08/2024-01-14");
  auto quarters =
      resultsByPeriod(ForecastKind::kRegression, rowsOf({1, 2}, {1, 2}), {20240331, 20240401},
                      TimeUnit::kYyyymmdd, Period::kQuarter, info, {});
  ASSERT_EQ(quarters.size(), 2u);
  EXPECT_EQ(quarters[0].label, "2024Q1");
  EXPECT_EQ(quarters[1].label, "2024Q2");
  EXPECT_FALSE(periodNamed("fortnight"));
}

}  // namespace
}  // namespace mb::train
