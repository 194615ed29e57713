#include "model/parts/GraphConv.h"

#include <cmath>

#include <ATen/Functions.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/init.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>

#include "common/Error.h"
#include "common/TorchCompat.h"
#include "model/parts/RowGather.h"

namespace mb::model {

at::Tensor scatterSum(const at::Tensor& src, const at::Tensor& index, std::int64_t size) {
  std::vector<std::int64_t> shape(src.sizes().begin(), src.sizes().end());
  shape[0] = size;
  return at::zeros(shape, src.options()).index_add_(0, index, src);
}

at::Tensor scatterMax(const at::Tensor& src, const at::Tensor& index, std::int64_t size) {
  at::Tensor expanded = index.unsqueeze(1).expand_as(src);
  return compat::scatterReduce(at::zeros({size, src.size(1)}, src.options()), 0, expanded, src,
                               "amax", /*includeSelf=*/false);
}

at::Tensor groupSoftmax(const at::Tensor& scores, const at::Tensor& index, std::int64_t size) {
  at::Tensor s = scores.to(at::kFloat);                      // [E, H]
  at::Tensor peak = scatterMax(s.detach(), index, size);     // [size, H]; a constant shift
  at::Tensor weights = (s - gatherRows(peak, index)).exp();  // [E, H], in (0, 1]
  at::Tensor total = scatterSum(weights, index, size);       // [size, H], >= 1 per group used
  return weights / gatherRows(total, index);
}

namespace {

// edge_index [2, E] plus a self loop (i, i) for every node: [2, E + N].
at::Tensor withSelfLoops(const at::Tensor& edgeIndex, std::int64_t nodes) {
  at::Tensor loops = at::arange(nodes, edgeIndex.options()).unsqueeze(0).expand({2, nodes});
  return at::cat({edgeIndex, loops}, 1);
}

class GcnLayer : public GraphLayer {
 public:
  GcnLayer(std::int64_t in, std::int64_t out) {
    lin_ = register_module("lin", torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false)));
    bias_ = register_parameter("bias", at::zeros({out}));
  }

  at::Tensor forward(const at::Tensor& x, const at::Tensor& edgeIndex,
                     const at::Tensor& /*edgeFeatures*/) override {
    const std::int64_t nodes = x.size(0);
    at::Tensor edges = withSelfLoops(edgeIndex, nodes);  // [2, E + N]
    at::Tensor source = edges[0], target = edges[1];
    at::Tensor ones = at::ones({target.size(0)}, x.options().dtype(at::kFloat));
    at::Tensor scale = scatterSum(ones, target, nodes).rsqrt();  // [N] in-degree^-1/2, >= 1 loop
    at::Tensor norm = gatherRows(scale, source) * gatherRows(scale, target);  // [E + N]
    at::Tensor h = lin_->forward(x);                                          // [N, out]
    at::Tensor messages = gatherRows(h, source) * norm.to(h.scalar_type()).unsqueeze(1);
    return scatterSum(messages, target, nodes) + bias_;
  }

 private:
  torch::nn::Linear lin_{nullptr};
  at::Tensor bias_;
};

class GatLayer : public GraphLayer {
 public:
  GatLayer(std::int64_t in, std::int64_t out, std::int64_t edgeFeatures, std::int64_t heads,
           double attentionDropout)
      : heads_(heads), channels_(out / heads), dropout_(attentionDropout) {
    auto attention = [&](const char* name) {
      // Glorot-uniform as PyTorch Geometric initialises its attention vectors.
      double bound = std::sqrt(6.0 / static_cast<double>(heads_ + channels_));
      return register_parameter(name, at::empty({1, heads_, channels_}).uniform_(-bound, bound));
    };
    lin_ = register_module("lin", torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false)));
    attSrc_ = attention("att_src");
    attDst_ = attention("att_dst");
    if (edgeFeatures > 0) {
      linEdge_ = register_module(
          "lin_edge", torch::nn::Linear(torch::nn::LinearOptions(edgeFeatures, out).bias(false)));
      attEdge_ = attention("att_edge");
    }
    bias_ = register_parameter("bias", at::zeros({out}));
  }

  at::Tensor forward(const at::Tensor& x, const at::Tensor& edgeIndex,
                     const at::Tensor& edgeFeatures) override {
    const std::int64_t nodes = x.size(0);
    at::Tensor h = lin_->forward(x).view({nodes, heads_, channels_});  // [N, H, C]
    at::Tensor fromSource = (h * attSrc_).sum(-1);                     // [N, H]
    at::Tensor fromTarget = (h * attDst_).sum(-1);                     // [N, H]
    at::Tensor edges = withSelfLoops(edgeIndex, nodes);                // [2, E + N]
    at::Tensor source = edges[0], target = edges[1];
    at::Tensor scores = gatherRows(fromSource, source) + gatherRows(fromTarget, target);
    if (linEdge_ && edgeFeatures.defined()) {
      at::Tensor loops = at::zeros({nodes, edgeFeatures.size(1)}, edgeFeatures.options());
      at::Tensor e = linEdge_->forward(at::cat({edgeFeatures, loops}, 0))
                         .view({-1, heads_, channels_});  // [E + N, H, C]
      scores = scores + (e * attEdge_).sum(-1);
    }
    scores = at::leaky_relu(scores, 0.2);
    at::Tensor alpha = groupSoftmax(scores, target, nodes);  // [E + N, H] fp32
    if (dropout_ > 0) alpha = at::dropout(alpha, dropout_, is_training());
    at::Tensor messages = gatherRows(h, source) * alpha.to(h.scalar_type()).unsqueeze(-1);
    return scatterSum(messages, target, nodes).view({nodes, heads_ * channels_}) + bias_;
  }

 private:
  std::int64_t heads_;
  std::int64_t channels_;
  double dropout_;
  torch::nn::Linear lin_{nullptr};
  torch::nn::Linear linEdge_{nullptr};
  at::Tensor attSrc_, attDst_, attEdge_, bias_;
};

class GinLayer : public GraphLayer {
 public:
  GinLayer(std::int64_t in, std::int64_t out, std::int64_t edgeFeatures) {
    torch::nn::Sequential mlp;
    mlp->push_back(torch::nn::Linear(in, out));
    mlp->push_back(
        torch::nn::ReLU(torch::nn::ReLUOptions().inplace(true)));  // on a Linear's output
    mlp->push_back(torch::nn::Linear(out, out));
    nn_ = register_module("nn", mlp);
    if (edgeFeatures > 0) lin_ = register_module("lin", torch::nn::Linear(edgeFeatures, in));
  }

  at::Tensor forward(const at::Tensor& x, const at::Tensor& edgeIndex,
                     const at::Tensor& edgeFeatures) override {
    at::Tensor source = edgeIndex[0], target = edgeIndex[1];
    at::Tensor messages = gatherRows(x, source);  // [E, in]
    if (lin_ && edgeFeatures.defined())
      messages = at::relu(messages + lin_->forward(edgeFeatures).to(messages.scalar_type()));
    // GIN-0 ((1 + eps) x with eps = 0): the messages are added onto x itself, one op instead of
    // zeros, index_add_ and add (the step of a small graph batch is mostly per-op cost).
    return nn_->forward(at::index_add(x, 0, target, messages.to(x.scalar_type())));
  }

 private:
  torch::nn::Sequential nn_{nullptr};
  torch::nn::Linear lin_{nullptr};
};

class NodeLayer : public GraphLayer {
 public:
  NodeLayer(std::int64_t in, std::int64_t out) {
    lin_ = register_module("lin", torch::nn::Linear(in, out));
  }
  at::Tensor forward(const at::Tensor& x, const at::Tensor& /*edgeIndex*/,
                     const at::Tensor& /*edgeFeatures*/) override {
    return lin_->forward(x);
  }

 private:
  torch::nn::Linear lin_{nullptr};
};

}  // namespace

std::shared_ptr<GraphLayer> makeGraphLayer(GraphConv conv, std::int64_t in, std::int64_t out,
                                           std::int64_t edgeFeatures, std::int64_t heads,
                                           double attentionDropout) {
  switch (conv) {
    case GraphConv::kGcn:
      return std::make_shared<GcnLayer>(in, out);
    case GraphConv::kGat:
      if (heads < 1 || out % heads != 0)
        throw ConfigError(
            "model.conv = gat concatenates its heads: model.hidden = " + std::to_string(out) +
                " must be a multiple of model.heads = " + std::to_string(heads),
            "e.g. model.hidden=64 model.heads=4");
      return std::make_shared<GatLayer>(in, out, edgeFeatures, heads, attentionDropout);
    case GraphConv::kGin:
      return std::make_shared<GinLayer>(in, out, edgeFeatures);
    case GraphConv::kNone:
      break;
  }
  return std::make_shared<NodeLayer>(in, out);
}

}  // namespace mb::model
