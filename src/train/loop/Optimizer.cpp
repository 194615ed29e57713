#include "train/loop/Optimizer.h"

#include <cmath>
#include <cstring>

#include <ATen/Functions.h>
#include <c10/util/irange.h>

#include "common/Error.h"
#include "train/loop/FusedUpdate.h"

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

std::vector<at::Tensor> Optimizer::grads() const {
  std::vector<at::Tensor> out;
  for (const auto& [name, p] : parameters_) {
    if (p.grad().defined()) out.push_back(p.grad());
  }
  return out;
}

double Optimizer::gradNorm() const {
  std::vector<at::Tensor> all = grads();
  if (all.empty()) return 0.0;
  if (fused::eligible(all)) return fused::norm(all);
  at::NoGradGuard noGrad;
  return at::stack(at::_foreach_norm(all)).to(at::kDouble).norm().item<double>();
}

void Optimizer::step(double lr, double gradScale) {
  steps_ = stepCount() + 1;
  deviceSteps_ = at::Tensor();
  if (stepFused(lr, gradScale)) return;
  if (gradScale != 1.0) {
    at::NoGradGuard noGrad;
    std::vector<at::Tensor> all = grads();
    if (!all.empty()) at::_foreach_mul_(all, gradScale);
  }
  if (config_.name == OptimizerKind::kSgd) {
    stepSgd(lr);
  } else {
    stepAdam(lr, config_.name == OptimizerKind::kAdamW);
  }
}

bool Optimizer::stepFused(double lr, double gradScale) {
  std::vector<std::size_t> active;
  std::vector<at::Tensor> tensors;
  const bool sgd = config_.name == OptimizerKind::kSgd;
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    const at::Tensor& p = parameters_[i].second;
    if (!p.grad().defined()) continue;
    active.push_back(i);
    tensors.insert(tensors.end(), {p, p.grad()});
    if (sgd && config_.momentum > 0) tensors.push_back(momentum_[i]);
    if (!sgd) tensors.insert(tensors.end(), {expAvg_[i], expAvgSq_[i]});
  }
  if (!fused::eligible(tensors)) return false;
  const auto f = [](double x) { return static_cast<float>(x); };
  if (sgd) {
    fused::SgdCoefficients c;
    c.gradScale = f(gradScale);
    c.momentum = f(config_.momentum);
    c.nesterov = config_.nesterov;
    c.first = steps_ == 1;
    c.negativeLr = f(-lr);
    for (std::size_t i : active) {
      c.l2 = decays_[i] ? f(config_.weightDecay) : 0.0f;
      const at::Tensor& p = parameters_[i].second;
      fused::sgd(p, p.grad(), config_.momentum > 0 ? momentum_[i] : at::Tensor(), c);
    }
    return true;
  }
  const bool decoupled = config_.name == OptimizerKind::kAdamW;
  const double beta1 = config_.beta1, beta2 = config_.beta2;
  fused::AdamCoefficients c;
  c.gradScale = f(gradScale);
  c.beta1 = f(beta1);
  c.oneMinusBeta1 = f(1.0 - beta1);
  c.beta2 = f(beta2);
  c.oneMinusBeta2 = f(1.0 - beta2);
  c.correction2Root = f(std::sqrt(1.0 - std::pow(beta2, static_cast<double>(steps_))));
  c.eps = f(config_.eps);
  c.stepSize = f(-lr / (1.0 - std::pow(beta1, static_cast<double>(steps_))));
  for (std::size_t i : active) {
    const bool decays = decays_[i] && config_.weightDecay > 0;
    c.l2 = decays && !decoupled ? f(config_.weightDecay) : 0.0f;
    c.decay = decays && decoupled ? f(1.0 - lr * config_.weightDecay) : 1.0f;
    const at::Tensor& p = parameters_[i].second;
    fused::adam(p, p.grad(), expAvg_[i], expAvgSq_[i], c);
  }
  return true;
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

std::int64_t Optimizer::stepCount() const {
  return deviceSteps_.defined() ? std::llround(deviceSteps_.item<double>()) : steps_;
}

void Optimizer::step(double lr, const at::Tensor& apply) {
  if (parameters_.empty()) return;
  at::NoGradGuard noGrad;
  if (!deviceSteps_.defined())
    deviceSteps_ = at::full({}, static_cast<double>(steps_),
                            parameters_.front().second.options().dtype(at::kDouble));
  if (config_.name == OptimizerKind::kSgd) {
    stepSgdMasked(lr, apply);
  } else {
    stepAdamMasked(lr, config_.name == OptimizerKind::kAdamW, apply);
  }
}

// The masked update is the foreach update written per tensor with 0-d device tensors where the
// host update has numbers: every factor that moves a parameter or a moment is multiplied by
// `apply`, so apply = 0 leaves them bit for bit (x * 1 + 0). LibTorch 1.13 has no foreach ops
// taking tensor scalars; the per-tensor launches cost little next to a device sync.
void Optimizer::stepAdamMasked(double lr, bool decoupled, const at::Tensor& apply) {
  const double beta1 = config_.beta1, beta2 = config_.beta2;
  deviceSteps_.add_(apply);
  // Bias corrections from the count of updates taken; clamped so a masked first step does not
  // divide by zero (its step size is 0 anyway).
  at::Tensor count = deviceSteps_.clamp_min(1.0);
  at::Tensor correction1 = 1.0 - at::pow(beta1, count);
  at::Tensor correction2Root = (1.0 - at::pow(beta2, count)).sqrt_();
  at::Tensor stepSize = (apply * (-lr)).div_(correction1);
  // lerp wants its weight in the state's type (fp32: the state follows the fp32 master weights).
  const auto stateType = expAvg_.front().scalar_type();
  at::Tensor weight1 = (apply * (1.0 - beta1)).to(stateType);
  at::Tensor weight2 = (apply * (1.0 - beta2)).to(stateType);
  at::Tensor decayFactor = 1.0 - apply * (lr * config_.weightDecay);
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    const at::Tensor& p = parameters_[i].second;
    if (!p.grad().defined()) continue;
    at::Tensor grad = p.grad();
    if (decays_[i] && config_.weightDecay > 0) {
      if (decoupled) {
        p.mul_(decayFactor);
      } else {
        grad.add_(p, config_.weightDecay);
      }
    }
    expAvg_[i].lerp_(grad, weight1);
    expAvgSq_[i].lerp_(grad * grad, weight2);
    at::Tensor denominator = expAvgSq_[i].sqrt().div_(correction2Root).add_(config_.eps);
    p.add_(expAvg_[i].div(denominator).mul_(stepSize));
  }
}

void Optimizer::stepSgdMasked(double lr, const at::Tensor& apply) {
  // torch.optim.SGD: the first update's buffer is the gradient itself (no dampening).
  at::Tensor first = deviceSteps_.eq(0.0);
  deviceSteps_.add_(apply);
  at::Tensor keep = apply.lt(0.5);
  at::Tensor stepSize = apply * (-lr);
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    const at::Tensor& p = parameters_[i].second;
    if (!p.grad().defined()) continue;
    at::Tensor grad = p.grad();
    if (decays_[i] && config_.weightDecay > 0) grad.add_(p, config_.weightDecay);
    at::Tensor update = grad;
    if (config_.momentum > 0) {
      at::Tensor& buffer = momentum_[i];
      at::Tensor next = at::where(first, grad, buffer * config_.momentum + grad);
      buffer.copy_(at::where(keep, buffer, next));
      update = config_.nesterov ? grad + buffer * config_.momentum : buffer;
    }
    p.add_(update * stepSize);
  }
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
  std::vector<at::Tensor> all = grads();
  if (all.empty()) return;
  if (fused::eligible(all)) {  // one memset each, no operator dispatch (Note [Fused CPU update])
    for (const at::Tensor& g : all)
      std::memset(g.data_ptr<float>(), 0, static_cast<std::size_t>(g.numel()) * sizeof(float));
    return;
  }
  at::_foreach_zero_(all);
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
  deviceSteps_ = at::Tensor();
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
