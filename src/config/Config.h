#pragma once
// The typed configuration. YAML keys are the snake_case of these fields, grouped by section:
// `optim.lr`, `train.global_batch`, `data.split.val_fraction`. ConfigSchema.cpp is the single
// table that maps keys to fields; ConfigValidator.cpp holds the rules across fields.
#include <cstdint>
#include <string>
#include <vector>

#include "common/TimeText.h"

namespace mb {

// Most classes a classification model takes (model.num_classes, or the largest label + 1): more
// is a file of ids rather than class indices, and per-class counts are allocated.
constexpr std::int64_t kMaxClasses = std::int64_t{1} << 20;
// train.micro_batch: auto.
constexpr std::int64_t kAutoMicroBatch = -1;

enum class Residency { kAuto, kDevice, kHost, kStream };
enum class DType { kFp32, kBf16, kFp16 };
// train.precision: what the forward pass autocasts to (Note [Loss scaling] in
// train/precision/LossScaler.h).
enum class Precision { kFp32, kBf16, kFp16, kAuto };
enum class DeviceKind { kAuto, kCpu, kCuda };
// When the host reads a step's gradient norm (Note [Step checks] in train/Trainer.cpp).
enum class HostSync { kAuto, kStep, kLog };
// train.recompute (Note [Activation recomputation] in model/Recompute.h).
enum class RecomputeMode { kNone, kBlocks, kFull };
enum class Task { kRegression, kClassification };
enum class LossKind { kAuto, kMse, kHuber, kCrossEntropy };
enum class OptimizerKind { kAdamW, kAdam, kSgd };
enum class ScheduleKind { kConstant, kCosine, kLinear };
enum class BackendKind { kAuto, kNccl, kMpi, kSingle };
enum class ProgressKind { kAuto, kBar, kLines };
enum class MetricMode { kMin, kMax };
// model.kind = gnn (src/model/kinds/Gnn.h): the message passing, the graph readout, class weights.
enum class GraphConv { kGin, kGcn, kGat, kNone };
enum class GraphPooling { kSum, kMean, kMax, kAttention };
enum class ClassWeights { kNone, kBalanced };
// Per-date normalisation across the instruments of a panel (data.layout = panel).
enum class PanelNorm { kNone, kZscore, kRank };
// When kind: gat forgets its cached graphs (Note [Panel graph cache] in model/parts/PanelGraph.h).
enum class GraphRebuild { kOnce, kPerEpoch };
// The temporal encoder of kind: gat.
enum class EncoderKind { kLstm, kTransformer };

// One input stream of the `series` layout and the window length the model sees from it.
struct StreamSpec {
  std::string name;         // group under /series, e.g. "m5"
  std::int64_t window = 0;  // rows per sample window
};

// Dataset names inside the HDF5 file, remappable for files written by other tools.
struct DataNames {
  std::string features = "features";
  std::string targets = "targets";
  std::string timestamps = "timestamps";
  std::string tokens = "tokens";
  std::string series = "series";           // group holding one subgroup per stream
  std::string sampleEnds = "samples/end";  // group holding one [N] int64 dataset per stream
  // panel layout
  std::string values = "values";            // [T, N, F]
  std::string mask = "mask";                // [T, N] (optional: every instrument present)
  std::string target = "target";            // [T, N] or [T, N, K]
  std::string time = "time";                // [T] (optional)
  std::string instruments = "instruments";  // [N] names (optional, for messages)
  std::string sector = "sector";            // [N] integer sector ids (optional)
};

// data.layout = panel: a sample is one date; each present instrument contributes its window.
struct PanelConfig {
  std::int64_t window = 20;                      // dates of each instrument's window
  PanelNorm normalize = PanelNorm::kZscore;      // features, per date across instruments
  PanelNorm normalizeTarget = PanelNorm::kNone;  // targets, per date across instruments
};

// Splits by share of the samples (the fractions), or by time (the cuts, Note [Splits by time] in
// data/pipeline/TimeSplits.h): a run uses one or the other (ConfigLoader.cpp).
struct SplitConfig {
  double trainFraction = 0.8;
  double valFraction = 0.1;
  double testFraction = 0.1;
  std::int64_t embargo = -1;  // rows between splits; -1 = one window (DESIGN.md "Splits")
  // Time cuts as the user wrote them (Note [Times as users write them]); empty = not set.
  std::string trainFrom;   // samples before it are left out
  std::string trainUntil;  // train: before it; val from it
  std::string valUntil;    // val: before it; test from it (empty: val runs to the end)
  // Instead of train_until: val from it, and every gap comes out of the split before a cut
  // (Note [Splits by time]). The walk's folds are cut so (src/walk/WalkPlan.h).
  std::string valFrom;
  bool byTime() const {
    return !trainFrom.empty() || !trainUntil.empty() || !valUntil.empty() || !valFrom.empty();
  }
};

// Not a key: the period `megabatch eval` and `predict` were asked for (--from, --to), within one
// split of the run's or over every sample (Note [Selected period] in data/pipeline/TimeSplits.h).
struct PeriodSelection {
  std::string from, to;  // as the user wrote them; either may be empty
  std::string split;     // "", "train", "val" or "test"
  bool active() const { return !from.empty() || !to.empty(); }
};

struct DataConfig {
  std::string path;
  std::string layout = "samples";  // a layout's name (src/data/LayoutRegistry.cpp)
  Residency residency = Residency::kAuto;
  DType residentDtype = DType::kFp32;
  std::int64_t canonicalShards = 64;  // V: fixed at run start, stored in the checkpoint
  bool shuffle = true;
  SplitConfig split;
  TimeUnit timeUnit = TimeUnit::kSeconds;  // what the file's /timestamps count
  // Samples between a sample's last row and the row its target describes; 0 = not known. It
  // widens the default embargo and gives evaluation its last-known-target baseline.
  std::int64_t horizon = 0;
  PeriodSelection period;           // not a key: eval and predict --from/--to
  std::vector<StreamSpec> streams;  // series layout
  PanelConfig panel;                // panel layout
  std::int64_t context = 128;       // tokens layout: a sample is context+1 tokens
  DataNames names;
  double memoryFraction = 0.75;  // share of device (or host) memory the resident data may use
  bool hostMmap = true;          // host residency: map uncompressed datasets (zero copy)
  bool allowExternal = false;    // read data the file stores in other files (h5::allowExternal)
  double memoryBudgetMb = 0;     // per-rank budget for resident data; 0 = memory_fraction of memory
  std::int64_t streamChunkItems =
      16384;  // stream residency: items per chunk per shard (GlobalOrder)
};

// kind: gat's graph between the instruments of a date (Note [Panel graph] in
// model/parts/PanelGraph.h).
struct GraphConfig {
  std::int64_t layers = 2;       // GAT layers; 0 = the temporal encoder alone
  std::int64_t k = 10;           // neighbours by return correlation; 0 = none
  std::int64_t lookback = 60;    // dates of returns the correlation is computed over
  std::int64_t feature = 0;      // column of the panel's values that holds the return
  std::int64_t minPeriods = 20;  // fewest dates two instruments share for a correlation
  bool sectorEdges = false;      // also connect instruments of the same /sector
  GraphRebuild rebuild = GraphRebuild::kOnce;
  double cacheMb = 1024;  // device memory for cached graphs
};

struct ModelConfig {
  std::string kind = "lstm";  // a model's name (src/model/ModelRegistry.cpp)
  Task task = Task::kRegression;
  LossKind loss = LossKind::kAuto;
  double huberDelta = 1.0;
  std::int64_t numClasses = 0;   // classification: 0 = from the targets
  std::int64_t hidden = 64;      // LSTM hidden size, GPT embedding width, MLP width
  std::int64_t layers = 2;       // LSTM layers, GPT blocks, MLP hidden layers
  std::int64_t heads = 4;        // GPT attention heads
  std::int64_t headHidden = 64;  // LSTM fusion head width (0 = linear head)
  double dropout = 0.0;
  bool stateful = false;             // LSTM: carry hidden states across steps per lane
  std::int64_t lanes = 0;            // stateful: lanes per shard L (0 = global batch / shards)
  std::int64_t laneStride = 1;       // stateful: items a lane advances per step (Note [Lane order])
  bool bias = true;                  // GPT linear and LayerNorm biases
  std::int64_t vocabSize = 0;        // GPT: 0 = the data file's vocab_size attribute
  GraphConv conv = GraphConv::kGin;  // gnn: gin | gcn | gat | none (node MLP)
  GraphPooling pooling = GraphPooling::kSum;        // gnn: nodes -> one vector per graph
  bool residual = false;                            // gnn: h + layer(h) between layers
  ClassWeights classWeights = ClassWeights::kNone;  // classification: none | balanced
  std::string path;                                 // torchscript: the archive torch.jit.save wrote
  EncoderKind encoder = EncoderKind::kLstm;         // gat: temporal encoder per instrument
  GraphConfig graph;                                // gat
};

struct EarlyStoppingConfig {
  std::string metric = "val_loss";
  MetricMode mode = MetricMode::kMin;
  std::int64_t patience = 0;  // evaluations without improvement; 0 = off
  double minDelta = 0.0;
};

// train.precision = fp16: dynamic loss scaling with torch.amp.GradScaler's semantics (Note [Loss
// scaling] in train/precision/LossScaler.h).
struct LossScaleConfig {
  double init = 65536.0;  // 2^16, GradScaler's init_scale
  double growthFactor = 2.0;
  double backoffFactor = 0.5;
  std::int64_t growthInterval = 2000;  // clean steps in a row before the scale grows
  double fixed = 0.0;                  // > 0: this scale on every step, never changed
  // Collapse: the run stops when train.max_bad_steps steps in a row overflow at a scale below
  // this (2^-14: the smallest normal fp16).
  double min = 6.103515625e-05;
};

struct TrainConfig {
  std::int64_t globalBatch = 256;
  // Per rank; 0 = global_batch / world size (no accumulation); kAutoMicroBatch = auto (Note
  // [Automatic micro-batch]).
  std::int64_t microBatch = 0;
  // Not a key: the size train.micro_batch: auto chose at the start, halved when a step runs out
  // of memory (Note [Automatic micro-batch], Note [A step that runs out of memory is redone]).
  std::int64_t autoMicroBatch = 0;
  std::int64_t maxSteps = 0;  // 0 = run `epochs` epochs
  std::int64_t epochs = 1;
  Precision precision = Precision::kFp32;
  LossScaleConfig lossScale;
  double gradClip = 1.0;         // global-norm clip; 0 = off
  std::int64_t evalEvery = 0;    // steps; 0 = at epoch ends only
  std::int64_t evalBatches = 0;  // cap on val batches per evaluation; 0 = the whole split
  std::int64_t maxBadSteps = 5;  // consecutive non-finite steps before the run stops
  std::int64_t seed = 1234;
  DeviceKind device = DeviceKind::kAuto;
  HostSync hostSync = HostSync::kAuto;  // auto: every step on CPU, at log steps on CUDA
  std::int64_t threads = 0;  // intra-op CPU threads per rank; 0 = chosen (dist/CpuThreads.h)
  // MiB: warn when the resident set size (RSS) of the process grows by more than this during
  // an epoch. RSS is host memory, also on CUDA: device memory is not counted.
  double memoryGrowthWarnMb = 256;
  RecomputeMode recompute = RecomputeMode::kNone;
  std::int64_t recomputeEvery = 1;  // blocks: every Nth segment (1 = all)
  bool memoryPlan = true;           // a trial step measures the memory plan before step 1
  double memoryBudgetMb = 0;        // per rank; 0 = 90% of the device's or the host's share
  double gpuUtilWarn = 70;          // CUDA: warn when GPU utilisation stays below (%); 0 = off
  EarlyStoppingConfig earlyStopping;
  // Note [Warm starts] (train/WarmStart.h): a trained model's weights for a new run.
  std::string initFrom;            // a run directory or a checkpoint file; empty = none
  bool initFromOptimizer = false;  // also its optimizer moments
};

struct OptimConfig {
  OptimizerKind name = OptimizerKind::kAdamW;
  double lr = 1e-3;
  double weightDecay = 0.01;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double momentum = 0.9;  // sgd
  bool nesterov = false;  // sgd
  ScheduleKind schedule = ScheduleKind::kCosine;
  std::int64_t warmupSteps = 0;
  double minLrRatio = 0.1;  // cosine/linear: final lr = lr * min_lr_ratio
};

struct DistConfig {
  BackendKind backend = BackendKind::kAuto;
  double bucketMb = 25.0;
  double firstBucketMb = 1.0;
  DType gradDtype = DType::kFp32;
  double timeoutS = 300.0;
};

struct RunConfig {
  std::string dir = "runs/default";
  std::string resume = "auto";  // auto | never | path to a checkpoint
  std::int64_t keepLast = 3;
  std::int64_t checkpointEvery = 0;  // steps; 0 = at epoch ends and at the end
  double checkpointEveryS = 0;       // seconds as well (rank 0's clock); 0 = off
  std::int64_t logEvery = 10;
  std::string logLevel = "info";
  ProgressKind progress = ProgressKind::kAuto;
  std::string lock = "auto";  // auto | kernel | file (Note [One writer per run directory])
  double lockWaitS = 60.0;    // seconds to wait for a trainer on run.dir that is ending
  bool tensorboard = true;    // rank 0 writes run.dir/tensorboard/events.out.tfevents.*
  // A resume on data other than the checkpoint's goes on (Note [Data continuity]).
  bool allowDataChange = false;
};

// Note [Walk-forward] (src/walk/WalkPlan.h): `megabatch walk` trains a fold per calendar period
// and predicts the period with it. Other commands ignore this section.
struct WalkConfig {
  std::string from;               // start of the first predicted period (a time as the cuts take)
  std::string to;                 // end (exclusive) of the last; empty: past the file's last sample
  std::string every = "month";    // day, week, month, quarter or year (UTC calendar periods)
  std::int64_t val = 1;           // periods before a fold's own that form its val split; 0: none
  std::int64_t trainWindow = 0;   // 0: train on everything before val; N: the last N periods
  bool warmStart = true;          // fold k starts from fold k-1's weights (train.init_from)
  std::int64_t retrainEvery = 1;  // train every N periods; between, the last model predicts
};

struct Config {
  RunConfig run;
  DataConfig data;
  ModelConfig model;
  TrainConfig train;
  OptimConfig optim;
  DistConfig dist;
  WalkConfig walk;
};

}  // namespace mb
