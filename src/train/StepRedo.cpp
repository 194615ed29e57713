#include "train/StepRedo.h"

#include <ATen/Functions.h>

#include "dist/Communicator.h"

namespace mb::train {

StepRedo::StepRedo(bool enabled, c10::Device device) : enabled_(enabled), device_(device) {
  if (enabled_) rng_.emplace(device_);
}

int StepRedo::rankThatRanOut(dist::Communicator& control, bool ranOutHere, int rank) const {
  if (!enabled_) return -1;
  at::Tensor who = at::full({1}, ranOutHere ? rank : -1, at::kInt);
  control.allReduce(who, dist::ReduceOp::kMax, "did a rank run out of memory");
  return who.item<int>();
}

void StepRedo::rewind() const {
  if (rng_) rng_->restore();
  releaseCachedDeviceMemory(device_);
}

}  // namespace mb::train
