#pragma once
// `megabatch predict`: a trained model's predictions over a split or a period of a data file,
// written to HDF5 one row per sample (the format is in src/train/Prediction.cpp's header
// comment and docs/evaluation.md). The app's command and the walk-forward's folds both call it,
// so a fold's rows are exactly what `megabatch predict` of that fold writes.
#include <cstdint>
#include <string>
#include <vector>

#include "config/Config.h"

namespace mb::data {
struct DataInfo;
}
namespace mb::dist {
class Runtime;
}

namespace mb::train {

struct PredictRequest {
  std::string checkpoint;              // a checkpoint file or a run directory
  std::string data;                    // the data file
  std::string out;                     // the HDF5 file to write (atomically)
  std::string split = "all";           // all, train, val or test; "" with a period: every split
  PeriodSelection period;              // --from/--to (inactive: the whole split)
  std::int64_t batch = 0;              // samples per forward pass; 0: chosen
  double memoryBudgetMb = 0;           // 0: 90% of what is available
  std::string precision;               // "" : the default (Note [Precision of a new run])
  std::vector<std::string> overrides;  // key=value applied to the checkpoint's config
};

struct PredictResult {
  std::int64_t rows = 0;  // samples written
  std::string what;       // "the period 2024-03-01 to ... (--from ...)" or "all split"
};

// eval and predict --from/--to (Note [Selected period]): the period loaded as the test split,
// in words ("the period 2024-03-01 to 2024-03-07 (--from ..., every split)").
std::string describePeriod(const PeriodSelection& period, const data::DataInfo& info);

// Runs in this process alone (rank 0 of a job; the other ranks have nothing to do). Throws
// ConfigError, DataError or CheckpointError naming what is wrong.
PredictResult predictToFile(const PredictRequest& request, dist::Runtime& runtime);

}  // namespace mb::train
