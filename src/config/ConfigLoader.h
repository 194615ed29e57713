#pragma once
// Loading a config: YAML file -> unknown-key check -> typed fields -> dotted overrides ->
// validator. Every problem is a ConfigError (exit code 2) that names the key and the value.
#include <string>
#include <vector>

#include "config/Config.h"

namespace mb {

// Parses YAML text (sourceName names it in messages), applies `overrides` ("optim.lr=1e-3"),
// and validates the result.
Config parseConfig(const std::string& yamlText, const std::string& sourceName,
                   const std::vector<std::string>& overrides = {});
// Same, reading the file at `path`.
Config loadConfigFile(const std::string& path, const std::vector<std::string>& overrides = {});
// Applies one "key=value" override without validating.
void applyOverride(Config& config, const std::string& assignment);
// The resolved config as YAML, every key present, in schema order.
std::string configToYaml(const Config& config);

}  // namespace mb
