// Dynamic loss scaling for fp16 (Note [Loss scaling] in LossScaler.h).
#include "train/precision/LossScaler.h"

#include <ATen/Functions.h>
#include <c10/core/GradMode.h>

#include "common/TorchCompat.h"

namespace mb::train {
namespace detail {

// GradScaler's _amp_foreach_non_finite_check_and_unscale_, as tensor ops (where LibTorch has no
// fused kernel for the device): the same float32 products, the same flag.
void checkAndUnscale(const std::vector<at::Tensor>& grads, at::Tensor& foundInf,
                     const at::Tensor& invScale) {
  for (const at::Tensor& grad : grads) {
    foundInf.add_(at::isfinite(grad).logical_not().any());
    grad.mul_(invScale);
  }
  foundInf.clamp_max_(1.0);
}

// GradScaler's _amp_update_scale_, as tensor ops: the products in double, rounded to float32
// once, as the fused kernel computes them.
void updateScale(at::Tensor& scale, at::Tensor& tracker, const at::Tensor& foundInf, double growth,
                 double backoff, std::int64_t interval) {
  const at::Tensor overflow = foundInf > 0;
  const at::Tensor counted = tracker + 1;
  const at::Tensor grow = counted == interval;
  const at::Tensor wide = scale.to(at::kDouble);
  const at::Tensor grown = (wide * growth).to(at::kFloat);
  const at::Tensor backedOff = (wide * backoff).to(at::kFloat);
  at::Tensor kept = at::where(grow.logical_and(at::isfinite(grown)), grown, scale);
  scale.copy_(at::where(overflow, backedOff, kept));
  tracker.copy_(at::where(overflow.logical_or(grow), at::zeros_like(counted), counted));
}

}  // namespace detail

using detail::checkAndUnscale;
using detail::updateScale;

LossScaler::LossScaler(const LossScaleConfig& config, c10::Device device, bool enabled)
    : config_(config), enabled_(enabled) {
  if (!enabled_) return;
  const double initial = config_.fixed > 0 ? config_.fixed : config_.init;
  scale_ = at::full({}, initial, at::TensorOptions().device(device).dtype(at::kFloat));
  tracker_ = at::zeros({}, at::TensorOptions().device(device).dtype(at::kInt));
}

at::Tensor LossScaler::scaleLoss(const at::Tensor& loss) const {
  return enabled_ ? loss * scale_ : loss;
}

at::Tensor LossScaler::unscale(const std::vector<at::Tensor>& grads) const {
  if (!enabled_) return {};
  c10::NoGradGuard noGrad;
  at::Tensor foundInf = at::zeros({}, scale_.options());
  // GradScaler: inv_scale = scale.double().reciprocal().float().
  const at::Tensor invScale = scale_.to(at::kDouble).reciprocal().to(at::kFloat);
  if (compat::hasFusedAmpKernels(scale_.device().type()))
    at::_amp_foreach_non_finite_check_and_unscale_(grads, foundInf, invScale);
  else
    checkAndUnscale(grads, foundInf, invScale);
  return foundInf;
}

void LossScaler::update(const at::Tensor& foundInf) {
  if (!dynamic()) return;
  c10::NoGradGuard noGrad;
  if (compat::hasFusedAmpKernels(scale_.device().type()))
    at::_amp_update_scale_(scale_, tracker_, foundInf, config_.growthFactor, config_.backoffFactor,
                           config_.growthInterval);
  else
    updateScale(scale_, tracker_, foundInf, config_.growthFactor, config_.backoffFactor,
                config_.growthInterval);
}

double LossScaler::scale() const {
  return enabled_ ? scale_.item<double>() : 1.0;
}

std::int64_t LossScaler::growthTracker() const {
  return enabled_ ? tracker_.item<std::int64_t>() : 0;
}

void LossScaler::restore(double scale, std::int64_t growthTracker) {
  if (!enabled_ || config_.fixed > 0) return;
  const bool saved = scale > 0;
  scale_.fill_(saved ? scale : config_.init);
  tracker_.fill_(saved ? growthTracker : 0);
}

}  // namespace mb::train
