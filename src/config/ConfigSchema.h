#pragma once
// The config schema: one entry per YAML key, mapping it to a field of Config. Loading,
// overrides, unknown-key suggestions, and --print-config all walk this one table.
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "config/Config.h"

namespace YAML {
class Node;
}

namespace mb {

struct ConfigField {
  std::string key;                   // dotted: "optim.lr"
  std::string type;                  // for messages: "float", "int", "adamw|adam|sgd", ...
  std::string help;                  // one line for --help-config
  std::vector<std::string> aliases;  // other names users try ("learning_rate"); for suggestions
  // Parses `value` into the field; throws ConfigError naming the key and the bad value.
  std::function<void(Config&, const YAML::Node& value)> assign;
  std::function<YAML::Node(const Config&)> emit;
  // Whether the resolved config (configToYaml) shows the key; unset: always.
  std::function<bool(const Config&)> shown;
};

// Every key, in the order --print-config shows them.
const std::vector<ConfigField>& configFields();
const ConfigField* findConfigField(const std::string& key);
// True for "optim", "data.split": a prefix of some key.
bool isConfigSection(const std::string& key);
// Note [Removed config keys]
// A key megabatch no longer has is listed with the reason it went, so a user who still sets it
// learns why and what to do instead of reading "unknown config key". Every checkpoint stores its
// whole resolved config (configToYaml: every key), so the /meta config of a checkpoint written
// before the removal still holds the key: parseConfig drops it there without a word
// (ConfigOrigin::kCheckpoint), while a user's config file or override naming it is a ConfigError
// (exit 2) whose hint says to delete it (ConfigLoader.cpp).
struct RemovedConfigKey {
  std::string key;  // dotted: "train.cuda_graphs"
  std::string why;  // completes "config key 'train.cuda_graphs' was removed: ..."
};
// The removed key named `key`, or nullptr when `key` was never removed.
const RemovedConfigKey* findRemovedConfigKey(const std::string& key);

// The closest known key to a mistyped one ("optim.lerning_rate" -> "optim.lr"), or "" if none
// is close enough to be a useful suggestion.
std::string suggestConfigKey(const std::string& unknownKey);

// Names of enum values as written in YAML ("adamw", "bf16", ...).
std::string toString(Residency value);
std::string toString(DType value);
std::string toString(Precision value);
std::string toString(DeviceKind value);
std::string toString(HostSync value);
std::string toString(RecomputeMode value);
std::string toString(Task value);
std::string toString(LossKind value);
std::string toString(OptimizerKind value);
std::string toString(ScheduleKind value);
std::string toString(BackendKind value);
std::string toString(ProgressKind value);
std::string toString(MetricMode value);
std::string toString(TimeUnit value);

}  // namespace mb
