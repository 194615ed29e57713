#pragma once
// The models by name (model.kind). ModelRegistry.cpp lists them in one place; code outside
// src/model/ asks a ModelKind what a model can do instead of comparing names.
//
// Adding a model: a class derived from Model (Model.h) in its own file pair in src/model/kinds/
// (building blocks shared by several models are in src/model/parts/), a function in it that
// returns its ModelKind, one line in ModelRegistry.cpp, a parity test against a plain PyTorch
// module (tests/model/test_parity.py), and a section in docs/models.md.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/Config.h"
#include "config/ConfigKinds.h"
#include "data/DataInfo.h"

namespace mb::model {

class Model;

// One value of model.kind. Its name, the layouts it trains on, its traits and its config rules
// are the ModelRules that config sees (Note [Kinds handed down] in config/ConfigKinds.h).
struct ModelKind : ModelRules {
  std::string summary;  // one line for messages and docs
  std::function<std::shared_ptr<Model>(const ModelConfig& config, const data::DataInfo& info)>
      build;
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
// Hands the data layouts and the models down to config (Note [Kinds handed down]): every program
// calls it once at start-up, before it reads a config.
void handKindsToConfig();

}  // namespace mb::model
