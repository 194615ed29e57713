#include "data/layouts/PanelLayout.h"

#include <algorithm>
#include <optional>

#include <ATen/Functions.h>

#include "common/Error.h"
#include "common/Strings.h"

namespace mb::data {
namespace {

constexpr const char* kPanelName = "panel";

std::optional<std::string> checkPanelConfig(const Config& c) {
  if (c.data.panel.window < 1)
    return "data.panel.window = " + std::to_string(c.data.panel.window) + " must be >= 1";
  return std::nullopt;
}

// The batch carries the graph's returns when the model builds a correlation graph.
std::int64_t graphLookback(const Config& c) {
  const GraphConfig& g = c.model.graph;
  return g.layers > 0 && g.k > 0 ? g.lookback : 0;
}

// The dates a sample's inputs reach back: the window, and the graph's lookback whenever one is
// configured (also with model.graph.layers = 0, so that the same model without the graph is
// trained and evaluated on the same dates).
std::int64_t historyOf(const Config& c) {
  const GraphConfig& g = c.model.graph;
  return std::max(c.data.panel.window, g.k > 0 ? g.lookback : 0);
}

std::string timeRange(hid_t file, const DatasetMeta& time) {
  if (!time.present() || time.info.typeClass != H5T_INTEGER || time.info.rows() < 1) return {};
  h5::Handle d = h5::openDataset(file, time.path, ExitCode::kData);
  at::Tensor first = h5::readRows(d.get(), 0, 1, at::kLong, ExitCode::kData, time.path);
  at::Tensor last = h5::readRows(d.get(), time.info.rows() - 1, time.info.rows(), at::kLong,
                                 ExitCode::kData, time.path);
  return "\ntime range: " + std::to_string(first.item<std::int64_t>()) + " .. " +
         std::to_string(last.item<std::int64_t>()) + " (/" + time.path + ")";
}

std::optional<std::string> inspectPanel(hid_t file, const std::vector<ListedDataset>& datasets) {
  const ListedDataset* values = nullptr;
  DatasetMeta time;
  bool mask = false, sector = false;
  for (const auto& d : datasets) {
    if (d.path == "values" && d.info.dims.size() == 3) values = &d;
    if (d.path == "mask") mask = true;
    if (d.path == "sector") sector = true;
    if (d.path == "time") time = {d.path, d.info};
  }
  if (values == nullptr) return std::nullopt;
  const auto& dims = values->info.dims;
  return "layout: panel, values " + schema::shapeText(dims) + " " + values->info.typeName() +
         " (dates x instruments x features)" + (mask ? ", /mask" : ", no /mask (all present)") +
         (sector ? ", /sector" : "") + "\nsamples: " + std::to_string(dims[0]) + " dates of " +
         std::to_string(dims[1]) + " instruments" + timeRange(file, time);
}

// `d` has `low`..`high` dimensions; the hint says how to write it (h5py users reshape).
void requirePanelRank(const std::string& path, const DatasetMeta& d, std::size_t low,
                      std::size_t high, const std::string& expected, const std::string& fix) {
  const std::size_t rank = d.info.dims.size();
  if (rank >= low && rank <= high) return;
  throw DataError(schema::where(path, d.path) + ": expected shape " + expected + ", found " +
                      std::to_string(rank) + " dimension(s) " + schema::shapeText(d.info.dims),
                  fix);
}

// `d`'s first dimensions are [T, N] as /values's.
void requireDatesByInstruments(const std::string& path, const DatasetMeta& d,
                               const DatasetMeta& values, const std::string& fix) {
  if (d.dim(0) == values.dim(0) && d.dim(1) == values.dim(1)) return;
  throw DataError(
      schema::where(path, d.path) + ": expected [T, N] = [" + std::to_string(values.dim(0)) + ", " +
          std::to_string(values.dim(1)) + "] leading dimensions (as /" + values.path + " " +
          schema::shapeText(values.info.dims) + "), found " + schema::shapeText(d.info.dims),
      fix);
}

void requireMaskType(const std::string& path, const DatasetMeta& mask) {
  if (mask.info.typeClass == H5T_INTEGER || mask.info.typeClass == H5T_ENUM) return;
  throw DataError(schema::where(path, mask.path) +
                      ": expected bool or integer entries (nonzero = present), found " +
                      mask.info.typeName(),
                  "write the mask as bool or uint8, e.g. np.isfinite(values).all(-1)");
}

DatasetMeta readMask(hid_t file, const std::string& path, const Config& config,
                     const DatasetMeta& values) {
  DatasetMeta mask = schema::optional(file, path, config.data.names.mask, "mask");
  if (!mask.present()) return mask;
  requirePanelRank(path, mask, 2, 2, "[T, N] (instrument present on the date)",
                   "write the mask as a [T, N] array, one entry per date and instrument (e.g. "
                   "np.isfinite(values).all(-1)), not per date or per feature");
  requireDatesByInstruments(path, mask, values,
                            "write one mask entry per date and instrument of /" + values.path);
  requireMaskType(path, mask);
  return mask;
}

DatasetMeta readTarget(hid_t file, const std::string& path, const Config& config,
                       const DatasetMeta& values) {
  DatasetMeta target = schema::require(file, path, config.data.names.target, "target");
  requirePanelRank(path, target, 2, 3, "[T, N] or [T, N, K]",
                   "write one target per date and instrument ([T, N], or [T, N, K] for K "
                   "targets), in the order of /values");
  schema::requireNumeric(path, target);
  requireDatesByInstruments(path, target, values,
                            "write one target per date and instrument of /" + values.path);
  return target;
}

// An optional [N] dataset of per-instrument facts.
DatasetMeta readPerInstrument(hid_t file, const std::string& path, const std::string& name,
                              const std::string& role, const DatasetMeta& values) {
  DatasetMeta d = schema::optional(file, path, name, role);
  if (!d.present()) return d;
  schema::requireRank(path, d, 1, 1, "[N] (one per instrument)");
  if (d.info.rows() != values.dim(1))
    throw DataError(
        schema::where(path, d.path) + ": expected N = " + std::to_string(values.dim(1)) +
            " entries (the instruments of /" + values.path + " " +
            schema::shapeText(values.info.dims) + "), found " + schema::shapeText(d.info.dims),
        "write one entry per instrument, in the order of /" + values.path);
  return d;
}

}  // namespace

LayoutKind panelLayoutKind() {
  LayoutKind kind;
  kind.name = kPanelName;
  kind.summary =
      "dates x instruments: /values [T, N, F], /mask [T, N], /target [T, N] or [T, N, K]; a "
      "sample is one date";
  kind.marker = "/values";
  kind.open = PanelLayout::open;
  kind.checkConfig = checkPanelConfig;
  kind.inspect = inspectPanel;
  return kind;
}

PanelLayout::PanelLayout(FileSchema schema, Datasets datasets, Settings settings)
    : Layout(std::move(schema)), datasets_(std::move(datasets)), settings_(settings) {}

std::shared_ptr<const Layout> PanelLayout::open(hid_t file, const std::string& path,
                                                const Config& config) {
  const DataNames& names = config.data.names;
  FileSchema s;
  s.path = path;
  s.layout = kPanelName;
  Datasets d;
  d.values = schema::require(file, path, names.values, "values");
  requirePanelRank(path, d.values, 3, 3, "[T, N, F] (dates x instruments x features)",
                   "write /values as [T, N, F] (a single feature as [T, N, 1]: values[..., None]); "
                   "one series per instrument is the series or samples layout");
  schema::requireNumeric(path, d.values);
  d.mask = readMask(file, path, config, d.values);
  d.target = readTarget(file, path, config, d.values);
  d.instruments = readPerInstrument(file, path, names.instruments, "instrument names", d.values);
  d.sector = readPerInstrument(file, path, names.sector, "sector ids", d.values);
  if (d.sector.present()) schema::requireInteger(path, d.sector, "sector ids, < 0 for none");
  s.numSamples = d.values.dim(0);
  s.targets = d.target;
  s.timestamps = schema::optional(file, path, names.time, "time");
  if (s.timestamps.present()) {
    schema::requireRank(path, s.timestamps, 1, 1, "[T]");
    schema::requireInteger(path, s.timestamps, "int64 dates, e.g. Unix seconds or 20240131");
    schema::requireRows(path, s.timestamps, s.numSamples, d.values);
  }

  Settings settings;
  settings.window = config.data.panel.window;
  settings.history = historyOf(config);
  settings.lookback = graphLookback(config);
  settings.feature = config.model.graph.feature;
  settings.sector = config.model.graph.layers > 0 && config.model.graph.sectorEdges;
  settings.normalize = config.data.panel.normalize;
  settings.normalizeTarget = config.data.panel.normalizeTarget;
  const std::int64_t features = d.values.dim(2);
  if (settings.lookback > 0 && (settings.feature < 0 || settings.feature >= features))
    throw ConfigError("model.graph.feature = " + std::to_string(settings.feature) +
                          " is not a column of " + path + " /" + d.values.path +
                          " (F = " + std::to_string(features) + " features)",
                      "set model.graph.feature to the column that holds the return (0.." +
                          std::to_string(features - 1) + ")");
  if (settings.sector && !d.sector.present())
    throw DataError(path + ": model.graph.sector_edges = true, but the file has no dataset /" +
                        schema::stripSlash(names.sector) +
                        schema::siblings(file, schema::stripSlash(names.sector)),
                    "write /sector [N] integer sector ids (data.names.sector remaps it), or set "
                    "model.graph.sector_edges=false");
  return std::shared_ptr<const Layout>(new PanelLayout(std::move(s), std::move(d), settings));
}

std::int64_t PanelLayout::history() const {
  return std::max({settings_.window, settings_.lookback, settings_.history});
}

void PanelLayout::describe(DataInfo& info) const {
  const auto& dims = datasets_.target.info.dims;
  info.targetShape.assign(dims.begin() + 2, dims.end());  // per instrument: {} or {K}
  info.integerTargets = false;
  info.inputs = {{"values", settings_.window, datasets_.values.dim(2)}, {"mask", 0, 0}};
  if (settings_.lookback > 0) info.inputs.push_back({"returns", settings_.lookback, 1});
  if (settings_.sector) info.inputs.push_back({"sector", 0, 0});
}

std::vector<DatasetMeta> PanelLayout::contentDatasets() const {
  std::vector<DatasetMeta> datasets{datasets_.values};
  // The shared row hash reads natural numeric types; a bool (enum) mask is named below.
  if (datasets_.mask.present() && datasets_.mask.info.typeClass == H5T_INTEGER)
    datasets.push_back(datasets_.mask);
  if (settings_.sector) datasets.push_back(datasets_.sector);
  return datasets;
}

std::string PanelLayout::fingerprintDetail() const {
  std::string text = "|window=" + std::to_string(history());
  if (datasets_.mask.present() && datasets_.mask.info.typeClass != H5T_INTEGER)
    text += "|/" + datasets_.mask.path + schema::shapeText(datasets_.mask.info.dims) +
            datasets_.mask.info.typeName();
  return text;
}

std::int64_t PanelLayout::firstUsableSample(IndexReader& /*index*/) const {
  const std::int64_t dates = schema_.numSamples;
  if (dates >= history()) return history() - 1;
  std::string needs = "data.panel.window = " + std::to_string(settings_.window);
  if (history() > settings_.window)
    needs += ", model.graph.lookback = " + std::to_string(history());
  throw DataError(schema::where(schema_.path, datasets_.values.path) +
                      " has T = " + std::to_string(dates) + " dates, but a sample needs " +
                      std::to_string(history()) + " dates of history (" + needs + ")",
                  "use a longer panel, or lower data.panel.window (and model.graph.lookback)");
}

// A date's inputs reach H-1 dates back and its target (typically) one ahead: H dates apart,
// no two samples of different splits share an input row, nor a target's date.
NextStart PanelLayout::oneWindowEmbargo(IndexReader& /*index*/) const {
  return fixedGap(history());
}

}  // namespace mb::data
