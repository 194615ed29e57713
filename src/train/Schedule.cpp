#include "train/Schedule.h"

namespace mb::train {

Schedule::Schedule(const Config& config, std::int64_t batchesPerEpoch, std::int64_t startStep)
    : batchesPerEpoch_(batchesPerEpoch),
      totalSteps_(config.train.maxSteps > 0 ? config.train.maxSteps
                                            : config.train.epochs * batchesPerEpoch),
      evalEvery_(config.train.evalEvery),
      checkpointEvery_(config.run.checkpointEvery),
      maxBadSteps_(config.train.maxBadSteps),
      lastCheckpointStep_(startStep) {}

Schedule::AfterStep Schedule::afterStep(const TrainerState& state) const {
  AfterStep after;
  after.epochEnded = state.batchInEpoch == batchesPerEpoch_;
  after.last = state.step == totalSteps_;
  after.forceLog = after.last || after.epochEnded;
  after.evaluate =
      (evalEvery_ > 0 && state.step % evalEvery_ == 0) || after.epochEnded || after.last;
  // Without run.checkpoint_every, a checkpoint ends every epoch; the last step always has one.
  after.checkpoint =
      (checkpointEvery_ > 0 ? state.step % checkpointEvery_ == 0 : after.epochEnded) || after.last;
  return after;
}

}  // namespace mb::train
