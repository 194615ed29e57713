#pragma once
// What a regression or classification model predicts and how it is scored: the width of its
// output layer, the loss (a sum over terms, see Model.h), and the evaluation metrics. Shared
// by the lstm and mlp models; gpt scores next-token cross-entropy itself.
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "config/Config.h"
#include "data/DataInfo.h"
#include "model/Model.h"

namespace mb::model {

// model.loss with `auto` resolved by the task: cross_entropy for classification, else mse.
LossKind resolvedLoss(const ModelConfig& config);

class Objective {
 public:
  Objective(const ModelConfig& config, const data::DataInfo& info);

  // Width of the model's last layer: K targets (1 for [N] targets) or C classes.
  std::int64_t outputs() const { return outputs_; }
  // The last layer's [B, outputs] as the prediction: [B] for [N] targets, else unchanged.
  at::Tensor predictions(const at::Tensor& raw) const;
  // Sum over the batch of the per-term losses, in fp32 whatever the output's dtype.
  // `classWeight` ([C], cross-entropy only; undefined = none) weighs each sample's term by its
  // class's weight: still a sum, divided later by the sample count (model.class_weights).
  at::Tensor lossSum(const at::Tensor& output, const at::Tensor& targets,
                     const at::Tensor& classWeight = {}) const;
  std::int64_t termsPerSample() const { return terms_; }
  // regression: {"mse", "mae"} summed over terms; classification: {"accuracy"} (correct count).
  NamedTensors metricSums(const at::Tensor& output, const at::Tensor& targets) const;
  std::vector<std::string> metricNames() const;

  Task task() const { return task_; }
  LossKind loss() const { return loss_; }

 private:
  void checkTargets(const at::Tensor& output, const at::Tensor& targets) const;

  Task task_;
  LossKind loss_;  // resolved: mse, huber, or cross_entropy
  double huberDelta_;
  std::vector<std::int64_t> targetShape_;  // per sample: {} or {K}
  std::int64_t outputs_ = 1;
  std::int64_t terms_ = 1;
};

}  // namespace mb::model
