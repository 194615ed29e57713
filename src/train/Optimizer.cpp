#include "train/Optimizer.h"

#include <cmath>

#include <ATen/Functions.h>
#include <c10/util/irange.h>

#include "common/Error.h"

namespace mb::train {
namespace {

// Parameters (and matching state) grouped for foreach calls: only those with gradients.
struct Group {
  std::vector<at::Tensor> params, grads, first, second;
};

}  // namespace

Optimizer::Optimizer(const OptimConfig& config, NamedTensors parameters)
    : config_(config), parameters_(std::move(parameters)) {
  for (const auto& [name, p] : parameters_)
    decays_.push_back(p.dim() >= 2);
  ensureState();
}

void Optimizer::ensureState() {
  if (!expAvg_.empty() || !momentum_.empty()) return;
  for (const auto& [name, p] : parameters_) {
    if (config_.name == OptimizerKind::kSgd) {
      momentum_.push_back(at::zeros_like(p, at::MemoryFormat::Contiguous));
    } else {
      expAvg_.push_back(at::zeros_like(p, at::MemoryFormat::Contiguous));
      expAvgSq_.push_back(at::zeros_like(p, at::MemoryFormat::Contiguous));
    }
  }
}

void Optimizer::step(double lr) {
  ++steps_;
  if (config_.name == OptimizerKind::kSgd) {
    stepSgd(lr);
  } else {
    stepAdam(lr, config_.name == OptimizerKind::kAdamW);
  }
}

void Optimizer::stepAdam(double lr, bool decoupled) {
  Group g;
  std::vector<at::Tensor> decayed, decayedGrads;
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    const at::Tensor& p = parameters_[i].second;
    if (!p.grad().defined()) continue;
    g.params.push_back(p);
    g.grads.push_back(p.grad());
    g.first.push_back(expAvg_[i]);
    g.second.push_back(expAvgSq_[i]);
    if (decays_[i] && config_.weightDecay > 0) {
      decayed.push_back(p);
      decayedGrads.push_back(p.grad());
    }
  }
  if (g.params.empty()) return;
  at::NoGradGuard noGrad;
  if (!decayed.empty()) {
    if (decoupled) {
      at::_foreach_mul_(decayed, 1.0 - lr * config_.weightDecay);
    } else {
      // Adam's L2 term joins the gradient (in place: grads are rewritten every step anyway).
      at::_foreach_add_(decayedGrads, decayed, config_.weightDecay);
    }
  }
  const double beta1 = config_.beta1, beta2 = config_.beta2;
  at::_foreach_mul_(g.first, beta1);
  at::_foreach_add_(g.first, g.grads, 1.0 - beta1);
  at::_foreach_mul_(g.second, beta2);
  at::_foreach_addcmul_(g.second, g.grads, g.grads, 1.0 - beta2);
  const double biasCorrection1 = 1.0 - std::pow(beta1, static_cast<double>(steps_));
  const double biasCorrection2 = 1.0 - std::pow(beta2, static_cast<double>(steps_));
  std::vector<at::Tensor> denominators = at::_foreach_sqrt(g.second);
  at::_foreach_div_(denominators, std::sqrt(biasCorrection2));
  at::_foreach_add_(denominators, config_.eps);
  at::_foreach_addcdiv_(g.params, g.first, denominators, -lr / biasCorrection1);
}

void Optimizer::stepSgd(double lr) {
  at::NoGradGuard noGrad;
  std::vector<at::Tensor> params, grads, buffers;
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    const at::Tensor& p = parameters_[i].second;
    if (!p.grad().defined()) continue;
    at::Tensor grad = p.grad();
    if (decays_[i] && config_.weightDecay > 0) grad.add_(p, config_.weightDecay);
    params.push_back(p);
    grads.push_back(grad);
    buffers.push_back(momentum_[i]);
  }
  if (params.empty()) return;
  if (config_.momentum > 0) {
    // torch.optim.SGD: the first step's buffer is the gradient itself (no dampening).
    if (steps_ == 1) {
      for (auto i : c10::irange(buffers.size()))
        buffers[i].copy_(grads[i]);
    } else {
      at::_foreach_mul_(buffers, config_.momentum);
      at::_foreach_add_(buffers, grads);
    }
    if (config_.nesterov) {
      at::_foreach_add_(grads, buffers, config_.momentum);
    } else {
      grads = buffers;
    }
  }
  at::_foreach_add_(params, grads, -lr);
}

void Optimizer::zeroGrad() {
  std::vector<at::Tensor> grads;
  for (const auto& [name, p] : parameters_) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  if (!grads.empty()) at::_foreach_zero_(grads);
}

NamedTensors Optimizer::state() const {
  NamedTensors out;
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    const std::string& name = parameters_[i].first;
    if (config_.name == OptimizerKind::kSgd) {
      out.emplace_back(name + "/momentum_buffer", momentum_[i]);
    } else {
      out.emplace_back(name + "/exp_avg", expAvg_[i]);
      out.emplace_back(name + "/exp_avg_sq", expAvgSq_[i]);
    }
  }
  return out;
}

void Optimizer::loadState(const NamedTensors& state, std::int64_t steps) {
  at::NoGradGuard noGrad;
  NamedTensors mine = this->state();
  for (auto& [name, target] : mine) {
    const at::Tensor* source = nullptr;
    for (const auto& [candidate, tensor] : state) {
      if (candidate == name) source = &tensor;
    }
    if (source == nullptr)
      throw CheckpointError(
          "optimizer state '" + name + "' is missing from the checkpoint",
          "was the checkpoint written with another optim.name? Resume with the same optimizer");
    if (source->sizes() != target.sizes())
      throw CheckpointError("optimizer state '" + name + "' has shape " +
                            c10::str(source->sizes()) + " in the checkpoint but the model needs " +
                            c10::str(target.sizes()));
    target.copy_(*source);
  }
  steps_ = steps;
}

double learningRate(const OptimConfig& config, std::int64_t step, std::int64_t totalSteps) {
  const double peak = config.lr;
  if (step < config.warmupSteps)
    return peak * static_cast<double>(step + 1) / static_cast<double>(config.warmupSteps);
  if (config.schedule == ScheduleKind::kConstant) return peak;
  const double floor = peak * config.minLrRatio;
  const double span =
      static_cast<double>(std::max<std::int64_t>(1, totalSteps - config.warmupSteps));
  const double progress = std::min(1.0, static_cast<double>(step - config.warmupSteps) / span);
  if (config.schedule == ScheduleKind::kLinear) return peak - (peak - floor) * progress;
  return floor + (peak - floor) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

}  // namespace mb::train
