#pragma once
// Note [Judging a predictions file]
// `megabatch eval --predictions FILE.h5` and the walk-forward judge predictions already written:
// by `megabatch predict` (its format is in src/train/Prediction.cpp's header comment), stitched
// from a walk's folds, or written by any tool with h5py. What is read, and what it needs:
//   /predictions  required: [M] or [M, K] (regression), [M, N] or [M, N, K] (panel), [M, C]
//                 logits (classification); numbers
//   /targets      required: the shape of /predictions (classification: [M] labels 0..C-1)
//   /timestamps   [M] integers in the attribute time_unit (default s, Unix seconds): for --by
//   /sample_index [M] integers, strictly increasing (default 0..M-1): the last known target's
//   /present      [M, N] integers (panel; default: every instrument present)
//   /train_mean   [M] or [M, K]: each row's train mean (predict: the checkpoint's; a walk: each
//                 fold's); without it the train-mean baseline is left out
//   /fold         [M] integers (a walk): the 0-based fold of each row, named by the text
//                 attributes fold_names, fold_periods ("FROM TO") and fold_checkpoints, one line
//                 per fold
// and the attributes task (regression or classification; default: classification where
// /predictions has one more dimension than integer /targets), layout (panel where it says so or
// /present is there), horizon with data and targets_dataset (the last known target: sample s gets
// sample s - horizon's target, from the file's rows, else from that data file when it is
// readable, else the baseline is left out with a line that says why).
// Everything is checked before it is read, as a data file is (data/Schema.cpp): a missing
// dataset, a wrong rank, dtype or length, and a dataset declaring more bytes than its file can
// hold (stored, or compressed by at most deflate's 1032:1) end in DataError (exit 3) naming the
// file, the dataset, what was expected and what was found.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "common/TimeText.h"
#include "train/judge/Forecasts.h"
#include "train/judge/PeriodTable.h"

namespace mb::train {

struct PredictionsFile {
  std::string path;
  ForecastKind kind = ForecastKind::kRegression;
  std::int64_t samples = 0;  // M: the file's rows (panel: dates)
  std::int64_t terms = 1;    // K target terms per sample (per instrument on a panel)
  // [R, kForecastWidth] fp64, as judgeForecasts takes them (forecastRows of every row, in
  // sample order; kRowSample is the row's /sample_index).
  at::Tensor rows;
  std::vector<std::int64_t> fileRow;  // [R] the file row (0..M-1) of each forecast row
  std::vector<std::int64_t> times;    // [R] its /timestamps; empty: the file has none
  TimeUnit timeUnit = TimeUnit::kSeconds;
  std::int64_t horizon = 0;  // 0: unknown
  // trainMeanOfRow and lastKnown, one per forecast row; each empty where unknown.
  BaselineInputs baselines;
  std::vector<std::string> missing;  // why a baseline is left out, one line each
  std::vector<std::int64_t> fold;    // [R] the fold of each forecast row; empty: no /fold
  std::vector<std::string> foldNames, foldPeriods, foldCheckpoints;  // [folds]
  // What the file says it holds, for the heading ("" / -1 where it does not say).
  std::string checkpoint, data, split;
  std::int64_t step = -1;
};

// Reads and checks `path` (Note [Judging a predictions file]). Throws DataError (exit 3).
PredictionsFile readPredictionsFile(const std::string& path);

// judgeForecasts of every row with the file's baselines, and "samples" (M).
std::map<std::string, double> judgePredictions(const PredictionsFile& file);
// One PeriodRow per fold, in fold order; empty without /fold.
std::vector<PeriodRow> resultsByFold(const PredictionsFile& file);
// By calendar period of /timestamps; DataError when the file has none.
std::vector<PeriodRow> resultsByPeriod(const PredictionsFile& file, Period period);

// What eval prints: a heading, every figure of `judged`, and the baselines with their skills
// and the lines saying why any is left out.
std::string judgementText(const PredictionsFile& file, const std::map<std::string, double>& judged);
// The per-fold table (PeriodTable's, one row per fold) with its closing lines.
std::string foldTableText(const PredictionsFile& file, const std::vector<PeriodRow>& folds);

}  // namespace mb::train
