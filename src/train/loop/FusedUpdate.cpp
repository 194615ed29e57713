// Fused CPU optimizer loops (Note [Fused CPU update] in FusedUpdate.h).
#include "train/loop/FusedUpdate.h"

#include <cmath>

#include <ATen/Parallel.h>

namespace mb::train::fused {
namespace {

// Elements per task of at::parallel_for: small tensors run inline on the calling thread.
constexpr std::int64_t kGrain = 32768;

float* data(const at::Tensor& t) {
  return t.data_ptr<float>();
}

}  // namespace

bool eligible(const std::vector<at::Tensor>& tensors) {
  for (const at::Tensor& t : tensors) {
    if (!t.defined() || !t.device().is_cpu() || t.scalar_type() != at::kFloat || !t.is_contiguous())
      return false;
  }
  return true;
}

double norm(const std::vector<at::Tensor>& grads) {
  double sum = 0.0;
  for (const at::Tensor& g : grads) {
    const float* x = data(g);
    sum += at::parallel_reduce(
        0, g.numel(), kGrain, 0.0,
        [x](std::int64_t begin, std::int64_t end, double partial) {
          for (std::int64_t i = begin; i < end; ++i)
            partial += static_cast<double>(x[i]) * static_cast<double>(x[i]);
          return partial;
        },
        [](double a, double b) { return a + b; });
  }
  return std::sqrt(sum);
}

void adam(const at::Tensor& param, const at::Tensor& grad, const at::Tensor& expAvg,
          const at::Tensor& expAvgSq, const AdamCoefficients& c) {
  float* p = data(param);
  float* g = data(grad);
  float* m = data(expAvg);
  float* v = data(expAvgSq);
  at::parallel_for(0, param.numel(), kGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      float gi = g[i] * c.gradScale;
      if (c.l2 != 0.0f) gi = gi + c.l2 * p[i];
      g[i] = gi;
      float pi = p[i] * c.decay;
      const float mi = m[i] * c.beta1 + c.oneMinusBeta1 * gi;
      const float vi = v[i] * c.beta2 + c.oneMinusBeta2 * gi * gi;
      const float denominator = std::sqrt(vi) / c.correction2Root + c.eps;
      pi = pi + c.stepSize * mi / denominator;
      m[i] = mi;
      v[i] = vi;
      p[i] = pi;
    }
  });
}

void sgd(const at::Tensor& param, const at::Tensor& grad, const at::Tensor& buffer,
         const SgdCoefficients& c) {
  float* p = data(param);
  float* g = data(grad);
  float* b = buffer.defined() ? data(buffer) : nullptr;
  at::parallel_for(0, param.numel(), kGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      float gi = g[i] * c.gradScale;
      if (c.l2 != 0.0f) gi = gi + c.l2 * p[i];
      float update = gi;
      if (b != nullptr) {
        const float bi = c.first ? gi : b[i] * c.momentum + gi;
        b[i] = bi;
        update = c.nesterov ? gi + c.momentum * bi : bi;
      }
      g[i] = gi;
      p[i] = p[i] + c.negativeLr * update;
    }
  });
}

}  // namespace mb::train::fused
