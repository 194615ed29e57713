#pragma once
// model.kind = gat: a cross-sectional model over the panel layout (ATFT-GAT style). For each
// date of the batch:
//   1. a temporal encoder reads every present instrument's window [W, F] (an LSTM, or a small
//      pre-norm transformer; model.encoder) into a vector of model.hidden (absent ones: zeros);
//   2. model.graph.layers graph-attention layers let each instrument attend to its neighbours
//      on that date (Note [Panel graph] in PanelGraph.h): h = LayerNorm(h + Dropout(ELU(GAT(h))));
//   3. a head (Linear -> GELU -> Dropout -> Linear) predicts each instrument's targets, or two
//      logits for the sign of its return (Note [Panel loss] in PanelObjective.h).
// The dates of a batch form one disconnected graph; absent instruments have no edges and no loss.
// model.graph.layers = 0 leaves the encoder and the head: the same model without the graph.
//
// state_dict names, those of this torch.nn module (and of PyG's GATConv for the layers):
//   encoder.{weight_ih,weight_hh,bias_ih,bias_hh}_l<k>          nn.LSTM(F, hidden, layers,
//                                                               batch_first=True), or
//   encoder.input.{weight,bias}, encoder.position [W, hidden],  the transformer: nn.Linear(F,
//   encoder.layers.<k>.{self_attn.in_proj_weight,               hidden), a learned position per
//     self_attn.in_proj_bias, self_attn.out_proj.{weight,bias}, window row, nn.TransformerEncoder-
//     linear1,linear2,norm1,norm2}.{weight,bias},               Layer(hidden, heads, 4*hidden,
//   encoder.norm.{weight,bias}                                  activation="gelu", batch_first=
//                                                               True, norm_first=True) per layer,
//                                                               a final nn.LayerNorm; the last
//                                                               row's vector is the encoding
//   gat.<i>.lin.weight [hidden, hidden], gat.<i>.att_src, gat.<i>.att_dst [1, heads, hidden/heads],
//   gat.<i>.bias [hidden]                                       GATConv(hidden, hidden/heads,
//                                                               heads, negative_slope=0.2)
//   norms.<i>.{weight,bias}                                     nn.LayerNorm(hidden)
//   head.0.{weight,bias}, head.3.{weight,bias}                  as the lstm model's head
//
// Note [Graph attention]
// For edges j -> i of the batch graph (src j, dst i), with x' = lin(h) split into heads:
//   e_ij = LeakyReLU_0.2(<x'_j, att_src> + <x'_i, att_dst>)          per head
//   a_ij = softmax of e_ij over the sources j of each i              (a segment softmax)
//   out_i = sum_j a_ij x'_j, heads concatenated, + bias
// computed with index_select / index_add over the edge list, in fp32. The softmax subtracts,
// for each destination i, a detached bound of its scores: LeakyReLU(max over i's date of
// <x'_j, att_src> + <x'_i, att_dst>), which no score of i exceeds because LeakyReLU is
// increasing; any per-destination constant leaves the softmax and its gradient unchanged, and
// this one needs no segment maximum (scatter_reduce), only a dense max per date. Scores more
// than ~80 below their date's bound underflow to weight 0 (a node whose every score does gets no
// message: the +1e-16 keeps it finite), which needs attention logits spread over ~80 within a
// date. Attention weights get model.dropout in training, as PyG's.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/modules/rnn.h>

#include "model/Model.h"
#include "model/ModelRegistry.h"
#include "model/parts/PanelGraph.h"
#include "model/parts/PanelObjective.h"

namespace mb::model {

// One graph-attention layer (Note [Graph attention]); names as PyG's GATConv.
class GatConv : public torch::nn::Module {
 public:
  GatConv(std::int64_t width, std::int64_t heads, double dropout);
  // `h` [M, width] (M = dates x nodesPerDate, date-major), `src`/`dst` [E] int64 node ids of
  // edges within a date -> [M, width].
  at::Tensor forward(const at::Tensor& h, const at::Tensor& src, const at::Tensor& dst,
                     std::int64_t nodesPerDate);

 private:
  std::int64_t heads_;
  std::int64_t channels_;
  double dropout_;
  torch::nn::Linear lin_{nullptr};
  at::Tensor attSrc_;  // [1, heads, channels]
  at::Tensor attDst_;
  at::Tensor bias_;  // [heads * channels]
};

class TransformerEncoder;  // model.encoder = transformer (Gat.cpp)

class Gat : public Model, public EpochCache, public Recomputable {
 public:
  Gat(const ModelConfig& config, const data::DataInfo& info);

  at::Tensor forward(const data::Batch& batch) override;
  at::Tensor lossSum(const at::Tensor& output, const data::Batch& batch) override;
  std::int64_t termsPerSample() const override { return objective_.termsPerSample(); }
  NamedTensors metricSums(const at::Tensor& output, const data::Batch& batch) override;
  std::vector<std::string> metricNames() const override { return objective_.metricNames(); }
  std::string kind() const override { return "gat"; }
  void startEpoch(std::int64_t epoch) override;
  std::vector<std::pair<std::string, double>> statistics() const override;
  void forget() override { graphs_.forget(); }

  // Recomputable: each graph-attention layer (with its ELU, dropout, residual and LayerNorm) is
  // a segment (Note [Activation recomputation]); the temporal encoder is not.
  void setRecomputeEvery(std::int64_t every) override { recomputeEvery_ = every; }
  std::int64_t segmentCount() const override { return static_cast<std::int64_t>(layers_.size()); }
  std::string segmentName() const override { return "graph-attention layers"; }

 private:
  // The batch's input at `index` (undefined when the data has none: index < 0).
  const at::Tensor& input(const data::Batch& batch, int index) const;
  // The temporal encoder: [M, W, F] windows -> [M, hidden].
  at::Tensor encode(const at::Tensor& windows);
  // The same for present instruments, zeros for the others (Note [Present instruments]);
  // `present` [M] bool.
  at::Tensor encodePresent(const at::Tensor& windows, const at::Tensor& present);

  int values_ = -1, mask_ = -1, returns_ = -1, sector_ = -1;  // indices into Batch::inputs
  std::int64_t hidden_;
  double dropout_;
  PanelObjective objective_;
  torch::nn::LSTM lstm_{nullptr};                    // model.encoder = lstm, or
  std::shared_ptr<TransformerEncoder> transformer_;  // model.encoder = transformer
  std::vector<std::shared_ptr<GatConv>> layers_;
  std::vector<torch::nn::LayerNorm> norms_;
  torch::nn::Sequential head_{nullptr};
  PanelGraphCache graphs_;
  std::int64_t recomputeEvery_ = 0;
};

// model.kind = gat, for ModelRegistry.cpp.
ModelKind gatModelKind();

}  // namespace mb::model
