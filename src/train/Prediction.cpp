// What `megabatch predict` runs, and every fold of `megabatch walk`: a trained lstm, mlp or gnn
// over a split of a data file, its predictions written to HDF5,
// one row per sample, aligned with the sample timestamps:
//   /predictions   [M] or [M, K] (regression), or [M, C] logits (classification)
//   /predicted_class [M] int64 (classification)
//   /sample_index  [M] int64: the row of the data file's samples
//   /timestamps    [M] int64: the data file's /timestamps of those samples (when it has them)
//   /targets       the data file's targets of those samples
//   /probabilities [M, C] (classification): softmax of the logits
//   /<sample ids>  the rows of the data file's sample-id dataset (graphs: /graph_id), if any
//   /present       [M, N] uint8 (panel): instrument n is present on the date (absent ones hold 0)
//   /train_mean    [M] or [M, K] float64 (regression): the train split's mean target per term,
//                  the checkpoint's (Note [The train mean of an evaluation]) repeated on every
//                  row; absent when unknown. A walk-forward writes each row's own fold's.
// Rows are in the order of /sample_index (the file's sample order), one per sample: for graphs,
// one per graph of the chosen splits; for a panel, one per date.
// Attributes name the checkpoint, its step, the data file and the split (from and to for a
// period), the model kind, the task (regression or classification), the data layout, with
// /timestamps their time_unit (data.time_unit: s, ms, us, ns, days, yyyymmdd), `horizon`
// (data.horizon: the samples a target looks ahead, 0 = unknown) and `targets_dataset` (where the
// data file keeps the targets). A walk-forward's file adds /fold [M] int64 (the 0-based fold of
// each row) and the text attributes fold_names, fold_periods ("FROM TO") and fold_checkpoints,
// one line per fold. `megabatch plot FILE.h5` draws them (src/app/PredictionPlot.cpp);
// `megabatch eval --predictions FILE.h5` judges them (train/judge/PredictionsFile.h).
#include "train/Prediction.h"

#include <array>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>

#include <ATen/Functions.h>
#include <c10/core/GradMode.h>
#include <fmt/format.h>

#include "common/CpuAllocationScope.h"
#include "common/Error.h"
#include "common/Hdf5.h"
#include "common/HostAllocator.h"
#include "common/Log.h"
#include "common/OutOfMemory.h"
#include "common/TimeText.h"
#include "common/WorkProgress.h"
#include "config/ConfigSchema.h"
#include "data/ShardedData.h"
#include "dist/Runtime.h"
#include "dist/SingleCommunicator.h"
#include "model/Model.h"
#include "model/ModelRegistry.h"
#include "train/CheckpointModel.h"
#include "train/judge/Forecasts.h"
#include "train/memory/EvalBatch.h"
#include "train/precision/Precision.h"

namespace mb::train {
namespace {

std::vector<data::Split> splitsFor(const std::string& name) {
  if (name == "all") return {data::Split::kTrain, data::Split::kVal, data::Split::kTest};
  if (name == "train") return {data::Split::kTrain};
  if (name == "val") return {data::Split::kVal};
  if (name == "test") return {data::Split::kTest};
  throw ConfigError("--split " + name + ": expected all, train, val, or test");
}

struct Predictions {
  bool panel = false;  // data.layout = panel
  std::vector<at::Tensor> outputs, indices, targets;
  std::vector<at::Tensor> present;                   // panel: [B, N] uint8 per batch
  ForecastKind judged = ForecastKind::kNone;         // Note [Forecast metrics]
  std::array<std::vector<at::Tensor>, 3> forecasts;  // by split: per batch
};

constexpr std::int64_t kPredictBatch = 512;

RecordedTrainSplit recordedOf(const TrainedModel& run) {
  return {run.checkpoint.trainTargetMean, run.checkpoint.trainClassCounts};
}

void predictSplit(model::Model& model, data::ShardedData& data, data::Split split,
                  std::int64_t batchSize, std::int64_t capBytes, DType precision, Predictions& out,
                  WorkProgress& progress) {
  at::NoGradGuard noGrad;
  AutocastScope autocast(c10::DeviceType::CPU, precision);
  const std::int64_t count = data.evalCount(split);
  // Note [Evaluation batch], as an evaluation does.
  std::optional<ReturnFreedHostMemory> returned;
  if (returnsFreedHostMemory(capBytes, c10::Device(c10::kCPU))) returned.emplace();
  MemoryPhase phase("predicting");  // Note [Out of memory is an expected error]
  for (std::int64_t begin = 0; begin < count; begin += batchSize) {
    const std::int64_t end = std::min(count, begin + batchSize);
    data::Batch batch = data.evalBatch(split, begin, end, at::kFloat);
    std::optional<CpuAllocationScope> cap;  // Note [Evaluation batch]
    if (capBytes > 0) cap.emplace(capBytes);
    out.outputs.push_back(model.forward(batch).to(at::kCPU, at::kFloat));
    out.indices.push_back(batch.sampleIndex.to(at::kCPU));
    out.targets.push_back(batch.targets.to(at::kCPU));
    // A panel batch's inputs[1] is its [B, N] mask of present instruments (PanelLayout.h).
    if (out.panel) out.present.push_back(batch.inputs.at(1).to(at::kCPU, at::kByte));
    if (out.judged != ForecastKind::kNone)
      out.forecasts[static_cast<int>(split)].push_back(
          forecastRows(out.judged, out.outputs.back(), batch));
    progress.advance(end - begin);
  }
}

// Note [Baselines]: what predict's summary says of each split it predicted, with the train split
// the checkpoint recorded (Note [The train mean of an evaluation]).
void summarise(const Predictions& p, const data::DataInfo& info, const TrainedModel& run,
               const std::string& what, data::Split split) {
  const std::vector<at::Tensor>& parts = p.forecasts[static_cast<int>(split)];
  if (parts.empty()) return;
  const at::Tensor rows = at::cat(parts);
  BaselineInputs inputs = baselineInputs(rows, info);
  const std::string missing = useTrainSplit(inputs, p.judged, recordedOf(run), info, run.path);
  const std::map<std::string, double> judged = judgeForecasts(p.judged, rows, inputs);
  std::string metrics;
  for (const auto& [name, value] : judged)
    if (!isBaselineName(name))
      metrics += fmt::format("{}{} {:.5g}", metrics.empty() ? "" : ", ", name, value);
  log::get("app").info("{}: {}; baselines on the same samples (skill = 1 - model/baseline): {}{}",
                       what, metrics, describeBaselines(judged),
                       missing.empty() ? "" : "; " + missing);
}

// The train mean the baselines compare with (the checkpoint's, else the data's), one row per
// prediction row: [M] for one target term, [M, K] for K; undefined when unknown or not
// regression.
at::Tensor trainMeanRows(const Predictions& p, const data::DataInfo& info, const TrainedModel& run,
                         std::int64_t rows) {
  if (p.judged != ForecastKind::kRegression && p.judged != ForecastKind::kPanelRegression)
    return {};
  BaselineInputs inputs;
  inputs.trainMean = info.trainTargetMean;
  useTrainSplit(inputs, p.judged, recordedOf(run), info, run.path);
  std::int64_t terms = 1;  // per sample (a panel's: per instrument)
  for (std::int64_t d : info.targetShape)
    terms *= d;
  if (inputs.trainMean.empty() || static_cast<std::int64_t>(inputs.trainMean.size()) != terms)
    return {};
  const at::Tensor mean = at::tensor(inputs.trainMean, at::kDouble);
  return terms == 1 ? mean.expand({rows}).contiguous()
                    : mean.reshape({1, terms}).expand({rows, terms}).contiguous();
}

// A panel's dates are its /time, every other layout's times its /timestamps.
at::Tensor timestampsOf(const Config& config, bool panel, const at::Tensor& sampleIndex) {
  const std::string& name = panel ? config.data.names.time : config.data.names.timestamps;
  std::lock_guard<std::recursive_mutex> lock(h5::libraryMutex());
  h5::Handle file = h5::openFile(config.data.path, false, ExitCode::kData);
  if (!h5::isDataset(file.get(), name)) return {};
  at::Tensor all = h5::readTensor(file.get(), name, ExitCode::kData, at::kLong);
  return all.index_select(0, sampleIndex);
}

// The rows of the data file's per-sample id dataset (e.g. /graph_id) for `sampleIndex`.
at::Tensor sampleIdsOf(const Config& config, const std::string& dataset,
                       const at::Tensor& sampleIndex) {
  if (dataset.empty()) return {};
  std::lock_guard<std::recursive_mutex> lock(h5::libraryMutex());
  h5::Handle file = h5::openFile(config.data.path, false, ExitCode::kData);
  return h5::readTensor(file.get(), dataset, ExitCode::kData).index_select(0, sampleIndex);
}

void writePredictions(const std::string& path, const TrainedModel& run, const Config& config,
                      const std::string& split, const data::DataInfo& info, const Predictions& p) {
  at::Tensor indices = at::cat(p.indices);
  // In the file's sample order: a layout may number samples in another order (graphs).
  at::Tensor order = std::get<1>(indices.sort());
  indices = indices.index_select(0, order);
  at::Tensor outputs = at::cat(p.outputs).index_select(0, order);
  at::Tensor targets = at::cat(p.targets).index_select(0, order);
  const std::string& sampleIds = info.sampleIdDataset;
  std::string tmp = path + ".tmp";
  {
    std::lock_guard<std::recursive_mutex> lock(h5::libraryMutex());
    constexpr ExitCode code = ExitCode::kFailure;
    h5::Handle file = h5::createFile(tmp, false, code);
    h5::WriteOptions options;
    options.gzipLevel = 4;
    h5::writeTensor(file.get(), "predictions", outputs, options, code);
    if (config.model.task == Task::kClassification) {
      h5::writeTensor(file.get(), "predicted_class", outputs.argmax(-1), options, code);
      h5::writeTensor(file.get(), "probabilities", at::softmax(outputs, -1), options, code);
    }
    at::Tensor ids = sampleIdsOf(config, sampleIds, indices);
    if (ids.defined()) h5::writeTensor(file.get(), sampleIds, ids, options, code);
    h5::writeTensor(file.get(), "sample_index", indices, options, code);
    h5::writeTensor(file.get(), "targets", targets, options, code);
    if (p.panel)
      h5::writeTensor(file.get(), "present", at::cat(p.present).index_select(0, order), options,
                      code);
    at::Tensor trainMean = trainMeanRows(p, info, run, indices.size(0));
    if (trainMean.defined()) h5::writeTensor(file.get(), "train_mean", trainMean, options, code);
    h5::writeAttribute(file.get(), "horizon", info.horizon, code);
    h5::writeAttribute(file.get(), "targets_dataset", info.targetsDataset, code);
    at::Tensor timestamps = timestampsOf(config, p.panel, indices);
    if (timestamps.defined()) {
      h5::writeTensor(file.get(), "timestamps", timestamps, options, code);
      h5::writeAttribute(file.get(), "time_unit", std::string(timeUnitName(info.timeUnit)), code);
    }
    h5::writeAttribute(file.get(), "checkpoint", run.path, code);
    h5::writeAttribute(file.get(), "step", run.checkpoint.trainer.step, code);
    h5::writeAttribute(file.get(), "data", config.data.path, code);
    h5::writeAttribute(file.get(), "split", split, code);
    if (config.data.period.active()) {
      h5::writeAttribute(file.get(), "from", config.data.period.from, code);
      h5::writeAttribute(file.get(), "to", config.data.period.to, code);
    }
    h5::writeAttribute(file.get(), "model", run.model->kind(), code);
    h5::writeAttribute(file.get(), "task", toString(config.model.task), code);
    h5::writeAttribute(file.get(), "layout", info.layout, code);
    file.close(code, tmp);
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace

std::string describePeriod(const PeriodSelection& period, const data::DataInfo& info) {
  const data::TimeSpan& times = info.splitTimes[static_cast<int>(data::Split::kTest)];
  std::string text = "the period " + formatTime(times.first, info.timeUnit) + " to " +
                     formatTime(times.last, info.timeUnit) + " (";
  if (!period.from.empty()) text += "--from " + period.from;
  if (!period.to.empty()) text += std::string(period.from.empty() ? "" : " ") + "--to " + period.to;
  return text +
         (period.split.empty() ? ", every split" : ", within the " + period.split + " split") + ")";
}

PredictResult predictToFile(const PredictRequest& request, dist::Runtime& runtime) {
  const bool period = request.period.active();
  const std::string& splitName = request.split;
  // Note [Selected period]: the period is loaded as the test split.
  std::vector<data::Split> splits =
      period ? std::vector<data::Split>{data::Split::kTest} : splitsFor(splitName);
  if (period && !splitName.empty() && splitName != "all") splitsFor(splitName);  // a known name
  TrainedModel run = loadTrainedModel(request.checkpoint, request.overrides);
  if (model::modelKind(run.config.model.kind).languageModel)
    throw ConfigError(run.path + " holds a " + run.config.model.kind +
                      " language model: use megabatch sample to generate from it");
  Config config = run.config;
  runtime.useCpuThreads(config.train.threads, "app");
  config.data.path = request.data;
  config.data.canonicalShards = 1;
  config.data.residency = Residency::kHost;  // the train split in time order must be resident
  if (period) {
    config.data.period = request.period;
    if (config.data.period.split == "all") config.data.period.split.clear();
  }
  dist::SingleCommunicator self;
  std::unique_ptr<data::ShardedData> data =
      data::ShardedData::load(config, self, c10::Device(c10::kCPU));
  // Note [Precision of a new run]: prediction runs on the CPU.
  const PrecisionChoice precision =
      inferencePrecision(request.precision, config.train.precision, run.checkpoint.trainer,
                         config.model.hidden, c10::Device(c10::kCPU));
  log::get("app").info("predict precision: {}", precision.reason);
  Predictions predictions;
  predictions.panel = config.data.layout == "panel";
  predictions.judged = forecastKind(data->info(), config.model.task);
  // Note [Evaluation batch]: --batch, else the largest up to 512 that fits the budget.
  const EvalBatchTrial trial{
      *run.model,
      [&](std::int64_t count) { return data->heaviestBatch(splits.front(), count, at::kFloat); },
      data->evalCount(splits.front()),
      c10::Device(c10::kCPU),
      precision.dtype,
      modelBytes(*run.model) + data->residentBytes(),
      0};
  const CommandBatch chosen =
      commandEvalBatch(trial, std::max<std::int64_t>(config.train.microBatch, kPredictBatch),
                       request.batch, request.memoryBudgetMb, 1);
  log::get("app").info("predict {}", chosen.line);
  const std::int64_t batchSize = chosen.batch;
  WorkProgress::Options shown;
  shown.label = "predict";
  for (data::Split split : splits)
    shown.total += data->evalCount(split);
  const std::string what =
      period ? describePeriod(config.data.period, data->info()) : splitName + " split";
  shown.startLine = fmt::format("predict: {} samples ({}) of {}, batches of {}", shown.total, what,
                                config.data.path, batchSize);
  WorkProgress progress(shown);
  for (data::Split split : splits)
    predictSplit(*run.model, *data, split, batchSize, chosen.roomBytes, precision.dtype,
                 predictions, progress);
  progress.finish();
  for (data::Split split : splits)
    summarise(
        predictions, data->info(), run,
        period ? std::string("the period") : "the " + std::string(data::toString(split)) + " split",
        split);
  writePredictions(request.out, run, config, period ? "period" : splitName, data->info(),
                   predictions);
  PredictResult result;
  for (const auto& t : predictions.indices)
    result.rows += t.size(0);
  result.what = what;
  log::get("app").info("wrote {} predictions ({}) to {}", result.rows, what, request.out);
  return result;
}

}  // namespace mb::train
