#pragma once
// Evaluation shared by the trainer (every train.eval_every steps) and `megabatch eval`.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "common/WorkProgress.h"
#include "config/Config.h"
#include "data/DataInfo.h"
#include "train/judge/Forecasts.h"

namespace mb::data {
class ShardedData;
}
namespace mb::dist {
class Communicator;
}
namespace mb::model {
class Model;
}

namespace mb::train {

struct EvalOptions {
  // Note [Evaluation batch]: the first batch; evaluateSplit leaves the one it ended with here.
  std::int64_t microBatch = 64;
  // > 0: what one batch may take beside what the process holds. On the CPU its cap: past it,
  // AllocationCapExceeded (the out-of-memory message) instead of the kernel's OOM killer.
  std::int64_t roomBytes = 0;
  // The batch was chosen, not given: it grows within roomBytes up to batchLimit, and one that
  // runs out of memory (or passes the cap) is run again at half the size.
  bool batchChosen = false;
  std::int64_t batchLimit = 0;
  DType precision = DType::kFp32;
  std::int64_t maxSamplesPerRank = 0;  // 0 = this rank's whole part of the split
  // Progress (Note [Work progress]): the start line reads "eval val<context>: N samples, ...";
  // when boundSamples > 0, a long evaluation's estimate names train.eval_batches, one of which
  // is boundSamples samples (the global batch).
  std::string context;
  std::int64_t boundSamples = 0;
  WorkProgress::Mode progress = WorkProgress::Mode::kAuto;
  // Note [Stopping within seconds] in Signals.cpp: with leaveOnStop, a stop request seen between
  // batches ends this rank's part early; if any rank left, every rank returns an empty map and
  // sets `abandoned`.
  bool leaveOnStop = false;
  bool abandoned = false;
  // The start line comes at once, before the first batch (`megabatch eval`: a command the user
  // waits on); otherwise after WorkProgress's quiet seconds, so short evaluations stay quiet.
  bool announceAtOnce = false;
  // Note [Forecast metrics]: what the predictions are judged as (config model.task), and whether
  // to keep every rank's forecast rows (in sample order, every rank) in `forecastRows`.
  Task task = Task::kRegression;
  bool keepForecastRows = false;
  at::Tensor forecastRows;
  // Note [The train mean of an evaluation]: what the checkpoint recorded of its train split
  // (empty: the data's figures, as in training).
  RecordedTrainSplit recorded;
  // What the metrics and progress call the samples ("period" for eval --from/--to: Note
  // [Selected period]); empty: the split's name.
  std::string name;
};

// Collective over `control`: the loss and metrics of `split` over every rank's part, as
// {"val_loss", "val_mse", ..., "val_samples"}, with the forecast metrics and baselines of
// train/judge/Forecasts.h ("val_ic", "val_baseline_zero_mse", ...), or empty when abandoned for
// a stop request (options.leaveOnStop). Forward passes only (eval mode, no autograd).
std::map<std::string, double> evaluateSplit(model::Model& model, data::ShardedData& data,
                                            data::Split split, dist::Communicator& control,
                                            c10::Device device, EvalOptions& options);

// Exact-match accuracy of greedy answers on the held-out problems of an arithmetic corpus
// (`megabatch data arith` stores them in /heldout). nullopt when the file has none.
struct ExactMatch {
  struct Count {
    std::int64_t correct = 0;
    std::int64_t total = 0;
    double accuracy() const {
      return total ? static_cast<double>(correct) / static_cast<double>(total) : 0.0;
    }
  };
  std::map<std::string, Count> perOperation;  // "+", "-", "*", "/"
  Count overall;
  std::vector<std::string> mistakes;  // a few "12+34= -> 47 (expected 46)" lines
};
std::optional<ExactMatch> arithmeticExactMatch(model::Model& model, const std::string& dataPath,
                                               std::int64_t maxProblems = 0);

}  // namespace mb::train
