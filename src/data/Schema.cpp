#include "data/Schema.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <sstream>

#include <ATen/Functions.h>

#include "common/Error.h"
#include "common/Strings.h"

namespace mb::data {
namespace {

constexpr const char* kFormatHint = "see docs/data-format.md for what each layout needs";
constexpr std::int64_t kScanRows = 1 << 20;  // rows per read when scanning an index array

std::string stripSlash(const std::string& path) {
  std::string out = path;
  while (!out.empty() && out.front() == '/')
    out.erase(out.begin());
  while (!out.empty() && out.back() == '/')
    out.pop_back();
  return out;
}

std::string shapeText(const std::vector<std::int64_t>& dims) {
  std::vector<std::string> parts;
  for (auto d : dims)
    parts.push_back(std::to_string(d));
  return "[" + str::join(parts, ", ") + "]";
}

std::string where(const std::string& file, const std::string& dataset) {
  return file + ": dataset /" + dataset;
}

// What the group holding `path` contains, for "missing" messages.
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

void readSamples(FileSchema& s, hid_t file, const Config& config) {
  s.features = require(file, s.path, config.data.names.features, "features");
  requireRank(s.path, s.features, 2, 3, "[N, T, F] or [N, F]");
  requireNumeric(s.path, s.features);
  s.numSamples = s.features.info.rows();
  readTargets(s, file, config, s.features);
  readTimestamps(s, file, config, s.features);
}

void readSeries(FileSchema& s, hid_t file, const Config& config) {
  std::string group = stripSlash(config.data.names.series);
  if (!h5::isGroup(file, group))
    throw DataError(
        s.path + ": group /" + group + " (the series streams) is missing" + siblings(file, group),
        std::string(kFormatHint) + "; data.names.series remaps it");
  std::string endsGroup = stripSlash(config.data.names.sampleEnds);
  for (const auto& spec : config.data.streams) {
    StreamMeta stream;
    stream.name = spec.name;
    stream.window = spec.window;
    std::string valuesPath = group + "/" + spec.name + "/values";
    if (!h5::exists(file, group + "/" + spec.name))
      throw DataError(s.path + ": stream '" + spec.name + "' of data.streams has no group /" +
                          group + "/" + spec.name + siblings(file, group + "/" + spec.name),
                      "data.streams names must match the groups under /" + group);
    stream.values = require(file, s.path, valuesPath, "values of stream " + spec.name);
    requireRank(s.path, stream.values, 2, 2, "[T, F] (rows of stream " + spec.name + ")");
    requireNumeric(s.path, stream.values);
    stream.ends = require(file, s.path, endsGroup + "/" + spec.name,
                          "window end rows of stream " + spec.name);
    requireRank(s.path, stream.ends, 1, 1, "[N]");
    requireInteger(s.path, stream.ends, "row indices");
    if (s.streams.empty()) {
      s.numSamples = stream.ends.info.rows();
    } else {
      requireRows(s.path, stream.ends, s.numSamples, s.streams.front().ends);
    }
    s.streams.push_back(stream);
  }
  readTargets(s, file, config, s.streams.front().ends);
  readTimestamps(s, file, config, s.streams.front().ends);
}

void readTokens(FileSchema& s, hid_t file, const Config& config) {
  s.tokens = require(file, s.path, config.data.names.tokens, "tokens");
  requireRank(s.path, s.tokens, 1, 1, "[T]");
  requireInteger(s.path, s.tokens, "token ids: uint8, uint16, or int32");
  h5::Handle dataset = h5::openDataset(file, s.tokens.path, ExitCode::kData);
  if (h5::hasAttribute(dataset.get(), "vocab_size")) {
    s.vocabSize = h5::readIntAttribute(dataset.get(), "vocab_size", ExitCode::kData);
  } else if (h5::hasAttribute(file, "vocab_size")) {
    s.vocabSize = h5::readIntAttribute(file, "vocab_size", ExitCode::kData);
  } else {
    throw DataError(where(s.path, s.tokens.path) + ": attribute vocab_size is missing",
                    "set it with h5py: f['tokens'].attrs['vocab_size'] = 256");
  }
  if (s.vocabSize < 1 || s.vocabSize > (std::int64_t{1} << 31))
    throw DataError(where(s.path, s.tokens.path) + ": vocab_size = " + std::to_string(s.vocabSize) +
                    " must be in [1, 2^31]");
  s.context = config.data.context;
  std::int64_t length = s.tokens.info.rows();
  if (length < s.context + 1)
    throw DataError(
        where(s.path, s.tokens.path) + ": " + std::to_string(length) +
            " tokens, but one sample needs data.context + 1 = " + std::to_string(s.context + 1),
        "use a smaller data.context or more text");
  s.numSamples = (length - 1) / s.context;
}

// Scans rows [begin, end) of an integer [N] dataset in pieces; `visit(row, values)` gets each
// piece as int64.
template <class Visit>
void scanRows(hid_t file, const DatasetMeta& d, std::int64_t begin, std::int64_t end, Visit visit) {
  h5::Handle dataset = h5::openDataset(file, d.path, ExitCode::kData);
  for (std::int64_t row = begin; row < end; row += kScanRows) {
    std::int64_t stop = std::min(end, row + kScanRows);
    at::Tensor piece = h5::readRows(dataset.get(), row, stop, at::kLong, ExitCode::kData,
                                    where(h5::fileNameOf(file), d.path));
    visit(row, piece.data_ptr<std::int64_t>(), stop - row);
  }
}

void checkNonDecreasing(hid_t file, const std::string& fileName, const DatasetMeta& d,
                        std::int64_t begin, std::int64_t end, const std::string& what,
                        std::int64_t low = std::numeric_limits<std::int64_t>::min(),
                        std::int64_t high = std::numeric_limits<std::int64_t>::max()) {
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

// Up to 8 evenly spaced rows of a dataset, hashed in their natural dtype.
std::uint64_t hashSampleRows(hid_t file, const DatasetMeta& d, std::uint64_t seed) {
  h5::Handle dataset = h5::openDataset(file, d.path, ExitCode::kData);
  std::int64_t rows = d.info.rows();
  at::ScalarType type = h5::naturalScalarType(d.info, ExitCode::kData, d.path);
  std::int64_t width = d.info.dims.size() == 1 ? std::min<std::int64_t>(rows, 64) : 1;
  std::uint64_t hash = seed;
  for (std::int64_t k = 0; k < 8 && rows > 0; ++k) {
    std::int64_t row = std::min(rows - width, (rows - width) * k / 7);
    at::Tensor piece = h5::readRows(dataset.get(), row, row + width, type, ExitCode::kData, d.path);
    hash = hashBytes(piece.data_ptr(), piece.numel() * piece.element_size(), hash);
  }
  return hash;
}

std::string hex(std::uint64_t value) {
  char buffer[17];
  std::snprintf(buffer, sizeof(buffer), "%016llx", static_cast<unsigned long long>(value));
  return buffer;
}

}  // namespace

std::string describeDataset(const FileSchema& schema, const DatasetMeta& dataset) {
  return where(schema.path, dataset.path);
}

FileSchema readSchema(hid_t file, const std::string& path, const Config& config) {
  FileSchema s;
  s.path = path;
  s.layout = config.data.layout;
  s.classification = config.model.task == Task::kClassification && s.layout != Layout::kTokens;
  switch (s.layout) {
    case Layout::kSamples:
      readSamples(s, file, config);
      break;
    case Layout::kSeries:
      readSeries(s, file, config);
      break;
    case Layout::kTokens:
      readTokens(s, file, config);
      break;
  }
  if (s.numSamples < 1) throw DataError(path + ": the file has no samples (N = 0)", kFormatHint);
  return s;
}

void checkIndexSlice(hid_t file, const FileSchema& s, int rank, int worldSize) {
  std::int64_t n = s.numSamples;
  std::int64_t begin = n * rank / worldSize;
  std::int64_t end = std::min(n, n * (rank + 1) / worldSize + 1);
  if (begin >= end) return;
  if (s.timestamps.present())
    checkNonDecreasing(file, s.path, s.timestamps, begin, end, "timestamps");
  for (const auto& stream : s.streams) {
    checkNonDecreasing(file, s.path, stream.ends, begin, end, "window end rows", 0,
                       stream.values.info.rows() - 1);
  }
}

SampleIndex::SampleIndex(hid_t file, const FileSchema& schema) : file_(file), schema_(schema) {}

std::int64_t SampleIndex::cached(const std::string& path, std::int64_t row) {
  auto key = std::make_pair(path, row);
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second;
  h5::Handle dataset = h5::openDataset(file_, path, ExitCode::kData);
  at::Tensor value = h5::readRows(dataset.get(), row, row + 1, at::kLong, ExitCode::kData,
                                  where(schema_.path, path));
  std::int64_t v = value.data_ptr<std::int64_t>()[0];
  cache_.emplace(key, v);
  return v;
}

std::int64_t SampleIndex::end(std::size_t stream, std::int64_t sample) {
  return cached(schema_.streams.at(stream).ends.path, sample);
}

std::int64_t SampleIndex::windowStart(std::size_t stream, std::int64_t sample) {
  return end(stream, sample) - schema_.streams.at(stream).window + 1;
}

std::int64_t SampleIndex::firstComplete() {
  std::int64_t first = 0;
  for (std::size_t s = 0; s < schema_.streams.size(); ++s) {
    // Ends are non-decreasing (checked), so "window starts at row >= 0" is monotone in i.
    std::int64_t low = 0, high = schema_.numSamples;
    while (low < high) {
      std::int64_t mid = low + (high - low) / 2;
      if (windowStart(s, mid) >= 0) {
        high = mid;
      } else {
        low = mid + 1;
      }
    }
    first = std::max(first, low);
  }
  return first;
}

std::int64_t SampleIndex::firstDisjoint(std::int64_t previous, std::int64_t cut) {
  // Ends are non-decreasing, so "no stream's window reaches back to `previous`'s windows" is
  // monotone in the sample index: binary search for its first true.
  auto disjoint = [&](std::int64_t sample) {
    for (std::size_t s = 0; s < schema_.streams.size(); ++s) {
      if (windowStart(s, sample) <= end(s, previous)) return false;
    }
    return true;
  };
  std::int64_t low = std::max(cut, previous + 1), high = schema_.numSamples;
  while (low < high) {
    std::int64_t mid = low + (high - low) / 2;
    if (disjoint(mid)) {
      high = mid;
    } else {
      low = mid + 1;
    }
  }
  return low;
}

std::int64_t SampleIndex::timestamp(std::int64_t sample) {
  return cached(schema_.timestamps.path, sample);
}

std::string fingerprint(hid_t file, const FileSchema& s, SampleIndex& index) {
  std::ostringstream text;
  auto slash = s.path.rfind('/');
  text << (slash == std::string::npos ? s.path : s.path.substr(slash + 1));
  text << "|"
       << (s.layout == Layout::kSamples  ? "samples"
           : s.layout == Layout::kSeries ? "series"
                                         : "tokens");
  text << "|N=" << s.numSamples;
  std::uint64_t hash = hashBytes("megabatch", 9);
  auto add = [&](const DatasetMeta& d) {
    if (!d.present()) return;
    text << "|/" << d.path << shapeText(d.info.dims) << d.info.typeName();
    hash = hashSampleRows(file, d, hash);
  };
  add(s.features);
  add(s.tokens);
  for (const auto& stream : s.streams) {
    add(stream.values);
    add(stream.ends);
  }
  add(s.targets);
  add(s.timestamps);
  if (s.timestamps.present())
    text << "|t=" << index.timestamp(0) << ".." << index.timestamp(s.numSamples - 1);
  if (s.layout == Layout::kTokens) text << "|vocab=" << s.vocabSize;
  text << "|h=" << hex(hash);
  return text.str();
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
