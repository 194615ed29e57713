#pragma once
// Note [Training schedule]
// Every "when" of a training run is decided here, from the config and where training stands:
// how many steps the run has, and after each step whether the epoch ended, whether to force a
// log line, to evaluate, to checkpoint, or to stop for too many bad steps; after an
// evaluation, whether it is the best so far and whether to stop early; and whether the run
// still needs a final checkpoint. The step loop (Trainer::run) asks and acts; it decides
// nothing itself. Stop signals are the one "when" that needs the ranks to agree
// (Trainer::stopRequested, a collective), so the loop asks for them after every step.
#include <chrono>
#include <cstdint>
#include <map>
#include <string>

#include "config/Config.h"
#include "train/loop/TrainerState.h"

namespace mb::train {

class Schedule {
 public:
  // What to do once a step has finished (TrainerState already counts it).
  struct AfterStep {
    bool epochEnded = false;
    bool last = false;  // the run's final step
    bool log = false;   // a log line now: every run.log_every steps, at epoch ends, at the end
    bool evaluate = false;
    bool checkpoint = false;
  };

  // What an evaluation means for early stopping (train.early_stopping).
  struct AfterEvaluation {
    bool metricMissing = false;  // the rule's metric is not among the evaluation's
    bool newBest = false;        // keep best.h5
    bool stop = false;           // `patience` evaluations without improvement
  };

  // `batchesPerEpoch`: global batches in one epoch; `startStep`: the step the run resumes from
  // (0 for a new run), which counts as checkpointed; `onGpu`: the step runs on a GPU.
  Schedule(const Config& config, std::int64_t batchesPerEpoch, std::int64_t startStep, bool onGpu);

  std::int64_t totalSteps() const { return totalSteps_; }
  bool finished(const TrainerState& state) const { return state.step >= totalSteps_; }
  AfterStep afterStep(const TrainerState& state) const;
  // The host reads every step's check at once (train.host_sync; auto: on the CPU), else at log
  // steps, before checkpoints and at the end (Note [Step checks]).
  bool settleChecksEveryStep() const { return settleEveryStep_; }
  // Judges an evaluation's metrics and records in `state` the best value, its step, and the
  // evaluations since it.
  AfterEvaluation afterEvaluation(TrainerState& state,
                                  const std::map<std::string, double>& metrics) const;
  // train.max_bad_steps consecutive non-finite steps: asked once the step's checks are settled
  // (with train.host_sync = log, at log steps: Note [Step checks]).
  bool tooManyBadSteps(const TrainerState& state) const { return state.badSteps >= maxBadSteps_; }
  // run.checkpoint_every_s has passed since the last checkpoint (or the start). Asked on rank 0
  // only: its answer travels in the step vote, so every rank checkpoints at the same step
  // (Note [Checkpoints by time] in Schedule.cpp).
  bool checkpointTimeDue() const;
  // A checkpoint of `step` was written; a run that stops elsewhere writes one more.
  void checkpointed(std::int64_t step);
  bool needsFinalCheckpoint(const TrainerState& state) const {
    return state.step != lastCheckpointStep_;
  }

 private:
  std::int64_t batchesPerEpoch_;
  std::int64_t totalSteps_;
  std::int64_t logEvery_;
  std::int64_t evalEvery_;
  std::int64_t checkpointEvery_;
  double checkpointEverySeconds_;
  std::chrono::steady_clock::time_point lastCheckpointTime_;
  std::int64_t maxBadSteps_;
  EarlyStoppingConfig earlyStopping_;
  std::int64_t lastCheckpointStep_;
  bool settleEveryStep_;
};

}  // namespace mb::train
