#pragma once
// Note [Data continuity]
// A checkpoint records what its run trained on (the identity below, /meta data_identity), so
// that a resume can tell "the same file" from "the same file with rows appended" from "another
// file". Per dataset the run reads (the fingerprint's: inputs, targets, timestamps, window ends;
// and any other a store reads, e.g. a graph's edge list) it keeps the shape, the dtype and a hash
// of every value of every row (Note [Content hash]), as the run holds the values (in the
// resident dtype: a change of data.resident_dtype is named as that, not as other values); and
// the samples, the splits and their times. Against the file configured now:
//   same      every dataset has its shape and hash;
//   appended  every dataset has at least its rows, the same trailing shape and dtype, and its
//             first rows (as many as it had) hash as they did: rows were added at the end;
//   changed   anything else (a dataset gone, new, reshaped, shrunk, or any value rewritten).
// The hash is taken as the rows are loaded: each rank hashes the units of rows it holds (a unit
// held by several ranks, as a window's halo is, by the first of them), the rows no rank holds
// (embargo gaps, rows before the first window, a streamed train split, per-sample arrays no
// store reads) are read once more and hashed, a share on each rank, and one all-reduce adds the
// sums: the identity of a file is the same on any number of ranks, and identifyFile() gives it
// without a load. Training loads and `data check` record it (ShardedData::load's Identity); eval
// and predict do not pay for it. Whether a grown file starts with the old one's rows is told by
// reading only the rows from the old end on (the unit the old end cuts included).
// Scheme 1 (identities without `scheme`, written before every value counted) hashed the inputs
// by 32 sampled rows, per-sample arrays whole up to 8M rows; such a checkpoint is compared the
// way it was made, so it resumes on the same file as it did.
// What a resume does with the answer (go on, refuse, or accept knowingly) is the trainer's
// (train/DataContinuity.h).
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/Config.h"
#include "data/DataInfo.h"

namespace mb::dist {
class Communicator;
}

namespace mb::data {

// The scheme identities are written in now (scheme 1: the sampled rows of before).
constexpr int kIdentityScheme = 2;

struct DatasetIdentity {
  std::string path;
  std::vector<std::int64_t> dims;
  std::string type;  // the file's: "float32"
  std::string hash;  // hex: scheme 2, the sum of its units' hashes (Note [Content hash])
  // Scheme 2: the values as hashed ("bfloat16" under data.resident_dtype = bf16), the dimension
  // its rows run along, the rows of a unit, and the first scheme that lists it (2: a dataset
  // a store reads that scheme 1 left out).
  std::string heldAs;
  int axis = 0;
  std::int64_t unitRows = 0;
  int sinceScheme = 1;
};

struct DataIdentity {
  int scheme = kIdentityScheme;
  std::int64_t samples = 0;
  std::array<SampleRange, 3> splits{};
  std::array<TimeSpan, 3> splitTimes{};
  TimeUnit timeUnit = TimeUnit::kSeconds;
  bool splitsByTime = false;
  std::vector<DatasetIdentity> datasets;
};

// Collective over `comm`, with no data kept: the identity of the file config.data.path as a
// training load with `config` records it (the same datasets, hashes and splits), each rank
// reading and hashing a share of the rows in bounded pieces. An error on one rank ends every
// rank with it (exit 3 for bad data, 2 for a bad config). Compare a checkpoint's identity with it
// on one rank: compareData(checkpointIdentity, identifyFile(config, comm), config.data.path).
// Defined with the loader (ShardedData.cpp), whose planning it shares.
DataIdentity identifyFile(const Config& config, dist::Communicator& comm);

std::string identityToYaml(const DataIdentity& identity);
// nullopt for text that is no identity (a checkpoint from before Note [Data continuity]) or one
// of a scheme newer than this megabatch knows.
std::optional<DataIdentity> identityFromYaml(const std::string& text);

struct DataChange {
  enum class Kind { kSame, kAppended, kChanged };
  Kind kind = Kind::kSame;
  std::vector<std::string> differences;  // what changed, one phrase each (kChanged)
  std::int64_t rowsAdded = 0;            // kAppended: over the datasets with the most rows added
  bool trainHeld = true;                 // the train split has the same samples
  bool valHeld = true;
};

// `before` (a checkpoint's) against `now` (the file at `path`, as loaded or identifyFile() gives
// it). Call it on one rank. It reads the file only where a dataset grew (the rows from its old
// end on: the appended check) or where `before` is of scheme 1 (its sampled rows).
DataChange compareData(const DataIdentity& before, const DataIdentity& now,
                       const std::string& path);

}  // namespace mb::data
