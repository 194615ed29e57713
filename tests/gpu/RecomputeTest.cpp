// Activation recomputation on CUDA (Note [Activation recomputation], Note [LSTM time segments]):
// the gradients of a step with train.recompute equal those without, within a bound of each
// tensor's largest gradient. On the CPU they are equal bit for bit for the GPT; on CUDA the
// summation order is not fixed (atomics in the embedding's and in attention's backward), so the
// GPT is held to the LSTM's documented bound, 1e-5 (fp32, TF32 off), and to 2e-2 under bf16
// autocast, where one changed rounding of a bf16 activation moves a gradient by an ulp of bf16.
//   - GPT blocks, dropout on: the replayed CUDA RNG must give the same masks (a run without the
//     replay differs by O(1), far past the bound).
//   - LSTM time segments: cuDNN's fused LSTM draws its own dropout masks, so the comparison with
//     one pass over the window is without dropout; with dropout the segments draw their masks up
//     front, so recomputing every segment or every second one gives the same gradients.
#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <ATen/Functions.h>

#include "model/Model.h"
#include "tests/gpu/GpuTest.h"
#include "tests/unit/ModelFixtures.h"
#include "train/precision/Precision.h"

namespace mb {
namespace {

constexpr double kFp32Bound = 1e-5;
constexpr double kBf16Bound = 2e-2;

std::shared_ptr<model::Model> gpuModel(const ModelConfig& config, const data::DataInfo& info) {
  auto built = model::buildModel(config, info, 4);
  built->to(test::gpu());
  built->train();
  return built;
}

// One forward + backward from the same seed (dropout draws the same masks), as a training step
// runs it: inside autocast when `precision` is bf16.
std::vector<at::Tensor> gradientsOf(model::Model& model, const data::Batch& batch,
                                    DType precision) {
  model.zero_grad();
  at::manual_seed(9);
  at::Tensor loss;
  {
    train::AutocastScope autocast(c10::kCUDA, precision);
    loss = model.lossSum(model.forward(batch), batch);
  }
  loss.backward();
  std::vector<at::Tensor> grads;
  for (const auto& p : model.parameters())
    grads.push_back(p.grad().clone());
  return grads;
}

// The largest difference of any tensor, as a fraction of that tensor's largest gradient.
double worstRelativeDifference(const std::vector<at::Tensor>& want,
                               const std::vector<at::Tensor>& got) {
  EXPECT_EQ(want.size(), got.size());
  double worst = 0;
  for (std::size_t i = 0; i < std::min(want.size(), got.size()); ++i) {
    const double largest = want[i].abs().max().item<double>();
    const double off = (want[i] - got[i]).abs().max().item<double>();
    worst = std::max(worst, off / std::max(largest, 1e-30));
  }
  return worst;
}

void expectRecomputedGradients(model::Model& model, const data::Batch& batch, DType precision,
                               double bound, const std::string& what) {
  auto& segments = dynamic_cast<model::Recomputable&>(model);
  segments.setRecomputeEvery(0);
  const auto expected = gradientsOf(model, batch, precision);
  for (std::int64_t every : {1, 2}) {
    segments.setRecomputeEvery(every);
    const double worst = worstRelativeDifference(expected, gradientsOf(model, batch, precision));
    std::cout << what << ", every " << every << ": the largest gradient difference is " << worst
              << " of the tensor's largest gradient (bound " << bound << ")\n";
    EXPECT_LE(worst, bound) << what << ", every " << every;
  }
  segments.setRecomputeEvery(0);
}

TEST(GpuRecompute, GptBlocksWithDropoutGiveTheGradientsOfTheRunWithout) {
  at::manual_seed(3);
  auto config = test::gptConfig(64, 4, 4);
  config.dropout = 0.1;
  const auto info = test::tokenInfo(128, 96);
  auto gpt = gpuModel(config, info);
  const auto batch = test::gpuBatch(info, 8);
  expectRecomputedGradients(*gpt, batch, DType::kFp32, kFp32Bound, "GPT, fp32");
  expectRecomputedGradients(*gpt, batch, DType::kBf16, kBf16Bound, "GPT, bf16 autocast");
}

TEST(GpuRecompute, LstmTimeSegmentsGiveTheGradientsOfOnePass) {
  at::manual_seed(6);
  const auto info = test::seriesInfo({{"m1", 120, 5}, {"m5", 24, 3}});
  auto lstm = gpuModel(test::lstmConfig(32, 2), info);
  const auto batch = test::gpuBatch(info, 16);
  expectRecomputedGradients(*lstm, batch, DType::kFp32, kFp32Bound, "LSTM, fp32, no dropout");
}

TEST(GpuRecompute, LstmSegmentsDrawTheSameMasksWhateverIsRecomputed) {
  at::manual_seed(7);
  auto config = test::lstmConfig(32, 3);
  config.dropout = 0.2;
  const auto info = test::seriesInfo({{"m1", 120, 5}});
  auto lstm = gpuModel(config, info);
  const auto batch = test::gpuBatch(info, 16);
  auto& segments = dynamic_cast<model::Recomputable&>(*lstm);
  segments.setRecomputeEvery(1);
  const auto everyOne = gradientsOf(*lstm, batch, DType::kFp32);
  segments.setRecomputeEvery(2);
  const double worst = worstRelativeDifference(everyOne, gradientsOf(*lstm, batch, DType::kFp32));
  std::cout << "LSTM, dropout 0.2, every 1 against every 2: " << worst << "\n";
  EXPECT_LE(worst, kFp32Bound);
}

}  // namespace
}  // namespace mb
