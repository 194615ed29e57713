#pragma once
// Checkpoints (DESIGN.md "Checkpoints", docs/checkpoint-format.md). Rank 0 writes one HDF5
// file per checkpoint; any world size can resume it.
//
// File layout:
//   /model/<state_dict name>              parameters and buffers, float32, Fletcher32
//   /optimizer/<param name>/<state name>  exp_avg, exp_avg_sq, or momentum_buffer
//   /extra/<name>                         model state that is not a parameter (LSTM lanes)
//   /log_window/steps, loss_sums          the log window a stop interrupted (Note [Log windows
//                                         across a resume] in train/watch/LogWindow.h); absent
//                                         in older files and in best.h5
//   /trainer (attributes)                 TrainerState, as trainerStateFields() names it
//                                         (Note [Trainer state table]): step, epoch, ...;
//                                         loss_scale and loss_scale_growth_tracker are absent
//                                         before fp16 (read as 0 = none)
//   /meta (attributes)                    format_version, config (YAML), world_size,
//                                         megabatch_version, torch_version, data_fingerprint,
//                                         data_info (the model-shaping part of the data),
//                                         saved_at, optimizer, optimizer_steps, lr; and where
//                                         set: data_identity, data_changes, init_from,
//                                         train_target_mean (float64 [K]: the train split's
//                                         mean target per term, regression), train_class_counts
//                                         (int64 [C], classification) (absent in older files,
//                                         and where the train split was streamed: read as empty)
// The file uses HDF5's newest format, whose metadata carries checksums; datasets carry
// Fletcher32. Loading reads every dataset, so a flipped bit or a truncated file is detected.
// Files are written by Note [Atomic checkpoint writes] (DurableFile.h).
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "train/loop/TrainerState.h"

namespace mb::train {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

constexpr std::int64_t kCheckpointFormatVersion = 1;

struct CheckpointContent {
  TrainerState trainer;
  NamedTensors model;      // state_dict: parameters and buffers
  NamedTensors optimizer;  // "<param>/<state>"
  std::int64_t optimizerSteps = 0;
  std::string optimizerKind;
  NamedTensors extra;
  NamedTensors logWindow;  // empty: none (an older file, best.h5)
  std::string configYaml;
  std::string dataFingerprint;
  std::string dataInfoYaml;  // data::modelSpecToYaml: rebuilds the model without the data
  // Note [Data continuity] (data/pipeline/DataIdentity.h): what the run trained on; and the
  // changes of the data a resume accepted (run.allow_data_change), one YAML record per line.
  std::string dataIdentityYaml;
  std::string dataChanges;
  // Note [Warm starts] (train/WarmStart.h): the checkpoint whose weights the run started from.
  std::string initFromYaml;
  // Note [The train mean of an evaluation] (train/judge/Forecasts.h): the train split's mean
  // target per term [K] (regression) and labels per class [C] (classification), over every
  // rank's part; empty: unknown.
  std::vector<double> trainTargetMean;
  std::vector<std::int64_t> trainClassCounts;
  double lr = 0;
  std::int64_t worldSize = 1;
  // Filled when reading.
  std::int64_t formatVersion = kCheckpointFormatVersion;
  std::string megabatchVersion;
  std::string torchVersion;
  std::string savedAt;
};

// Writes `content` to `path` atomically (Note [Atomic checkpoint writes]). On failure (disk
// full, permissions) removes the temporary file and throws CheckpointError.
void writeCheckpointFile(const std::string& path, const CheckpointContent& content);
// Reads and verifies a whole checkpoint. Throws CheckpointError naming the file and what is wrong.
CheckpointContent readCheckpointFile(const std::string& path);
// True if `path` is an HDF5 file that looks like a checkpoint (has /meta and /model).
bool isCheckpointFile(const std::string& path);
// Human-readable description for `megabatch inspect`.
std::string describeCheckpoint(const std::string& path);

}  // namespace mb::train
