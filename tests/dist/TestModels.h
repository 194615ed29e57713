#pragma once
// Small models shared by the distributed-core tests (unit and multi-rank) and benchmarks.
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/Functions.h>
#include <c10/core/GradMode.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/rnn.h>
#include <torch/nn/pimpl.h>

namespace mb::test {

// LSTM over a sequence, then a linear head on the last step: the shape of the LSTM demo,
// with parameter tensors of several sizes.
struct SeqNetImpl : torch::nn::Module {
  SeqNetImpl(std::int64_t features, std::int64_t hidden, std::int64_t outputs,
             std::int64_t layers = 1) {
    lstm = register_module(
        "lstm", torch::nn::LSTM(
                    torch::nn::LSTMOptions(features, hidden).num_layers(layers).batch_first(true)));
    head = register_module("head", torch::nn::Linear(hidden, outputs));
  }
  at::Tensor forward(const at::Tensor& x) {               // [B, T, F] -> [B, K]
    at::Tensor sequence = std::get<0>(lstm->forward(x));  // [B, T, H]
    return head->forward(sequence.select(1, -1));
  }
  torch::nn::LSTM lstm{nullptr};
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(SeqNet);

// `depth` square linear layers: many equal parameter tensors, so small caps give many buckets.
struct MlpStackImpl : torch::nn::Module {
  MlpStackImpl(std::int64_t width, int depth) {
    for (int i = 0; i < depth; ++i)
      layers.push_back(register_module("fc" + std::to_string(i), torch::nn::Linear(width, width)));
  }
  at::Tensor forward(at::Tensor x) {  // [B, width] -> [B, width]
    for (auto& layer : layers)
      x = at::tanh(layer->forward(x));
    return x;
  }
  std::vector<torch::nn::Linear> layers;
};
TORCH_MODULE(MlpStack);

inline std::vector<std::string> parameterNames(torch::nn::Module& module) {
  std::vector<std::string> names;
  for (const auto& item : module.named_parameters())
    names.push_back(item.key());
  return names;
}

inline void copyParameters(torch::nn::Module& from, torch::nn::Module& to) {
  c10::NoGradGuard noGrad;
  auto source = from.parameters();
  auto target = to.parameters();
  for (std::size_t i = 0; i < source.size(); ++i)
    target[i].copy_(source[i]);
}

// Largest per-tensor relative difference ||a - b|| / max(||b||, tiny).
inline double maxRelativeDifference(torch::nn::Module& a, torch::nn::Module& b) {
  auto pa = a.parameters();
  auto pb = b.parameters();
  double worst = 0;
  for (std::size_t i = 0; i < pa.size(); ++i) {
    double diff = (pa[i] - pb[i]).norm().item<double>();
    double scale = std::max(pb[i].norm().item<double>(), 1e-12);
    worst = std::max(worst, diff / scale);
  }
  return worst;
}

}  // namespace mb::test
