#pragma once
// The message-passing layers of model.kind = gnn (Gnn.h), written from the papers' formulas
// with index_add_ / scatter on the device. A layer maps node states x [N, in] of a batch graph
// (edge_index [2, E]: messages flow from row 0, the source, to row 1, the target) to [N, out].
//
//   gcn  (Kipf & Welling 2017)   x' = D^-1/2 (A + I) D^-1/2 x W + b, D the in-degrees of A + I
//   gat  (Velickovic et al. 2018) x'_i = ||_k sum_{j in N(i) + i} a^k_ij W^k x_j + b,
//        a^k_ij = softmax_j LeakyReLU_0.2(att_dst^k . W^k x_i + att_src^k . W^k x_j
//                                         [+ att_edge^k . W_e^k e_ji]),
//        heads concatenated (out = heads x out/heads); self loops carry zero edge features
//   gin  (Xu et al. 2019, GIN-0)  x' = MLP(x + sum_{j in N(i)} m_ji), MLP = Linear, ReLU, Linear;
//        m_ji = x_j, or with edge features (GINE, Hu et al. 2020) ReLU(x_j + Linear(e_ji))
//   none                          x' = Linear(x): no messages (the node-wise baseline)
//
// state_dict names (those of PyTorch Geometric's GCNConv, GATConv, GINConv / GINEConv):
//   gcn  lin.weight [out, in], bias [out]
//   gat  lin.weight [out, in], att_src, att_dst [1, heads, out/heads], bias [out];
//        with edge features lin_edge.weight [out, F_e], att_edge [1, heads, out/heads]
//   gin  nn.0.weight, nn.0.bias, nn.2.weight, nn.2.bias; with edge features lin.weight, lin.bias
//   none lin.weight, lin.bias
#include <cstdint>
#include <memory>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include "config/Config.h"

namespace mb::model {

class GraphLayer : public torch::nn::Module {
 public:
  // x [N, in], edgeIndex [2, E] int64, edgeFeatures [E, F_e] or undefined -> [N, out].
  virtual at::Tensor forward(const at::Tensor& x, const at::Tensor& edgeIndex,
                             const at::Tensor& edgeFeatures) = 0;
};

// A layer of kind `conv` (in -> out). `edgeFeatures` > 0: gat and gin use edge features of
// that width; `heads`: gat's attention heads (out % heads == 0); `attentionDropout`: gat's
// dropout on the attention coefficients in training.
std::shared_ptr<GraphLayer> makeGraphLayer(GraphConv conv, std::int64_t in, std::int64_t out,
                                           std::int64_t edgeFeatures, std::int64_t heads,
                                           double attentionDropout);

// Shared scatter helpers, on the device of their inputs.
// Rows of `src` [E, ...] summed into `size` rows by `index` [E].
at::Tensor scatterSum(const at::Tensor& src, const at::Tensor& index, std::int64_t size);
// Softmax of `scores` [E, H] over the entries of each index value (index [E] in [0, size)),
// in fp32 (the per-group maximum is subtracted first).
at::Tensor groupSoftmax(const at::Tensor& scores, const at::Tensor& index, std::int64_t size);
// Elementwise maximum of the rows of `src` [E, H] per index value; every value in
// [0, size) must occur.
at::Tensor scatterMax(const at::Tensor& src, const at::Tensor& index, std::int64_t size);

}  // namespace mb::model
