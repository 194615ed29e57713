#pragma once
// The models by name (model.kind). ModelRegistry.cpp lists them in one place; code outside
// src/model/ asks a ModelKind what a model can do instead of comparing names.
//
// Adding a model: a class derived from Model (Model.h) in its own file pair, a function in it
// that returns its ModelKind, one line in ModelRegistry.cpp, a parity test against a plain
// PyTorch module (tests/model/test_parity.py), and a section in docs/models.md.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/Config.h"
#include "data/DataInfo.h"

namespace mb::model {

class Model;

struct ModelKind {
  std::string name;                  // as written in model.kind
  std::string summary;               // one line for messages and docs
  std::vector<std::string> layouts;  // the data.layout values it trains on
  // Predicts the next token of a token stream: its loss is cross-entropy whatever model.task
  // says, `megabatch sample` generates from it, and `megabatch predict` refuses it.
  bool languageModel = false;
  bool carriesState = false;  // model.stateful (lanes of hidden state) is allowed
  bool classWeights = false;  // model.class_weights = balanced is honoured
  std::function<std::shared_ptr<Model>(const ModelConfig& config, const data::DataInfo& info)>
      build;
  // The config rules of this model: the problem, or nullopt. May be empty.
  std::function<std::optional<std::string>(const Config& config)> checkConfig;
  // Writes a trained model back into the file format it was given in (`megabatch export`).
  // Empty for the built-in models: Python loads them from the checkpoint's /model group.
  std::function<void(Model& model, const std::string& path)> exportArchive;
};

const std::vector<ModelKind>& modelKinds();
// nullptr when `name` is no model.
const ModelKind* findModelKind(const std::string& name);
// The model `name`; throws ConfigError (exit 2) naming the known ones.
const ModelKind& modelKind(const std::string& name);
std::vector<std::string> modelKindNames();

}  // namespace mb::model
