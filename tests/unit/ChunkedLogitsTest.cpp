// The loss and accuracy of a tied head by chunks of rows (Note [Chunked logits]) against the
// whole logits' cross-entropy and its autograd gradients, in fp32: equal within 1e-6 relative.
#include <gtest/gtest.h>

#include <ATen/Functions.h>
#include <ATen/core/Reduction.h>
#include <c10/core/GradMode.h>

#include "common/Error.h"
#include "model/Model.h"
#include "model/kinds/Gpt.h"
#include "model/parts/ChunkedLogits.h"
#include "tests/unit/ModelFixtures.h"

namespace mb::model {
namespace {

double relativeDiff(const at::Tensor& ours, const at::Tensor& whole) {
  const double scale = std::max(whole.abs().max().item<double>(), 1e-30);
  return (ours - whole).abs().max().item<double>() / scale;
}

struct Problem {
  at::Tensor hidden, weight, targets;
};

Problem problem(std::int64_t rows, std::int64_t width, std::int64_t vocab) {
  at::manual_seed(21);
  Problem p;
  p.hidden = at::randn({rows, width}).requires_grad_(true);
  p.weight = (0.3 * at::randn({vocab, width})).requires_grad_(true);
  p.targets = at::randint(vocab, {rows}, at::kLong);
  return p;
}

TEST(ChunkedLogits, LossAndGradientsEqualTheWholeLogits) {
  for (std::int64_t chunk : {1, 7, 16, 37, 0}) {  // 37 does not divide 37 x 2 - 1 rows
    Problem p = problem(73, 12, 50);
    at::Tensor whole =
        at::cross_entropy_loss(at::linear(p.hidden, p.weight), p.targets, {}, at::Reduction::Sum);
    // Scaled as the trainer does (1 / token count, the loss scale): the node scales its
    // gradients by the loss's.
    (whole * 0.25).backward();
    const at::Tensor wholeHidden = p.hidden.grad().clone(), wholeWeight = p.weight.grad().clone();
    p.hidden.mutable_grad().zero_();
    p.weight.mutable_grad().zero_();
    at::Tensor ours = chunkedCrossEntropySum(p.hidden, p.weight, p.targets, chunk);
    EXPECT_TRUE(ours.requires_grad());
    (ours * 0.25).backward();
    EXPECT_LT(relativeDiff(ours.detach(), whole.detach()), 1e-6) << "chunk " << chunk;
    EXPECT_LT(relativeDiff(p.hidden.grad(), wholeHidden), 1e-6) << "chunk " << chunk;
    EXPECT_LT(relativeDiff(p.weight.grad(), wholeWeight), 1e-6) << "chunk " << chunk;
  }
}

TEST(ChunkedLogits, OnlyWhatNeedsAGradientGetsOne) {
  Problem p = problem(20, 6, 9);
  at::Tensor frozen = p.weight.detach();
  at::Tensor loss = chunkedCrossEntropySum(p.hidden, frozen, p.targets, 3);
  loss.backward();
  at::Tensor expected = p.hidden.grad().clone();
  p.hidden.mutable_grad().zero_();
  at::cross_entropy_loss(at::linear(p.hidden, frozen), p.targets, {}, at::Reduction::Sum)
      .backward();
  EXPECT_LT(relativeDiff(expected, p.hidden.grad()), 1e-6);
  EXPECT_FALSE(frozen.grad().defined());
}

TEST(ChunkedLogits, WithoutGradModeNothingIsKept) {
  Problem p = problem(30, 6, 11);
  at::NoGradGuard noGrad;
  at::Tensor loss = chunkedCrossEntropySum(p.hidden, p.weight, p.targets, 4);
  EXPECT_FALSE(loss.requires_grad());
  at::Tensor whole =
      at::cross_entropy_loss(at::linear(p.hidden, p.weight), p.targets, {}, at::Reduction::Sum);
  EXPECT_LT(relativeDiff(loss, whole), 1e-6);
}

TEST(ChunkedLogits, AccuracyCountsTheWholeArgmax) {
  Problem p = problem(41, 5, 13);
  p.targets.narrow(0, 0, 20).copy_(at::linear(p.hidden, p.weight).argmax(-1).narrow(0, 0, 20));
  const double whole = at::linear(p.hidden, p.weight).argmax(-1).eq(p.targets).sum().item<double>();
  for (std::int64_t chunk : {1, 6, 0})
    EXPECT_EQ(chunkedArgmaxMatches(p.hidden, p.weight, p.targets, chunk).item<double>(), whole);
}

TEST(ChunkedLogits, ABackwardTwiceIsAnError) {
  Problem p = problem(8, 4, 5);
  at::Tensor loss = chunkedCrossEntropySum(p.hidden, p.weight, p.targets, 3);
  loss.backward();
  EXPECT_ANY_THROW(loss.backward());
}

TEST(ChunkedLogits, ChunksHoldAtMostTheirBytes) {
  EXPECT_EQ(logitsChunkRows(50304), kLogitsChunkBytes / (50304 * 4));
  EXPECT_GE(logitsChunkRows(256) * 256 * 4, kLogitsChunkBytes - 256 * 4);
  EXPECT_EQ(logitsChunkRows(std::int64_t{1} << 40), 1);
}

// The GPT's loss through its tied weight (the embedding's too): gradients equal the whole
// logits' cross-entropy of the same forward.
TEST(ChunkedLogits, GptGradientsEqualTheWholeLogits) {
  at::manual_seed(4);
  auto model = test::deviceModel(test::gptConfig(32, 2, 4), test::tokenInfo(12, 40), 3);
  auto gpt = std::dynamic_pointer_cast<Gpt>(model);
  ASSERT_TRUE(gpt);
  auto batch = test::randomBatch(test::tokenInfo(12, 40), 3);
  at::Tensor hidden = gpt->forward(batch);
  at::Tensor loss = gpt->lossSum(hidden, batch);
  loss.backward();
  std::vector<at::Tensor> ours;
  for (const auto& parameter : gpt->parameters()) {
    ours.push_back(parameter.grad().clone());
    parameter.mutable_grad().zero_();
  }
  at::Tensor logits = gpt->headLogits(gpt->forward(batch));
  at::Tensor whole = at::cross_entropy_loss(
      logits.reshape({-1, 40}), batch.targets.reshape({-1}).to(at::kLong), {}, at::Reduction::Sum);
  whole.backward();
  EXPECT_LT(relativeDiff(loss.detach(), whole.detach()), 1e-6);
  std::size_t i = 0;
  for (const auto& parameter : gpt->parameters())
    EXPECT_LT(relativeDiff(ours[i++], parameter.grad()), 1e-5);
}

}  // namespace
}  // namespace mb::model
