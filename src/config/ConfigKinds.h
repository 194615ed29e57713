#pragma once
// Note [Kinds handed down]
// data.layout and model.kind name things that the layers above config define: the layouts of
// src/data/ and the models of src/model/. Some config rules depend on them (which layouts a
// model trains on, whether it may carry state, each kind's own checks), yet config includes
// nothing above itself (app -> walk -> train -> model -> data -> dist -> config -> common). So
// config keeps only the part of a kind that its rules read (LayoutRules, ModelRules), the layers
// above derive their kinds from those (data::LayoutKind, model::ModelKind), and the registries are
// handed down once, before any config is read: model::handKindsToConfig() at the start of
// app::main() and of every test program (tests/support/Kinds.cpp).
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "config/Config.h"

namespace mb {

// A rule of one kind: the problem (naming the key and the value), or nullopt.
using KindRule = std::function<std::optional<std::string>(const Config& config)>;

// What config's rules know of one data layout (data::LayoutKind derives from it).
struct LayoutRules {
  std::string name;     // as written in data.layout
  bool hasTime = true;  // samples may carry timestamps (splits by time, eval --from/--to)
  // The layout's own rules (data.layout = series needs data.streams, ...). May be empty.
  KindRule checkConfig;
};

// What config's rules know of one model (model::ModelKind derives from it).
struct ModelRules {
  std::string name;                  // as written in model.kind
  std::vector<std::string> layouts;  // the data.layout values it trains on
  // Predicts the next token of a token stream: its loss is cross-entropy whatever model.task
  // says, `megabatch sample` generates from it, and `megabatch predict` refuses it.
  bool languageModel = false;
  bool carriesState = false;  // model.stateful (lanes of hidden state) is allowed
  bool classWeights = false;  // model.class_weights = balanced is honoured
  // The model's own rules. May be empty.
  KindRule checkConfig;
};

struct ConfigKinds {
  std::vector<LayoutRules> layouts;  // in the order --help-config lists them
  std::vector<ModelRules> models;
};

// Replaces the kinds that data.layout and model.kind may name. Called once at start-up, before
// any thread reads a config.
void installConfigKinds(ConfigKinds kinds);
// The installed kinds; throws std::logic_error when a program reads a config before handing
// them down (a bug of that program, not a user error).
const ConfigKinds& configKinds();
std::vector<std::string> layoutChoices();
std::vector<std::string> modelChoices();
// nullptr when `name` is none.
const LayoutRules* findLayoutRules(const std::string& name);
const ModelRules* findModelRules(const std::string& name);

}  // namespace mb
