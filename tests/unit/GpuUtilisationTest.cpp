#include <vector>

#include <gtest/gtest.h>

#include "train/watch/GpuUtilisation.h"

namespace mb::train {
namespace {

// The windows (1-based) at which the warning is due for a run of utilisations.
std::vector<int> warnings(double threshold, const std::vector<double>& utilisations) {
  StarvationWatch watch(threshold);
  std::vector<int> due;
  for (std::size_t i = 0; i < utilisations.size(); ++i)
    if (watch.observe(utilisations[i])) due.push_back(static_cast<int>(i) + 1);
  return due;
}

TEST(GpuUtilisation, StarvationWarnsFromTheSecondAndThirdWindows) {
  // The first window (warm-up) is not judged; windows 2 and 3 are low: the warning is due at 3.
  EXPECT_EQ(warnings(70, {10, 10, 10}), std::vector<int>({3}));
  StarvationWatch watch(70);
  watch.observe(10);
  EXPECT_EQ(watch.lowWindows(), 0);
  EXPECT_FALSE(watch.observe(10));
  EXPECT_EQ(watch.lowWindows(), 1);
  EXPECT_TRUE(watch.observe(10));
  EXPECT_EQ(watch.lowWindows(), 2);
}

TEST(GpuUtilisation, StarvationRepeatsEvery20thLowWindowAndResets) {
  std::vector<double> low(1 + 45, 5.0);
  EXPECT_EQ(warnings(70, low), std::vector<int>({3, 23, 43}));
  // A window at or above the threshold starts the count again.
  EXPECT_EQ(warnings(70, {5, 5, 80, 5, 5, 70, 5}), std::vector<int>({5}));
}

TEST(GpuUtilisation, StarvationOffAtThresholdZero) {
  EXPECT_TRUE(warnings(0, std::vector<double>(30, 0.0)).empty());
}

}  // namespace
}  // namespace mb::train
