// BF16 autocast on CUDA (DESIGN.md "Precision and speed on GPU"): inside train::AutocastScope the
// matmuls run in bf16, the loss is reduced in fp32, gradients and master weights stay fp32, an
// optimizer step keeps them fp32, and the loss stays close to the fp32 one; outside the scope
// everything is fp32 again.
#include <gtest/gtest.h>

#include <ATen/Functions.h>

#include "model/Model.h"
#include "tests/gpu/GpuTest.h"
#include "tests/unit/ModelFixtures.h"
#include "train/loop/Optimizer.h"
#include "train/precision/Precision.h"

namespace mb {
namespace {

train::NamedTensors namedParameters(model::Model& model) {
  train::NamedTensors out;
  for (const auto& item : model.named_parameters(true))
    out.emplace_back(item.key(), item.value());
  return out;
}

void checkBf16Step(const ModelConfig& config, const data::DataInfo& info, double lossTolerance) {
  at::manual_seed(21);
  auto model = model::buildModel(config, info, 5);
  model->to(test::gpu());
  model->train();
  data::Batch batch = test::gpuBatch(info, 8);
  at::Tensor fp32Output = model->forward(batch);
  EXPECT_EQ(fp32Output.scalar_type(), at::kFloat);
  double fp32 = model->lossSum(fp32Output, batch).item<double>();

  OptimConfig adamw;
  adamw.lr = 1e-3;
  train::Optimizer optimizer(adamw, namedParameters(*model));
  at::Tensor loss;
  {
    train::AutocastScope autocast(c10::kCUDA, DType::kBf16);
    at::Tensor a = at::randn({16, 16}, at::TensorOptions().device(test::gpu()));
    EXPECT_EQ(at::matmul(a, a).scalar_type(), at::kBFloat16) << "autocast is on for CUDA";
    at::Tensor output = model->forward(batch);  // GPT's logits, or the LSTM's linear head
    EXPECT_EQ(output.scalar_type(), at::kBFloat16) << "the matmuls ran in bf16";
    loss = model->lossSum(output, batch);  // as in Trainer::trainStep
  }
  EXPECT_EQ(loss.scalar_type(), at::kFloat) << "the loss is reduced in fp32";
  EXPECT_NEAR(loss.item<double>(), fp32, lossTolerance * std::abs(fp32) + 1e-3);
  loss.backward();
  for (const auto& p : model->parameters()) {
    ASSERT_TRUE(p.grad().defined());
    EXPECT_EQ(p.scalar_type(), at::kFloat) << "fp32 master weights";
    EXPECT_EQ(p.grad().scalar_type(), at::kFloat) << "fp32 gradients";
    EXPECT_TRUE(p.grad().isfinite().all().item<bool>());
  }
  std::vector<at::Tensor> before;
  for (const auto& p : model->parameters())
    before.push_back(p.detach().clone());
  optimizer.step(adamw.lr);
  auto after = model->parameters();
  bool moved = false;
  for (std::size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(after[i].scalar_type(), at::kFloat);
    moved = moved || !at::equal(after[i], before[i]);
  }
  EXPECT_TRUE(moved) << "the step updated the fp32 weights";
  at::Tensor a = at::randn({16, 16}, at::TensorOptions().device(test::gpu()));
  EXPECT_EQ(at::matmul(a, a).scalar_type(), at::kFloat) << "autocast is off after the scope";
}

TEST(GpuAutocast, Bf16StepOfATinyGpt) {
  checkBf16Step(test::gptConfig(32, 2, 4), test::tokenInfo(12, 40), 0.02);
}

TEST(GpuAutocast, Bf16StepOfAnLstm) {
  checkBf16Step(test::lstmConfig(16, 2), test::seriesInfo({{"m1", 10, 5}, {"h1", 4, 2}}), 0.03);
}

}  // namespace
}  // namespace mb
