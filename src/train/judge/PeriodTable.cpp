#include "train/judge/PeriodTable.h"

#include <set>

#include <ATen/Functions.h>
#include <fmt/format.h>

#include "common/Error.h"

namespace mb::train {
namespace {

struct PeriodKey {
  std::int64_t firstDay = 0;  // sorts the periods in time order
  std::string label;
};

PeriodKey periodOf(std::int64_t day, Period period) {
  const CalendarDate date = calendarDate(day);
  switch (period) {
    case Period::kDay:
      return {day, formatDay(day)};
    case Period::kWeek: {
      // 1970-01-01 was a Thursday: Monday is weekday 0.
      const std::int64_t weekday = ((day + 3) % 7 + 7) % 7;
      const std::int64_t monday = day - weekday;
      return {monday, formatDay(monday) + "/" + formatDay(monday + 6)};
    }
    case Period::kMonth:
      return {day - date.day + 1, fmt::format("{:04d}-{:02d}", date.year, date.month)};
    case Period::kQuarter:
      return {date.year * 4 + (date.month - 1) / 3,
              fmt::format("{:04d}Q{}", date.year, (date.month - 1) / 3 + 1)};
    case Period::kYear:
      return {date.year, fmt::format("{:04d}", date.year)};
  }
  return {};
}

// The headline columns of the terminal table, by kind.
std::vector<std::pair<std::string, std::string>> shownColumns(ForecastKind kind) {
  if (kind == ForecastKind::kClassification)
    return {{"accuracy", "accuracy"},
            {"log_loss", "log_loss"},
            {"baseline_majority_accuracy", "majority_acc"},
            {"baseline_prior_log_loss", "prior_log_loss"}};
  std::vector<std::pair<std::string, std::string>> columns{{"mse", "mse"},
                                                           {"mae", "mae"},
                                                           {"baseline_zero_mse", "zero_mse"},
                                                           {"baseline_mean_mse", "mean_mse"},
                                                           {"baseline_last_mse", "last_mse"},
                                                           {"ic", "ic"}};
  if (kind == ForecastKind::kRegression) columns.emplace_back("rank_ic", "rank_ic");
  columns.emplace_back("hit_rate", "hit_rate");
  return columns;
}

}  // namespace

std::optional<Period> periodNamed(const std::string& name) {
  for (Period p : {Period::kDay, Period::kWeek, Period::kMonth, Period::kQuarter, Period::kYear})
    if (name == periodName(p)) return p;
  return std::nullopt;
}

const char* periodName(Period period) {
  switch (period) {
    case Period::kDay:
      return "day";
    case Period::kWeek:
      return "week";
    case Period::kMonth:
      return "month";
    case Period::kQuarter:
      return "quarter";
    case Period::kYear:
      return "year";
  }
  return "?";
}

std::vector<PeriodRow> resultsByGroup(ForecastKind kind, const at::Tensor& rows,
                                      const std::vector<std::int64_t>& group,
                                      const std::vector<std::string>& labels,
                                      const BaselineInputs& inputs) {
  if (static_cast<std::int64_t>(group.size()) != rows.size(0))
    throw RuntimeError("resultsByGroup: one group per forecast row expected");
  std::vector<std::vector<std::int64_t>> members(labels.size());
  for (std::size_t i = 0; i < group.size(); ++i)
    members.at(static_cast<std::size_t>(group[i])).push_back(static_cast<std::int64_t>(i));
  const auto a = rows.accessor<double, 2>();
  std::vector<PeriodRow> table;
  for (std::size_t g = 0; g < labels.size(); ++g) {
    PeriodRow row;
    row.label = labels[g];
    std::set<double> samples;
    for (std::int64_t i : members[g])
      samples.insert(a[i][kRowSample]);
    row.samples = static_cast<std::int64_t>(samples.size());
    if (!members[g].empty())
      row.values = judgeForecasts(kind, rows.index_select(0, at::tensor(members[g], at::kLong)),
                                  inputs.subset(members[g]));
    table.push_back(std::move(row));
  }
  return table;
}

std::vector<PeriodRow> resultsByPeriod(ForecastKind kind, const at::Tensor& rows,
                                       const std::vector<std::int64_t>& times, TimeUnit unit,
                                       Period period, const BaselineInputs& inputs,
                                       const std::string& file, const std::string& unitKey) {
  if (static_cast<std::int64_t>(times.size()) != rows.size(0))
    throw RuntimeError("resultsByPeriod: one time per forecast row expected");
  std::map<std::int64_t, std::string> labelOf;  // by first day: periods in time order
  std::vector<std::int64_t> firstDay;
  for (std::int64_t time : times) {
    const std::optional<std::int64_t> day = dayOfTime(time, unit);
    if (!day)
      throw DataError(file + ": timestamp " + std::to_string(time) + " is no date in " + unitKey +
                          " = " + timeUnitName(unit),
                      "set " + unitKey + " to what the timestamps count");
    PeriodKey key = periodOf(*day, period);
    labelOf.emplace(key.firstDay, key.label);
    firstDay.push_back(key.firstDay);
  }
  std::map<std::int64_t, std::int64_t> indexOf;
  std::vector<std::string> labels;
  for (const auto& [first, label] : labelOf) {
    indexOf[first] = static_cast<std::int64_t>(labels.size());
    labels.push_back(label);
  }
  std::vector<std::int64_t> group;
  for (std::int64_t first : firstDay)
    group.push_back(indexOf.at(first));
  return resultsByGroup(kind, rows, group, labels, inputs);
}

std::string periodTableText(const std::vector<PeriodRow>& table, ForecastKind kind, Period period) {
  return groupTableText(table, kind, periodName(period));
}

std::string groupTableText(const std::vector<PeriodRow>& table, ForecastKind kind,
                           const std::string& noun) {
  const auto columns = shownColumns(kind);
  std::size_t labelWidth = 6;
  for (const auto& row : table)
    labelWidth = std::max(labelWidth, row.label.size());
  std::set<std::string> present;
  for (const auto& row : table)
    for (const auto& [name, value] : row.values)
      present.insert(name);
  std::string text = fmt::format("  {:<{}} {:>8}", noun, labelWidth, "samples");
  for (const auto& [key, title] : columns)
    if (present.count(key)) text += fmt::format(" {:>14}", title);
  text += "\n";
  for (const auto& row : table) {
    text += fmt::format("  {:<{}} {:>8}", row.label, labelWidth, row.samples);
    for (const auto& [key, title] : columns) {
      if (!present.count(key)) continue;
      auto it = row.values.find(key);
      text += it == row.values.end() ? fmt::format(" {:>14}", "-")
                                     : fmt::format(" {:>14.6g}", it->second);
    }
    text += "\n";
  }
  for (const Baseline& baseline : baselines()) {
    const std::string skill = std::string("baseline_") + baseline.name + "_skill";
    if (!present.count(skill)) continue;
    std::int64_t beaten = 0, judged = 0;
    for (const auto& row : table) {
      auto it = row.values.find(skill);
      if (it == row.values.end()) continue;
      ++judged;
      beaten += it->second > 0 ? 1 : 0;
    }
    text += fmt::format("  the model beat {} in {} of {} {}s ({:.0f}%)\n",
                        std::string("the ") + baseline.words, beaten, judged, noun,
                        judged ? 100.0 * beaten / judged : 0.0);
  }
  return text;
}

std::string periodTableCsv(const std::vector<PeriodRow>& table, const std::string& first) {
  std::set<std::string> names;
  for (const auto& row : table)
    for (const auto& [name, value] : row.values)
      names.insert(name);
  std::string text = first + ",samples";
  for (const auto& name : names)
    text += "," + name;
  text += "\n";
  for (const auto& row : table) {
    text += row.label + "," + std::to_string(row.samples);
    for (const auto& name : names) {
      auto it = row.values.find(name);
      text += it == row.values.end() ? "," : fmt::format(",{:.17g}", it->second);
    }
    text += "\n";
  }
  return text;
}

}  // namespace mb::train
