// Checkpoints across devices: a model and its AdamW state trained on CUDA, saved, and restored on
// the CPU (and the other way round) hold exactly the saved weights and optimizer moments, and the
// next step on the new device continues like the next step on the old one.
#include <gtest/gtest.h>

#include <ATen/Functions.h>

#include "model/Model.h"
#include "model/StateDict.h"
#include "tests/gpu/GpuTest.h"
#include "tests/unit/ModelFixtures.h"
#include "train/CheckpointModel.h"
#include "train/checkpoints/Checkpoint.h"
#include "train/loop/Optimizer.h"

namespace mb {
namespace {

struct Trained {
  std::shared_ptr<model::Model> model;
  std::unique_ptr<train::Optimizer> optimizer;
};

Trained build(c10::Device device, std::uint64_t seed) {
  auto info = test::seriesInfo({{"m1", 8, 3}, {"h1", 4, 2}});
  Trained t;
  t.model = model::buildModel(test::lstmConfig(12, 2), info, seed);
  t.model->to(device);
  train::NamedTensors parameters;
  for (const auto& item : t.model->named_parameters(true))
    parameters.emplace_back(item.key(), item.value());
  OptimConfig adamw;
  adamw.lr = 1e-2;
  t.optimizer = std::make_unique<train::Optimizer>(adamw, parameters);
  return t;
}

data::Batch batchOn(const data::Batch& batch, c10::Device device) {
  data::Batch out = batch;
  for (auto& input : out.inputs)
    input = input.to(device);
  out.targets = out.targets.to(device);
  out.sampleIndex = out.sampleIndex.to(device);
  return out;
}

void step(Trained& t, const data::Batch& batch) {
  t.model->zero_grad();
  t.model->lossSum(t.model->forward(batch), batch).backward();
  t.optimizer->step(1e-2);
}

void checkRoundTrip(c10::Device from, c10::Device to) {
  SCOPED_TRACE("saved on " + from.str() + ", restored on " + to.str());
  test::TempDir dir;
  at::manual_seed(4);
  std::vector<data::Batch> batches;
  for (int i = 0; i < 4; ++i) {
    data::Batch cpu;
    cpu.inputs = {at::randn({6, 8, 3}), at::randn({6, 4, 2})};
    cpu.targets = at::randn({6});
    cpu.sampleIndex = at::arange(6, at::kLong);
    batches.push_back(cpu);
  }
  Trained source = build(from, 7);
  for (int i = 0; i < 3; ++i)
    step(source, batchOn(batches[i], from));

  train::CheckpointContent content;
  content.trainer.step = 3;
  content.model = model::stateDict(*source.model);
  content.optimizer = source.optimizer->state();
  content.optimizerSteps = source.optimizer->stepCount();
  content.optimizerKind = "adamw";
  content.configYaml = "optim:\n  lr: 0.01\n";
  content.lr = 1e-2;
  std::string path = dir.file("step-3.h5");
  train::writeCheckpointFile(path, content);

  train::CheckpointContent read = train::readCheckpointFile(path);
  Trained target = build(to, 8);  // other initial weights: the load must replace them
  train::loadModelState(*target.model, read.model, path);
  target.optimizer->loadState(read.optimizer, read.optimizerSteps);
  EXPECT_EQ(target.optimizer->stepCount(), 3);

  auto saved = source.model->named_parameters(true);
  for (const auto& item : target.model->named_parameters(true)) {
    EXPECT_EQ(item.value().device(), to) << item.key();
    EXPECT_TRUE(at::equal(item.value().cpu(), saved[item.key()].cpu())) << item.key();
  }
  auto moments = source.optimizer->state();
  auto restored = target.optimizer->state();
  ASSERT_EQ(moments.size(), restored.size());
  for (std::size_t i = 0; i < moments.size(); ++i) {
    EXPECT_EQ(restored[i].first, moments[i].first);
    EXPECT_EQ(restored[i].second.device(), to) << restored[i].first;
    EXPECT_TRUE(at::equal(restored[i].second.cpu(), moments[i].second.cpu())) << restored[i].first;
  }

  // One more step each: the same update up to CPU-against-GPU rounding (TF32 is off). A lost
  // optimizer state would move an Adam step by O(lr) = 1e-2.
  step(source, batchOn(batches[3], from));
  step(target, batchOn(batches[3], to));
  auto next = source.model->named_parameters(true);
  for (const auto& item : target.model->named_parameters(true)) {
    EXPECT_TRUE(at::allclose(item.value().cpu(), next[item.key()].cpu(), 1e-4, 1e-5))
        << item.key() << ": max |diff| "
        << (item.value().cpu() - next[item.key()].cpu()).abs().max().item<double>();
  }
}

TEST(GpuCheckpoint, SavedOnCudaRestoresOnCpu) {
  checkRoundTrip(test::gpu(), c10::Device(c10::kCPU));
}

TEST(GpuCheckpoint, SavedOnCpuRestoresOnCuda) {
  checkRoundTrip(c10::Device(c10::kCPU), test::gpu());
}

}  // namespace
}  // namespace mb
