// megabatch walk --config FILE [key=value ...]: a walk-forward, a fold per calendar period
// (Note [Walk-forward] in src/walk/WalkPlan.h; the work is src/walk/Walk.cpp).
#include <cstdio>

#include "app/Cli.h"
#include "common/Error.h"
#include "common/Log.h"
#include "config/ConfigLoader.h"
#include "dist/Agreement.h"
#include "dist/Runtime.h"
#include "walk/Walk.h"

namespace mb::app {

int runWalk(const ParsedArgs& args, dist::Runtime& runtime) {
  if (!args.has("config"))
    throw ConfigError("megabatch walk needs --config FILE",
                      "e.g. megabatch walk --config configs/demo-walk.yaml");
  Config config;
  dist::agreed(runtime.control(), "reading the config",
               [&] { config = loadConfigFile(args.get("config"), args.positionals); });
  if (args.has("print-config")) {
    if (runtime.rank() == 0) std::fputs(configToYaml(config).c_str(), stdout);
    return 0;
  }
  log::setLevel(config.run.logLevel);
  walk::WalkOptions options;
  options.planOnly = args.has("plan");
  options.fold = args.get("fold");
  if (options.planOnly && !options.fold.empty())
    throw ConfigError("megabatch walk: --plan and --fold go alone",
                      "--plan prints every fold; --fold DAY trains one");
  return walk::runWalk(config, runtime, options);
}

}  // namespace mb::app
