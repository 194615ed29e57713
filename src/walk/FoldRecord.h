#pragma once
// What the walk keeps of a fold on disk, besides its run directory's own files:
// RUN/folds/<name>/fold.json, written (atomically) once the fold's predictions.h5 is. Its
// presence marks the fold done: a walk run again skips it. It holds what the walk's report
// shows of the fold (its periods, splits as times, steps and where its wall time went).
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/Config.h"
#include "data/DataInfo.h"
#include "walk/WalkPlan.h"

namespace mb::walk {

struct FoldRecord {
  std::string name;           // "2019-04-01"
  std::string from, to;       // the predicted periods: [from, to)
  std::string periods;        // their labels, "2019-04" or "2019-04 2019-05"
  std::string train, val;     // the splits as describeSplit writes them
  std::string checkpoint;     // the file that predicted them
  std::int64_t rows = 0;      // samples predicted
  std::int64_t step = 0;      // the step the fold's training reached
  std::int64_t stepsRun = 0;  // steps taken by the process that finished it
  double trainSeconds = 0, evalSeconds = 0, predictSeconds = 0, wallSeconds = 0;
  // Rank 0's host memory once the fold was done: its RSS, and the most it held since the fold's
  // training started (VmHWM; the trainer resets it). Folds in one process must not grow them.
  std::int64_t rssBytes = 0, peakRssBytes = 0;
  double overheadSeconds() const;  // start-up, reading the file, checkpoints
  std::string json() const;        // one JSON object
};

// A fold as the walk runs it (the same on every rank; `record` on rank 0).
struct Fold {
  FoldPlan plan;
  std::string dir;                            // RUN/folds/<name>
  std::string labels;                         // its periods' labels, "2019-04 2019-05"
  data::SampleRange predicted;                // the samples of its periods
  std::array<data::SampleRange, 3> splits{};  // train, val, test as the loader plans them
  std::string initFrom;                       // its train.init_from (Note [Walk-forward])
  std::int64_t doneRows = -1;  // the rows its record says it predicted; -1: not done (every rank)
  std::optional<FoldRecord> record;  // rank 0
};

// RUN/folds/<name>
std::string foldDirectory(const std::string& runDir, const std::string& name);
// RUN/folds/<name>/fold.json written atomically.
void writeFoldRecord(const std::string& runDir, const FoldRecord& record);
// The record of a done fold; nullopt when the fold is not done. A damaged file is nullopt too:
// the fold is predicted again (its training, done, is kept).
std::optional<FoldRecord> readFoldRecord(const std::string& runDir, const std::string& name);

// The keys whose values differ between a config and the one a fold trained with, leaving out
// what says how a run goes rather than what it computes (run.*, threads, residency, memory
// budgets, timeouts) and what a walk may change between runs (data.path, walk.to).
std::vector<std::string> changedKeys(const Config& now, const Config& trained);

}  // namespace mb::walk
