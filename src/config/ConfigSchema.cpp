#include "config/ConfigSchema.h"

#include <algorithm>
#include <set>

#include <yaml-cpp/yaml.h>

#include "common/Error.h"
#include "common/Strings.h"
#include "config/ConfigCodecs.h"
#include "config/ConfigKinds.h"

namespace mb {
namespace {

using detail::Codec;
using detail::enumName;
using detail::pickName;

// --- field table ---------------------------------------------------------------

template <class Access>
ConfigField makeField(std::string key, Access access, std::string help,
                      std::vector<std::string> aliases = {}) {
  using T = std::decay_t<decltype(access(std::declval<Config&>()))>;
  ConfigField field;
  field.type = Codec<T>::type();
  field.help = std::move(help);
  field.aliases = std::move(aliases);
  field.assign = [key, access](Config& config, const YAML::Node& value) {
    access(config) = Codec<T>::decode(key, value);
  };
  field.emit = [access](const Config& config) {
    return Codec<T>::encode(access(const_cast<Config&>(config)));
  };
  field.key = std::move(key);
  return field;
}

#define MB_FIELD(key, member, ...) \
  makeField(                       \
      key, [](Config & c) -> auto& { return c.member; }, __VA_ARGS__)

// A string field whose values are the names a registry lists (data.layout, model.kind), so a
// new layout or model is one registry entry, not an edit here.
template <class Access>
ConfigField makeChoiceField(std::string key, Access access, std::vector<std::string> (*names)(),
                            std::string help, std::vector<std::string> aliases = {}) {
  ConfigField field = makeField(key, access, std::move(help), std::move(aliases));
  field.type = str::join(names(), "|");
  field.assign = [key, access, names](Config& config, const YAML::Node& value) {
    std::vector<std::string> choices = names();
    access(config) = choices[pickName(key, value, choices)];
  };
  return field;
}

#define MB_CHOICE_FIELD(key, member, names, ...) \
  makeChoiceField(                               \
      key, [](Config & c) -> auto& { return c.member; }, names, __VA_ARGS__)

// An integer field that also takes `auto` (held as kAutoMicroBatch), and prints it back so.
template <class Access>
ConfigField makeCountOrAutoField(std::string key, Access access, std::string help,
                                 std::vector<std::string> aliases = {}) {
  ConfigField field = makeField(key, access, std::move(help), std::move(aliases));
  field.type = "int|auto";
  field.assign = [key, access](Config& config, const YAML::Node& value) {
    if (value.IsScalar() && value.Scalar() == "auto") {
      access(config) = kAutoMicroBatch;
      return;
    }
    const std::int64_t count = Codec<std::int64_t>::decode(key + " (or auto)", value);
    if (count < 0) detail::badValue(key, value, "an integer >= 0, or auto");  // -1 is not auto
    access(config) = count;
  };
  field.emit = [access](const Config& config) {
    const std::int64_t value = access(const_cast<Config&>(config));
    return value == kAutoMicroBatch ? YAML::Node("auto") : Codec<std::int64_t>::encode(value);
  };
  return field;
}

std::vector<ConfigField> buildFields();

std::vector<std::string> walkPeriodChoices() {
  return {"day", "week", "month", "quarter", "year"};
}

// A run splits by fractions or by time, never both: the resolved config shows the keys of the
// way it uses (Note [Splits by time]), so that it loads again as a user's config.
void showOnlyTheSplitInUse(std::vector<ConfigField>& fields) {
  for (auto& field : fields) {
    if (str::endsWith(field.key, "_fraction") && str::startsWith(field.key, "data.split."))
      field.shown = [](const Config& c) { return !c.data.split.byTime(); };
    if (field.key == "data.split.train_from" || field.key == "data.split.train_until" ||
        field.key == "data.split.val_until" || field.key == "data.split.val_from")
      field.shown = [](const Config& c) { return c.data.split.byTime(); };
  }
}

std::vector<ConfigField> buildFields() {
  return {
      // run
      MB_FIELD("run.dir", run.dir, "run directory: config, metrics, logs, checkpoints",
               {"output_dir", "out_dir", "directory"}),
      MB_FIELD("run.resume", run.resume,
               "auto (continue from checkpoints/latest), never, or a checkpoint path"),
      MB_FIELD("run.keep_last", run.keepLast, "step checkpoints kept besides best.h5",
               {"keep", "max_checkpoints"}),
      MB_FIELD("run.checkpoint_every", run.checkpointEvery,
               "steps between checkpoints; 0 = epoch ends and the end",
               {"save_every", "ckpt_every"}),
      MB_FIELD("run.checkpoint_every_s", run.checkpointEveryS,
               "seconds between checkpoints as well (rank 0's clock, the same step on every "
               "rank); 0 = off",
               {"train_time_interval", "save_every_s"}),
      MB_FIELD("run.log_every", run.logEvery, "steps between progress lines and metrics records",
               {"print_every"}),
      MB_FIELD("run.log_level", run.logLevel, "trace|debug|info|warn|error", {"verbosity"}),
      MB_FIELD("run.progress", run.progress, "auto (bar on a TTY), bar, or lines"),
      MB_FIELD("run.lock", run.lock,
               "how a trainer holds run.dir: auto (a file-system lock where every host sees it, "
               "else a lock file with a heartbeat), kernel, or file"),
      MB_FIELD("run.lock_wait_s", run.lockWaitS,
               "seconds to wait for a trainer on run.dir that is ending (a requeue overlap)"),
      MB_FIELD("run.tensorboard", run.tensorboard,
               "write TensorBoard event files into run.dir/tensorboard (rank 0)",
               {"tensorboard_logger", "tb"}),
      MB_FIELD("run.allow_data_change", run.allowDataChange,
               "resume even when the data changed in a way that moves the train or val split "
               "(recorded in the metrics and checkpoints)"),
      // data
      MB_FIELD("data.path", data.path, "HDF5 data file", {"file", "dataset", "data_path"}),
      MB_CHOICE_FIELD("data.layout", data.layout, layoutChoices,
                      "what a sample is in the file (docs/data-format.md)"),
      MB_FIELD("data.residency", data.residency,
               "where the rank's shard lives: auto, device, host, stream",
               {"resident", "placement"}),
      MB_FIELD("data.resident_dtype", data.residentDtype,
               "dtype of resident features: fp32 or bf16"),
      MB_FIELD("data.canonical_shards", data.canonicalShards,
               "V: canonical train shards (max ranks to resume on)", {"shards", "num_shards"}),
      MB_FIELD("data.shuffle", data.shuffle, "shuffle within each shard every epoch"),
      MB_FIELD("data.split.train_fraction", data.split.trainFraction,
               "earliest share of rows for training", {"train"}),
      MB_FIELD("data.split.val_fraction", data.split.valFraction, "next share for validation",
               {"val", "validation"}),
      MB_FIELD("data.split.test_fraction", data.split.testFraction, "last share for test",
               {"test"}),
      MB_FIELD("data.split.embargo", data.split.embargo,
               "rows skipped between splits; -1 = one window", {"gap"}),
      MB_FIELD("data.split.train_from", data.split.trainFrom,
               "split by time: leave out samples before this time (ISO-8601 UTC date or "
               "date-time, or a number in data.time_unit)",
               {"start", "from"}),
      MB_FIELD("data.split.train_until", data.split.trainUntil,
               "split by time: train on samples before this time, validate from it (replaces "
               "the fractions)",
               {"until", "cutoff", "train_end"}),
      MB_FIELD("data.split.val_until", data.split.valUntil,
               "split by time: validate on samples before this time, test from it; empty = "
               "val runs to the end",
               {"val_end", "test_from"}),
      MB_FIELD("data.split.val_from", data.split.valFrom,
               "split by time, instead of train_until: validate from this time, train before it "
               "less the embargo (every gap comes out of the earlier split; the walk's folds)"),
      MB_FIELD("data.time_unit", data.timeUnit,
               "what the file's timestamps count: s, ms, us, ns (since 1970-01-01 UTC), days, "
               "or yyyymmdd",
               {"timestamp_unit", "unit"}),
      MB_FIELD("data.horizon", data.horizon,
               "samples a target looks ahead of its sample's last row (0 = unknown): widens the "
               "default embargo, and eval compares with the last known target",
               {"target_horizon", "lookahead"}),
      MB_FIELD("data.streams", data.streams, "series layout: [{name, window}] per input stream",
               {"timeframes"}),
      MB_FIELD("data.context", data.context,
               "tokens layout: context length (a sample is context+1 tokens)",
               {"block_size", "seq_len", "context_length"}),
      MB_FIELD("data.names.features", data.names.features, "dataset name of the features"),
      MB_FIELD("data.names.targets", data.names.targets, "dataset name of the targets"),
      MB_FIELD("data.names.timestamps", data.names.timestamps, "dataset name of the timestamps"),
      MB_FIELD("data.names.tokens", data.names.tokens, "dataset name of the tokens"),
      MB_FIELD("data.names.series", data.names.series, "group holding the series streams"),
      MB_FIELD("data.names.sample_ends", data.names.sampleEnds,
               "group holding per-stream window end rows"),
      MB_FIELD("data.names.values", data.names.values, "panel: dataset of the values [T, N, F]"),
      MB_FIELD("data.names.mask", data.names.mask, "panel: dataset of the presence mask [T, N]"),
      MB_FIELD("data.names.target", data.names.target, "panel: dataset of the targets [T, N(, K)]"),
      MB_FIELD("data.names.time", data.names.time, "panel: dataset of the dates [T]"),
      MB_FIELD("data.names.instruments", data.names.instruments,
               "panel: dataset of the instrument names [N]"),
      MB_FIELD("data.names.sector", data.names.sector, "panel: dataset of the sector ids [N]"),
      MB_FIELD("data.panel.window", data.panel.window, "panel: dates in each instrument's window",
               {"lookback_window"}),
      MB_FIELD("data.panel.normalize", data.panel.normalize,
               "panel: per-date normalisation of the features across instruments: none, zscore, "
               "rank",
               {"normalise", "normalization"}),
      MB_FIELD("data.panel.normalize_target", data.panel.normalizeTarget,
               "panel: per-date normalisation of the targets across instruments: none, zscore, "
               "rank"),
      MB_FIELD("data.memory_fraction", data.memoryFraction,
               "share of device/host memory resident data may use"),
      MB_FIELD("data.host_mmap", data.hostMmap,
               "host residency: map contiguous uncompressed datasets from the page cache instead "
               "of copying"),
      MB_FIELD("data.allow_external", data.allowExternal,
               "read datasets the data file stores in other files (external storage, external "
               "links, virtual datasets); off: such a file is refused (exit 3)"),
      MB_FIELD("data.memory_budget_mb", data.memoryBudgetMb,
               "per-rank MiB resident data may use; 0 = memory_fraction of device/host memory"),
      MB_FIELD("data.stream_chunk_items", data.streamChunkItems,
               "stream residency: items per chunk of each shard (sets the chunk-major order)",
               {"stream_chunk_shards", "chunk_items"}),
      // model
      MB_CHOICE_FIELD("model.kind", model.kind, modelChoices, "the model (docs/models.md)",
                      {"type", "arch", "name"}),
      MB_FIELD("model.task", model.task, "regression or classification (lstm, mlp)"),
      MB_FIELD("model.loss", model.loss, "auto, mse, huber, or cross_entropy", {"criterion"}),
      MB_FIELD("model.huber_delta", model.huberDelta, "Huber loss delta"),
      MB_FIELD("model.num_classes", model.numClasses,
               "classification classes; 0 = from the targets"),
      MB_FIELD("model.hidden", model.hidden, "LSTM hidden size, GPT width, MLP width",
               {"hidden_size", "n_embd", "d_model", "width"}),
      MB_FIELD("model.layers", model.layers, "LSTM layers, GPT blocks, MLP hidden layers",
               {"num_layers", "n_layer", "depth"}),
      MB_FIELD("model.heads", model.heads, "GPT and gnn (gat) attention heads",
               {"n_head", "num_heads"}),
      MB_FIELD("model.head_hidden", model.headHidden, "LSTM fusion head width; 0 = linear head"),
      MB_FIELD("model.dropout", model.dropout, "dropout probability", {"dropout_rate"}),
      MB_FIELD("model.stateful", model.stateful, "LSTM: carry hidden states across steps per lane"),
      MB_FIELD("model.lanes", model.lanes,
               "stateful LSTM: lanes per shard; 0 = train.global_batch / data.canonical_shards"),
      MB_FIELD("model.lane_stride", model.laneStride,
               "stateful LSTM: items a lane advances per step (the window: disjoint windows)",
               {"stride"}),
      MB_FIELD("model.bias", model.bias, "GPT: biases in linear and LayerNorm layers"),
      MB_FIELD("model.vocab_size", model.vocabSize,
               "GPT vocabulary; 0 = the data file's vocab_size"),
      MB_FIELD("model.conv", model.conv,
               "gnn: message passing gin, gcn, gat, or none (a node-wise MLP: the baseline)",
               {"conv_type", "gnn_type", "message_passing"}),
      MB_FIELD("model.pooling", model.pooling, "gnn: graph readout sum, mean, max, or attention",
               {"readout", "pool", "global_pool"}),
      MB_FIELD("model.residual", model.residual, "gnn: residual connections between layers",
               {"skip_connections"}),
      MB_FIELD("model.class_weights", model.classWeights,
               "classification: none, or balanced (n / (classes x n_c) from the train split)",
               {"class_weight", "weights"}),
      MB_FIELD("model.path", model.path,
               "torchscript: the archive torch.jit.save wrote; its TorchScript code runs",
               {"archive", "file", "module_path", "script"}),
      MB_FIELD("model.encoder", model.encoder,
               "gat: temporal encoder per instrument (lstm|transformer)"),
      MB_FIELD("model.graph.layers", model.graph.layers,
               "gat: graph-attention layers; 0 = the temporal encoder alone", {"gat_layers"}),
      MB_FIELD("model.graph.k", model.graph.k,
               "gat: neighbours per instrument by return correlation; 0 = none",
               {"knn", "neighbors", "neighbours"}),
      MB_FIELD("model.graph.lookback", model.graph.lookback,
               "gat: dates of returns the correlation is computed over"),
      MB_FIELD("model.graph.feature", model.graph.feature,
               "gat: column of the panel's values that holds the return"),
      MB_FIELD("model.graph.min_periods", model.graph.minPeriods,
               "gat: fewest shared dates for a correlation"),
      MB_FIELD("model.graph.sector_edges", model.graph.sectorEdges,
               "gat: also connect instruments of the same /sector"),
      MB_FIELD("model.graph.rebuild", model.graph.rebuild,
               "gat: once (build each date's graph once, cached) or per_epoch"),
      MB_FIELD("model.graph.cache_mb", model.graph.cacheMb,
               "gat: device memory for cached graphs (MiB)"),
      // train
      MB_FIELD("train.global_batch", train.globalBatch,
               "samples per optimizer step, over all ranks", {"batch_size", "batch"}),
      makeCountOrAutoField(
          "train.micro_batch", [](Config & c) -> auto& { return c.train.microBatch; },
          "samples per forward pass per rank; 0 = no accumulation; auto = the largest that fits "
          "the memory budget (train.memory_budget_mb), agreed by every rank",
          {"micro_batch_size", "per_device_batch"}),
      MB_FIELD("train.max_steps", train.maxSteps, "optimizer steps; 0 = train.epochs epochs",
               {"steps", "iterations"}),
      MB_FIELD("train.epochs", train.epochs, "epochs when max_steps is 0", {"num_epochs", "epoch"}),
      MB_FIELD("train.precision", train.precision,
               "fp32, bf16 or fp16 (autocast, fp32 master weights; fp16 with loss scaling), or "
               "auto: bf16 on GPUs with BF16, fp16 on older GPUs; on the CPU bf16 where it has "
               "bf16 units "
               "and a trial step measures bf16 faster, else fp32",
               {"dtype", "amp", "mixed_precision", "use_amp"}),
      MB_FIELD("train.loss_scale.init", train.lossScale.init,
               "fp16: the loss scale at the start (GradScaler's init_scale)", {"init_scale"}),
      MB_FIELD("train.loss_scale.growth_factor", train.lossScale.growthFactor,
               "fp16: the scale is multiplied by this after growth_interval clean steps"),
      MB_FIELD("train.loss_scale.backoff_factor", train.lossScale.backoffFactor,
               "fp16: the scale is multiplied by this when a step overflows"),
      MB_FIELD("train.loss_scale.growth_interval", train.lossScale.growthInterval,
               "fp16: clean steps in a row before the scale grows"),
      MB_FIELD("train.loss_scale.fixed", train.lossScale.fixed,
               "fp16: > 0 uses this scale on every step (static loss scaling); 0 = dynamic",
               {"static", "loss_scale"}),
      MB_FIELD("train.loss_scale.min", train.lossScale.min,
               "fp16: train.max_bad_steps overflows in a row below this scale stop the run"),
      MB_FIELD("train.grad_clip", train.gradClip, "clip the global gradient norm; 0 = off",
               {"clip_grad_norm", "max_grad_norm"}),
      MB_FIELD("train.eval_every", train.evalEvery, "steps between evaluations; 0 = epoch ends",
               {"val_every", "eval_interval"}),
      MB_FIELD("train.eval_batches", train.evalBatches,
               "cap on validation batches; 0 = whole split"),
      MB_FIELD("train.max_bad_steps", train.maxBadSteps,
               "consecutive non-finite steps before stopping"),
      MB_FIELD("train.seed", train.seed, "seed for init and data order", {"random_seed"}),
      MB_FIELD("train.device", train.device, "auto, cpu, or cuda"),
      MB_FIELD("train.host_sync", train.hostSync,
               "when the host reads the gradient norm: step, log (the update is masked on the "
               "device; bad steps are counted at log steps), auto (step on CPU, log on CUDA)"),
      MB_FIELD("train.threads", train.threads,
               "CPU threads per rank; 0 = the CPUs this rank may use (docs/operations.md)",
               {"num_threads"}),
      MB_FIELD("train.recompute", train.recompute,
               "recompute activations in the backward pass instead of keeping them: none, "
               "blocks (every train.recompute_every-th segment: a transformer block) or full "
               "(every segment); less memory for more time (docs/operations.md)",
               {"gradient_checkpointing", "activation_checkpointing"}),
      MB_FIELD("train.recompute_every", train.recomputeEvery,
               "train.recompute = blocks: recompute segments 0, N, 2N, ... (1 = every one)"),
      MB_FIELD("train.memory_plan", train.memoryPlan,
               "measure the memory a rank needs with a trial step before step 1, and log it "
               "(docs/operations.md, Memory plan)"),
      MB_FIELD("train.memory_budget_mb", train.memoryBudgetMb,
               "per-rank MiB the memory plan is judged against; 0 = 90% of the GPU's memory, or "
               "of the host's available memory divided among the node's ranks"),
      MB_FIELD("train.memory_growth_warn_mb", train.memoryGrowthWarnMb,
               "warn when the resident set size (RSS) of the process grows by more than this "
               "many MiB in an epoch (host memory, also on CUDA; GPU memory is not counted)"),
      MB_FIELD("train.gpu_util_warn", train.gpuUtilWarn,
               "CUDA: warn when GPU utilisation (NVML) stays below this percent; 0 = off"),
      MB_FIELD("train.early_stopping.metric", train.earlyStopping.metric,
               "metric watched, e.g. val_loss"),
      MB_FIELD("train.early_stopping.mode", train.earlyStopping.mode, "min or max"),
      MB_FIELD("train.early_stopping.patience", train.earlyStopping.patience,
               "evaluations without improvement before stopping; 0 = off"),
      MB_FIELD("train.early_stopping.min_delta", train.earlyStopping.minDelta,
               "smallest improvement that counts"),
      MB_FIELD("train.init_from", train.initFrom,
               "start a new run from the weights of a run directory or checkpoint file (a "
               "resume of this run wins)",
               {"pretrained", "pretrained_model", "init_checkpoint", "warm_start"}),
      MB_FIELD("train.init_from_optimizer", train.initFromOptimizer,
               "with train.init_from: also keep its optimizer moments (fine-tuning)"),
      // optim
      MB_FIELD("optim.name", optim.name, "adamw, adam, or sgd", {"optimizer", "type", "kind"}),
      MB_FIELD("optim.lr", optim.lr, "peak learning rate", {"learning_rate", "lr_max", "rate"}),
      MB_FIELD("optim.weight_decay", optim.weightDecay,
               "decoupled (adamw) or L2 (adam, sgd) weight decay", {"wd", "decay"}),
      MB_FIELD("optim.beta1", optim.beta1, "Adam beta1"),
      MB_FIELD("optim.beta2", optim.beta2, "Adam beta2"),
      MB_FIELD("optim.eps", optim.eps, "Adam epsilon", {"epsilon"}),
      MB_FIELD("optim.momentum", optim.momentum, "SGD momentum"),
      MB_FIELD("optim.nesterov", optim.nesterov, "SGD Nesterov momentum"),
      MB_FIELD("optim.schedule", optim.schedule, "constant, cosine, or linear (after warmup)",
               {"scheduler", "lr_schedule"}),
      MB_FIELD("optim.warmup_steps", optim.warmupSteps, "linear warmup steps", {"warmup"}),
      MB_FIELD("optim.min_lr_ratio", optim.minLrRatio, "cosine/linear: final lr as a share of lr",
               {"min_lr"}),
      // dist
      MB_FIELD("dist.backend", dist.backend,
               "auto (nccl on CUDA, mpi on CPU), nccl, mpi, or single"),
      MB_FIELD("dist.bucket_mb", dist.bucketMb, "gradient bucket cap in MiB",
               {"bucket_cap_mb", "bucket_size"}),
      MB_FIELD("dist.first_bucket_mb", dist.firstBucketMb, "size of the small first bucket in MiB"),
      MB_FIELD("dist.grad_dtype", dist.gradDtype, "dtype gradients travel in: fp32, bf16 or fp16"),
      MB_FIELD("dist.timeout_s", dist.timeoutS,
               "watchdog: seconds a rank may wait while no rank makes progress", {"timeout"}),
      // walk (megabatch walk; Note [Walk-forward])
      MB_FIELD("walk.from", walk.from,
               "megabatch walk: start of the first predicted period (a date or time, as the "
               "split keys take)",
               {"start"}),
      MB_FIELD("walk.to", walk.to,
               "end (exclusive) of the last predicted period; empty = past the file's last sample",
               {"end", "until"}),
      MB_CHOICE_FIELD("walk.every", walk.every, walkPeriodChoices,
                      "the calendar period (UTC) of each fold: day, week (Monday to Sunday), "
                      "month, quarter or year",
                      {"period", "step", "frequency", "freq"}),
      MB_FIELD("walk.val", walk.val,
               "periods before each fold's own that form its val split; 0 = no val split (the "
               "fold predicts with its last checkpoint)",
               {"val_periods"}),
      MB_FIELD("walk.train_window", walk.trainWindow,
               "0 = train on everything before the val split (expanding); N = only the last N "
               "periods (sliding)",
               {"window", "fixed_train_size"}),
      MB_FIELD("walk.warm_start", walk.warmStart,
               "each fold starts from the previous fold's selected weights (train.init_from); "
               "false = every fold starts fresh",
               {"warm", "init_from_previous"}),
      MB_FIELD("walk.retrain_every", walk.retrainEvery,
               "train a model every N periods; the last model predicts the periods between",
               {"refit", "retrain"}),
  };
}

#undef MB_FIELD

}  // namespace

const std::vector<ConfigField>& configFields() {
  static const std::vector<ConfigField> fields = [] {
    std::vector<ConfigField> built = buildFields();
    showOnlyTheSplitInUse(built);
    return built;
  }();
  return fields;
}

const ConfigField* findConfigField(const std::string& key) {
  for (const auto& field : configFields()) {
    if (field.key == key) return &field;
  }
  return nullptr;
}

// Note [Removed config keys]: one entry per key taken out of the schema.
const RemovedConfigKey* findRemovedConfigKey(const std::string& key) {
  static const std::vector<RemovedConfigKey> removed{
      {"train.cuda_graphs",
       "megabatch never implemented capturing the step in a CUDA graph; the key was accepted and "
       "did nothing (the step always ran eagerly)"},
  };
  for (const auto& entry : removed) {
    if (entry.key == key) return &entry;
  }
  return nullptr;
}

bool isConfigSection(const std::string& key) {
  for (const auto& field : configFields()) {
    if (str::startsWith(field.key, key + ".")) return true;
  }
  return false;
}

std::string suggestConfigKey(const std::string& unknownKey) {
  auto dot = unknownKey.rfind('.');
  std::string section = dot == std::string::npos ? "" : unknownKey.substr(0, dot);
  std::string leaf = dot == std::string::npos ? unknownKey : unknownKey.substr(dot + 1);
  std::string best;
  double bestScore = std::numeric_limits<double>::max();
  for (const auto& field : configFields()) {
    auto fieldDot = field.key.rfind('.');
    std::string fieldSection = field.key.substr(0, fieldDot);
    std::vector<std::string> names{field.key.substr(fieldDot + 1)};
    names.insert(names.end(), field.aliases.begin(), field.aliases.end());
    for (const auto& name : names) {
      // Same-section matches come first; a key from another section must be much closer.
      double score = static_cast<double>(str::editDistance(leaf, name)) /
                     std::max<std::size_t>(leaf.size(), 1);
      if (fieldSection != section) score += 0.5 + 0.1 * str::editDistance(section, fieldSection);
      if (score < bestScore) {
        bestScore = score;
        best = field.key;
      }
    }
  }
  return bestScore <= 0.6 ? best : std::string();
}

std::string toString(Residency value) {
  return enumName(value);
}
std::string toString(DType value) {
  return enumName(value);
}
std::string toString(Precision value) {
  return enumName(value);
}
std::string toString(DeviceKind value) {
  return enumName(value);
}
std::string toString(HostSync value) {
  return enumName(value);
}
std::string toString(RecomputeMode value) {
  return enumName(value);
}
std::string toString(Task value) {
  return enumName(value);
}
std::string toString(LossKind value) {
  return enumName(value);
}
std::string toString(OptimizerKind value) {
  return enumName(value);
}
std::string toString(ScheduleKind value) {
  return enumName(value);
}
std::string toString(BackendKind value) {
  return enumName(value);
}
std::string toString(ProgressKind value) {
  return enumName(value);
}
std::string toString(MetricMode value) {
  return enumName(value);
}
std::string toString(TimeUnit value) {
  return enumName(value);
}

}  // namespace mb
