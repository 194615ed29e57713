// The step loop: Trainer::run() from start to end, one training step, and the checks between
// steps. The run's start is in TrainerStart.cpp; logging, evaluation and checkpoints in
// TrainerBetweenSteps.cpp; when each happens in Schedule.h.
#include "train/Trainer.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <limits>

#include <ATen/Functions.h>

#include "common/Error.h"
#include "common/Log.h"
#include "common/OutOfMemory.h"
#include "common/Strings.h"
#include "common/WorkProgress.h"
#include "config/ConfigLoader.h"
#include "config/ConfigSchema.h"
#include "data/ShardedData.h"
#include "dist/FaultInjection.h"
#include "dist/GradientReducer.h"
#include "dist/Runtime.h"
#include "dist/Watchdog.h"
#include "model/Model.h"
#include "train/Signals.h"
#include "train/WarmStart.h"
#include "train/checkpoints/CheckpointDirectory.h"
#include "train/checkpoints/DurableFile.h"
#include "train/checkpoints/RunLock.h"
#include "train/loop/CarriedStates.h"
#include "train/loop/Optimizer.h"
#include "train/loop/Schedule.h"
#include "train/loop/StartedOrder.h"
#include "train/memory/StepRedo.h"
#include "train/precision/LossScaler.h"
#include "train/precision/Precision.h"
#include "train/watch/Metrics.h"
#include "train/watch/PaceWatch.h"
#include "train/watch/RestartRecord.h"
#include "train/watch/StepChecks.h"
#include "train/watch/StepPhases.h"
#include "train/watch/StepProfiler.h"
#include "train/watch/TensorBoard.h"
#include "train/watch/TrainLog.h"

namespace mb::train {
namespace fs = std::filesystem;
namespace {

// Adds the wall time of its scope to `seconds`: work between steps, kept out of the step time
// (Note [Step phases]).
class BetweenStepsTimer {
 public:
  explicit BetweenStepsTimer(double& seconds) : seconds_(seconds) {}
  ~BetweenStepsTimer() {
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  BetweenStepsTimer(const BetweenStepsTimer&) = delete;
  BetweenStepsTimer& operator=(const BetweenStepsTimer&) = delete;

 private:
  double& seconds_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace

Trainer::Trainer(Config config, dist::Runtime& runtime, const ProfileRequest& profile)
    : config_(std::move(config)),
      runtime_(runtime),
      profiler_(std::make_unique<StepProfiler>(runtime.rank(), profile)) {}

Trainer::~Trainer() = default;

bool Trainer::isRoot() const {
  return runtime_.rank() == 0;
}

dist::Communicator& Trainer::control() const {
  return runtime_.control();
}

std::int64_t Trainer::microBatch() const {
  if (config_.train.microBatch > 0) return config_.train.microBatch;
  if (config_.train.autoMicroBatch > 0) return config_.train.autoMicroBatch;
  return (config_.train.globalBatch + runtime_.size() - 1) / runtime_.size();
}

double Trainer::nextStepLr() const {
  return learningRate(config_.optim, state_.step, schedule_->totalSteps());
}

double Trainer::lastStepLr() const {
  return learningRate(config_.optim, state_.step - 1, schedule_->totalSteps());
}

// --- the loop ----------------------------------------------------------------------

namespace {

RunOutcome outcomeOf(Trainer::AfterEval after) {
  switch (after) {
    case Trainer::AfterEval::kStopEarly:
      return RunOutcome::kEarlyStopped;
    case Trainer::AfterEval::kStopRequested:
      return RunOutcome::kPreempted;
    case Trainer::AfterEval::kGoOn:
      break;
  }
  return RunOutcome::kFinished;
}

}  // namespace

RunOutcome Trainer::run() {
  installStopSignalHandlers();   // again: MPI initialisation may have replaced them
  shareStopRequestsWithPeers();  // Note [Stopping within seconds]
  const std::int64_t rssAtStart = processMemoryBytes();  // before data, model and optimizer
  // dist.timeout_s bounds every collective from here on (the watchdog's own default is 300 s).
  dist::Watchdog::instance().setTimeout(config_.dist.timeoutS);
  lockRunDirectory();  // before anything reads or writes run.dir
  setUpDevice();
  prepareRunDirectory();
  warnIfCpuPrecisionIsSlow();  // after the run directory: the warning belongs in train.log
  std::optional<CheckpointContent> resumed = findResumePoint();
  keepStartedOrder(config_, state_, resumed, control());
  findWarmStart(resumed.has_value());

  data_ = data::ShardedData::load(config_, control(), device_, data::Identity::kRecord);
  checkDataContinuity(resumed);
  buildModelAndOptimizer();
  carried_ = std::make_unique<CarriedStates>(*model_, *data_, *dataComm_);
  applyWarmStart();
  restoreFrom(resumed);
  settlePrecision();  // Note [CPU auto precision]
  stopLead_.check(state_.microBatchSeconds, state_.checkpointWriteSeconds);  // a requeued run

  const std::int64_t perEpoch = data_->batchesPerEpoch();
  schedule_ = std::make_unique<Schedule>(config_, perEpoch, state_.step, device_.is_cuda());
  if (isRoot()) {
    const std::string resolved = configToYaml(config_);
    writeFileAtomically((fs::path(config_.run.dir) / "config.yaml").string(), resolved);
    metrics_ = std::make_unique<MetricsWriter>(
        (fs::path(config_.run.dir) / "metrics.jsonl").string(), state_.step);
    if (config_.run.tensorboard)  // Note [TensorBoard event files]
      metrics_->alsoWriteTo(std::make_unique<TensorBoardWriter>(
          (fs::path(config_.run.dir) / "tensorboard").string(), state_.step, resolved));
    recordWarmStart();   // Note [Warm starts]
    recordDataChange();  // Note [Data continuity]
  }
  trainLog().info(
      "training {} steps ({} per epoch) from step {}: global batch {}, micro batch {} per rank, "
      "{} ranks, precision {}",
      schedule_->totalSteps(), perEpoch, state_.step, config_.train.globalBatch,
      config_.train.microBatch == kAutoMicroBatch ? "auto" : std::to_string(microBatch()),
      runtime_.size(), toString(precision_));
  carried_->describe();
  if (config_.train.memoryPlan) planMemory(rssAtStart);

  progress_ = std::make_unique<ProgressBar>(config_.run.progress, isRoot());
  window_.startClock();  // the time before the step loop is not a step's
  bool epochStarted = false;
  std::optional<RestartInfo> restart = isRoot() ? restartFromEnvironment() : std::nullopt;
  const std::int64_t startStep = state_.step;
  RunOutcome outcome = RunOutcome::kFinished;
  if (state_.step > 0 && state_.evalPendingStep == state_.step) {
    // Note [Checkpoint before evaluation]
    trainLog().info(
        "step {}'s checkpoint was written before its evaluation, which this run did not record: "
        "evaluating it now",
        state_.step);
    outcome = outcomeOf(evaluateAndRecord());
  }
  while (outcome == RunOutcome::kFinished && !schedule_->finished(state_)) {
    if (!epochStarted) {
      data_->beginEpoch(state_.epoch);
      model::startEpoch(*model_, state_.epoch);
      epochStarted = true;
      pace_->epochStarted();
    }
    carried_->beforeBatch(state_.batchInEpoch);
    StepResult step;
    {
      // Work, not a wait: the watchdog ends this rank only when no rank makes progress in it
      // (a hung kernel, a deadlocked loader), never for being slow (Note [Watchdog heartbeat]).
      const std::string stepName = "training step " + std::to_string(state_.step + 1);
      dist::Watchdog::Scope guard =
          dist::Watchdog::instance().track(stepName, dist::Watchdog::Kind::kWork);
      MemoryPhase phase(stepName);  // Note [Out of memory is an expected error]
      const BetweenStepsTimer stepTime(summary_.stepSeconds);
      profiler_->beforeStep(state_.step + 1);
      step = trainStep();
      profiler_->afterStep(state_.step + 1);
    }
    if (step.dropped) {  // Note [Stopping within seconds]: the state is the step's start
      outcome = RunOutcome::kPreempted;
      break;
    }
    ++state_.step;
    ++state_.batchInEpoch;
    state_.samplesSeen += data_->globalCount(state_.batchInEpoch - 1);
    checks_->add(state_.step, step.check);
    if (schedule_->settleChecksEveryStep()) checks_->settle(state_);
    // MEGABATCH_FAULT_STOP_STEP (FaultInjection.h): a SIGTERM once this step has finished.
    if (dist::trainingFaults().stopAfter(state_.step)) requestStop(SIGTERM);

    const Schedule::AfterStep after = schedule_->afterStep(state_);  // Note [Training schedule]
    logStep(step, after.log);
    progress_->update(state_.step, schedule_->totalSteps(), step.samples, lastStepLr());
    // MEGABATCH_FAULT_DIE_STEP (FaultInjection.h): a dead rank, once the step is logged.
    if (dist::trainingFaults().dieAfter(state_.step, runtime_.rank())) std::raise(SIGKILL);
    if (restart) {  // Note [Restart records]: after the first step of a restarted run
      JsonRecord record;
      trainLog().warn("{}",
                      describeRestart(*restart, startStep, runtime_.size(), unixSeconds(), record));
      if (metrics_) metrics_->write(record);
      restart.reset();
    }
    if (after.epochEnded) {
      pace_->epochEnded(state_.epoch);
      logModelStatistics();
      ++state_.epoch;
      state_.batchInEpoch = 0;
      epochStarted = false;
    }
    if (schedule_->tooManyBadSteps(state_)) {
      outcome = RunOutcome::kTooManyBadSteps;
      break;
    }
    // Note [Checkpoint before evaluation]; a stop agreed in the step leaves its evaluation to
    // the resumed run.
    if (after.evaluate) state_.evalPendingStep = state_.step;
    if (after.checkpoint || step.checkpointDue) {
      const BetweenStepsTimer timer(window_.checkpointSeconds);
      const BetweenStepsTimer total(summary_.checkpointSeconds);
      saveCheckpoint(after.last         ? "end of training"
                     : after.checkpoint ? "scheduled"
                                        : "run.checkpoint_every_s");
    }
    if (step.stopSignal != 0) {
      trainLog().warn(
          "{} received: stopping at step {} after a checkpoint; run the same command again to "
          "resume",
          signalName(step.stopSignal), state_.step);
      outcome = RunOutcome::kPreempted;
      break;
    }
    if (after.evaluate) {
      const BetweenStepsTimer timer(window_.evalSeconds);
      const BetweenStepsTimer total(summary_.evalSeconds);
      outcome = outcomeOf(evaluateAndRecord());
    }
  }
  progress_->finish();
  if (runLock_) runLock_->markFinishing();
  checks_->settle(state_);
  const bool collapsed = outcome == RunOutcome::kTooManyBadSteps && scaler_->enabled();
  // A resume must not start from the collapsed scale: the checkpoint keeps the last good
  // parameters and train.loss_scale.init.
  const double collapsedScale = collapsed ? scaler_->scale() : 0.0;
  if (collapsed) scaler_->restore(0.0, 0);
  if (schedule_->needsFinalCheckpoint(state_)) {
    const BetweenStepsTimer total(summary_.checkpointSeconds);
    saveCheckpoint("stop");
  }
  summary_.step = state_.step;
  summary_.stepsRun = state_.step - startStep;
  summary_.trainSplit = data::describeSplit(data_->info(), data::Split::kTrain);
  summary_.valSplit = data::describeSplit(data_->info(), data::Split::kVal);
  if (collapsed)
    trainLog().error(
        "stopping: the fp16 loss scale collapsed to {:g}: the last {} steps overflowed at a scale "
        "under train.loss_scale.min = {:g} (train.max_bad_steps = {}), so the gradients are not "
        "finite at any scale. Updates were skipped: checkpoints/latest holds the last good "
        "parameters (its loss scale restarts at train.loss_scale.init). Check the data for "
        "extreme values, lower optim.lr, or train with train.precision=bf16 (GPUs with BF16) or "
        "fp32",
        collapsedScale, state_.badSteps, config_.train.lossScale.min, config_.train.maxBadSteps);
  else if (outcome == RunOutcome::kTooManyBadSteps)
    trainLog().error(
        "stopping: {} consecutive steps had a non-finite loss or gradient (train.max_bad_steps = "
        "{}); "
        "updates were skipped, so checkpoints/latest holds the last good parameters. Lower "
        "optim.lr, "
        "raise train.grad_clip, or check the data for extreme values",
        state_.badSteps, config_.train.maxBadSteps);
  return outcome;
}

Trainer::StepResult Trainer::trainStep() {
  const std::int64_t batch = state_.batchInEpoch;
  // Note: the loss is divided by the GLOBAL count, so summed gradients are the global mean.
  const double normalizer = static_cast<double>(data_->globalCount(batch)) *
                            static_cast<double>(model_->termsPerSample());
  StepResult result;
  result.samples = data_->globalCount(batch);
  at::Tensor lossSum;
  // Note [A step that runs out of memory is redone]
  const StepRedo redo(config_.train.autoMicroBatch > 0, device_);
  carried_->keepStepStart();
  for (;;) {
    const MicroBatches mine = accumulateGradients(normalizer, redo, lossSum);
    const StepVote vote =
        voteAfterGradients(control(), mine.leftEarly, mine.ranOut ? runtime_.rank() : -1,
                           isRoot() && schedule_->checkpointTimeDue());
    phases_->mark(Phase::kCommunication);  // Note [Step phases]: the vote waits for the ranks
    result.stopSignal = vote.stopSignal;
    result.checkpointDue = vote.checkpointDue;
    if (vote.stopSignal != 0 && (vote.incomplete || vote.rankThatRanOut >= 0)) {
      dropStep(mine, vote.stopSignal);  // Note [Stopping within seconds]
      result.dropped = true;
      return result;
    }
    if (vote.rankThatRanOut < 0) break;
    optimizer_->zeroGrad();
    carried_->backToStepStart();
    redo.rewind();
    halveMicroBatchAfterOutOfMemory(vote.rankThatRanOut);
  }
  // Gradients are identical on every rank now, so every rank takes the same decision.
  std::vector<at::Tensor> grads;
  for (const auto& p : model_->parameters()) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  at::NoGradGuard noGrad;
  // fp16: true gradients from here on (the norm, the clip); found_inf decides the skip.
  const at::Tensor foundInf = scaler_->unscale(grads);
  const at::Tensor scaleUsed =
      scaler_->enabled() ? scaler_->scaleTensor().to(at::kDouble) : at::Tensor();
  const double clip = config_.train.gradClip;
  if (schedule_->settleChecksEveryStep()) {
    // On the CPU the norm, the clip and the update are a pass each over the parameters
    // (Note [Fused CPU update]).
    const double norm = optimizer_->gradNorm();
    const bool overflow = foundInf.defined() && foundInf.item<float>() > 0;
    if (std::isfinite(norm) && !overflow)
      optimizer_->step(nextStepLr(), clip > 0 && norm > clip ? clip / (norm + 1e-6) : 1.0);
    // On the host: settling reads no device.
    result.check =
        foundInf.defined()
            ? at::tensor({norm, overflow ? 1.0 : 0.0, scaleUsed.item<double>()}, at::kDouble)
            : at::full({1}, norm, at::kDouble);
  } else {
    at::Tensor gradNorm = at::stack(at::_foreach_norm(grads)).to(at::kDouble).norm();
    if (clip > 0) {
      at::Tensor scale =
          at::where(gradNorm > clip, clip / (gradNorm + 1e-6), at::ones_like(gradNorm));
      for (auto& grad : grads)
        grad.mul_(scale);
    }
    for (auto& grad : grads)
      grad.nan_to_num_(0.0, 0.0, 0.0);  // a masked step still needs finite inputs
    at::Tensor apply = at::isfinite(gradNorm);
    if (foundInf.defined()) apply = apply.logical_and(foundInf == 0);
    optimizer_->step(nextStepLr(), apply.to(at::kDouble));
    result.check = foundInf.defined() ? at::stack({gradNorm, foundInf.to(at::kDouble), scaleUsed})
                                      : gradNorm.reshape({1});
  }
  scaler_->update(foundInf);
  optimizer_->zeroGrad();
  phases_->mark(Phase::kOptimizer);
  result.loss = lossSum / normalizer;
  return result;
}

// This rank's micro-batches of the step: forward and backward of each, gradients accumulated,
// then reduced over the ranks (finishGradients). The loop ends early when this rank runs out of
// memory and `redo` catches it, or when a stop request is seen (Note [Stopping within seconds]);
// finishGradients still sends every bucket, so no rank is left waiting in a reduction.
Trainer::MicroBatches Trainer::accumulateGradients(double normalizer, const StepRedo& redo,
                                                   at::Tensor& lossSum) {
  const std::int64_t batch = state_.batchInEpoch;
  const std::int64_t local = data_->localCount(batch);
  const std::int64_t microSize = microBatch();
  MicroBatches mine;
  mine.total = (local + microSize - 1) / microSize;
  model_->train();
  lossSum = at::zeros({}, at::TensorOptions().device(device_).dtype(at::kFloat));
  phases_->start();
  if (mine.total == 0) reducer_->prepareForBackward(true);  // contribute zero gradients
  WorkProgress slowStep(slowStepProgress(state_.step + 1, mine.total));
  for (std::int64_t m = 0; m < mine.total && !mine.ranOut; ++m) {
    if (stopSeen() != 0) {
      mine.leftEarly = true;
      break;
    }
    const std::int64_t begin = m * microSize;
    const std::int64_t end = std::min(local, begin + microSize);
    try {
      reducer_->prepareForBackward(m == mine.total - 1);
      data::Batch micro = data_->trainBatch(batch, begin, end, at::kFloat);
      phases_->mark(Phase::kData);
      at::Tensor part;
      {
        // Names the forward for an out-of-memory message (and MEGABATCH_FAULT_OOM's tests).
        MemoryPhase forward(fmt::format("running the forward of micro-batch {}/{} in step {}",
                                        m + 1, mine.total, state_.step + 1));
        AutocastScope autocast(device_.type(), precision_);
        at::Tensor output = model_->forward(micro);
        part = model_->lossSum(output, micro).to(at::kFloat);
      }
      if (dist::trainingFaults().nanLossAt(state_.step + 1, runtime_.rank()))
        part = part * std::numeric_limits<float>::quiet_NaN();  // a test hook (FaultInjection.h)
      scaler_->scaleLoss(part / normalizer).backward();         // Note [Loss scaling]
      lossSum += part.detach();
    } catch (const std::exception& e) {
      const std::optional<OutOfMemory> oom = asOutOfMemory(e);
      if (!oom || !redo.catches(microSize)) throw;
      trainLog().warn("rank {} ran out of {} memory in {} (micro-batch {} of {}, size {}): {}",
                      runtime_.rank(), oom->device, takeFailedPhase(), m + 1, mine.total, microSize,
                      oom->requestedBytes < 0
                          ? std::string("the allocator did not say how much it was asked for")
                          : "an allocation of " +
                                str::humanBytes(static_cast<double>(oom->requestedBytes)) +
                                " failed");
      mine.ranOut = true;
    }
    dist::maybeSlowMicroBatch(runtime_.rank());
    phases_->mark(Phase::kForwardBackward);
    dist::Watchdog::instance().progress();
    mine.done = m + 1;
    slowStep.update(m + 1);
  }
  slowStep.finish();
  reducer_->finishGradients();
  phases_->mark(Phase::kCommunication);
  return mine;
}

// Every rank, after the step vote agreed on a stop that some rank's micro-batches did not wait
// for: nothing of the step is kept, so the checkpoint holds the state of its start.
void Trainer::dropStep(const MicroBatches& mine, int signal) {
  optimizer_->zeroGrad();
  carried_->backToStepStart();
  trainLog().warn(
      "{} received: stopping at step {} after a checkpoint; step {} was left after {} of its {} "
      "micro-batches on this rank and is dropped (the resumed run runs it again); run the same "
      "command again to resume",
      signalName(signal), state_.step, state_.step + 1, mine.done, mine.total);
}

// Every rank, after some rank ran out of memory in this step under train.micro_batch: auto.
void Trainer::halveMicroBatchAfterOutOfMemory(int rankThatRanOut) {
  const std::int64_t before = microBatch();
  config_.train.autoMicroBatch = std::max<std::int64_t>(1, before / 2);
  trainLog().warn(
      "rank {} ran out of memory in training step {} at micro batch {}: every rank runs the "
      "step again at micro batch {} (train.micro_batch: auto; train.global_batch stays {})",
      rankThatRanOut, state_.step + 1, before, microBatch(), config_.train.globalBatch);
  if (!metrics_) return;
  JsonRecord record;
  record.add("event", "oom_redo")
      .add("step", state_.step + 1)
      .add("rank", static_cast<std::int64_t>(rankThatRanOut))
      .add("micro_batch_before", before)
      .add("micro_batch", microBatch());
  metrics_->write(record);
}

// A step that runs longer than kSlowStepSeconds says so, with its micro-batches done so far,
// then writes a line every 30 s until it ends (Note [Work progress]): a slow first step on a
// CPU, or a large model on a slow card, is visibly alive. Shorter steps print nothing.
WorkProgress::Options Trainer::slowStepProgress(std::int64_t step, std::int64_t microSteps) const {
  WorkProgress::Options shown;
  shown.label = "training step " + std::to_string(step);
  shown.unit = "micro-batches";
  shown.total = microSteps;
  shown.speaks = isRoot();
  shown.mode = workProgressMode(config_.run.progress);
  shown.tag = "train";
  shown.quietSeconds = kSlowStepSeconds;
  shown.firstItemSeconds = 0;
  shown.estimateOverSeconds = std::numeric_limits<double>::infinity();
  shown.startLine = fmt::format("training step {} is still running after {}", step,
                                str::humanDuration(kSlowStepSeconds));
  shown.startLineShowsProgress = true;
  return shown;
}

}  // namespace mb::train
