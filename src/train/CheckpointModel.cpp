#include "train/CheckpointModel.h"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <set>

#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>

#include "common/CpuAllocationScope.h"
#include "common/Error.h"
#include "common/Hdf5.h"
#include "common/Log.h"
#include "common/OutOfMemory.h"
#include "common/Strings.h"
#include "config/ConfigLoader.h"
#include "data/DataInfo.h"
#include "model/Model.h"
#include "model/StateDict.h"
#include "train/checkpoints/CheckpointDirectory.h"
#include "train/checkpoints/CheckpointVerify.h"

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

// Names a few entries: "a, b, c, ... (5 more)".
constexpr std::size_t kNamesShown = 6;

std::string someNames(const std::vector<std::string>& names, std::size_t limit) {
  std::vector<std::string> shown(names.begin(), names.begin() + std::min(names.size(), limit));
  std::string text = str::join(shown, ", ");
  if (names.size() > limit) text += ", ... (" + std::to_string(names.size() - limit) + " more)";
  return text;
}

// Copies checkpoint tensors into the model by state_dict name; every name must match both ways.
// Every mismatch is reported at once, and nothing is copied unless all entries match.
void loadModelState(model::Model& module, const NamedTensors& saved, const std::string& file,
                    std::size_t namesShown, const std::string& hint) {
  at::NoGradGuard noGrad;
  NamedTensors mine = model::stateDict(module);
  std::set<std::string> aliases, known;
  for (const auto& [alias, source] : module.tiedWeights())
    aliases.insert(alias);
  std::map<std::string, const at::Tensor*> byName;
  for (const auto& [name, tensor] : saved)
    byName[name] = &tensor;
  std::vector<std::string> missing, unexpected, reshaped;
  for (const auto& [name, target] : mine) {
    known.insert(name);
    auto found = byName.find(name);
    if (found == byName.end()) {
      if (!aliases.count(name)) missing.push_back(name);
    } else if (found->second->sizes() != target.sizes()) {
      reshaped.push_back(name + " " + c10::str(found->second->sizes()) + " in the checkpoint but " +
                         c10::str(target.sizes()) + " in the model");
    }
  }
  for (const auto& [name, tensor] : saved) {
    if (!known.count(name)) unexpected.push_back(name);
  }
  if (!missing.empty() || !unexpected.empty() || !reshaped.empty()) {
    std::vector<std::string> parts;
    if (!missing.empty())
      parts.push_back("the checkpoint lacks " + std::to_string(missing.size()) +
                      " of the model's (" + someNames(missing, namesShown) + ")");
    if (!unexpected.empty())
      parts.push_back("it has " + std::to_string(unexpected.size()) + " the model does not (" +
                      someNames(unexpected, namesShown) + ")");
    if (!reshaped.empty())
      parts.push_back(std::to_string(reshaped.size()) + " differ in shape (" +
                      someNames(reshaped, namesShown) + ")");
    throw CheckpointError(file + ": the parameters and buffers do not match the " + module.kind() +
                              " model: " + str::join(parts, "; "),
                          hint.empty() ? std::string(kSameModelHint) : hint);
  }
  for (auto& [name, target] : mine) {
    auto found = byName.find(name);
    if (found != byName.end()) target.copy_(*found->second);
  }
}

// Note [A checkpoint's config describes its tensors]
// The model is built from /meta's config before a tensor is read, and its shapes are then what
// the tensors must be. A config edited to describe a huge model (model.hidden 40000 over
// tensors of 32) would otherwise allocate tens of GB before that check. Checkpoints are not
// compressed, and the model is built in float32 as they store it, so its parameters and
// buffers take no more bytes than the file; the build may hold twice that plus 256 MiB of
// temporaries, and a config that needs more is refused (exit 4) before it fills memory.
std::shared_ptr<model::Model> buildModelWithinFile(const Config& config, const data::DataInfo& info,
                                                   const std::string& path) {
  constexpr std::int64_t kSlack = std::int64_t{256} << 20;
  const std::int64_t cap = 2 * static_cast<std::int64_t>(fs::file_size(path)) + kSlack;
  try {
    CpuAllocationScope scope(cap);
    return model::buildModel(config.model, info, static_cast<std::uint64_t>(config.train.seed));
  } catch (const AllocationCapExceeded& e) {
    throw HostileCheckpointError(
        path + ": its /meta config describes a " + config.model.kind +
            " model larger than the file's tensors: building it asked for " +
            str::humanBytes(static_cast<double>(e.requested)) + " with " +
            str::humanBytes(static_cast<double>(e.live)) + " held, over the " +
            str::humanBytes(static_cast<double>(e.cap)) + " that a file of " +
            str::humanBytes(static_cast<double>(fs::file_size(path))) +
            " allows; the config was edited or belongs to another checkpoint (not written by "
            "megabatch, or rewritten)",
        "use the checkpoint as megabatch wrote it; `megabatch inspect` on it shows its config "
        "and tensors");
  }
}

// The state-dict entries ("model/<name>") of `expected` that `held` lacks, and those it holds
// that `expected` does not; a tied weight's alias may be absent.
std::vector<std::string> entryMismatches(const ExpectedTensors& expected,
                                         const std::vector<CheckedTensor>& held,
                                         const std::set<std::string>& aliases) {
  std::set<std::string> heldModel;
  for (const auto& tensor : held)
    if (tensor.path.rfind("model/", 0) == 0) heldModel.insert(tensor.path);
  std::vector<std::string> missing, unexpected, parts;
  for (const auto& [name, shape] : expected.tensors)
    if (!heldModel.count(name) && !aliases.count(name)) missing.push_back(name);
  for (const auto& name : heldModel)
    if (!expected.tensors.count(name)) unexpected.push_back(name);
  if (!missing.empty())
    parts.push_back("the file lacks " + std::to_string(missing.size()) + " of its tensors (" +
                    someNames(missing, kNamesShown) + ")");
  if (!unexpected.empty())
    parts.push_back("the file holds " + std::to_string(unexpected.size()) + " it has not (" +
                    someNames(unexpected, kNamesShown) + ")");
  return parts;
}

bool checkConfigDescribesTensors(const std::string& path) {
  CheckpointContent header = readCheckpointHeader(path);
  Config config;
  std::shared_ptr<model::Model> module;
  try {
    config = parseConfig(header.configYaml, path + " (/meta config)", {});
    // A TorchScript model's shapes come from its archive (the user's own file), not from keys.
    if (config.model.kind == "torchscript") return false;
    module = buildModelWithinFile(config, data::modelSpecFromYaml(header.dataInfoYaml), path);
  } catch (const Error& e) {
    if (e.code() == ExitCode::kCheckpoint) throw;
    throw HostileCheckpointError(path +
                                     ": its /meta config describes no model megabatch can build (" +
                                     e.message() + "); not written by megabatch, or rewritten",
                                 "use the checkpoint as megabatch wrote it");
  } catch (const c10::Error& e) {  // LibTorch refusing a shape the config asked for
    throw HostileCheckpointError(path + ": its /meta config describes no model megabatch can " +
                                     "build (" + e.what_without_backtrace() +
                                     "); not written by megabatch, or rewritten",
                                 "use the checkpoint as megabatch wrote it");
  }
  const ExpectedTensors expected = expectedTensors(*module);
  std::vector<CheckedTensor> held;
  {
    std::lock_guard<std::recursive_mutex> lock(h5::libraryMutex());
    h5::Handle file = h5::openFile(path, false, ExitCode::kCheckpoint);
    held = verifyCheckpointTree(file.get(), path, &expected);  // shapes: exit 4 on a mismatch
  }
  std::set<std::string> aliases;
  for (const auto& [alias, source] : module->tiedWeights())
    aliases.insert("model/" + alias);
  const std::vector<std::string> parts = entryMismatches(expected, held, aliases);
  if (!parts.empty())
    throw HostileCheckpointError(
        path + ": its /meta config describes a " + config.model.kind +
            " model other than the one its tensors hold: " + str::join(parts, "; ") +
            "; the config was edited or belongs to another checkpoint (not written by megabatch, "
            "or rewritten)",
        "use the checkpoint as megabatch wrote it; `megabatch inspect` on it shows its config "
        "and tensors");
  return true;
}

ExpectedTensors expectedTensors(model::Model& module) {
  ExpectedTensors expected;
  expected.source = "the " + module.kind() + " model the checkpoint's config describes";
  for (const auto& [name, tensor] : model::stateDict(module))
    expected.tensors["model/" + name] = {
        std::vector<std::int64_t>(tensor.sizes().begin(), tensor.sizes().end()),
        storedTypeName(tensor.scalar_type())};
  return expected;
}

namespace {

void loadTrainedModelFile(TrainedModel& run, const std::vector<std::string>& overrides) {
  // The model first, from /meta alone: its parameters and buffers are what the tensors must be
  // (Note [Checkpoints are untrusted input]), checked before one is read.
  CheckpointContent header = readCheckpointHeader(run.path);
  run.config = parseConfig(header.configYaml, run.path + " (/meta config)", overrides);
  data::DataInfo info = data::modelSpecFromYaml(header.dataInfoYaml);
  MemoryPhase phase("building the model from the checkpoint");
  run.model = buildModelWithinFile(run.config, info, run.path);
  ExpectedTensors expected = expectedTensors(*run.model);
  run.checkpoint = readCheckpointFile(run.path, &expected);
  loadModelState(*run.model, run.checkpoint.model, run.path);
  if (auto* lanes = model::capability<model::StatefulLanes>(*run.model))
    lanes->loadExtraState(run.checkpoint.extra);
  run.model->eval();
}

}  // namespace

void readNewestCheckpoint(const std::string& fileOrRunDir,
                          const std::function<void(const std::string&)>& read) {
  // Note [One writer per run directory]: readers take no lock. A trainer replaces `latest` by
  // rename, but its run.keep_last may remove the file `latest` named between this reader
  // following the pointer and opening the file: then the pointer names a newer one.
  constexpr int kTries = 5;
  for (int attempt = 1;; ++attempt) {
    const std::string path = resolveCheckpointPath(fileOrRunDir);
    try {
      read(path);
      return;
    } catch (const std::exception&) {
      // Any error, not only ours: std::filesystem's own (file_size of the vanished file) too.
      if (path == fileOrRunDir || fs::exists(path) || attempt == kTries) throw;
      log::get("ckpt").info(
          "{} was removed while it was read (a newer checkpoint replaced it): "
          "reading {} again",
          path, fileOrRunDir);
    }
  }
}

TrainedModel loadTrainedModel(const std::string& fileOrRunDir,
                              const std::vector<std::string>& overrides) {
  TrainedModel run;
  readNewestCheckpoint(fileOrRunDir, [&](const std::string& path) {
    TrainedModel fresh;  // a retry starts from nothing
    fresh.path = path;
    loadTrainedModelFile(fresh, overrides);
    run = std::move(fresh);
  });
  return run;
}

}  // namespace mb::train
