#pragma once
// The walk's report: eval's metrics over every out-of-sample prediction together, the baselines
// with their skills (each row's own fold's train mean), one row per fold and the share of folds
// in which the model beat each baseline, and per fold its splits, steps and wall time. Printed,
// and written to RUN/walk.json.
#include <string>
#include <vector>

#include "config/Config.h"
#include "walk/FoldRecord.h"

namespace mb::walk {

// Rank 0, after stitchPredictions.
void reportWalk(const Config& config, const std::vector<Fold>& folds,
                const std::vector<std::string>& acceptedChanges);

}  // namespace mb::walk
