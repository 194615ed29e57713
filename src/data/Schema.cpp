#include "data/Schema.h"

#include <algorithm>

#include <ATen/Functions.h>

#include "common/Error.h"
#include "common/Strings.h"

namespace mb::data {
namespace {

constexpr std::int64_t kScanRows = 1 << 20;  // rows per read when scanning an index array

// Scans rows [begin, end) of an integer [N] dataset in pieces; `visit(row, values, n)` gets
// each piece as int64.
template <class Visit>
void scanRows(hid_t file, const DatasetMeta& d, std::int64_t begin, std::int64_t end, Visit visit) {
  h5::Handle dataset = h5::openDataset(file, d.path, ExitCode::kData);
  for (std::int64_t row = begin; row < end; row += kScanRows) {
    std::int64_t stop = std::min(end, row + kScanRows);
    at::Tensor piece = h5::readRows(dataset.get(), row, stop, at::kLong, ExitCode::kData,
                                    schema::where(h5::fileNameOf(file), d.path));
    visit(row, piece.data_ptr<std::int64_t>(), stop - row);
  }
}

}  // namespace

namespace schema {

const char* const kFormatHint = "see docs/data-format.md for what each layout needs";

std::string stripSlash(const std::string& path) {
  std::string out = path;
  while (!out.empty() && out.front() == '/')
    out.erase(out.begin());
  while (!out.empty() && out.back() == '/')
    out.pop_back();
  return out;
}

std::string where(const std::string& file, const std::string& dataset) {
  return file + ": dataset /" + dataset;
}

std::string siblings(hid_t file, const std::string& path) {
  auto slash = path.rfind('/');
  std::string parent = slash == std::string::npos ? "" : path.substr(0, slash);
  if (!parent.empty() && !h5::isGroup(file, parent)) return "";
  h5::Handle group = h5::openGroup(file, parent.empty() ? "/" : parent, ExitCode::kData);
  std::vector<std::string> names = h5::listGroup(group.get());
  if (names.empty()) return " (/" + parent + " is empty)";
  for (auto& n : names)
    n = (parent.empty() ? "/" : "/" + parent + "/") + n;
  if (names.size() > 12) {
    names.resize(12);
    names.push_back("...");
  }
  return " (found: " + str::join(names, ", ") + ")";
}

DatasetMeta require(hid_t file, const std::string& fileName, const std::string& rawPath,
                    const std::string& role) {
  std::string path = stripSlash(rawPath);
  if (!h5::isDataset(file, path)) {
    std::string what = !h5::exists(file, path)   ? " is missing"
                       : h5::isGroup(file, path) ? " is a group, not a dataset"
                                                 : " is not a dataset";
    bool obvious = path == role || str::endsWith(path, "/" + role);
    throw DataError(
        where(fileName, path) + what + (obvious ? "" : " (" + role + ")") + siblings(file, path),
        std::string(kFormatHint) + "; data.names.* remaps dataset names");
  }
  h5::Handle dataset = h5::openDataset(file, path, ExitCode::kData);
  return {path, h5::describe(dataset.get())};
}

DatasetMeta optional(hid_t file, const std::string& fileName, const std::string& rawPath,
                     const std::string& role) {
  if (!h5::exists(file, stripSlash(rawPath))) return {};
  return require(file, fileName, rawPath, role);
}

void requireRank(const std::string& fileName, const DatasetMeta& d, std::size_t low,
                 std::size_t high, const std::string& expected) {
  std::size_t rank = d.info.dims.size();
  if (rank < low || rank > high)
    throw DataError(where(fileName, d.path) + ": expected shape " + expected + ", found " +
                        std::to_string(rank) + " dimension(s) " + shapeText(d.info.dims),
                    kFormatHint);
}

void requireNumeric(const std::string& fileName, const DatasetMeta& d) {
  h5::naturalScalarType(d.info, ExitCode::kData, where(fileName, d.path));
}

void requireInteger(const std::string& fileName, const DatasetMeta& d, const std::string& why) {
  if (d.info.typeClass != H5T_INTEGER)
    throw DataError(where(fileName, d.path) + ": expected an integer dtype (" + why + "), found " +
                        d.info.typeName(),
                    kFormatHint);
}

void requireRows(const std::string& fileName, const DatasetMeta& d, std::int64_t n,
                 const DatasetMeta& reference) {
  if (d.info.rows() != n)
    throw DataError(where(fileName, d.path) + ": expected N = " + std::to_string(n) +
                        " rows (as /" + reference.path + " " + shapeText(reference.info.dims) +
                        "), found " + std::to_string(d.info.rows()) + " " + shapeText(d.info.dims),
                    "every per-sample dataset needs one row per sample");
}

void readTargets(FileSchema& s, hid_t file, const Config& config, const DatasetMeta& reference) {
  s.targets = require(file, s.path, config.data.names.targets, "targets");
  requireRank(s.path, s.targets, 1, 2, "[N] or [N, K]");
  requireNumeric(s.path, s.targets);
  requireRows(s.path, s.targets, s.numSamples, reference);
  if (s.classification) {
    if (s.targets.info.typeClass != H5T_INTEGER)
      throw DataError(where(s.path, s.targets.path) +
                          ": model.task = classification needs integer class labels, found " +
                          s.targets.info.typeName(),
                      "store labels as int64 (0..classes-1), or use model.task = regression");
    requireRank(s.path, s.targets, 1, 1, "[N] (one label per sample)");
  }
}

void readTimestamps(FileSchema& s, hid_t file, const Config& config, const DatasetMeta& reference) {
  s.timestamps = optional(file, s.path, config.data.names.timestamps, "timestamps");
  if (!s.timestamps.present()) return;
  requireRank(s.path, s.timestamps, 1, 1, "[N]");
  requireInteger(s.path, s.timestamps, "int64 times, e.g. Unix seconds");
  requireRows(s.path, s.timestamps, s.numSamples, reference);
}

void checkNonDecreasing(hid_t file, const std::string& fileName, const DatasetMeta& d,
                        std::int64_t begin, std::int64_t end, const std::string& what,
                        std::int64_t low, std::int64_t high) {
  bool havePrevious = false;
  std::int64_t previous = 0;
  scanRows(file, d, begin, end, [&](std::int64_t row, const std::int64_t* v, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) {
      if (v[i] < low || v[i] > high)
        throw DataError(where(fileName, d.path) + ": " + what + " of sample " +
                            std::to_string(row + i) + " is row " + std::to_string(v[i]) +
                            ", outside the stream's rows [0, " + std::to_string(high + 1) + ")",
                        "each end row must index the stream's values");
      if (havePrevious && v[i] < previous)
        throw DataError(where(fileName, d.path) + ": " + what + " decrease at sample " +
                            std::to_string(row + i) + " (" + std::to_string(previous) + " then " +
                            std::to_string(v[i]) + "); expected non-decreasing",
                        "rows must be in time order: sort the samples by time");
      previous = v[i];
      havePrevious = true;
    }
  });
}

}  // namespace schema

std::string describeDataset(const FileSchema& s, const DatasetMeta& dataset) {
  return schema::where(s.path, dataset.path);
}

IndexReader::IndexReader(hid_t file, std::string fileName)
    : file_(file), fileName_(std::move(fileName)) {}

std::int64_t IndexReader::at(const DatasetMeta& d, std::int64_t row) {
  auto key = std::make_pair(d.path, row);
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second;
  h5::Handle dataset = h5::openDataset(file_, d.path, ExitCode::kData);
  at::Tensor value = h5::readRows(dataset.get(), row, row + 1, at::kLong, ExitCode::kData,
                                  schema::where(fileName_, d.path));
  std::int64_t v = value.data_ptr<std::int64_t>()[0];
  cache_.emplace(key, v);
  return v;
}

std::uint64_t hashSampleRows(hid_t file, const DatasetMeta& d, std::uint64_t seed,
                             std::int64_t rows, int samples) {
  h5::Handle dataset = h5::openDataset(file, d.path, ExitCode::kData);
  rows = rows < 0 ? d.info.rows() : std::min(rows, d.info.rows());
  at::ScalarType type = h5::naturalScalarType(d.info, ExitCode::kData, d.path);
  std::int64_t width = d.info.dims.size() == 1 ? std::min<std::int64_t>(rows, 64) : 1;
  std::uint64_t hash = seed;
  for (std::int64_t k = 0; k < samples && rows > 0; ++k) {
    std::int64_t row = std::min(rows - width, (rows - width) * k / (samples - 1));
    at::Tensor piece = h5::readRows(dataset.get(), row, row + width, type, ExitCode::kData, d.path);
    hash = hashBytes(piece.data_ptr(), piece.numel() * piece.element_size(), hash);
  }
  return hash;
}

std::uint64_t hashBytes(const void* data, std::size_t size, std::uint64_t seed) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  std::uint64_t hash = seed;
  for (std::size_t i = 0; i < size; ++i) {
    hash ^= bytes[i];
    hash *= 1099511628211ULL;
  }
  return hash;
}

}  // namespace mb::data
