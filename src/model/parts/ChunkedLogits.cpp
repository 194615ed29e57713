#include "model/parts/ChunkedLogits.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>

#include <ATen/Functions.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/function.h>

#include "common/Error.h"

namespace mb::model {
namespace {

using torch::autograd::variable_list;

void checkShapes(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets) {
  if (hidden.dim() != 2 || weight.dim() != 2 || hidden.size(1) != weight.size(1) ||
      targets.dim() != 1 || targets.size(0) != hidden.size(0))
    throw RuntimeError("chunked logits: expected hidden [N, C], weight [vocab, C] and targets [N]");
}

std::int64_t rowsPerChunk(const at::Tensor& weight, std::int64_t chunkRows) {
  return chunkRows > 0 ? chunkRows : logitsChunkRows(weight.size(0));
}

// One chunk's logits in fp32: the product runs under autocast when it is on.
at::Tensor chunkLogits(const at::Tensor& hidden, const at::Tensor& weight) {
  return at::linear(hidden, weight).to(at::kFloat);
}

// Summed cross-entropy of one chunk's fp32 logits [rows, vocab].
at::Tensor crossEntropySum(const at::Tensor& logits, const at::Tensor& targets) {
  at::Tensor picked = logits.gather(1, targets.unsqueeze(1)).squeeze(1);
  return (at::logsumexp(logits, {1}) - picked).sum();
}

// The gradients taken in the forward pass (Note [Chunked logits]), scaled by the loss's.
class ChunkedCrossEntropyBackward : public torch::autograd::Node {
 public:
  ChunkedCrossEntropyBackward(at::Tensor gradHidden, at::Tensor gradWeight)
      : gradHidden_(std::move(gradHidden)), gradWeight_(std::move(gradWeight)) {}

  std::string name() const override { return "mb::model::ChunkedCrossEntropyBackward"; }
  void release_variables() override {
    gradHidden_ = at::Tensor();
    gradWeight_ = at::Tensor();
    released_ = true;
  }

  variable_list apply(variable_list&& gradOutputs) override {
    if (released_)
      throw RuntimeError("chunked logits: the loss's backward ran twice",
                         "do not call backward twice through the loss");
    const at::Tensor& scale = gradOutputs[0];
    auto scaled = [&](const at::Tensor& g) {
      return g.defined() && scale.defined() ? g.mul(scale.to(g.scalar_type())) : at::Tensor();
    };
    return {scaled(gradHidden_), scaled(gradWeight_)};
  }

 private:
  at::Tensor gradHidden_;  // [N, C] in hidden's dtype, or undefined
  at::Tensor gradWeight_;  // [vocab, C] in weight's dtype, or undefined
  bool released_ = false;
};

// The loss of every chunk, with the gradients of hidden and weight taken on the way.
at::Tensor lossWithGradients(const at::Tensor& hidden, const at::Tensor& weight,
                             const at::Tensor& targets, std::int64_t rows) {
  at::AutoGradMode noGrad(false);
  const bool hiddenNeeds = hidden.requires_grad();
  const bool weightNeeds = weight.requires_grad();
  at::Tensor gradHidden = hiddenNeeds ? at::empty_like(hidden) : at::Tensor();
  at::Tensor gradWeight =
      weightNeeds ? at::zeros(weight.sizes(), weight.options().dtype(at::kFloat)) : at::Tensor();
  at::Tensor loss = at::zeros({}, hidden.options().dtype(at::kFloat));
  const std::int64_t n = hidden.size(0);
  for (std::int64_t begin = 0; begin < n; begin += rows) {
    const std::int64_t count = std::min(rows, n - begin);
    const at::Tensor h = hidden.narrow(0, begin, count);
    const at::Tensor t = targets.narrow(0, begin, count);
    at::Tensor logits = chunkLogits(h, weight);
    loss.add_(crossEntropySum(logits, t));
    at::Tensor g = at::softmax(logits, 1);  // d loss / d logits = softmax - onehot(target)
    logits = at::Tensor();
    g.scatter_add_(1, t.unsqueeze(1), at::full({count, 1}, -1.0, g.options()));
    if (hiddenNeeds) gradHidden.narrow(0, begin, count).copy_(at::matmul(g, weight));
    if (weightNeeds) gradWeight.add_(at::matmul(g.t(), h).to(at::kFloat));
  }
  if (weightNeeds) gradWeight = gradWeight.to(weight.scalar_type());
  auto node = std::shared_ptr<ChunkedCrossEntropyBackward>(
      new ChunkedCrossEntropyBackward(std::move(gradHidden), std::move(gradWeight)),
      torch::autograd::deleteNode);
  node->set_next_edges(torch::autograd::collect_next_edges(hidden, weight));
  torch::autograd::create_gradient_edge(loss, node);
  return loss;
}

}  // namespace

std::int64_t logitsChunkRows(std::int64_t vocab) {
  return std::max<std::int64_t>(1, kLogitsChunkBytes / (std::max<std::int64_t>(vocab, 1) * 4));
}

at::Tensor chunkedCrossEntropySum(const at::Tensor& hidden, const at::Tensor& weight,
                                  const at::Tensor& targets, std::int64_t chunkRows) {
  checkShapes(hidden, weight, targets);
  const at::Tensor ids = targets.to(at::kLong);
  const std::int64_t rows = rowsPerChunk(weight, chunkRows);
  if (c10::GradMode::is_enabled() && (hidden.requires_grad() || weight.requires_grad()))
    return lossWithGradients(hidden, weight, ids, rows);
  at::Tensor loss = at::zeros({}, hidden.options().dtype(at::kFloat));
  for (std::int64_t begin = 0; begin < hidden.size(0); begin += rows) {
    const std::int64_t count = std::min(rows, hidden.size(0) - begin);
    loss.add_(crossEntropySum(chunkLogits(hidden.narrow(0, begin, count), weight),
                              ids.narrow(0, begin, count)));
  }
  return loss;
}

at::Tensor chunkedArgmaxMatches(const at::Tensor& hidden, const at::Tensor& weight,
                                const at::Tensor& targets, std::int64_t chunkRows) {
  checkShapes(hidden, weight, targets);
  at::NoGradGuard noGrad;
  const at::Tensor ids = targets.to(at::kLong);
  const std::int64_t rows = rowsPerChunk(weight, chunkRows);
  at::Tensor correct = at::zeros({}, hidden.options().dtype(at::kFloat));
  for (std::int64_t begin = 0; begin < hidden.size(0); begin += rows) {
    const std::int64_t count = std::min(rows, hidden.size(0) - begin);
    at::Tensor logits = at::linear(hidden.narrow(0, begin, count), weight);
    correct.add_(logits.argmax(-1).eq(ids.narrow(0, begin, count)).sum().to(at::kFloat));
  }
  return correct;
}

}  // namespace mb::model
