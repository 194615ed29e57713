#include "train/watch/StepChecks.h"

#include <cmath>

#include <ATen/Functions.h>

#include "common/Log.h"

namespace mb::train {

void StepChecks::settle(TrainerState& state) {
  if (pending_.empty()) return;
  std::vector<at::Tensor> checks;
  for (const Pending& check : pending_)
    checks.push_back(check.values);
  at::Tensor host = at::stack(checks).to(at::kCPU, at::kDouble);  // [steps, 1 or 3]
  auto read = host.accessor<double, 2>();
  for (std::size_t i = 0; i < pending_.size(); ++i) {
    const auto row = static_cast<std::int64_t>(i);
    const double norm = read[row][0];
    lastGradNorm_ = norm;
    if (scaled_) {
      settleScaled(state, norm, read[row][1] > 0, read[row][2]);
      continue;
    }
    const bool skipped = !std::isfinite(norm);  // the rule both step paths apply
    state.badSteps = skipped ? state.badSteps + 1 : 0;
    if (!skipped) continue;
    ++skippedInWindow_;
    log::get("train").warn(
        "step {}: non-finite gradient norm ({}); update skipped on every rank ({} in a row)",
        pending_[i].step, norm, state.badSteps);
  }
  pending_.clear();
}

void StepChecks::settleScaled(TrainerState& state, double norm, bool overflow, double scale) {
  const bool skipped = overflow || !std::isfinite(norm);
  if (!skipped) {
    state.badSteps = 0;
    return;
  }
  ++skippedInWindow_;
  state.badSteps = scale < minScale_ ? state.badSteps + 1 : 0;
}

}  // namespace mb::train
