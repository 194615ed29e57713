#include <algorithm>

#include <gtest/gtest.h>

#include "train/watch/Progress.h"

namespace mb::train {
namespace {

TEST(ProgressBar, ShowsStepLossRateEtaAndMemory) {
  std::string line =
      ProgressBar::render(1200, 5000, 1.40234, 3.2e-3, 1850.4, 123, 218.0 * (1 << 20), 120);
  EXPECT_NE(line.find("step 1200/5000 ["), std::string::npos) << line;
  EXPECT_NE(line.find(" 24% | loss 1.4023 | lr 0.0032 | 1850 samples/s | eta 2m03s | rss 218"),
            std::string::npos)
      << line;
  EXPECT_LE(line.size(), 119u);
}

TEST(ProgressBar, BarFillFollowsTheFraction) {
  std::string half = ProgressBar::render(50, 100, 1, 1e-3, 1, 1, 1, 200);
  std::size_t open = half.find('['), close = half.find(']');
  ASSERT_NE(open, std::string::npos);
  std::string cells = half.substr(open + 1, close - open - 1);
  EXPECT_EQ(cells.size(), 30u);
  EXPECT_EQ(std::count(cells.begin(), cells.end(), '#'), 15);
}

TEST(ProgressBar, NoLossYetAndNarrowTerminals) {
  std::string line = ProgressBar::render(1, 10, -1, 1e-3, 5, 9, 1, 40);
  EXPECT_EQ(line.find('['), std::string::npos) << "no room for a bar in 40 columns: " << line;
  EXPECT_LE(line.size(), 39u);
  EXPECT_NE(ProgressBar::render(1, 10, -1, 1e-3, 5, 9, 1, 200).find("loss -"), std::string::npos);
}

TEST(ProgressBar, LinesModeAndOtherRanksDrawNothing) {
  EXPECT_FALSE(ProgressBar(ProgressKind::kLines, true).enabled());
  EXPECT_FALSE(ProgressBar(ProgressKind::kBar, false).enabled());
  EXPECT_TRUE(ProgressBar(ProgressKind::kBar, true).enabled());
}

}  // namespace
}  // namespace mb::train
