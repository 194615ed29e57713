// What the layouts share: the base behaviour of Layout, pass 2 per rank, the fingerprint, and
// the value checks of pass 3.
#include "data/Layout.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include <ATen/Functions.h>

#include "common/Error.h"
#include "data/pipeline/ValueScan.h"

namespace mb::data {
namespace {

// The first non-finite value of row `row`, as text ("nan", "inf", "-inf").
std::string firstNonFinite(const at::Tensor& t, std::int64_t row) {
  at::Tensor values = t[row].reshape({-1}).to(at::kDouble).cpu();
  const double* v = values.data_ptr<double>();
  for (std::int64_t i = 0; i < values.numel(); ++i) {
    if (std::isnan(v[i])) return "nan";
    if (std::isinf(v[i])) return v[i] > 0 ? "inf" : "-inf";
  }
  return "non-finite";
}

std::string hex(std::uint64_t value) {
  char buffer[17];
  std::snprintf(buffer, sizeof(buffer), "%016llx", static_cast<unsigned long long>(value));
  return buffer;
}

std::string sampleRow(std::int64_t fileRow) {
  return "sample " + std::to_string(fileRow);
}

}  // namespace

void Layout::checkIndexSlice(hid_t file, std::int64_t begin, std::int64_t end) const {
  if (schema_.timestamps.present())
    schema::checkNonDecreasing(file, schema_.path, schema_.timestamps, begin, end, "timestamps");
}

void Layout::describe(DataInfo& info) const {
  if (schema_.targets.present())
    info.targetShape.assign(schema_.targets.info.dims.begin() + 1, schema_.targets.info.dims.end());
  info.integerTargets = schema_.classification;
}

std::int64_t Layout::firstUsableSample(IndexReader& /*index*/) const {
  return 0;
}

void Layout::checkValues(const StorePlan& plan, const std::vector<at::Tensor>& tensors) const {
  for (std::size_t i = 0; i < plan.reads.size(); ++i) {
    const ReadSpec& read = plan.reads[i];
    const at::Tensor& t = tensors.at(i);
    switch (read.role) {
      case Role::kInput:
        checkInput(read, t);
        break;
      case Role::kTargets:
        if (schema_.classification) {
          requireNonNegativeLabels(schema_, read, t);
        } else {
          requireFinite(schema_, read, t, sampleRow);
        }
        break;
      case Role::kIndex:
        break;  // checked by checkIndexSlice
    }
  }
}

void Layout::checkInput(const ReadSpec& read, const at::Tensor& values) const {
  requireFinite(schema_, read, values, sampleRow);
}

ReadSpec Layout::targetsRead(SampleRange samples) const {
  ReadSpec read;
  read.role = Role::kTargets;
  read.path = schema_.targets.path;
  read.rows = {samples.begin, samples.end};
  read.shape = withRows(samples.size(), schema_.targets.info.dims);
  read.type = schema_.classification ? at::kLong : at::kFloat;
  return read;
}

std::vector<at::Tensor> Layout::prepareStore(const StorePlan& /*plan*/,
                                             std::vector<at::Tensor> tensors) const {
  return tensors;
}

void checkIndexSlice(hid_t file, const Layout& layout, int rank, int worldSize) {
  std::int64_t n = layout.schema().numSamples;
  std::int64_t begin = n * rank / worldSize;
  std::int64_t end = std::min(n, n * (rank + 1) / worldSize + 1);
  if (begin < end) layout.checkIndexSlice(file, begin, end);
}

std::string fingerprint(hid_t file, const Layout& layout, IndexReader& index) {
  const FileSchema& s = layout.schema();
  std::ostringstream text;
  auto slash = s.path.rfind('/');
  text << (slash == std::string::npos ? s.path : s.path.substr(slash + 1));
  text << "|" << s.layout << "|N=" << s.numSamples;
  std::uint64_t hash = hashBytes("megabatch", 9);
  auto add = [&](const DatasetMeta& d) {
    if (!d.present()) return;
    text << "|/" << d.path << schema::shapeText(d.info.dims) << d.info.typeName();
    hash = hashSampleRows(file, d, hash);
  };
  for (const auto& d : layout.contentDatasets())
    add(d);
  add(s.targets);
  add(s.timestamps);
  if (s.timestamps.present())
    text << "|t=" << index.at(s.timestamps, 0) << ".." << index.at(s.timestamps, s.numSamples - 1);
  text << layout.fingerprintDetail();
  text << "|h=" << hex(hash);
  return text.str();
}

void requireFinite(const FileSchema& schema, const ReadSpec& read, const at::Tensor& values,
                   const std::function<std::string(std::int64_t fileRow)>& rowName) {
  std::int64_t row = firstNonFiniteRow(values);
  if (row < 0) return;
  throw DataError(describeDataset(schema, {read.path, {}}) + ": non-finite value (" +
                      firstNonFinite(values, row) + ") at " + rowName(read.rows.begin + row) +
                      " (the first in the rows this rank loaded)",
                  "clean or drop that row (e.g. pandas ffill/dropna) before writing the file");
}

void requireNonNegativeLabels(const FileSchema& schema, const ReadSpec& read,
                              const at::Tensor& labels) {
  std::int64_t row = firstOutOfRangeRow(labels, 0, std::numeric_limits<std::int64_t>::max());
  if (row < 0) return;
  throw DataError(describeDataset(schema, {read.path, {}}) + ": class label " +
                      std::to_string(labels[row].item<std::int64_t>()) + " at sample " +
                      std::to_string(read.rows.begin + row) + " is negative",
                  "labels must be 0..classes-1");
}

}  // namespace mb::data
