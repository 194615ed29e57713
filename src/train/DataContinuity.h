#pragma once
// Note [Data continuity] (the trainer's side; what is compared: data/pipeline/DataIdentity.h)
// A resume compares the data its checkpoint trained on with the data configured now, before
// step 1, on rank 0 (an error there ends every rank with its message):
//   the same content and splits        resume, as ever;
//   rows appended, train and val held  resume, with one line saying how many samples were
//                                      added and that the splits held (splits by time, with
//                                      val_until: the new rows land in test);
//   anything else                      exit 3, naming what changed (samples and splits before
//                                      and now, the datasets that differ) and the remedies:
//                                      the old file back, train.init_from for a new run on the
//                                      new data, or run.allow_data_change = true.
// run.allow_data_change = true resumes anyway with a warning, and records the change in
// metrics.jsonl (a "data_change" record) and in every later checkpoint (/meta data_changes).
// A checkpoint written before this check holds only the fingerprint: the same fingerprint
// (file name aside) resumes, another is a change.
#include <optional>
#include <string>

#include "config/Config.h"
#include "data/DataInfo.h"
#include "train/checkpoints/Checkpoint.h"

namespace mb::train {

struct DataContinuity {
  bool changed = false;  // accepted under run.allow_data_change
  std::string line;      // what to log ("" when nothing changed)
  std::string record;    // the change, one YAML line, for metrics and checkpoints
};

// Rank 0. Throws DataError (exit 3) for a change the config does not accept.
DataContinuity judgeDataContinuity(const CheckpointContent& resumed, const std::string& checkpoint,
                                   const data::DataInfo& now, const Config& config);

}  // namespace mb::train
