#pragma once
// Note [Fused CPU update]
// On the CPU, the gradient norm, the clip and the optimizer update are one pass over each
// parameter's elements instead of a foreach kernel per operation. LibTorch's CPU foreach ops
// loop over the tensors one at a time and, in 1.13, wrap every scalar into a tensor that is
// copied per tensor: AdamW over the 19 tensors of the GIN benchmark model was ~600 operators a
// step (bench/profile_ops.py), a quarter of its step time. The fused loops compute what the
// foreach path computes, operation by operation in float32 (the same formulas as
// torch.optim.AdamW / Adam / SGD's multi-tensor code), so results agree with it to float
// rounding; the norm accumulates in double. They apply when every parameter, gradient and
// state tensor is a contiguous float32 CPU tensor; anything else takes the foreach path
// (CUDA, where foreach kernels are truly fused, and other dtypes).
#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

namespace mb::train::fused {

// True when `tensors` are all defined, contiguous float32 CPU tensors.
bool eligible(const std::vector<at::Tensor>& tensors);

// sqrt(sum of squares) over every element of `grads`, accumulated in double.
double norm(const std::vector<at::Tensor>& grads);

// One Adam or AdamW update of one parameter (all float32 arithmetic, in this order):
//   g *= gradScale;  g += l2 * p (Adam's L2);  p *= decay (AdamW);
//   m = m * beta1 + (1 - beta1) * g;  v = v * beta2 + (1 - beta2) * g * g;
//   p += stepSize * m / (sqrt(v) / correction2Root + eps)
// `g` is rewritten with the scaled gradient (as the in-place foreach path leaves it).
struct AdamCoefficients {
  float gradScale = 1.0f;
  float l2 = 0.0f;
  float decay = 1.0f;
  float beta1 = 0.9f, oneMinusBeta1 = 0.1f;
  float beta2 = 0.999f, oneMinusBeta2 = 0.001f;
  float correction2Root = 1.0f;
  float eps = 1e-8f;
  float stepSize = 0.0f;  // -lr / (1 - beta1^t)
};
void adam(const at::Tensor& param, const at::Tensor& grad, const at::Tensor& expAvg,
          const at::Tensor& expAvgSq, const AdamCoefficients& c);

// One SGD update (torch.optim.SGD: no dampening): g *= gradScale; g += l2 * p;
// buffer = first ? g : buffer * momentum + g; update = nesterov ? g + momentum * buffer : buffer
// (or g without momentum); p += -lr * update.
struct SgdCoefficients {
  float gradScale = 1.0f;
  float l2 = 0.0f;
  float momentum = 0.0f;
  bool nesterov = false;
  bool first = false;  // the first update: the buffer is the gradient itself
  float negativeLr = 0.0f;
};
void sgd(const at::Tensor& param, const at::Tensor& grad, const at::Tensor& buffer,
         const SgdCoefficients& c);

}  // namespace mb::train::fused
