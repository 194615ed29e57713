// Writes the cases of the PyTorch parity test (test_parity.py): for each model kind, a file
// with the model's state_dict (through model::writeStateDict, as checkpoints store it), an
// input batch, and what the C++ model computes on it: outputs, loss sum, metric sums, and the
// gradient of the loss sum with respect to every parameter. The Python side rebuilds the
// module with torch.nn, loads the weights by name, and must reproduce all of it. The C++ side
// computes on test::device() (MEGABATCH_TEST_DEVICE), so under cuda the CPU PyTorch reference
// checks the CUDA model.
//
// For kind: gat it also writes the batch graph the model attends over (/edges, from
// model::buildPanelGraphs), and for the graph builder alone, OUT_DIR/graphs/<case>.h5 with its
// inputs and the edges of every date, which test_parity.py compares with a numpy reference.
//
//   megabatch_model_parity OUT_DIR     -> OUT_DIR/<case>.h5, one per case; OUT_DIR/graphs/*.h5
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <ATen/Functions.h>
#include <torch/autograd.h>

#include "common/Error.h"
#include "common/Hdf5.h"
#include "config/Config.h"
#include "data/Batch.h"
#include "data/DataInfo.h"
#include "model/Model.h"
#include "model/StateDict.h"
#include "model/kinds/Gpt.h"
#include "model/parts/PanelGraph.h"
#include "tests/support/Device.h"

namespace {

using mb::ExitCode;
using mb::data::Batch;
using mb::data::DataInfo;
using mb::data::InputSpec;

struct Case {
  std::string name;
  mb::ModelConfig config;
  DataInfo info;
};

// A panel batch's description: values [B, N, W, F], mask, returns [B, N, L] (L > 0), sector.
DataInfo panelInfo(std::int64_t window, std::int64_t features, std::int64_t lookback, bool sector,
                   std::vector<std::int64_t> targetShape) {
  DataInfo info;
  info.layout = "panel";
  info.path = "parity";
  info.inputs = {{"values", window, features}, {"mask", 0, 0}};
  if (lookback > 0) info.inputs.push_back({"returns", lookback, 1});
  if (sector) info.inputs.push_back({"sector", 0, 0});
  info.targetShape = std::move(targetShape);
  return info;
}

constexpr std::int64_t kPanelInstruments = 12;

// A panel batch of `rows` dates: some instruments absent, gaps in the returns' lookback.
Batch makePanelBatch(const Case& c, std::int64_t rows) {
  const std::int64_t n = kPanelInstruments;
  Batch batch;
  at::Tensor present = at::rand({rows, n}) < 0.8;
  present.narrow(1, 0, 2).fill_(true);  // at least two instruments a date
  for (const auto& input : c.info.inputs) {
    if (input.name == "values") {
      batch.inputs.push_back(at::randn({rows, n, input.window, input.features}) *
                             present.view({rows, n, 1, 1}));
    } else if (input.name == "mask") {
      batch.inputs.push_back(present);
    } else if (input.name == "returns") {
      at::Tensor returns = at::randn({rows, n, input.window});
      returns.masked_fill_(at::rand({rows, n, input.window}) < 0.1, NAN);
      returns.masked_fill_(present.logical_not().unsqueeze(2), NAN);
      batch.inputs.push_back(returns);
    } else {
      batch.inputs.push_back(at::randint(-1, 3, {rows, n}, at::kLong));
    }
  }
  std::vector<std::int64_t> shape{rows, n};
  shape.insert(shape.end(), c.info.targetShape.begin(), c.info.targetShape.end());
  at::Tensor weight = present.to(at::kFloat);
  if (!c.info.targetShape.empty()) weight = weight.unsqueeze(2);
  batch.targets = at::randn(shape) * weight;
  batch.sampleIndex = at::arange(rows, at::kLong);
  for (std::int64_t i = 0; i < rows; ++i)
    batch.hostSampleIndex.push_back(i);
  return batch;
}

// The batch graph of a gat case, built from the batch as the model builds it: date b's
// edges shifted by b*N. Empty for a model without graph layers.
at::Tensor panelEdges(const Case& c, const Batch& batch) {
  if (c.config.graph.layers == 0) return {};
  auto find = [&](const char* name) {
    for (std::size_t i = 0; i < c.info.inputs.size(); ++i) {
      if (c.info.inputs[i].name == name) return batch.inputs[i];
    }
    return at::Tensor();
  };
  std::vector<at::Tensor> graphs = mb::model::buildPanelGraphs(
      find("returns"), find("mask").to(at::kBool), find("sector"), c.config.graph);
  const std::int64_t n = find("mask").size(1);
  for (std::size_t b = 0; b < graphs.size(); ++b)
    graphs[b] = graphs[b] + static_cast<std::int64_t>(b) * n;
  return at::cat(graphs, 1);
}

DataInfo seriesInfo(const std::vector<InputSpec>& inputs, std::vector<std::int64_t> targetShape,
                    std::int64_t classes) {
  DataInfo info;
  info.layout = "series";
  info.path = "parity";
  info.inputs = inputs;
  info.targetShape = std::move(targetShape);
  info.integerTargets = classes > 0;
  info.numClasses = classes;
  return info;
}

// model.kind = gnn (Gnn.h): each message-passing kind, each pooling, residual, node types,
// edge features, class weights, regression.
DataInfo graphInfo(std::int64_t features, std::int64_t vocab, std::int64_t edgeFeatures,
                   std::vector<std::int64_t> targetShape, std::int64_t classes) {
  DataInfo info;
  info.layout = "graphs";
  info.path = "parity";
  if (features > 0) info.inputs.push_back({"node_features", 0, features});
  if (vocab > 0) info.inputs.push_back({"node_types", 0, 0});
  if (edgeFeatures > 0) info.inputs.push_back({"edge_features", 0, edgeFeatures});
  info.vocabSize = vocab;
  info.targetShape = std::move(targetShape);
  info.integerTargets = classes > 0;
  info.numClasses = classes;
  return info;
}

void addGraphCases(std::vector<Case>& all) {
  mb::ModelConfig gnn;
  gnn.kind = "gnn";
  gnn.task = mb::Task::kClassification;
  gnn.hidden = 8;
  gnn.layers = 2;
  gnn.headHidden = 6;
  gnn.conv = mb::GraphConv::kGcn;
  gnn.pooling = mb::GraphPooling::kMean;
  all.push_back({"gnn_gcn_mean", gnn, graphInfo(3, 0, 0, {}, 3)});
  mb::ModelConfig gat = gnn;
  gat.conv = mb::GraphConv::kGat;
  gat.heads = 2;
  gat.pooling = mb::GraphPooling::kAttention;
  gat.classWeights = mb::ClassWeights::kBalanced;
  DataInfo gatInfo = graphInfo(3, 5, 2, {}, 3);
  gatInfo.trainClassCounts = {5, 1, 4};
  all.push_back({"gnn_gat_attention_edges_weighted", gat, gatInfo});
  mb::ModelConfig gine = gnn;
  gine.task = mb::Task::kRegression;
  gine.conv = mb::GraphConv::kGin;
  gine.pooling = mb::GraphPooling::kSum;
  gine.residual = true;
  gine.headHidden = 0;
  all.push_back({"gnn_gine_sum_residual_regression", gine, graphInfo(0, 4, 2, {2}, 0)});
  mb::ModelConfig gin = gnn;
  gin.conv = mb::GraphConv::kGin;
  gin.pooling = mb::GraphPooling::kMax;
  gin.layers = 3;
  all.push_back({"gnn_gin_max", gin, graphInfo(4, 0, 0, {}, 2)});
  mb::ModelConfig none = gnn;
  none.conv = mb::GraphConv::kNone;
  none.pooling = mb::GraphPooling::kSum;
  all.push_back({"gnn_none_sum", none, graphInfo(3, 5, 0, {}, 3)});
}

std::vector<Case> cases() {
  std::vector<Case> all;
  mb::ModelConfig lstm;
  lstm.kind = "lstm";
  lstm.hidden = 8;
  lstm.layers = 2;
  lstm.headHidden = 6;
  all.push_back({"lstm_multi_regression", lstm,
                 seriesInfo({{"m1", 12, 5}, {"m5", 7, 3}, {"h1", 4, 2}}, {}, 0)});
  mb::ModelConfig huber = lstm;
  huber.loss = mb::LossKind::kHuber;
  huber.huberDelta = 0.5;
  huber.layers = 1;
  all.push_back({"lstm_multi_huber_k3", huber, seriesInfo({{"m5", 9, 4}, {"h4", 5, 4}}, {3}, 0)});
  mb::ModelConfig single = lstm;
  single.task = mb::Task::kClassification;
  single.headHidden = 0;
  all.push_back({"lstm_single_classification", single, seriesInfo({{"features", 10, 6}}, {}, 4)});

  mb::ModelConfig mlp;
  mlp.kind = "mlp";
  mlp.hidden = 16;
  mlp.layers = 2;
  all.push_back({"mlp_regression_k2", mlp, seriesInfo({{"features", 0, 7}}, {2}, 0)});
  mb::ModelConfig mlpClass = mlp;
  mlpClass.task = mb::Task::kClassification;
  mlpClass.layers = 1;
  all.push_back({"mlp_classification", mlpClass, seriesInfo({{"m1", 6, 3}, {"m5", 3, 2}}, {}, 5)});

  mb::ModelConfig gpt;
  gpt.kind = "gpt";
  gpt.hidden = 32;
  gpt.layers = 2;
  gpt.heads = 4;
  DataInfo tokens;
  tokens.layout = "tokens";
  tokens.path = "parity";
  tokens.inputs = {{"tokens", 16, 0}};
  tokens.targetShape = {16};
  tokens.integerTargets = true;
  tokens.vocabSize = 50;
  all.push_back({"gpt", gpt, tokens});
  mb::ModelConfig gptNoBias = gpt;
  gptNoBias.bias = false;
  gptNoBias.layers = 1;
  gptNoBias.heads = 2;
  all.push_back({"gpt_nobias", gptNoBias, tokens});

  mb::ModelConfig gat;
  gat.kind = "gat";
  gat.hidden = 8;
  gat.layers = 1;
  gat.heads = 2;
  gat.headHidden = 6;
  gat.graph.layers = 2;
  gat.graph.k = 3;
  gat.graph.lookback = 10;
  gat.graph.minPeriods = 5;
  all.push_back({"gat_lstm_regression", gat, panelInfo(6, 4, 10, false, {})});
  mb::ModelConfig transformer = gat;
  transformer.encoder = mb::EncoderKind::kTransformer;
  transformer.layers = 2;
  transformer.graph.layers = 1;
  transformer.graph.sectorEdges = true;
  transformer.loss = mb::LossKind::kHuber;
  transformer.huberDelta = 0.5;
  all.push_back({"gat_transformer_sector_k2", transformer, panelInfo(5, 3, 10, true, {2})});
  mb::ModelConfig sign = gat;
  sign.task = mb::Task::kClassification;
  sign.heads = 4;
  sign.graph.layers = 1;
  all.push_back({"gat_sign_classification", sign, panelInfo(4, 3, 8, false, {})});
  mb::ModelConfig alone = gat;
  alone.graph.layers = 0;
  all.push_back({"gat_without_graph", alone, panelInfo(4, 3, 0, false, {})});
  addGraphCases(all);
  return all;
}

// Three graphs of 4, 3 and 5 nodes: a ring each way in the first, a path one way in the
// second, a star and an extra edge in the third (no duplicate edges, no self loops).
Batch makeGraphBatch(const Case& c) {
  Batch batch;
  const std::vector<std::int64_t> sizes{4, 3, 5};
  std::vector<std::int64_t> sources, targets, owner;
  auto edge = [&](std::int64_t base, std::int64_t s, std::int64_t t) {
    sources.push_back(base + s);
    targets.push_back(base + t);
  };
  for (std::int64_t i = 0; i < 4; ++i) {
    edge(0, i, (i + 1) % 4);
    edge(0, (i + 1) % 4, i);
  }
  edge(4, 0, 1);
  edge(4, 1, 2);
  for (std::int64_t i = 1; i < 5; ++i)
    edge(7, 0, i);
  edge(7, 3, 4);
  for (std::size_t g = 0; g < sizes.size(); ++g) {
    for (std::int64_t i = 0; i < sizes[g]; ++i)
      owner.push_back(static_cast<std::int64_t>(g));
  }
  const auto nodes = static_cast<std::int64_t>(owner.size());
  const auto edges = static_cast<std::int64_t>(sources.size());
  for (const auto& input : c.info.inputs) {
    if (input.name == "node_features") batch.nodeFeatures = at::randn({nodes, input.features});
    if (input.name == "node_types")
      batch.nodeTypes = at::randint(c.info.vocabSize, {nodes}, at::kLong);
    if (input.name == "edge_features") batch.edgeFeatures = at::randn({edges, input.features});
  }
  batch.edgeIndex = at::stack({at::tensor(sources, at::kLong), at::tensor(targets, at::kLong)});
  batch.nodeGraph = at::tensor(owner, at::kLong);
  const std::int64_t rows = static_cast<std::int64_t>(sizes.size());
  if (c.info.numClasses > 0) {
    batch.targets = at::tensor({0, 2, 1}, at::kLong).remainder(c.info.numClasses);
  } else {
    std::vector<std::int64_t> shape{rows};
    shape.insert(shape.end(), c.info.targetShape.begin(), c.info.targetShape.end());
    batch.targets = at::randn(shape);
  }
  batch.sampleIndex = at::arange(rows, at::kLong);
  for (at::Tensor* t :
       {&batch.nodeFeatures, &batch.nodeTypes, &batch.edgeIndex, &batch.edgeFeatures,
        &batch.nodeGraph, &batch.targets, &batch.sampleIndex}) {
    if (t->defined()) *t = t->to(mb::test::device());
  }
  return batch;
}

const char* convText(mb::GraphConv conv) {
  switch (conv) {
    case mb::GraphConv::kGcn:
      return "gcn";
    case mb::GraphConv::kGat:
      return "gat";
    case mb::GraphConv::kGin:
      return "gin";
    default:
      return "none";
  }
}

const char* poolingText(mb::GraphPooling pooling) {
  switch (pooling) {
    case mb::GraphPooling::kMean:
      return "mean";
    case mb::GraphPooling::kMax:
      return "max";
    case mb::GraphPooling::kAttention:
      return "attention";
    default:
      return "sum";
  }
}

// --- the graph builder alone ---------------------------------------------------------------

struct GraphCase {
  std::string name;
  std::int64_t dates, nodes, lookback;
  mb::GraphConfig config;
  bool sector;
};

// Returns with gaps, a constant series, an instrument with too few dates, absent instruments.
void writeGraphCase(const std::string& dir, const GraphCase& c) {
  at::Tensor returns = at::randn({c.dates, c.nodes, c.lookback}, at::kDouble).to(at::kFloat);
  at::Tensor gaps = at::rand({c.dates, c.nodes, c.lookback}) < 0.15;
  returns.masked_fill_(gaps, NAN);
  returns[0][1].fill_(0.25);  // constant: no correlation
  const std::int64_t hidden = std::max<std::int64_t>(0, c.lookback - c.config.minPeriods + 1);
  returns[0][2].narrow(0, 0, hidden).fill_(NAN);  // too few dates left for a correlation
  at::Tensor present = at::rand({c.dates, c.nodes}) < 0.85;
  present[0][0] = true;
  at::Tensor sector = c.sector ? at::randint(-1, 4, {c.dates, c.nodes}, at::kLong) : at::Tensor();
  std::vector<at::Tensor> graphs = mb::model::buildPanelGraphs(
      returns.to(mb::test::device()), present.to(mb::test::device()),
      sector.defined() ? sector.to(mb::test::device()) : sector, c.config);

  std::string path = dir + "/" + c.name + ".h5";
  mb::h5::Handle file = mb::h5::createFile(path, true, ExitCode::kFailure);
  mb::h5::WriteOptions plain;
  mb::h5::writeTensor(file.get(), "returns", returns, plain, ExitCode::kFailure);
  mb::h5::writeTensor(file.get(), "present", present, plain, ExitCode::kFailure);
  if (sector.defined())
    mb::h5::writeTensor(file.get(), "sector", sector, plain, ExitCode::kFailure);
  mb::h5::writeAttribute(file.get(), "k", c.config.k, ExitCode::kFailure);
  mb::h5::writeAttribute(file.get(), "min_periods", c.config.minPeriods, ExitCode::kFailure);
  mb::h5::Handle edges = mb::h5::createGroup(file.get(), "edges", ExitCode::kFailure);
  for (std::size_t d = 0; d < graphs.size(); ++d)
    mb::h5::writeTensor(edges.get(), std::to_string(d), graphs[d].cpu(), plain, ExitCode::kFailure);
  edges.reset();
  file.close(ExitCode::kFailure, path);
  std::printf("%s: %zu dates\n", path.c_str(), graphs.size());
}

std::vector<GraphCase> graphCases() {
  mb::GraphConfig knn;
  knn.k = 5;
  knn.minPeriods = 10;
  mb::GraphConfig sector = knn;
  sector.k = 3;
  sector.sectorEdges = true;
  mb::GraphConfig wide = knn;
  wide.k = 50;  // more than the candidates: every valid neighbour
  wide.minPeriods = 4;
  mb::GraphConfig none = knn;
  none.k = 0;  // self-loops (and sectors) only
  return {{"knn_k5", 5, 30, 40, knn, false},
          {"knn_k3_sector", 3, 25, 30, sector, true},
          {"knn_all_candidates", 2, 20, 12, wide, false},
          {"sector_only", 2, 16, 8, none, true}};
}

Batch makeBatch(const Case& c, std::int64_t rows) {
  if (c.config.kind == "gnn") return makeGraphBatch(c);
  if (c.info.layout == "panel") {
    Batch batch = makePanelBatch(c, rows);
    for (auto& input : batch.inputs)
      input = input.to(mb::test::device());
    batch.targets = batch.targets.to(mb::test::device());
    batch.sampleIndex = batch.sampleIndex.to(mb::test::device());
    return batch;
  }
  Batch batch;
  for (const auto& input : c.info.inputs) {
    if (c.config.kind == "gpt") {
      batch.inputs.push_back(at::randint(c.info.vocabSize, {rows, input.window}, at::kLong));
    } else if (input.window > 0) {
      batch.inputs.push_back(at::randn({rows, input.window, input.features}));
    } else {
      batch.inputs.push_back(at::randn({rows, input.features}));
    }
  }
  if (c.config.kind == "gpt") {
    batch.targets = at::randint(c.info.vocabSize, {rows, c.info.inputs[0].window}, at::kLong);
  } else if (c.info.numClasses > 0) {
    batch.targets = at::randint(c.info.numClasses, {rows}, at::kLong);
  } else {
    std::vector<std::int64_t> shape{rows};
    shape.insert(shape.end(), c.info.targetShape.begin(), c.info.targetShape.end());
    batch.targets = at::randn(shape);
  }
  batch.sampleIndex = at::arange(rows, at::kLong);
  // Drawn on the CPU (the same values on every device), computed on the test device.
  for (auto& input : batch.inputs)
    input = input.to(mb::test::device());
  batch.targets = batch.targets.to(mb::test::device());
  batch.sampleIndex = batch.sampleIndex.to(mb::test::device());
  return batch;
}

const char* enumText(mb::LossKind loss) {
  switch (loss) {
    case mb::LossKind::kHuber:
      return "huber";
    case mb::LossKind::kMse:
      return "mse";
    case mb::LossKind::kCrossEntropy:
      return "cross_entropy";
    default:
      return "auto";
  }
}

void writeCase(const std::string& dir, const Case& c) {
  auto model = mb::model::buildModel(c.config, c.info, 20240607);
  model->to(mb::test::device());
  model->train();
  Batch batch = makeBatch(c, 3);
  at::Tensor output = model->forward(batch);
  at::Tensor loss = model->lossSum(output, batch);
  loss.backward();

  std::string path = dir + "/" + c.name + ".h5";
  mb::h5::Handle file = mb::h5::createFile(path, true, ExitCode::kFailure);
  hid_t root = file.get();
  const auto& m = c.config;
  mb::h5::writeAttribute(root, "kind", model->kind(), ExitCode::kFailure);
  mb::h5::writeAttribute(root, "device", mb::test::device().str(), ExitCode::kFailure);
  mb::h5::writeAttribute(
      root, "task",
      std::string(m.task == mb::Task::kClassification ? "classification" : "regression"),
      ExitCode::kFailure);
  mb::h5::writeAttribute(root, "loss", std::string(enumText(m.loss)), ExitCode::kFailure);
  mb::h5::writeAttribute(root, "huber_delta", m.huberDelta, ExitCode::kFailure);
  mb::h5::writeAttribute(root, "hidden", m.hidden, ExitCode::kFailure);
  mb::h5::writeAttribute(root, "layers", m.layers, ExitCode::kFailure);
  mb::h5::writeAttribute(root, "heads", m.heads, ExitCode::kFailure);
  mb::h5::writeAttribute(root, "head_hidden", m.headHidden, ExitCode::kFailure);
  mb::h5::writeAttribute(root, "bias", std::int64_t{m.bias}, ExitCode::kFailure);
  mb::h5::writeAttribute(root, "vocab_size", c.info.vocabSize, ExitCode::kFailure);
  mb::h5::writeAttribute(root, "num_classes", c.info.numClasses, ExitCode::kFailure);
  mb::h5::writeAttribute(root, "conv", std::string(convText(m.conv)), ExitCode::kFailure);
  mb::h5::writeAttribute(root, "pooling", std::string(poolingText(m.pooling)), ExitCode::kFailure);
  mb::h5::writeAttribute(root, "residual", std::int64_t{m.residual}, ExitCode::kFailure);
  std::string streams;
  for (const auto& input : c.info.inputs)
    streams += (streams.empty() ? "" : ",") + input.name;
  mb::h5::writeAttribute(root, "streams", streams, ExitCode::kFailure);
  mb::h5::writeAttribute(
      root, "encoder",
      std::string(m.encoder == mb::EncoderKind::kTransformer ? "transformer" : "lstm"),
      ExitCode::kFailure);
  mb::h5::writeAttribute(root, "gat_layers", m.graph.layers, ExitCode::kFailure);
  mb::h5::writeAttribute(root, "graph_k", m.graph.k, ExitCode::kFailure);
  mb::h5::writeAttribute(root, "graph_min_periods", m.graph.minPeriods, ExitCode::kFailure);

  mb::h5::Handle group = mb::h5::createGroup(root, "model", ExitCode::kFailure);
  mb::model::writeStateDict(*model, group.get());
  group.reset();
  mb::h5::WriteOptions plain;
  auto put = [&](hid_t loc, const std::string& name, const at::Tensor& t) {
    mb::h5::writeTensor(loc, name, t.detach(), plain, ExitCode::kFailure);
  };
  mb::h5::Handle inputs = mb::h5::createGroup(root, "inputs", ExitCode::kFailure);
  for (std::size_t i = 0; i < batch.inputs.size(); ++i)
    put(inputs.get(), std::to_string(i), batch.inputs[i]);
  if (batch.edgeIndex.defined()) {
    mb::h5::Handle graph = mb::h5::createGroup(root, "graph", ExitCode::kFailure);
    const std::pair<const char*, const at::Tensor*> parts[] = {
        {"node_features", &batch.nodeFeatures},
        {"node_type", &batch.nodeTypes},
        {"edge_index", &batch.edgeIndex},
        {"edge_features", &batch.edgeFeatures},
        {"node_graph", &batch.nodeGraph}};
    for (const auto& [name, tensor] : parts) {
      if (tensor->defined()) put(graph.get(), name, *tensor);
    }
  }
  put(root, "targets", batch.targets);
  if (c.info.layout == "panel") {
    at::Tensor edges = panelEdges(c, batch);
    if (edges.defined()) put(root, "edges", edges);
  }
  // A GPT's forward ends at its hidden states (Note [Chunked logits]); PyTorch's gives logits.
  auto gpt = std::dynamic_pointer_cast<mb::model::Gpt>(model);
  put(root, "output", gpt ? gpt->headLogits(output) : output);
  put(root, "loss", loss);
  mb::h5::Handle metrics = mb::h5::createGroup(root, "metrics", ExitCode::kFailure);
  for (const auto& [name, value] : model->metricSums(output, batch))
    put(metrics.get(), name, value);
  mb::h5::Handle grads = mb::h5::createGroup(root, "grads", ExitCode::kFailure);
  for (const auto& item : model->named_parameters())
    put(grads.get(), item.key(), item.value().grad());
  inputs.reset();
  metrics.reset();
  grads.reset();
  file.close(ExitCode::kFailure, path);
  std::printf("%s: loss %.6f\n", path.c_str(), loss.item<double>());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  mb::h5::silenceLibraryErrors();
  try {
    std::printf("computing on %s\n", mb::test::device().str().c_str());
    at::manual_seed(7);
    for (const auto& c : cases())
      writeCase(argv[1], c);
    std::string graphs = std::string(argv[1]) + "/graphs";
    std::filesystem::create_directories(graphs);
    for (const auto& c : graphCases())
      writeGraphCase(graphs, c);
  } catch (const std::exception& e) {  // mb::Error, or no usable test device
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
