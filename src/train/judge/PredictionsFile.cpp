#include "train/judge/PredictionsFile.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <optional>

#include <ATen/Functions.h>
#include <fmt/format.h>

#include "common/Error.h"
#include "common/Hdf5.h"
#include "common/Strings.h"
#include "data/Batch.h"

namespace mb::train {
// A named namespace around the file's own: a unity build compiles it with others.
namespace predictions_file {
namespace {

constexpr ExitCode kCode = ExitCode::kData;
// Deflate expands at most 1032:1: a filtered dataset declaring more than that many times the
// bytes it stores would be filled by the fill value, not by its data.
constexpr std::int64_t kMaxCompression = 1032;
// The last known targets read from a data file come in runs of rows no further apart than this.
constexpr std::int64_t kRunGap = 64;
const char* const kHint =
    "megabatch predict writes a predictions file; docs/evaluation.md (\"Judging a predictions "
    "file\") lists what one holds";

struct Opened {
  std::string path;
  std::int64_t bytes = 0;  // the file's size
  h5::Handle file;
};

struct Found {
  std::string name;
  h5::DatasetInfo info;
  std::int64_t rows() const { return info.rows(); }
  std::size_t rank() const { return info.dims.size(); }
  bool integer() const { return info.typeClass == H5T_INTEGER; }
};

std::string where(const Opened& f, const std::string& name) {
  return f.path + ": dataset /" + name;
}

std::int64_t fileSize(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 ? static_cast<std::int64_t>(info.st_size) : 0;
}

// Nothing is allocated from a declared shape before this passed: the bytes must be stored in
// the file (or, filtered, within kMaxCompression of what is stored), and what is stored must fit
// in the file.
void requireStored(const Opened& f, hid_t dataset, const Found& d) {
  std::int64_t bytes = static_cast<std::int64_t>(d.info.typeSize);
  for (std::int64_t n : d.info.dims)
    if (n < 0 || __builtin_mul_overflow(bytes, n, &bytes))
      throw DataError(where(f, d.name) + " declares shape " + str::shapeText(d.info.dims) +
                          ", more bytes than any file holds",
                      kHint);
  if (bytes == 0) return;
  const auto stored = static_cast<std::int64_t>(H5Dget_storage_size(dataset));
  H5Eclear2(H5E_DEFAULT);
  h5::Handle plist(H5Dget_create_plist(dataset), H5Pclose);
  const bool filtered = H5Pget_nfilters(plist.get()) > 0;
  const std::string declared = str::shapeText(d.info.dims) + " " + d.info.typeName() + " (" +
                               str::humanBytes(static_cast<double>(bytes)) + ")";
  if (stored > f.bytes)
    throw DataError(where(f, d.name) + " declares " + std::to_string(stored) +
                        " stored bytes, more than the whole file (" + std::to_string(f.bytes) +
                        "): the file is damaged or truncated",
                    kHint);
  if (!filtered && stored < bytes)
    throw DataError(where(f, d.name) + " declares " + declared + " but stores " +
                        std::to_string(stored) +
                        " bytes: its values were never written (a fill value)",
                    kHint);
  if (filtered && bytes / kMaxCompression > stored)
    throw DataError(where(f, d.name) + " declares " + declared + " in " + std::to_string(stored) +
                        " compressed bytes, more than compression can expand to (1032:1)",
                    kHint);
}

// The dataset `name`, checked to be a number dataset whose bytes the file holds; nullopt when
// it is absent and not `required`.
std::optional<Found> find(const Opened& f, const std::string& name, bool required) {
  if (!h5::exists(f.file.get(), name)) {
    if (!required) return std::nullopt;
    throw DataError(where(f, name) + " is missing: a predictions file holds /predictions and " +
                        "/targets, one row per sample",
                    kHint);
  }
  if (!h5::isDataset(f.file.get(), name))
    throw DataError(where(f, name) + " is a group, not a dataset", kHint);
  h5::Handle dataset = h5::openDataset(f.file.get(), name, kCode);
  Found d{name, h5::describe(dataset.get())};
  if (d.info.typeClass != H5T_FLOAT && d.info.typeClass != H5T_INTEGER)
    throw DataError(where(f, name) + ": expected numbers, found " + d.info.typeName(), kHint);
  requireStored(f, dataset.get(), d);
  return d;
}

void requireRank(const Opened& f, const Found& d, std::size_t low, std::size_t high,
                 const std::string& expected) {
  if (d.rank() < low || d.rank() > high)
    throw DataError(where(f, d.name) + ": expected shape " + expected + ", found " +
                        std::to_string(d.rank()) + " dimension(s) " + str::shapeText(d.info.dims),
                    kHint);
}

void requireDims(const Opened& f, const Found& d, const std::vector<std::int64_t>& dims,
                 const std::string& why) {
  if (d.info.dims != dims)
    throw DataError(where(f, d.name) + ": expected shape " + str::shapeText(dims) + " (" + why +
                        "), found " + str::shapeText(d.info.dims),
                    kHint);
}

void requireInteger(const Opened& f, const Found& d, const std::string& what) {
  if (!d.integer())
    throw DataError(
        where(f, d.name) + ": expected integers (" + what + "), found " + d.info.typeName(), kHint);
}

at::Tensor read(const Opened& f, const Found& d, at::ScalarType as) {
  return h5::readTensor(f.file.get(), d.name, kCode, as);
}

// A text attribute, "" when absent; one declaring more bytes than the file is refused unread.
std::string text(const Opened& f, const std::string& name) {
  if (!h5::hasAttribute(f.file.get(), name)) return "";
  h5::Handle attribute(H5Aopen(f.file.get(), name.c_str(), H5P_DEFAULT), H5Aclose);
  h5::Handle type(H5Aget_type(attribute.get()), H5Tclose);
  if (type.valid() && H5Tis_variable_str(type.get()) <= 0 &&
      static_cast<std::int64_t>(H5Tget_size(type.get())) > f.bytes)
    throw DataError(f.path + ": attribute '" + name + "' declares more text than the file holds",
                    kHint);
  return h5::readStringAttribute(f.file.get(), name, kCode);
}

// One entry per line; a last newline ends the last line.
std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out = str::split(text, '\n');
  if (!out.empty() && out.back().empty()) out.pop_back();
  return out;
}

std::vector<std::int64_t> longs(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kLong).contiguous().reshape({-1});
  return {c.data_ptr<std::int64_t>(), c.data_ptr<std::int64_t>() + c.numel()};
}

ForecastKind kindOf(const Opened& f, const Found& pred, const Found& target, bool panel) {
  const std::string task = text(f, "task");
  if (!task.empty() && task != "regression" && task != "classification")
    throw DataError(
        f.path + ": attribute 'task' is '" + task + "', expected regression or classification",
        kHint);
  const bool classes = task == "classification" || (task.empty() && !panel && target.integer() &&
                                                    target.rank() == 1 && pred.rank() == 2);
  if (classes && panel)
    throw DataError(f.path +
                        " holds a panel's classification, which has no predictions to judge "
                        "here (its daily IC is eval's: megabatch eval --checkpoint)",
                    kHint);
  if (classes) return ForecastKind::kClassification;
  return panel ? ForecastKind::kPanelRegression : ForecastKind::kRegression;
}

// The rows as forecastRows makes them from a batch of the whole file.
void readRows(const Opened& f, const Found& pred, const Found& target, PredictionsFile& out) {
  const std::int64_t m = pred.rows();
  if (pred.rank() == 0 || m == 0)
    throw DataError(where(f, "predictions") + " holds no rows " + str::shapeText(pred.info.dims),
                    kHint);
  data::Batch batch;
  if (out.kind == ForecastKind::kClassification) {
    requireRank(f, pred, 2, 2, "[M, C]: the logits of C classes");
    requireDims(f, target, {m}, "one class label per row of /predictions");
    requireInteger(f, target, "class labels 0.." + std::to_string(pred.info.dims[1] - 1));
    batch.targets = read(f, target, at::kLong);
    const std::int64_t low = batch.targets.min().item<std::int64_t>();
    const std::int64_t high = batch.targets.max().item<std::int64_t>();
    if (low < 0 || high >= pred.info.dims[1])
      throw DataError(where(f, "targets") + ": expected class labels 0.." +
                          std::to_string(pred.info.dims[1] - 1) + " (one per logit), found " +
                          std::to_string(low < 0 ? low : high),
                      kHint);
  } else {
    const bool panel = out.kind == ForecastKind::kPanelRegression;
    requireRank(f, pred, panel ? 2 : 1, panel ? 3 : 2,
                panel ? "[M, N] or [M, N, K] (dates, instruments, terms)" : "[M] or [M, K]");
    requireDims(f, target, pred.info.dims, "as /predictions");
    out.terms = pred.rank() == (panel ? 3u : 2u) ? pred.info.dims.back() : 1;
    batch.targets = read(f, target, at::kDouble);
    if (panel) {
      const std::vector<std::int64_t> dates{m, pred.info.dims[1]};
      std::optional<Found> present = find(f, "present", false);
      at::Tensor mask = at::ones(dates, at::kBool);
      if (present) {
        requireDims(f, *present, dates, "[dates, instruments] as /predictions");
        requireInteger(f, *present, "1 where the instrument is present, as uint8");
        mask = read(f, *present, at::kLong) != 0;
      }
      batch.inputs = {at::Tensor(), mask};
    }
  }
  at::Tensor index = at::arange(m, at::kLong);
  if (std::optional<Found> samples = find(f, "sample_index", false)) {
    requireDims(f, *samples, {m}, "one per row of /predictions");
    requireInteger(f, *samples, "the data file's sample numbers");
    index = read(f, *samples, at::kLong);
    const std::vector<std::int64_t> s = longs(index);
    for (std::size_t i = 0; i < s.size(); ++i)
      if (s[i] < 0 || (i > 0 && s[i] <= s[i - 1]))
        throw DataError(where(f, "sample_index") + ": expected non-negative sample numbers, " +
                            "strictly increasing (one row per sample, in sample order), found " +
                            std::to_string(s[i]) + " at row " + std::to_string(i) +
                            (i > 0 ? " after " + std::to_string(s[i - 1]) : std::string()),
                        "sort the rows by sample, one row per sample");
  }
  batch.sampleIndex = index;
  out.samples = m;
  out.rows = forecastRows(out.kind, read(f, pred, at::kDouble), batch);
  const std::vector<std::int64_t> sample = longs(index);
  const auto a = out.rows.accessor<double, 2>();
  for (std::int64_t r = 0; r < out.rows.size(0); ++r) {
    const auto s = static_cast<std::int64_t>(a[r][kRowSample]);
    const std::int64_t row = std::lower_bound(sample.begin(), sample.end(), s) - sample.begin();
    out.fileRow.push_back(row);
    const bool classes = out.kind == ForecastKind::kClassification;
    const char* bad = !std::isfinite(a[r][kRowPrediction]) || !std::isfinite(a[r][kRowLogLoss])
                          ? "predictions"
                      : !std::isfinite(a[r][kRowTarget]) ? "targets"
                                                         : nullptr;
    if (bad != nullptr)
      throw DataError(where(f, bad) + ": row " + std::to_string(row) + " holds " +
                          (classes ? "a logit" : "a value") + " that is not finite" +
                          (out.kind == ForecastKind::kPanelRegression
                               ? " (of an instrument /present marks present)"
                               : ""),
                      "leave such rows out of the file, or mark the instrument absent");
  }
}

// Each forecast row's value of a per-row dataset [M] (or [M, K] by term).
std::vector<double> perForecastRow(const PredictionsFile& out, const at::Tensor& values) {
  const at::Tensor v = values.to(at::kDouble).reshape({out.samples, -1}).contiguous();
  const auto a = v.accessor<double, 2>();
  const auto t = out.rows.accessor<double, 2>();
  std::vector<double> result;
  for (std::size_t r = 0; r < out.fileRow.size(); ++r) {
    const auto term = v.size(1) == 1 ? 0 : static_cast<std::int64_t>(t[r][kRowTerm]);
    result.push_back(a[out.fileRow[r]][term]);
  }
  return result;
}

void readTrainMean(const Opened& f, PredictionsFile& out) {
  if (out.kind == ForecastKind::kClassification) {
    out.missing.push_back(
        "majority class and class frequencies: left out, a predictions file does not hold the "
        "train split's class counts (megabatch eval --checkpoint shows them)");
    return;
  }
  std::optional<Found> mean = find(f, "train_mean", false);
  if (!mean) {
    out.missing.push_back("train mean: left out, " + f.path +
                          " has no /train_mean (megabatch predict writes it from a checkpoint "
                          "that recorded its train split's mean)");
    return;
  }
  const std::int64_t m = out.samples, k = out.terms;
  if (!(mean->info.dims == std::vector<std::int64_t>{m} ||
        mean->info.dims == std::vector<std::int64_t>{m, k}))
    throw DataError(where(f, "train_mean") + ": expected shape " +
                        str::shapeText(std::vector<std::int64_t>{m}) + " or " +
                        str::shapeText(std::vector<std::int64_t>{m, k}) +
                        " (each row's train mean per target term), found " +
                        str::shapeText(mean->info.dims),
                    kHint);
  if (k > 1 && mean->rank() == 1)
    throw DataError(where(f, "train_mean") + ": expected shape " +
                        str::shapeText(std::vector<std::int64_t>{m, k}) + " (" + std::to_string(k) +
                        " target terms), found " + str::shapeText(mean->info.dims),
                    kHint);
  std::vector<double> values = perForecastRow(out, read(f, *mean, at::kDouble));
  if (std::all_of(values.begin(), values.end(), [](double v) { return std::isfinite(v); }))
    out.baselines.trainMeanOfRow = std::move(values);
  else
    out.missing.push_back("train mean: left out, /train_mean holds a value that is not finite");
}

// The targets of `samples` from the data file `data` (dataset `name`), in runs of nearby rows;
// undefined with `why` set when it cannot say.
at::Tensor earlierTargets(const std::string& data, const std::string& name,
                          const std::vector<std::int64_t>& samples, std::int64_t terms,
                          std::string& why) {
  try {
    Opened d{data, fileSize(data), h5::openFile(data, false, kCode)};
    const Found t = *find(d, name, true);
    requireRank(d, t, 1, 2, "[N] or [N, K]");
    const std::int64_t width = t.rank() == 2 ? t.info.dims[1] : 1;
    if (width != terms || t.rows() <= samples.back())
      throw DataError(where(d, name) + ": expected at least " + std::to_string(samples.back() + 1) +
                      " rows of " + std::to_string(terms) + " term(s), found " +
                      str::shapeText(t.info.dims));
    h5::Handle dataset = h5::openDataset(d.file.get(), name, kCode);
    std::vector<at::Tensor> parts;
    for (std::size_t i = 0; i < samples.size();) {
      std::size_t j = i;
      while (j + 1 < samples.size() && samples[j + 1] - samples[j] <= kRunGap)
        ++j;
      const at::Tensor run = h5::readRows(dataset.get(), samples[i], samples[j] + 1, at::kDouble,
                                          kCode, where(d, name))
                                 .reshape({samples[j] + 1 - samples[i], terms});
      std::vector<std::int64_t> picked(samples.begin() + static_cast<std::ptrdiff_t>(i),
                                       samples.begin() + static_cast<std::ptrdiff_t>(j) + 1);
      parts.push_back(run.index_select(0, at::tensor(picked, at::kLong) - samples[i]));
      i = j + 1;
    }
    return at::cat(parts);
  } catch (const Error& error) {
    why = error.message();
    return {};
  }
}

void readLastKnown(const Opened& f, PredictionsFile& out) {
  const std::string layout = text(f, "layout");
  if (out.kind != ForecastKind::kRegression ||
      (!layout.empty() && layout != "series" && layout != "samples"))
    return;  // as eval: the last known target is a series' (Note [Baselines])
  if (h5::hasAttribute(f.file.get(), "horizon"))
    out.horizon = h5::readIntAttribute(f.file.get(), "horizon", kCode);
  if (out.horizon < 0)
    throw DataError(f.path + ": attribute 'horizon' is " + std::to_string(out.horizon) +
                        ", expected the samples a target looks ahead (0 = unknown)",
                    kHint);
  if (out.horizon == 0) {
    out.missing.push_back("last known target: left out, " + f.path +
                          " does not say how far its targets look ahead (attribute horizon: "
                          "data.horizon)");
    return;
  }
  out.data = text(f, "data");
  std::string name = text(f, "targets_dataset");
  name = name.empty() ? "targets" : name;
  bool asked = false;
  std::string why;
  out.baselines.lastKnown = lastKnownTargets(
      out.rows, out.horizon, [&](const std::vector<std::int64_t>& samples, std::int64_t terms) {
        asked = true;
        if (out.data.empty()) {
          why = f.path + " does not name its data file (attribute data)";
          return at::Tensor();
        }
        return earlierTargets(out.data, name, samples, terms, why);
      });
  if (!out.baselines.lastKnown.empty()) return;
  out.missing.push_back("last known target: left out, " +
                        (asked
                             ? "the targets " + std::to_string(out.horizon) +
                                   " samples before the first rows are not in the file, and " + why
                             : "a row looks back before the data file's first sample"));
}

void readFolds(const Opened& f, PredictionsFile& out) {
  std::optional<Found> fold = find(f, "fold", false);
  if (!fold) return;
  requireDims(f, *fold, {out.samples}, "the fold of each row");
  requireInteger(f, *fold, "0-based fold numbers");
  const std::vector<std::int64_t> of = longs(read(f, *fold, at::kLong));
  out.foldNames = lines(text(f, "fold_names"));
  out.foldPeriods = lines(text(f, "fold_periods"));
  out.foldCheckpoints = lines(text(f, "fold_checkpoints"));
  const auto named = static_cast<std::int64_t>(out.foldNames.size());
  // Without names, at most one fold per row: fold numbers cannot make the table grow unbounded.
  const std::int64_t folds = named > 0 ? named : out.samples;
  for (std::size_t i = 0; i < of.size(); ++i)
    if (of[i] < 0 || of[i] >= folds)
      throw DataError(where(f, "fold") + ": row " + std::to_string(i) + " is in fold " +
                          std::to_string(of[i]) + ", expected 0.." + std::to_string(folds - 1) +
                          (named > 0 ? " (one per line of the attribute fold_names)"
                                     : " (0-based, at most one fold per row)"),
                      kHint);
  if (named == 0) {
    const std::int64_t used = *std::max_element(of.begin(), of.end()) + 1;
    for (std::int64_t i = 0; i < used; ++i)
      out.foldNames.push_back(std::to_string(i));
  }
  const std::pair<const char*, const std::vector<std::string>*> described[] = {
      {"fold_periods", &out.foldPeriods}, {"fold_checkpoints", &out.foldCheckpoints}};
  for (const auto& [name, values] : described)
    if (!values->empty() && values->size() != out.foldNames.size())
      throw DataError(f.path + ": attribute '" + name + "' has " + std::to_string(values->size()) +
                          " lines, expected one per fold (" + std::to_string(out.foldNames.size()) +
                          ")",
                      kHint);
  for (std::int64_t row : out.fileRow)
    out.fold.push_back(of[static_cast<std::size_t>(row)]);
}

void readTimes(const Opened& f, PredictionsFile& out) {
  const std::string unit = text(f, "time_unit");
  if (!unit.empty()) {
    const std::optional<TimeUnit> named = timeUnitNamed(unit);
    if (!named)
      throw DataError(f.path + ": attribute 'time_unit' is '" + unit +
                          "', expected s, ms, us, ns, days or yyyymmdd",
                      kHint);
    out.timeUnit = *named;
  }
  std::optional<Found> stamps = find(f, "timestamps", false);
  if (!stamps) return;
  requireDims(f, *stamps, {out.samples}, "the time of each row");
  requireInteger(f, *stamps, "int64 times in the attribute time_unit, default s");
  const std::vector<std::int64_t> all = longs(read(f, *stamps, at::kLong));
  for (std::int64_t row : out.fileRow)
    out.times.push_back(all[static_cast<std::size_t>(row)]);
}

// The heading's attributes; one of another type than predict writes is left out of it.
void readHeading(const Opened& f, PredictionsFile& out) {
  try {
    out.checkpoint = text(f, "checkpoint");
    out.split = text(f, "split");
    if (out.data.empty()) out.data = text(f, "data");
    if (h5::hasAttribute(f.file.get(), "step"))
      out.step = h5::readIntAttribute(f.file.get(), "step", kCode);
  } catch (const Error&) {
  }
}

void readFile(const std::string& path, PredictionsFile& out) {
  Opened f{path, fileSize(path), h5::openFile(path, false, kCode)};
  out.path = path;
  const Found pred = *find(f, "predictions", true);
  const Found target = *find(f, "targets", true);
  const bool panel = text(f, "layout") == "panel" || h5::exists(f.file.get(), "present");
  out.kind = kindOf(f, pred, target, panel);
  readRows(f, pred, target, out);
  readTimes(f, out);
  readTrainMean(f, out);
  readLastKnown(f, out);
  readFolds(f, out);
  readHeading(f, out);
}

}  // namespace
}  // namespace predictions_file

PredictionsFile readPredictionsFile(const std::string& path) {
  std::lock_guard<std::recursive_mutex> lock(h5::libraryMutex());
  h5::silenceLibraryErrors();
  PredictionsFile out;
  predictions_file::readFile(path, out);
  return out;
}

std::map<std::string, double> judgePredictions(const PredictionsFile& file) {
  std::map<std::string, double> judged = judgeForecasts(file.kind, file.rows, file.baselines);
  judged["samples"] = static_cast<double>(file.samples);
  return judged;
}

std::vector<PeriodRow> resultsByFold(const PredictionsFile& file) {
  if (file.fold.empty()) return {};
  return resultsByGroup(file.kind, file.rows, file.fold, file.foldNames, file.baselines);
}

std::vector<PeriodRow> resultsByPeriod(const PredictionsFile& file, Period period) {
  if (file.times.empty())
    throw DataError(file.path + " has no /timestamps dataset, so its rows cannot be grouped by " +
                        "period (--by)",
                    "write each row's time to /timestamps (megabatch predict copies the data "
                    "file's), or leave out --by");
  return resultsByPeriod(file.kind, file.rows, file.times, file.timeUnit, period, file.baselines,
                         file.path, "the time_unit attribute");
}

std::string judgementText(const PredictionsFile& file,
                          const std::map<std::string, double>& judged) {
  std::vector<std::string> about;
  if (!file.fold.empty()) about.push_back(std::to_string(file.foldNames.size()) + " folds");
  if (!file.checkpoint.empty())
    about.push_back("checkpoint " + file.checkpoint +
                    (file.step >= 0 ? " at step " + std::to_string(file.step) : ""));
  if (!file.data.empty())
    about.push_back("data " + file.data +
                    (file.split.empty()       ? ""
                     : file.split == "period" ? ", a period"
                                              : ", " + file.split + " split"));
  std::string text = fmt::format("predictions {} ({} samples{}{}):\n", file.path, file.samples,
                                 about.empty() ? "" : "; ", str::join(about, "; "));
  for (const auto& [name, value] : judged)
    if (!isBaselineName(name)) text += fmt::format("  {:<22} {:.6g}\n", name, value);
  BaselineWords words;
  words.horizon = file.horizon;
  words.missing = file.missing;
  const std::vector<double>& means = file.baselines.trainMeanOfRow;
  if (!means.empty()) {
    const bool one = file.terms == 1 && std::all_of(means.begin(), means.end(),
                                                    [&](double v) { return v == means[0]; });
    words.trainMean = one                 ? trainMeanWords({means[0]})
                      : file.fold.empty() ? "(per row)"
                                          : "(each fold's)";
  }
  return text + baselinesText(judged, "", words);
}

std::string foldTableText(const PredictionsFile& file, const std::vector<PeriodRow>& folds) {
  return groupTableText(folds, file.kind, "fold");
}

}  // namespace mb::train
