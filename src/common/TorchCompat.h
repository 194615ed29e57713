#pragma once
// Every difference between LibTorch 1.13 (Debian, CPU) and LibTorch 2.x (CUDA wheels) lives
// here, so the rest of the code is written once.
#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include <ATen/Context.h>
#include <ATen/Functions.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>
#include <c10/util/Exception.h>
#include <torch/version.h>

#define MB_TORCH_VERSION_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||             \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace mb::compat {

inline std::string torchVersion() {
  return TORCH_VERSION;
}

// c10::optional became an alias of std::optional in 2.4, and at:: signatures take std::optional
// since; before, it was a class of its own.
#if MB_TORCH_VERSION_AT_LEAST(2, 4)
template <class T>
using Optional = std::optional<T>;
#else
template <class T>
using Optional = c10::optional<T>;
#endif

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

inline at::ScalarType autocastDtype(c10::DeviceType device) {
#if MB_TORCH_VERSION_AT_LEAST(2, 4)
  return at::autocast::get_autocast_dtype(device);
#else
  return device == c10::DeviceType::CUDA ? at::autocast::get_autocast_gpu_dtype()
                                         : at::autocast::get_autocast_cpu_dtype();
#endif
}

// Autocast caches casted weights for the duration of a forward; clear it after each step so
// updated fp32 master weights are re-cast.
inline void clearAutocastCache() {
  at::autocast::clear_cache();
}

// fp16 autocast on the CPU arrived in 2.2 (1.13's CPU autocast takes bf16 only and fails on
// half); on CUDA it works in every version.
constexpr bool kCpuHalfAutocast = MB_TORCH_VERSION_AT_LEAST(2, 2);

// --- loss scaling -------------------------------------------------------------
// GradScaler's fused kernels (_amp_foreach_non_finite_check_and_unscale_, _amp_update_scale_)
// exist for CUDA in every version, for the CPU in 2.x (checked in 2.6's headers; 1.13 has none).
// Where they are missing, LossScaler.cpp computes the same with tensor ops.
inline bool hasFusedAmpKernels(c10::DeviceType device) {
  return device == c10::DeviceType::CUDA ||
         (device == c10::DeviceType::CPU && MB_TORCH_VERSION_AT_LEAST(2, 6));
}

// --- TF32 (CUDA) ------------------------------------------------------------
// TF32 for cuBLAS matmuls and cuDNN convolutions / RNNs; no effect on the CPU. These legacy
// setters compile and behave alike on 1.13 through the newest 2.x. From 2.9, setAllowTF32CuDNN
// prints a one-time runtime notice in favour of setFloat32Precision, whose signature changed
// between 2.7 (strings) and later releases (enums): switch here once a GPU build can compile the
// new call (only 1.13 and 2.6 are compiled by CI). Mixing the two APIs is an error in 2.9+, so
// every caller goes through this function.
inline void setTf32(bool enabled) {
  at::globalContext().setAllowTF32CuBLAS(enabled);
  at::globalContext().setAllowTF32CuDNN(enabled);
}

// --- allocators -------------------------------------------------------------
// c10::Allocator::allocate is const before 2.3 and not since (pytorch PR 120969); 2.3 also
// added copy_data, pure virtual, which an allocator must then define (CpuAllocationScope.cpp).
#if MB_TORCH_VERSION_AT_LEAST(2, 3)
#define MB_ALLOCATOR_CONST
#else
#define MB_ALLOCATOR_CONST const
#endif

// --- attention --------------------------------------------------------------
// at::scaled_dot_product_attention (fused / flash kernels) arrived in 2.0.
constexpr bool kHasFusedAttention = MB_TORCH_VERSION_AT_LEAST(2, 0);

// softmax(q k^T / sqrt(D) + mask) v for q [B, H, Tq, D], k and v [B, H, Tk, D].
// `causal` masks key j > query i (top-left aligned, so only meaningful when Tq == Tk);
// `mask` (bool [Tq, Tk], true = may attend) covers the other cases; at most one of the two.
// 2.x runs the fused kernel (flash attention on CUDA); 1.13 runs the same math as two GEMMs,
// with the softmax in fp32 as the fused kernels do.
inline at::Tensor scaledDotProductAttention(const at::Tensor& q, const at::Tensor& k,
                                            const at::Tensor& v, const at::Tensor& mask,
                                            bool causal, double dropout, bool training) {
  double p = training ? dropout : 0.0;
#if MB_TORCH_VERSION_AT_LEAST(2, 0)
  Optional<at::Tensor> attnMask;
  if (mask.defined()) attnMask = mask;
  return at::scaled_dot_product_attention(q, k, v, attnMask, p, causal);
#else
  // One batched GEMM computes scale * q k^T + bias, with bias 0 where a key may be seen and
  // -inf elsewhere, so scaling and masking cost no extra passes over the [B, H, Tq, Tk]
  // scores, forward or backward (the GEMM initialises its output from bias either way).
  const std::int64_t b = q.size(0), h = q.size(1), tq = q.size(2), tk = k.size(2);
  const std::int64_t d = q.size(3);
  at::Tensor q3 = q.reshape({b * h, tq, d});
  at::Tensor kT = k.reshape({b * h, tk, d}).transpose(1, 2);  // [B*H, D, Tk]
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const double minusInf = -std::numeric_limits<double>::infinity();
  at::Tensor bias;
  if (causal) {
    bias = at::full({tq, tk}, minusInf, q.options()).triu(1);
  } else if (mask.defined()) {
    bias = at::zeros({tq, tk}, q.options()).masked_fill(mask.logical_not(), minusInf);
  }
  at::Tensor scores = bias.defined() ? at::baddbmm(bias, q3, kT, /*beta=*/1.0, /*alpha=*/scale)
                                     : at::bmm(q3, kT).mul(scale);  // [B*H, Tq, Tk]
  at::Tensor weights = at::softmax(scores.to(at::kFloat), -1).to(v.scalar_type());
  if (p > 0.0) weights = at::dropout(weights, p, true);
  return at::bmm(weights, v.reshape({b * h, tk, d})).view({b, h, tq, d});
#endif
}

// --- scatter_reduce -------------------------------------------------------------
// Tensor::scatter_reduce (the same signature in 1.13 and 2.x) prints "scatter_reduce() is in
// beta" once per process; the graph models call it every step, so the notice is dropped. The
// warning handler's interface changed in 2.0 (c10::Warning became a class).
namespace detail {
#if MB_TORCH_VERSION_AT_LEAST(2, 0)
class QuietWarnings : public c10::WarningHandler {
 public:
  void process(const c10::Warning& /*warning*/) override {}
};
using WarningGuard = c10::WarningUtils::WarningHandlerGuard;
#else
class QuietWarnings : public c10::WarningHandler {
 public:
  void process(const c10::SourceLocation& /*where*/, const std::string& /*message*/,
               bool /*verbatim*/) override {}
};
using WarningGuard = c10::Warning::WarningHandlerGuard;
#endif
}  // namespace detail

inline at::Tensor scatterReduce(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                                const at::Tensor& src, c10::string_view reduce, bool includeSelf) {
  static detail::QuietWarnings quiet;
  detail::WarningGuard guard(&quiet);
  return self.scatter_reduce(dim, index, src, reduce, includeSelf);
}

}  // namespace mb::compat
