// The panel layout's stores: which rows a store of dates reads, the value checks on what was
// read, and the gather of a batch of dates (the file's checks and open() are in PanelLayout.cpp).
#include "data/layouts/PanelLayout.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include <ATen/Functions.h>

#include "common/Error.h"

namespace mb::data {
namespace {

// Rows the value check scans at once: it allocates a bool per value of them.
constexpr std::int64_t kCheckBytes = std::int64_t{64} << 20;

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

// Instruments present on each stored date (the GAT encodes only those, Gat::encodePresent).
at::Tensor PanelLayout::sampleWeights(const std::vector<at::Tensor>& store) const {
  const std::int64_t dates = store[kTargets].size(0);
  return store[kMask].narrow(0, history() - 1, dates).sum(1).to(at::kLong).cpu();
}

// The store's mask starts history() - 1 dates before its first sample (the windows' rows).
at::Tensor PanelLayout::targetsPresent(const std::vector<at::Tensor>& store) const {
  return store[kMask].narrow(0, history() - 1, store[kTargets].size(0));
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
