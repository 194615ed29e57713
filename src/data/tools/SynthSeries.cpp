// megabatch data synth-series: Note [Synthetic series] in Tools.h.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include <ATen/Functions.h>
#include <fmt/format.h>

#include "common/Error.h"
#include "common/Hdf5.h"
#include "common/Strings.h"
#include "common/WorkProgress.h"
#include "data/tools/Random.h"
#include "data/tools/ToolOutput.h"
#include "data/tools/Tools.h"

namespace mb::data {
namespace {

constexpr int kSubSteps = 4;          // latent sub-steps per finest row
constexpr double kPeriodRows = 32.0;  // oscillation period, finest rows
constexpr double kLevelTau = 1000.0;  // rows
constexpr double kLevelStd = 0.5;
constexpr double kAmpTau = 2000.0;  // rows
constexpr double kAmpLogStd = 0.3;
constexpr double kPhaseNoise = 0.02;                   // radians per sub-step (x noise)
constexpr double kObservationNoise = 0.05;             // x noise
constexpr std::int64_t kSeriesStartTime = 1704067200;  // 2024-01-01T00:00:00Z
constexpr std::int64_t kRowSeconds = 60;

// The latent process, sampled at the end of each finest row (for the oracle), and the finest
// rows' [close, mean, high, low].
struct Latent {
  std::vector<double> level, amp, phase;  // [rows]
  at::Tensor base;                        // [rows, 4] float64
};

Latent simulate(std::int64_t rows, double noise, Rng& rng, WorkProgress& progress) {
  Latent latent;
  latent.level.resize(rows);
  latent.amp.resize(rows);
  latent.phase.resize(rows);
  latent.base = at::empty({rows, 4}, at::kDouble);
  double* base = latent.base.data_ptr<double>();
  double levelDecay = std::exp(-1.0 / (kLevelTau * kSubSteps));
  double ampDecay = std::exp(-1.0 / (kAmpTau * kSubSteps));
  double omega = 2.0 * M_PI / (kPeriodRows * kSubSteps);
  double level = rng.normal() * kLevelStd;
  double logAmp = rng.normal() * kAmpLogStd;
  double phase = rng.uniform() * 2.0 * M_PI;
  for (std::int64_t t = 0; t < rows; ++t) {
    double sum = 0, high = -1e300, low = 1e300, close = 0;
    for (int k = 0; k < kSubSteps; ++k) {
      level =
          levelDecay * level + rng.normal() * kLevelStd * std::sqrt(1 - levelDecay * levelDecay);
      logAmp = ampDecay * logAmp + rng.normal() * kAmpLogStd * std::sqrt(1 - ampDecay * ampDecay);
      phase += omega + rng.normal() * kPhaseNoise * noise;
      close = level + std::exp(logAmp) * std::sin(phase) + rng.normal() * kObservationNoise * noise;
      sum += close;
      high = std::max(high, close);
      low = std::min(low, close);
    }
    double* row = base + 4 * t;
    row[0] = close;
    row[1] = sum / kSubSteps;
    row[2] = high;
    row[3] = low;
    latent.level[t] = level;
    latent.amp[t] = std::exp(logAmp);
    latent.phase[t] = phase;
    if ((t & 8191) == 8191) progress.advance(8192);
  }
  progress.update(rows);
  return latent;
}

// Rows of a stream of period p: [T, features], aggregated from the finest rows.
at::Tensor aggregate(const at::Tensor& base, std::int64_t period, std::int64_t features, Rng& rng,
                     WorkProgress& progress) {
  const std::int64_t before = progress.done();
  std::int64_t bars = base.size(0) / period;
  at::Tensor out = at::empty({bars, features}, at::kDouble);
  const double* in = base.data_ptr<double>();
  double* o = out.data_ptr<double>();
  for (std::int64_t j = 0; j < bars; ++j) {
    const double* first = in + 4 * j * period;
    double agg[4] = {first[4 * (period - 1)], 0, -1e300, 1e300};
    for (std::int64_t r = 0; r < period; ++r) {
      agg[1] += first[4 * r + 1] / static_cast<double>(period);
      agg[2] = std::max(agg[2], first[4 * r + 2]);
      agg[3] = std::min(agg[3], first[4 * r + 3]);
    }
    double* row = o + j * features;
    for (std::int64_t f = 0; f < features; ++f)
      row[f] = f < 4 ? agg[f] : rng.normal();
    if ((j & 1023) == 1023) progress.update(before + (j + 1) * period);
  }
  progress.update(before + base.size(0));
  return out;
}

void validate(const SynthSeriesOptions& o) {
  if (o.out.empty()) throw ConfigError("megabatch data synth-series needs --out FILE.h5");
  if (o.rows < 1 || o.features < 1 || o.targets < 1 || o.horizon < 1 || o.noise < 0)
    throw ConfigError(
        "synth-series: --rows, --features, --targets, --horizon must be >= 1 and --noise >= 0");
  if (o.streams.empty()) throw ConfigError("synth-series: --streams is empty");
}

double mse(const std::vector<double>& a, const std::vector<double>& b) {
  double sum = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    sum += (a[i] - b[i]) * (a[i] - b[i]);
  return a.empty() ? 0 : sum / static_cast<double>(a.size());
}

}  // namespace

std::vector<std::pair<std::string, std::int64_t>> parseStreams(const std::string& text) {
  std::vector<std::pair<std::string, std::int64_t>> streams;
  for (const auto& item : str::split(text, ',')) {
    auto parts = str::split(str::trim(item), ':');
    long period = 0;
    if (parts.size() == 2 && !parts[0].empty()) {
      try {
        period = std::stol(parts[1]);
      } catch (const std::exception&) {
      }
    }
    if (period < 1)
      throw ConfigError(
          "--streams '" + text + "': expected NAME:PERIOD items, e.g. m1:1,m5:5,h1:60",
          "PERIOD is the stream's bar length in finest rows (>= 1)");
    streams.emplace_back(parts[0], period);
  }
  return streams;
}

SynthSeriesReport writeSynthSeries(const SynthSeriesOptions& o) {
  validate(o);
  h5::WriteOptions options = writeOptions(o.write);
  at::ScalarType type = valueType(o.dtype);
  std::int64_t longest = 1;
  for (const auto& s : o.streams)
    longest = std::max(longest, s.second);
  std::int64_t firstRow = longest - 1;
  std::int64_t lookAhead = o.horizon * o.targets;
  std::int64_t n = o.rows - firstRow - lookAhead;
  if (n < 10)
    throw ConfigError("synth-series: --rows " + std::to_string(o.rows) + " leaves " +
                      std::to_string(n) + " samples (the longest period needs " +
                      std::to_string(firstRow) + " rows of history, the targets " +
                      std::to_string(lookAhead) + " ahead)");

  // Progress over passes of the finest rows: the simulation, then one aggregation per stream.
  WorkProgress::Options shown;
  shown.label = "data synth-series";
  shown.unit = "rows";
  shown.total = o.rows * static_cast<std::int64_t>(1 + o.streams.size());
  shown.tag = "data";
  shown.startLine = fmt::format(
      "data synth-series: {} rows x {} features in {} streams to {} ({} passes over the rows)",
      o.rows, o.features, o.streams.size(), o.out, 1 + o.streams.size());
  WorkProgress progress(shown);
  Rng rng(o.seed);
  Latent latent = simulate(o.rows, o.noise, rng, progress);
  const double* base = latent.base.data_ptr<double>();

  // Targets and what the baselines and the oracle predict for them.
  at::Tensor targets = at::empty({n, o.targets}, at::kFloat);
  at::Tensor ends = at::empty({static_cast<std::int64_t>(o.streams.size()), n}, at::kLong);
  at::Tensor times = at::empty({n}, at::kLong);
  std::int64_t valBegin = n * 8 / 10, valEnd = n * 9 / 10;
  std::vector<double> truth, meanPred, lastPred, oraclePred;
  std::vector<double> trainMean(o.targets, 0.0);
  float* target = targets.data_ptr<float>();
  std::int64_t* end = ends.data_ptr<std::int64_t>();
  std::int64_t* time = times.data_ptr<std::int64_t>();
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t t = firstRow + i;
    time[i] = kSeriesStartTime + (t + 1) * kRowSeconds;
    for (std::size_t s = 0; s < o.streams.size(); ++s)
      end[s * n + i] = (t + 1) / o.streams[s].second - 1;
    for (std::int64_t k = 0; k < o.targets; ++k) {
      std::int64_t ahead = o.horizon * (k + 1);
      auto y = static_cast<float>(base[4 * (t + ahead)]);
      target[i * o.targets + k] = y;
      if (i < valBegin) trainMean[k] += y / static_cast<double>(valBegin);
      if (i < valBegin || i >= valEnd) continue;
      double spread = kPhaseNoise * o.noise;
      double oracle = latent.level[t] * std::exp(-ahead / kLevelTau) +
                      latent.amp[t] * std::exp(-0.5 * spread * spread * ahead * kSubSteps) *
                          std::sin(latent.phase[t] + 2.0 * M_PI * ahead / kPeriodRows);
      truth.push_back(y);
      lastPred.push_back(base[4 * t]);
      oraclePred.push_back(oracle);
      meanPred.push_back(static_cast<double>(k));  // replaced below, once the train mean is known
    }
  }
  for (std::size_t j = 0; j < meanPred.size(); ++j)
    meanPred[j] = trainMean[static_cast<std::size_t>(meanPred[j])];

  SynthSeriesReport report;
  report.samples = n;
  report.valBegin = valBegin;
  report.valEnd = valEnd;
  report.meanMse = mse(truth, meanPred);
  report.lastValueMse = mse(truth, lastPred);
  report.oracleMse = mse(truth, oraclePred);

  h5::Handle file = h5::createFile(o.out, false, ExitCode::kFailure);
  for (std::size_t s = 0; s < o.streams.size(); ++s) {
    const auto& [name, period] = o.streams[s];
    at::Tensor values = aggregate(latent.base, period, o.features, rng, progress);
    h5::Handle group = h5::createGroup(file.get(), "series/" + name, ExitCode::kFailure);
    h5::writeTensor(group.get(), "values", values.to(type), options, ExitCode::kFailure);
    at::Tensor barTimes = at::arange(1, values.size(0) + 1, at::kLong)
                              .mul_(period * kRowSeconds)
                              .add_(kSeriesStartTime);
    h5::writeTensor(group.get(), "timestamps", barTimes, options, ExitCode::kFailure);
    h5::writeAttribute(group.get(), "period_rows", period, ExitCode::kFailure);
  }
  h5::Handle endsGroup = h5::createGroup(file.get(), "samples/end", ExitCode::kFailure);
  for (std::size_t s = 0; s < o.streams.size(); ++s)
    h5::writeTensor(endsGroup.get(), o.streams[s].first, ends[s].contiguous(), options,
                    ExitCode::kFailure);
  h5::writeTensor(file.get(), "targets", o.targets == 1 ? targets.reshape({n}) : targets, options,
                  ExitCode::kFailure);
  h5::writeTensor(file.get(), "timestamps", times, options, ExitCode::kFailure);

  hid_t root = file.get();
  auto code = ExitCode::kFailure;
  h5::writeAttribute(root, "layout", std::string("series"), code);
  h5::writeAttribute(root, "generator", std::string("megabatch data synth-series"), code);
  h5::writeAttribute(root, "seed", static_cast<std::int64_t>(o.seed), code);
  h5::writeAttribute(root, "horizon_rows", o.horizon, code);
  h5::writeAttribute(root, "noise", o.noise, code);
  h5::writeAttribute(root, "val_samples",
                     "[" + std::to_string(valBegin) + ", " + std::to_string(valEnd) + ")", code);
  h5::writeAttribute(root, "baseline_mean_val_mse", report.meanMse, code);
  h5::writeAttribute(root, "baseline_last_value_val_mse", report.lastValueMse, code);
  h5::writeAttribute(root, "oracle_val_mse", report.oracleMse, code);
  h5::writeAttribute(
      root, "description",
      std::string(
          "target k = finest close at t + horizon*(k+1); x = OU level + slowly varying amplitude "
          "x sin(phase), period 32 rows; see docs/data-format.md (synth-series)"),
      code);
  file.close(ExitCode::kFailure, o.out);
  progress.finish();
  return report;
}

std::string SynthSeriesReport::summary() const {
  char text[512];
  std::snprintf(
      text, sizeof(text),
      "%lld samples; val MSE on samples [%lld, %lld): mean baseline %.4f, last-value baseline "
      "%.4f, "
      "oracle (knows the latent state) %.4f.\n"
      "A model that beats both baselines by 30%% needs val MSE < %.4f; a small LSTM (hidden 32) "
      "gets close to the oracle (docs/data-format.md).",
      static_cast<long long>(samples), static_cast<long long>(valBegin),
      static_cast<long long>(valEnd), meanMse, lastValueMse, oracleMse,
      0.7 * std::min(meanMse, lastValueMse));
  return text;
}

}  // namespace mb::data
