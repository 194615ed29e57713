#include "train/loop/Schedule.h"

#include <cmath>

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
      checkpointEverySeconds_(config.run.checkpointEveryS),
      lastCheckpointTime_(std::chrono::steady_clock::now()),
      maxBadSteps_(config.train.maxBadSteps),
      earlyStopping_(config.train.earlyStopping),
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

// Note [Checkpoints by time]
// run.checkpoint_every_s bounds the work a failure loses in wall time (Lightning's
// train_time_interval), where steps of uneven length make run.checkpoint_every a poor bound.
// Clocks differ between ranks, and so do the moments each rank finishes a step, so a rank
// that asked its own clock could checkpoint a step its peers do not: the checkpoint's
// collectives would then meet a peer's next step vote. Rank 0 alone asks its clock, after its
// micro-batches, and its answer is one more entry of the step vote (voteAfterGradients in
// Signals.cpp), the all-reduce every step makes anyway; every rank then checkpoints at that
// step. The clock restarts at every checkpoint, whatever its reason, and at the run's start.
bool Schedule::checkpointTimeDue() const {
  if (checkpointEverySeconds_ <= 0) return false;
  const std::chrono::duration<double> since =
      std::chrono::steady_clock::now() - lastCheckpointTime_;
  return since.count() >= checkpointEverySeconds_;
}

void Schedule::checkpointed(std::int64_t step) {
  lastCheckpointStep_ = step;
  lastCheckpointTime_ = std::chrono::steady_clock::now();
}

Schedule::AfterEvaluation Schedule::afterEvaluation(
    TrainerState& state, const std::map<std::string, double>& metrics) const {
  AfterEvaluation after;
  auto it = metrics.find(earlyStopping_.metric);
  if (it == metrics.end()) {
    after.metricMissing = true;
    return after;
  }
  const double value = it->second;
  const bool minimise = earlyStopping_.mode == MetricMode::kMin;
  const bool improved = std::isnan(state.bestMetric) ||
                        (minimise ? value < state.bestMetric - earlyStopping_.minDelta
                                  : value > state.bestMetric + earlyStopping_.minDelta);
  if (improved && std::isfinite(value)) {
    state.bestMetric = value;
    state.bestStep = state.step;
    state.evalsWithoutImprovement = 0;
    after.newBest = true;
    return after;
  }
  ++state.evalsWithoutImprovement;
  after.stop =
      earlyStopping_.patience > 0 && state.evalsWithoutImprovement >= earlyStopping_.patience;
  return after;
}

}  // namespace mb::train
