#pragma once
// Note [Splits by time]
// People who retrain as data arrives split by date, not by share: a share moves its cuts when
// rows are appended (yesterday's val rows become training rows), a date does not. With
// data.split.train_until (and val_until, train_from), in the file's time (Note [Times as users
// write them] in common/TimeText.h), a sample belongs to the split of its timestamp: the time
// of its last row, the moment it predicts from (/timestamps, or the panel's /time):
//   train = train_from <= t < train_until
//   val   = train_until <= t < val_until   (to the end when val_until is not set)
//   test  = val_until <= t                 (empty when val_until is not set)
// each split after a cut starting past the embargo (Note [Splits and embargo]), exactly as with
// fractions. With data.split.val_from instead of train_until, every gap comes out of the split
// before its cut, so that val and test start exactly at their cuts (a walk-forward fold's val
// periods and its predicted period, Note [Walk-forward] in src/walk/WalkPlan.h):
//   train = train_from <= t, ending where its embargo clears val's first sample
//   val   = val_from <= t < val_until, less its last data.horizon samples (their targets
//           describe test's rows; with data.horizon unset, less one embargo)
//   test  = val_until <= t
// and val_from = val_until gives an empty val split (the fold trains without one). The cuts are
// found by binary search over the timestamps, which never decrease (pass 2 of Note [Schema
// validation]). So the same cuts give the same train and val samples whatever the file holds after
// val_until: appended rows land in test (or in val without val_until). A cut outside the file's
// time, or one that leaves a split empty, is a DataError (exit 3) that gives the file's time range.
// The fraction keys and the cuts exclude each other (config/ConfigLoader.cpp).
//
// Note [Selected period]
// `megabatch eval` and `predict` take --from/--to in the same forms: the samples whose time is
// in [from, to), within the split --split names (as the run's config cuts it on this file), or
// within the whole file. The loader plans that period as the test split, and a train split of
// its first V samples only (a loader needs one; nothing trains on it). Its mean target and class
// counts are not the train split's, so DataInfo leaves them empty (periodSelected); evaluation
// takes the checkpoint's (Note [The train mean of an evaluation] in train/judge/Forecasts.h).
#include <array>
#include <cstdint>
#include <string>

#include "config/Config.h"
#include "data/DataInfo.h"
#include "data/Schema.h"
#include "data/pipeline/Splits.h"

namespace mb::data {

// The per-sample timestamps of a file, read as needed.
class SampleTimes {
 public:
  SampleTimes(IndexReader& index, DatasetMeta timestamps, TimeUnit unit, std::string file);

  std::int64_t at(std::int64_t sample) { return index_.at(timestamps_, sample); }
  // The first sample of `range` whose time is >= `time`; range.end when there is none.
  std::int64_t firstAtOrAfter(SampleRange range, std::int64_t time);
  // "2024-03-01T09:30:00Z" for sample `sample`.
  std::string text(std::int64_t sample);
  // The times of a non-empty range's first and last samples.
  TimeSpan span(SampleRange range);
  // "the samples of FILE run from T0 to T1" for messages, over `range`.
  std::string rangeSentence(SampleRange range, const std::string& what);
  // A cut as the user wrote it, in the file's unit (ConfigError for text the validator let pass).
  std::int64_t cut(const std::string& key, const std::string& text) const;
  TimeUnit unit() const { return unit_; }

 private:
  IndexReader& index_;
  DatasetMeta timestamps_;
  TimeUnit unit_;
  std::string file_;
};

// Note [Splits by time]: train, val and test of the usable samples. `horizon` is data.horizon
// (0: unknown), for the gap before test under data.split.val_from.
std::array<SampleRange, 3> planTimeSplits(SampleRange usable, const SplitConfig& split,
                                          SampleTimes& times, const NextStart& nextStart,
                                          std::int64_t horizon);

// Note [Selected period]: the samples of `within` whose time is in [period.from, period.to).
// `what` names `within` in messages ("the test split", "the file"). DataError when none is.
SampleRange selectPeriod(SampleRange within, const PeriodSelection& period, SampleTimes& times,
                         const std::string& what);

}  // namespace mb::data
