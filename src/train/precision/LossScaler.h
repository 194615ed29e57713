#pragma once
// Note [Loss scaling]
// train.precision = fp16 autocasts the forward pass to float16, whose smallest normal value is
// 2^-14 and whose largest is 65504: small gradients underflow to zero in the fp16 parts of the
// backward pass. So the loss is multiplied by a scale S before backward (on every micro-step of
// gradient accumulation, since the gradients sum), the summed gradients are all-reduced as they
// are, and then divided by S once, before clipping, so that train.grad_clip and the grad_norm
// metric see the true gradients. The rules are torch.amp.GradScaler's, step for step:
//  - unscale: every gradient g *= float32(1 / double(S)); found_inf = some g held an inf or a
//    NaN (judged on the values before the multiplication, as GradScaler's kernel does);
//  - a step with found_inf is skipped (no optimizer update), S *= backoff_factor, and the
//    count of clean steps restarts at 0;
//  - a clean step counts; when the count reaches growth_interval, S *= growth_factor (kept only
//    if that is finite) and the count restarts.
// Ranks agree on every skip and on S without a collective of their own: found_inf is judged on
// the all-reduced gradients, which every rank holds bit for bit alike (an all-reduce returns
// one result to all ranks), so every rank computes the same flag and the same update. An inf on
// one rank makes the sum inf on all of them (tests/mpi/LossScalerTest.cpp).
// S is a float32 0-d tensor on the training device, as GradScaler's, so neither the unscale nor
// the update reads the host: with train.host_sync = log the host sees S and the skips only at
// log steps (Note [Step checks] in StepChecks.h).
// An overflow skip is normal: it is counted (skipped_steps and loss_scale in metrics.jsonl), not
// warned about. A scale that keeps falling means the gradients are not finite at any scale (a
// NaN in the data or the model, too high a learning rate): when train.max_bad_steps steps in a
// row overflow at a scale below train.loss_scale.min, the run stops, and its checkpoint holds
// the last good parameters. train.loss_scale.fixed > 0 is static scaling: S never changes
// (overflowing steps are still skipped).
#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "config/Config.h"

namespace mb::train {

class LossScaler {
 public:
  // A disabled scaler changes nothing and costs nothing (fp32 and bf16 runs).
  LossScaler(const LossScaleConfig& config, c10::Device device, bool enabled);

  bool enabled() const { return enabled_; }
  bool dynamic() const { return enabled_ && config_.fixed <= 0; }
  // loss * S (float32); `loss` itself when disabled.
  at::Tensor scaleLoss(const at::Tensor& loss) const;
  // Divides every gradient by S in place. Returns found_inf: a 0-d float32 on the device, 1 when
  // some gradient held an inf or a NaN. Undefined when disabled.
  at::Tensor unscale(const std::vector<at::Tensor>& grads) const;
  // GradScaler.update(found_inf): the backoff or the growth above (nothing for a fixed scale).
  void update(const at::Tensor& foundInf);

  // The current S, as a 0-d float32 on the device (no host read).
  const at::Tensor& scaleTensor() const { return scale_; }
  // The current S and count of clean steps (read the device).
  double scale() const;
  std::int64_t growthTracker() const;
  // Continues from saved values; `scale` <= 0 (a checkpoint written without a scaler, or by an
  // fp32 or bf16 run) starts from train.loss_scale.init instead.
  void restore(double scale, std::int64_t growthTracker);

 private:
  LossScaleConfig config_;
  bool enabled_;
  at::Tensor scale_;    // 0-d float32 on the device: S
  at::Tensor tracker_;  // 0-d int32 on the device: clean steps since the last change of S
};

namespace detail {
// GradScaler's fused kernels as tensor ops, for LibTorch builds without them on a device
// (compat::hasFusedAmpKernels); tests check them against the fused kernels where both exist.
void checkAndUnscale(const std::vector<at::Tensor>& grads, at::Tensor& foundInf,
                     const at::Tensor& invScale);
void updateScale(at::Tensor& scale, at::Tensor& tracker, const at::Tensor& foundInf, double growth,
                 double backoff, std::int64_t interval);
}  // namespace detail

}  // namespace mb::train
