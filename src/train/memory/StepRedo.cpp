#include "train/memory/StepRedo.h"

namespace mb::train {

StepRedo::StepRedo(bool enabled, c10::Device device) : enabled_(enabled), device_(device) {
  if (enabled_) rng_.emplace(device_);
}

void StepRedo::rewind() const {
  if (rng_) rng_->restore();
  releaseCachedDeviceMemory(device_);
}

}  // namespace mb::train
