#include "train/Schedule.h"

namespace mb::train {

namespace {

bool settleEveryStep(HostSync hostSync, bool onGpu) {
  switch (hostSync) {
    case HostSync::kStep:
      return true;
    case HostSync::kLog:
      return false;
    case HostSync::kAuto:
      break;
  }
  return !onGpu;  // no device to wait for on the CPU
}

}  // namespace

Schedule::Schedule(const Config& config, std::int64_t batchesPerEpoch, std::int64_t startStep,
                   bool onGpu)
    : batchesPerEpoch_(batchesPerEpoch),
      totalSteps_(config.train.maxSteps > 0 ? config.train.maxSteps
                                            : config.train.epochs * batchesPerEpoch),
      logEvery_(config.run.logEvery),
      evalEvery_(config.train.evalEvery),
      checkpointEvery_(config.run.checkpointEvery),
      maxBadSteps_(config.train.maxBadSteps),
      lastCheckpointStep_(startStep),
      settleEveryStep_(settleEveryStep(config.train.hostSync, onGpu)) {}

Schedule::AfterStep Schedule::afterStep(const TrainerState& state) const {
  AfterStep after;
  after.epochEnded = state.batchInEpoch == batchesPerEpoch_;
  after.last = state.step == totalSteps_;
  after.log = (logEvery_ > 0 && state.step % logEvery_ == 0) || after.last || after.epochEnded;
  after.evaluate =
      (evalEvery_ > 0 && state.step % evalEvery_ == 0) || after.epochEnded || after.last;
  // Without run.checkpoint_every, a checkpoint ends every epoch; the last step always has one.
  after.checkpoint =
      (checkpointEvery_ > 0 ? state.step % checkpointEvery_ == 0 : after.epochEnded) || after.last;
  return after;
}

}  // namespace mb::train
