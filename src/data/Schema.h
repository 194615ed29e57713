#pragma once
// Note [Schema validation]
// A data file is checked in two passes before anything is read for training, every rank
// running both inside dist::agreed so a problem on one rank ends all ranks with its message
// (exit code 3; the message names the file, the dataset, and the expected vs found value):
//
//  1. readSchema(): structure only. The datasets the layout needs exist, have the right
//     number of dimensions, numeric dtypes (strings, bool enums, and compounds are refused),
//     and agree on N. Nothing but metadata is read.
//  2. checkIndexSlice(): the per-sample index arrays (timestamps, series end rows). Rank r
//     of W scans samples [r*N/W, (r+1)*N/W] (one sample of overlap so that the slices join)
//     for decreasing values and end rows outside their stream. Each rank reads ~N/W values.
//
// Values are checked later, on the rows each rank actually loads (non-finite features and
// targets, negative labels, tokens >= vocab_size): see checkValues() in Store.h. Rows no
// sample uses (before the first complete window, inside embargo gaps) are not checked.
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/Hdf5.h"
#include "config/Config.h"

namespace mb::data {

// One dataset of the file: where it is and what it holds.
struct DatasetMeta {
  std::string path;      // inside the file, no leading '/': "series/m1/values"
  h5::DatasetInfo info;  // shape, dtype, chunking, filters
  bool present() const { return !path.empty(); }
  std::int64_t dim(std::size_t i) const { return info.dims.at(i); }
};

struct StreamMeta {
  std::string name;         // "m5"
  std::int64_t window = 0;  // rows per sample window (from the config)
  DatasetMeta values;       // [T_g, F_g]
  DatasetMeta ends;         // [N] integer: row of the last window row of each sample
};

struct FileSchema {
  std::string path;
  Layout layout = Layout::kSamples;
  std::int64_t numSamples = 0;  // N; tokens: items of context+1 tokens
  DatasetMeta features;         // samples: [N, T, F] or [N, F]
  DatasetMeta targets;          // samples, series: [N] or [N, K]
  DatasetMeta timestamps;       // optional [N] integer
  DatasetMeta tokens;           // tokens: [T] integer
  std::vector<StreamMeta> streams;
  std::int64_t context = 0;     // tokens
  std::int64_t vocabSize = 0;   // tokens
  bool classification = false;  // integer class labels (model.task = classification)
};

// "/path/f.h5: dataset /targets" for messages.
std::string describeDataset(const FileSchema& schema, const DatasetMeta& dataset);

// Pass 1 of Note [Schema validation]. Throws DataError.
FileSchema readSchema(hid_t file, const std::string& path, const Config& config);

// Pass 2 of Note [Schema validation] for this rank's slice. Throws DataError naming the first
// bad sample index.
void checkIndexSlice(hid_t file, const FileSchema& schema, int rank, int worldSize);

// Random access to single rows of the per-sample index arrays, cached; the binary searches
// of planning read O(log N) of them.
class SampleIndex {
 public:
  SampleIndex(hid_t file, const FileSchema& schema);

  // Series: the row of sample i's last window row in stream s.
  std::int64_t end(std::size_t stream, std::int64_t sample);
  // Series: the first row of sample i's window in stream s (end - window + 1).
  std::int64_t windowStart(std::size_t stream, std::int64_t sample);
  // Series: the first sample whose window starts at row >= 0 in every stream (0 otherwise).
  std::int64_t firstComplete();
  // Series: the first sample >= cut whose windows share no row with sample `previous`'s
  // windows in any stream; numSamples if none.
  std::int64_t firstDisjoint(std::int64_t previous, std::int64_t cut);
  // The timestamp of sample i (requires schema.timestamps).
  std::int64_t timestamp(std::int64_t sample);

 private:
  std::int64_t cached(const std::string& path, std::int64_t row);

  hid_t file_;
  const FileSchema& schema_;
  std::map<std::pair<std::string, std::int64_t>, std::int64_t> cache_;
};

// Identifies the file's content: name, layout, shapes, dtypes, time range, and a hash of a
// few evenly spaced rows of every dataset. Equal on every rank that sees the same file.
std::string fingerprint(hid_t file, const FileSchema& schema, SampleIndex& index);

// 64-bit FNV-1a, for fingerprints and the cross-rank same-file check.
std::uint64_t hashBytes(const void* data, std::size_t size,
                        std::uint64_t seed = 14695981039346656037ULL);

}  // namespace mb::data
