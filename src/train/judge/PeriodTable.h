#pragma once
// Note [Results by period]
// `megabatch eval --by day|week|month|quarter|year` cuts the evaluated samples by the UTC
// calendar period of their timestamp and judges each period alone, with the metrics and
// baselines of Notes [Forecast metrics] and [Baselines] (the baselines' train mean is the
// whole train split's, or each row's own; the last known target is each sample's own). Weeks run
// Monday to Sunday and are named by their days ("2024-01-01/2024-01-07"), quarters "2024Q1", as
// pandas' to_period names them. The table shows how a model wears out over time; a closing line
// gives the share of periods in which the model beat each baseline (skill > 0). The same table
// groups a walk-forward's rows by fold (`eval --predictions`: one row per fold, PredictionsFile.h).
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "common/TimeText.h"
#include "train/judge/Forecasts.h"

namespace mb::train {

enum class Period { kDay, kWeek, kMonth, kQuarter, kYear };
std::optional<Period> periodNamed(const std::string& name);
const char* periodName(Period period);

struct PeriodRow {
  std::string label;  // "2024-03", "2024Q1", ...; a fold's name
  std::int64_t samples = 0;
  std::map<std::string, double> values;  // judgeForecasts() of the period's rows
};

// `rows` as judgeForecasts takes them, `group` the group of each row (0 <= group <
// labels.size()), `inputs` the baselines' (per-row fields one per row). One PeriodRow per label,
// in their order, each judged on its rows alone (a label without rows: no values).
std::vector<PeriodRow> resultsByGroup(ForecastKind kind, const at::Tensor& rows,
                                      const std::vector<std::int64_t>& group,
                                      const std::vector<std::string>& labels,
                                      const BaselineInputs& inputs);

// The rows grouped by the calendar period of `times` (the timestamp of each row's sample, in
// `unit`), periods in time order. `file` names where the times come from, for errors (a time
// that is no date: DataError naming `unitKey`, where the user sets the unit).
std::vector<PeriodRow> resultsByPeriod(ForecastKind kind, const at::Tensor& rows,
                                       const std::vector<std::int64_t>& times, TimeUnit unit,
                                       Period period, const BaselineInputs& inputs,
                                       const std::string& file,
                                       const std::string& unitKey = "data.time_unit");

// The table as the terminal shows it, with the closing line of Note [Results by period]; `noun`
// names a row ("day", "fold").
std::string groupTableText(const std::vector<PeriodRow>& table, ForecastKind kind,
                           const std::string& noun);
std::string periodTableText(const std::vector<PeriodRow>& table, ForecastKind kind, Period period);
// The same as CSV: `first` (the label's column), samples, then every value's name in sorted
// order.
std::string periodTableCsv(const std::vector<PeriodRow>& table,
                           const std::string& first = "period");

}  // namespace mb::train
