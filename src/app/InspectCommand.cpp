// megabatch inspect FILE: describes a data file (layout, datasets, chunking, time range,
// samples, attributes) or hands a checkpoint (a file with a /meta group) to inspectCheckpoint.
#include <cstdio>
#include <filesystem>
#include <regex>

#include "app/Cli.h"
#include "common/Error.h"
#include "data/tools/Tools.h"
#include "dist/Runtime.h"
#include "train/CheckpointModel.h"
#include "train/checkpoints/Checkpoint.h"

namespace mb::app {
namespace {

int inspectCheckpoint(const std::string& path) {
  const bool configChecked = train::checkConfigDescribesTensors(path);  // exit 4 if it does not
  std::fputs(train::describeCheckpoint(path).c_str(), stdout);
  std::fputs(configChecked ? "  config:       describes exactly these model tensors\n"
                           : "  config:       a TorchScript model (its archive gives the shapes)\n",
             stdout);
  return 0;
}

// A checkpoint too damaged to open (truncated) has no /meta to recognise it by; its name and
// place still say what it is, and its problem is a checkpoint problem (exit 4), not bad data.
bool namedLikeCheckpoint(const std::string& path) {
  static const std::regex name("step-[0-9]{8,}\\.h5|best\\.h5");
  std::filesystem::path p(path);
  return std::regex_match(p.filename().string(), name) ||
         p.parent_path().filename() == "checkpoints";
}

bool isCheckpoint(const std::string& path) {
  try {
    return data::looksLikeCheckpoint(path);
  } catch (const Error&) {
    if (namedLikeCheckpoint(path)) return true;  // describeCheckpoint reports why it does not load
    throw;
  }
}

}  // namespace

int runInspect(const ParsedArgs& args, dist::Runtime& runtime) {
  if (args.positionals.size() != 1)
    throw ConfigError("megabatch inspect takes one FILE", "usage: megabatch inspect FILE");
  std::string path = args.positionals.front();
  if (runtime.rank() != 0) return 0;  // a description, not a collective job
  // A run directory or its checkpoints/latest pointer: the checkpoint `eval` would load.
  if (std::filesystem::is_directory(path) || std::filesystem::path(path).filename() == "latest") {
    int status = 0;
    train::readNewestCheckpoint(path,
                                [&](const std::string& file) { status = inspectCheckpoint(file); });
    return status;
  }
  if (isCheckpoint(path)) return inspectCheckpoint(path);
  std::fputs(data::describeDataFile(path).c_str(), stdout);
  return 0;
}

}  // namespace mb::app
