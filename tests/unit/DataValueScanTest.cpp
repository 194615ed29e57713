// The value scans behind the load-time checks: first bad row for every dtype, across block
// boundaries, and nothing reported for clean data.
#include <gtest/gtest.h>

#include <limits>

#include <ATen/Functions.h>

#include "data/pipeline/ValueScan.h"

namespace mb::data {
namespace {

TEST(DataValueScan, FindsTheFirstNonFiniteRowInEveryFloatType) {
  for (at::ScalarType type : {at::kFloat, at::kDouble, at::kBFloat16, at::kHalf}) {
    at::Tensor t = at::randn({70001, 3}).to(type);  // several scan blocks
    EXPECT_EQ(firstNonFiniteRow(t), -1) << c10::toString(type);
    t[69999][2] = std::numeric_limits<float>::infinity();
    EXPECT_EQ(firstNonFiniteRow(t), 69999) << c10::toString(type);
    t[40000][0] = std::numeric_limits<float>::quiet_NaN();
    EXPECT_EQ(firstNonFiniteRow(t), 40000) << c10::toString(type);
    t[3][1] = -std::numeric_limits<float>::infinity();
    EXPECT_EQ(firstNonFiniteRow(t), 3) << c10::toString(type);
  }
  // Large finite values and subnormals are finite.
  at::Tensor edge = at::tensor(
      {std::numeric_limits<float>::max(), std::numeric_limits<float>::denorm_min(), -0.0f});
  EXPECT_EQ(firstNonFiniteRow(edge), -1);
  EXPECT_EQ(firstNonFiniteRow(at::empty({0, 4})), -1);
}

TEST(DataValueScan, FindsTheFirstOutOfRangeRowInEveryIntegerType) {
  for (at::ScalarType type : {at::kByte, at::kChar, at::kShort, at::kInt, at::kLong}) {
    at::Tensor t = at::full({100000}, 5, at::TensorOptions().dtype(type));
    EXPECT_EQ(firstOutOfRangeRow(t, 0, 6), -1) << c10::toString(type);
    EXPECT_EQ(firstOutOfRangeRow(t, 0, 5), 0) << c10::toString(type);
    t[77777] = 9;
    EXPECT_EQ(firstOutOfRangeRow(t, 0, 6), 77777) << c10::toString(type);
  }
  at::Tensor labels = at::zeros({10, 1}, at::kLong);
  labels[6][0] = -1;
  EXPECT_EQ(firstOutOfRangeRow(labels, 0, std::numeric_limits<std::int64_t>::max()), 6);
}

}  // namespace
}  // namespace mb::data
