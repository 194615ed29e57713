#pragma once
// RUN/predictions.h5: every fold's predictions.h5, in time order, as one file in predict's format
// (src/train/Prediction.cpp) plus
//   /fold              [M] int64: the fold of each row (0-based, in the order below)
//   fold_names         attribute: one line per fold, its name ("2019-04-01")
//   fold_periods       attribute: one line per fold, "FROM TO": the periods it predicted
//   fold_checkpoints   attribute: one line per fold, the checkpoint that predicted them
// and the attributes every, from and to of the walk. Each fold's rows are its predictions.h5's,
// bit for bit, so every sample of [walk.from, walk.to) is there once, predicted by the fold
// whose periods hold it. Written to a temporary file, fsynced and renamed, as checkpoints are.
#include <vector>

#include "config/Config.h"
#include "walk/FoldRecord.h"

namespace mb::walk {

// Rank 0. `folds` in time order; those with no sample are left out. DataError naming the fold
// whose file does not hold its periods' samples.
void stitchPredictions(const Config& config, const std::vector<Fold>& folds);

// RUN/predictions.h5
std::string walkPredictionsPath(const Config& config);

// Rank 0: the rows of the predictions file `more` appended to those of `path` (a fold's file,
// whose periods gained samples when the data file grew), which is rewritten atomically; `more`
// is removed. The rows `path` held stay as they were, bit for bit.
void appendPredictions(const std::string& path, const std::string& more);

}  // namespace mb::walk
