#include "config/ConfigLoader.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "common/Error.h"
#include "common/Log.h"
#include "common/Strings.h"
#include "config/ConfigSchema.h"
#include "config/ConfigValidator.h"

namespace mb {
namespace {

[[noreturn]] void unknownKey(const std::string& key, const std::string& where) {
  std::string suggestion = suggestConfigKey(key);
  std::string hint = suggestion.empty() ? "run `megabatch train --help-config` for the list of keys"
                                        : "did you mean " + suggestion + "?";
  throw ConfigError(where + "unknown config key '" + key + "'", hint);
}

// Note [Removed config keys] (ConfigSchema.h). `fix` says what to delete.
[[noreturn]] void removedKey(const RemovedConfigKey& removed, const std::string& where,
                             const std::string& fix) {
  throw ConfigError(where + "config key '" + removed.key + "' was removed: " + removed.why, fix);
}

std::vector<std::string> sectionKeys(const std::string& section) {
  std::vector<std::string> keys;
  for (const auto& field : configFields()) {
    if (str::startsWith(field.key, section + ".")) {
      std::string rest = field.key.substr(section.size() + 1);
      std::string child = rest.substr(0, rest.find('.'));
      if (keys.empty() || keys.back() != child) keys.push_back(child);
    }
  }
  return keys;
}

// Walks a YAML map, assigning leaves to fields and rejecting keys the schema does not know.
// A removed key is skipped in a checkpoint's config and refused in a user's.
// `assigned` collects the keys set.
void assignTree(Config& config, const YAML::Node& node, const std::string& prefix,
                const std::string& where, ConfigOrigin origin, std::vector<std::string>& assigned) {
  for (const auto& entry : node) {
    if (!entry.first.IsScalar()) throw ConfigError(where + "config keys must be plain names");
    std::string key = prefix.empty() ? entry.first.Scalar() : prefix + "." + entry.first.Scalar();
    if (const ConfigField* field = findConfigField(key)) {
      try {
        field->assign(config, entry.second);
        assigned.push_back(key);
      } catch (const ConfigError& error) {
        throw ConfigError(where + error.message(),
                          error.hint());  // name the file, as for unknown keys
      }
    } else if (isConfigSection(key)) {
      if (entry.second.IsNull()) continue;  // an empty section keeps its defaults
      if (!entry.second.IsMap())
        throw ConfigError(where + key + ": expected a section with keys " +
                          str::join(sectionKeys(key), ", "));
      assignTree(config, entry.second, key, where, origin, assigned);
    } else if (const RemovedConfigKey* removed = findRemovedConfigKey(key)) {
      if (origin == ConfigOrigin::kCheckpoint) continue;
      removedKey(*removed, where,
                 "delete " + key + " from the config file; the run is the same without it");
    } else {
      unknownKey(key, where);
    }
  }
}

YAML::Node parseYaml(const std::string& text, const std::string& sourceName) {
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw ConfigError(sourceName + ": not valid YAML at line " + std::to_string(e.mark.line + 1) +
                      ", column " + std::to_string(e.mark.column + 1) + ": " + e.msg);
  }
}

bool isTimeCutKey(const std::string& key) {
  return key == "data.split.train_from" || key == "data.split.train_until" ||
         key == "data.split.val_until" || key == "data.split.val_from";
}

bool isFractionKey(const std::string& key) {
  return str::startsWith(key, "data.split.") && str::endsWith(key, "_fraction");
}

std::vector<std::string> keysWhere(const std::vector<std::string>& keys,
                                   bool (*predicate)(const std::string&)) {
  std::vector<std::string> found;
  for (const auto& key : keys) {
    if (predicate(key)) found.push_back(key);
  }
  return found;
}

void refuseBoth(const std::vector<std::string>& time, const std::vector<std::string>& fractions,
                const std::string& where) {
  if (time.empty() || fractions.empty()) return;
  throw ConfigError(
      where + time.front() + " and " + fractions.front() +
          " are both set: the splits are by time or by fractions, not both",
      "keep the time cuts (data.split.train_from/train_until/val_until) or the fractions "
      "(data.split.*_fraction), and delete the others");
}

// Note [Splits by time]: one way to split. Both ways in the config file, or both among the
// overrides, is an error; an override of one way replaces the other way of the file, so that
// `train --config configs/demo.yaml data.split.train_until=2024-01-01` just works.
void settleSplitKeys(Config& config, const std::vector<std::string>& fileKeys,
                     const std::vector<std::string>& overrideKeys, const std::string& sourceName,
                     ConfigOrigin origin) {
  const auto fileTime = keysWhere(fileKeys, isTimeCutKey);
  const auto fileFractions = keysWhere(fileKeys, isFractionKey);
  const auto overrideTime = keysWhere(overrideKeys, isTimeCutKey);
  const auto overrideFractions = keysWhere(overrideKeys, isFractionKey);
  if (origin == ConfigOrigin::kUser) refuseBoth(fileTime, fileFractions, sourceName + ": ");
  refuseBoth(overrideTime, overrideFractions, "overrides: ");
  if (!overrideTime.empty() && !fileFractions.empty()) {
    const SplitConfig defaults;
    config.data.split.trainFraction = defaults.trainFraction;
    config.data.split.valFraction = defaults.valFraction;
    config.data.split.testFraction = defaults.testFraction;
    log::get("config").info("{} (an override) replaces the split fractions of {}: splits by time",
                            overrideTime.front(), sourceName);
  }
  if (!overrideFractions.empty() && !fileTime.empty()) {
    for (const auto& key : fileTime) {
      if (std::find(overrideTime.begin(), overrideTime.end(), key) != overrideTime.end()) continue;
      if (key == "data.split.train_from") config.data.split.trainFrom.clear();
      if (key == "data.split.train_until") config.data.split.trainUntil.clear();
      if (key == "data.split.val_until") config.data.split.valUntil.clear();
      if (key == "data.split.val_from") config.data.split.valFrom.clear();
    }
    log::get("config").info("{} (an override) replaces the time cuts of {}: splits by fractions",
                            overrideFractions.front(), sourceName);
  }
}

std::string overrideKey(const std::string& assignment) {
  return str::trim(assignment.substr(0, assignment.find('=')));
}

}  // namespace

void applyOverride(Config& config, const std::string& assignment) {
  auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw ConfigError("override '" + assignment + "' is not of the form key=value",
                      "write overrides as dotted keys, e.g. optim.lr=1e-3 train.max_steps=100");
  std::string key = str::trim(assignment.substr(0, eq));
  std::string value = assignment.substr(eq + 1);
  const ConfigField* field = findConfigField(key);
  if (field == nullptr) {
    if (isConfigSection(key))
      throw ConfigError(
          "override '" + key + "' names a section, not a key",
          "set one of its keys: " + key + "." + str::join(sectionKeys(key), ", " + key + "."));
    if (const RemovedConfigKey* removed = findRemovedConfigKey(key))
      removedKey(*removed, "override: ",
                 "delete the override " + assignment + "; the run is the same without it");
    unknownKey(key, "override: ");
  }
  field->assign(config, parseYaml(value, "override " + key));
}

Config parseConfig(const std::string& yamlText, const std::string& sourceName,
                   const std::vector<std::string>& overrides, ConfigOrigin origin) {
  Config config;
  YAML::Node root = parseYaml(yamlText, sourceName);
  std::vector<std::string> fileKeys, overrideKeys;
  if (root.IsDefined() && !root.IsNull()) {
    if (!root.IsMap())
      throw ConfigError(sourceName + ": the config must be a YAML map of sections");
    assignTree(config, root, "", sourceName + ": ", origin, fileKeys);
  }
  for (const auto& assignment : overrides) {
    applyOverride(config, assignment);
    overrideKeys.push_back(overrideKey(assignment));
  }
  settleSplitKeys(config, fileKeys, overrideKeys, sourceName, origin);
  requireValidConfig(config);
  return config;
}

Config loadConfigFile(const std::string& path, const std::vector<std::string>& overrides) {
  // A directory opens like a file on Linux and reads as nothing: it would pass as an empty
  // config and fail later with a misleading message.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw ConfigError(
        "cannot read config file '" + path + "': it is a directory",
        "pass the YAML file, e.g. " + path + "/train.yaml; ready-made configs are in configs/");
  std::ifstream in(path);
  if (!in)
    throw ConfigError("cannot read config file '" + path + "'",
                      "check the path; ready-made configs are in configs/");
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) throw ConfigError("cannot read config file '" + path + "': read error");
  return parseConfig(text.str(), path, overrides, ConfigOrigin::kUser);
}

std::string configToYaml(const Config& config) {
  // Fields of a section are contiguous in the schema, so the tree is emitted in one pass:
  // close the maps the next key leaves, open the ones it enters.
  YAML::Emitter out;
  out << YAML::BeginMap;
  std::vector<std::string> open;
  for (const auto& field : configFields()) {
    if (field.shown && !field.shown(config)) continue;
    std::vector<std::string> parts = str::split(field.key, '.');
    std::size_t common = 0;
    while (common < open.size() && common + 1 < parts.size() && open[common] == parts[common])
      ++common;
    for (; open.size() > common; open.pop_back())
      out << YAML::EndMap;
    for (; open.size() + 1 < parts.size(); open.push_back(parts[open.size()]))
      out << YAML::Key << parts[open.size()] << YAML::Value << YAML::BeginMap;
    out << YAML::Key << parts.back() << YAML::Value << field.emit(config);
  }
  for (; !open.empty(); open.pop_back())
    out << YAML::EndMap;
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace mb
