// megabatch inspect FILE: describes a data file (layout, datasets, chunking, time range,
// samples, attributes) or hands a checkpoint (a file with a /meta group) to inspectCheckpoint.
#include <cstdio>

#include "app/Cli.h"
#include "common/Error.h"
#include "data/Tools.h"
#include "dist/Runtime.h"
#include "train/Checkpoint.h"

namespace mb::app {
namespace {

int inspectCheckpoint(const std::string& path) {
  std::fputs(train::describeCheckpoint(path).c_str(), stdout);
  return 0;
}

}  // namespace

int runInspect(const ParsedArgs& args, dist::Runtime& runtime) {
  if (args.positionals.size() != 1)
    throw ConfigError("megabatch inspect takes one FILE", "usage: megabatch inspect FILE");
  const std::string& path = args.positionals.front();
  if (runtime.rank() != 0) return 0;  // a description, not a collective job
  if (data::looksLikeCheckpoint(path)) return inspectCheckpoint(path);
  std::fputs(data::describeDataFile(path).c_str(), stdout);
  return 0;
}

}  // namespace mb::app
