// Writes the cases of the PyTorch parity test (test_parity.py): for each model kind, a file
// with the model's state_dict (through model::writeStateDict, as checkpoints store it), an
// input batch, and what the C++ model computes on it: outputs, loss sum, metric sums, and the
// gradient of the loss sum with respect to every parameter. The Python side rebuilds the
// module with torch.nn, loads the weights by name, and must reproduce all of it. The C++ side
// computes on test::device() (MEGABATCH_TEST_DEVICE), so under cuda the CPU PyTorch reference
// checks the CUDA model.
//
//   megabatch_model_parity OUT_DIR     -> OUT_DIR/<case>.h5, one per case
#include <cstdio>
#include <string>
#include <vector>

#include <ATen/Functions.h>
#include <torch/autograd.h>

#include "common/Error.h"
#include "common/Hdf5.h"
#include "config/Config.h"
#include "data/Batch.h"
#include "data/DataInfo.h"
#include "model/Model.h"
#include "model/StateDict.h"
#include "tests/support/Device.h"

namespace {

using mb::ExitCode;
using mb::data::Batch;
using mb::data::DataInfo;
using mb::data::InputSpec;

struct Case {
  std::string name;
  mb::ModelConfig config;
  DataInfo info;
};

DataInfo seriesInfo(const std::vector<InputSpec>& inputs, std::vector<std::int64_t> targetShape,
                    std::int64_t classes) {
  DataInfo info;
  info.layout = "series";
  info.path = "parity";
  info.inputs = inputs;
  info.targetShape = std::move(targetShape);
  info.integerTargets = classes > 0;
  info.numClasses = classes;
  return info;
}

std::vector<Case> cases() {
  std::vector<Case> all;
  mb::ModelConfig lstm;
  lstm.kind = "lstm";
  lstm.hidden = 8;
  lstm.layers = 2;
  lstm.headHidden = 6;
  all.push_back({"lstm_multi_regression", lstm,
                 seriesInfo({{"m1", 12, 5}, {"m5", 7, 3}, {"h1", 4, 2}}, {}, 0)});
  mb::ModelConfig huber = lstm;
  huber.loss = mb::LossKind::kHuber;
  huber.huberDelta = 0.5;
  huber.layers = 1;
  all.push_back({"lstm_multi_huber_k3", huber, seriesInfo({{"m5", 9, 4}, {"h4", 5, 4}}, {3}, 0)});
  mb::ModelConfig single = lstm;
  single.task = mb::Task::kClassification;
  single.headHidden = 0;
  all.push_back({"lstm_single_classification", single, seriesInfo({{"features", 10, 6}}, {}, 4)});

  mb::ModelConfig mlp;
  mlp.kind = "mlp";
  mlp.hidden = 16;
  mlp.layers = 2;
  all.push_back({"mlp_regression_k2", mlp, seriesInfo({{"features", 0, 7}}, {2}, 0)});
  mb::ModelConfig mlpClass = mlp;
  mlpClass.task = mb::Task::kClassification;
  mlpClass.layers = 1;
  all.push_back({"mlp_classification", mlpClass, seriesInfo({{"m1", 6, 3}, {"m5", 3, 2}}, {}, 5)});

  mb::ModelConfig gpt;
  gpt.kind = "gpt";
  gpt.hidden = 32;
  gpt.layers = 2;
  gpt.heads = 4;
  DataInfo tokens;
  tokens.layout = "tokens";
  tokens.path = "parity";
  tokens.inputs = {{"tokens", 16, 0}};
  tokens.targetShape = {16};
  tokens.integerTargets = true;
  tokens.vocabSize = 50;
  all.push_back({"gpt", gpt, tokens});
  mb::ModelConfig gptNoBias = gpt;
  gptNoBias.bias = false;
  gptNoBias.layers = 1;
  gptNoBias.heads = 2;
  all.push_back({"gpt_nobias", gptNoBias, tokens});
  return all;
}

Batch makeBatch(const Case& c, std::int64_t rows) {
  Batch batch;
  for (const auto& input : c.info.inputs) {
    if (c.config.kind == "gpt") {
      batch.inputs.push_back(at::randint(c.info.vocabSize, {rows, input.window}, at::kLong));
    } else if (input.window > 0) {
      batch.inputs.push_back(at::randn({rows, input.window, input.features}));
    } else {
      batch.inputs.push_back(at::randn({rows, input.features}));
    }
  }
  if (c.config.kind == "gpt") {
    batch.targets = at::randint(c.info.vocabSize, {rows, c.info.inputs[0].window}, at::kLong);
  } else if (c.info.numClasses > 0) {
    batch.targets = at::randint(c.info.numClasses, {rows}, at::kLong);
  } else {
    std::vector<std::int64_t> shape{rows};
    shape.insert(shape.end(), c.info.targetShape.begin(), c.info.targetShape.end());
    batch.targets = at::randn(shape);
  }
  batch.sampleIndex = at::arange(rows, at::kLong);
  // Drawn on the CPU (the same values on every device), computed on the test device.
  for (auto& input : batch.inputs)
    input = input.to(mb::test::device());
  batch.targets = batch.targets.to(mb::test::device());
  batch.sampleIndex = batch.sampleIndex.to(mb::test::device());
  return batch;
}

const char* enumText(mb::LossKind loss) {
  switch (loss) {
    case mb::LossKind::kHuber:
      return "huber";
    case mb::LossKind::kMse:
      return "mse";
    case mb::LossKind::kCrossEntropy:
      return "cross_entropy";
    default:
      return "auto";
  }
}

void writeCase(const std::string& dir, const Case& c) {
  auto model = mb::model::buildModel(c.config, c.info, 20240607);
  model->to(mb::test::device());
  model->train();
  Batch batch = makeBatch(c, 3);
  at::Tensor output = model->forward(batch);
  at::Tensor loss = model->lossSum(output, batch);
  loss.backward();

  std::string path = dir + "/" + c.name + ".h5";
  mb::h5::Handle file = mb::h5::createFile(path, true, ExitCode::kFailure);
  hid_t root = file.get();
  const auto& m = c.config;
  mb::h5::writeAttribute(root, "kind", model->kind(), ExitCode::kFailure);
  mb::h5::writeAttribute(root, "device", mb::test::device().str(), ExitCode::kFailure);
  mb::h5::writeAttribute(
      root, "task",
      std::string(m.task == mb::Task::kClassification ? "classification" : "regression"),
      ExitCode::kFailure);
  mb::h5::writeAttribute(root, "loss", std::string(enumText(m.loss)), ExitCode::kFailure);
  mb::h5::writeAttribute(root, "huber_delta", m.huberDelta, ExitCode::kFailure);
  mb::h5::writeAttribute(root, "hidden", m.hidden, ExitCode::kFailure);
  mb::h5::writeAttribute(root, "layers", m.layers, ExitCode::kFailure);
  mb::h5::writeAttribute(root, "heads", m.heads, ExitCode::kFailure);
  mb::h5::writeAttribute(root, "head_hidden", m.headHidden, ExitCode::kFailure);
  mb::h5::writeAttribute(root, "bias", std::int64_t{m.bias}, ExitCode::kFailure);
  mb::h5::writeAttribute(root, "vocab_size", c.info.vocabSize, ExitCode::kFailure);
  mb::h5::writeAttribute(root, "num_classes", c.info.numClasses, ExitCode::kFailure);
  std::string streams;
  for (const auto& input : c.info.inputs)
    streams += (streams.empty() ? "" : ",") + input.name;
  mb::h5::writeAttribute(root, "streams", streams, ExitCode::kFailure);

  mb::h5::Handle group = mb::h5::createGroup(root, "model", ExitCode::kFailure);
  mb::model::writeStateDict(*model, group.get());
  group.reset();
  mb::h5::WriteOptions plain;
  auto put = [&](hid_t loc, const std::string& name, const at::Tensor& t) {
    mb::h5::writeTensor(loc, name, t.detach(), plain, ExitCode::kFailure);
  };
  mb::h5::Handle inputs = mb::h5::createGroup(root, "inputs", ExitCode::kFailure);
  for (std::size_t i = 0; i < batch.inputs.size(); ++i)
    put(inputs.get(), std::to_string(i), batch.inputs[i]);
  put(root, "targets", batch.targets);
  put(root, "output", output);
  put(root, "loss", loss);
  mb::h5::Handle metrics = mb::h5::createGroup(root, "metrics", ExitCode::kFailure);
  for (const auto& [name, value] : model->metricSums(output, batch))
    put(metrics.get(), name, value);
  mb::h5::Handle grads = mb::h5::createGroup(root, "grads", ExitCode::kFailure);
  for (const auto& item : model->named_parameters())
    put(grads.get(), item.key(), item.value().grad());
  inputs.reset();
  metrics.reset();
  grads.reset();
  file.close(ExitCode::kFailure, path);
  std::printf("%s: loss %.6f\n", path.c_str(), loss.item<double>());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  mb::h5::silenceLibraryErrors();
  try {
    std::printf("computing on %s\n", mb::test::device().str().c_str());
    at::manual_seed(7);
    for (const auto& c : cases())
      writeCase(argv[1], c);
  } catch (const std::exception& e) {  // mb::Error, or no usable test device
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
