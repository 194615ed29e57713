#pragma once
// Before a walk run again trains anything, the folds done before must still hold:
//   the config   each done fold's config.yaml against the config the walk gives it now, less what
//                says how a run goes (FoldRecord.h, changedKeys) and walk.to and data.path, which
//                extend a walk;
//   the data     the file now against the data each fold with a checkpoint trained on (Note [Data
//                continuity]): rows appended are an extension; other changes (restated history)
//                are not.
// Either change is exit 3 before any training, naming the folds and the remedies: a new run.dir,
// or run.allow_data_change: true, which goes on and records the change (walk.log, walk.json).
#include <string>
#include <vector>

#include "config/Config.h"
#include "walk/FoldRecord.h"

namespace mb::dist {
class Runtime;
}

namespace mb::walk {

// Rank 0, on the folds whose record was read. Appends accepted changes to `accepted`.
void checkConfigOfFoldsDone(const Config& config, const std::vector<Fold>& folds,
                            std::vector<std::string>& accepted);

// Collective: every rank hashes its share of the file as a load with `identifyWith` (a fold's
// config) would (data::identifyFile), and rank 0 compares it with the identity each fold's
// newest checkpoint recorded. Nothing is read when no fold has a checkpoint.
void checkDataOfFoldsDone(const Config& config, const Config& identifyWith,
                          const std::vector<Fold>& folds, dist::Runtime& runtime,
                          std::vector<std::string>& accepted);

}  // namespace mb::walk
