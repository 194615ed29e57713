#pragma once
// BF16 autocast with fp32 master weights (DESIGN.md "Precision and speed on GPU"): inside an
// AutocastScope, matmul-heavy ops run in bf16 while parameters, optimizer state and
// reductions stay fp32. On CUDA, TF32 and cuDNN benchmark are switched on once at start-up.
#include <c10/core/DeviceType.h>

#include "common/TorchCompat.h"
#include "config/Config.h"

namespace mb::train {

class AutocastScope {
 public:
  AutocastScope(c10::DeviceType device, DType precision)
      : device_(device), enabled_(precision == DType::kBf16) {
    if (!enabled_) return;
    previous_ = compat::autocastEnabled(device_);
    compat::setAutocast(device_, true, at::kBFloat16);
  }
  ~AutocastScope() {
    if (!enabled_) return;
    compat::setAutocast(device_, previous_, at::kBFloat16);
    // Casted weight copies are cached per forward; the next forward must see updated weights.
    compat::clearAutocastCache();
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  c10::DeviceType device_;
  bool enabled_;
  bool previous_ = false;
};

// TF32 matmuls and cuDNN autotuning for fixed shapes (CUDA only; no-ops on CPU).
void enableFastCudaMath();

}  // namespace mb::train
