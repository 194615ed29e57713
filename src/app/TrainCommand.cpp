#include <cstdio>
#include <filesystem>

#include "app/Cli.h"
#include "common/Environment.h"
#include "common/Error.h"
#include "common/Log.h"
#include "common/Strings.h"
#include "config/ConfigLoader.h"
#include "config/ConfigSchema.h"
#include "dist/Agreement.h"
#include "dist/Runtime.h"
#include "train/Trainer.h"
#include "train/watch/StepProfiler.h"

namespace mb::app {
namespace {

void printConfigKeys() {
  std::printf("%-36s %-28s %s\n", "KEY", "TYPE", "MEANING");
  for (const auto& field : configFields())
    std::printf("%-36s %-28s %s\n", field.key.c_str(), field.type.c_str(), field.help.c_str());
}

// MEGABATCH_PROFILE=FILE and MEGABATCH_PROFILE_STEPS=FIRST:LAST (Note [Operator profile]).
train::ProfileRequest profileRequest() {
  train::ProfileRequest request;
  request.path = env::get("MEGABATCH_PROFILE").value_or("");
  std::optional<std::string> steps = env::get("MEGABATCH_PROFILE_STEPS");
  if (request.path.empty() || !steps) return request;
  std::vector<std::string> range = str::split(*steps, ':');
  try {
    if (range.size() != 2) throw std::invalid_argument("not FIRST:LAST");
    request.first = std::stoll(range[0]);
    request.last = std::stoll(range[1]);
  } catch (const std::exception&) {
    throw ConfigError("MEGABATCH_PROFILE_STEPS=" + *steps + " is not FIRST:LAST",
                      "e.g. MEGABATCH_PROFILE_STEPS=21:40");
  }
  return request;
}

}  // namespace

int runTrain(const ParsedArgs& args, dist::Runtime& runtime) {
  if (args.has("help-config")) {
    if (runtime.rank() == 0) printConfigKeys();
    return 0;
  }
  if (!args.has("config"))
    throw ConfigError("megabatch train needs --config FILE",
                      "e.g. megabatch train --config configs/demo.yaml");
  Config config;
  // Every rank reads the config; a file missing on one node stops all ranks with its message.
  dist::agreed(runtime.control(), "reading the config",
               [&] { config = loadConfigFile(args.get("config"), args.positionals); });
  if (args.has("print-config")) {
    if (runtime.rank() == 0) std::fputs(configToYaml(config).c_str(), stdout);
    return 0;
  }
  // run.log_level for every channel (train ignored it until 2026-11-28; `data check` applied it).
  log::setLevel(config.run.logLevel);
  train::Trainer trainer(config, runtime, profileRequest());
  switch (trainer.run()) {
    case train::RunOutcome::kFinished:
    case train::RunOutcome::kEarlyStopped:
      return 0;
    case train::RunOutcome::kPreempted:
      return static_cast<int>(ExitCode::kPreempted);
    case train::RunOutcome::kTooManyBadSteps:
      return static_cast<int>(ExitCode::kFailure);
  }
  return 0;
}

}  // namespace mb::app
