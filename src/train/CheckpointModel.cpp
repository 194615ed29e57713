#include "train/CheckpointModel.h"

#include <algorithm>
#include <filesystem>

#include <c10/core/GradMode.h>

#include "common/Error.h"
#include "config/ConfigLoader.h"
#include "data/DataInfo.h"
#include "model/Model.h"
#include "model/StateDict.h"

namespace mb::train {
namespace fs = std::filesystem;

namespace {

const char* kSameModelHint =
    "the config's model.* keys (and, for model.kind = torchscript, the parameter names of the "
    "model.path archive) must match the run that wrote the checkpoint";

// `latest` holds the file name of the newest checkpoint in its directory; "" if unreadable.
std::string followLatest(const fs::path& latestFile) {
  std::string name = readLatestName(latestFile.parent_path().string());
  return name.empty() ? "" : (latestFile.parent_path() / name).string();
}

}  // namespace

std::string resolveCheckpointPath(const std::string& fileOrRunDir) {
  if (!fs::is_directory(fileOrRunDir)) {
    if (!fs::exists(fileOrRunDir))
      throw CheckpointError("checkpoint " + fileOrRunDir + " does not exist",
                            "pass a checkpoint file or a run directory (run.dir)");
    if (fs::path(fileOrRunDir).filename() != "latest") return fileOrRunDir;
    std::string target = followLatest(fileOrRunDir);
    if (target.empty())
      throw CheckpointError(fileOrRunDir + " names no checkpoint (it is empty)",
                            "pass a step-N.h5 file from the same directory");
    return target;
  }
  fs::path dir = fs::path(fileOrRunDir) / "checkpoints";
  if (fs::exists(dir / "best.h5")) return (dir / "best.h5").string();
  std::string target = followLatest(dir / "latest");
  if (target.empty())
    throw CheckpointError(
        fileOrRunDir + " has no checkpoints (no checkpoints/best.h5 or checkpoints/latest)",
        "train first, or pass a checkpoint file");
  return target;
}

// Copies checkpoint tensors into the model by state_dict name; every name must match both ways.
void loadModelState(model::Model& module, const NamedTensors& saved, const std::string& file) {
  at::NoGradGuard noGrad;
  NamedTensors mine = model::stateDict(module);
  std::vector<std::string> aliases;
  for (const auto& [alias, source] : module.tiedWeights())
    aliases.push_back(alias);
  for (auto& [name, target] : mine) {
    const at::Tensor* source = nullptr;
    for (const auto& [candidate, tensor] : saved) {
      if (candidate == name) source = &tensor;
    }
    if (source == nullptr && std::find(aliases.begin(), aliases.end(), name) != aliases.end())
      continue;
    if (source == nullptr)
      throw CheckpointError(file + ": the model has '" + name + "' but the checkpoint does not",
                            kSameModelHint);
    if (source->sizes() != target.sizes())
      throw CheckpointError(file + ": '" + name + "' has shape " + c10::str(source->sizes()) +
                                " in the checkpoint but " + c10::str(target.sizes()) +
                                " in the model",
                            kSameModelHint);
    target.copy_(*source);
  }
  for (const auto& [name, tensor] : saved) {
    bool known = false;
    for (const auto& entry : mine)
      known = known || entry.first == name;
    if (!known)
      throw CheckpointError(file + ": the checkpoint has '" + name + "', which this model does not",
                            kSameModelHint);
  }
}

TrainedModel loadTrainedModel(const std::string& fileOrRunDir,
                              const std::vector<std::string>& overrides) {
  TrainedModel run;
  run.path = resolveCheckpointPath(fileOrRunDir);
  run.checkpoint = readCheckpointFile(run.path);
  run.config = parseConfig(run.checkpoint.configYaml, run.path + " (/meta config)", overrides);
  data::DataInfo info = data::modelSpecFromYaml(run.checkpoint.dataInfoYaml);
  run.model =
      model::buildModel(run.config.model, info, static_cast<std::uint64_t>(run.config.train.seed));
  loadModelState(*run.model, run.checkpoint.model, run.path);
  run.model->loadExtraState(run.checkpoint.extra);
  run.model->eval();
  return run;
}

}  // namespace mb::train
