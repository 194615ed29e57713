#include "walk/WalkPlan.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/Error.h"

namespace mb::walk {
namespace {

std::int64_t floorDiv(std::int64_t a, std::int64_t b) {
  return a / b - ((a % b != 0) && ((a < 0) != (b < 0)) ? 1 : 0);
}

// Months since year 0 of a date's month, and back to the month's first day.
std::int64_t monthIndex(std::int64_t day) {
  const CalendarDate date = calendarDate(day);
  return date.year * 12 + (date.month - 1);
}

std::int64_t firstDayOfMonth(std::int64_t index) {
  return dayOfDate({floorDiv(index, 12), index - floorDiv(index, 12) * 12 + 1, 1});
}

std::int64_t monthsIn(train::Period every) {
  return every == train::Period::kQuarter ? 3 : every == train::Period::kYear ? 12 : 1;
}

// `eval --by`'s name of the period starting on `day` (Note [Results by period]).
std::string labelOf(std::int64_t day, train::Period every) {
  const CalendarDate date = calendarDate(day);
  switch (every) {
    case train::Period::kDay:
      return formatDay(day);
    case train::Period::kWeek:
      return formatDay(day) + "/" + formatDay(day + 6);
    case train::Period::kMonth:
      return fmt::format("{:04d}-{:02d}", date.year, date.month);
    case train::Period::kQuarter:
      return fmt::format("{:04d}Q{}", date.year, (date.month - 1) / 3 + 1);
    case train::Period::kYear:
      return fmt::format("{:04d}", date.year);
  }
  return formatDay(day);
}

std::int64_t timeOf(const std::string& key, const std::string& text, TimeUnit unit) {
  std::string problem;
  const std::optional<std::int64_t> value = parseTimeText(text, unit, &problem);
  if (!value)
    throw ConfigError(key + " = " + text + ": " + problem,
                      "write a date (2019-04-01), a date-time in UTC, or a number in "
                      "data.time_unit");
  return *value;
}

// A day as a cut the split keys take.
std::string cutOf(std::int64_t day) {
  return formatDay(day);
}

// The later of two cuts (either may be empty: none).
std::string laterCut(const std::string& a, const std::string& b, TimeUnit unit) {
  if (a.empty() || b.empty()) return a.empty() ? b : a;
  return timeOf("data.split.train_from", a, unit) >= timeOf("data.split.train_from", b, unit) ? a
                                                                                              : b;
}

}  // namespace

train::Period walkEvery(const WalkConfig& walk) {
  const std::optional<train::Period> every = train::periodNamed(walk.every);
  if (!every)
    throw ConfigError("walk.every = " + walk.every + ": expected day, week, month, quarter or year",
                      "periods are UTC calendar periods, as eval --by cuts them");
  return *every;
}

std::int64_t periodStart(std::int64_t day, train::Period every) {
  switch (every) {
    case train::Period::kDay:
      return day;
    case train::Period::kWeek:
      // Monday is weekday 0, and 1970-01-01 was a Thursday.
      return day - ((day + 3) - floorDiv(day + 3, 7) * 7);
    default: {
      const std::int64_t months = monthsIn(every);
      return firstDayOfMonth(floorDiv(monthIndex(day), months) * months);
    }
  }
}

std::int64_t shiftPeriods(std::int64_t startDay, train::Period every, std::int64_t n) {
  switch (every) {
    case train::Period::kDay:
      return startDay + n;
    case train::Period::kWeek:
      return startDay + 7 * n;
    default:
      return firstDayOfMonth(monthIndex(startDay) + n * monthsIn(every));
  }
}

std::vector<WalkPeriod> walkPeriods(const WalkConfig& walk, TimeUnit unit, std::int64_t lastTime,
                                    const std::string& fileRange) {
  const train::Period every = walkEvery(walk);
  if (walk.from.empty())
    throw ConfigError(
        "walk.from is not set: the walk needs the start of its first predicted "
        "period",
        "e.g. walk.from=2019-04-01 (the walk.* keys: megabatch train --help-config)");
  const std::int64_t from = timeOf("walk.from", walk.from, unit);
  const bool bounded = !walk.to.empty();  // else through the period of the file's last sample
  const std::int64_t to = bounded ? timeOf("walk.to", walk.to, unit) : 0;
  if (bounded && to <= from)
    throw DataError(
        "walk.to = " + walk.to + " is not after walk.from = " + walk.from +
            ": the walk predicts [from, to)",
        "set walk.to after walk.from, or leave it out to walk to the file's end; " + fileRange);
  if (!bounded && from > lastTime)
    throw DataError("walk.from = " + walk.from + " is after the file's last sample: " + fileRange,
                    "start the walk inside the file's time range, or grow the file");
  const std::optional<std::int64_t> fromDay = dayOfTime(from, unit);
  if (!fromDay) throw ConfigError("walk.from = " + walk.from + " is no date in data.time_unit");
  const std::int64_t first = periodStart(*fromDay, every);
  std::vector<WalkPeriod> periods;
  for (std::int64_t i = 0;; ++i) {
    const std::int64_t startDay = shiftPeriods(first, every, i);
    const std::string start = i == 0 ? walk.from : cutOf(startDay);
    const std::int64_t startTime = i == 0 ? from : timeOf("walk", start, unit);
    if (bounded ? startTime >= to : startTime > lastTime) break;
    const std::int64_t endDay = shiftPeriods(first, every, i + 1);
    std::string end = cutOf(endDay);
    if (bounded && timeOf("walk", end, unit) > to) end = walk.to;
    periods.push_back({i == 0 ? *fromDay : startDay, start, end, labelOf(startDay, every)});
  }
  return periods;
}

std::vector<FoldPlan> planFolds(const WalkConfig& walk, const SplitConfig& base, TimeUnit unit,
                                const std::vector<WalkPeriod>& periods) {
  const train::Period every = walkEvery(walk);
  std::vector<FoldPlan> folds;
  if (periods.empty()) return folds;
  const std::int64_t first = periodStart(periods.front().firstDay, every);
  const auto step = static_cast<std::size_t>(std::max<std::int64_t>(1, walk.retrainEvery));
  for (std::size_t p = 0; p < periods.size(); p += step) {
    FoldPlan fold;
    fold.firstPeriod = p;
    fold.endPeriod = std::min(periods.size(), p + step);
    fold.name = formatDay(periods[p].firstDay);
    fold.predictFrom = periods[p].from;
    fold.predictTo = periods[fold.endPeriod - 1].to;
    const auto index = static_cast<std::int64_t>(p);
    fold.split.embargo = base.embargo;
    fold.split.valUntil = periods[p].from;
    fold.split.valFrom =
        walk.val == 0 ? periods[p].from : cutOf(shiftPeriods(first, every, index - walk.val));
    fold.split.trainFrom = base.trainFrom;
    if (walk.trainWindow > 0)
      fold.split.trainFrom =
          laterCut(base.trainFrom,
                   cutOf(shiftPeriods(first, every, index - walk.val - walk.trainWindow)), unit);
    folds.push_back(std::move(fold));
  }
  return folds;
}

}  // namespace mb::walk
