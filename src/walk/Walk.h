#pragma once
// `megabatch walk --config C [key=value ...]` (Note [Walk-forward] in WalkPlan.h): plans every
// fold, checks before any training that the folds done before still hold (the config they
// trained with, the data they trained on), then trains and predicts each fold not yet done,
// each an ordinary run directory RUN/folds/<first day>/, stitches RUN/predictions.h5 and writes
// the report (RUN/walk.json). Run again, it goes on where it stopped: a fold done is kept, the
// fold a stop or a kill interrupted resumes from its checkpoint, and on a grown file only the
// new periods train.
#include "config/Config.h"

namespace mb::dist {
class Runtime;
}

namespace mb::walk {

struct WalkOptions {
  // Rank 0 prints each fold's plan as a JSON line (its periods, cuts, the samples of its
  // splits and of its periods, its train.init_from); nothing is trained or written.
  bool planOnly = false;
  // Trains and predicts only the fold of this name (its first day, YYYY-MM-DD), without the
  // walk's run lock, stitching or report: one task of a job array (slurm/walk.sh). With warm
  // starts the fold before it must be done.
  std::string fold;
};

// Collective over the runtime's ranks. Returns the process exit code: 0 when every fold is
// done (with options.fold: that fold), 75 when a stop signal ended it after a checkpoint (run
// the same command again).
int runWalk(const Config& config, dist::Runtime& runtime, const WalkOptions& options = {});

}  // namespace mb::walk
