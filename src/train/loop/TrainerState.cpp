#include "train/loop/TrainerState.h"

#include <cstring>

#include <ATen/Functions.h>

namespace mb::train {

const std::vector<TrainerStateField>& trainerStateFields() {
  using S = TrainerState;
  static const std::vector<TrainerStateField> fields = {
      {"step", &S::step},
      {"epoch", &S::epoch},
      {"batch_in_epoch", &S::batchInEpoch},
      {"samples_seen", &S::samplesSeen},
      {"canonical_shards", &S::canonicalShards},
      {"seed", &S::seed},
      {"global_batch", &S::globalBatch},
      {"bad_steps", &S::badSteps},
      {"best_step", &S::bestStep},
      {"evals_without_improvement", &S::evalsWithoutImprovement},
      {"best_metric", nullptr, &S::bestMetric},
      {"loss_scale", nullptr, &S::lossScale, /*mayBeMissing=*/true},
      {"loss_scale_growth_tracker", &S::lossScaleGrowthTracker, nullptr, /*mayBeMissing=*/true},
      {"eval_pending_step", &S::evalPendingStep, nullptr, /*mayBeMissing=*/true},
      {"micro_batch_seconds", nullptr, &S::microBatchSeconds, /*mayBeMissing=*/true},
      {"checkpoint_write_seconds", nullptr, &S::checkpointWriteSeconds, /*mayBeMissing=*/true},
      {"trained_precision", &S::trainedPrecision, nullptr, /*mayBeMissing=*/true},
      {"auto_precision_cpu", &S::autoPrecisionCpu, nullptr, /*mayBeMissing=*/true},
      {"auto_precision_trial_ratio", nullptr, &S::autoPrecisionTrialRatio, /*mayBeMissing=*/true},
      {"auto_precision_probe_ratio", nullptr, &S::autoPrecisionProbeRatio, /*mayBeMissing=*/true},
  };
  return fields;
}

at::Tensor packTrainerState(const TrainerState& state) {
  const auto& fields = trainerStateFields();
  at::Tensor packed = at::empty({static_cast<std::int64_t>(fields.size())}, at::kLong);
  auto* out = packed.data_ptr<std::int64_t>();
  for (const TrainerStateField& field : fields) {
    if (field.integer != nullptr) {
      *out++ = state.*field.integer;
    } else {
      std::memcpy(out++, &(state.*field.real), sizeof(double));
    }
  }
  return packed;
}

TrainerState unpackTrainerState(const at::Tensor& packed) {
  TrainerState state;
  const at::Tensor values = packed.to(at::kLong).contiguous();
  const auto* in = values.data_ptr<std::int64_t>();
  for (const TrainerStateField& field : trainerStateFields()) {
    if (field.integer != nullptr) {
      state.*field.integer = *in++;
    } else {
      std::memcpy(&(state.*field.real), in++, sizeof(double));
    }
  }
  return state;
}

}  // namespace mb::train
