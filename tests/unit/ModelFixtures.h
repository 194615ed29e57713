#pragma once
// Small models and batches for the model tests (Gpt*, Lstm*, StateDict*, ModelFactory*), on
// test::device() (Note [Test device]).
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <ATen/Functions.h>
#include <unistd.h>

#include "config/Config.h"
#include "data/Batch.h"
#include "data/DataInfo.h"
#include "model/Model.h"

#include "tests/support/Device.h"
#include "tests/support/TempDir.h"

namespace mb::test {

inline data::DataInfo tokenInfo(std::int64_t context, std::int64_t vocab) {
  data::DataInfo info;
  info.layout = "tokens";
  info.path = "tokens.h5";
  info.inputs = {{"tokens", context, 0}};
  info.targetShape = {context};
  info.integerTargets = true;
  info.vocabSize = vocab;
  return info;
}

// `streams` as {name, window, features}; targets [N] (k = 0) or [N, k]; `classes` > 0 for labels.
inline data::DataInfo seriesInfo(const std::vector<data::InputSpec>& streams, std::int64_t k = 0,
                                 std::int64_t classes = 0) {
  data::DataInfo info;
  info.layout = "series";
  info.path = "series.h5";
  info.inputs = streams;
  if (k > 0) info.targetShape = {k};
  info.integerTargets = classes > 0;
  info.numClasses = classes;
  return info;
}

inline ModelConfig gptConfig(std::int64_t width = 32, std::int64_t layers = 2,
                             std::int64_t heads = 4) {
  ModelConfig config;
  config.kind = "gpt";
  config.hidden = width;
  config.layers = layers;
  config.heads = heads;
  return config;
}

inline ModelConfig lstmConfig(std::int64_t hidden = 8, std::int64_t layers = 2) {
  ModelConfig config;
  config.kind = "lstm";
  config.hidden = hidden;
  config.layers = layers;
  config.headHidden = 6;
  return config;
}

// model::buildModel (seeded, built on the CPU, so the weights are the same on every device)
// moved to test::device().
inline std::shared_ptr<model::Model> deviceModel(const ModelConfig& config,
                                                 const data::DataInfo& info, std::uint64_t seed) {
  auto built = model::buildModel(config, info, seed);
  built->to(test::device());
  return built;
}

// A random batch for `info`: float windows, tokens, labels, or regression targets. Drawn on the
// CPU (the same values whatever the device), then moved to test::device().
inline data::Batch randomBatch(const data::DataInfo& info, std::int64_t rows) {
  data::Batch batch;
  for (const auto& input : info.inputs) {
    if (info.layout == "tokens") {
      batch.inputs.push_back(at::randint(info.vocabSize, {rows, input.window}, at::kLong));
    } else if (input.window > 0) {
      batch.inputs.push_back(at::randn({rows, input.window, input.features}));
    } else {
      batch.inputs.push_back(at::randn({rows, input.features}));
    }
  }
  if (info.layout == "tokens") {
    batch.targets = at::randint(info.vocabSize, {rows, info.inputs[0].window}, at::kLong);
  } else if (info.numClasses > 0) {
    batch.targets = at::randint(info.numClasses, {rows}, at::kLong);
  } else {
    std::vector<std::int64_t> shape{rows};
    shape.insert(shape.end(), info.targetShape.begin(), info.targetShape.end());
    batch.targets = at::randn(shape);
  }
  batch.sampleIndex = at::arange(rows, at::kLong);
  for (auto& input : batch.inputs)
    input = input.to(test::device());
  batch.targets = batch.targets.to(test::device());
  batch.sampleIndex = batch.sampleIndex.to(test::device());
  return batch;
}

}  // namespace mb::test
