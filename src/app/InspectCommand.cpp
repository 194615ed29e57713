// megabatch inspect FILE: describes a data file (layout, datasets, chunking, time range,
// samples, attributes) or hands a checkpoint (a file with a /meta group) to inspectCheckpoint.
#include <cstdio>

#include "app/Cli.h"
#include "common/Error.h"
#include "data/Tools.h"
#include "dist/Runtime.h"

namespace mb::app {
namespace {

// Checkpoints (trainer issue #5) are described by the checkpoint code; until it lands, say
// what the file is.
int inspectCheckpoint(const std::string& path) {
  throw RuntimeError(path +
                     ": a megabatch checkpoint (it has a /meta group), not a data file; "
                     "describing checkpoints is not implemented yet");
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
