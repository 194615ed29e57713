// megabatch eval --checkpoint CKPT [--data FILE] [--split val|test] [--out FILE.json]
// megabatch eval --predictions FILE.h5 [--by PERIOD] [--out FILE.json|FILE.csv]
// Loss and metrics of a trained checkpoint on a split (distributed under mpirun like training),
// plus exact-match accuracy per operation for arithmetic corpora. --batch sets the samples per
// forward pass (Note [Evaluation batch] chooses otherwise, within --memory-budget-mb or 90% of
// the available memory), --max-samples bounds each rank's part,
// --precision overrides the default precision (Note [Precision of a new run]).
#include <cstdio>
#include <fstream>
#include <mutex>
#include <optional>

#include <fmt/format.h>

#include <torch/cuda.h>

#include "app/Cli.h"
#include "common/Error.h"
#include "common/Hdf5.h"
#include "common/Log.h"
#include "data/ShardedData.h"
#include "dist/Agreement.h"
#include "dist/Runtime.h"
#include "model/Model.h"
#include "model/ModelRegistry.h"
#include "train/CheckpointModel.h"
#include "train/Evaluation.h"
#include "train/Prediction.h"
#include "train/judge/Forecasts.h"
#include "train/judge/PeriodTable.h"
#include "train/judge/PredictionsFile.h"
#include "train/memory/EvalBatch.h"
#include "train/precision/Precision.h"
#include "train/watch/Metrics.h"

namespace mb::app {
namespace {

data::Split parseSplit(const std::string& text) {
  if (text == "val") return data::Split::kVal;
  if (text == "test") return data::Split::kTest;
  throw ConfigError("--split " + text + ": expected val or test");
}

c10::Device evalDevice(const Config& config, dist::Runtime& runtime) {
  bool cuda = config.train.device != DeviceKind::kCpu && torch::cuda::is_available();
  if (!cuda) return c10::Device(c10::kCPU);
  int index = runtime.selectCudaDevice(static_cast<int>(torch::cuda::device_count()));
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
}

// The data must have the shape the model was trained on (features, windows, targets).
void requireSameShape(const data::DataInfo& now, const std::string& trainedYaml,
                      const std::string& path) {
  data::DataInfo trained = data::modelSpecFromYaml(trainedYaml);
  trained.hasTimestamps = now.hasTimestamps;
  if (data::modelSpecToYaml(now) != data::modelSpecToYaml(trained))
    throw DataError(path + " does not have the shape the model was trained on:\n  trained on: " +
                        data::modelSpecToYaml(trained) +
                        "\n  this file:  " + data::modelSpecToYaml(now),
                    "evaluate on data with the same streams, windows, features and targets");
}

// Note [Evaluation batch]: --batch as given, else the largest that fits the budget; on the CPU
// every batch runs under the budget's cap.
void chooseBatch(const ParsedArgs& args, const Config& config, model::Model& model,
                 data::ShardedData& data, data::Split split, const c10::Device& device,
                 dist::Runtime& runtime, train::EvalOptions& options) {
  const train::EvalBatchTrial trial{
      model,
      [&](std::int64_t count) { return data.heaviestBatch(split, count, at::kFloat); },
      data.evalCount(split),
      device,
      options.precision,
      train::modelBytes(model) + data.residentBytes(),
      0};
  const std::int64_t limit =
      train::evalBatchLimit(config.train.microBatch > 0 ? config.train.microBatch : 256, device);
  const train::CommandBatch batch =
      train::commandEvalBatch(trial, limit, args.getInt("batch", 0),
                              args.getDouble("memory-budget-mb", 0), runtime.topology().localSize);
  options.microBatch = batch.batch;
  options.roomBytes = batch.roomBytes;
  options.batchChosen = !args.has("batch");
  options.batchLimit = limit;
  if (runtime.rank() == 0) log::get("app").info("eval {}", batch.line);
}

std::optional<train::Period> parseBy(const ParsedArgs& args) {
  if (!args.has("by")) return std::nullopt;
  std::optional<train::Period> period = train::periodNamed(args.get("by"));
  if (!period)
    throw ConfigError("--by " + args.get("by") + ": expected day, week, month, quarter or year");
  return period;
}

// Note [Results by period] needs a time for every sample, and predictions to judge.
void requireJudgeableByPeriod(const data::DataInfo& info, train::ForecastKind kind,
                              const Config& config, const std::string& checkpoint) {
  if (model::modelKind(config.model.kind).languageModel || kind == train::ForecastKind::kNone)
    throw ConfigError("--by judges predictions period by period, and " + checkpoint + " (" +
                          config.model.kind + " on data.layout = " + config.data.layout +
                          ") makes none to judge: a language model predicts tokens",
                      "leave out --by; eval reports the loss and accuracy of the split");
  if (info.timestampsDataset.empty())
    throw DataError(info.path + " has no /" + config.data.names.timestamps +
                        " dataset, so its samples cannot be grouped by period (--by)",
                    "write each sample's time to /" + config.data.names.timestamps +
                        " (docs/data-format.md), or leave out --by");
}

std::vector<std::int64_t> timesOfRows(const data::DataInfo& info, const at::Tensor& rows) {
  std::lock_guard<std::recursive_mutex> lock(h5::libraryMutex());
  h5::Handle file = h5::openFile(info.path, false, ExitCode::kData);
  at::Tensor all = h5::readTensor(file.get(), info.timestampsDataset, ExitCode::kData, at::kLong);
  at::Tensor times =
      all.index_select(0, rows.select(1, train::kRowSample).to(at::kLong)).contiguous();
  return {times.data_ptr<std::int64_t>(), times.data_ptr<std::int64_t>() + times.numel()};
}

// megabatch eval --predictions FILE.h5 [--by PERIOD] [--out FILE]: Note [Judging a predictions
// file]. Every rank reads and judges (a small file), so an error ends every rank alike; rank 0
// prints.
int runEvalPredictions(const ParsedArgs& args, dist::Runtime& runtime) {
  for (const char* flag : {"checkpoint", "data", "split", "from", "to", "batch", "memory-budget-mb",
                           "max-samples", "precision"})
    if (args.has(flag))
      throw ConfigError(std::string("--") + flag + " applies to evaluating a checkpoint, not to " +
                            "--predictions FILE (its predictions are made already)",
                        std::string("leave out --") + flag);
  if (!args.positionals.empty())
    throw ConfigError("eval --predictions takes no key=value overrides (found " +
                      args.positionals.front() + ")");
  // --by fold: the table by fold (printed in any case) is the one --out writes.
  const bool byFold = args.get("by") == "fold";
  const std::optional<train::Period> by = byFold ? std::nullopt : parseBy(args);
  const std::string path = args.get("predictions");
  train::PredictionsFile file;
  std::map<std::string, double> judged;
  std::vector<train::PeriodRow> folds, periods;
  dist::agreed(runtime.control(), "judging " + path, [&] {
    file = train::readPredictionsFile(path);
    if (byFold && file.fold.empty())
      throw DataError(
          path + " has no /fold dataset, so its rows cannot be grouped by fold (--by fold)",
          "a walk-forward's predictions.h5 has one; or group by a calendar period: "
          "--by day|week|month|quarter|year");
    judged = train::judgePredictions(file);
    folds = train::resultsByFold(file);
    if (by) periods = train::resultsByPeriod(file, *by);
  });
  if (runtime.rank() != 0) return 0;
  std::printf("%s", train::judgementText(file, judged).c_str());
  if (!folds.empty()) std::printf("  by fold:\n%s", train::foldTableText(file, folds).c_str());
  if (by)
    std::printf("  by %s:\n%s", train::periodName(*by),
                train::periodTableText(periods, file.kind, *by).c_str());
  if (args.has("out")) {
    train::JsonRecord record;
    record.add("predictions", path);
    if (!file.fold.empty()) record.add("folds", static_cast<std::int64_t>(file.foldNames.size()));
    for (const auto& [name, value] : judged)
      record.add(name, value);
    std::ofstream out(args.get("out"));
    out << (by       ? train::periodTableCsv(periods)
            : byFold ? train::periodTableCsv(folds, "fold")
                     : record.str() + "\n");
    if (!out) throw RuntimeError("cannot write " + args.get("out"));
  }
  return 0;
}

}  // namespace

void addPeriodFields(train::JsonRecord& record, const PeriodSelection& period,
                     const data::DataInfo& info) {
  const data::TimeSpan& times = info.splitTimes[static_cast<int>(data::Split::kTest)];
  record.add("split", period.split.empty() ? std::string("all") : period.split);
  record.add("from", period.from).add("to", period.to);
  record.add("first_time", formatTime(times.first, info.timeUnit));
  record.add("last_time", formatTime(times.last, info.timeUnit));
  const data::SampleRange& range = info.split(data::Split::kTest);
  record.add("first_sample", range.begin).add("end_sample", range.end);
}

int runEval(const ParsedArgs& args, dist::Runtime& runtime) {
  if (args.has("predictions")) return runEvalPredictions(args, runtime);
  if (!args.has("checkpoint"))
    throw ConfigError(
        "megabatch eval needs --checkpoint CKPT (a checkpoint file or a run directory), or "
        "--predictions FILE.h5 (a predictions file to judge)");
  const bool period = args.has("from") || args.has("to");
  const std::optional<train::Period> by = parseBy(args);
  // Note [Selected period]: the period is loaded as the test split.
  const data::Split split = period ? data::Split::kTest : parseSplit(args.get("split", "val"));
  if (period && args.has("split")) parseSplit(args.get("split"));  // val or test, as without
  train::TrainedModel run;
  dist::agreed(runtime.control(), "loading the checkpoint",
               [&] { run = train::loadTrainedModel(args.get("checkpoint"), args.positionals); });
  Config config = run.config;
  runtime.useCpuThreads(config.train.threads, "app");
  if (args.has("data")) config.data.path = args.get("data");
  // Any canonical shard count works for evaluation; one per rank keeps the load small.
  config.data.canonicalShards = runtime.size();
  if (period)
    config.data.period = {args.get("from", ""), args.get("to", ""), args.get("split", "")};
  const c10::Device device = evalDevice(config, runtime);
  run.model->to(device);
  std::unique_ptr<data::ShardedData> data =
      data::ShardedData::load(config, runtime.control(), device);
  dist::agreed(runtime.control(), "checking the data against the model", [&] {
    requireSameShape(data->info(), run.checkpoint.dataInfoYaml, config.data.path);
  });

  train::EvalOptions options;
  options.task = config.model.task;
  options.keepForecastRows = by.has_value();
  options.recorded = {run.checkpoint.trainTargetMean, run.checkpoint.trainClassCounts};
  if (by) {
    dist::agreed(runtime.control(), "checking --by", [&] {
      requireJudgeableByPeriod(data->info(), train::forecastKind(data->info(), config.model.task),
                               config, run.path);
    });
  }
  options.maxSamplesPerRank = args.getInt("max-samples", 0);
  if (args.has("batch") && args.getInt("batch", 0) < 1) throw ConfigError("--batch must be >= 1");
  if (options.maxSamplesPerRank < 0) throw ConfigError("--max-samples must be >= 0 (0 = all)");
  options.context = " of " + run.path;
  if (period) options.name = "period";
  options.announceAtOnce = true;  // the start line before the first batch, however slow
  dist::agreed(runtime.control(), "choosing the precision", [&] {
    // Note [Precision of a new run]
    const train::PrecisionChoice choice =
        train::inferencePrecision(args.get("precision"), config.train.precision,
                                  run.checkpoint.trainer, config.model.hidden, device);
    options.precision = choice.dtype;
    if (runtime.rank() == 0) log::get("app").info("eval precision: {}", choice.reason);
  });
  dist::agreed(runtime.control(), "choosing the evaluation batch", [&] {
    chooseBatch(args, config, *run.model, *data, split, device, runtime, options);
  });
  std::map<std::string, double> metrics =
      train::evaluateSplit(*run.model, *data, split, runtime.control(), device, options);

  std::optional<train::ExactMatch> exact;
  if (runtime.rank() == 0 && model::modelKind(config.model.kind).languageModel) {
    run.model->to(c10::Device(c10::kCPU));
    exact = train::arithmeticExactMatch(*run.model, config.data.path);
  }
  if (runtime.rank() != 0) return 0;

  const std::string prefix = (period ? std::string("period") : data::toString(split)) + "_";
  const std::string what = period ? train::describePeriod(config.data.period, data->info())
                                  : std::string(data::toString(split)) + " split";
  std::printf("checkpoint %s (step %lld) on %s, %s (%lld samples):\n", run.path.c_str(),
              static_cast<long long>(run.checkpoint.trainer.step), config.data.path.c_str(),
              what.c_str(), static_cast<long long>(metrics[prefix + "samples"]));
  train::JsonRecord record;
  record.add("checkpoint", run.path)
      .add("step", run.checkpoint.trainer.step)
      .add("data", config.data.path);
  if (period) {
    addPeriodFields(record, config.data.period, data->info());
  } else {
    record.add("split", data::toString(split));
  }
  for (const auto& [name, value] : metrics) {
    record.add(name, value);
    if (!train::isBaselineName(name.substr(prefix.size())))
      std::printf("  %-22s %.6g\n", name.c_str(), value);
  }
  // Note [The train mean of an evaluation]: the figures evaluateSplit compared with.
  const train::ForecastKind kind = train::forecastKind(data->info(), config.model.task);
  train::BaselineInputs shown;
  shown.trainMean = data->info().trainTargetMean;
  shown.trainClassCounts = data->info().trainClassCounts;
  train::BaselineWords words;
  words.horizon = data->info().horizon;
  const std::string missing =
      train::useTrainSplit(shown, kind, options.recorded, data->info(), run.path);
  if (!missing.empty()) words.missing.push_back(missing);
  words.trainMean = train::trainMeanWords(shown.trainMean);
  std::printf("%s", train::baselinesText(metrics, prefix, words).c_str());
  if (exact) {
    std::printf("  exact match on %lld held-out problems: %.2f%%\n",
                static_cast<long long>(exact->overall.total), 100.0 * exact->overall.accuracy());
    record.add("exact_match", exact->overall.accuracy())
        .add("heldout_problems", exact->overall.total);
    for (const auto& [op, count] : exact->perOperation) {
      std::printf("    %s  %.2f%%  (%lld/%lld)\n", op.c_str(), 100.0 * count.accuracy(),
                  static_cast<long long>(count.correct), static_cast<long long>(count.total));
      record.add("exact_match_" + op, count.accuracy());
    }
    for (const auto& mistake : exact->mistakes)
      std::printf("    e.g. %s\n", mistake.c_str());
  }
  std::string table;
  if (by) {
    train::BaselineInputs inputs = train::baselineInputs(options.forecastRows, data->info());
    train::useTrainSplit(inputs, kind, options.recorded, data->info(), run.path);
    const std::vector<train::PeriodRow> rows = train::resultsByPeriod(
        kind, options.forecastRows, timesOfRows(data->info(), options.forecastRows),
        data->info().timeUnit, *by, inputs, data->info().path);
    std::printf("  by %s:\n%s", train::periodName(*by),
                train::periodTableText(rows, kind, *by).c_str());
    table = train::periodTableCsv(rows);
  }
  if (args.has("out")) {
    std::ofstream out(args.get("out"));
    out << (by ? table : record.str() + "\n");
    if (!out) throw RuntimeError("cannot write " + args.get("out"));
  }
  return 0;
}

}  // namespace mb::app
