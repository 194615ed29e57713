// megabatch data synth-panel: Note [Synthetic panel] in Tools.h.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include <ATen/Functions.h>

#include "common/Error.h"
#include "common/Hdf5.h"
#include "data/tools/Random.h"
#include "data/tools/ToolOutput.h"
#include "data/tools/Tools.h"

namespace mb::data {
namespace {

constexpr double kSignalPersistence = 0.95;           // AR(1) coefficient of z
constexpr double kSignalNoise = 0.5;                  // std of the noise on the observed signal
constexpr double kLateListingShare = 0.1;             // instruments absent before a date
constexpr std::int64_t kPanelStartTime = 1577836800;  // 2020-01-01T00:00:00Z
constexpr std::int64_t kDaySeconds = 86400;

void validate(const SynthPanelOptions& o) {
  if (o.out.empty()) throw ConfigError("megabatch data synth-panel needs --out FILE.h5");
  if (o.dates < 10 || o.instruments < 2 || o.features < 2 || o.sectors < 1 || o.targets < 1)
    throw ConfigError(
        "synth-panel: --dates must be >= 10, --instruments >= 2, --features >= 2 (return and "
        "signal), --sectors >= 1, --targets >= 1");
  if (o.sectors > o.instruments)
    throw ConfigError("synth-panel: --sectors " + std::to_string(o.sectors) + " exceeds " +
                      "--instruments " + std::to_string(o.instruments));
  if (o.missing < 0 || o.missing >= 0.5)
    throw ConfigError("synth-panel: --missing must be in [0, 0.5)");
}

// Pearson correlation of x and y over the entries where `use` is set; 0 when undefined.
double correlation(const std::vector<double>& x, const std::vector<double>& y,
                   const std::vector<char>& use) {
  double n = 0, mx = 0, my = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (!use[i]) continue;
    n += 1;
    mx += x[i];
    my += y[i];
  }
  if (n < 2) return 0;
  mx /= n;
  my /= n;
  double sxy = 0, sxx = 0, syy = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (!use[i]) continue;
    sxy += (x[i] - mx) * (y[i] - my);
    sxx += (x[i] - mx) * (x[i] - mx);
    syy += (y[i] - my) * (y[i] - my);
  }
  return sxx > 0 && syy > 0 ? sxy / std::sqrt(sxx * syy) : 0;
}

// Ranks of x among the used entries (ties in index order); unused entries get 0.
std::vector<double> ranks(const std::vector<double>& x, const std::vector<char>& use) {
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (use[i]) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return x[a] < x[b]; });
  std::vector<double> out(x.size(), 0.0);
  for (std::size_t r = 0; r < order.size(); ++r)
    out[order[r]] = static_cast<double>(r);
  return out;
}

// Mean daily IC (Pearson, rank) of `prediction` against `target` over dates [begin, end).
struct DailyIc {
  double ic = 0, rankIc = 0;
};
DailyIc dailyIc(const std::vector<std::vector<double>>& prediction,
                const std::vector<std::vector<double>>& target,
                const std::vector<std::vector<char>>& present, std::int64_t begin,
                std::int64_t end) {
  DailyIc out;
  for (std::int64_t t = begin; t < end; ++t) {
    out.ic += correlation(prediction[t], target[t], present[t]);
    out.rankIc +=
        correlation(ranks(prediction[t], present[t]), ranks(target[t], present[t]), present[t]);
  }
  const double dates = static_cast<double>(std::max<std::int64_t>(1, end - begin));
  out.ic /= dates;
  out.rankIc /= dates;
  return out;
}

// A [N] fixed-length string dataset ("I0000", ...).
void writeNames(hid_t file, const std::string& name, std::int64_t count, ExitCode code) {
  const std::size_t width = 12;  // "I" and up to 10 digits, NUL-padded
  std::vector<char> text(static_cast<std::size_t>(count) * width, '\0');
  for (std::int64_t i = 0; i < count; ++i) {
    std::string name = std::to_string(i);
    name = "I" + std::string(name.size() < 4 ? 4 - name.size() : 0, '0') + name;
    name.copy(text.data() + i * width, width - 1);
  }
  hsize_t dims = static_cast<hsize_t>(count);
  h5::Handle space(H5Screate_simple(1, &dims, nullptr), H5Sclose);
  h5::Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.get(), width);
  h5::Handle dataset(H5Dcreate2(file, name.c_str(), type.get(), space.get(), H5P_DEFAULT,
                                H5P_DEFAULT, H5P_DEFAULT),
                     H5Dclose);
  if (!dataset.valid() ||
      H5Dwrite(dataset.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, text.data()) < 0)
    throw makeError(code, h5::fileNameOf(file) + ": cannot write dataset " + name);
}

}  // namespace

SynthPanelReport writeSynthPanel(const SynthPanelOptions& o) {
  validate(o);
  h5::WriteOptions options = writeOptions(o.write);
  at::ScalarType type = valueType(o.dtype);
  const std::int64_t T = o.dates, N = o.instruments, F = o.features, S = o.sectors;
  const std::int64_t K = o.targets;
  Rng rng(o.seed);

  std::vector<double> beta(N), gamma(N);
  std::vector<std::int64_t> sector(N), listing(N, 0), members(S, 0);
  for (std::int64_t i = 0; i < N; ++i) {
    beta[i] = 0.5 + rng.uniform();
    gamma[i] = 0.5 + rng.uniform();
    sector[i] = i % S;
    ++members[sector[i]];
    if (rng.uniform() < kLateListingShare) listing[i] = rng.below(T / 2);
  }

  // Latent signals and realised returns, [T + K][N] (returns after the panel feed the
  // targets of its last dates, which are masked).
  std::vector<std::vector<double>> z(T + K, std::vector<double>(N)),
      r(T + K + 1, std::vector<double>(N));
  std::vector<std::vector<double>> expected(T + K, std::vector<double>(N));
  std::vector<std::vector<double>> ownPart(T + K, std::vector<double>(N));
  const double innovation = std::sqrt(1 - kSignalPersistence * kSignalPersistence);
  for (std::int64_t i = 0; i < N; ++i)
    z[0][i] = rng.normal();
  for (std::int64_t t = 0; t < T + K; ++t) {
    if (t > 0) {
      for (std::int64_t i = 0; i < N; ++i)
        z[t][i] = kSignalPersistence * z[t - 1][i] + innovation * rng.normal();
    }
    std::vector<double> peers(S, 0.0);
    for (std::int64_t i = 0; i < N; ++i)
      peers[sector[i]] += z[t][i];
    for (std::int64_t i = 0; i < N; ++i) {
      ownPart[t][i] = o.own * z[t][i];
      expected[t][i] = ownPart[t][i] + o.peer * peers[sector[i]] /
                                           std::sqrt(static_cast<double>(members[sector[i]]));
    }
  }
  for (std::int64_t t = 0; t <= T + K; ++t) {
    const double market = rng.normal();
    std::vector<double> sectorReturn(S);
    for (auto& s : sectorReturn)
      s = o.sectorVol * rng.normal();
    for (std::int64_t i = 0; i < N; ++i)
      r[t][i] = beta[i] * market + gamma[i] * sectorReturn[sector[i]] +
                (t > 0 ? expected[t - 1][i] : 0.0) + rng.normal();
  }

  // Presence, values, targets.
  std::vector<std::vector<char>> present(T, std::vector<char>(N));
  at::Tensor values = at::empty({T, N, F}, at::kDouble);
  at::Tensor targets = at::empty({T, N, K}, at::kFloat);
  at::Tensor mask = at::empty({T, N}, at::kByte);
  double* v = values.data_ptr<double>();
  float* y = targets.data_ptr<float>();
  std::uint8_t* m = mask.data_ptr<std::uint8_t>();
  const double nan = std::nan("");
  std::int64_t presentCount = 0;
  std::vector<std::vector<double>> firstTarget(T, std::vector<double>(N));
  for (std::int64_t t = 0; t < T; ++t) {
    for (std::int64_t i = 0; i < N; ++i) {
      bool here = t >= listing[i] && rng.uniform() >= o.missing && t < T - K;
      present[t][i] = here;
      m[t * N + i] = here ? 1 : 0;
      presentCount += here ? 1 : 0;
      double* row = v + (t * N + i) * F;
      row[0] = here ? r[t][i] : nan;
      row[1] = here ? z[t][i] + kSignalNoise * rng.normal() : nan;
      for (std::int64_t f = 2; f < F; ++f)
        row[f] = here ? rng.normal() : nan;
      for (std::int64_t k = 0; k < K; ++k)
        y[(t * N + i) * K + k] =
            here ? static_cast<float>(r[t + k + 1][i]) : std::numeric_limits<float>::quiet_NaN();
      firstTarget[t][i] = r[t + 1][i];
    }
  }

  SynthPanelReport report;
  report.valBegin = T * 8 / 10;
  report.valEnd = T * 9 / 10;
  report.presentShare = static_cast<double>(presentCount) / static_cast<double>(T * N);
  std::vector<std::vector<double>> oracle(expected.begin(), expected.begin() + T);
  std::vector<std::vector<double>> own(ownPart.begin(), ownPart.begin() + T);
  DailyIc best = dailyIc(oracle, firstTarget, present, report.valBegin, report.valEnd);
  DailyIc alone = dailyIc(own, firstTarget, present, report.valBegin, report.valEnd);
  report.oracleIc = best.ic;
  report.oracleRankIc = best.rankIc;
  report.ownIc = alone.ic;
  report.ownRankIc = alone.rankIc;

  constexpr auto code = ExitCode::kFailure;
  h5::Handle file = h5::createFile(o.out, false, code);
  h5::writeTensor(file.get(), "values", values.to(type), options, code);
  h5::writeTensor(file.get(), "mask", mask, options, code);
  h5::writeTensor(file.get(), "target", K == 1 ? targets.reshape({T, N}) : targets, options, code);
  h5::writeTensor(file.get(), "time",
                  at::arange(T, at::kLong).mul_(kDaySeconds).add_(kPanelStartTime), options, code);
  h5::writeTensor(file.get(), "sector", at::tensor(sector, at::kLong), {}, code);
  writeNames(file.get(), "instruments", N, code);
  hid_t root = file.get();
  h5::writeAttribute(root, "layout", std::string("panel"), code);
  h5::writeAttribute(root, "generator", std::string("megabatch data synth-panel"), code);
  h5::writeAttribute(root, "seed", static_cast<std::int64_t>(o.seed), code);
  h5::writeAttribute(root, "own", o.own, code);
  h5::writeAttribute(root, "peer", o.peer, code);
  h5::writeAttribute(root, "sector_vol", o.sectorVol, code);
  h5::writeAttribute(
      root, "val_dates",
      "[" + std::to_string(report.valBegin) + ", " + std::to_string(report.valEnd) + ")", code);
  h5::writeAttribute(root, "oracle_val_ic", report.oracleIc, code);
  h5::writeAttribute(root, "oracle_val_rank_ic", report.oracleRankIc, code);
  h5::writeAttribute(root, "own_signal_oracle_val_ic", report.ownIc, code);
  h5::writeAttribute(root, "own_signal_oracle_val_rank_ic", report.ownRankIc, code);
  h5::writeAttribute(root, "xs_mean_val_ic", 0.0, code);
  h5::writeAttribute(
      root, "description",
      std::string("target = next-date return; expected return = own*z_i + peer*(sector sum of z) "
                  "/ sqrt(members); features [return, noisy z, noise...]; see docs/data-format.md "
                  "(synth-panel)"),
      code);
  file.close(code, o.out);
  return report;
}

std::string SynthPanelReport::summary() const {
  char text[640];
  std::snprintf(
      text, sizeof(text),
      "%.1f%% of instrument-dates present; mean daily IC on dates [%lld, %lld): oracle (own + "
      "sector signal) %.3f (rank %.3f), own-signal oracle (what a per-instrument model can reach "
      "with the exact signal) %.3f (rank %.3f), cross-sectional mean 0 (constant per date).",
      100.0 * presentShare, static_cast<long long>(valBegin), static_cast<long long>(valEnd),
      oracleIc, oracleRankIc, ownIc, ownRankIc);
  return text;
}

}  // namespace mb::data
