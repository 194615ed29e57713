#include "model/kinds/Lstm.h"

#include <tuple>

#include <ATen/Functions.h>
#include <ATen/core/grad_mode.h>

#include "common/Error.h"
#include "common/NativeCpuRnn.h"
#include "common/TorchCompat.h"
#include "model/parts/Heads.h"

namespace mb::model {
namespace {

std::string stateName(const std::string& stream, const char* which) {
  return "lstm_state." + stream + "." + which;
}

}  // namespace

Lstm::Lstm(const ModelConfig& config, const data::DataInfo& info)
    : hidden_(config.hidden),
      layers_(config.layers),
      stateful_(config.stateful),
      objective_(config, info) {
  encoders_ = register_module("encoders", torch::nn::ModuleDict());
  for (const auto& input : info.inputs) {
    if (input.window < 1 || input.features < 1)
      throw ConfigError("model.kind = lstm needs sequence inputs [N, T, F], but input '" +
                            input.name + "' of " + info.path + " has no time axis",
                        "use model.kind = mlp for [N, F] features");
    if (input.name.find('.') != std::string::npos || input.name.empty())
      throw ConfigError("stream name '" + input.name +
                        "' cannot name a module (state_dict names use '.' as separator)");
    auto options = torch::nn::LSTMOptions(input.features, hidden_)
                       .num_layers(layers_)
                       .batch_first(true)
                       .dropout(layers_ > 1 ? config.dropout : 0.0);
    torch::nn::LSTM lstm(options);
    encoders_->update({{input.name, lstm.ptr()}});
    lstms_.push_back(lstm);
    streams_.push_back(input.name);
    features_.push_back(input.features);
  }
  if (streams_.empty()) throw ConfigError("model.kind = lstm: the data has no input streams");
  laneH_.resize(streams_.size());
  laneC_.resize(streams_.size());
  auto fused = static_cast<std::int64_t>(streams_.size()) * hidden_;
  head_ = register_module("head",
                          makeHead(fused, config.headHidden, objective_.outputs(), config.dropout));
}

at::Tensor Lstm::forward(const data::Batch& batch) {
  if (batch.inputs.size() != streams_.size())
    throw RuntimeError("lstm: batch has " + std::to_string(batch.inputs.size()) +
                       " inputs, the model has " + std::to_string(streams_.size()) + " streams");
  if (stateful_ && is_training() && !batch.lanes.defined())
    throw RuntimeError(
        "lstm: model.stateful = true, but the batch carries no lane ids",
        "stateful training needs the lane-ordered loader; set model.stateful = false");
  std::vector<at::Tensor> finals;
  for (std::size_t s = 0; s < streams_.size(); ++s) {
    finals.push_back(encode(s, batch.inputs[s], stateful_ ? batch.lanes : at::Tensor()));
  }
  at::Tensor fused = at::cat(finals, 1);  // [B, streams x hidden]
  return objective_.predictions(head_->forward(fused));
}

at::Tensor Lstm::encode(std::size_t s, const at::Tensor& input, const at::Tensor& lanes) {
  if (input.dim() != 3 || input.size(2) != features_[s])
    throw RuntimeError("lstm: input '" + streams_[s] + "' must be [B, T, " +
                       std::to_string(features_[s]) + "], got " + std::to_string(input.dim()) +
                       "-d with " + std::to_string(input.size(-1)) + " features");
  auto& lstm = lstms_[s];
  // Resident data may be bf16; the LSTM takes its weights' dtype (autocast, where it covers
  // the LSTM, casts from there).
  at::Tensor x = input.to(lstm->parameters().front().scalar_type());  // [B, T, F]
  const compat::NativeCpuRnnGuard nativeRnn(
      x.device().is_cpu() &&
      (x.scalar_type() == at::kBFloat16 || compat::autocastEnabled(c10::DeviceType::CPU)));
  if (!lanes.defined()) {
    auto out = lstm->forward(x);
    return std::get<0>(std::get<1>(out))[layers_ - 1];  // [B, hidden]
  }
  if (!laneH_[s].defined()) growLanes(lanes.max().item<std::int64_t>() + 1);  // the first batch
  at::Tensor ids = lanes.to(laneH_[s].device(), at::kLong);
  auto h0 = laneH_[s].index_select(1, ids).to(x.scalar_type());  // [layers, B, hidden]
  auto c0 = laneC_[s].index_select(1, ids).to(x.scalar_type());
  auto out = lstm->forward(x, std::make_tuple(h0, c0));
  const auto& [hn, cn] = std::get<1>(out);
  {
    at::NoGradGuard noGrad;
    laneH_[s].index_copy_(1, ids, hn.detach().to(at::kFloat));
    laneC_[s].index_copy_(1, ids, cn.detach().to(at::kFloat));
  }
  return hn[layers_ - 1];
}

void Lstm::growLanes(std::int64_t lanes) {
  for (std::size_t s = 0; s < streams_.size(); ++s) {
    std::int64_t have = laneH_[s].defined() ? laneH_[s].size(1) : 0;
    if (have >= lanes) continue;
    auto options = lstms_[s]->parameters().front().options().dtype(at::kFloat);
    at::Tensor h = at::zeros({layers_, lanes, hidden_}, options);
    at::Tensor c = at::zeros({layers_, lanes, hidden_}, options);
    if (have > 0) {
      h.narrow(1, 0, have).copy_(laneH_[s]);
      c.narrow(1, 0, have).copy_(laneC_[s]);
    }
    laneH_[s] = h;
    laneC_[s] = c;
  }
}

at::Tensor Lstm::lossSum(const at::Tensor& output, const data::Batch& batch) {
  return objective_.lossSum(output, batch.targets);
}

NamedTensors Lstm::metricSums(const at::Tensor& output, const data::Batch& batch) {
  return objective_.metricSums(output, batch.targets);
}

NamedTensors Lstm::extraState() const {
  NamedTensors state;
  if (!stateful_) return state;
  for (std::size_t s = 0; s < streams_.size(); ++s) {
    if (!laneH_[s].defined()) continue;
    state.emplace_back(stateName(streams_[s], "h"), laneH_[s]);
    state.emplace_back(stateName(streams_[s], "c"), laneC_[s]);
  }
  return state;
}

void Lstm::loadExtraState(const NamedTensors& state) {
  if (state.empty()) {
    resetState();
    return;
  }
  if (!stateful_)
    throw CheckpointError("the checkpoint holds LSTM lane states (" + state.front().first +
                              "), but model.stateful = false",
                          "set model.stateful = true to resume the carried states");
  // Assembled aside and checked whole, so a bad checkpoint leaves the current state as it is.
  std::vector<at::Tensor> h(streams_.size()), c(streams_.size());
  for (const auto& [name, tensor] : state) {
    std::size_t s = 0;
    while (s < streams_.size() && name != stateName(streams_[s], "h") &&
           name != stateName(streams_[s], "c"))
      ++s;
    if (s == streams_.size())
      throw CheckpointError("unknown LSTM lane state '" + name + "' in the checkpoint",
                            "the checkpoint was written for other data.streams");
    if (tensor.dim() != 3 || tensor.size(0) != layers_ || tensor.size(2) != hidden_)
      throw CheckpointError("LSTM lane state '" + name + "' must be [" + std::to_string(layers_) +
                            ", lanes, " + std::to_string(hidden_) +
                            "] (model.layers, model.hidden)");
    auto options = lstms_[s]->parameters().front().options().dtype(at::kFloat);
    (name == stateName(streams_[s], "h") ? h[s] : c[s]) = tensor.to(options).clone();
  }
  for (std::size_t s = 0; s < streams_.size(); ++s) {
    if (h[s].defined() != c[s].defined() || (h[s].defined() && h[s].sizes() != c[s].sizes()))
      throw CheckpointError("LSTM lane states of stream '" + streams_[s] +
                            "' are incomplete: h and c must both be present with equal shapes");
  }
  laneH_ = std::move(h);
  laneC_ = std::move(c);
}

void Lstm::setLaneCount(std::int64_t lanes) {
  if (!stateful_) return;
  for (std::size_t s = 0; s < streams_.size(); ++s) {
    if (laneH_[s].defined() && laneH_[s].size(1) != lanes)
      throw CheckpointError("LSTM lane state '" + stateName(streams_[s], "h") + "' holds " +
                                std::to_string(laneH_[s].size(1)) + " lanes, but this run has " +
                                std::to_string(lanes) +
                                " (data.canonical_shards x lanes per shard)",
                            "resume with the model.lanes the run started with");
  }
  growLanes(lanes);
}

void Lstm::resetState() {
  for (std::size_t s = 0; s < streams_.size(); ++s) {
    laneH_[s] = at::Tensor();
    laneC_[s] = at::Tensor();
  }
}

ModelKind lstmModelKind() {
  ModelKind kind;
  kind.name = "lstm";
  kind.summary = "one LSTM encoder per input stream, then a fusion head";
  kind.layouts = {"samples", "series"};
  kind.carriesState = true;
  kind.build = [](const ModelConfig& config, const data::DataInfo& info) {
    return std::make_shared<Lstm>(config, info);
  };
  return kind;
}

}  // namespace mb::model
