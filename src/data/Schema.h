#pragma once
// Note [Schema validation]
// A data file is checked in two passes before anything is read for training, every rank
// running both inside dist::agreed so a problem on one rank ends all ranks with its message
// (exit code 3; the message names the file, the dataset, and the expected vs found value):
//
//  1. Layout::open (each layout's file in src/data/layouts/): structure only. The datasets
//     the layout needs exist, have the right number of dimensions, numeric dtypes (strings,
//     bool enums, and compounds are refused), and agree on N. Nothing but metadata is read.
//  2. checkIndexSlice(): the per-sample index arrays (timestamps, series end rows). Rank r
//     of W scans samples [r*N/W, (r+1)*N/W] (one sample of overlap so that the slices join)
//     for decreasing values and end rows outside their stream. Each rank reads ~N/W values.
//
// Values are checked later, on the rows each rank actually loads (non-finite features and
// targets, negative labels, tokens >= vocab_size): see Layout::checkValues. Rows no sample
// uses (before the first complete window, inside embargo gaps) are not checked.
//
// This header holds what every layout shares: the dataset descriptions, the checks a layout's
// open() is written with (namespace schema), and the cached index reader.
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/Hdf5.h"
#include "common/Strings.h"
#include "config/Config.h"

namespace mb::data {

// One dataset of the file: where it is and what it holds.
struct DatasetMeta {
  std::string path;      // inside the file, no leading '/': "series/m1/values"
  h5::DatasetInfo info;  // shape, dtype, chunking, filters
  bool present() const { return !path.empty(); }
  std::int64_t dim(std::size_t i) const { return info.dims.at(i); }
};

// What every layout's file has in common. The layout-specific datasets live in the Layout.
struct FileSchema {
  std::string path;
  std::string layout;           // data.layout
  std::int64_t numSamples = 0;  // N
  DatasetMeta targets;          // per-sample targets ([N] or [N, K]) where the layout has them
  DatasetMeta timestamps;       // optional [N] integer
  bool classification = false;  // integer class labels (model.task = classification)
};

// "/path/f.h5: dataset /targets" for messages.
std::string describeDataset(const FileSchema& schema, const DatasetMeta& dataset);

// The checks pass 1 is written with. Each throws DataError naming the file and dataset, with
// a hint at docs/data-format.md.
namespace schema {

extern const char* const kFormatHint;

std::string stripSlash(const std::string& path);
using str::shapeText;  // "[2, 3]" (common/Strings.h)
std::string where(const std::string& file, const std::string& dataset);
// " (found: /a, /b)": what the group holding `path` contains, for "missing" messages.
std::string siblings(hid_t file, const std::string& path);

// The dataset at `path` (`role` names it in messages); missing is an error.
DatasetMeta require(hid_t file, const std::string& fileName, const std::string& path,
                    const std::string& role);
// As require(), but absent is fine (an empty DatasetMeta).
DatasetMeta optional(hid_t file, const std::string& fileName, const std::string& path,
                     const std::string& role);
void requireRank(const std::string& fileName, const DatasetMeta& d, std::size_t low,
                 std::size_t high, const std::string& expected);
void requireNumeric(const std::string& fileName, const DatasetMeta& d);
void requireInteger(const std::string& fileName, const DatasetMeta& d, const std::string& why);
// `d` has n rows, as `reference` (named in the message) does.
void requireRows(const std::string& fileName, const DatasetMeta& d, std::int64_t n,
                 const DatasetMeta& reference);
// /targets ([N] or [N, K]; [N] integer labels for classification) into s.targets.
void readTargets(FileSchema& s, hid_t file, const Config& config, const DatasetMeta& reference);
// Optional /timestamps [N] integer into s.timestamps.
void readTimestamps(FileSchema& s, hid_t file, const Config& config, const DatasetMeta& reference);
// Rows [begin, end) of the integer [N] dataset `d` never decrease and lie in [low, high];
// `what` names the values in messages.
void checkNonDecreasing(hid_t file, const std::string& fileName, const DatasetMeta& d,
                        std::int64_t begin, std::int64_t end, const std::string& what,
                        std::int64_t low = std::numeric_limits<std::int64_t>::min(),
                        std::int64_t high = std::numeric_limits<std::int64_t>::max());

}  // namespace schema

// Random access to single rows of integer datasets (the per-sample index arrays), cached; the
// binary searches of planning read O(log N) of them.
class IndexReader {
 public:
  IndexReader(hid_t file, std::string fileName);
  // Row `row` of the integer dataset `d`, as int64.
  std::int64_t at(const DatasetMeta& d, std::int64_t row);

 private:
  hid_t file_;
  std::string fileName_;
  std::map<std::pair<std::string, std::int64_t>, std::int64_t> cache_;
};

// 64-bit FNV-1a, for fingerprints and the cross-rank same-file check.
std::uint64_t hashBytes(const void* data, std::size_t size,
                        std::uint64_t seed = 14695981039346656037ULL);

// Up to `samples` evenly spaced rows of a dataset (runs of 64 elements for a 1-D one), hashed in
// their natural dtype. `rows` < 0: over all its rows; else over its first `rows` (Note [Data
// continuity]: the part of a grown file that an older one held).
std::uint64_t hashSampleRows(hid_t file, const DatasetMeta& d, std::uint64_t seed,
                             std::int64_t rows = -1, int samples = 8);

}  // namespace mb::data
