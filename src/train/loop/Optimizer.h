#pragma once
// Optimizers on fp32 master weights: AdamW, Adam, SGD with momentum, written with foreach
// kernels (one kernel launch per operation over all parameters instead of one per tensor).
// Semantics follow torch.optim (AdamW: decoupled decay; Adam and SGD: L2 added to the
// gradient; SGD momentum without dampening, optional Nesterov).
//
// Weight decay applies to matrices and embeddings (dim >= 2), not to biases and norm gains:
// the GPT-2 / nanoGPT convention, and what most LSTM recipes do too.
//
// State is kept per parameter under PyTorch's names (exp_avg, exp_avg_sq, momentum_buffer)
// and checkpointed by parameter name, so it survives a change of world size.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "config/Config.h"

namespace mb::train {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

class Optimizer {
 public:
  Optimizer(const OptimConfig& config, NamedTensors parameters);

  // One update with learning rate `lr` from the parameters' .grad() (undefined grads skip),
  // each gradient first multiplied by `gradScale` (the clip factor). On the CPU this is one pass
  // per parameter (Note [Fused CPU update] in FusedUpdate.h).
  void step(double lr, double gradScale = 1.0);
  // The global L2 norm of the gradients (the clip's input), on the host.
  double gradNorm() const;
  // The same update, taken or not by the device: `apply` is a 0-d float on the parameters'
  // device, 1 to update and 0 to leave parameters, state and step count exactly as they are.
  // Gradients must be finite (zero them where apply is 0). Nothing is read on the host, so the
  // step needs no device sync (Note [Step checks] in StepChecks.h).
  void step(double lr, const at::Tensor& apply);
  // Sets every gradient to zero (keeps the storage: the reducer writes into it).
  void zeroGrad();

  // Updates taken so far (reads the device's count after masked steps: a sync).
  std::int64_t stepCount() const;
  OptimizerKind kind() const { return config_.name; }
  // "<param name>/<state name>" -> tensor, for checkpoints.
  NamedTensors state() const;
  // Restores state written by state(); throws CheckpointError naming a missing or misshaped entry.
  void loadState(const NamedTensors& state, std::int64_t steps);

 private:
  void stepAdam(double lr, bool decoupled);
  void stepSgd(double lr);
  // The CPU path of step(): false (nothing done) when some tensor is not contiguous float32 on
  // the CPU.
  bool stepFused(double lr, double gradScale);
  std::vector<at::Tensor> grads() const;
  void stepAdamMasked(double lr, bool decoupled, const at::Tensor& apply);
  void stepSgdMasked(double lr, const at::Tensor& apply);
  void ensureState();

  OptimConfig config_;
  NamedTensors parameters_;
  std::vector<bool> decays_;          // per parameter: weight decay applies
  std::vector<at::Tensor> expAvg_;    // Adam first moments
  std::vector<at::Tensor> expAvgSq_;  // Adam second moments
  std::vector<at::Tensor> momentum_;  // SGD momentum buffers
  std::int64_t steps_ = 0;
  // Masked steps count here, on the device (0-d double), so the host need not read `apply`;
  // undefined until the first masked step.
  at::Tensor deviceSteps_;
};

// Learning rate for the (0-based) optimizer step `step` of `totalSteps`: linear warmup over
// warmup_steps, then constant, cosine, or linear decay to lr * min_lr_ratio.
double learningRate(const OptimConfig& config, std::int64_t step, std::int64_t totalSteps);

}  // namespace mb::train
