#include "model/kinds/Lstm.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <mutex>
#include <tuple>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Functions.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/GradMode.h>

#include "common/Error.h"
#include "common/Log.h"
#include "common/NativeCpuRnn.h"
#include "common/TorchCompat.h"
#include "model/Recompute.h"
#include "model/parts/Heads.h"

namespace mb::model {
namespace {

std::string stateName(const std::string& stream, const char* which) {
  return "lstm_state." + stream + "." + which;
}

// Note [LSTM time segments]: about sqrt(window) steps.
std::int64_t segmentSteps(std::int64_t window) {
  return std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(std::sqrt(window))));
}

// Note [oneDNN bf16 LSTM] (common/NativeCpuRnn.h).
bool nativeCpuRnn(const at::Tensor& x) {
  return x.device().is_cpu() &&
         (x.scalar_type() == at::kBFloat16 || compat::autocastEnabled(c10::DeviceType::CPU));
}

// Note [oneDNN LSTM inference]: whether oneDNN's inference LSTM gives `lstm` LibTorch's own
// outputs, on a small input from a generator of its own (the run's random stream is untouched).
bool oneDnnInferenceAgrees(const torch::nn::LSTM& lstm, std::int64_t features) {
  at::NoGradGuard noGrad;
  auto generator = at::make_generator<at::CPUGeneratorImpl>(20261129);
  at::Tensor x = at::randn({3, 7, features}, generator,
                           lstm->parameters().front().options().requires_grad(false));
  const auto& options = lstm->options;
  at::Tensor state = at::zeros({options.num_layers(), 3, options.hidden_size()}, x.options());
  auto run = [&] {  // without dropout: the outputs must not depend on random numbers
    return std::get<0>(at::lstm(x, {state, state}, lstm->all_weights(), options.bias(),
                                options.num_layers(), 0.0, false, false, true));
  };
  at::Tensor oneDnn = run();
  at::Tensor own;
  {
    const compat::NativeCpuRnnGuard native(true);
    own = run();
  }
  return (oneDnn - own).abs().max().item<double>() < 1e-4;
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
    windows_.push_back(input.window);
  }
  if (streams_.empty()) throw ConfigError("model.kind = lstm: the data has no input streams");
  oneDnnInferenceWrong_.assign(streams_.size(), -1);
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
  const compat::NativeCpuRnnGuard nativeRnn(nativeCpuRnn(x) || avoidOneDnnInference(s, x));
  at::Tensor ids, h0, c0;
  if (lanes.defined()) {
    if (!laneH_[s].defined()) growLanes(lanes.max().item<std::int64_t>() + 1);  // the first batch
    ids = lanes.to(laneH_[s].device(), at::kLong);
    h0 = laneH_[s].index_select(1, ids).to(x.scalar_type());  // [layers, B, hidden]
    c0 = laneC_[s].index_select(1, ids).to(x.scalar_type());
  }
  at::Tensor hn, cn;
  if (recomputeEvery_ > 0 && c10::GradMode::is_enabled()) {
    if (!h0.defined()) {
      h0 = at::zeros({layers_, x.size(0), hidden_}, x.options());
      c0 = at::zeros_like(h0);
    }
    std::tie(hn, cn) = encodeInSegments(s, x, h0, c0);
  } else {
    auto out = h0.defined() ? lstm->forward(x, std::make_tuple(h0, c0)) : lstm->forward(x);
    std::tie(hn, cn) = std::get<1>(out);
  }
  if (ids.defined()) {
    at::NoGradGuard noGrad;
    laneH_[s].index_copy_(1, ids, hn.detach().to(at::kFloat));
    laneC_[s].index_copy_(1, ids, cn.detach().to(at::kFloat));
  }
  return hn[layers_ - 1];  // [B, hidden]
}

bool Lstm::avoidOneDnnInference(std::size_t s, const at::Tensor& x) const {
  if (!compat::kOneDnnRnn || c10::GradMode::is_enabled() || !x.device().is_cpu() ||
      x.scalar_type() != at::kFloat || !at::globalContext().userEnabledMkldnn())
    return false;
  std::lock_guard<std::mutex> lock(probeMutex_);
  if (oneDnnInferenceWrong_[s] < 0) {
    oneDnnInferenceWrong_[s] = oneDnnInferenceAgrees(lstms_[s], features_[s]) ? 0 : 1;
    if (oneDnnInferenceWrong_[s] == 1)
      log::get("model").warn(
          "lstm: this LibTorch's oneDNN LSTM gives wrong outputs outside grad mode for stream "
          "'{}' (hidden {}, {} features) on this CPU; outside grad mode (evaluation, prediction, "
          "recomputed segments) it runs LibTorch's own LSTM "
          "instead, which is right but slower (Note [oneDNN LSTM inference])",
          streams_[s], hidden_, features_[s]);
  }
  return oneDnnInferenceWrong_[s] == 1;
}

std::pair<at::Tensor, at::Tensor> Lstm::encodeInSegments(std::size_t s, const at::Tensor& x,
                                                         at::Tensor h, at::Tensor c) {
  const std::int64_t window = x.size(1);
  const std::int64_t steps = segmentSteps(window);
  const double dropout = is_training() ? lstms_[s]->options.dropout() : 0.0;
  std::vector<at::Tensor> masks;  // Note [LSTM time segments]: drawn as LibTorch's LSTM does
  for (std::int64_t l = 0; dropout > 0 && l + 1 < layers_; ++l)
    masks.push_back(
        at::empty({window, x.size(0), hidden_}, x.options()).bernoulli_(1 - dropout).to(at::kBool));
  // Layer by layer {w_ih, w_hh[, b_ih, b_hh]}, looked up once for every segment of the window.
  const auto weights = std::make_shared<const std::vector<at::Tensor>>(lstms_[s]->all_weights());
  std::int64_t segment = 0;
  for (std::int64_t t0 = 0; t0 < window; t0 += steps, ++segment) {
    auto run = [this, s, t0, masks, dropout, weights](const std::vector<at::Tensor>& in) {
      return runSegment(s, in, t0, *weights, masks, dropout);
    };
    std::vector<at::Tensor> in{x.narrow(1, t0, std::min(steps, window - t0)), h, c};
    std::vector<at::Tensor> out =
        segment % recomputeEvery_ == 0 ? recomputedMany(run, in, *weights) : run(in);
    h = out[0];
    c = out[1];
  }
  return {h, c};
}

std::vector<at::Tensor> Lstm::runSegment(std::size_t s, const std::vector<at::Tensor>& in,
                                         std::int64_t t0, const std::vector<at::Tensor>& weights,
                                         const std::vector<at::Tensor>& masks,
                                         double dropout) const {
  const at::Tensor& x = in[0];  // [B, length, F]
  // Also when recomputed; the first pass of a recomputed segment runs outside grad mode.
  const compat::NativeCpuRnnGuard nativeRnn(nativeCpuRnn(x) || avoidOneDnnInference(s, x));
  const bool biases = lstms_[s]->options.bias();
  const std::size_t perLayer = biases ? 4 : 2;
  at::Tensor layerInput = x;
  std::vector<at::Tensor> hs, cs;
  for (std::int64_t l = 0; l < layers_; ++l) {
    const at::TensorList layer(weights.data() + l * perLayer, perLayer);
    auto [out, hl, cl] = at::lstm(layerInput, {in[1].narrow(0, l, 1), in[2].narrow(0, l, 1)}, layer,
                                  biases, 1, 0.0, is_training(), false, true);
    hs.push_back(hl);
    cs.push_back(cl);
    layerInput = out;
    if (l < static_cast<std::int64_t>(masks.size())) {
      at::Tensor noise = masks[l].narrow(0, t0, x.size(1)).transpose(0, 1);
      layerInput = out * noise.to(out.scalar_type()).div_(1 - dropout);
    }
  }
  return {at::cat(hs), at::cat(cs)};
}

std::int64_t Lstm::segmentCount() const {
  std::int64_t most = 0;
  for (std::int64_t window : windows_) {
    const std::int64_t steps = segmentSteps(window);
    most = std::max(most, (window + steps - 1) / steps);
  }
  return most;
}

std::string Lstm::segmentName() const {
  return "time segments of the longest window (about sqrt(window) steps each)";
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
