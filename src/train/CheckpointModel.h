#pragma once
// Using a trained checkpoint: find it, read its config, rebuild and load its model. Shared by
// `megabatch eval`, `predict`, and `sample`, and by the trainer's resume.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "config/Config.h"
#include "train/checkpoints/Checkpoint.h"

namespace mb::model {
class Model;
}
namespace mb::data {
struct DataInfo;
}

namespace mb::train {

// A checkpoint file as given, or a run directory: its checkpoints/best.h5 when present, else
// the file checkpoints/latest names. Throws CheckpointError when there is none.
std::string resolveCheckpointPath(const std::string& fileOrRunDir);

// Copies checkpoint tensors into the model by state_dict name; every name must match both
// ways (tied aliases such as lm_head.weight may be absent). Throws CheckpointError naming the
// file and up to `namesShown` entries of each kind of mismatch, with `hint` (empty: the
// default); nothing is copied unless every entry matches.
void loadModelState(model::Model& module, const NamedTensors& saved, const std::string& file,
                    std::size_t namesShown = 6, const std::string& hint = {});

// Builds the model `config` describes, as a checkpoint at `path` would hold it, refusing (exit 4,
// HostileCheckpointError) one that needs more memory than the file's tensors could fill (Note
// [A checkpoint's config describes its tensors]).
std::shared_ptr<model::Model> buildModelWithinFile(const Config& config, const data::DataInfo& info,
                                                   const std::string& path);

// Refuses (exit 4, HostileCheckpointError) a checkpoint whose /meta config describes a model
// other than its tensors: shapes, names, or one too large to build within the file's bound.
// inspect and resume call it; eval, predict, export and sample check the same while loading.
// False for a TorchScript model, not checked: its shapes come from the archive, not the config.
bool checkConfigDescribesTensors(const std::string& path);

struct TrainedModel {
  std::string path;
  CheckpointContent checkpoint;
  Config config;  // the run's resolved config, with the caller's overrides applied
  std::shared_ptr<model::Model> model;
};

// Reads the checkpoint, parses its config (plus `overrides`), rebuilds the model from the
// checkpoint's data description, and loads the weights. The model is on the CPU in eval mode.
TrainedModel loadTrainedModel(const std::string& fileOrRunDir,
                              const std::vector<std::string>& overrides);

// Calls `read` with the checkpoint `fileOrRunDir` names (resolveCheckpointPath). Where that came
// from a run directory or a `latest` pointer and a trainer removed the file before `read` was
// done with it, follows the pointer again (a few times) instead of failing.
void readNewestCheckpoint(const std::string& fileOrRunDir,
                          const std::function<void(const std::string&)>& read);

}  // namespace mb::train
