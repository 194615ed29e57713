#pragma once
// Every difference between LibTorch 1.13 (Debian, CPU) and LibTorch 2.x (CUDA wheels) lives
// here, so the rest of the code is written once.
#include <string>

#include <ATen/autocast_mode.h>
#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>
#include <torch/version.h>

#define MB_TORCH_VERSION_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||             \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace mb::compat {

inline std::string torchVersion() { return TORCH_VERSION; }

// --- autocast ---------------------------------------------------------------
// 1.13 has per-device free functions (set_cpu_enabled, set_autocast_cpu_dtype); 2.4+ takes the
// device type as an argument and deprecates the old names.
inline void setAutocast(c10::DeviceType device, bool enabled, at::ScalarType dtype) {
#if MB_TORCH_VERSION_AT_LEAST(2, 4)
  at::autocast::set_autocast_enabled(device, enabled);
  at::autocast::set_autocast_dtype(device, dtype);
#else
  if (device == c10::DeviceType::CUDA) {
    at::autocast::set_enabled(enabled);
    at::autocast::set_autocast_gpu_dtype(dtype);
  } else {
    at::autocast::set_cpu_enabled(enabled);
    at::autocast::set_autocast_cpu_dtype(dtype);
  }
#endif
}

inline bool autocastEnabled(c10::DeviceType device) {
#if MB_TORCH_VERSION_AT_LEAST(2, 4)
  return at::autocast::is_autocast_enabled(device);
#else
  return device == c10::DeviceType::CUDA ? at::autocast::is_enabled()
                                         : at::autocast::is_cpu_enabled();
#endif
}

// Autocast caches casted weights for the duration of a forward; clear it after each step so
// updated fp32 master weights are re-cast.
inline void clearAutocastCache() { at::autocast::clear_cache(); }

// --- attention --------------------------------------------------------------
// at::scaled_dot_product_attention (fused / flash kernels) arrived in 2.0.
constexpr bool kHasFusedAttention = MB_TORCH_VERSION_AT_LEAST(2, 0);

}  // namespace mb::compat
