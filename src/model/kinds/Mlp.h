#pragma once
// model.kind = mlp: every input flattened and concatenated, `layers` hidden layers of width
// `hidden` (Linear -> GELU -> Dropout), then a linear output layer.
//
// state_dict names (equal to this torch.nn module):
//   body.<3i>.weight, body.<3i>.bias   nn.Sequential([Linear, GELU, Dropout] x layers)
//   head.weight, head.bias             nn.Linear(hidden, outputs)
#include <cstdint>
#include <string>

#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>

#include "model/Model.h"
#include "model/ModelRegistry.h"
#include "model/parts/Objective.h"

namespace mb::model {

class Mlp : public Model {
 public:
  Mlp(const ModelConfig& config, const data::DataInfo& info);

  at::Tensor forward(const data::Batch& batch) override;
  at::Tensor lossSum(const at::Tensor& output, const data::Batch& batch) override;
  std::int64_t termsPerSample() const override { return objective_.termsPerSample(); }
  NamedTensors metricSums(const at::Tensor& output, const data::Batch& batch) override;
  std::vector<std::string> metricNames() const override { return objective_.metricNames(); }
  std::string kind() const override { return "mlp"; }

 private:
  std::vector<std::int64_t> inputWidths_;  // flattened width of each input
  Objective objective_;
  torch::nn::Sequential body_{nullptr};
  torch::nn::Linear head_{nullptr};
};

// model.kind = mlp, for ModelRegistry.cpp.
ModelKind mlpModelKind();

}  // namespace mb::model
