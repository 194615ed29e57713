#pragma once
// Loading a config: YAML file -> unknown-key check -> typed fields -> dotted overrides ->
// validator. Every problem is a ConfigError (exit code 2) that names the key and the value.
#include <string>
#include <vector>

#include "config/Config.h"

namespace mb {

// Who wrote a config's YAML text, which decides what a removed key in it means (Note [Removed
// config keys] in ConfigSchema.h): in a user's config it is an error with a hint; in the config
// a checkpoint stores it is left out silently, so checkpoints written before the removal load.
enum class ConfigOrigin { kUser, kCheckpoint };

// Parses YAML text (sourceName names it in messages), applies `overrides` ("optim.lr=1e-3"),
// and validates the result. The default origin is the checkpoint's /meta config, which is what
// the callers outside this module parse (loadTrainedModel, the resume of a stateful run); a
// user's file goes through loadConfigFile. Overrides always come from the user: a removed key
// there is an error whatever the origin of the text.
Config parseConfig(const std::string& yamlText, const std::string& sourceName,
                   const std::vector<std::string>& overrides = {},
                   ConfigOrigin origin = ConfigOrigin::kCheckpoint);
// Reads a user's config file at `path` (ConfigOrigin::kUser) and parses it as above.
Config loadConfigFile(const std::string& path, const std::vector<std::string>& overrides = {});
// Applies one "key=value" override without validating.
void applyOverride(Config& config, const std::string& assignment);
// The resolved config as YAML, every key present, in schema order.
std::string configToYaml(const Config& config);

}  // namespace mb
