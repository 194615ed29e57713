#pragma once
// Note [Results by period]
// `megabatch eval --by day|week|month|quarter|year` cuts the evaluated samples by the UTC
// calendar period of their timestamp and judges each period alone, with the metrics and
// baselines of Notes [Forecast metrics] and [Baselines] (the baselines' train mean is the
// whole train split's; the last known target is each sample's own). Weeks run Monday to Sunday
// and are named by their days ("2024-01-01/2024-01-07"), quarters "2024Q1", as pandas'
// to_period names them. The table shows how a model wears out over time; a closing line gives
// the share of periods in which the model beat each baseline (skill > 0).
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "common/TimeText.h"
#include "data/DataInfo.h"
#include "train/judge/Forecasts.h"

namespace mb::train {

enum class Period { kDay, kWeek, kMonth, kQuarter, kYear };
std::optional<Period> periodNamed(const std::string& name);
const char* periodName(Period period);

struct PeriodRow {
  std::string label;  // "2024-03", "2024Q1", ...
  std::int64_t samples = 0;
  std::map<std::string, double> values;  // judgeForecasts() of the period's rows
};

// `rows` as judgeForecasts takes them, `times` the timestamp of each row's sample, `lastKnown`
// one per row or empty. Periods in time order.
std::vector<PeriodRow> resultsByPeriod(ForecastKind kind, const at::Tensor& rows,
                                       const std::vector<std::int64_t>& times, TimeUnit unit,
                                       Period period, const data::DataInfo& info,
                                       const std::vector<double>& lastKnown);

// The table as the terminal shows it, with the closing line of Note [Results by period].
std::string periodTableText(const std::vector<PeriodRow>& table, ForecastKind kind, Period period);
// The same as CSV: period, samples, then every value's name in sorted order.
std::string periodTableCsv(const std::vector<PeriodRow>& table);

}  // namespace mb::train
