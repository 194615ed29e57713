#pragma once
// Note [Data continuity]
// A checkpoint records what its run trained on (the identity below, /meta data_identity), so
// that a resume can tell "the same file" from "the same file with rows appended" from "another
// file". Per content dataset (the fingerprint's: inputs, targets, timestamps) it keeps the shape,
// the dtype and a hash: of every value for a per-sample array (targets, timestamps, window ends)
// of up to 8M rows, else of 32 evenly spaced rows; and the samples, the splits and their times.
// Against the file configured now:
//   same      every dataset has its shape and hash;
//   appended  every dataset has at least its rows, the same trailing shape and dtype, and its
//             first rows (as many as it had) hash as they did: rows were added at the end;
//   changed   anything else (a dataset gone, new, reshaped, shrunk, or rewritten).
// Where the hash samples rows (the inputs), an edit between sampled rows is not seen.
// What a resume does with the answer (go on, refuse, or accept knowingly) is the trainer's
// (train/DataContinuity.h).
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/Hdf5.h"
#include "data/DataInfo.h"

namespace mb::data {

class Layout;

struct DatasetIdentity {
  std::string path;
  std::vector<std::int64_t> dims;
  std::string type;  // "float32"
  std::string hash;  // hex, over all its rows
};

struct DataIdentity {
  std::int64_t samples = 0;
  std::array<SampleRange, 3> splits{};
  std::array<TimeSpan, 3> splitTimes{};
  TimeUnit timeUnit = TimeUnit::kSeconds;
  bool splitsByTime = false;
  std::vector<DatasetIdentity> datasets;
};

// The identity of the file `layout` read, split as `info` says.
DataIdentity identify(hid_t file, const Layout& layout, const DataInfo& info);
std::string identityToYaml(const DataIdentity& identity);
// nullopt for text that is no identity (a checkpoint from before Note [Data continuity]).
std::optional<DataIdentity> identityFromYaml(const std::string& text);

struct DataChange {
  enum class Kind { kSame, kAppended, kChanged };
  Kind kind = Kind::kSame;
  std::vector<std::string> differences;  // what changed, one phrase each (kChanged)
  std::int64_t rowsAdded = 0;            // kAppended: over the datasets with the most rows added
  bool trainHeld = true;                 // the train split has the same samples
  bool valHeld = true;
};

// `before` (a checkpoint's) against `now` (the file at `path`, as loaded). Reads a few rows of
// the file (the appended check); call it on one rank.
DataChange compareData(const DataIdentity& before, const DataIdentity& now,
                       const std::string& path);

}  // namespace mb::data
