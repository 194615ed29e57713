// model.kind = torchscript on an archive written from C++ (no Python needed): state under the
// script's state_dict names, shared (not copied) tensors, tied and frozen parameters, train/eval
// reaching every submodule, a probe that leaves no trace, export, and the contract's errors.
// tests/torchscript/test_torchscript.py covers the same end to end with modules scripted in
// Python.
#include <gtest/gtest.h>

#include <ATen/Functions.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/serialization/import.h>

#include <algorithm>
#include <set>

#include "common/Error.h"
#include "model/ModelRegistry.h"
#include "model/StateDict.h"
#include "model/kinds/TorchScriptModel.h"
#include "tests/unit/ModelFixtures.h"

namespace mb::model {
namespace {

// Root `Net`: parameter `scale` [1], frozen parameter `frozen` [1] (requires_grad false),
// submodule `enc` (parameter `weight` [3, 4]; buffer `running` [4], which train mode assigns anew
// rather than updates in place, Note [Buffers the script replaces]; output doubled in eval
// mode), submodule `dec` whose `weight` is enc.weight (tied). forward(x [B, 5, 3]) -> [B, 1].
torch::jit::Module makeNet() {
  torch::jit::Module enc("__torch__.Enc");
  enc.register_attribute("training", c10::BoolType::get(), true);
  at::Tensor weight = at::randn({3, 4}).requires_grad_(true);
  enc.register_parameter("weight", weight, /*is_buffer=*/false);
  enc.register_buffer("running", at::zeros({4}));
  enc.define(R"(
def forward(self, x: Tensor) -> Tensor:
    y = x.mean(dim=1) @ self.weight
    if self.training:
        self.running = self.running * 0.9 + y.mean(dim=0).detach() * 0.1
        return y
    return y * 2.0
)");
  torch::jit::Module dec("__torch__.Dec");
  dec.register_attribute("training", c10::BoolType::get(), true);
  dec.register_parameter("weight", weight, /*is_buffer=*/false);

  torch::jit::Module net("__torch__.Net");
  net.register_attribute("training", c10::BoolType::get(), true);
  net.register_parameter("scale", at::ones({1}).requires_grad_(true), false);
  net.register_parameter("frozen", at::full({1}, 0.5), false);
  net.register_module("enc", enc);
  net.register_module("dec", dec);
  net.define(R"(
def forward(self, x: Tensor) -> Tensor:
    h = self.enc.forward(x) @ self.dec.weight.t()
    return h.sum(dim=1, keepdim=True) * self.scale * self.frozen
)");
  return net;
}

ModelConfig scriptConfig(const std::string& path) {
  ModelConfig config;
  config.kind = "torchscript";
  config.path = path;
  return config;
}

data::DataInfo windows(std::int64_t targets = 0) {
  return test::seriesInfo({{"x", 5, 3}}, targets);
}

std::vector<std::string> names(const NamedTensors& entries) {
  std::vector<std::string> out;
  for (const auto& entry : entries)
    out.push_back(entry.first);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> keys(const torch::OrderedDict<std::string, at::Tensor>& dict) {
  std::vector<std::string> out;
  for (const auto& item : dict)
    out.push_back(item.key());
  std::sort(out.begin(), out.end());
  return out;
}

template <class Body>
std::string configErrorOf(Body body) {
  try {
    body();
  } catch (const ConfigError& error) {
    return error.what();
  }
  return "(no ConfigError)";
}

class TorchScriptModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    at::manual_seed(0);
    path_ = dir_.file("net.pt");
    makeNet().save(path_);
  }
  std::shared_ptr<Model> build(const data::DataInfo& info) {
    return buildModel(scriptConfig(path_), info, 1);
  }

  test::TempDir dir_;
  std::string path_;
};

TEST_F(TorchScriptModelTest, StateUnderTheScriptsNamesWithTiedAndFrozenEntries) {
  auto model = build(windows());
  EXPECT_EQ(model->kind(), "torchscript");
  EXPECT_EQ(keys(model->named_parameters()), (std::vector<std::string>{"enc.weight", "scale"}));
  EXPECT_EQ(keys(model->named_buffers()), (std::vector<std::string>{"enc.running", "frozen"}));
  ASSERT_EQ(model->tiedWeights().size(), 1u);
  EXPECT_EQ(model->tiedWeights()[0],
            std::make_pair(std::string("dec.weight"), std::string("enc.weight")));
  EXPECT_EQ(names(stateDict(*model)), (std::vector<std::string>{"dec.weight", "enc.running",
                                                                "enc.weight", "frozen", "scale"}));
  EXPECT_FALSE(model->named_buffers()["frozen"].requires_grad());
}

TEST_F(TorchScriptModelTest, TrainingUpdatesTheScriptsOwnTensors) {
  auto model = build(windows());
  data::Batch batch = test::randomBatch(windows(), 4);
  model->to(test::device());
  model->train();
  at::Tensor output = model->forward(batch);  // [4]: [B, 1] squeezed for [N] targets
  EXPECT_EQ(output.sizes(), at::IntArrayRef({4}));
  model->lossSum(output, batch).backward();
  auto parameters = model->named_parameters();
  ASSERT_TRUE(parameters["enc.weight"].grad().defined());
  ASSERT_TRUE(parameters["scale"].grad().defined());
  at::Tensor before = model->forward(batch).detach().clone();
  {
    at::NoGradGuard noGrad;
    parameters["scale"].mul_(3.0);  // through the nn::Module view: the script must see it
  }
  EXPECT_TRUE(at::allclose(model->forward(batch), before * 3.0, 1e-5, 1e-6));
}

TEST_F(TorchScriptModelTest, TrainAndEvalReachEverySubmodule) {
  auto model = build(windows());
  data::Batch batch = test::randomBatch(windows(), 4);
  model->to(test::device());
  // The probe at build time ran on a clone: the buffer is still as saved.
  EXPECT_TRUE(at::equal(model->named_buffers()["enc.running"].cpu(), at::zeros({4})));
  at::NoGradGuard noGrad;
  model->train();
  at::Tensor trained = model->forward(batch);
  at::Tensor running = model->named_buffers()["enc.running"].clone();
  EXPECT_GT(running.abs().sum().item<double>(), 0.0) << "train mode updates the buffer";
  model->eval();
  at::Tensor evaluated = model->forward(batch);
  EXPECT_TRUE(at::allclose(evaluated, trained * 2.0, 1e-5, 1e-6)) << "enc is in eval mode";
  EXPECT_TRUE(at::equal(model->named_buffers()["enc.running"], running)) << "eval leaves it";
}

TEST_F(TorchScriptModelTest, ExportWritesTheWeightsAndTheArchivesFlag) {
  auto model = build(windows());
  {
    at::NoGradGuard noGrad;
    model->named_parameters()["enc.weight"].fill_(0.25);
  }
  model->eval();
  const std::string out = dir_.file("trained.pt");
  modelKind("torchscript").exportArchive(*model, out);
  torch::jit::Module loaded = torch::jit::load(out);
  EXPECT_TRUE(loaded.is_training()) << "the flag the archive was saved with";
  at::Tensor encWeight, decWeight;
  for (const auto& parameter : loaded.named_parameters()) {
    if (parameter.name == "enc.weight") encWeight = parameter.value;
  }
  decWeight = loaded.attr("dec").toObject()->getAttr("weight").toTensor();
  ASSERT_TRUE(encWeight.defined());
  EXPECT_TRUE(at::equal(encWeight, at::full({3, 4}, 0.25)));
  EXPECT_TRUE(decWeight.is_same(encWeight)) << "still one tensor under two names";
  // Built-in models have no archive to export to.
  EXPECT_FALSE(modelKind("lstm").exportArchive);
}

TEST_F(TorchScriptModelTest, ContractErrorsNameTheFix) {
  EXPECT_NE(configErrorOf([&] {
              buildModel(scriptConfig(dir_.file("none.pt")), windows(), 1);
            }).find("does not exist or is not a file"),
            std::string::npos);
  auto twoInputs = test::seriesInfo({{"m1", 5, 3}, {"m5", 4, 3}});
  std::string message = configErrorOf([&] { build(twoInputs); });
  EXPECT_NE(message.find("forward takes 1 argument(s), but megabatch passes 2"), std::string::npos)
      << message;
  EXPECT_NE(message.find("megabatch calls forward(self, m1: Tensor[B, 5, 3], m5: Tensor[B, 4, 3])"),
            std::string::npos)
      << message;
  message = configErrorOf([&] { build(windows(2)); });  // [N, 2] targets: [B, 2] wanted
  EXPECT_NE(message.find("in train mode, forward returned [7, 1]; the mse objective expects [B, 2] "
                         "(B = 7 here)"),
            std::string::npos)
      << message;
}

}  // namespace
}  // namespace mb::model
