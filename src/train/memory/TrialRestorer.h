#pragma once
// What a trial forward and backward must put back so that the run goes on as if it had not
// been tried: the memory plan's trial step (Note [Memory plan]) and the timed trial of
// train.precision = auto on the CPU (Note [CPU auto precision]).
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/GradMode.h>

#include "common/RngState.h"
#include "model/Model.h"

namespace mb::train {

// The model's buffers (BatchNorm statistics of a TorchScript model move in a forward in train
// mode) and the RNG state (dropout), put back when the trial ends.
class TrialRestorer {
 public:
  TrialRestorer(model::Model& model, c10::Device device)
      : model_(model), rng_(device), training_(model.is_training()) {
    for (const auto& buffer : model.buffers())
      buffers_.push_back(buffer.clone());
  }
  ~TrialRestorer() {
    at::NoGradGuard noGrad;
    std::size_t i = 0;
    for (auto& buffer : model_.buffers())
      if (i < buffers_.size()) buffer.copy_(buffers_[i++]);
    rng_.restore();
    model_.train(training_);
  }
  TrialRestorer(const TrialRestorer&) = delete;
  TrialRestorer& operator=(const TrialRestorer&) = delete;

 private:
  model::Model& model_;
  RngSnapshot rng_;
  bool training_;
  std::vector<at::Tensor> buffers_;
};

}  // namespace mb::train
