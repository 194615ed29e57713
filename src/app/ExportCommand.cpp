// megabatch export --checkpoint CKPT --to FILE.pt [key=value ...]
// Writes the trained weights of a model.kind = torchscript checkpoint into the TorchScript
// archive the run trained (the config's model.path), so that Python continues from it:
//   model = torch.jit.load("trained.pt")
// Overrides apply to the checkpoint's config, e.g. model.path=/elsewhere/model.pt when the
// archive has moved since training. The file is written as FILE.pt.tmp and renamed.
#include <filesystem>

#include "app/Cli.h"
#include "common/Error.h"
#include "common/Log.h"
#include "common/OutOfMemory.h"
#include "dist/Runtime.h"
#include "model/Model.h"
#include "model/ModelRegistry.h"
#include "train/CheckpointModel.h"

namespace mb::app {

int runExport(const ParsedArgs& args, dist::Runtime& runtime) {
  if (!args.has("checkpoint") || !args.has("to"))
    throw ConfigError("megabatch export needs --checkpoint CKPT and --to FILE.pt",
                      "e.g. megabatch export --checkpoint runs/tcn --to trained.pt");
  if (runtime.rank() != 0) return 0;  // one process writes the file; other ranks are idle
  train::TrainedModel run = train::loadTrainedModel(args.get("checkpoint"), args.positionals);
  const model::ModelKind& kind = model::modelKind(run.config.model.kind);
  if (!kind.exportArchive)
    throw ConfigError(run.path + " holds a " + kind.name +
                          " model; megabatch export writes the archives of model.kind = "
                          "torchscript runs",
                      "load a built-in model in Python from the checkpoint's /model group "
                      "(docs/checkpoint-format.md)");
  const std::string to = args.get("to");
  const std::string tmp = to + ".tmp";
  try {
    MemoryPhase phase("exporting the model");  // Note [Out of memory is an expected error]
    kind.exportArchive(*run.model, tmp);
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw;
  }
  std::error_code ec;
  std::filesystem::rename(tmp, to, ec);
  if (ec)
    throw RuntimeError("cannot rename " + tmp + " to " + to + ": " + ec.message(),
                       "check that " + to + " is writable");
  log::get("app").info("wrote {}: {} with the weights of {} (step {})", to, run.config.model.path,
                       run.path, run.checkpoint.trainer.step);
  return 0;
}

}  // namespace mb::app
