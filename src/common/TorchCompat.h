#pragma once
// Every difference between LibTorch 1.13 (Debian, CPU) and LibTorch 2.x (CUDA wheels) lives
// here, so the rest of the code is written once.
#include <cmath>
#include <limits>
#include <string>

#include <ATen/Functions.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>
#include <torch/version.h>

#define MB_TORCH_VERSION_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||             \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace mb::compat {

inline std::string torchVersion() {
  return TORCH_VERSION;
}

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
inline void clearAutocastCache() {
  at::autocast::clear_cache();
}

// --- attention --------------------------------------------------------------
// at::scaled_dot_product_attention (fused / flash kernels) arrived in 2.0.
constexpr bool kHasFusedAttention = MB_TORCH_VERSION_AT_LEAST(2, 0);

// softmax(q k^T / sqrt(D) + mask) v for q [B, H, Tq, D], k and v [B, H, Tk, D].
// `causal` masks key j > query i (top-left aligned, so only meaningful when Tq == Tk);
// `mask` (bool [Tq, Tk], true = may attend) covers the other cases; at most one of the two.
// 2.x runs the fused kernel (flash attention on CUDA); 1.13 runs the same math step by step,
// with the softmax in fp32 as the fused kernels do.
inline at::Tensor scaledDotProductAttention(const at::Tensor& q, const at::Tensor& k,
                                            const at::Tensor& v, const at::Tensor& mask,
                                            bool causal, double dropout, bool training) {
  double p = training ? dropout : 0.0;
#if MB_TORCH_VERSION_AT_LEAST(2, 0)
  c10::optional<at::Tensor> attnMask;
  if (mask.defined()) attnMask = mask;
  return at::scaled_dot_product_attention(q, k, v, attnMask, p, causal);
#else
  at::Tensor scores = at::matmul(q, k.transpose(-2, -1)).to(at::kFloat);  // [B, H, Tq, Tk]
  scores = scores.mul(1.0 / std::sqrt(static_cast<double>(q.size(-1))));
  if (causal) {
    at::Tensor above = at::ones({q.size(-2), k.size(-2)}, q.options().dtype(at::kBool)).triu(1);
    scores = scores.masked_fill(above, -std::numeric_limits<float>::infinity());
  } else if (mask.defined()) {
    scores = scores.masked_fill(mask.logical_not(), -std::numeric_limits<float>::infinity());
  }
  at::Tensor weights = at::softmax(scores, -1).to(v.scalar_type());
  if (p > 0.0) weights = at::dropout(weights, p, true);
  return at::matmul(weights, v);  // [B, H, Tq, D]
#endif
}

}  // namespace mb::compat
