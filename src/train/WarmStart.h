#pragma once
// Note [Warm starts]
// train.init_from starts a new run from a trained model's weights (nanoGPT's init_from,
// torchtitan's model-only initial checkpoint, Marian's --pretrained-model): the retraining of
// walk-forward work, where this week's run starts from last week's model. It names a checkpoint
// file or a run directory (its best.h5 where it has one, else the checkpoint `latest` names:
// the model `megabatch eval` reports on). Only the model's tensors are taken, every name and
// shape checked against the model this config builds (a mismatch is exit 4 listing every
// difference; nothing is loaded in part). The optimizer, the schedule and the step count start
// afresh, and the data order is this run's (its seed, its splits). train.init_from_optimizer
// also keeps the optimizer's moments (and its step count, so Adam's bias correction goes on),
// for fine-tuning at a low learning rate.
//
// The origin (the file, its step, a checksum of its bytes, and the data fingerprint it trained
// on) goes into every checkpoint of the new run (/meta init_from) and its metrics.jsonl (an
// "init_from" record); `megabatch inspect` shows it. A run directory that already holds
// checkpoints resumes as any run does, and init_from is then ignored with one line saying so: a
// requeued job never starts again from the old weights.
#include <cstdint>
#include <optional>
#include <string>

#include "config/Config.h"
#include "train/checkpoints/Checkpoint.h"

namespace mb::train {

class JsonRecord;

struct WarmStart {
  std::string path;  // the checkpoint file read
  CheckpointContent content;
  std::string originYaml;  // /meta init_from of the new run's checkpoints
};

// Reads the checkpoint `train.initFrom` names (rank 0), checking that its config describes its
// tensors (Note [A checkpoint's config describes its tensors]). CheckpointError (exit 4) when
// there is none or it does not load.
WarmStart readWarmStart(const TrainConfig& train);

// "runs/w1/checkpoints/best.h5 (step 600, fnv1a64 0123..., optimizer moments kept), trained
// on data <fingerprint>": one line for logs and `megabatch inspect`; "" for "".
std::string describeOrigin(const std::string& originYaml);

// Adds the origin's fields to a metrics.jsonl record ("init_from_path", "init_from_step", ...).
void addOriginFields(JsonRecord& record, const std::string& originYaml);

}  // namespace mb::train
