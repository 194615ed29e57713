#include "model/kinds/Mlp.h"

#include <numeric>

#include <ATen/Functions.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/dropout.h>

#include "common/Error.h"

namespace mb::model {

Mlp::Mlp(const ModelConfig& config, const data::DataInfo& info) : objective_(config, info) {
  for (const auto& input : info.inputs) {
    if (input.features < 1)
      throw ConfigError("model.kind = mlp needs feature inputs, but input '" + input.name +
                        "' of " + info.path + " has none");
    inputWidths_.push_back(std::max<std::int64_t>(input.window, 1) * input.features);
  }
  std::int64_t width = std::accumulate(inputWidths_.begin(), inputWidths_.end(), std::int64_t{0});
  if (width == 0) throw ConfigError("model.kind = mlp: the data has no inputs");
  torch::nn::Sequential body;
  for (std::int64_t i = 0; i < config.layers; ++i) {
    body->push_back(torch::nn::Linear(width, config.hidden));
    body->push_back(torch::nn::GELU());
    body->push_back(torch::nn::Dropout(config.dropout));
    width = config.hidden;
  }
  body_ = register_module("body", body);
  head_ = register_module("head", torch::nn::Linear(width, objective_.outputs()));
}

at::Tensor Mlp::forward(const data::Batch& batch) {
  if (batch.inputs.size() != inputWidths_.size())
    throw RuntimeError("mlp: batch has " + std::to_string(batch.inputs.size()) +
                       " inputs, the model expects " + std::to_string(inputWidths_.size()));
  std::vector<at::Tensor> flat;
  auto dtype = head_->weight.scalar_type();
  for (std::size_t i = 0; i < batch.inputs.size(); ++i) {
    const at::Tensor& input = batch.inputs[i];
    at::Tensor x = input.reshape({input.size(0), -1});  // [B, T x F] or [B, F]
    if (x.size(1) != inputWidths_[i])
      throw RuntimeError("mlp: input " + std::to_string(i) + " has " + std::to_string(x.size(1)) +
                         " values per sample, the model expects " +
                         std::to_string(inputWidths_[i]));
    flat.push_back(x.to(dtype));  // resident bf16 data meets fp32 weights
  }
  at::Tensor x = flat.size() == 1 ? flat[0] : at::cat(flat, 1);  // [B, D]
  return objective_.predictions(head_->forward(body_->forward(x)));
}

at::Tensor Mlp::lossSum(const at::Tensor& output, const data::Batch& batch) {
  return objective_.lossSum(output, batch.targets);
}

NamedTensors Mlp::metricSums(const at::Tensor& output, const data::Batch& batch) {
  return objective_.metricSums(output, batch.targets);
}

ModelKind mlpModelKind() {
  ModelKind kind;
  kind.name = "mlp";
  kind.summary = "every input flattened and concatenated, then an MLP";
  kind.layouts = {"samples", "series"};
  kind.build = [](const ModelConfig& config, const data::DataInfo& info) {
    return std::make_shared<Mlp>(config, info);
  };
  return kind;
}

}  // namespace mb::model
