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
  auto judged = judgeForecasts(ForecastKind::kRegression, rowsOf({1, 2, 2, 3}, {1, 2, 3, 4}), {});
  EXPECT_NEAR(judged.at("rank_ic"), 0.9486832980505138, 1e-12);
  EXPECT_NEAR(judged.at("ic"), 0.9486832980505138, 1e-12);  // the same values here
}

TEST(ForecastsTest, HitRateLeavesOutZeroTargetsAndCountsZeroPredictionsAsMisses) {
  auto judged =
      judgeForecasts(ForecastKind::kRegression, rowsOf({1, -1, 0, 5, 2}, {2, 1, -3, 0, 4}), {});
  EXPECT_DOUBLE_EQ(judged.at("hit_rate"), 2.0 / 4.0);  // hit, miss, miss (0), -, hit
}

TEST(ForecastsTest, BaselinesAndSkills) {
  BaselineInputs inputs;
  inputs.trainMean = {1.0};
  inputs.lastKnown = {0, 0};
  auto judged = judgeForecasts(ForecastKind::kRegression, rowsOf({1, 1}, {2, 0}), inputs);
  EXPECT_DOUBLE_EQ(judged.at("mse"), 1.0);
  EXPECT_DOUBLE_EQ(judged.at("mae"), 1.0);
  EXPECT_DOUBLE_EQ(judged.at("baseline_zero_mse"), 2.0);
  EXPECT_DOUBLE_EQ(judged.at("baseline_zero_skill"), 0.5);
  EXPECT_DOUBLE_EQ(judged.at("baseline_mean_mse"), 1.0);
  EXPECT_DOUBLE_EQ(judged.at("baseline_mean_skill"), 0.0);
  EXPECT_DOUBLE_EQ(judged.at("baseline_last_mse"), 2.0);
  EXPECT_EQ(judged.count("ic_ratio"), 0u);  // not a panel
}

TEST(ForecastsTest, AConstantPredictionHasNoIc) {
  auto judged = judgeForecasts(ForecastKind::kRegression, rowsOf({3, 3, 3}, {1, 2, 3}), {});
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
  auto judged = judgeForecasts(ForecastKind::kPanelRegression, rows, {});
  // Date 1: MSE 1/3, zero MSE 14/3; date 2 adds 0; the loss divides by both dates.
  EXPECT_NEAR(judged.at("mse"), 1.0 / 6.0, 1e-12);
  EXPECT_NEAR(judged.at("mae"), 1.0 / 6.0, 1e-12);  // |4 - 3| / 3 instruments / 2 dates
  EXPECT_NEAR(judged.at("baseline_zero_mse"), 14.0 / 6.0, 1e-12);
  // Daily ICs: corr((1,2,4), (1,2,3)) and 0.
  const double first = 0.9819805060619657;
  EXPECT_NEAR(judged.at("ic"), first / 2, 1e-12);
  EXPECT_NEAR(judged.at("ic_ratio"), (first / 2) / (first / std::sqrt(2.0)), 1e-12);
}

TEST(ForecastsTest, ClassificationSkillIsOnTheErrorRate) {
  BaselineInputs inputs;
  inputs.trainClassCounts = {3, 1};  // majority class 0; priors 0.75, 0.25
  at::Tensor rows = rowsOf({0, 1, 1, 0}, {0, 1, 0, 0});
  rows.select(1, kRowLogLoss).fill_(0.5);
  auto judged = judgeForecasts(ForecastKind::kClassification, rows, inputs);
  EXPECT_DOUBLE_EQ(judged.at("accuracy"), 0.75);
  EXPECT_DOUBLE_EQ(judged.at("baseline_majority_accuracy"), 0.75);
  EXPECT_DOUBLE_EQ(judged.at("baseline_majority_skill"), 0.0);
  const double prior = -(3 * std::log(0.75) + std::log(0.25)) / 4;
  EXPECT_NEAR(judged.at("baseline_prior_log_loss"), prior, 1e-12);
  EXPECT_NEAR(judged.at("baseline_prior_skill"), 1 - 0.5 / prior, 1e-12);
}

TEST(ForecastsTest, PeriodsAreNamedAsPandasNamesThem) {
  // 2024-01-07 (a Sunday) and 2024-01-08 (a Monday), in days since 1970-01-01.
  const std::vector<std::int64_t> days{19729, 19730};
  auto weeks = resultsByPeriod(ForecastKind::kRegression, rowsOf({1, 2}, {1, 2}), days,
                               TimeUnit::kDays, Period::kWeek, {}, "f.h5");
  ASSERT_EQ(weeks.size(), 2u);
  EXPECT_EQ(weeks[0].label, "2024-01-01/2024-01-07");
  EXPECT_EQ(weeks[1].label, "2024-01-08/2024-01-14");
  auto quarters =
      resultsByPeriod(ForecastKind::kRegression, rowsOf({1, 2}, {1, 2}), {20240331, 20240401},
                      TimeUnit::kYyyymmdd, Period::kQuarter, {}, "f.h5");
  ASSERT_EQ(quarters.size(), 2u);
  EXPECT_EQ(quarters[0].label, "2024Q1");
  EXPECT_EQ(quarters[1].label, "2024Q2");
  EXPECT_FALSE(periodNamed("fortnight"));
}

TEST(ForecastsTest, EachRowsOwnTrainMeanAndGroupsByFold) {
  // Two folds, each with its own train mean; the third label has no rows.
  BaselineInputs inputs;
  inputs.trainMeanOfRow = {1, 1, -1, -1};
  const at::Tensor rows = rowsOf({0, 2, 0, 0}, {2, 2, -2, 0});
  auto all = judgeForecasts(ForecastKind::kRegression, rows, inputs);
  EXPECT_DOUBLE_EQ(all.at("baseline_mean_mse"), (1 + 1 + 1 + 1) / 4.0);
  auto folds =
      resultsByGroup(ForecastKind::kRegression, rows, {0, 0, 1, 1}, {"a", "b", "c"}, inputs);
  ASSERT_EQ(folds.size(), 3u);
  EXPECT_EQ(folds[0].label, "a");
  EXPECT_EQ(folds[0].samples, 2);
  EXPECT_DOUBLE_EQ(folds[0].values.at("mse"), 2.0);  // (4 + 0) / 2
  EXPECT_DOUBLE_EQ(folds[0].values.at("baseline_mean_mse"), 1.0);
  EXPECT_DOUBLE_EQ(folds[1].values.at("mae"), 1.0);  // (2 + 0) / 2
  EXPECT_DOUBLE_EQ(folds[1].values.at("baseline_mean_mse"), 1.0);
  EXPECT_EQ(folds[2].samples, 0);
  EXPECT_TRUE(folds[2].values.empty());
  const std::string text = groupTableText(folds, ForecastKind::kRegression, "fold");
  EXPECT_NE(text.find("the model beat the train mean in 0 of 2 folds (0%)"), std::string::npos)
      << text;
}

TEST(ForecastsTest, LastKnownTargetsComeFromTheRowsThenFromEarlierOnes) {
  // Samples 5..8, horizon 2: samples 3 and 4 are asked for, 5 and 6 are the rows' own.
  at::Tensor rows = rowsOf({0, 0, 0, 0}, {50, 60, 70, 80});
  rows.select(1, kRowSample).add_(5);
  std::vector<std::int64_t> asked;
  auto known =
      lastKnownTargets(rows, 2, [&](const std::vector<std::int64_t>& samples, std::int64_t terms) {
        asked = samples;
        return at::tensor({30.0, 40.0}, at::kDouble).reshape({2, terms});
      });
  EXPECT_EQ(asked, (std::vector<std::int64_t>{3, 4}));
  EXPECT_EQ(known, (std::vector<double>{30, 40, 50, 60}));
  // One that cannot say leaves the baseline out; so does a look back before sample 0.
  EXPECT_TRUE(
      lastKnownTargets(rows, 2, [](const auto&, std::int64_t) { return at::Tensor(); }).empty());
  EXPECT_TRUE(
      lastKnownTargets(rows, 6, [](const auto&, std::int64_t) { return at::Tensor(); }).empty());
}

}  // namespace
}  // namespace mb::train
