#include "train/judge/Forecasts.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <numeric>
#include <unordered_map>

#include <ATen/Functions.h>
#include <fmt/format.h>

#include "common/Error.h"
#include "common/Hdf5.h"
#include "common/Strings.h"

namespace mb::train {
namespace {

// The rows' columns as vectors.
struct Columns {
  std::vector<double> sample, term, weight, prediction, target, logLoss;
  std::size_t size() const { return sample.size(); }
};

Columns columnsOf(const at::Tensor& rows) {
  Columns c;
  const at::Tensor t = rows.to(at::kCPU, at::kDouble).contiguous();
  const auto a = t.accessor<double, 2>();
  for (std::int64_t i = 0; i < t.size(0); ++i) {
    c.sample.push_back(a[i][kRowSample]);
    c.term.push_back(a[i][kRowTerm]);
    c.weight.push_back(a[i][kRowWeight]);
    c.prediction.push_back(a[i][kRowPrediction]);
    c.target.push_back(a[i][kRowTarget]);
    c.logLoss.push_back(a[i][kRowLogLoss]);
  }
  return c;
}

double mean(const std::vector<double>& x) {
  return x.empty() ? 0.0 : std::accumulate(x.begin(), x.end(), 0.0) / static_cast<double>(x.size());
}

// Note [Forecast metrics]: 0 for fewer than two values or a constant side.
double pearson(const std::vector<double>& x, const std::vector<double>& y) {
  if (x.size() < 2) return 0.0;
  const double mx = mean(x), my = mean(y);
  double sxy = 0, sxx = 0, syy = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    sxy += (x[i] - mx) * (y[i] - my);
    sxx += (x[i] - mx) * (x[i] - mx);
    syy += (y[i] - my) * (y[i] - my);
  }
  return sxx > 0 && syy > 0 ? sxy / std::sqrt(sxx * syy) : 0.0;
}

// Ranks 1..n, ties sharing their average rank (scipy.stats.rankdata's "average").
std::vector<double> averageRanks(const std::vector<double>& x) {
  std::vector<std::size_t> order(x.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](auto a, auto b) { return x[a] < x[b]; });
  std::vector<double> ranks(x.size());
  for (std::size_t i = 0; i < order.size();) {
    std::size_t j = i;
    while (j + 1 < order.size() && x[order[j + 1]] == x[order[i]])
      ++j;
    const double rank = 0.5 * static_cast<double>(i + j) + 1.0;
    for (std::size_t k = i; k <= j; ++k)
      ranks[order[k]] = rank;
    i = j + 1;
  }
  return ranks;
}

double spearman(const std::vector<double>& x, const std::vector<double>& y) {
  return pearson(averageRanks(x), averageRanks(y));
}

int signOf(double v) {
  return (v > 0) - (v < 0);
}

std::int64_t termCount(const Columns& c) {
  double largest = 0;
  for (double k : c.term)
    largest = std::max(largest, k);
  return static_cast<std::int64_t>(largest) + 1;
}

// Samples x terms: what the loss divides its sum by (rows come in sample order).
double lossTerms(const Columns& c) {
  double samples = 0;
  for (std::size_t i = 0; i < c.size(); ++i)
    samples += i == 0 || c.sample[i] != c.sample[i - 1] ? 1 : 0;
  return samples * static_cast<double>(termCount(c));
}

// The weighted sum of (target - forecast(i))^2 over samples x terms: the MSE as the loss weighs
// it (panel: each date's instruments by 1/n).
template <class Forecast>
double weightedMse(const Columns& c, Forecast forecast) {
  double sum = 0;
  for (std::size_t i = 0; i < c.size(); ++i) {
    const double error = c.target[i] - forecast(i);
    sum += c.weight[i] * error * error;
  }
  const double terms = lossTerms(c);
  return terms > 0 ? sum / terms : 0.0;
}

// The weighted mean |target - prediction| over samples x terms, as weightedMse.
double weightedMae(const Columns& c) {
  double sum = 0;
  for (std::size_t i = 0; i < c.size(); ++i)
    sum += c.weight[i] * std::abs(c.target[i] - c.prediction[i]);
  const double terms = lossTerms(c);
  return terms > 0 ? sum / terms : 0.0;
}

void addBaseline(std::map<std::string, double>& out, const std::string& name,
                 const std::string& metric, double model, double baseline) {
  out["baseline_" + name + "_" + metric] = baseline;
  if (baseline > 0) out["baseline_" + name + "_skill"] = 1.0 - model / baseline;
}

// ic and rank_ic per target term over the samples, then the mean over terms.
void addSeriesCorrelations(const Columns& c, std::map<std::string, double>& out) {
  const std::int64_t terms = termCount(c);
  double ic = 0, rankIc = 0;
  for (std::int64_t k = 0; k < terms; ++k) {
    std::vector<double> x, y;
    for (std::size_t i = 0; i < c.size(); ++i) {
      if (static_cast<std::int64_t>(c.term[i]) != k) continue;
      x.push_back(c.prediction[i]);
      y.push_back(c.target[i]);
    }
    ic += pearson(x, y);
    rankIc += spearman(x, y);
  }
  out["ic"] = ic / static_cast<double>(terms);
  out["rank_ic"] = rankIc / static_cast<double>(terms);
}

// The daily IC of each date and term (rows of a date are consecutive): its mean, and its mean
// over its standard deviation; and the mean daily rank IC.
void addPanelIcRatio(const Columns& c, std::map<std::string, double>& out) {
  const std::int64_t terms = termCount(c);
  std::vector<double> daily, dailyRank;
  for (std::size_t begin = 0; begin < c.size();) {
    std::size_t end = begin;
    while (end < c.size() && c.sample[end] == c.sample[begin])
      ++end;
    for (std::int64_t k = 0; k < terms; ++k) {
      std::vector<double> x, y;
      for (std::size_t i = begin; i < end; ++i) {
        if (static_cast<std::int64_t>(c.term[i]) != k) continue;
        x.push_back(c.prediction[i]);
        y.push_back(c.target[i]);
      }
      daily.push_back(pearson(x, y));
      dailyRank.push_back(spearman(x, y));
    }
    begin = end;
  }
  if (daily.empty()) return;
  const double m = mean(daily);
  out["ic"] = m;
  out["rank_ic"] = mean(dailyRank);
  if (daily.size() < 2) return;
  double squares = 0;
  for (double v : daily)
    squares += (v - m) * (v - m);
  const double sd = std::sqrt(squares / static_cast<double>(daily.size() - 1));
  if (sd > 0) out["ic_ratio"] = m / sd;
}

void addHitRate(const Columns& c, std::map<std::string, double>& out) {
  std::int64_t counted = 0, hits = 0;
  for (std::size_t i = 0; i < c.size(); ++i) {
    if (c.target[i] == 0) continue;
    ++counted;
    hits += signOf(c.prediction[i]) == signOf(c.target[i]) ? 1 : 0;
  }
  if (counted > 0) out["hit_rate"] = static_cast<double>(hits) / static_cast<double>(counted);
}

std::map<std::string, double> judgeRegression(ForecastKind kind, const Columns& c,
                                              const BaselineInputs& inputs) {
  std::map<std::string, double> out;
  const double mse = weightedMse(c, [&](std::size_t i) { return c.prediction[i]; });
  out["mse"] = mse;
  out["mae"] = weightedMae(c);
  if (kind == ForecastKind::kRegression) addSeriesCorrelations(c, out);
  if (kind == ForecastKind::kPanelRegression) addPanelIcRatio(c, out);
  addHitRate(c, out);
  addBaseline(out, "zero", "mse", mse, weightedMse(c, [](std::size_t) { return 0.0; }));
  const std::vector<double>& ofRow = inputs.trainMeanOfRow;
  const std::vector<double>& perTerm = inputs.trainMean;
  if (ofRow.size() == c.size())
    addBaseline(out, "mean", "mse", mse, weightedMse(c, [&](std::size_t i) { return ofRow[i]; }));
  else if (static_cast<std::int64_t>(perTerm.size()) == termCount(c))
    addBaseline(out, "mean", "mse", mse, weightedMse(c, [&](std::size_t i) {
                  return perTerm[static_cast<std::size_t>(c.term[i])];
                }));
  const std::vector<double>& lastKnown = inputs.lastKnown;
  if (lastKnown.size() == c.size())
    addBaseline(out, "last", "mse", mse,
                weightedMse(c, [&](std::size_t i) { return lastKnown[i]; }));
  return out;
}

std::map<std::string, double> judgeClassification(const Columns& c,
                                                  const std::vector<std::int64_t>& counts) {
  std::map<std::string, double> out;
  const auto n = static_cast<double>(c.size());
  double correct = 0;
  for (std::size_t i = 0; i < c.size(); ++i)
    correct += c.prediction[i] == c.target[i] ? 1 : 0;
  const double accuracy = correct / n;
  const double logLoss = mean(c.logLoss);
  out["accuracy"] = accuracy;
  out["log_loss"] = logLoss;
  const double total = static_cast<double>(std::accumulate(counts.begin(), counts.end(), 0LL));
  if (counts.empty() || total <= 0) return out;
  const auto majority =
      static_cast<double>(std::max_element(counts.begin(), counts.end()) - counts.begin());
  double majorityRight = 0, priorLoss = 0;
  for (double label : c.target) {
    majorityRight += label == majority ? 1 : 0;
    const auto k = static_cast<std::size_t>(label);
    // As sklearn's log_loss: a class the train split never saw has probability 1e-15, not 0.
    const double p = k < counts.size() ? static_cast<double>(counts[k]) / total : 0.0;
    priorLoss -= std::log(std::max(p, 1e-15));
  }
  const double majorityAccuracy = majorityRight / n;
  out["baseline_majority_accuracy"] = majorityAccuracy;
  if (majorityAccuracy < 1)
    out["baseline_majority_skill"] = 1.0 - (1.0 - accuracy) / (1.0 - majorityAccuracy);
  addBaseline(out, "prior", "log_loss", logLoss, priorLoss / n);
  return out;
}

at::Tensor regressionRows(const at::Tensor& output, const data::Batch& batch) {
  const std::int64_t b = batch.targets.size(0);
  const at::Tensor y = batch.targets.to(at::kCPU, at::kDouble).reshape({b, -1});
  const std::int64_t k = y.size(1);
  const at::Tensor p = output.to(at::kCPU, at::kDouble).reshape({b, k});
  const at::Tensor sample =
      batch.sampleIndex.to(at::kCPU, at::kDouble).reshape({b, 1}).expand({b, k});
  const at::Tensor term = at::arange(k, at::kDouble).reshape({1, k}).expand({b, k});
  return at::stack({sample, term, at::ones_like(p), p, y, at::zeros_like(p)}, -1)
      .reshape({b * k, kForecastWidth});
}

// Panel: rows of the present instruments only, in (date, instrument, term) order. A date with
// none present keeps one row of weight 0 (and a target of 0): it still counts as a date, as in
// the panel loss (Note [Panel loss]).
at::Tensor panelRows(const at::Tensor& output, const data::Batch& batch) {
  const at::Tensor present = batch.inputs.at(1).to(at::kCPU, at::kBool);  // [B, N]
  const std::int64_t b = present.size(0), n = present.size(1);
  const at::Tensor y = batch.targets.to(at::kCPU, at::kDouble).reshape({b, n, -1});
  const std::int64_t k = y.size(2);
  const at::Tensor p = output.to(at::kCPU, at::kDouble).reshape({b, n, k});
  const at::Tensor counted = present.reshape({b, n, 1}).expand({b, n, k});
  const at::Tensor zero = at::zeros({}, at::kDouble);
  const at::Tensor perDate = present.to(at::kDouble).sum(1);
  const at::Tensor weight = at::where(perDate > 0, perDate.clamp_min(1).reciprocal(), zero)
                                .reshape({b, 1, 1})
                                .expand({b, n, k});
  const at::Tensor sample =
      batch.sampleIndex.to(at::kCPU, at::kDouble).reshape({b, 1, 1}).expand({b, n, k});
  const at::Tensor term = at::arange(k, at::kDouble).reshape({1, 1, k}).expand({b, n, k});
  const at::Tensor all = at::stack({sample, term, weight, at::where(counted, p, zero),
                                    at::where(counted, y, zero), at::zeros_like(p)},
                                   -1)
                             .reshape({b * n * k, kForecastWidth});
  at::Tensor kept = counted.clone();
  kept.select(1, 0).select(1, 0).logical_or_(perDate == 0);  // the empty dates' one row
  return all.index_select(0, kept.reshape({-1}).nonzero().reshape({-1}));
}

at::Tensor classificationRows(const at::Tensor& output, const data::Batch& batch) {
  const at::Tensor logits = output.to(at::kCPU, at::kDouble);
  const at::Tensor labels = batch.targets.to(at::kCPU, at::kLong).reshape({-1});
  const at::Tensor logLoss = -at::log_softmax(logits, -1).gather(1, labels.unsqueeze(1)).squeeze(1);
  const at::Tensor predicted = logits.argmax(-1).to(at::kDouble);
  const at::Tensor sample = batch.sampleIndex.to(at::kCPU, at::kDouble).reshape({-1});
  return at::stack({sample, at::zeros_like(sample), at::ones_like(sample), predicted,
                    labels.to(at::kDouble), logLoss},
                   -1);
}

// The data file's targets of `samples` (sorted), [samples.size(), terms] fp64: one read of the
// rows from the first to the last (an evaluation's are close together).
at::Tensor readTargets(const data::DataInfo& info, const std::vector<std::int64_t>& samples,
                       std::int64_t terms) {
  const std::int64_t begin = samples.front(), end = samples.back() + 1;
  at::Tensor rows;
  {
    std::lock_guard<std::recursive_mutex> lock(h5::libraryMutex());
    h5::Handle file = h5::openFile(info.path, false, ExitCode::kData);
    h5::Handle dataset = h5::openDataset(file.get(), info.targetsDataset, ExitCode::kData);
    rows = h5::readRows(dataset.get(), begin, end, at::kDouble, ExitCode::kData,
                        info.path + ": /" + info.targetsDataset)
               .reshape({end - begin, terms});
  }
  return rows.index_select(0, at::tensor(samples, at::kLong) - begin);
}

}  // namespace

ForecastKind forecastKind(const data::DataInfo& info, Task task) {
  if (info.layout == "tokens") return ForecastKind::kNone;
  if (info.layout == "panel")
    return task == Task::kRegression ? ForecastKind::kPanelRegression : ForecastKind::kNone;
  if (task == Task::kClassification)
    return info.integerTargets ? ForecastKind::kClassification : ForecastKind::kNone;
  return info.integerTargets ? ForecastKind::kNone : ForecastKind::kRegression;
}

at::Tensor forecastRows(ForecastKind kind, const at::Tensor& output, const data::Batch& batch) {
  if (kind == ForecastKind::kNone || batch.size() == 0)
    return at::zeros({0, kForecastWidth}, at::kDouble);
  if (kind == ForecastKind::kPanelRegression) return panelRows(output, batch);
  if (kind == ForecastKind::kClassification) return classificationRows(output, batch);
  return regressionRows(output, batch);
}

BaselineInputs BaselineInputs::subset(const std::vector<std::int64_t>& rows) const {
  BaselineInputs part;
  part.trainMean = trainMean;
  part.trainClassCounts = trainClassCounts;
  const auto pick = [&](const std::vector<double>& all) {
    std::vector<double> picked;
    if (!all.empty())
      for (std::int64_t i : rows)
        picked.push_back(all.at(static_cast<std::size_t>(i)));
    return picked;
  };
  part.trainMeanOfRow = pick(trainMeanOfRow);
  part.lastKnown = pick(lastKnown);
  return part;
}

std::vector<double> lastKnownTargets(const at::Tensor& rows, std::int64_t horizon,
                                     const EarlierTargets& earlier) {
  if (horizon <= 0) return {};
  const Columns c = columnsOf(rows);
  if (c.size() == 0) return {};
  const std::int64_t terms = termCount(c), h = horizon;
  const auto key = [terms](std::int64_t sample, std::int64_t term) {
    return sample * terms + term;
  };
  std::unordered_map<std::int64_t, double> known;
  for (std::size_t i = 0; i < c.size(); ++i)
    known[key(static_cast<std::int64_t>(c.sample[i]), static_cast<std::int64_t>(c.term[i]))] =
        c.target[i];
  std::vector<std::int64_t> missing;  // the samples whose targets `rows` lack, in order
  for (std::size_t i = 0; i < c.size(); ++i) {
    const auto past = static_cast<std::int64_t>(c.sample[i]) - h;
    if (known.count(key(past, static_cast<std::int64_t>(c.term[i])))) continue;
    if (past < 0) return {};  // before the file's first sample: not known
    if (missing.empty() || missing.back() != past) missing.push_back(past);
  }
  std::sort(missing.begin(), missing.end());
  missing.erase(std::unique(missing.begin(), missing.end()), missing.end());
  if (!missing.empty()) {
    const at::Tensor read = earlier(missing, terms);
    if (!read.defined()) return {};
    const at::Tensor values = read.to(at::kDouble).contiguous();
    const auto a = values.accessor<double, 2>();
    for (std::size_t j = 0; j < missing.size(); ++j)
      for (std::int64_t k = 0; k < terms; ++k)
        known.emplace(key(missing[j], k), a[static_cast<std::int64_t>(j)][k]);
  }
  std::vector<double> out;
  for (std::size_t i = 0; i < c.size(); ++i)
    out.push_back(known.at(
        key(static_cast<std::int64_t>(c.sample[i]) - h, static_cast<std::int64_t>(c.term[i]))));
  return out;
}

std::vector<double> lastKnownTargets(const at::Tensor& rows, const data::DataInfo& info) {
  if (info.layout != "series" && info.layout != "samples") return {};
  return lastKnownTargets(rows, info.horizon,
                          [&](const std::vector<std::int64_t>& samples, std::int64_t terms) {
                            return readTargets(info, samples, terms);
                          });
}

BaselineInputs baselineInputs(const at::Tensor& rows, const data::DataInfo& info) {
  BaselineInputs inputs;
  inputs.trainMean = info.trainTargetMean;
  inputs.trainClassCounts = info.trainClassCounts;
  inputs.lastKnown = lastKnownTargets(rows, info);
  return inputs;
}

std::map<std::string, double> judgeForecasts(ForecastKind kind, const at::Tensor& rows,
                                             const BaselineInputs& inputs) {
  if (kind == ForecastKind::kNone || rows.size(0) == 0) return {};
  const Columns c = columnsOf(rows);
  if (kind == ForecastKind::kClassification) return judgeClassification(c, inputs.trainClassCounts);
  return judgeRegression(kind, c, inputs);
}

bool isBaselineName(const std::string& name) {
  return str::startsWith(name, "baseline_");
}

const std::vector<Baseline>& baselines() {
  static const std::vector<Baseline> all{{"zero", "mse", "zero forecast"},
                                         {"mean", "mse", "train mean"},
                                         {"last", "mse", "last known target"},
                                         {"majority", "accuracy", "majority class"},
                                         {"prior", "log_loss", "class frequencies"}};
  return all;
}

std::string describeBaselines(const std::map<std::string, double>& baselines) {
  std::string text;
  for (const Baseline& n : train::baselines()) {
    const std::string prefix = std::string("baseline_") + n.name + "_";
    auto score = baselines.find(prefix + n.metric);
    if (score == baselines.end()) continue;
    text +=
        fmt::format("{}{} {} {:.4g}", text.empty() ? "" : ", ", n.words, n.metric, score->second);
    auto skill = baselines.find(prefix + "skill");
    if (skill != baselines.end()) text += fmt::format(" (skill {:+.4f})", skill->second);
  }
  return text;
}

std::string useTrainSplit(BaselineInputs& inputs, ForecastKind kind,
                          const RecordedTrainSplit& recorded, const data::DataInfo& info,
                          const std::string& checkpoint) {
  const bool classes = kind == ForecastKind::kClassification;
  if (kind == ForecastKind::kNone) return "";
  if (classes && !recorded.classCounts.empty()) inputs.trainClassCounts = recorded.classCounts;
  if (!classes && !recorded.targetMean.empty()) inputs.trainMean = recorded.targetMean;
  if (classes ? !inputs.trainClassCounts.empty() : !inputs.trainMean.empty()) return "";
  const std::string what =
      classes ? "majority class and class frequencies: left out, " : "train mean: left out, ";
  const std::string figure = classes ? "class counts" : "mean target";
  if (info.periodSelected)
    return what + checkpoint + " was written before checkpoints recorded their train split's " +
           figure + ", and the evaluation of a period cannot know it (retrain to record it, or " +
           "evaluate a whole split with --split)";
  return what + "the train split's " + figure + " is unknown (" + checkpoint +
         " did not record it, and the train split is streamed)";
}

std::string trainMeanWords(const std::vector<double>& trainMean) {
  return trainMean.size() == 1 ? fmt::format("({:.4g})", trainMean[0]) : "";
}

std::string baselinesText(const std::map<std::string, double>& metrics, const std::string& prefix,
                          const BaselineWords& words) {
  const auto value = [&](const std::string& name) -> const double* {
    auto it = metrics.find(prefix + name);
    return it == metrics.end() ? nullptr : &it->second;
  };
  // Each baseline's own figure in words ("train mean (0.0123)"), beside its name.
  const auto detail = [&](const std::string& name) -> std::string {
    if (name == "mean" && !words.trainMean.empty()) return " " + words.trainMean;
    if (name == "last") return fmt::format(" ({} ahead)", words.horizon);
    return "";
  };
  std::string lines;
  for (const Baseline& b : baselines()) {
    const std::string name = std::string("baseline_") + b.name + "_";
    const double* score = value(name + b.metric);
    if (score == nullptr) continue;
    const double* skill = value(name + "skill");
    lines += fmt::format("    {:<32} {} {:<10.6g}", b.words + detail(b.name), b.metric, *score);
    if (skill != nullptr) lines += fmt::format(" skill {:+.4f}", *skill);
    lines += "\n";
  }
  for (const std::string& line : words.missing)
    lines += "    " + line + "\n";
  if (lines.empty()) return "";
  return fmt::format(
      "  baselines on the same samples (skill = 1 - model/baseline; above 0 beats it{}):\n{}",
      value("baseline_majority_accuracy") ? ", on the error rate for accuracy" : "", lines);
}

}  // namespace mb::train
