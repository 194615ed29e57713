// What happens between steps: log lines and metrics records, evaluation and early stopping,
// checkpoints (with the states the model carries, CarriedStates.h). When: Schedule.h.
#include "train/Trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>

#include <ATen/Functions.h>
#include <torch/nn/module.h>

#include "common/Error.h"
#include "common/HostAllocator.h"
#include "common/Log.h"
#include "common/OutOfMemory.h"
#include "common/Strings.h"
#include "config/ConfigLoader.h"
#include "config/ConfigSchema.h"
#include "data/ShardedData.h"
#include "dist/Agreement.h"
#include "dist/GradientReducer.h"
#include "dist/Runtime.h"
#include "model/Model.h"
#include "model/StateDict.h"
#include "train/Evaluation.h"
#include "train/Signals.h"
#include "train/checkpoints/CheckpointDirectory.h"
#include "train/judge/Forecasts.h"
#include "train/loop/CarriedStates.h"
#include "train/loop/Optimizer.h"
#include "train/loop/Schedule.h"
#include "train/memory/EvalBatch.h"
#include "train/memory/MemoryPlan.h"
#include "train/memory/MicroBatchSearch.h"
#include "train/precision/LossScaler.h"
#include "train/watch/GpuUtilisation.h"
#include "train/watch/Metrics.h"
#include "train/watch/PaceWatch.h"
#include "train/watch/StepChecks.h"
#include "train/watch/StepPhases.h"
#include "train/watch/TrainLog.h"

namespace mb::train {
namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// " | besides: eval 12.1 s, checkpoint 0.31 s" when the window had work between its steps.
std::string betweenStepsPart(double evalSeconds, double checkpointSeconds) {
  std::string text;
  if (evalSeconds > 0) text += fmt::format("eval {:.3g} s", evalSeconds);
  if (checkpointSeconds > 0)
    text += fmt::format("{}checkpoint {:.3g} s", text.empty() ? "" : ", ", checkpointSeconds);
  return text.empty() ? text : " | besides: " + text;
}

}  // namespace

void Trainer::logStep(const StepResult& step, bool lineDue) {
  LogWindow& window = window_;
  window.add(step.loss, step.samples);
  if (!lineDue) return;  // Schedule: run.log_every, epoch ends, the end
  checks_->settle(state_);

  // One host sync and one small all-reduce per log line, never per step.
  at::Tensor loss = window.lossSum.to(at::kCPU, at::kDouble).reshape({1});
  phases_->start();  // Note [Step phases]: the wait for the other ranks is communication
  control().allReduce(loss, dist::ReduceOp::kSum, "metrics");
  phases_->mark(Phase::kCommunication);
  // Note [Log windows across a resume]: steps before a resume count in the loss.
  const double meanLoss = loss.item<double>() / static_cast<double>(window.lossSteps());
  // The steps' own time: the window's wall time less its evaluations and checkpoints, which
  // are reported beside it (Note [Step phases]).
  const double wall = secondsSince(window.start);
  const double elapsed = std::max(wall - window.evalSeconds - window.checkpointSeconds, 1e-9);
  const double samplesPerSecond = static_cast<double>(window.samples) / elapsed;
  const double stepSeconds = elapsed / static_cast<double>(window.steps);
  const PhaseSeconds phases = phases_->collect();  // Note [Step phases]
  const double other = std::max(elapsed - phases.total(), 0.0);
  const double steps = static_cast<double>(window.steps);
  // Note [Stop lead time]: this rank's micro-batches in the last step, and one's time.
  const std::int64_t microBatches = std::max<std::int64_t>(
      1, (data_->localCount(state_.batchInEpoch - 1) + microBatch() - 1) / microBatch());
  state_.microBatchSeconds =
      (phases.data + phases.forwardBackward) / steps / static_cast<double>(microBatches);
  const double dataShare = phases.data / elapsed;
  const double commShare = phases.communication / elapsed;
  const std::string split =
      fmt::format("data {:.0f}% fwd-bwd {:.0f}% comm {:.0f}% opt {:.0f}% other {:.0f}%",
                  100 * dataShare, 100 * phases.forwardBackward / elapsed, 100 * commShare,
                  100 * phases.optimizer / elapsed, 100 * other / elapsed);
  double utilisation = -1;  // Note [GPU utilisation]: rank 0 on CUDA; negative when none
  const std::string utilisationPart = pace_->gpuPart(split, utilisation);
  const double memoryMb = static_cast<double>(processMemoryBytes()) / (1 << 20);
  // The ETA is wall time: it counts the evaluations and checkpoints to come at this window's rate.
  const double remaining = static_cast<double>(schedule_->totalSteps() - state_.step) * wall /
                           static_cast<double>(window.steps);
  const bool tokens = data_->info().countsTokens;
  // fp16: the scale after this window's updates, and its overflow skips (Note [Loss scaling]).
  const double lossScale = scaler_->enabled() ? scaler_->scale() : 0.0;
  const std::string scalePart =
      scaler_->enabled()
          ? fmt::format(" | scale {:g}{}", lossScale,
                        checks_->skippedInWindow() > 0
                            ? fmt::format(" ({} skipped)", checks_->skippedInWindow())
                            : std::string())
          : std::string();
  const double tokensPerSecond =
      tokens ? samplesPerSecond * static_cast<double>(model_->termsPerSample()) : 0;
  if (metrics_) {
    JsonRecord record;
    record.add("event", "train")
        .add("step", state_.step)
        .add("epoch", state_.epoch)
        .add("split", "train");
    record.add("loss", meanLoss).add("lr", lastStepLr());
    record.add("samples_per_s", samplesPerSecond);
    if (tokens) record.add("tokens_per_s", tokensPerSecond);
    record.add("step_time_s", stepSeconds).add("micro_batches", microBatches);
    record.add("data_time_s", phases.data / steps);
    record.add("fwd_bwd_time_s", phases.forwardBackward / steps)
        .add("comm_time_s", phases.communication / steps)
        .add("optimizer_time_s", phases.optimizer / steps)
        .add("other_time_s", other / steps);
    record.add("between_steps_eval_s", window.evalSeconds)
        .add("between_steps_checkpoint_s", window.checkpointSeconds);
    record.add("mem_mb", memoryMb);
    // Since the memory plan (Note [Memory plan]): what a plan is compared with.
    record.add("mem_peak_mb", static_cast<double>(processMemoryPeakBytes()) / (1 << 20));
    if (device_.is_cuda())
      record.add("gpu_mem_peak_mb", static_cast<double>(devicePeakBytes(device_)) / (1 << 20));
    if (utilisation >= 0) record.add("gpu_util", utilisation);
    for (const auto& [name, value] : model::statistics(*model_))
      record.add(name, value);
    record.add("grad_norm", checks_->lastGradNorm())
        .add("skipped_steps", checks_->skippedInWindow());
    if (scaler_->enabled()) record.add("loss_scale", lossScale);
    record.addTime("time", unixSeconds());
    metrics_->write(record);
  }
  progress_->setLoss(meanLoss);
  progress_->noteStepLine();
  progress_->setNote(scalePart);
  const double percent =
      100.0 * static_cast<double>(state_.step) / static_cast<double>(schedule_->totalSteps());
  trainLog().info(
      "step {}/{} ({:.0f}%) | loss {:.5g}{} | lr {:.3g} | {:.0f} samples/s{} | step {:.1f} ms "
      "({}){}{} | eta {} | rss {}",
      state_.step, schedule_->totalSteps(), percent, meanLoss, scalePart, lastStepLr(),
      samplesPerSecond, tokens ? fmt::format(" | {:.0f} tokens/s", tokensPerSecond) : std::string(),
      1000.0 * stepSeconds, split, utilisationPart,
      betweenStepsPart(window.evalSeconds, window.checkpointSeconds), str::humanDuration(remaining),
      str::humanBytes(static_cast<double>(processMemoryBytes())));
  pace_->judgeWindow(dataShare, commShare, stepSeconds);
  window = LogWindow();
  checks_->startWindow();
}

void Trainer::logModelStatistics() const {
  std::vector<std::pair<std::string, double>> statistics = model::statistics(*model_);
  if (statistics.empty()) return;
  std::string text;
  for (const auto& [name, value] : statistics)
    text += fmt::format("{}{} {:g}", text.empty() ? "" : ", ", name, value);
  trainLog().info("epoch {} model: {}", state_.epoch, text);
}

std::map<std::string, double> Trainer::evaluate(data::Split split) {
  auto start = Clock::now();
  dist::averageBuffers(*dataComm_, *model_);  // Note [Buffers across ranks]
  releaseFreedHostMemory();                   // Note [Keeping freed host memory]
  EvalOptions options;
  // Note [Evaluation batch]: measured by the memory plan, else the limit.
  options.microBatch = evalBatch_ > 0 ? evalBatch_ : evalBatchLimit(microBatch(), device_);
  options.roomBytes = evalRoomBytes_;
  options.batchChosen = evalBatch_ > 0;
  options.batchLimit = evalBatchLimit(microBatch(), device_);
  fitEvalBatchToWhatIsHeld(options);
  options.precision = precision_;
  options.context = fmt::format(" at step {}", state_.step);
  options.progress = workProgressMode(config_.run.progress);
  if (config_.train.evalBatches > 0)
    options.maxSamplesPerRank =
        (config_.train.evalBatches * config_.train.globalBatch + runtime_.size() - 1) /
        runtime_.size();
  else
    options.boundSamples = config_.train.globalBatch;  // the estimate names train.eval_batches
  options.leaveOnStop = true;                          // Note [Stopping within seconds]
  options.task = config_.model.task;
  std::map<std::string, double> results =
      evaluateSplit(*model_, *data_, split, control(), device_, options);
  if (evalBatch_ > 0) evalBatch_ = options.microBatch;  // the next starts where this one ended
  releaseFreedHostMemory();
  if (options.abandoned) {
    const int signal = stopSeen();
    trainLog().warn(
        "{}: the evaluation of step {} was left after {:.1f} s and is not recorded; stopping at "
        "step {} after a checkpoint, and the resumed run evaluates step {} first; run the same "
        "command again to resume",
        signal != 0 ? std::string(signalName(signal)) + " received" : "a stop request", state_.step,
        secondsSince(start), state_.step, state_.step);
    return {};
  }
  const std::string prefix = std::string(data::toString(split)) + "_";
  const auto samples = static_cast<std::int64_t>(results[prefix + "samples"]);
  results.erase(prefix + "samples");
  std::map<std::string, double> baselines;
  for (auto it = results.begin(); it != results.end();) {
    if (!isBaselineName(it->first.substr(prefix.size()))) {
      ++it;
      continue;
    }
    baselines.emplace(it->first.substr(prefix.size()), it->second);
    it = results.erase(it);
  }
  if (metrics_) {
    JsonRecord record;
    record.add("event", "eval")
        .add("step", state_.step)
        .add("epoch", state_.epoch)
        .add("split", data::toString(split));
    record.add("samples", samples);
    for (const auto& [name, value] : results)
      record.add(name.substr(prefix.size()), value);
    record.add("eval_time_s", secondsSince(start)).addTime("time", unixSeconds());
    metrics_->write(record);
  }
  std::string line;
  for (const auto& [name, value] : results)
    line += fmt::format(" | {} {:.5g}", name, value);
  trainLog().info("eval at step {} on {} {} samples{} ({:.1f} s)", state_.step, samples,
                  data::toString(split), line, secondsSince(start));
  // After the evaluation's own line, which its progress lines lead up to.
  if (!baselines.empty()) recordBaselines(split, samples, baselines);
  return results;
}

void Trainer::recordBaselines(data::Split split, std::int64_t samples,
                              const std::map<std::string, double>& baselines) {
  if (!baselinesRecorded_.insert(data::toString(split)).second) return;
  trainLog().info("baselines on the same {} {} samples (skill = 1 - model/baseline): {}", samples,
                  data::toString(split), describeBaselines(baselines));
  if (!metrics_) return;
  JsonRecord record;
  record.add("event", "baseline")
      .add("step", state_.step)
      .add("split", data::toString(split))
      .add("samples", samples);
  for (const auto& [name, value] : baselines)
    record.add(name.substr(std::string("baseline_").size()), value);
  record.addTime("time", unixSeconds());
  metrics_->write(record);
}

// On the CPU the process holds more than the plan's fixed part (the runtime, allocator slack,
// buffers the plan does not count): the evaluation's room is what the budget leaves above what
// the process holds now, over what it held at its start, and the first batch fits it; never
// less than a training step's activations and workspace.
void Trainer::fitEvalBatchToWhatIsHeld(EvalOptions& options) const {
  if (evalBudgetBytes_ <= 0 || evalRoomBytes_ <= 0) return;
  // Never less than a training step takes: the step ran in it.
  const std::int64_t held = processMemoryBytes() - rssAtStart_;
  options.roomBytes = std::clamp<std::int64_t>(
      evalBudgetBytes_ - held, std::min(stepVariableBytes_, evalRoomBytes_), evalRoomBytes_);
  if (evalBytesPerSample_ <= 0) return;
  const double fits = static_cast<double>(options.roomBytes) / (1.0 + kActivationMargin);
  const auto bound = static_cast<std::int64_t>(fits / evalBytesPerSample_);
  options.microBatch = std::clamp<std::int64_t>(bound, 1, options.microBatch);
}

bool Trainer::afterEvaluation(const std::map<std::string, double>& metrics) {
  const auto& rule = config_.train.earlyStopping;
  const Schedule::AfterEvaluation after = schedule_->afterEvaluation(state_, metrics);
  if (after.metricMissing) {
    trainLog().warn(
        "train.early_stopping.metric = {} is not among the evaluation metrics; best.h5 is not kept",
        rule.metric);
    return false;
  }
  if (after.newBest) {
    NamedTensors extra = carried_->gather();
    // The step's checkpoint, when it has one here, is the best: best.h5 links it.
    const std::string stepFile = checkpoints_->stepPath(state_.step);
    dist::agreed(control(), "writing best.h5", [&] {
      if (!isRoot()) return;
      if (!schedule_->needsFinalCheckpoint(state_) && fs::exists(stepFile))
        checkpoints_->linkBest(stepFile);
      else
        checkpoints_->saveBest(snapshot(std::move(extra)));
    });
    trainLog().info("new best {} = {:.6g} at step {}: saved {}", rule.metric, state_.bestMetric,
                    state_.step, checkpoints_->bestPath());
  }
  if (after.stop)
    trainLog().info(
        "early stopping at step {}: {} has not improved for {} evaluations (best {:.6g} at step "
        "{}, kept in {})",
        state_.step, rule.metric, state_.evalsWithoutImprovement, state_.bestMetric,
        state_.bestStep, checkpoints_->bestPath());
  return after.stop;
}

// Note [Checkpoint before evaluation]
// An evaluation can fail where training did not: it may run out of memory (or be killed by the
// kernel's OOM killer, which nothing catches), hit a bug in a metric, or be preempted. So when
// a step has both, its checkpoint is written first, and at the end of training the final
// checkpoint comes before the final evaluation: a failed evaluation loses no training, and
// `latest` names the step. The checkpoint cannot hold what the evaluation found (best metric,
// evaluations without improvement), so it records that its step's evaluation was still to come
// (eval_pending_step); a run resumed from it evaluates that step first, so best.h5 and early
// stopping see every evaluation (a run that had finished evaluates its last step once more).
// When the evaluation finds the best, best.h5 becomes the step's file (a hard link).
// The caller has set state_.evalPendingStep to the step; a stop request abandons the
// evaluation (Note [Stopping within seconds]), and it stays pending.
Trainer::AfterEval Trainer::evaluateAndRecord() {
  // An empty val split (val_fraction 0, or a walk with walk.val = 0) has nothing to judge: a
  // loss of 0 over no sample would make the first evaluation the best forever.
  if (data_->info().split(data::Split::kVal).size() == 0) {
    if (isRoot() && !saidValIsEmpty_)
      trainLog().info(
          "the val split is empty: no evaluation, so no best.h5 and no early stopping; the "
          "last checkpoint is the run's model");
    saidValIsEmpty_ = true;
    state_.evalPendingStep = -1;
    return AfterEval::kGoOn;
  }
  const std::map<std::string, double> metrics = evaluate(data::Split::kVal);
  if (metrics.empty()) return AfterEval::kStopRequested;
  state_.evalPendingStep = -1;
  return afterEvaluation(metrics) ? AfterEval::kStopEarly : AfterEval::kGoOn;
}

CheckpointContent Trainer::snapshot(NamedTensors extra) const {
  CheckpointContent content;
  content.trainer = state_;
  content.trainer.lossScale = scaler_->enabled() ? scaler_->scale() : 0.0;
  content.trainer.lossScaleGrowthTracker = scaler_->growthTracker();
  content.model = model::stateDict(*model_);
  content.optimizer = optimizer_->state();
  content.optimizerSteps = optimizer_->stepCount();
  content.optimizerKind = toString(config_.optim.name);
  content.extra = std::move(extra);
  content.configYaml = configToYaml(config_);
  content.dataFingerprint = data_->info().fingerprint;
  content.dataInfoYaml = data::modelSpecToYaml(data_->info());
  content.dataIdentityYaml = data_->info().identityYaml;  // Note [Data continuity]
  content.dataChanges = dataChanges_;
  content.initFromYaml = initFromYaml_;  // Note [Warm starts]
  // Note [The train mean of an evaluation]: what eval and predict compare with later.
  content.trainTargetMean = data_->info().trainTargetMean;
  content.trainClassCounts = data_->info().trainClassCounts;
  content.lr = nextStepLr();
  content.worldSize = runtime_.size();
  return content;
}

void Trainer::saveCheckpoint(const char* reason) {
  checks_->settle(state_);  // the checkpoint's bad-step count must include every finished step
  auto start = Clock::now();
  dist::averageBuffers(*dataComm_, *model_);  // Note [Buffers across ranks]
  std::string path;
  NamedTensors extra = carried_->gather();
  NamedTensors logWindow =
      gatherLogWindow(window_, control());  // Note [Log windows across a resume]
  dist::agreed(control(), "writing a checkpoint", [&] {
    MemoryPhase phase("assembling a checkpoint");  // Note [Out of memory is an expected error]
    const ReturnFreedHostMemory returned;          // Note [Keeping freed host memory]
    if (!isRoot()) return;
    CheckpointContent content = snapshot(std::move(extra));
    content.logWindow = std::move(logWindow);
    path = checkpoints_->save(content);
  });
  schedule_->checkpointed(state_.step);
  state_.checkpointWriteSeconds = secondsSince(start);  // Note [Stop lead time]
  trainLog().info("checkpoint ({}) at step {}: {} in {:.2f} s", reason, state_.step, path,
                  state_.checkpointWriteSeconds);
  if (metrics_) {  // what a checkpoint costs: run.checkpoint_every_s is chosen against it
    JsonRecord record;
    record.add("event", "checkpoint").add("step", state_.step).add("reason", reason);
    record.add("write_s", state_.checkpointWriteSeconds).addTime("time", unixSeconds());
    metrics_->write(record);
  }
  stopLead_.check(state_.microBatchSeconds, state_.checkpointWriteSeconds);
}

}  // namespace mb::train
