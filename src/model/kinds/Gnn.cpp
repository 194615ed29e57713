#include "model/kinds/Gnn.h"

#include <optional>
#include <sstream>

#include <ATen/Functions.h>

#include "common/Error.h"
#include "common/Log.h"
#include "model/Recompute.h"
#include "model/parts/ClassMetrics.h"
#include "model/parts/Heads.h"

namespace mb::model {
namespace {

std::int64_t inputWidth(const data::DataInfo& info, const std::string& name) {
  for (const auto& input : info.inputs) {
    if (input.name == name) return input.features;
  }
  return -1;  // absent
}

bool hasInput(const data::DataInfo& info, const std::string& name) {
  return inputWidth(info, name) >= 0;
}

std::optional<std::string> checkGnnConfig(const Config& c) {
  if (c.model.conv == GraphConv::kGat && c.model.hidden % std::max<std::int64_t>(c.model.heads, 1))
    return "model.conv = gat concatenates its heads: model.hidden = " +
           std::to_string(c.model.hidden) +
           " must be a multiple of model.heads = " + std::to_string(c.model.heads);
  return std::nullopt;
}

}  // namespace

Gnn::Gnn(const ModelConfig& config, const data::DataInfo& info)
    : conv_(config.conv),
      pooling_(config.pooling),
      residual_(config.residual),
      dropout_(config.dropout),
      objective_(config, info) {
  const std::int64_t hidden = config.hidden;
  const std::int64_t features = inputWidth(info, "node_features");
  if (features < 0 && !hasInput(info, "node_types"))
    throw ConfigError("model.kind = gnn needs graphs with node inputs, but " + info.path +
                          " (layout " + info.layout + ") has no node_features or node_types",
                      "use data.layout = graphs (docs/data-format.md)");
  if (features == 0)
    throw DataError(info.path + ": /node_features has 0 columns",
                    "drop the dataset or add features");
  if (features > 0)
    nodeEncoder_ = register_module("node_encoder", torch::nn::Linear(features, hidden));
  if (hasInput(info, "node_types")) {
    if (info.vocabSize < 1)
      throw DataError(info.path + ": /node_type needs vocab_size >= 1, found " +
                      std::to_string(info.vocabSize));
    typeEmbedding_ =
        register_module("type_embedding", torch::nn::Embedding(info.vocabSize, hidden));
  }
  const std::int64_t edgeFeatures = std::max<std::int64_t>(0, inputWidth(info, "edge_features"));
  if (edgeFeatures > 0 && conv_ == GraphConv::kGcn)
    log::get("model").warn(
        "{}: model.conv = gcn does not use edge features; /edge_features is ignored (gin and gat "
        "use them)",
        info.path);
  convs_ = register_module("convs", torch::nn::ModuleList());
  for (std::int64_t l = 0; l < config.layers; ++l) {
    std::shared_ptr<GraphLayer> layer =
        makeGraphLayer(conv_, hidden, hidden, edgeFeatures, config.heads, config.dropout);
    convs_->push_back(layer);
    layers_.push_back(layer);
  }
  if (pooling_ == GraphPooling::kAttention) {
    auto pool = std::make_shared<torch::nn::Module>();
    gate_ = pool->register_module("gate", torch::nn::Linear(hidden, 1));
    register_module("pool", pool);
  }
  head_ = register_module(
      "head", makeHead(hidden, config.headHidden, objective_.outputs(), config.dropout));
  registerClassWeights(config, info);
}

// model.class_weights = balanced: w_c = n / (K n_c) over the K classes the train split holds
// (0 for a class it lacks). Without counts (a model rebuilt from a checkpoint) the weights are
// ones until the checkpoint's criterion.weight is loaded.
void Gnn::registerClassWeights(const ModelConfig& config, const data::DataInfo& info) {
  if (config.classWeights != ClassWeights::kBalanced) return;
  const std::int64_t classes = objective_.outputs();
  at::Tensor weight = at::ones({classes});
  const auto& counts = info.trainClassCounts;
  if (!counts.empty()) {
    std::int64_t total = 0, present = 0;
    for (std::int64_t count : counts) {
      total += count;
      present += count > 0;
    }
    std::ostringstream text;
    for (std::int64_t c = 0; c < classes; ++c) {
      std::int64_t count = c < static_cast<std::int64_t>(counts.size()) ? counts[c] : 0;
      double w = count > 0 ? static_cast<double>(total) / static_cast<double>(present * count) : 0;
      weight[c] = w;
      text << (c ? ", " : "") << c << ": " << count << " -> " << w;
    }
    log::get("model").info("class weights (balanced, train labels per class -> weight): {}",
                           text.str());
  }
  auto criterion = std::make_shared<torch::nn::Module>();
  classWeight_ = criterion->register_buffer("weight", weight);
  register_module("criterion", criterion);
}

at::Tensor Gnn::encodeNodes(const data::Batch& batch) {
  at::Tensor h;
  if (nodeEncoder_) {
    if (!batch.nodeFeatures.defined())
      throw RuntimeError("gnn: the batch has no node features (is data.layout = graphs?)");
    h = nodeEncoder_->forward(batch.nodeFeatures.to(nodeEncoder_->weight.scalar_type()));
  }
  if (typeEmbedding_) {
    if (!batch.nodeTypes.defined()) throw RuntimeError("gnn: the batch has no node types");
    at::Tensor embedded = typeEmbedding_->forward(batch.nodeTypes);
    h = h.defined() ? h + embedded.to(h.scalar_type()) : embedded;
  }
  return h;  // [N, hidden]
}

at::Tensor Gnn::pool(const at::Tensor& h, const at::Tensor& nodeGraph, std::int64_t graphs) {
  switch (pooling_) {
    case GraphPooling::kMean: {
      at::Tensor ones = at::ones({h.size(0), 1}, h.options());
      return scatterSum(h, nodeGraph, graphs) / scatterSum(ones, nodeGraph, graphs).clamp_min(1);
    }
    case GraphPooling::kMax:
      return scatterMax(h, nodeGraph, graphs);  // every graph has a node
    case GraphPooling::kAttention: {
      at::Tensor alpha = groupSoftmax(gate_->forward(h), nodeGraph, graphs);  // [N, 1] fp32
      return scatterSum(h * alpha.to(h.scalar_type()), nodeGraph, graphs);
    }
    case GraphPooling::kSum:
      break;
  }
  return scatterSum(h, nodeGraph, graphs);
}

at::Tensor Gnn::forward(const data::Batch& batch) {
  if (!batch.edgeIndex.defined() || !batch.nodeGraph.defined())
    throw RuntimeError("gnn: the batch is not a graph batch (data.layout = graphs gathers them)");
  at::Tensor h = encodeNodes(batch);
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    Segment passMessages = [layer = layers_[l], edges = batch.edgeIndex,
                            edgeFeatures = batch.edgeFeatures, dropout = dropout_,
                            training = is_training(), residual = residual_](const at::Tensor& in) {
      // In place: every layer ends in an op whose backward does not need its output.
      at::Tensor z = layer->forward(in, edges, edgeFeatures).relu_();
      z = at::dropout(z, dropout, training);
      return residual ? in + z.to(in.scalar_type()) : z;
    };
    const bool recompute =
        recomputeEvery_ > 0 && static_cast<std::int64_t>(l) % recomputeEvery_ == 0;
    h = recompute ? recomputed(passMessages, h, layers_[l]->parameters()) : passMessages(h);
  }
  at::Tensor graphs = pool(h, batch.nodeGraph, batch.size());  // [B, hidden]
  return objective_.predictions(head_->forward(graphs));
}

at::Tensor Gnn::lossSum(const at::Tensor& output, const data::Batch& batch) {
  return objective_.lossSum(output, batch.targets, classWeight_);
}

NamedTensors Gnn::metricSums(const at::Tensor& output, const data::Batch& batch) {
  return objective_.metricSums(output, batch.targets);
}

std::int64_t Gnn::splitRowWidth() const {
  return objective_.task() == Task::kClassification ? 1 + objective_.outputs() : 0;
}

at::Tensor Gnn::splitRows(const at::Tensor& output, const data::Batch& batch) {
  return classificationRows(output, batch.targets);
}

std::map<std::string, double> Gnn::splitMetrics(const at::Tensor& rows) const {
  return classificationMetrics(rows);
}

ModelKind gnnModelKind() {
  ModelKind kind;
  kind.name = "gnn";
  kind.summary = "message passing over graphs (gcn, gat, gin), a graph readout, then an MLP head";
  kind.layouts = {"graphs"};
  kind.classWeights = true;
  kind.build = [](const ModelConfig& config, const data::DataInfo& info) {
    return std::make_shared<Gnn>(config, info);
  };
  kind.checkConfig = checkGnnConfig;
  return kind;
}

}  // namespace mb::model
