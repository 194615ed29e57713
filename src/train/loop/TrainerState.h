#pragma once
// Note [Trainer state table]
// TrainerState is where training stands: enough to continue exactly where it stopped. It is
// described once, by trainerStateFields(): each field's name in a checkpoint's /trainer group
// and its member. The checkpoint writer and reader, and the broadcast that tells every rank
// where a resumed run stands, walk that table, so a new field is one struct line and one table
// line. tests/unit/TrainerStateTest.cpp fails when a field of the struct is missing from the
// table (it checks that the table's members cover every byte of the struct), and round-trips
// every field through a file and through the broadcast packing.
#include <cmath>
#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

namespace mb::train {

struct TrainerState {
  std::int64_t step = 0;          // optimizer steps done
  std::int64_t epoch = 0;         // current epoch
  std::int64_t batchInEpoch = 0;  // next global batch of `epoch` to run
  std::int64_t samplesSeen = 0;
  std::int64_t canonicalShards = 0;  // V
  std::int64_t seed = 0;
  std::int64_t globalBatch = 0;
  std::int64_t badSteps = 0;         // consecutive non-finite steps
  double bestMetric = std::nan("");  // early stopping
  std::int64_t bestStep = -1;
  std::int64_t evalsWithoutImprovement = 0;
  // fp16 loss scaling (Note [Loss scaling]): the scale and the clean steps since it last
  // changed, as a checkpoint records them; while training, the LossScaler owns them (snapshot()
  // copies them here, and a resumed run hands them to the scaler). 0 = none recorded (an fp32
  // or bf16 run, or a checkpoint written before fp16).
  double lossScale = 0;
  std::int64_t lossScaleGrowthTracker = 0;
  // Note [Checkpoint before evaluation]: the step whose evaluation comes after this checkpoint;
  // -1 when none (or a checkpoint written before the order changed).
  std::int64_t evalPendingStep = -1;
  // Note [Stop lead time] (Signals.h): what a stop costs here, as last measured: one
  // micro-batch (data, forward, backward) and one checkpoint write, in seconds; 0 = not yet.
  double microBatchSeconds = 0;
  double checkpointWriteSeconds = 0;
  // Note [CPU auto precision] (train/precision/CpuAutoPrecision.h): the dtype the run trained
  // in (precisionCode: 1 fp32, 2 bf16, 3 fp16; 0 = not recorded, a checkpoint written before),
  // and, where train.precision = auto chose it on a CPU, that CPU (cpuIdentity) and the trial
  // step's bf16/fp32 time ratio it chose from (0 = no trial ran), and the probe's (-1: the CPU
  // has no bf16 units, so nothing was measured; 0 = not recorded): a resume repeats them.
  std::int64_t trainedPrecision = 0;
  std::int64_t autoPrecisionCpu = 0;
  double autoPrecisionTrialRatio = 0;
  double autoPrecisionProbeRatio = 0;
};

struct TrainerStateField {
  const char* name;  // the attribute in a checkpoint's /trainer group
  std::int64_t TrainerState::*integer = nullptr;
  double TrainerState::*real = nullptr;  // exactly one of the two is set
  // Checkpoints written before this field existed (fp16, the evaluation's order) lack it:
  // reading keeps the default.
  bool mayBeMissing = false;
};

// Every field of TrainerState, in the order of the checkpoint's attributes.
const std::vector<TrainerStateField>& trainerStateFields();

// The state as one int64 tensor (doubles bit for bit), in table order: what rank 0 broadcasts.
at::Tensor packTrainerState(const TrainerState& state);
TrainerState unpackTrainerState(const at::Tensor& packed);

}  // namespace mb::train
