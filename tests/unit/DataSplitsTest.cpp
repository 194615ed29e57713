// Note [Splits and embargo]: cut points, gaps, empty splits, and each rank's parts.
#include <gtest/gtest.h>

#include "common/Error.h"
#include "data/pipeline/Splits.h"

namespace mb::data {
namespace {

SplitConfig fractions(double train, double val, double test) {
  SplitConfig s;
  s.trainFraction = train;
  s.valFraction = val;
  s.testFraction = test;
  return s;
}

void expectRange(const SampleRange& r, std::int64_t begin, std::int64_t end) {
  EXPECT_EQ(r.begin, begin);
  EXPECT_EQ(r.end, end);
}

TEST(DataSplits, CutsWithoutAndWithAGap) {
  auto s = planSplits({0, 1000}, fractions(0.8, 0.1, 0.1), fixedGap(0), "f.h5");
  expectRange(s[0], 0, 800);
  expectRange(s[1], 800, 900);
  expectRange(s[2], 900, 1000);
  s = planSplits({100, 1100}, fractions(0.8, 0.1, 0.1), fixedGap(7), "f.h5");
  expectRange(s[0], 100, 900);
  expectRange(s[1], 907, 1000);
  expectRange(s[2], 1007, 1100);
}

TEST(DataSplits, ZeroFractionGivesAnEmptySplitAndOneGap) {
  auto s = planSplits({0, 1000}, fractions(0.9, 0.0, 0.1), fixedGap(5), "f.h5");
  expectRange(s[0], 0, 900);
  EXPECT_EQ(s[1].size(), 0);
  expectRange(s[2], 905, 1000);
  s = planSplits({0, 1000}, fractions(0.9, 0.1, 0.0), fixedGap(5), "f.h5");
  expectRange(s[1], 905, 1000);
  EXPECT_EQ(s[2].size(), 0);
}

TEST(DataSplits, TheGapCanDependOnThePreviousSplit) {
  // A rule like the series one: the next split starts 3 after the previous split's last sample.
  NextStart rule = [](std::int64_t previousLast, std::int64_t cut) {
    return std::max(cut, previousLast + 4);
  };
  auto s = planSplits({0, 100}, fractions(0.5, 0.25, 0.25), rule, "f.h5");
  expectRange(s[1], 53, 75);
  expectRange(s[2], 78, 100);
}

TEST(DataSplits, EmptySplitsAreErrorsThatSayWhy) {
  try {
    planSplits({0, 100}, fractions(0.8, 0.1, 0.1), fixedGap(30), "f.h5");
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("val split is empty"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("f.h5"), std::string::npos);
  }
  EXPECT_THROW(planSplits({0, 1}, fractions(0.5, 0.25, 0.25), fixedGap(0), "f.h5"), DataError);
}

TEST(DataSplits, EvalPartsTileTheSplit) {
  SampleRange split{100, 117};
  for (int world : {1, 2, 3, 5, 8, 20}) {
    std::int64_t next = split.begin;
    for (int r = 0; r < world; ++r) {
      SampleRange part = evalPart(split, r, world);
      EXPECT_EQ(part.begin, next);
      EXPECT_LE(part.size(), split.size() / world + 1);
      next = part.end;
    }
    EXPECT_EQ(next, split.end);
  }
}

TEST(DataSplits, TrainPartsAreWholeShardsOffsetByTheSplit) {
  GlobalOrder order(103, 8, 0, 16, true);
  for (int world : {1, 2, 3, 8}) {
    std::int64_t next = 50;
    for (int r = 0; r < world; ++r) {
      SampleRange part = trainPart({50, 153}, order, r, world);
      EXPECT_EQ(part.begin, next);
      next = part.end;
    }
    EXPECT_EQ(next, 153);
  }
}

}  // namespace
}  // namespace mb::data
