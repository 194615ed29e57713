#pragma once
// Note [Step checks]
// Each step's global gradient norm decides whether the update is taken (a non-finite norm
// skips it on every rank: the gradients are all-reduced, so every rank sees the same norm) and
// how much it is clipped. Reading the norm on the host every step (train.host_sync = step)
// stalls a GPU once per step: the host waits for the backward pass before it can queue the
// optimizer and the next step. With host_sync = log the decision stays on the device: the
// clip factor is a device tensor, non-finite gradients are zeroed, and the optimizer's update
// is multiplied by a 0/1 `apply` flag (Optimizer::step(lr, apply)). The host reads the pending
// norms in one transfer at log steps, before checkpoints and at the end: only then are
// skipped steps reported and counted towards train.max_bad_steps, so a run of bad steps stops
// at the next log step after the limit rather than exactly at it (those extra steps are
// skipped too, so the parameters are the same). CPU runs keep host_sync = step: there is no
// device to wait for, and the foreach update is cheaper there.
#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

#include "train/loop/TrainerState.h"

namespace mb::train {

class StepChecks {
 public:
  // `scaled`: fp16 loss scaling is on (Note [Loss scaling]): a check row is then [norm,
  // found_inf, the scale the step used], and an overflow counts as a bad step only at a scale
  // under `minScale`.
  StepChecks(bool scaled, double minScale) : scaled_(scaled), minScale_(minScale) {}

  // A finished step whose check (1-D double: [norm] or [norm, found_inf, scale]) the host has
  // not read yet.
  void add(std::int64_t step, at::Tensor check) { pending_.push_back({step, std::move(check)}); }
  // Reads the pending checks (one transfer), warns about skipped steps and updates the run of
  // consecutive bad steps in `state`; a no-op when nothing is pending.
  void settle(TrainerState& state);

  double lastGradNorm() const { return lastGradNorm_; }
  std::int64_t skippedInWindow() const { return skippedInWindow_; }
  void startWindow() { skippedInWindow_ = 0; }  // a new log window

 private:
  struct Pending {
    std::int64_t step = 0;
    at::Tensor values;
  };
  void settleScaled(TrainerState& state, double norm, bool overflow, double scale);

  bool scaled_;
  double minScale_;
  std::vector<Pending> pending_;
  std::int64_t skippedInWindow_ = 0;  // settled skipped steps of the current log window
  double lastGradNorm_ = 0;
};

}  // namespace mb::train
