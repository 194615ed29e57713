#pragma once
// Note [Walk-forward]
// `megabatch walk` judges a procedure, not one model: "retrain every month on everything up to
// it, predict the month after" (Darts' historical_forecasts, skforecast's backtesting with refit,
// sktime's evaluate, Qlib's rolling). The walk.* keys say which procedure:
//   periods  UTC calendar periods of walk.every (day, week Monday to Sunday, month, quarter,
//            year: the periods of `eval --by`), the first from walk.from to the next boundary,
//            the last to walk.to, or through the period of the file's last sample;
//   folds    one per walk.retrain_every periods; fold f trains on the data before its first
//            period and predicts its periods with its best.h5 (its last checkpoint when
//            walk.val = 0); it is named by its first day: RUN/folds/YYYY-MM-DD;
//   val      the walk.val calendar periods before the fold's first (0: no val split);
//   train    everything before val (from data.split.train_from), or with walk.train_window = N
//            the N periods before val (sliding);
//   weights  walk.warm_start: fold f starts from fold f-1's selected weights (train.init_from),
//            else from scratch (the folds are independent).
// A fold's splits are cut with data.split.val_from (Note [Splits by time]): val starts exactly at
// its first period and test at the fold's, and every gap comes out of the older side. Train ends
// one embargo (a window, and data.horizon) before val; val ends data.horizon samples before the
// fold's period, so no target that trains or selects the model describes a row it predicts.
// Without data.horizon, val keeps a whole embargo before the period. A period with no sample (a
// holiday week) is a line in the log; a fold with none to predict is not trained.
#include <cstdint>
#include <string>
#include <vector>

#include "common/TimeText.h"
#include "config/Config.h"
#include "train/judge/PeriodTable.h"

namespace mb::walk {

// walk.every (ConfigError listing the choices for another word).
train::Period walkEvery(const WalkConfig& walk);

// One predicted period: [from, to) as cuts in the split keys' forms.
struct WalkPeriod {
  std::int64_t firstDay = 0;  // days since 1970-01-01 of its first day
  std::string from, to;       // "2019-04-01", or walk.from / walk.to as written
  std::string label;  // as `eval --by` names it: "2019-04", "2019Q2", "2019-04-01/2019-04-07"
};

// The walk's periods. `lastTime` is the file's last sample's time (walk.to empty: the last period
// is the one holding it). ConfigError for walk.from or walk.to that is no time; DataError (exit 3)
// for walk.to at or before walk.from, or walk.from after `lastTime` (naming `fileRange`).
std::vector<WalkPeriod> walkPeriods(const WalkConfig& walk, TimeUnit unit, std::int64_t lastTime,
                                    const std::string& fileRange);

struct FoldPlan {
  std::string name;             // YYYY-MM-DD of its first period's first day
  std::size_t firstPeriod = 0;  // the periods it predicts: [firstPeriod, endPeriod)
  std::size_t endPeriod = 0;
  std::string predictFrom, predictTo;  // those periods as predict's --from/--to
  SplitConfig split;                   // its cuts: train_from, val_from, val_until
};

// A fold per walk.retrain_every periods, each with its cuts; `base` is the config's data.split
// (its train_from and embargo are kept, its other cuts replaced).
std::vector<FoldPlan> planFolds(const WalkConfig& walk, const SplitConfig& base, TimeUnit unit,
                                const std::vector<WalkPeriod>& periods);

// The start (a day) of the calendar period holding `day`, and the start `n` periods later
// (n may be negative).
std::int64_t periodStart(std::int64_t day, train::Period every);
std::int64_t shiftPeriods(std::int64_t startDay, train::Period every, std::int64_t n);

}  // namespace mb::walk
