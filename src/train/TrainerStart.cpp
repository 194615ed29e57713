// The run's start: the device, the run directory, the resume point and the order it keeps, the
// model and optimizer, and the restored state (Trainer::run() calls these in this order).
#include "train/Trainer.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>

#include <ATen/Functions.h>
#include <ATen/Parallel.h>
#include <torch/cuda.h>
#include <torch/nn/module.h>

#include "common/CpuAllocationScope.h"
#include "common/Error.h"
#include "common/Log.h"
#include "common/OutOfMemory.h"
#include "common/Strings.h"
#include "config/ConfigLoader.h"
#include "config/ConfigSchema.h"
#include "data/ShardedData.h"
#include "dist/Agreement.h"
#include "dist/GradientReducer.h"
#include "dist/Runtime.h"
#include "dist/Watchdog.h"
#include "model/Model.h"
#include "train/CheckpointModel.h"
#include "train/checkpoints/CheckpointDirectory.h"
#include "train/checkpoints/RunLock.h"
#include "train/loop/CarriedStates.h"
#include "train/loop/Optimizer.h"
#include "train/memory/EvalBatch.h"
#include "train/memory/MemoryPlan.h"
#include "train/memory/MicroBatchSearch.h"
#include "train/precision/CpuAutoPrecision.h"
#include "train/precision/CpuPrecision.h"
#include "train/precision/DeviceProbe.h"
#include "train/precision/LossScaler.h"
#include "train/precision/Precision.h"
#include "train/watch/GpuUtilisation.h"
#include "train/watch/Metrics.h"
#include "train/watch/PaceWatch.h"
#include "train/watch/StepChecks.h"
#include "train/watch/StepPhases.h"
#include "train/watch/TrainLog.h"

namespace mb::train {
namespace fs = std::filesystem;
void Trainer::setUpDevice() {
  // Note [Device probe]: the reason comes first, so that LibTorch is asked about CUDA only where
  // a driver is there to answer.
  const bool onCpu = config_.train.device == DeviceKind::kCpu;
  const std::string noCuda = onCpu ? "" : cudaAbsenceReason();
  bool cudaAvailable = !onCpu && noCuda.empty() && torch::cuda::is_available();
  if (config_.train.device == DeviceKind::kCuda && !cudaAvailable)
    throw ConfigError("train.device = cuda, but " +
                          (noCuda.empty() ? std::string("LibTorch sees no CUDA device") : noCuda),
                      cudaVisibilityHint());
  if (kCudaBuild && config_.train.device == DeviceKind::kAuto && !cudaAvailable && isRoot())
    trainLog().info("train.device = auto: training on the CPU ({})",
                    noCuda.empty() ? "LibTorch sees no CUDA device" : noCuda);
  bool useCuda = config_.train.device == DeviceKind::kCuda ||
                 (config_.train.device == DeviceKind::kAuto && cudaAvailable);
  if (useCuda) {
    int index = runtime_.selectCudaDevice(static_cast<int>(torch::cuda::device_count()));
    device_ = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
    enableFastCudaMath();
  }
  // Note [Watchdog heartbeat]: on a GPU the host thread spins while it waits, so its CPU time
  // is not a sign of progress there.
  dist::Watchdog::instance().setCpuTimeIsProgress(!device_.is_cuda());
  // A rank on another kind of GPU could choose differently: every rank stops alike.
  dist::agreed(control(), "choosing the precision", [&] {
    const PrecisionChoice choice = choosePrecision(config_.train.precision, device_);
    precision_ = choice.dtype;
    if (!autoOnCpu()) trainLog().info("{}", choice.reason);  // else settlePrecision() says it
  });
  scaler_ =
      std::make_unique<LossScaler>(config_.train.lossScale, device_, precision_ == DType::kFp16);
  checks_ = std::make_unique<StepChecks>(scaler_->enabled(), config_.train.lossScale.min);
  if (scaler_->enabled()) {
    const LossScaleConfig& s = config_.train.lossScale;
    if (s.fixed > 0)
      trainLog().info("loss scale fixed at {:g} (train.loss_scale.fixed)", s.fixed);
    else
      trainLog().info(
          "loss scale starts at {:g}: x{:g} after {} clean steps, x{:g} after an overflow "
          "(train.loss_scale.*)",
          s.init, s.growthFactor, s.growthInterval, s.backoffFactor);
  }
  const int threads = runtime_.useCpuThreads(config_.train.threads, "train");
  trainLog().info("device {}, {} rank(s)", device_.str(), runtime_.size());
  dataComm_ = runtime_.makeDataCommunicator(config_.dist.backend, useCuda ? "cuda" : "cpu",
                                            useCuda ? device_.index() : -1);
  at::manual_seed(static_cast<std::uint64_t>(config_.train.seed) * 1000003ULL + runtime_.rank());
  phases_ = PhaseClock::create(device_);
  std::string why;
  std::unique_ptr<GpuUtilisation> utilisation;
  if (isRoot()) utilisation = GpuUtilisation::open(device_, why);
  if (!why.empty()) trainLog().warn("GPU utilisation is not reported: {}", why);
  pace_ =
      std::make_unique<PaceWatch>(config_.train, isRoot(), runtime_.size(),
                                  threads * runtime_.topology().localSize, std::move(utilisation));
}

void Trainer::warnIfCpuPrecisionIsSlow() {
  if (!isRoot() || device_.is_cuda() || precision_ == DType::kFp32) return;
  const CpuPrecisionCost cost = measureCpuPrecision(precision_, config_.model.hidden);
  const std::string warning = cpuPrecisionWarning(precision_, cost);
  if (!warning.empty()) {
    trainLog().warn("{}", warning);
    return;
  }
  trainLog().info(
      "train.precision = {} pays on this CPU ({}): {:.2f}x the time of fp32 in the probe",
      toString(precision_), cost.flags, cost.slowdown());
}

bool Trainer::autoOnCpu() const {
  return !device_.is_cuda() && config_.train.precision == Precision::kAuto;
}

// Note [CPU auto precision]: after the restore, where the checkpoint's record is known and the
// model is as it will train; before the memory plan, which measures in the chosen precision.
void Trainer::settlePrecision() {
  if (!autoOnCpu()) {
    state_.trainedPrecision = precisionCode(precision_);
    state_.autoPrecisionCpu = 0;
    state_.autoPrecisionTrialRatio = 0;
    state_.autoPrecisionProbeRatio = 0;
    return;
  }
  CpuAutoInputs inputs;
  inputs.width = config_.model.hidden;
  const bool resident = data_->loadStats().residency != Residency::kStream;
  const data::Split split = resident ? data::Split::kTrain : data::Split::kVal;
  const std::int64_t items = std::min({microBatch(), kCpuAutoTrialItems, data_->evalCount(split)});
  if (carried_->count() > 0)
    inputs.notTried = "the model carries state from step to step, which a trial step would move";
  else if (items < 1)
    inputs.notTried = "no item to try on this rank";
  else
    inputs.trial = [this, split, items] {
      const TrialStep trial{*model_, *reducer_, *optimizer_, *scaler_, device_, precision_};
      return timeTrialSteps(
          trial, [&](std::int64_t n) { return data_->heaviestBatch(split, n, at::kFloat); }, items);
    };
  PrecisionChoice choice;
  dist::agreed(control(), "choosing the precision on the CPU",
               [&] { choice = chooseCpuAuto(state_, inputs); });
  // Rank 0's measurement decides for every rank: each rank timed its own trial.
  at::Tensor record = packTrainerState(state_);
  control().broadcast(record, 0, "train.precision = auto");
  const TrainerState chosen = unpackTrainerState(record);
  state_.trainedPrecision = chosen.trainedPrecision;
  state_.autoPrecisionCpu = chosen.autoPrecisionCpu;
  state_.autoPrecisionTrialRatio = chosen.autoPrecisionTrialRatio;
  state_.autoPrecisionProbeRatio = chosen.autoPrecisionProbeRatio;
  precision_ = precisionFromCode(state_.trainedPrecision).value_or(DType::kFp32);
  if (isRoot()) trainLog().info("{}", choice.reason);
}

void Trainer::lockRunDirectory() {
  dist::agreed(control(), "taking the run directory", [&] {
    if (!isRoot()) return;
    runLock_ = RunLock::acquire(
        {config_.run.dir, config_.run.lock, config_.run.lockWaitS, [] { return stopSeen() != 0; }});
  });
}

void Trainer::prepareRunDirectory() {
  checkpoints_ = std::make_unique<CheckpointDirectory>(config_.run.dir, config_.run.keepLast);
  dist::agreed(control(), "preparing the run directory", [&] {
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
  dist::agreed(control(), "looking for a checkpoint to resume", [&] {
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
      std::vector<std::string> unreadable;
      if (auto found = checkpoints_->loadNewest(checkConfigDescribesTensors, &unreadable)) {
        trainLog().info("resuming from {} (step {}, saved on {} ranks)", found->first,
                        found->second.trainer.step, found->second.worldSize);
        checkpoints_->setAside(unreadable, found->first);  // Note [Damaged checkpoints are ...]
        resumed = std::move(found->second);
        resumedFrom_ = found->first;
      }
    } else {
      resumed = readCheckpointFile(mode);
      checkConfigDescribesTensors(mode);
      resumedFrom_ = mode;
      trainLog().info("resuming from {} (step {})", mode, resumed->trainer.step);
    }
    if (!resumed) return;
    initFromYaml_ = resumed->initFromYaml;  // Note [Warm starts]: the origin stays with the run
    dataChanges_ = resumed->dataChanges;
  });
  // Every rank learns whether training resumes and where it stands (Note [Trainer state
  // table]).
  at::Tensor header = at::cat({at::full({1}, resumed ? 1 : 0, at::kLong),
                               packTrainerState(resumed ? resumed->trainer : TrainerState{})});
  control().broadcast(header, 0, "resume header");
  if (header[0].item<std::int64_t>() == 1) {
    state_ = unpackTrainerState(header.slice(0, 1));
    if (!isRoot()) resumed.emplace();  // placeholder: tensors arrive by broadcast
    resumed->trainer = state_;
  }
  return resumed;
}

namespace {

// train.recompute for the model just built (Note [Activation recomputation]); ConfigError for a
// kind that cannot take it.
void applyRecompute(const TrainConfig& train, model::Model& model) {
  if (train.recompute == RecomputeMode::kNone) return;
  const std::string mode = "train.recompute = " + toString(train.recompute);
  if (auto* segments = model::capability<model::Recomputable>(model)) {
    const std::int64_t every = train.recompute == RecomputeMode::kFull ? 1 : train.recomputeEvery;
    segments->setRecomputeEvery(every);
    const std::int64_t count = segments->segmentCount();
    trainLog().info(
        "{}: {} of {} {} run again in the backward pass instead of keeping their activations", mode,
        (count + every - 1) / every, count, segments->segmentName());
    return;
  }
  if (model.kind() == "mlp") {
    trainLog().info("{}: an mlp has no segments worth recomputing; nothing changes", mode);
    return;
  }
  if (model.kind() == "torchscript")
    throw ConfigError(mode +
                          " cannot apply to a TorchScript model: its forward is one call "
                          "megabatch cannot cut into segments",
                      "set train.recompute: none, or checkpoint inside the model before scripting "
                      "it (torch.utils.checkpoint)");
  throw ConfigError(
      mode + " is not available for model.kind = " + model.kind() +
          ": megabatch knows no segments of it to recompute (the gpt's transformer blocks, the "
          "lstm's time segments, and the gnn's and gat's layers are recomputed)",
      "set train.recompute: none");
}

}  // namespace

void Trainer::buildModelAndOptimizer() {
  // A model may be read from a file (model.kind = torchscript): every rank stops alike.
  dist::agreed(control(), "building the model", [&] {
    MemoryPhase phase("building the model");  // Note [Out of memory is an expected error]
    model_ = model::buildModel(config_.model, data_->info(),
                               static_cast<std::uint64_t>(config_.train.seed));
    model_->to(device_);
    applyRecompute(config_.train, *model_);
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
  trainLog().info("model {}: {} parameters in {} tensors, {} gradient buckets", model_->kind(),
                  count, tensors.size(), reducer_->bucketLayout().size());
}

// Rank 0 holds the checkpoint's tensors; it loads them, then every tensor is broadcast so all
// ranks continue from identical state.
void Trainer::restoreFrom(std::optional<CheckpointContent>& resumed) {
  if (resumed) {
    dist::agreed(control(), "restoring the checkpoint", [&] {
      if (!isRoot()) return;
      loadModelState(*model_, resumed->model, "checkpoint");
      optimizer_->loadState(resumed->optimizer, resumed->optimizerSteps);
      carried_->loadOnRoot(resumed->extra);
    });
  }
  dist::synchronizeParameters(*dataComm_, *model_);
  if (!resumed) return;
  // The scale is global (every rank holds the same): any rank count continues with it.
  scaler_->restore(state_.lossScale, state_.lossScaleGrowthTracker);
  if (scaler_->dynamic() && state_.lossScale > 0)
    trainLog().info("loss scale {:g} from the checkpoint ({} clean steps)", scaler_->scale(),
                    scaler_->growthTracker());
  else if (scaler_->dynamic())
    trainLog().info("the checkpoint holds no loss scale (an fp32 or bf16 run): starting at {:g}",
                    scaler_->scale());
  for (auto& [name, tensor] : optimizer_->state())
    dataComm_->broadcast(tensor, 0, "optimizer state " + name);
  at::Tensor steps = at::full({1}, static_cast<double>(resumed->optimizerSteps), at::kDouble);
  control().broadcast(steps, 0, "optimizer steps");
  carried_->broadcastFromRoot();
  restoreLogWindow(window_, resumed->logWindow, resumed->worldSize, control(), device_);
  if (!isRoot()) optimizer_->loadState(optimizer_->state(), std::llround(steps.item<double>()));
  resumed.reset();  // free the host copy
}

}  // namespace mb::train

namespace mb::train {
namespace {

std::int64_t tensorBytes(const at::Tensor& t) {
  return t.defined() ? t.numel() * static_cast<std::int64_t>(t.element_size()) : 0;
}

// The six parts of a plan, its budget and micro batch, and its evaluation batch and bytes, as
// one row of doubles per rank.
constexpr int kPlanFields = 10;
constexpr int kEvalBatchField = 8;

at::Tensor planRow(const MemoryPlan& p) {
  return at::tensor({static_cast<double>(p.parameters), static_cast<double>(p.gradients),
                     static_cast<double>(p.optimizer), static_cast<double>(p.data),
                     static_cast<double>(p.activations), static_cast<double>(p.workspace),
                     static_cast<double>(p.budget), static_cast<double>(p.microBatch),
                     static_cast<double>(p.evalBatch), static_cast<double>(p.evalBytes)},
                    at::kDouble);
}

MemoryPlan planFromRow(const at::Tensor& row, const MemoryPlan& like) {
  auto v = [&](int i) { return static_cast<std::int64_t>(row[i].item<double>()); };
  MemoryPlan p = like;
  p.parameters = v(0);
  p.gradients = v(1);
  p.optimizer = v(2);
  p.data = v(3);
  p.activations = v(4);
  p.workspace = v(5);
  p.budget = v(6);
  p.microBatch = v(7);
  p.evalBatch = v(8);
  p.evalBytes = v(9);
  return p;
}

// train.micro_batch: auto (Note [Automatic micro-batch]): every rank's search, then the smallest
// choice for all, with one all-reduce; `plan` ends at the agreed size.
std::int64_t agreeOnMicroBatch(dist::Communicator& control, const MicroBatchChoice& choice,
                               const std::function<MemoryPlan(std::int64_t)>& planAt,
                               MemoryPlan& plan) {
  at::Tensor smallest = at::full({1}, static_cast<double>(choice.microBatch), at::kDouble);
  control.allReduce(smallest, dist::ReduceOp::kMin, "train.micro_batch: auto");
  const std::int64_t agreed = std::llround(smallest.item<double>());
  dist::agreed(control, "train.micro_batch: auto", [&] {
    if (choice.microBatch < 1)
      throw RuntimeError(
          "train.micro_batch = auto: not even a micro-batch of 1 sample fits this rank's memory "
          "budget of " +
              str::humanBytes(static_cast<double>(plan.budget)) + " (" + plan.budgetSource +
              "): parameters, gradients, optimizer state and resident data "
              "take " +
              str::humanBytes(static_cast<double>(plan.fixedBytes())) +
              "; trials: " + choice.describeTrials(),
          "raise train.memory_budget_mb, or use train.recompute: blocks (gpt), train.precision "
          "bf16 or fp16, data.residency: stream, or more ranks");
    if (!choice.trials.empty()) plan = planAt(agreed);
  });
  plan.microBatch = agreed;
  return agreed;
}

}  // namespace

void Trainer::planEvalBatch(MemoryPlan& plan) {
  plan.evalBatch = evalBatchLimit(plan.microBatch, device_);
  const std::int64_t items = data_->evalCount(data::Split::kVal);
  // A model that carries state from step to step would move it in a trial forward.
  if (carried_->count() > 0 || plan.budget <= 0 || items < 1) return;
  // An evaluation may take what a training step takes: a budget the step is past (a warning,
  // not an error) does not stop it.
  const std::int64_t budget = std::max(plan.budget, plan.total());
  const EvalBatchTrial trial{*model_,
                             [this](std::int64_t count) {
                               return data_->heaviestBatch(data::Split::kVal, count, at::kFloat);
                             },
                             items,
                             device_,
                             precision_,
                             plan.fixedBytes(),
                             budget};
  EvalBatchChoice choice;
  const auto start = std::chrono::steady_clock::now();
  dist::agreed(control(), "the memory plan's evaluation trial",
               [&] { choice = chooseEvalBatch(trial, plan.evalBatch); });
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  trainLog().debug("evaluation batch: rank {} tried {} in {:.2f} s", runtime_.rank(), choice.trials,
                   took.count());
  plan.evalBatch = choice.batch;
  plan.evalBytes = choice.bytes;
  evalRoomBytes_ = choice.roomBytes;
  if (choice.bytes > 0)
    evalBytesPerSample_ = static_cast<double>(choice.bytes) / static_cast<double>(choice.batch);
  if (!device_.is_cuda()) evalBudgetBytes_ = budget;
  stepVariableBytes_ = plan.activations + plan.workspace;
}

void Trainer::planMemory(std::int64_t rssAtStart) {
  rssAtStart_ = rssAtStart;
  MemoryPlan plan;
  plan.device = device_.is_cuda() ? "GPU" : "CPU";
  plan.microBatch = microBatch();  // auto: the largest, this rank's share of the global batch
  for (const auto& p : model_->parameters()) {
    plan.parameters += tensorBytes(p);
    if (p.requires_grad()) plan.gradients += tensorBytes(p);  // the reducer's bucket buffers
  }
  for (const auto& [name, t] : optimizer_->state())
    plan.optimizer += tensorBytes(t);
  plan.data = data_->residentBytes();
  setMemoryBudget(plan, config_.train.memoryBudgetMb, device_, runtime_.topology().localSize);
  // The trial's micro-batch: the heaviest of this rank's train items (resident data), else of its
  // validation items: the graphs with the most nodes and edges, the dates with the most
  // instruments (ShardedData::heaviestBatch). A model that carries state from step to step
  // would move it in a forward: not tried.
  const bool resident = data_->loadStats().residency != Residency::kStream;
  const data::Split split = resident ? data::Split::kTrain : data::Split::kVal;
  const std::int64_t available = data_->evalCount(split);
  const bool automatic = config_.train.microBatch == kAutoMicroBatch;
  const TrialStep trial{*model_,
                        *reducer_,
                        *optimizer_,
                        *scaler_,
                        device_,
                        precision_,
                        automatic ? std::max<std::int64_t>(1, plan.budget - plan.fixedBytes()) : 0};
  std::map<std::int64_t, MemoryPlan> measured;  // by micro-batch
  auto planAt = [&](std::int64_t size) {
    if (measured.count(size) == 0) {
      MemoryPlan p = plan;
      p.microBatch = size;
      const std::int64_t items = std::min(size, available);
      measureTrialStep(trial, data_->heaviestBatch(split, items, at::kFloat), p);
      // Fewer items on this rank than the micro-batch: taken as proportional.
      p.activations = p.activations * size / items;
      p.workspace = p.workspace * size / items;
      measured[size] = p;
    }
    return measured[size];
  };
  auto variableBytesAt = [&](std::int64_t size) {
    TrialOutcome outcome;
    try {
      const MemoryPlan p = planAt(size);
      outcome.variableBytes = p.activations + p.workspace;
    } catch (const AllocationCapExceeded&) {
      takeFailedPhase();  // expected here: the search tries a smaller size
      outcome.overCap = true;
    } catch (const std::exception& e) {
      if (!asOutOfMemory(e)) throw;
      takeFailedPhase();
      releaseCachedDeviceMemory(device_);
      outcome.ranOut = true;
    }
    return outcome;
  };
  std::string skipped;
  MicroBatchChoice choice;
  choice.microBatch = plan.microBatch;  // when nothing can be tried
  const auto trialsStart = std::chrono::steady_clock::now();
  dist::agreed(control(), "the memory plan's trial step", [&] {
    if (carried_->count() > 0)
      skipped = "the model carries state from step to step";
    else if (available < 1)
      skipped = "no item to try on this rank";
    else if (automatic && plan.budget > 0)
      choice = searchMicroBatch(plan.microBatch, plan.fixedBytes(), plan.budget, variableBytesAt);
    else
      plan = planAt(plan.microBatch);
  });
  if (automatic) {
    const std::int64_t share = plan.microBatch;
    config_.train.autoMicroBatch = agreeOnMicroBatch(control(), choice, planAt, plan);
    const std::int64_t steps = (share + plan.microBatch - 1) / plan.microBatch;
    std::string tried = choice.trials.empty()
                            ? "nothing tried here (" +
                                  (skipped.empty() ? "no memory budget is known" : skipped) + ")"
                            : "tried " + choice.describeTrials();
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - trialsStart;
    trainLog().info(
        "train.micro_batch = auto: rank {} {} in {:.2f} s; every rank runs micro batch {}, {} per "
        "step of up to {} samples per rank (accumulation keeps train.global_batch = {})",
        runtime_.rank(), tried, took.count(), plan.microBatch, steps, share,
        config_.train.globalBatch);
  }
  planEvalBatch(plan);
  at::Tensor rows = control().allGather(planRow(plan), "memory plan").reshape({-1, kPlanFields});
  at::Tensor totals = rows.slice(1, 0, 6).sum(1);
  const auto most = static_cast<int>(totals.argmax().item<std::int64_t>());
  MemoryPlan worst = planFromRow(rows[most], plan);
  // Every rank evaluates with the smallest evaluation batch of all (Note [Evaluation batch]).
  const auto fewest =
      static_cast<int>(rows.select(1, kEvalBatchField).argmin().item<std::int64_t>());
  const MemoryPlan smallestEval = planFromRow(rows[fewest], plan);
  evalBatch_ = worst.evalBatch = smallestEval.evalBatch;
  worst.evalBytes = smallestEval.evalBytes;
  rows[most][kEvalBatchField] = static_cast<double>(worst.evalBatch);
  rows[most][kEvalBatchField + 1] = static_cast<double>(worst.evalBytes);
  setMemoryPlanSummary(worst.describe());
  trainLog().info("memory plan (rank {}, the most of {}): {}{}", most, runtime_.size(),
                  worst.describe(),
                  skipped.empty() ? "" : "; activations not measured: " + skipped);
  if (worst.budget > 0 && worst.total() > worst.budget)
    trainLog().warn(
        "the memory plan of rank {} exceeds its budget: {} of {}; a smaller train.micro_batch "
        "(accumulation keeps train.global_batch), train.precision bf16 or fp16, or "
        "data.residency: stream would fit it",
        most, str::humanBytes(static_cast<double>(worst.total())),
        str::humanBytes(static_cast<double>(worst.budget)));
  // The steps' peaks (mem_peak_mb, gpu_mem_peak_mb in metrics.jsonl) count from here, not from
  // the trial's.
  resetProcessMemoryPeak();
  const std::int64_t rssAtPlan = processMemoryBytes();
  if (device_.is_cuda()) resetDevicePeak(device_);
  if (!metrics_) return;
  JsonRecord record;
  record.add("event", "memory_plan")
      .add("step", state_.step)
      .add("rank", static_cast<std::int64_t>(most));
  static const char* kNames[] = {
      "parameters_bytes", "gradients_bytes", "optimizer_bytes", "data_bytes", "activations_bytes",
      "workspace_bytes",  "budget_bytes",    "micro_batch",     "eval_batch", "eval_bytes"};
  for (int i = 0; i < kPlanFields; ++i)
    record.add(kNames[i], static_cast<std::int64_t>(rows[most][i].item<double>()));
  record.add("total_bytes", worst.total());
  // What the process held before data and model: mem_peak_mb of the steps minus this is what
  // the run held at its peak, to set against total_bytes.
  record.add("rss_at_start_bytes", rssAtStart);
  record.add("rss_at_plan_bytes", rssAtPlan);  // before step 1: what the steps' peak grows from
  metrics_->write(record);
}

}  // namespace mb::train
