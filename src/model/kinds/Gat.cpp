#include "model/kinds/Gat.h"

#include <cmath>
#include <optional>
#include <tuple>

#include <ATen/Functions.h>
#include <torch/nn/init.h>

#include "common/Error.h"
#include "common/Strings.h"
#include "model/Recompute.h"
#include "model/parts/Heads.h"
#include "model/parts/RowGather.h"

namespace mb::model {
namespace {

constexpr double kNegativeSlope = 0.2;  // GAT's LeakyReLU (PyG's default)

// Xavier/Glorot uniform over the last two dimensions, as PyG initialises att_src/att_dst.
void glorot(at::Tensor& t) {
  at::NoGradGuard noGrad;
  const double bound = std::sqrt(6.0 / static_cast<double>(t.size(-2) + t.size(-1)));
  t.uniform_(-bound, bound);
}

}  // namespace

namespace detail {

// nn.MultiheadAttention's parameters (batch first, no masks), for the transformer encoder.
class TransformerSelfAttention : public torch::nn::Module {
 public:
  TransformerSelfAttention(std::int64_t width, std::int64_t heads, double dropout)
      : heads_(heads), dropout_(dropout) {
    inProjWeight_ = register_parameter("in_proj_weight", at::empty({3 * width, width}));
    inProjBias_ = register_parameter("in_proj_bias", at::zeros({3 * width}));
    outProj_ = register_module("out_proj", torch::nn::Linear(width, width));
    torch::nn::init::xavier_uniform_(inProjWeight_);
    at::NoGradGuard noGrad;
    outProj_->bias.zero_();
  }
  at::Tensor forward(const at::Tensor& x) {  // [M, W, C]
    const std::int64_t m = x.size(0), w = x.size(1), c = x.size(2), d = c / heads_;
    auto qkv = at::linear(x, inProjWeight_, inProjBias_).chunk(3, 2);
    auto split = [&](const at::Tensor& t) { return t.view({m, w, heads_, d}).transpose(1, 2); };
    at::Tensor q = split(qkv[0]), k = split(qkv[1]), v = split(qkv[2]);  // [M, heads, W, d]
    at::Tensor weights =
        at::softmax(at::matmul(q, k.transpose(2, 3)) / std::sqrt(static_cast<double>(d)), -1);
    weights = at::dropout(weights, dropout_, is_training());
    at::Tensor y = at::matmul(weights, v).transpose(1, 2).reshape({m, w, c});
    return outProj_->forward(y);
  }

 private:
  std::int64_t heads_;
  double dropout_;
  at::Tensor inProjWeight_, inProjBias_;
  torch::nn::Linear outProj_{nullptr};
};

// nn.TransformerEncoderLayer(width, heads, 4*width, dropout, activation="gelu",
// batch_first=True, norm_first=True).
class TransformerEncoderLayer : public torch::nn::Module {
 public:
  TransformerEncoderLayer(std::int64_t width, std::int64_t heads, double dropout)
      : dropout_(dropout) {
    selfAttn_ = register_module("self_attn",
                                std::make_shared<TransformerSelfAttention>(width, heads, dropout));
    linear1_ = register_module("linear1", torch::nn::Linear(width, 4 * width));
    linear2_ = register_module("linear2", torch::nn::Linear(4 * width, width));
    norm1_ = register_module("norm1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({width})));
    norm2_ = register_module("norm2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({width})));
  }
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor h = x + at::dropout(selfAttn_->forward(norm1_->forward(x)), dropout_, is_training());
    at::Tensor inner =
        at::dropout(at::gelu(linear1_->forward(norm2_->forward(h))), dropout_, is_training());
    return h + at::dropout(linear2_->forward(inner), dropout_, is_training());
  }

 private:
  double dropout_;
  std::shared_ptr<TransformerSelfAttention> selfAttn_;
  torch::nn::Linear linear1_{nullptr}, linear2_{nullptr};
  torch::nn::LayerNorm norm1_{nullptr}, norm2_{nullptr};
};

}  // namespace detail

// Input projection + a learned position per window row, pre-norm layers, a final LayerNorm;
// the last row's vector.
class TransformerEncoder : public torch::nn::Module {
 public:
 public:
  TransformerEncoder(std::int64_t features, std::int64_t window, std::int64_t hidden,
                     std::int64_t heads, std::int64_t layers, double dropout) {
    input_ = register_module("input", torch::nn::Linear(features, hidden));
    position_ = register_parameter("position", at::randn({window, hidden}) * 0.02);
    auto list = register_module("layers", torch::nn::ModuleList());
    for (std::int64_t i = 0; i < layers; ++i) {
      layers_.push_back(std::make_shared<detail::TransformerEncoderLayer>(hidden, heads, dropout));
      list->push_back(layers_.back());
    }
    norm_ = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({hidden})));
  }
  at::Tensor forward(const at::Tensor& windows) {  // [M, W, F]
    at::Tensor h = input_->forward(windows.to(position_.scalar_type())) + position_;
    for (auto& layer : layers_)
      h = layer->forward(h);
    return norm_->forward(h.select(1, h.size(1) - 1));  // [M, hidden]
  }

 private:
  torch::nn::Linear input_{nullptr};
  at::Tensor position_;  // [W, hidden]
  std::vector<std::shared_ptr<detail::TransformerEncoderLayer>> layers_;
  torch::nn::LayerNorm norm_{nullptr};
};

namespace {

// A graph-attention layer's segment (Note [Activation recomputation]): the layer and its norm.
std::vector<at::Tensor> parametersOf(const torch::nn::Module& layer,
                                     const torch::nn::Module& norm) {
  std::vector<at::Tensor> parameters = layer.parameters();
  for (const auto& p : norm.parameters())
    parameters.push_back(p);
  return parameters;
}

int inputIndex(const data::DataInfo& info, const std::string& name) {
  for (std::size_t i = 0; i < info.inputs.size(); ++i) {
    if (info.inputs[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

std::optional<std::string> checkGatConfig(const Config& c) {
  const ModelConfig& m = c.model;
  const GraphConfig& g = m.graph;
  if (g.layers < 0 || g.layers > 8)
    return "model.graph.layers = " + std::to_string(g.layers) + " must be in [0, 8] (1-3 is usual)";
  if (g.k < 0) return "model.graph.k = " + std::to_string(g.k) + " must be >= 0";
  if (g.layers > 0 && g.k > 0) {
    if (g.lookback < 2)
      return "model.graph.lookback = " + std::to_string(g.lookback) +
             " must be >= 2 dates (a correlation needs two)";
    if (g.minPeriods < 2 || g.minPeriods > g.lookback)
      return "model.graph.min_periods = " + std::to_string(g.minPeriods) + " must be in [2, " +
             "model.graph.lookback = " + std::to_string(g.lookback) + "]";
    if (g.feature < 0)
      return "model.graph.feature = " + std::to_string(g.feature) + " must be >= 0";
  }
  if (g.cacheMb < 0) return "model.graph.cache_mb must be >= 0";
  const bool attends = g.layers > 0 || m.encoder == EncoderKind::kTransformer;
  if (attends && m.hidden % m.heads != 0)
    return "model.hidden = " + std::to_string(m.hidden) +
           " must be divisible by model.heads = " + std::to_string(m.heads) +
           " (attention heads split the width)";
  return std::nullopt;
}

}  // namespace

// --- GatConv ------------------------------------------------------------------------------

GatConv::GatConv(std::int64_t width, std::int64_t heads, double dropout)
    : heads_(heads), channels_(width / heads), dropout_(dropout) {
  lin_ =
      register_module("lin", torch::nn::Linear(torch::nn::LinearOptions(width, width).bias(false)));
  torch::nn::init::xavier_uniform_(lin_->weight);
  attSrc_ = register_parameter("att_src", at::empty({1, heads, channels_}));
  attDst_ = register_parameter("att_dst", at::empty({1, heads, channels_}));
  glorot(attSrc_);
  glorot(attDst_);
  bias_ = register_parameter("bias", at::zeros({heads * channels_}));
}

at::Tensor GatConv::forward(const at::Tensor& h, const at::Tensor& src, const at::Tensor& dst,
                            std::int64_t nodesPerDate) {
  const std::int64_t nodes = h.size(0), dates = nodes / nodesPerDate;
  at::Tensor x = lin_->forward(h).to(at::kFloat).view({nodes, heads_, channels_});  // [M, H, C]
  at::Tensor fromSrc = (x * attSrc_.to(at::kFloat)).sum(-1);                        // [M, H]
  at::Tensor atDst = (x * attDst_.to(at::kFloat)).sum(-1);
  at::Tensor score = at::leaky_relu(gatherRows(fromSrc, src) + gatherRows(atDst, dst),
                                    kNegativeSlope);  // [E, H]
  // Note [Graph attention]: a bound of each destination's scores from its date's largest
  // source term (LeakyReLU is increasing), detached.
  at::Tensor dateMax = std::get<0>(fromSrc.detach().view({dates, nodesPerDate, heads_}).max(1));
  at::Tensor bound = at::leaky_relu(dateMax.repeat_interleave(nodesPerDate, 0) + atDst.detach(),
                                    kNegativeSlope);  // [M, H]
  at::Tensor weight = (score - gatherRows(bound, dst)).exp();
  at::Tensor total = at::zeros({nodes, heads_}, score.options()).index_add(0, dst, weight);
  at::Tensor alpha = weight / (gatherRows(total, dst) + 1e-16);
  alpha = at::dropout(alpha, dropout_, is_training());
  at::Tensor messages = gatherRows(x, src) * alpha.unsqueeze(-1);  // [E, H, C]
  at::Tensor out =
      at::zeros({nodes, heads_, channels_}, messages.options()).index_add(0, dst, messages);
  return out.view({nodes, heads_ * channels_}) + bias_;
}

// --- Gat ----------------------------------------------------------------------------------

Gat::Gat(const ModelConfig& config, const data::DataInfo& info)
    : values_(inputIndex(info, "values")),
      mask_(inputIndex(info, "mask")),
      returns_(inputIndex(info, "returns")),
      sector_(inputIndex(info, "sector")),
      hidden_(config.hidden),
      dropout_(config.dropout),
      objective_(config, info),
      graphs_(config.graph) {
  if (values_ < 0 || mask_ < 0)
    throw ConfigError("model.kind = gat needs the panel layout's inputs (values, mask), but " +
                          info.path + " is read as data.layout = " + info.layout,
                      "set data.layout = panel (docs/data-format.md)");
  const data::InputSpec& values = info.inputs[values_];
  const GraphConfig& graph = config.graph;
  if (graph.layers > 0 && graph.k > 0 && returns_ < 0)
    throw ConfigError("gat: model.graph.k = " + std::to_string(graph.k) +
                      " needs the batch's returns, which the panel layout did not provide");
  if (config.encoder == EncoderKind::kTransformer) {
    transformer_ = register_module("encoder", std::make_shared<TransformerEncoder>(
                                                  values.features, values.window, hidden_,
                                                  config.heads, config.layers, config.dropout));
  } else {
    lstm_ = register_module(
        "encoder", torch::nn::LSTM(torch::nn::LSTMOptions(values.features, hidden_)
                                       .num_layers(config.layers)
                                       .batch_first(true)
                                       .dropout(config.layers > 1 ? config.dropout : 0.0)));
  }
  if (graph.layers > 0) {
    auto gat = register_module("gat", torch::nn::ModuleList());
    auto norms = register_module("norms", torch::nn::ModuleList());
    for (std::int64_t i = 0; i < graph.layers; ++i) {
      layers_.push_back(std::make_shared<GatConv>(hidden_, config.heads, config.dropout));
      gat->push_back(layers_.back());
      norms_.emplace_back(torch::nn::LayerNormOptions({hidden_}));
      norms->push_back(norms_.back());
    }
  }
  head_ = register_module(
      "head", makeHead(hidden_, config.headHidden, objective_.outputs(), config.dropout));
}

const at::Tensor& Gat::input(const data::Batch& batch, int index) const {
  static const at::Tensor none;
  if (index < 0) return none;
  if (index >= static_cast<int>(batch.inputs.size()))
    throw RuntimeError("gat: the batch has " + std::to_string(batch.inputs.size()) +
                       " inputs, expected the panel layout's");
  return batch.inputs[index];
}

at::Tensor Gat::encode(const at::Tensor& windows) {
  if (transformer_) return transformer_->forward(windows);
  auto out = lstm_->forward(windows.to(lstm_->parameters().front().scalar_type()));
  return std::get<0>(std::get<1>(out))[lstm_->options.num_layers() - 1];  // [M, hidden]
}

// Note [Present instruments]: absent instruments take part in no edge and no loss, so their
// encodings only need to be defined: zeros. On the CPU the encoder runs on the present ones
// alone (a real saving when a universe's instruments come and go); on CUDA on all of them,
// zeroed after, because selecting them needs their count on the host, a sync in every step.
// Either way present instruments get the same encodings, outputs and gradients.
at::Tensor Gat::encodePresent(const at::Tensor& windows, const at::Tensor& present) {
  const std::int64_t nodes = windows.size(0);
  if (!windows.device().is_cpu())
    return encode(windows) * present.unsqueeze(1).to(at::kFloat);  // [M, hidden]
  at::Tensor rows = present.nonzero().squeeze(1);                  // [M'] present node ids
  if (rows.size(0) == nodes) return encode(windows);
  if (rows.size(0) == 0)
    return at::zeros({nodes, hidden_}, windows.options().dtype(at::kFloat)).requires_grad_(false);
  at::Tensor encoded = encode(windows.index_select(0, rows));  // [M', hidden]
  return at::zeros({nodes, hidden_}, encoded.options()).index_copy(0, rows, encoded);
}

at::Tensor Gat::forward(const data::Batch& batch) {
  const at::Tensor& values = input(batch, values_);  // [B, N, W, F]
  const at::Tensor& present = input(batch, mask_);   // [B, N]
  if (values.dim() != 4)
    throw RuntimeError("gat: the values input must be [B, N, W, F], got " +
                       std::to_string(values.dim()) + " dimensions");
  const std::int64_t dates = values.size(0), nodes = values.size(1);
  at::Tensor h = encodePresent(values.reshape({dates * nodes, values.size(2), values.size(3)}),
                               present.reshape({-1}).to(at::kBool));  // [B*N, hidden]
  if (!layers_.empty()) {
    at::Tensor edges = graphs_.batchEdges(batch, input(batch, returns_), present.to(at::kBool),
                                          input(batch, sector_));  // [2, E]
    at::Tensor src = edges[0], dst = edges[1];
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      Segment attend = [layer = layers_[i], norm = norms_[i], src, dst, nodes, dropout = dropout_,
                        training = is_training()](const at::Tensor& in) mutable {
        at::Tensor update =
            at::dropout(at::elu(layer->forward(in, src, dst, nodes)), dropout, training);
        return norm->forward(in.to(at::kFloat) + update);
      };
      const bool recompute =
          recomputeEvery_ > 0 && static_cast<std::int64_t>(i) % recomputeEvery_ == 0;
      h = recompute ? recomputed(attend, h, parametersOf(*layers_[i], *norms_[i])) : attend(h);
    }
  }
  at::Tensor out = head_->forward(h);
  return objective_.predictions(out.view({dates, nodes, objective_.outputs()}));
}

at::Tensor Gat::lossSum(const at::Tensor& output, const data::Batch& batch) {
  return objective_.lossSum(output, batch.targets, input(batch, mask_).to(at::kBool));
}

NamedTensors Gat::metricSums(const at::Tensor& output, const data::Batch& batch) {
  return objective_.metricSums(output, batch.targets, input(batch, mask_).to(at::kBool));
}

void Gat::startEpoch(std::int64_t /*epoch*/) {
  graphs_.startEpoch();
}

std::vector<std::pair<std::string, double>> Gat::statistics() const {
  if (layers_.empty()) return {};
  const PanelGraphCache::Stats& s = graphs_.stats();
  return {{"graphs_built", static_cast<double>(s.built)},
          {"graphs_built_epoch", static_cast<double>(s.builtThisEpoch)},
          {"graphs_cached", static_cast<double>(s.cached)},
          {"graph_cache_mb", static_cast<double>(s.bytes) / (1 << 20)},
          {"graph_cache_hits", static_cast<double>(s.hits)},
          {"graphs_uncached", static_cast<double>(s.uncachedBuilds)}};
}

ModelKind gatModelKind() {
  ModelKind kind;
  kind.name = "gat";
  kind.summary =
      "cross-sectional: a temporal encoder per instrument, graph attention across the "
      "instruments of a date, a head";
  kind.layouts = {"panel"};
  kind.build = [](const ModelConfig& config, const data::DataInfo& info) {
    return std::make_shared<Gat>(config, info);
  };
  kind.checkConfig = checkGatConfig;
  return kind;
}

}  // namespace mb::model
