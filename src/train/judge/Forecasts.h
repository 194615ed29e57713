#pragma once
// Is the model any good? What evaluation judges a model's predictions by, beside its loss.
//
// Note [Forecast metrics]
// Evaluation keeps one row per target term of every sample it evaluates (forecastRows), gathers
// every rank's rows in sample order, and computes on all of them at once, on every rank: the
// results are the same on any rank count, and early stopping may watch them.
//   ic        Pearson correlation of prediction and target over the samples (per target term,
//             then the mean over the K terms);
//   rank_ic   the same between their ranks (Spearman; ties get their average rank, as scipy);
//   hit_rate  the share of terms whose prediction has the sign of the target, leaving out
//             targets of exactly 0 (a prediction of 0 has no sign: a miss);
//   mse, mae  the squared and absolute errors, weighted as the loss weighs them (evaluation
//             keeps the model's own where it computed them).
// A constant prediction or target has an IC of 0. On a panel `ic` and `rank_ic` are the means
// of the daily ones (Note [Panel loss]; the model's own where it computed them); the rows add
// `ic_ratio`, the mean daily IC over its standard deviation (ddof 1, over dates and terms), and
// the hit rate over every present instrument. As in the panel loss, a date with fewer than two
// instruments present has an IC of 0 and a date with none adds 0 to the MSE's sum; both count as
// dates.
//
// Note [Baselines]
// Each baseline predicts the same samples without looking at their inputs:
//   zero       0 for every term;
//   mean       the train split's mean target per term, over every rank's train part: the one
//              the checkpoint recorded when it trained (Note [The train mean of an
//              evaluation]), else DataInfo::trainTargetMean; per row where the rows come from
//              several models (a walk's folds, each its own train split's); absent when unknown;
//   last       the last known target, with data.horizon = h: sample s gets sample s - h's target,
//              which describes row s itself, so it is known when s is predicted (a random walk
//              forecast). Series and samples layouts; targets before the evaluated samples are
//              read from the file.
// and for classification:
//   majority   the train split's most common class (accuracy);
//   prior      the train split's class frequencies as probabilities (log-loss).
// Each is scored as the model is (MSE; panels weigh each date's instruments by 1/n, as the panel
// loss does) and with a skill, 1 - model / baseline, which is > 0 where the model beats it.
// For accuracy the skill is on the error rate: 1 - (1 - model) / (1 - baseline).
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "config/Config.h"
#include "data/Batch.h"
#include "data/DataInfo.h"

namespace mb::train {

// What evaluation can judge a model's outputs by.
enum class ForecastKind {
  kNone,             // tokens, and a panel's up/down classification (it has its daily IC)
  kRegression,       // series, samples, graphs: output [B] or [B, K] like the targets
  kPanelRegression,  // panel: [B, N] or [B, N, K], instruments present where the mask says
  kClassification,   // logits [B, C] against class labels [B]
};
ForecastKind forecastKind(const data::DataInfo& info, Task task);

// The columns of a forecast row (fp64).
enum ForecastColumn : std::int64_t {
  kRowSample = 0,  // the sample's number in the file
  kRowTerm,        // target term k (0 for one target, and for classification)
  kRowWeight,      // 1; panel: 1 / the instruments present on the date
  kRowPrediction,  // classification: the predicted class
  kRowTarget,      // classification: the label
  kRowLogLoss,     // classification: -log p(label); 0 otherwise
  kForecastWidth
};

// One batch's rows, [M, kForecastWidth] fp64 on the CPU.
at::Tensor forecastRows(ForecastKind kind, const at::Tensor& output, const data::Batch& batch);

// What the baselines of Note [Baselines] know beside the rows. Each is empty when unknown, and
// its baseline is then left out.
struct BaselineInputs {
  std::vector<double> trainMean;               // [K] the train split's mean target per term
  std::vector<double> trainMeanOfRow;          // [rows] instead, one per forecast row
  std::vector<double> lastKnown;               // [rows] the last known target of each row
  std::vector<std::int64_t> trainClassCounts;  // [C] classification: the train split's labels
  // A group's share: the per-row fields at `rows` (indices of forecast rows), the rest as is.
  BaselineInputs subset(const std::vector<std::int64_t>& rows) const;
};

// The targets [samples.size(), terms] fp64 of `samples` (sorted, distinct, each >= 0), or an
// undefined tensor when they cannot be known.
using EarlierTargets =
    std::function<at::Tensor(const std::vector<std::int64_t>& samples, std::int64_t terms)>;

// Note [Baselines]: the last known target of each of `rows` (in sample order): sample s gets
// sample s - horizon's target of the same term, from `rows` where they hold it, else from
// `earlier`. Empty when horizon <= 0, a row looks back before sample 0, or `earlier` cannot say.
std::vector<double> lastKnownTargets(const at::Tensor& rows, std::int64_t horizon,
                                     const EarlierTargets& earlier);
// The same for an evaluation of `info`'s data: the targets before the evaluated samples are read
// from the data file (info.path, info.targetsDataset). Empty when there is no horizon or the
// layout has none (series and samples have).
std::vector<double> lastKnownTargets(const at::Tensor& rows, const data::DataInfo& info);

// The baselines' inputs from the data alone: its train mean and class counts (empty for a
// selected period: Note [The train mean of an evaluation]) and lastKnownTargets.
BaselineInputs baselineInputs(const at::Tensor& rows, const data::DataInfo& info);

// The metrics and baselines of Notes [Forecast metrics] and [Baselines] over `rows` (every
// rank's, in sample order): "mse", "mae", "ic", "rank_ic", "hit_rate" (panel: the mean daily
// "ic" and "rank_ic", "ic_ratio"), "accuracy" and "log_loss" for classification, and
// "baseline_<name>_<metric>" with "baseline_<name>_skill".
std::map<std::string, double> judgeForecasts(ForecastKind kind, const at::Tensor& rows,
                                             const BaselineInputs& inputs);

// "baseline_zero_mse" and the like: what metrics.jsonl records as a baseline event.
bool isBaselineName(const std::string& name);

// Note [Baselines], in the order they are shown: each is scored as "baseline_<name>_<metric>",
// with its skill as "baseline_<name>_skill".
struct Baseline {
  const char* name;    // "zero"
  const char* metric;  // "mse"
  const char* words;   // "zero forecast"
};
const std::vector<Baseline>& baselines();
// Baselines (names without a split prefix) in words, for a log line: "zero forecast mse 0.975
// (skill -0.0138), train mean mse 1.79 (skill +0.448)".
std::string describeBaselines(const std::map<std::string, double>& baselines);

// Note [The train mean of an evaluation]
// The train-mean baseline compares with the mean target of the train split the model trained
// on. Training records it in every checkpoint (/meta train_target_mean, with the class counts
// as train_class_counts), and eval and predict take it from there, whatever the period and the
// data file. A checkpoint from before that has none: a whole split's evaluation then takes the
// mean of the train split it loads (as before), and a selected period's (Note [Selected
// period]) leaves the baseline out and says why, since the loader's stand-in train split is not
// the one the model trained on.
struct RecordedTrainSplit {
  std::vector<double> targetMean;         // empty: not recorded
  std::vector<std::int64_t> classCounts;  // empty: not recorded
};
// The baselines' train split figures: `recorded`'s, else the data's (set in `inputs`); returns
// why the train split's figures are unknown, "" when they are known (or not needed: `kind`).
std::string useTrainSplit(BaselineInputs& inputs, ForecastKind kind,
                          const RecordedTrainSplit& recorded, const data::DataInfo& info,
                          const std::string& checkpoint);

// The lines under "baselines on the same samples" for `metrics` (names after `prefix`), each
// baseline in words with its figure ("train mean (-0.0779)", "last known target (8 ahead)"),
// score and skill; `missing` lines (why a baseline is left out) after them. "" when there is
// nothing to say.
struct BaselineWords {
  std::string trainMean;  // "(-0.0779)", "(each fold's)"; "": no words
  std::int64_t horizon = 0;
  std::vector<std::string> missing;
};
std::string baselinesText(const std::map<std::string, double>& metrics, const std::string& prefix,
                          const BaselineWords& words);
// "(-0.0779)" for one term's mean, "" otherwise.
std::string trainMeanWords(const std::vector<double>& trainMean);

}  // namespace mb::train
