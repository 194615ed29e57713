#pragma once
// model.kind = gnn: graph classification or regression on data.layout = graphs (one sample per
// graph; a batch is one disconnected graph, data/layouts/GraphsLayout.h).
//
//   h_0 = node_encoder(node_features) [+ type_embedding(node_type)]          [N, hidden]
//   h_l = dropout(ReLU(layer_l(h_{l-1}, edge_index, edge_features)))         l = 1..layers
//         (+ h_{l-1} with model.residual), layer = model.conv (GraphConv.h)
//   g   = pool(h_layers) per graph: sum, mean, max, or attention               [B, hidden]
//         (attention: softmax over the graph's nodes of gate(h), then the weighted sum;
//          Li et al. 2016, "global attention pooling")
//   out = head(g): Linear -> GELU -> Dropout -> Linear (model.head_hidden; 0 = one Linear)
//
// Loss and metrics as lstm/mlp (Objective.h), plus the split metrics of classification
// (ClassMetrics.h: precision, recall, F1, ROC-AUC). model.class_weights = balanced weighs a
// graph of class c by n / (K n_c) in the cross-entropy, from the train split's label counts
// n_c (K classes present, n graphs): the weights average 1 over the train split, so the loss
// stays a per-sample mean.
//
// state_dict names (equal to this torch.nn module):
//   node_encoder.{weight,bias}     nn.Linear(F, hidden)      (with /node_features)
//   type_embedding.weight          nn.Embedding(vocab, hidden) (with /node_type)
//   convs.<l>.<layer names>        nn.ModuleList of the layers of GraphConv.h
//   pool.gate.{weight,bias}        nn.Linear(hidden, 1)      (pooling = attention)
//   head.0.*, head.3.*             as lstm (head.0.* alone when head_hidden = 0)
//   criterion.weight [C]           nn.CrossEntropyLoss(weight=...) (class_weights = balanced)
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>

#include "model/Model.h"
#include "model/ModelRegistry.h"
#include "model/parts/GraphConv.h"
#include "model/parts/Objective.h"

namespace mb::model {

class Gnn : public Model, public SplitMetrics, public Recomputable {
 public:
  Gnn(const ModelConfig& config, const data::DataInfo& info);

  at::Tensor forward(const data::Batch& batch) override;
  at::Tensor lossSum(const at::Tensor& output, const data::Batch& batch) override;
  std::int64_t termsPerSample() const override { return objective_.termsPerSample(); }
  NamedTensors metricSums(const at::Tensor& output, const data::Batch& batch) override;
  std::vector<std::string> metricNames() const override { return objective_.metricNames(); }
  std::string kind() const override { return "gnn"; }

  std::int64_t splitRowWidth() const override;
  at::Tensor splitRows(const at::Tensor& output, const data::Batch& batch) override;
  std::map<std::string, double> splitMetrics(const at::Tensor& rows) const override;

  // Recomputable: each message-passing layer (with its activation, dropout and residual) is a
  // segment (Note [Activation recomputation]).
  void setRecomputeEvery(std::int64_t every) override { recomputeEvery_ = every; }
  std::int64_t segmentCount() const override { return static_cast<std::int64_t>(layers_.size()); }
  std::string segmentName() const override { return "message-passing layers"; }

 private:
  at::Tensor encodeNodes(const data::Batch& batch);  // [N, hidden]
  at::Tensor pool(const at::Tensor& h, const at::Tensor& nodeGraph, std::int64_t graphs);
  void registerClassWeights(const ModelConfig& config, const data::DataInfo& info);

  GraphConv conv_;
  GraphPooling pooling_;
  bool residual_;
  double dropout_;
  Objective objective_;
  torch::nn::Linear nodeEncoder_{nullptr};
  torch::nn::Embedding typeEmbedding_{nullptr};
  torch::nn::ModuleList convs_{nullptr};
  std::vector<std::shared_ptr<GraphLayer>> layers_;  // convs_ in order
  torch::nn::Linear gate_{nullptr};                  // attention pooling
  torch::nn::Sequential head_{nullptr};
  at::Tensor classWeight_;  // [C] (criterion.weight) or undefined
  std::int64_t recomputeEvery_ = 0;
};

// model.kind = gnn, for ModelRegistry.cpp.
ModelKind gnnModelKind();

}  // namespace mb::model
