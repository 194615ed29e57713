// Note [Automatic micro-batch]: the search against memory models whose answer is known.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>

#include "train/memory/MicroBatchSearch.h"

namespace mb::train {
namespace {

constexpr std::int64_t kMiB = 1 << 20;

// Activations affine in the size: `constant` + `perSample` x size.
TrialOutcome measured(std::int64_t bytes) {
  TrialOutcome outcome;
  outcome.variableBytes = bytes;
  return outcome;
}

MeasureMicroBatch affine(std::int64_t constant, std::int64_t perSample, int* calls = nullptr) {
  return [=](std::int64_t size) {
    if (calls != nullptr) ++*calls;
    return measured(constant + perSample * size);
  };
}

// The largest size the budget fits by the rule the search states, found by counting up.
std::int64_t largestFitting(std::int64_t largest, std::int64_t fixed, std::int64_t budget,
                            const MeasureMicroBatch& measure) {
  std::int64_t best = 0;
  for (std::int64_t size = 1; size <= largest; ++size) {
    const std::int64_t bytes = measure(size).variableBytes;
    if (bytes >= 0 && fixed + (1.0 + kActivationMargin) * static_cast<double>(bytes) <= budget)
      best = size;
  }
  return best;
}

TEST(MicroBatchSearch, KeepsTheWholeShareWhenItFits) {
  int calls = 0;
  const MicroBatchChoice choice =
      searchMicroBatch(128, kMiB, 100 * kMiB, affine(0, kMiB / 4, &calls));
  EXPECT_EQ(choice.microBatch, 128);
  EXPECT_EQ(calls, 1);
  ASSERT_EQ(choice.trials.size(), 1u);
  EXPECT_TRUE(choice.trials[0].fits);
}

TEST(MicroBatchSearch, FindsTheLargestFittingSizeInFewTrialsThenBalancesIt) {
  for (std::int64_t budget : {3 * kMiB, 8 * kMiB, 20 * kMiB, 33 * kMiB}) {
    const MeasureMicroBatch measure = affine(300 * 1024, 91 * 1024);
    const MicroBatchChoice choice = searchMicroBatch(256, kMiB, budget, measure);
    const std::int64_t best = largestFitting(256, kMiB, budget, measure);
    ASSERT_GT(best, 0) << budget;
    EXPECT_EQ(choice.microBatch, balancedMicroBatch(256, best)) << choice.describeTrials();
    EXPECT_LE(choice.trials.size(), 4u) << choice.describeTrials();  // affine: the secant lands
  }
}

TEST(MicroBatchSearch, ASizeThatRanOutOfMemoryDoesNotFitAndTheSearchGoesOn) {
  // Memory says 200 fit, but every size above 50 runs out for real.
  const MeasureMicroBatch measure = [](std::int64_t size) {
    TrialOutcome outcome = measured(size * 1024);
    if (size > 50) outcome = {-1, /*ranOut=*/true, false};
    return outcome;
  };
  const MicroBatchChoice choice = searchMicroBatch(256, 0, 200 * 1024 * 2, measure);
  ASSERT_GE(choice.trials.size(), 2u);
  EXPECT_TRUE(choice.trials[0].outcome.ranOut);
  EXPECT_FALSE(choice.trials[0].fits);
  std::int64_t largestFit = 0;
  for (const auto& trial : choice.trials)
    if (trial.fits) largestFit = std::max(largestFit, trial.microBatch);
  EXPECT_GE(largestFit, 44) << choice.describeTrials();  // bisected towards 50
  EXPECT_LE(largestFit, 50);
  EXPECT_EQ(choice.microBatch, balancedMicroBatch(256, largestFit));
  EXPECT_NE(choice.describeTrials().find("ran out of memory"), std::string::npos);
}

// On the CPU a trial past the budget is stopped at it: no measure, but no real failure either,
// so the search still estimates from the sizes it could measure.
TEST(MicroBatchSearch, ATrialStoppedAtTheBudgetIsBisectedThenEstimated) {
  const std::int64_t room = 40 * kMiB;
  const MeasureMicroBatch capped = [&](std::int64_t size) {
    const std::int64_t bytes = kMiB + size * kMiB / 2;
    TrialOutcome outcome = measured(bytes);
    if (bytes > room) outcome = {-1, false, /*overCap=*/true};
    return outcome;
  };
  const MicroBatchChoice choice = searchMicroBatch(512, 0, room, capped);
  const std::int64_t best = largestFitting(512, 0, room, capped);
  EXPECT_EQ(choice.microBatch, balancedMicroBatch(512, best)) << choice.describeTrials();
  EXPECT_LE(choice.trials.size(), 7u) << choice.describeTrials();
  EXPECT_NE(choice.describeTrials().find("stopped at the budget"), std::string::npos);
}

TEST(MicroBatchSearch, NothingFitsWhenTheFixedPartFillsTheBudget) {
  const MicroBatchChoice choice = searchMicroBatch(64, 10 * kMiB, 9 * kMiB, affine(0, 1024));
  EXPECT_EQ(choice.microBatch, 0);
  EXPECT_EQ(choice.trials.size(), 1u);
}

TEST(MicroBatchSearch, NotEvenOneSampleFits) {
  const MicroBatchChoice choice = searchMicroBatch(64, kMiB, kMiB + 1000, affine(0, 4096));
  EXPECT_EQ(choice.microBatch, 0);
  EXPECT_LE(static_cast<int>(choice.trials.size()), kMaxTrials);
  EXPECT_EQ(choice.trials.back().microBatch, 1);
}

TEST(MicroBatchSearch, NeverTriesMoreThanItsLimit) {
  // Memory that jumps about: no estimate holds, the search still ends.
  const MeasureMicroBatch erratic = [](std::int64_t size) {
    return measured((size % 7 + 1) * size * 1024);
  };
  const MicroBatchChoice choice = searchMicroBatch(1000, 0, 500 * 1024, erratic);
  EXPECT_LE(static_cast<int>(choice.trials.size()), kMaxTrials);
  for (const auto& trial : choice.trials) {
    EXPECT_GE(trial.microBatch, 1);
    EXPECT_LE(trial.microBatch, 1000);
  }
}

TEST(MicroBatchSearch, BalancedSizesMakeUpTheShareInTheFewestEqualParts) {
  EXPECT_EQ(balancedMicroBatch(128, 100), 64);
  EXPECT_EQ(balancedMicroBatch(128, 128), 128);
  EXPECT_EQ(balancedMicroBatch(128, 7), 7);  // 19 micro-batches
  EXPECT_EQ(balancedMicroBatch(100, 40), 34);
  EXPECT_EQ(balancedMicroBatch(128, 0), 0);
  for (std::int64_t share = 1; share < 300; share += 7)
    for (std::int64_t fits = 1; fits <= share; fits += 3) {
      const std::int64_t size = balancedMicroBatch(share, fits);
      EXPECT_LE(size, fits);
      EXPECT_EQ((share + size - 1) / size, (share + fits - 1) / fits) << share << " " << fits;
    }
}

}  // namespace
}  // namespace mb::train
