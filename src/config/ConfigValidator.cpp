#include "config/ConfigValidator.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <set>
#include <sstream>

#include "common/Error.h"
#include "common/Strings.h"
#include "config/ConfigKinds.h"

namespace mb {
namespace {

using Problem = std::optional<std::string>;
using Rule = std::function<Problem(const Config&)>;

template <class T>
std::string show(T value) {
  std::ostringstream text;
  text << value;
  return text.str();
}

// --- generic rules ---------------------------------------------------------------

Rule minimum(const char* key, std::function<double(const Config&)> get, double low) {
  return [=](const Config& c) -> Problem {
    double value = get(c);
    if (value < low) return std::string(key) + " = " + show(value) + " must be >= " + show(low);
    return std::nullopt;
  };
}

Rule above(const char* key, std::function<double(const Config&)> get, double low) {
  return [=](const Config& c) -> Problem {
    double value = get(c);
    if (!(value > low)) return std::string(key) + " = " + show(value) + " must be > " + show(low);
    return std::nullopt;
  };
}

Rule openRange(const char* key, std::function<double(const Config&)> get, double low, double high) {
  return [=](const Config& c) -> Problem {
    double value = get(c);
    if (!(value > low && value < high))
      return std::string(key) + " = " + show(value) + " must be in (" + show(low) + ", " +
             show(high) + ")";
    return std::nullopt;
  };
}

Rule halfOpenRange(const char* key, std::function<double(const Config&)> get, double low,
                   double high) {
  return [=](const Config& c) -> Problem {
    double value = get(c);
    if (!(value >= low && value < high))
      return std::string(key) + " = " + show(value) + " must be in [" + show(low) + ", " +
             show(high) + ")";
    return std::nullopt;
  };
}

#define MB_GET(member) [](const Config& c) { return static_cast<double>(c.member); }

// --- rules across fields -----------------------------------------------------------

Problem splitFractionsSumToOne(const Config& c) {
  const auto& s = c.data.split;
  double sum = s.trainFraction + s.valFraction + s.testFraction;
  if (std::fabs(sum - 1.0) > 1e-6)
    return "data.split fractions must sum to 1: train_fraction " + show(s.trainFraction) +
           " + val_fraction " + show(s.valFraction) + " + test_fraction " + show(s.testFraction) +
           " = " + show(sum);
  return std::nullopt;
}

// The fraction rules hold where the splits are by fractions (Note [Splits by time]).
Rule unlessByTime(Rule rule) {
  return
      [rule](const Config& c) -> Problem { return c.data.split.byTime() ? std::nullopt : rule(c); };
}

// Note [Times as users write them]: every cut parses in data.time_unit, train_until is set, and
// the cuts come in time order.
Problem timeCutsReadable(const Config& c) {
  const SplitConfig& s = c.data.split;
  if (!s.byTime()) return std::nullopt;
  const std::pair<const char*, const std::string*> cuts[] = {
      {"data.split.train_from", &s.trainFrom},
      {"data.split.train_until", &s.trainUntil},
      {"data.split.val_from", &s.valFrom},
      {"data.split.val_until", &s.valUntil}};
  std::vector<std::pair<const char*, std::int64_t>> given;
  for (const auto& [key, text] : cuts) {
    if (text->empty()) continue;
    std::string problem;
    std::optional<std::int64_t> value = parseTimeText(*text, c.data.timeUnit, &problem);
    if (!value) return std::string(key) + ": " + problem;
    given.emplace_back(key, *value);
  }
  if (!s.trainUntil.empty() && !s.valFrom.empty())
    return "data.split.train_until and data.split.val_from are both set: val_from replaces "
           "train_until (train ends before val_from, less the embargo)";
  if (s.trainUntil.empty() && s.valFrom.empty())
    return "data.split.train_until is not set: a split by time needs it (train before it, "
           "validate from it); data.split.train_from and val_until only narrow it";
  for (std::size_t i = 1; i < given.size(); ++i) {
    // val_from = val_until leaves val empty on purpose (a walk with walk.val = 0).
    const bool emptyVal = std::string(given[i - 1].first) == "data.split.val_from" &&
                          given[i - 1].second == given[i].second;
    if (given[i - 1].second >= given[i].second && !emptyVal)
      return std::string(given[i - 1].first) + " = " +
             formatTime(given[i - 1].second, c.data.timeUnit) + " must come before " +
             given[i].first + " = " + formatTime(given[i].second, c.data.timeUnit);
  }
  return std::nullopt;
}

Problem timeCutsNeedTime(const Config& c) {
  if (!c.data.split.byTime()) return std::nullopt;
  const LayoutRules* layout = findLayoutRules(c.data.layout);
  if (layout == nullptr || layout->hasTime) return std::nullopt;
  return "data.layout = " + c.data.layout +
         " has no timestamps, so it cannot be split by time (data.split.train_until): use "
         "data.split.train_fraction, val_fraction and test_fraction";
}

Problem horizonNeedsTime(const Config& c) {
  if (c.data.horizon == 0) return std::nullopt;
  const LayoutRules* layout = findLayoutRules(c.data.layout);
  if (layout == nullptr || layout->hasTime) return std::nullopt;
  return "data.layout = " + c.data.layout +
         " has no time order, so a target cannot look ahead (data.horizon = " +
         show(c.data.horizon) + "): leave data.horizon at 0";
}

Problem initFromOptimizerNeedsInitFrom(const Config& c) {
  if (c.train.initFromOptimizer && c.train.initFrom.empty())
    return "train.init_from_optimizer = true needs train.init_from (the run or checkpoint "
           "whose optimizer moments to keep)";
  return std::nullopt;
}

Problem microBatchFitsGlobal(const Config& c) {
  if (c.train.microBatch > c.train.globalBatch)
    return "train.micro_batch = " + show(c.train.microBatch) +
           " is larger than train.global_batch = " + show(c.train.globalBatch);
  return std::nullopt;
}

Problem microBatchIsCountOrAuto(const Config& c) {
  if (c.train.microBatch < 0 && c.train.microBatch != kAutoMicroBatch)
    return "train.micro_batch = " + show(c.train.microBatch) + " must be >= 0, or auto";
  if (c.train.microBatch == kAutoMicroBatch && c.model.stateful)
    return "train.micro_batch = auto measures trial steps, which would move the hidden state "
           "model.stateful = true carries: set train.micro_batch by hand";
  if (c.train.microBatch == kAutoMicroBatch && !c.train.memoryPlan)
    return "train.micro_batch = auto is chosen by the memory plan: set train.memory_plan = true";
  return std::nullopt;
}

Problem residentDtypeOffered(const Config& c) {
  if (c.data.residentDtype == DType::kFp16)
    return "data.resident_dtype = fp16 is not offered: keep resident features in fp32 or bf16 "
           "(train.precision = fp16 casts them in the forward pass)";
  return std::nullopt;
}

Problem somethingToTrain(const Config& c) {
  if (c.train.maxSteps == 0 && c.train.epochs == 0)
    return "train.max_steps and train.epochs are both 0: set one of them";
  return std::nullopt;
}

// The layout's and the model's own rules, and whether the model trains on the layout.
Problem layoutRules(const Config& c) {
  const LayoutRules* layout = findLayoutRules(c.data.layout);
  if (layout == nullptr)
    return "data.layout = '" + c.data.layout + "' is not one of " + str::join(layoutChoices(), "|");
  return layout->checkConfig ? layout->checkConfig(c) : std::nullopt;
}

Problem modelRules(const Config& c) {
  const ModelRules* kind = findModelRules(c.model.kind);
  if (kind == nullptr)
    return "model.kind = '" + c.model.kind + "' is not one of " + str::join(modelChoices(), "|");
  const auto& layouts = kind->layouts;
  if (std::find(layouts.begin(), layouts.end(), c.data.layout) == layouts.end())
    return "model.kind = " + kind->name + " needs data.layout = " + str::join(layouts, " or ") +
           " (got " + c.data.layout + ")";
  return kind->checkConfig ? kind->checkConfig(c) : std::nullopt;
}

bool isLanguageModel(const Config& c) {
  const ModelRules* kind = findModelRules(c.model.kind);
  return kind != nullptr && kind->languageModel;
}

Problem classesWithinLimit(const Config& c) {
  if (c.model.numClasses <= kMaxClasses) return std::nullopt;
  return "model.num_classes = " + std::to_string(c.model.numClasses) + " is more than the " +
         std::to_string(kMaxClasses) + " classes megabatch supports (0 = from the labels)";
}

Problem lossMatchesTask(const Config& c) {
  bool classification = c.model.task == Task::kClassification;
  if (classification && (c.model.loss == LossKind::kMse || c.model.loss == LossKind::kHuber))
    return "model.loss = " + std::string(c.model.loss == LossKind::kMse ? "mse" : "huber") +
           " does not fit model.task = classification (use cross_entropy)";
  if (!classification && c.model.loss == LossKind::kCrossEntropy && !isLanguageModel(c))
    return "model.loss = cross_entropy needs model.task = classification";
  return std::nullopt;
}

Problem statefulModelCarriesState(const Config& c) {
  const ModelRules* kind = findModelRules(c.model.kind);
  if (c.model.stateful && kind != nullptr && !kind->carriesState) {
    std::vector<std::string> stateful;
    for (const auto& k : configKinds().models) {
      if (k.carriesState) stateful.push_back(k.name);
    }
    return "model.stateful = true is only for model.kind = " + str::join(stateful, " or ");
  }
  if (c.model.stateful && c.data.shuffle)
    return "model.stateful = true carries hidden state along time: set data.shuffle = false";
  return std::nullopt;
}

// Note [Lane order] (GlobalOrder.h): one item per lane per step, so G = V x L; lanes jump over
// whole shards at every step, which the chunks of stream residency cannot hold.
Problem statefulLanesFillTheBatch(const Config& c) {
  if (!c.model.stateful) return std::nullopt;
  const std::int64_t shards = c.data.canonicalShards;
  const std::int64_t batch = c.train.globalBatch;
  if (c.data.residency == Residency::kStream)
    return "model.stateful = true cannot use data.residency = stream (every step takes one item "
           "from each lane, spread over whole shards, not from one chunk): set data.residency = "
           "host or device";
  if (shards < 1 || batch < 1) return std::nullopt;  // reported by their own rules
  if (c.model.lanes == 0 && batch % shards != 0)
    return "model.stateful = true takes one item per lane per step, and lanes per shard = "
           "train.global_batch / data.canonical_shards, but train.global_batch = " +
           show(batch) + " is not a multiple of data.canonical_shards = " + show(shards) +
           ": set train.global_batch to a multiple of data.canonical_shards (e.g. " +
           show((batch / shards + 1) * shards) + ")";
  if (c.model.lanes > 0 && batch != shards * c.model.lanes)
    return "model.stateful = true takes one item per lane per step, so train.global_batch = " +
           show(batch) + " must equal data.canonical_shards x model.lanes = " + show(shards) +
           " x " + show(c.model.lanes) +
           ": set train.global_batch = " + show(shards * c.model.lanes) + ", or model.lanes = 0";
  return std::nullopt;
}

Problem classWeightsSupported(const Config& c) {
  if (c.model.classWeights == ClassWeights::kNone) return std::nullopt;
  if (c.model.task != Task::kClassification)
    return "model.class_weights = balanced needs model.task = classification";
  const ModelRules* kind = findModelRules(c.model.kind);
  if (kind != nullptr && !kind->classWeights) {
    std::vector<std::string> weighted;
    for (const auto& k : configKinds().models) {
      if (k.classWeights) weighted.push_back(k.name);
    }
    return "model.class_weights = balanced is only for model.kind = " + str::join(weighted, " or ");
  }
  return std::nullopt;
}

Problem logLevelKnown(const Config& c) {
  static const std::set<std::string> levels{"trace", "debug",    "info", "warn",
                                            "error", "critical", "off"};
  if (!levels.count(c.run.logLevel))
    return "run.log_level = '" + c.run.logLevel + "' must be one of trace|debug|info|warn|error";
  return std::nullopt;
}

Problem resumeIsModeOrPath(const Config& c) {
  if (c.run.resume.empty()) return "run.resume is empty: use auto, never, or a checkpoint path";
  return std::nullopt;
}

Problem runDirSet(const Config& c) {
  if (c.run.dir.empty()) return "run.dir is empty: name a directory for logs and checkpoints";
  return std::nullopt;
}

Problem lockModeKnown(const Config& c) {
  const std::string& mode = c.run.lock;
  if (mode != "auto" && mode != "kernel" && mode != "file")
    return "run.lock = '" + mode + "' must be auto, kernel or file";
  return std::nullopt;
}

Problem earlyStoppingMetricKnown(const Config& c) {
  const std::string& m = c.train.earlyStopping.metric;
  if (!str::startsWith(m, "val_"))
    return "train.early_stopping.metric = '" + m +
           "' must be a validation metric: val_loss, val_mse, val_mae, val_accuracy, val_ic, "
           "val_rank_ic, val_hit_rate, val_ic_ratio, val_log_loss";
  // Note [Forecast metrics]: the ones that grow as the model gets better.
  for (const char* higher : {"accuracy", "ic", "rank_ic", "hit_rate", "ic_ratio", "f1"}) {
    if (m == std::string("val_") + higher && c.train.earlyStopping.mode == MetricMode::kMin)
      return "train.early_stopping.metric = " + m +
             " is higher for a better model, but train.early_stopping.mode = min would keep "
             "the worst: set train.early_stopping.mode = max";
  }
  return std::nullopt;
}

std::vector<Rule> buildRules() {
  return {
      runDirSet,
      resumeIsModeOrPath,
      logLevelKnown,
      lockModeKnown,
      minimum("run.lock_wait_s", MB_GET(run.lockWaitS), 0.0),
      minimum("run.keep_last", MB_GET(run.keepLast), 1),
      minimum("run.checkpoint_every", MB_GET(run.checkpointEvery), 0),
      minimum("run.checkpoint_every_s", MB_GET(run.checkpointEveryS), 0.0),
      minimum("run.log_every", MB_GET(run.logEvery), 1),
      minimum("data.canonical_shards", MB_GET(data.canonicalShards), 1),
      unlessByTime(openRange("data.split.train_fraction", MB_GET(data.split.trainFraction), 0.0,
                             1.0 + 1e-12)),
      unlessByTime(
          halfOpenRange("data.split.val_fraction", MB_GET(data.split.valFraction), 0.0, 1.0)),
      unlessByTime(
          halfOpenRange("data.split.test_fraction", MB_GET(data.split.testFraction), 0.0, 1.0)),
      unlessByTime(splitFractionsSumToOne),
      timeCutsReadable,
      minimum("data.split.embargo", MB_GET(data.split.embargo), -1),
      minimum("data.horizon", MB_GET(data.horizon), 0),
      minimum("walk.val", MB_GET(walk.val), 0),
      minimum("walk.train_window", MB_GET(walk.trainWindow), 0),
      minimum("walk.retrain_every", MB_GET(walk.retrainEvery), 1),
      minimum("data.context", MB_GET(data.context), 1),
      openRange("data.memory_fraction", MB_GET(data.memoryFraction), 0.0, 1.0 + 1e-12),
      minimum("data.memory_budget_mb", MB_GET(data.memoryBudgetMb), 0),
      minimum("data.stream_chunk_items", MB_GET(data.streamChunkItems), 1),
      residentDtypeOffered,
      layoutRules,
      timeCutsNeedTime,
      horizonNeedsTime,
      minimum("model.hidden", MB_GET(model.hidden), 1),
      minimum("model.layers", MB_GET(model.layers), 1),
      minimum("model.heads", MB_GET(model.heads), 1),
      minimum("model.head_hidden", MB_GET(model.headHidden), 0),
      halfOpenRange("model.dropout", MB_GET(model.dropout), 0.0, 1.0),
      minimum("model.huber_delta", MB_GET(model.huberDelta), 1e-12),
      minimum("model.num_classes", MB_GET(model.numClasses), 0),
      classesWithinLimit,
      minimum("model.lanes", MB_GET(model.lanes), 0),
      minimum("model.lane_stride", MB_GET(model.laneStride), 1),
      minimum("model.vocab_size", MB_GET(model.vocabSize), 0),
      modelRules,
      lossMatchesTask,
      statefulModelCarriesState,
      statefulLanesFillTheBatch,
      classWeightsSupported,
      minimum("train.global_batch", MB_GET(train.globalBatch), 1),
      microBatchIsCountOrAuto,
      minimum("train.recompute_every", MB_GET(train.recomputeEvery), 1),
      minimum("train.memory_budget_mb", MB_GET(train.memoryBudgetMb), 0.0),
      microBatchFitsGlobal,
      minimum("train.max_steps", MB_GET(train.maxSteps), 0),
      minimum("train.epochs", MB_GET(train.epochs), 0),
      somethingToTrain,
      minimum("train.grad_clip", MB_GET(train.gradClip), 0),
      minimum("train.eval_every", MB_GET(train.evalEvery), 0),
      minimum("train.eval_batches", MB_GET(train.evalBatches), 0),
      minimum("train.max_bad_steps", MB_GET(train.maxBadSteps), 1),
      above("train.loss_scale.init", MB_GET(train.lossScale.init), 0.0),
      above("train.loss_scale.growth_factor", MB_GET(train.lossScale.growthFactor), 1.0),
      openRange("train.loss_scale.backoff_factor", MB_GET(train.lossScale.backoffFactor), 0.0, 1.0),
      minimum("train.loss_scale.growth_interval", MB_GET(train.lossScale.growthInterval), 1),
      minimum("train.loss_scale.fixed", MB_GET(train.lossScale.fixed), 0),
      above("train.loss_scale.min", MB_GET(train.lossScale.min), 0.0),
      minimum("train.seed", MB_GET(train.seed), 0),
      minimum("train.threads", MB_GET(train.threads), 0),
      halfOpenRange("train.gpu_util_warn", MB_GET(train.gpuUtilWarn), 0.0, 100.0 + 1e-9),
      minimum("train.early_stopping.patience", MB_GET(train.earlyStopping.patience), 0),
      minimum("train.early_stopping.min_delta", MB_GET(train.earlyStopping.minDelta), 0),
      earlyStoppingMetricKnown,
      initFromOptimizerNeedsInitFrom,
      openRange("optim.lr", MB_GET(optim.lr), 0.0, 10.0),
      minimum("optim.weight_decay", MB_GET(optim.weightDecay), 0),
      halfOpenRange("optim.beta1", MB_GET(optim.beta1), 0.0, 1.0),
      halfOpenRange("optim.beta2", MB_GET(optim.beta2), 0.0, 1.0),
      openRange("optim.eps", MB_GET(optim.eps), 0.0, 1.0),
      halfOpenRange("optim.momentum", MB_GET(optim.momentum), 0.0, 1.0),
      minimum("optim.warmup_steps", MB_GET(optim.warmupSteps), 0),
      halfOpenRange("optim.min_lr_ratio", MB_GET(optim.minLrRatio), 0.0, 1.0 + 1e-12),
      minimum("dist.bucket_mb", MB_GET(dist.bucketMb), 0.001),
      minimum("dist.first_bucket_mb", MB_GET(dist.firstBucketMb), 0.001),
      minimum("dist.timeout_s", MB_GET(dist.timeoutS), 1),
  };
}

#undef MB_GET

}  // namespace

std::vector<std::string> validateConfig(const Config& config) {
  static const std::vector<Rule> rules = buildRules();
  std::vector<std::string> problems;
  for (const auto& rule : rules) {
    if (Problem problem = rule(config)) problems.push_back(*problem);
  }
  return problems;
}

void requireValidConfig(const Config& config) {
  std::vector<std::string> problems = validateConfig(config);
  if (problems.empty()) return;
  std::string message = problems.size() == 1
                            ? "invalid config: " + problems.front()
                            : "invalid config (" + std::to_string(problems.size()) +
                                  " problems):\n  - " + str::join(problems, "\n  - ");
  throw ConfigError(message,
                    "fix the keys named above in the config file or the key=value overrides");
}

}  // namespace mb
