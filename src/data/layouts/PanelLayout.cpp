#include "data/layouts/PanelLayout.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include <ATen/Functions.h>

#include "common/Error.h"
#include "common/Strings.h"

namespace mb::data {
namespace {

constexpr const char* kName = "panel";
// Rows the value check scans at once: it allocates a bool per value of them.
constexpr std::int64_t kCheckBytes = std::int64_t{64} << 20;

std::optional<std::string> checkConfig(const Config& c) {
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

std::optional<std::string> inspect(hid_t file, const std::vector<ListedDataset>& datasets) {
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

// Row `row` of a string dataset (fixed-length or variable-length), or "" if it cannot be read.
std::string readStringRow(const std::string& file, const std::string& dataset, std::int64_t row) {
  std::lock_guard<std::recursive_mutex> lock(h5::libraryMutex());
  try {
    h5::Handle f = h5::openFile(file, false, ExitCode::kData);
    h5::Handle d = h5::openDataset(f.get(), dataset, ExitCode::kData);
    h5::Handle type(H5Dget_type(d.get()), H5Tclose);
    if (H5Tget_class(type.get()) != H5T_STRING) return {};
    h5::Handle space(H5Dget_space(d.get()), H5Sclose);
    hsize_t start = static_cast<hsize_t>(row), count = 1;
    H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, &start, nullptr, &count, nullptr);
    h5::Handle one(H5Screate_simple(1, &count, nullptr), H5Sclose);
    h5::Handle memory(H5Tcopy(H5T_C_S1), H5Tclose);
    std::string text;
    if (H5Tis_variable_str(type.get()) > 0) {
      H5Tset_size(memory.get(), H5T_VARIABLE);
      char* value = nullptr;
      if (H5Dread(d.get(), memory.get(), one.get(), space.get(), H5P_DEFAULT, &value) < 0)
        return {};
      if (value != nullptr) text = value;
      H5free_memory(value);
    } else {
      std::size_t size = H5Tget_size(type.get());
      H5Tset_size(memory.get(), size + 1);
      std::vector<char> buffer(size + 1, '\0');
      if (H5Dread(d.get(), memory.get(), one.get(), space.get(), H5P_DEFAULT, buffer.data()) < 0)
        return {};
      text = buffer.data();
    }
    return text;
  } catch (const std::exception&) {
    H5Eclear2(H5E_DEFAULT);
    return {};
  }
}

// The first non-finite value of `entry` as text ("nan", "inf", "-inf").
std::string nonFiniteText(const at::Tensor& entry) {
  at::Tensor v = entry.reshape({-1}).to(at::kDouble).cpu();
  const double* p = v.data_ptr<double>();
  for (std::int64_t i = 0; i < v.numel(); ++i) {
    if (std::isnan(p[i])) return "nan";
    if (std::isinf(p[i])) return p[i] > 0 ? "inf" : "-inf";
  }
  return "non-finite";
}

// Which of a plan's reads is which (the mask and sector reads are optional).
struct PlanSlots {
  std::optional<std::size_t> values, mask, target, sector;
};

PlanSlots slotsOf(const StorePlan& plan) {
  PlanSlots slots;
  for (std::size_t i = 0; i < plan.reads.size(); ++i) {
    const ReadSpec& read = plan.reads[i];
    if (read.role == Role::kTargets) slots.target = i;
    if (read.role == Role::kInput && read.part == PanelLayout::kValues) slots.values = i;
    if (read.role == Role::kInput && read.part == PanelLayout::kMask) slots.mask = i;
    if (read.role == Role::kIndex && read.part == PanelLayout::kSector) slots.sector = i;
  }
  return slots;
}

// [R, N] bool: the mask read, or every instrument present when the file has no mask.
at::Tensor presentOf(const PlanSlots& slots, const std::vector<at::Tensor>& tensors) {
  const at::Tensor& values = tensors.at(*slots.values);
  if (slots.mask) return tensors.at(*slots.mask).ne(0);
  return at::ones({values.size(0), values.size(1)}, values.options().dtype(at::kBool));
}

}  // namespace

LayoutKind panelLayoutKind() {
  LayoutKind kind;
  kind.name = kName;
  kind.summary =
      "dates x instruments: /values [T, N, F], /mask [T, N], /target [T, N] or [T, N, K]; a "
      "sample is one date";
  kind.marker = "/values";
  kind.open = PanelLayout::open;
  kind.checkConfig = checkConfig;
  kind.inspect = inspect;
  return kind;
}

PanelLayout::PanelLayout(FileSchema schema, Datasets datasets, Settings settings)
    : Layout(std::move(schema)), datasets_(std::move(datasets)), settings_(settings) {}

std::shared_ptr<const Layout> PanelLayout::open(hid_t file, const std::string& path,
                                                const Config& config) {
  const DataNames& names = config.data.names;
  FileSchema s;
  s.path = path;
  s.layout = kName;
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

// Reads, in this order: the values rows the dates' histories cover, the mask rows (when the
// file has a mask), the targets of the dates, the sector ids (when the graph uses them).
StorePlan PanelLayout::planStore(SampleRange samples, DType residentDtype,
                                 IndexReader& /*index*/) const {
  StorePlan plan;
  plan.samples = samples;
  const std::int64_t n = samples.size();
  // An empty store reads nothing, from its own first date (so offsets into it stay 0).
  const ItemRange rows = n > 0 ? ItemRange{samples.begin - history() + 1, samples.end}
                               : ItemRange{samples.begin, samples.begin};
  ReadSpec values;
  values.part = kValues;
  values.path = datasets_.values.path;
  values.rows = rows;
  values.shape = withRows(rows.size(), datasets_.values.info.dims);
  values.type = residentFloatType(residentDtype);
  values.haloRows = history() - 1;
  plan.reads.push_back(values);
  if (datasets_.mask.present()) {
    ReadSpec mask = values;
    mask.part = kMask;
    mask.path = datasets_.mask.path;
    mask.shape = withRows(rows.size(), datasets_.mask.info.dims);
    mask.type = at::kByte;
    plan.reads.push_back(mask);
  }
  ReadSpec target;
  target.role = Role::kTargets;
  target.path = datasets_.target.path;
  target.rows = {samples.begin, samples.end};
  target.shape = withRows(n, datasets_.target.info.dims);
  target.type = at::kFloat;
  plan.reads.push_back(target);
  if (settings_.sector) {
    ReadSpec sector;
    sector.role = Role::kIndex;
    sector.part = kSector;
    sector.path = datasets_.sector.path;
    sector.rows = {0, instruments()};
    sector.shape = {instruments()};
    sector.type = at::kLong;
    plan.reads.push_back(sector);
  }
  return plan;
}

std::string PanelLayout::instrumentName(std::int64_t n) const {
  std::string text = "instrument " + std::to_string(n);
  if (!datasets_.instruments.present()) return text;
  std::string name = readStringRow(schema_.path, datasets_.instruments.path, n);
  return name.empty() ? text : text + " ('" + name + "')";
}

void PanelLayout::requireFiniteWherePresent(const ReadSpec& read, const at::Tensor& values,
                                            const at::Tensor& present, std::int64_t firstRow,
                                            const std::string& fix) const {
  const std::int64_t rows = values.size(0);
  const std::int64_t rowBytes =
      std::max<std::int64_t>(1, values.numel() / std::max<std::int64_t>(1, rows));
  const std::int64_t step = std::max<std::int64_t>(1, kCheckBytes / rowBytes);
  for (std::int64_t begin = 0; begin < rows; begin += step) {
    const std::int64_t count = std::min(step, rows - begin);
    at::Tensor part = values.narrow(0, begin, count);
    at::Tensor bad = at::isfinite(part).logical_not();  // [count, N, ...]
    if (bad.dim() > 2) bad = bad.flatten(2).any(2);     // [count, N]
    bad = bad.logical_and(present.narrow(0, begin, count));
    if (!bad.any().item<bool>()) continue;
    const std::int64_t first = bad.reshape({-1}).nonzero()[0][0].item<std::int64_t>();
    const std::int64_t row = first / bad.size(1), instrument = first % bad.size(1);
    throw DataError(schema::where(schema_.path, read.path) + ": non-finite value (" +
                        nonFiniteText(part[row][instrument]) + ") at date " +
                        std::to_string(firstRow + begin + row) + ", " + instrumentName(instrument) +
                        (datasets_.mask.present()
                             ? ", where /" + datasets_.mask.path + " says the instrument is present"
                             : std::string(" (the file has no /mask)")) +
                        " (the first in the rows this rank loaded)",
                    fix);
  }
}

// Pass 3: values and targets must be finite wherever the instrument is present (absent
// entries may hold anything: prepareStore zeroes them).
void PanelLayout::checkValues(const StorePlan& plan, const std::vector<at::Tensor>& tensors) const {
  const PlanSlots slots = slotsOf(plan);
  const at::Tensor present = presentOf(slots, tensors);
  const ReadSpec& values = plan.reads[*slots.values];
  const std::string maskFix =
      datasets_.mask.present()
          ? "set /" + datasets_.mask.path +
                " to 0 where the instrument has no data, or fill the "
                "value (e.g. pandas ffill) before writing the file"
          : "add a /mask [T, N] (0 where the instrument has no data), or fill the value";
  requireFiniteWherePresent(values, tensors[*slots.values], present, values.rows.begin, maskFix);
  const ReadSpec& target = plan.reads[*slots.target];
  const std::int64_t offset = target.rows.begin - values.rows.begin;
  requireFiniteWherePresent(
      target, tensors[*slots.target], present.narrow(0, offset, target.rows.size()),
      target.rows.begin,
      "set the mask to 0 where the target is unknown (e.g. the last date, whose forward return "
      "is not known yet), or drop those dates");
}

// Normalises per date (Note [Panel samples]) and fixes the store's slots: values, mask,
// targets, sector (undefined without).
std::vector<at::Tensor> PanelLayout::prepareStore(const StorePlan& plan,
                                                  std::vector<at::Tensor> tensors) const {
  const PlanSlots slots = slotsOf(plan);
  const at::Tensor present = presentOf(slots, tensors);  // [R, N]
  const at::Tensor& raw = tensors[*slots.values];        // [R, N, F], may be a read-only map
  at::Tensor values =
      normalizeAcrossInstruments(raw, present, settings_.normalize).to(raw.scalar_type());
  const ReadSpec& target = plan.reads[*slots.target];
  const std::int64_t offset = target.rows.begin - plan.reads[*slots.values].rows.begin;
  at::Tensor targets = normalizeAcrossInstruments(
      tensors[*slots.target], present.narrow(0, offset, target.rows.size()),
      settings_.normalizeTarget);  // [n, N] or [n, N, K]
  at::Tensor sector = slots.sector ? tensors[*slots.sector] : at::Tensor();
  return {values, present, targets, sector};
}

Batch PanelLayout::gather(const std::vector<at::Tensor>& store, const at::Tensor& local,
                          at::ScalarType inputType) const {
  const at::Tensor& values = store[kValues];  // [R, N, F]
  const at::Tensor& present = store[kMask];   // [R, N]
  const std::int64_t count = local.size(0), n = values.size(1), f = values.size(2);
  const std::int64_t window = settings_.window;
  at::Tensor row = local + (history() - 1);  // [B]: each date's row in the store
  Batch batch;
  at::Tensor rows = row.unsqueeze(1) + at::arange(-(window - 1), 1, local.options());  // [B, W]
  batch.inputs.push_back(values.index_select(0, rows.reshape({-1}))
                             .view({count, window, n, f})
                             .permute({0, 2, 1, 3})
                             .contiguous()
                             .to(inputType));            // [B, N, W, F]
  batch.inputs.push_back(present.index_select(0, row));  // [B, N]
  if (settings_.lookback > 0) {
    const std::int64_t lookback = settings_.lookback;
    at::Tensor past =
        (row.unsqueeze(1) + at::arange(-(lookback - 1), 1, local.options())).reshape({-1});
    at::Tensor returns =
        values.select(2, settings_.feature).index_select(0, past).view({count, lookback, n});
    at::Tensor seen = present.index_select(0, past).view({count, lookback, n});
    batch.inputs.push_back(at::where(seen, returns.to(at::kFloat),
                                     at::full({}, std::numeric_limits<float>::quiet_NaN(),
                                              returns.options().dtype(at::kFloat)))
                               .transpose(1, 2)
                               .contiguous());  // [B, N, L]
  }
  if (settings_.sector)
    batch.inputs.push_back(store[kSector].unsqueeze(0).expand({count, n}).contiguous());
  batch.targets = store[kTargets].index_select(0, local);  // [B, N] or [B, N, K]
  return batch;
}

at::Tensor normalizeAcrossInstruments(const at::Tensor& x, const at::Tensor& present,
                                      PanelNorm mode) {
  std::vector<std::int64_t> shape(x.dim(), 1);  // present broadcast over trailing dimensions
  shape[0] = x.size(0);
  shape[1] = x.size(1);
  at::Tensor mask = present.view(shape);
  at::Tensor zero = at::zeros({}, x.options().dtype(at::kFloat));
  at::Tensor values = at::where(mask, x.to(at::kFloat), zero);  // a new tensor, NaN-free
  if (mode == PanelNorm::kNone) return values;
  at::Tensor weight = mask.to(at::kFloat);
  at::Tensor count = weight.sum(1, /*keepdim=*/true).clamp_min(1);  // [R, 1, ...]
  if (mode == PanelNorm::kZscore) {
    at::Tensor centred = (values - values.sum(1, true) / count) * weight;
    at::Tensor std = (centred.square().sum(1, true) / count).sqrt();
    return at::where(std > 1e-12, centred / std.clamp_min(1e-12), zero);
  }
  // Ranks among the present instruments (ties in instrument order), absent ones sorted last,
  // mapped to (rank + 0.5) / count - 0.5 and scaled to unit variance (a uniform's is 1/12).
  const std::int64_t n = x.size(1);
  at::Tensor key = at::where(mask, values, at::full({}, INFINITY, values.options()));
  at::Tensor order =
      std::get<1>(at::sort(key, c10::optional<bool>(true), /*dim=*/1, /*descending=*/false));
  std::vector<std::int64_t> positions(x.dim(), 1);
  positions[1] = n;
  at::Tensor ranks = at::empty_like(order).scatter_(
      1, order, at::arange(n, order.options()).view(positions).expand_as(order));
  at::Tensor score = ((ranks.to(at::kFloat) + 0.5) / count - 0.5) * std::sqrt(12.0);
  return at::where(mask, score, zero);
}

}  // namespace mb::data
