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
//             targets of exactly 0 (a prediction of 0 has no sign: a miss).
// A constant prediction or target has an IC of 0. On a panel the model's own `ic` and `rank_ic`
// are the daily ones (Note [Panel loss]); the rows add `ic_ratio`, the mean daily IC over its
// standard deviation (ddof 1, over dates and terms), and the hit rate over every present
// instrument. As in the panel loss, a date with fewer than two instruments present has an IC of
// 0 and a date with none adds 0 to the MSE's sum; both count as dates.
//
// Note [Baselines]
// Each baseline predicts the same samples without looking at their inputs:
//   zero       0 for every term;
//   mean       the train split's mean target per term, over every rank's train part
//              (DataInfo::trainTargetMean; absent when the train split is streamed);
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

// Note [Baselines]: the targets known before the evaluated samples, for the last-known
// baseline. Rows of `rows` (in sample order) whose sample - horizon is not among them are read
// from the data file (info.path, info.targetsDataset). Empty when there is no horizon, the
// layout has none, or a sample looks back past the file's first.
std::vector<double> lastKnownTargets(const at::Tensor& rows, const data::DataInfo& info);

// The metrics and baselines of Notes [Forecast metrics] and [Baselines] over `rows` (every
// rank's, in sample order): "ic", "rank_ic", "hit_rate", "mse" (panel: the mean daily "ic",
// "ic_ratio", "hit_rate", "mse"), "accuracy" and "log_loss" for classification, and
// "baseline_<name>_<metric>" with "baseline_<name>_skill". `lastKnown` from lastKnownTargets (one
// per row) or empty.
std::map<std::string, double> judgeForecasts(ForecastKind kind, const at::Tensor& rows,
                                             const data::DataInfo& info,
                                             const std::vector<double>& lastKnown);

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

}  // namespace mb::train
