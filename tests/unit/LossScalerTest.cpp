// train::LossScaler (Note [Loss scaling]): torch.amp.GradScaler's rules for unscaling, skipping,
// backing off and growing, the fixed scale, restoring from a checkpoint, and the tensor-op
// fallback against LibTorch's fused kernels where this LibTorch has them for the device.
#include <cmath>
#include <limits>
#include <vector>

#include <ATen/Functions.h>
#include <gtest/gtest.h>

#include "common/TorchCompat.h"
#include "tests/support/Device.h"
#include "train/precision/LossScaler.h"

namespace mb::train {
namespace {

LossScaleConfig scaling(double init, double growth, double backoff, std::int64_t interval) {
  LossScaleConfig config;
  config.init = init;
  config.growthFactor = growth;
  config.backoffFactor = backoff;
  config.growthInterval = interval;
  return config;
}

at::Tensor flag(bool overflow) {
  return at::full({}, overflow ? 1.0 : 0.0, at::TensorOptions().device(test::device()));
}

TEST(LossScalerRules, GrowsAfterTheIntervalAndBacksOffOnOverflow) {
  LossScaler scaler(scaling(8.0, 2.0, 0.5, 3), test::device(), true);
  // GradScaler's sequence: clean steps count up to the interval, an overflow halves and resets.
  const std::vector<bool> overflows{false, false, false, false, true,
                                    false, false, false, true,  true};
  const std::vector<double> scales{8, 8, 16, 16, 8, 8, 8, 16, 8, 4};
  const std::vector<std::int64_t> trackers{1, 2, 0, 1, 0, 1, 2, 0, 0, 0};
  for (std::size_t i = 0; i < overflows.size(); ++i) {
    scaler.update(flag(overflows[i]));
    EXPECT_EQ(scaler.scale(), scales[i]) << "after step " << i + 1;
    EXPECT_EQ(scaler.growthTracker(), trackers[i]) << "after step " << i + 1;
  }
}

TEST(LossScalerRules, UnscaleDividesAndFlagsNonFiniteValues) {
  LossScaler scaler(scaling(4.0, 2.0, 0.5, 10), test::device(), true);
  auto options = at::TensorOptions().device(test::device());
  std::vector<at::Tensor> grads{at::full({3}, 8.0, options), at::full({2, 2}, -2.0, options)};
  at::Tensor found = scaler.unscale(grads);
  EXPECT_EQ(found.item<float>(), 0.0f);
  EXPECT_TRUE(at::equal(grads[0].cpu(), at::full({3}, 2.0)));
  EXPECT_TRUE(at::equal(grads[1].cpu(), at::full({2, 2}, -0.5)));
  for (double bad : {std::numeric_limits<double>::infinity(), std::nan("")}) {
    std::vector<at::Tensor> more{at::ones({4}, options), at::ones({4}, options)};
    more[1][2] = bad;
    EXPECT_EQ(scaler.unscale(more).item<float>(), 1.0f) << bad;
    EXPECT_EQ(more[0][0].item<float>(), 0.25f) << "finite gradients are still unscaled";
  }
}

TEST(LossScalerRules, ScaleLossMultiplies) {
  LossScaler scaler(scaling(1024.0, 2.0, 0.5, 10), test::device(), true);
  at::Tensor loss = at::full({}, 0.5, at::TensorOptions().device(test::device()));
  EXPECT_EQ(scaler.scaleLoss(loss).item<float>(), 512.0f);
  LossScaler off(scaling(1024.0, 2.0, 0.5, 10), test::device(), false);
  EXPECT_EQ(off.scaleLoss(loss).item<float>(), 0.5f);
  EXPECT_FALSE(off.unscale({loss}).defined()) << "a disabled scaler decides nothing";
}

TEST(LossScalerRules, GrowthToInfinityKeepsTheScale) {
  const double big = std::ldexp(1.0, 127);  // the largest power of two in float32
  LossScaler scaler(scaling(big, 2.0, 0.5, 1), test::device(), true);
  scaler.update(flag(false));
  EXPECT_EQ(scaler.scale(), big);
  EXPECT_EQ(scaler.growthTracker(), 0);
}

TEST(LossScalerRules, FixedScaleNeverChangesButStillFlags) {
  LossScaleConfig config = scaling(65536.0, 2.0, 0.5, 1);
  config.fixed = 128.0;
  LossScaler scaler(config, test::device(), true);
  EXPECT_FALSE(scaler.dynamic());
  for (bool overflow : {true, false, false, true})
    scaler.update(flag(overflow));
  EXPECT_EQ(scaler.scale(), 128.0);
  std::vector<at::Tensor> grads{at::full({1}, std::numeric_limits<float>::infinity(),
                                         at::TensorOptions().device(test::device()))};
  EXPECT_EQ(scaler.unscale(grads).item<float>(), 1.0f);
}

TEST(LossScalerRules, RestoresSavedValuesOrStartsAtInit) {
  LossScaler scaler(scaling(65536.0, 2.0, 0.5, 2000), test::device(), true);
  scaler.restore(512.0, 17);
  EXPECT_EQ(scaler.scale(), 512.0);
  EXPECT_EQ(scaler.growthTracker(), 17);
  scaler.restore(0.0, 0);  // a checkpoint without a scaler
  EXPECT_EQ(scaler.scale(), 65536.0);
  EXPECT_EQ(scaler.growthTracker(), 0);
}

// The tensor-op fallback (LibTorch 1.13's CPU) computes exactly what the fused kernels do.
TEST(LossScalerKernels, FallbackMatchesTheFusedKernels) {
  if (!compat::hasFusedAmpKernels(test::device().type()))
    GTEST_SKIP() << "this LibTorch has no fused loss-scaling kernels on " << test::device().str()
                 << " (LibTorch 2.6 and CUDA builds compare them)";
  auto options = at::TensorOptions().device(test::device());
  at::manual_seed(3);
  for (bool poison : {false, true}) {
    std::vector<at::Tensor> a{at::randn({17}, options) * 1e4, at::randn({3, 5}, options)};
    if (poison) a[1][1][2] = std::numeric_limits<float>::infinity();
    std::vector<at::Tensor> b{a[0].clone(), a[1].clone()};
    at::Tensor inv = at::full({}, 1.0 / 3.0, options.dtype(at::kFloat));
    at::Tensor foundA = at::zeros({}, options.dtype(at::kFloat)), foundB = foundA.clone();
    at::_amp_foreach_non_finite_check_and_unscale_(a, foundA, inv);
    detail::checkAndUnscale(b, foundB, inv);
    EXPECT_TRUE(at::equal(foundA, foundB)) << "poison " << poison;
    for (std::size_t i = 0; i < a.size(); ++i)
      EXPECT_TRUE(at::equal(a[i].nan_to_num(), b[i].nan_to_num())) << "grad " << i;
  }
  for (double backoff : {0.5, 0.3}) {
    for (int tracker : {0, 2, 4}) {
      for (bool overflow : {false, true}) {
        at::Tensor scaleA = at::full({}, 1000.7, options.dtype(at::kFloat)),
                   scaleB = scaleA.clone();
        at::Tensor trackA = at::full({}, tracker, options.dtype(at::kInt)), trackB = trackA.clone();
        at::_amp_update_scale_(scaleA, trackA, flag(overflow), 3.1, backoff, 5);
        detail::updateScale(scaleB, trackB, flag(overflow), 3.1, backoff, 5);
        EXPECT_TRUE(at::equal(scaleA, scaleB)) << backoff << " " << tracker << " " << overflow;
        EXPECT_TRUE(at::equal(trackA, trackB)) << backoff << " " << tracker << " " << overflow;
      }
    }
  }
}

}  // namespace
}  // namespace mb::train
