#include "train/Trainer.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <thread>

#include <ATen/Functions.h>
#include <ATen/Parallel.h>
#include <torch/cuda.h>
#include <torch/nn/module.h>

#include "common/Environment.h"
#include "common/Error.h"
#include "common/Log.h"
#include "common/Strings.h"
#include "config/ConfigLoader.h"
#include "config/ConfigSchema.h"
#include "data/ShardedData.h"
#include "dist/Agreement.h"
#include "dist/GradientReducer.h"
#include "dist/Runtime.h"
#include "dist/Watchdog.h"
#include "model/Model.h"
#include "model/StateDict.h"
#include "train/CheckpointModel.h"
#include "train/Evaluation.h"
#include "train/GpuUtilisation.h"
#include "train/Metrics.h"
#include "train/Optimizer.h"
#include "train/Precision.h"
#include "train/Signals.h"
#include "train/StepPhases.h"

namespace mb::train {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

spdlog::logger& logger() {
  return log::get("train");
}

}  // namespace

// Rolling statistics between two log lines.
struct Trainer::Window {
  Clock::time_point start = Clock::now();
  std::int64_t steps = 0;
  std::int64_t samples = 0;
  at::Tensor lossSum;  // sum over steps of this rank's normalised loss contribution
};

Trainer::Trainer(Config config, dist::Runtime& runtime)
    : config_(std::move(config)), runtime_(runtime), control_(runtime.control()) {
  if (auto step = env::getInt("MEGABATCH_FAULT_NAN_STEP")) nanFaultStep_ = *step;
  if (auto rank = env::getInt("MEGABATCH_FAULT_NAN_RANK")) nanFaultRank_ = static_cast<int>(*rank);
  if (auto count = env::getInt("MEGABATCH_FAULT_NAN_COUNT")) nanFaultCount_ = *count;
  if (auto step = env::getInt("MEGABATCH_FAULT_STOP_STEP")) stopFaultStep_ = *step;
}

Trainer::~Trainer() = default;

bool Trainer::isRoot() const {
  return runtime_.rank() == 0;
}

double Trainer::currentLr() const {
  return learningRate(config_.optim, state_.step, totalSteps_);
}

// --- set-up ----------------------------------------------------------------------

void Trainer::setUpDevice() {
  bool cudaAvailable = torch::cuda::is_available();
  if (config_.train.device == DeviceKind::kCuda && !cudaAvailable)
    throw ConfigError("train.device = cuda, but no CUDA device is usable by this megabatch build",
                      "use train.device=cpu, or build with scripts/build-gpu.sh on a GPU machine");
  bool useCuda = config_.train.device == DeviceKind::kCuda ||
                 (config_.train.device == DeviceKind::kAuto && cudaAvailable);
  if (useCuda) {
    int index = runtime_.selectCudaDevice(static_cast<int>(torch::cuda::device_count()));
    device_ = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
    enableFastCudaMath();
  }
  // Accepted so configs written for the planned graph capture keep loading; say plainly that
  // the step still runs eagerly rather than let the setting look effective.
  if (config_.train.cudaGraphs)
    logger().warn(
        "train.cuda_graphs = true: capturing the step in a CUDA graph is not implemented yet, so "
        "the step runs eagerly; remove the setting to silence this warning");
  int threads = runtime_.cpuThreadsPerRank(config_.train.threads);
  at::set_num_threads(threads);
  logger().info("device {}, {} CPU threads per rank, {} rank(s)", device_.str(), threads,
                runtime_.size());
  dataComm_ = runtime_.makeDataCommunicator(config_.dist.backend, useCuda ? "cuda" : "cpu",
                                            useCuda ? device_.index() : -1);
  at::manual_seed(static_cast<std::uint64_t>(config_.train.seed) * 1000003ULL + runtime_.rank());
  phases_ = PhaseClock::create(device_);
  std::string why;
  if (isRoot()) gpuUtilisation_ = GpuUtilisation::open(device_, why);
  if (!why.empty()) logger().warn("GPU utilisation is not reported: {}", why);
}

void Trainer::prepareRunDirectory() {
  checkpoints_ = std::make_unique<CheckpointDirectory>(config_.run.dir, config_.run.keepLast);
  dist::agreed(control_, "preparing the run directory", [&] {
    if (!isRoot()) return;
    std::error_code ec;
    fs::create_directories(checkpoints_->path(), ec);
    if (ec)
      throw ConfigError("cannot create run.dir '" + config_.run.dir + "': " + ec.message(),
                        "set run.dir to a writable directory");
    log::addFileSink((fs::path(config_.run.dir) / "train.log").string());
    checkpoints_->removeUnfinishedWrites();
  });
}

std::optional<CheckpointContent> Trainer::findResumePoint() {
  std::optional<CheckpointContent> resumed;
  dist::agreed(control_, "looking for a checkpoint to resume", [&] {
    if (!isRoot()) return;
    const std::string& mode = config_.run.resume;
    if (mode == "never") {
      if (!checkpoints_->stepFiles().empty())
        throw ConfigError(
            "run.resume = never, but " + checkpoints_->path() + " already holds checkpoints",
            "choose a new run.dir, or set run.resume=auto to continue that run");
      return;
    }
    if (mode == "auto") {
      if (auto found = checkpoints_->loadNewest()) {
        logger().info("resuming from {} (step {}, saved on {} ranks)", found->first,
                      found->second.trainer.step, found->second.worldSize);
        resumed = std::move(found->second);
      }
      return;
    }
    resumed = readCheckpointFile(mode);
    logger().info("resuming from {} (step {})", mode, resumed->trainer.step);
  });
  std::pair<std::int64_t, std::int64_t> laneOrder{-1, -1};
  dist::agreed(control_, "reading the lane order of the checkpoint", [&] {
    if (resumed) laneOrder = savedLaneOrder(*resumed);
  });
  // Every rank learns whether training resumes and where it stands.
  at::Tensor header = at::zeros({14}, at::kDouble);
  if (resumed) {
    const TrainerState& s = resumed->trainer;
    auto [lanes, stride] = laneOrder;
    header =
        at::tensor({1.0, double(s.step), double(s.epoch), double(s.batchInEpoch),
                    double(s.samplesSeen), double(s.canonicalShards), double(s.seed),
                    double(s.globalBatch), double(s.badSteps), s.bestMetric, double(s.bestStep),
                    double(s.evalsWithoutImprovement), double(lanes), double(stride)},
                   at::kDouble);
  }
  control_.broadcast(header, 0, "resume header");
  auto h = header.accessor<double, 1>();
  if (h[0] == 1.0) {
    TrainerState& s = state_;
    s.step = std::llround(h[1]);
    s.epoch = std::llround(h[2]);
    s.batchInEpoch = std::llround(h[3]);
    s.samplesSeen = std::llround(h[4]);
    s.canonicalShards = std::llround(h[5]);
    s.seed = std::llround(h[6]);
    s.globalBatch = std::llround(h[7]);
    s.badSteps = std::llround(h[8]);
    s.bestMetric = h[9];
    s.bestStep = std::llround(h[10]);
    s.evalsWithoutImprovement = std::llround(h[11]);
    savedLanes_ = std::llround(h[12]);
    savedLaneStride_ = std::llround(h[13]);
    if (!isRoot()) resumed.emplace();  // placeholder: tensors arrive by broadcast
    resumed->trainer = s;
  }
  return resumed;
}

// The global order is defined by (V, seed, global batch): a resumed run keeps the values it
// started with, whatever the config says now (DESIGN.md "Splits and global order").
void Trainer::applyCheckpointOrder(const std::optional<CheckpointContent>& resumed) {
  if (!resumed) {
    state_.canonicalShards = config_.data.canonicalShards;
    state_.seed = config_.train.seed;
    state_.globalBatch = config_.train.globalBatch;
    return;
  }
  auto keep = [&](const char* key, std::int64_t& configValue, std::int64_t saved) {
    if (configValue != saved)
      logger().warn(
          "{} = {} in the config, but the run was started with {}: keeping {} so the data order "
          "continues exactly",
          key, configValue, saved, saved);
    configValue = saved;
  };
  keep("data.canonical_shards", config_.data.canonicalShards, state_.canonicalShards);
  keep("train.seed", config_.train.seed, state_.seed);
  keep("train.global_batch", config_.train.globalBatch, state_.globalBatch);
  if (config_.model.stateful && savedLaneStride_ > 0) {
    keep("model.lanes", config_.model.lanes, savedLanes_);
    keep("model.lane_stride", config_.model.laneStride, savedLaneStride_);
  }
}

// Rank 0: the lane order (Note [Lane order]) a stateful run was started with, from the
// checkpoint's config; {-1, -1} when the run was not stateful or this one is not.
std::pair<std::int64_t, std::int64_t> Trainer::savedLaneOrder(const CheckpointContent& resumed) {
  if (!isRoot() || !config_.model.stateful) return {-1, -1};
  Config saved = parseConfig(resumed.configYaml, "the checkpoint's /meta config");
  if (!saved.model.stateful) return {-1, -1};
  return {saved.model.lanes, saved.model.laneStride};
}

void Trainer::buildModelAndOptimizer() {
  // A model may be read from a file (model.kind = torchscript): every rank stops alike.
  dist::agreed(control_, "building the model", [&] {
    model_ = model::buildModel(config_.model, data_->info(),
                               static_cast<std::uint64_t>(config_.train.seed));
    model_->to(device_);
  });
  NamedTensors parameters;
  std::vector<at::Tensor> tensors;
  std::vector<std::string> names;
  for (const auto& item : model_->named_parameters(true)) {
    parameters.emplace_back(item.key(), item.value());
    tensors.push_back(item.value());
    names.push_back(item.key());
  }
  optimizer_ = std::make_unique<Optimizer>(config_.optim, parameters);
  reducer_ = std::make_unique<dist::GradientReducer>(dataComm_, tensors, names,
                                                     dist::reducerOptionsFrom(config_.dist));
  std::int64_t count = 0;
  for (const auto& t : tensors)
    count += t.numel();
  logger().info("model {}: {} parameters in {} tensors, {} gradient buckets", model_->kind(), count,
                tensors.size(), reducer_->bucketLayout().size());
}

// Rank 0 holds the checkpoint's tensors; it loads them, then every tensor is broadcast so all
// ranks continue from identical state.
void Trainer::restoreFrom(std::optional<CheckpointContent>& resumed) {
  if (resumed) {
    dist::agreed(control_, "restoring the checkpoint", [&] {
      if (!isRoot()) return;
      loadModelState(*model_, resumed->model, "checkpoint");
      optimizer_->loadState(resumed->optimizer, resumed->optimizerSteps);
      model_->loadExtraState(resumed->extra);
      model_->setLaneCount(laneCount());  // a loaded lane count must match the run's
    });
  }
  dist::synchronizeParameters(*dataComm_, *model_);
  if (!resumed) return;
  for (auto& [name, tensor] : optimizer_->state())
    dataComm_->broadcast(tensor, 0, "optimizer state " + name);
  at::Tensor steps = at::full({1}, static_cast<double>(resumed->optimizerSteps), at::kDouble);
  control_.broadcast(steps, 0, "optimizer steps");
  NamedTensors extra = model_->extraState();
  for (auto& [name, tensor] : extra)
    dataComm_->broadcast(tensor, 0, "extra state " + name);
  if (!isRoot()) {
    optimizer_->loadState(optimizer_->state(), std::llround(steps.item<double>()));
    model_->loadExtraState(extra);
  }
  resumed.reset();  // free the host copy
}

// --- the loop ----------------------------------------------------------------------

RunOutcome Trainer::run() {
  installStopSignalHandlers();  // again: MPI initialisation may have replaced them
  // dist.timeout_s bounds every collective from here on (the watchdog's own default is 300 s).
  dist::Watchdog::instance().setTimeout(config_.dist.timeoutS);
  setUpDevice();
  prepareRunDirectory();
  std::optional<CheckpointContent> resumed = findResumePoint();
  applyCheckpointOrder(resumed);

  data_ = data::ShardedData::load(config_, control_, device_);
  buildModelAndOptimizer();
  model_->setLaneCount(laneCount());  // every rank alike, before the states are broadcast
  restoreFrom(resumed);

  const std::int64_t perEpoch = data_->batchesPerEpoch();
  totalSteps_ =
      config_.train.maxSteps > 0 ? config_.train.maxSteps : config_.train.epochs * perEpoch;
  microBatch_ = config_.train.microBatch > 0
                    ? config_.train.microBatch
                    : (config_.train.globalBatch + runtime_.size() - 1) / runtime_.size();
  if (isRoot()) {
    writeFileAtomically((fs::path(config_.run.dir) / "config.yaml").string(),
                        configToYaml(config_));
    metrics_ = std::make_unique<MetricsWriter>(
        (fs::path(config_.run.dir) / "metrics.jsonl").string(), state_.step);
  }
  lastCheckpointStep_ = state_.step;
  logger().info(
      "training {} steps ({} per epoch) from step {}: global batch {}, micro batch {} per rank, "
      "{} ranks, precision {}",
      totalSteps_, perEpoch, state_.step, config_.train.globalBatch, microBatch_, runtime_.size(),
      toString(config_.train.precision));
  if (laneCount() > 0) {
    const data::LaneSpec& lanes = data_->order().lanes();
    logger().info(
        "stateful lanes: {} ({} canonical shards x {}), stride {}: an epoch is {} pass(es) of "
        "one item per lane per step; lane states restart at each pass",
        laneCount(), data_->order().numShards(), lanes.lanesPerShard, lanes.stride, lanes.stride);
  }

  progress_ = std::make_unique<ProgressBar>(config_.run.progress, isRoot());
  Window window;
  bool epochStarted = false;
  RunOutcome outcome = RunOutcome::kFinished;
  while (state_.step < totalSteps_) {
    if (!epochStarted) {
      data_->beginEpoch(state_.epoch);
      model_->startEpoch(state_.epoch);
      epochStarted = true;
      epochMemoryStart_ = processMemoryBytes();
    }
    // A new pass of the lane order jumps back in time (batch 0 starts pass 0 of an epoch).
    if (laneCount() > 0 && data_->order().laneStep(state_.batchInEpoch).step == 0) restartLanes();
    StepResult step;
    {
      // A rank stuck outside any collective (a hung kernel, a deadlocked loader) ends itself too.
      dist::Watchdog::Scope guard =
          dist::Watchdog::instance().track("training step " + std::to_string(state_.step + 1));
      step = trainStep();
    }
    ++state_.step;
    ++state_.batchInEpoch;
    state_.samplesSeen += data_->globalCount(state_.batchInEpoch - 1);
    pendingChecks_.push_back({state_.step, step.gradNorm});
    if (hostSyncEveryStep()) settleStepChecks();

    bool epochEnded = state_.batchInEpoch == perEpoch;
    bool last = state_.step == totalSteps_;
    logStep(step, window, last || epochEnded);
    progress_->update(state_.step, totalSteps_, step.samples,
                      learningRate(config_.optim, state_.step - 1, totalSteps_));
    if (epochEnded) {
      checkMemoryGrowth();
      logModelStatistics();
      ++state_.epoch;
      state_.batchInEpoch = 0;
      epochStarted = false;
    }
    if (state_.badSteps >= config_.train.maxBadSteps) {
      outcome = RunOutcome::kTooManyBadSteps;
      break;
    }
    bool evalNow = (config_.train.evalEvery > 0 && state_.step % config_.train.evalEvery == 0) ||
                   epochEnded || last;
    if (evalNow && afterEvaluation(evaluate(data::Split::kVal))) {
      outcome = RunOutcome::kEarlyStopped;
      break;
    }
    bool checkpointNow = config_.run.checkpointEvery > 0
                             ? state_.step % config_.run.checkpointEvery == 0
                             : epochEnded;
    if (checkpointNow || last) saveCheckpoint(last ? "end of training" : "scheduled");
    if (stopRequested()) {
      outcome = RunOutcome::kPreempted;
      break;
    }
  }
  progress_->finish();
  settleStepChecks();
  if (state_.step != lastCheckpointStep_) saveCheckpoint("stop");
  if (outcome == RunOutcome::kTooManyBadSteps)
    logger().error(
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
  const std::int64_t local = data_->localCount(batch);
  const std::int64_t global = data_->globalCount(batch);
  // Note: the loss is divided by the GLOBAL count, so summed gradients are the global mean.
  const double normalizer =
      static_cast<double>(global) * static_cast<double>(model_->termsPerSample());
  const std::int64_t microSteps = (local + microBatch_ - 1) / microBatch_;
  StepResult result;
  result.samples = global;
  model_->train();
  at::Tensor lossSum = at::zeros({}, at::TensorOptions().device(device_).dtype(at::kFloat));
  phases_->start();
  if (microSteps == 0) reducer_->prepareForBackward(true);  // contribute zero gradients
  for (std::int64_t m = 0; m < microSteps; ++m) {
    const std::int64_t begin = m * microBatch_;
    const std::int64_t end = std::min(local, begin + microBatch_);
    reducer_->prepareForBackward(m == microSteps - 1);
    data::Batch micro = data_->trainBatch(batch, begin, end, at::kFloat);
    phases_->mark(Phase::kData);
    at::Tensor part;
    {
      AutocastScope autocast(device_.type(), config_.train.precision);
      at::Tensor output = model_->forward(micro);
      part = model_->lossSum(output, micro).to(at::kFloat);
    }
    if (injectNanNow()) part = part * std::numeric_limits<float>::quiet_NaN();
    (part / normalizer).backward();
    lossSum += part.detach();
    phases_->mark(Phase::kForwardBackward);
  }
  reducer_->finishGradients();
  phases_->mark(Phase::kCommunication);

  // Gradients are identical on every rank now, so every rank takes the same decision.
  std::vector<at::Tensor> grads;
  for (const auto& p : model_->parameters()) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  at::NoGradGuard noGrad;
  result.gradNorm = at::stack(at::_foreach_norm(grads)).to(at::kDouble).norm();
  const double clip = config_.train.gradClip;
  if (hostSyncEveryStep()) {
    const double norm = result.gradNorm.item<double>();
    const bool finite = std::isfinite(norm);
    if (finite) {
      if (clip > 0 && norm > clip) at::_foreach_mul_(grads, clip / (norm + 1e-6));
      optimizer_->step(currentLr());
    }
    result.gradNorm = at::full({}, norm, at::kDouble);  // on the host: settling reads no device
  } else {
    const at::Tensor& norm = result.gradNorm;
    if (clip > 0) {
      at::Tensor scale = at::where(norm > clip, clip / (norm + 1e-6), at::ones_like(norm));
      for (auto& grad : grads)
        grad.mul_(scale);
    }
    for (auto& grad : grads)
      grad.nan_to_num_(0.0, 0.0, 0.0);  // a masked step still needs finite inputs
    optimizer_->step(currentLr(), at::isfinite(norm).to(at::kDouble));
  }
  optimizer_->zeroGrad();
  phases_->mark(Phase::kOptimizer);
  result.loss = lossSum / normalizer;
  return result;
}

}  // namespace mb::train

namespace mb::train {

// --- logging, evaluation, checkpoints --------------------------------------------------

void Trainer::logStep(const StepResult& step, Window& window, bool force) {
  window.steps += 1;
  window.samples += step.samples;
  window.lossSum = window.lossSum.defined() ? window.lossSum + step.loss : step.loss.clone();
  if (!force && state_.step % config_.run.logEvery != 0) return;
  settleStepChecks();

  // One host sync and one small all-reduce per log line, never per step.
  at::Tensor loss = window.lossSum.to(at::kCPU, at::kDouble).reshape({1});
  control_.allReduce(loss, dist::ReduceOp::kSum, "metrics");
  const double meanLoss = loss.item<double>() / static_cast<double>(window.steps);
  const double elapsed = std::max(secondsSince(window.start), 1e-9);
  const double samplesPerSecond = static_cast<double>(window.samples) / elapsed;
  const double stepSeconds = elapsed / static_cast<double>(window.steps);
  const PhaseSeconds phases = phases_->collect();  // Note [Step phases]
  const double steps = static_cast<double>(window.steps);
  const double dataShare = phases.data / elapsed;
  const double commShare = phases.communication / elapsed;
  const std::string split = fmt::format("data {:.0f}% fwd-bwd {:.0f}% comm {:.0f}% opt {:.0f}%",
                                        100 * dataShare, 100 * phases.forwardBackward / elapsed,
                                        100 * commShare, 100 * phases.optimizer / elapsed);
  // Note [GPU utilisation]: rank 0 on CUDA; negative when there is none to report.
  std::optional<double> sampled = gpuUtilisation_ ? gpuUtilisation_->sinceLastCall() : std::nullopt;
  const double utilisation = sampled.value_or(-1.0);
  const std::string utilisationPart = utilisation >= 0 ? utilisationText(utilisation, split) : "";
  const double memoryMb = static_cast<double>(processMemoryBytes()) / (1 << 20);
  const double remaining = static_cast<double>(totalSteps_ - state_.step) * stepSeconds;
  const bool tokens = data_->info().countsTokens;
  const double tokensPerSecond =
      tokens ? samplesPerSecond * static_cast<double>(model_->termsPerSample()) : 0;
  if (metrics_) {
    JsonRecord record;
    record.add("event", "train")
        .add("step", state_.step)
        .add("epoch", state_.epoch)
        .add("split", "train");
    record.add("loss", meanLoss)
        .add("lr", learningRate(config_.optim, state_.step - 1, totalSteps_));
    record.add("samples_per_s", samplesPerSecond);
    if (tokens) record.add("tokens_per_s", tokensPerSecond);
    record.add("step_time_s", stepSeconds).add("data_time_s", phases.data / steps);
    record.add("fwd_bwd_time_s", phases.forwardBackward / steps)
        .add("comm_time_s", phases.communication / steps)
        .add("optimizer_time_s", phases.optimizer / steps);
    record.add("mem_mb", memoryMb);
    if (utilisation >= 0) record.add("gpu_util", utilisation);
    for (const auto& [name, value] : model_->statistics())
      record.add(name, value);
    record.add("grad_norm", lastGradNorm_).add("skipped_steps", skippedInWindow_);
    record.add("time", static_cast<double>(std::time(nullptr)));
    metrics_->write(record);
  }
  progress_->setLoss(meanLoss);
  const double percent =
      100.0 * static_cast<double>(state_.step) / static_cast<double>(totalSteps_);
  logger().info(
      "step {}/{} ({:.0f}%) | loss {:.5g} | lr {:.3g} | {:.0f} samples/s{} | step {:.1f} ms ({}){} "
      "| eta {} | mem {}",
      state_.step, totalSteps_, percent, meanLoss,
      learningRate(config_.optim, state_.step - 1, totalSteps_), samplesPerSecond,
      tokens ? fmt::format(" | {:.0f} tokens/s", tokensPerSecond) : std::string(),
      1000.0 * stepSeconds, split, utilisationPart, str::humanDuration(remaining),
      str::humanBytes(static_cast<double>(processMemoryBytes())));
  // Rank 0 speaks for the job, on the first slow window and then every 20th, so SLURM logs stay
  // readable.
  const bool slowData = dataShare > 0.10;
  const bool slowComm = commShare > 0.10 && runtime_.size() > 1;
  if (isRoot() && (slowData || slowComm) && slowWindows_++ % 20 == 0) {
    if (slowData)
      logger().warn(
          "input pipeline: data time is {:.0f}% of step time; the model waits for batches "
          "(use data.residency=device or host rather than stream, or give each rank more threads)",
          100 * dataShare);
    if (slowComm)
      logger().warn(
          "communication: waiting for gradients takes {:.0f}% of step time (a slower rank, or the "
          "network: try a larger per-rank batch, dist.grad_dtype=bf16, or fewer ranks per node)",
          100 * commShare);
  }
  window = Window();
  skippedInWindow_ = 0;
}

// Rank 0 on CUDA: " | gpu 64%", and a warning when the utilisation stays under
// train.gpu_util_warn (StarvationWatch: two judged log windows in a row, the first window not
// judged, then every 20th).
std::string Trainer::utilisationText(double utilisation, const std::string& split) {
  if (starvation_.observe(utilisation))
    logger().warn(
        "GPU utilisation is {:.0f}%, under train.gpu_util_warn = {:g}% for {} log windows: the GPU "
        "waits for the host (step time: {}). Try a larger train.global_batch, "
        "data.residency=device, fewer ranks per GPU, or train.precision=bf16",
        utilisation, config_.train.gpuUtilWarn, starvation_.lowWindows(), split);
  return fmt::format(" | gpu {:.0f}%", utilisation);
}

void Trainer::logModelStatistics() const {
  std::vector<std::pair<std::string, double>> statistics = model_->statistics();
  if (statistics.empty()) return;
  std::string text;
  for (const auto& [name, value] : statistics)
    text += fmt::format("{}{} {:g}", text.empty() ? "" : ", ", name, value);
  logger().info("epoch {} model: {}", state_.epoch, text);
}

// Note [Step checks]
// Each step's global gradient norm decides whether the update is taken (a non-finite norm
// skips it on every rank: the gradients are all-reduced, so every rank sees the same norm) and
// how much it is clipped. Reading the norm on the host every step (train.host_sync = step)
// stalls a GPU once per step: the host waits for the backward pass before it can queue the
// optimizer and the next step. With host_sync = log the decision stays on the device: the
// clip factor is a device tensor, non-finite gradients are zeroed, and the optimizer's update
// is multiplied by a 0/1 `apply` flag (Optimizer::step(lr, apply)). The host reads the pending
// norms in one transfer at log steps, before checkpoints and at the end: only then are
// skipped steps reported and counted towards train.max_bad_steps, so a run of bad steps stops
// at the next log step after the limit rather than exactly at it (those extra steps are
// skipped too, so the parameters are the same). CPU runs keep host_sync = step: there is no
// device to wait for, and the foreach update is cheaper there.
bool Trainer::hostSyncEveryStep() const {
  switch (config_.train.hostSync) {
    case HostSync::kStep:
      return true;
    case HostSync::kLog:
      return false;
    case HostSync::kAuto:
      break;
  }
  return !device_.is_cuda();
}

void Trainer::settleStepChecks() {
  if (pendingChecks_.empty()) return;
  std::vector<at::Tensor> norms;
  for (const auto& check : pendingChecks_)
    norms.push_back(check.gradNorm);
  at::Tensor host = at::stack(norms).to(at::kCPU, at::kDouble);
  auto read = host.accessor<double, 1>();
  for (std::size_t i = 0; i < pendingChecks_.size(); ++i) {
    const double norm = read[static_cast<std::int64_t>(i)];
    const bool skipped = !std::isfinite(norm);  // the rule both step paths apply
    lastGradNorm_ = norm;
    state_.badSteps = skipped ? state_.badSteps + 1 : 0;
    if (!skipped) continue;
    ++skippedInWindow_;
    logger().warn(
        "step {}: non-finite gradient norm ({}); update skipped on every rank ({} in a row)",
        pendingChecks_[i].step, norm, state_.badSteps);
  }
  pendingChecks_.clear();
}

std::map<std::string, double> Trainer::evaluate(data::Split split) {
  auto start = Clock::now();
  dist::averageBuffers(*dataComm_, *model_);  // Note [Buffers across ranks]
  EvalOptions options;
  options.microBatch = microBatch_;
  options.precision = config_.train.precision;
  if (config_.train.evalBatches > 0)
    options.maxSamplesPerRank =
        (config_.train.evalBatches * config_.train.globalBatch + runtime_.size() - 1) /
        runtime_.size();
  std::map<std::string, double> results =
      evaluateSplit(*model_, *data_, split, control_, device_, options);
  const std::string prefix = std::string(data::toString(split)) + "_";
  const auto samples = static_cast<std::int64_t>(results[prefix + "samples"]);
  results.erase(prefix + "samples");
  if (metrics_) {
    JsonRecord record;
    record.add("event", "eval")
        .add("step", state_.step)
        .add("epoch", state_.epoch)
        .add("split", data::toString(split));
    record.add("samples", samples);
    for (const auto& [name, value] : results)
      record.add(name.substr(prefix.size()), value);
    record.add("eval_time_s", secondsSince(start))
        .add("time", static_cast<double>(std::time(nullptr)));
    metrics_->write(record);
  }
  std::string line;
  for (const auto& [name, value] : results)
    line += fmt::format(" | {} {:.5g}", name, value);
  logger().info("eval at step {} on {} {} samples{} ({:.1f} s)", state_.step, samples,
                data::toString(split), line, secondsSince(start));
  return results;
}

bool Trainer::afterEvaluation(const std::map<std::string, double>& metrics) {
  const auto& rule = config_.train.earlyStopping;
  auto it = metrics.find(rule.metric);
  if (it == metrics.end()) {
    logger().warn(
        "train.early_stopping.metric = {} is not among the evaluation metrics; best.h5 is not kept",
        rule.metric);
    return false;
  }
  const double value = it->second;
  const bool minimise = rule.mode == MetricMode::kMin;
  const bool improved =
      std::isnan(state_.bestMetric) || (minimise ? value < state_.bestMetric - rule.minDelta
                                                 : value > state_.bestMetric + rule.minDelta);
  if (improved && std::isfinite(value)) {
    state_.bestMetric = value;
    state_.bestStep = state_.step;
    state_.evalsWithoutImprovement = 0;
    NamedTensors extra = laneStates();
    CheckpointContent content;
    if (isRoot()) content = snapshot(std::move(extra));
    dist::agreed(control_, "writing best.h5", [&] {
      if (isRoot()) checkpoints_->saveBest(content);
    });
    logger().info("new best {} = {:.6g} at step {}: saved {}", rule.metric, value, state_.step,
                  checkpoints_->bestPath());
    return false;
  }
  ++state_.evalsWithoutImprovement;
  if (rule.patience > 0 && state_.evalsWithoutImprovement >= rule.patience) {
    logger().info(
        "early stopping at step {}: {} has not improved for {} evaluations (best {:.6g} at step "
        "{}, "
        "kept in {})",
        state_.step, rule.metric, state_.evalsWithoutImprovement, state_.bestMetric,
        state_.bestStep, checkpoints_->bestPath());
    return true;
  }
  return false;
}

CheckpointContent Trainer::snapshot(NamedTensors extra) const {
  CheckpointContent content;
  content.trainer = state_;
  content.model = model::stateDict(*model_);
  content.optimizer = optimizer_->state();
  content.optimizerSteps = optimizer_->stepCount();
  content.optimizerKind = toString(config_.optim.name);
  content.extra = std::move(extra);
  content.configYaml = configToYaml(config_);
  content.dataFingerprint = data_->info().fingerprint;
  content.dataInfoYaml = data::modelSpecToYaml(data_->info());
  content.lr = currentLr();
  content.worldSize = runtime_.size();
  return content;
}

void Trainer::saveCheckpoint(const char* reason) {
  settleStepChecks();  // the checkpoint's bad-step count must include every finished step
  auto start = Clock::now();
  dist::averageBuffers(*dataComm_, *model_);  // Note [Buffers across ranks]
  std::string path;
  NamedTensors extra = laneStates();
  dist::agreed(control_, "writing a checkpoint", [&] {
    if (isRoot()) path = checkpoints_->save(snapshot(std::move(extra)));
  });
  lastCheckpointStep_ = state_.step;
  logger().info("checkpoint ({}) at step {}: {} in {:.2f} s", reason, state_.step, path,
                secondsSince(start));
}

std::int64_t Trainer::laneCount() const {
  return data_->order().numLanes();
}

void Trainer::restartLanes() {
  model_->resetState();
  model_->setLaneCount(laneCount());
}

// Note [Stateful lanes] (model/kinds/Lstm.h): every rank holds all lanes' states but advances only
// its own, so the others are zero, or stale copies broadcast at a resume. Each rank therefore
// contributes just its own lanes to a sum, which leaves the full set everywhere without
// double counting; the model's own states stay as they are.
NamedTensors Trainer::laneStates() {
  NamedTensors states = model_->extraState();
  if (laneCount() == 0) return states;
  data::ItemRange own = data_->order().lanesOfShards(data::GlobalOrder::shardsOfRank(
      data_->order().numShards(), runtime_.rank(), runtime_.size()));
  for (auto& [name, state] : states) {
    at::Tensor sum = at::zeros_like(state);  // [layers, lanes, hidden]
    sum.narrow(1, own.begin, own.size()).copy_(state.narrow(1, own.begin, own.size()));
    dataComm_->allReduce(sum, dist::ReduceOp::kSum, "lane state " + name);
    state = sum;
  }
  return states;
}

// All ranks agree at every step boundary: a signal to any rank stops every rank.
bool Trainer::injectNanNow() const {
  const std::int64_t step = state_.step + 1;
  return nanFaultStep_ > 0 && step >= nanFaultStep_ && step < nanFaultStep_ + nanFaultCount_ &&
         (nanFaultRank_ < 0 || nanFaultRank_ == runtime_.rank());
}

bool Trainer::stopRequested() {
  // MEGABATCH_FAULT_STOP_STEP: a test hook that acts as a SIGTERM arriving at that step.
  int local = state_.step == stopFaultStep_ ? SIGTERM : pendingStopSignal();
  at::Tensor flag = at::full({1}, local, at::kInt);
  control_.allReduce(flag, dist::ReduceOp::kMax, "stop flag");
  int signal = flag.item<int>();
  if (signal == 0) return false;
  logger().warn(
      "{} received: stopping at step {} after a checkpoint; run the same command again to resume",
      signalName(signal), state_.step);
  return true;
}

void Trainer::checkMemoryGrowth() {
  std::int64_t now = processMemoryBytes();
  double growthMb = static_cast<double>(now - epochMemoryStart_) / (1 << 20);
  if (epochMemoryStart_ > 0 && state_.epoch > 0 && growthMb > config_.train.memoryGrowthWarnMb)
    logger().warn(
        "memory grew by {:.0f} MiB during epoch {} (now {}); a steady climb across epochs is a "
        "leak "
        "(train.memory_growth_warn_mb = {:g})",
        growthMb, state_.epoch, str::humanBytes(static_cast<double>(now)),
        config_.train.memoryGrowthWarnMb);
}

}  // namespace mb::train
