#include "common/TimeText.h"

#include <cstdio>
#include <limits>
#include <regex>

namespace mb {
namespace {

constexpr std::int64_t kSecondsPerDay = 86400;

// Days since 1970-01-01 of a proleptic Gregorian date (the civil calendar, extended both ways),
// and back: the era arithmetic of the 400-year Gregorian cycle (146097 days).
std::int64_t daysFromCivil(std::int64_t year, std::int64_t month, std::int64_t day) {
  year -= month <= 2 ? 1 : 0;
  const std::int64_t era = (year >= 0 ? year : year - 399) / 400;
  const std::int64_t yearOfEra = year - era * 400;
  const std::int64_t dayOfYear = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1;
  const std::int64_t dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear;
  return era * 146097 + dayOfEra - 719468;
}

struct Civil {
  std::int64_t year, month, day;
};

std::int64_t floorDiv(std::int64_t a, std::int64_t b) {
  std::int64_t q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

// Non-negative remainder, for any a (a - floorDiv(a, b) * b can overflow near the int64 ends).
std::int64_t floorMod(std::int64_t a, std::int64_t b) {
  const std::int64_t r = a % b;
  return r < 0 ? r + b : r;
}

Civil civilFromDays(std::int64_t days) {
  // The textbook form adds 719468 (days from 0000-03-01 to 1970-01-01) to `days` first, which
  // overflows near the int64 ends. Split into eras first; 719468 = 4 eras + 135080 days.
  std::int64_t era = floorDiv(days, 146097) + 4;
  std::int64_t dayOfEra = floorMod(days, 146097) + 135080;
  if (dayOfEra >= 146097) {
    dayOfEra -= 146097;
    ++era;
  }
  const std::int64_t yearOfEra =
      (dayOfEra - dayOfEra / 1460 + dayOfEra / 36524 - dayOfEra / 146096) / 365;
  const std::int64_t dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100);
  const std::int64_t shifted = (5 * dayOfYear + 2) / 153;
  const std::int64_t day = dayOfYear - (153 * shifted + 2) / 5 + 1;
  const std::int64_t month = shifted + (shifted < 10 ? 3 : -9);
  return {yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day};
}

bool leapYear(std::int64_t year) {
  return (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
}

std::int64_t daysInMonth(std::int64_t year, std::int64_t month) {
  static const int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return month == 2 && leapYear(year) ? 29 : kDays[month - 1];
}

// Ticks of `unit` per second (0 for the date units).
std::int64_t ticksPerSecond(TimeUnit unit) {
  switch (unit) {
    case TimeUnit::kSeconds:
      return 1;
    case TimeUnit::kMillis:
      return 1000;
    case TimeUnit::kMicros:
      return 1000000;
    case TimeUnit::kNanos:
      return 1000000000;
    default:
      return 0;
  }
}

int fractionDigits(TimeUnit unit) {
  switch (unit) {
    case TimeUnit::kMillis:
      return 3;
    case TimeUnit::kMicros:
      return 6;
    case TimeUnit::kNanos:
      return 9;
    default:
      return 0;
  }
}

std::optional<std::int64_t> fail(std::string* problem, const std::string& why) {
  if (problem != nullptr) *problem = why;
  return std::nullopt;
}

bool failed(std::string* problem, const std::string& why) {
  fail(problem, why);
  return false;
}

std::optional<std::int64_t> parseInteger(const std::string& text, std::string* problem) {
  try {
    std::size_t used = 0;
    const long long value = std::stoll(text, &used);
    if (used == text.size()) return static_cast<std::int64_t>(value);
  } catch (const std::exception&) {
  }
  return fail(problem, "'" + text + "' is out of the range of a 64-bit integer");
}

// The date-time fields of an ISO-8601 text, validated.
struct DateTime {
  std::int64_t year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0;
  std::string fraction;            // digits after the decimal point
  std::int64_t offsetMinutes = 0;  // east of UTC
  bool hasTime = false;
};

bool parseDateTime(const std::string& text, DateTime& out, std::string* problem) {
  static const std::regex kIso(
      R"(^(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?)?)"
      R"(\s*(Z|z|UTC|[+-]\d{2}:?\d{2})?$)");
  std::smatch m;
  if (!std::regex_match(text, m, kIso))
    return failed(problem, "'" + text +
                               "' is neither an integer nor an ISO-8601 date or date-time (write "
                               "2024-03-01, 2024-03-01T09:30:00Z, or a number in the file's unit)");
  auto field = [&](int i) { return m[i].matched ? std::stoll(m[i].str()) : 0LL; };
  out.year = field(1);
  out.month = field(2);
  out.day = field(3);
  out.hasTime = m[4].matched;
  out.hour = field(4);
  out.minute = field(5);
  out.second = field(6);
  out.fraction = m[7].matched ? m[7].str() : "";
  if (m[8].matched && m[8].str()[0] != 'Z' && m[8].str()[0] != 'z' && m[8].str() != "UTC") {
    std::string zone = m[8].str();
    const std::int64_t sign = zone[0] == '-' ? -1 : 1;
    zone.erase(0, 1);
    if (zone.find(':') != std::string::npos) zone.erase(zone.find(':'), 1);
    out.offsetMinutes = sign * (std::stoll(zone.substr(0, 2)) * 60 + std::stoll(zone.substr(2)));
  }
  if (out.month < 1 || out.month > 12)
    return failed(problem, "'" + text + "': month " + std::to_string(out.month) + " is not 1-12");
  if (out.day < 1 || out.day > daysInMonth(out.year, out.month))
    return failed(problem, "'" + text + "': " + std::to_string(out.year) + "-" + m[2].str() +
                               " has no day " + std::to_string(out.day));
  if (out.hour > 23 || out.minute > 59 || out.second > 59)
    return failed(problem, "'" + text + "': the time of day is not a valid HH:MM:SS");
  return true;
}

std::string twoDigits(std::int64_t value) {
  char text[24];
  std::snprintf(text, sizeof(text), "%02lld", static_cast<long long>(value));
  return text;
}

std::string dateText(const Civil& c) {
  char text[80];
  std::snprintf(text, sizeof(text), "%04lld-%02lld-%02lld", static_cast<long long>(c.year),
                static_cast<long long>(c.month), static_cast<long long>(c.day));
  return text;
}

}  // namespace

const char* timeUnitName(TimeUnit unit) {
  switch (unit) {
    case TimeUnit::kSeconds:
      return "s";
    case TimeUnit::kMillis:
      return "ms";
    case TimeUnit::kMicros:
      return "us";
    case TimeUnit::kNanos:
      return "ns";
    case TimeUnit::kDays:
      return "days";
    case TimeUnit::kYyyymmdd:
      return "yyyymmdd";
  }
  return "?";
}

std::optional<TimeUnit> timeUnitNamed(const std::string& name) {
  for (TimeUnit unit : {TimeUnit::kSeconds, TimeUnit::kMillis, TimeUnit::kMicros, TimeUnit::kNanos,
                        TimeUnit::kDays, TimeUnit::kYyyymmdd}) {
    if (name == timeUnitName(unit)) return unit;
  }
  return std::nullopt;
}

std::optional<std::int64_t> parseTimeText(const std::string& text, TimeUnit unit,
                                          std::string* problem) {
  // No time is longer; the bound also keeps std::regex (recursive) off long inputs.
  constexpr std::size_t kLongest = 48;
  if (text.size() > kLongest)
    return fail(problem, "'" + text.substr(0, kLongest) +
                             "...' is too long for a time (an ISO-8601 date or a number)");
  static const std::regex kInteger(R"(^[+-]?\d+$)");
  if (std::regex_match(text, kInteger)) return parseInteger(text, problem);
  DateTime t;
  if (!parseDateTime(text, t, problem)) return std::nullopt;
  const std::int64_t days = daysFromCivil(t.year, t.month, t.day);
  const std::int64_t secondOfDay = t.hour * 3600 + t.minute * 60 + t.second - t.offsetMinutes * 60;
  if (unit == TimeUnit::kDays || unit == TimeUnit::kYyyymmdd) {
    const bool midnight =
        secondOfDay % kSecondsPerDay == 0 && t.fraction.find_first_not_of('0') == std::string::npos;
    if (!midnight)
      return fail(problem, "'" + text + "' is not midnight UTC, but data.time_unit = " +
                               timeUnitName(unit) + " counts whole days: give a date");
    const std::int64_t day = days + floorDiv(secondOfDay, kSecondsPerDay);
    if (unit == TimeUnit::kDays) return day;
    const Civil c = civilFromDays(day);
    return c.year * 10000 + c.month * 100 + c.day;
  }
  const int digits = fractionDigits(unit);
  std::string fraction = t.fraction;
  if (fraction.size() > static_cast<std::size_t>(digits) &&
      fraction.find_first_not_of('0', static_cast<std::size_t>(digits)) != std::string::npos)
    return fail(problem, "'" + text + "' has more precision than data.time_unit = " +
                             timeUnitName(unit) + " can hold");
  fraction.resize(static_cast<std::size_t>(digits), '0');
  const std::int64_t perSecond = ticksPerSecond(unit);
  const std::int64_t seconds = days * kSecondsPerDay + secondOfDay;
  if (seconds > std::numeric_limits<std::int64_t>::max() / perSecond - 1 ||
      seconds < std::numeric_limits<std::int64_t>::min() / perSecond + 1)
    return fail(problem, "'" + text + "' does not fit a 64-bit count of " + timeUnitName(unit));
  return seconds * perSecond + (fraction.empty() ? 0 : std::stoll(fraction));
}

std::string formatTime(std::int64_t value, TimeUnit unit) {
  if (unit == TimeUnit::kDays) return dateText(civilFromDays(value));
  if (unit == TimeUnit::kYyyymmdd) {
    const Civil c{value / 10000, value / 100 % 100, value % 100};
    if (value < 0 || c.month < 1 || c.month > 12 || c.day < 1 ||
        c.day > daysInMonth(c.year, c.month))
      return std::to_string(value);
    return dateText(c);
  }
  const std::int64_t perSecond = ticksPerSecond(unit);
  const std::int64_t seconds = floorDiv(value, perSecond);
  const std::int64_t ticks = floorMod(value, perSecond);
  const std::int64_t day = floorDiv(seconds, kSecondsPerDay);
  const std::int64_t secondOfDay = floorMod(seconds, kSecondsPerDay);
  std::string text = dateText(civilFromDays(day)) + "T" + twoDigits(secondOfDay / 3600) + ":" +
                     twoDigits(secondOfDay / 60 % 60) + ":" + twoDigits(secondOfDay % 60);
  if (ticks != 0) {
    std::string digits = std::to_string(ticks + perSecond).substr(1);  // zero-padded
    digits.erase(digits.find_last_not_of('0') + 1);
    text += "." + digits;
  }
  return text + "Z";
}

std::optional<std::int64_t> dayOfTime(std::int64_t value, TimeUnit unit) {
  if (unit == TimeUnit::kDays) return value;
  if (unit == TimeUnit::kYyyymmdd) {
    const Civil c{value / 10000, value / 100 % 100, value % 100};
    if (value < 0 || c.month < 1 || c.month > 12 || c.day < 1 ||
        c.day > daysInMonth(c.year, c.month))
      return std::nullopt;
    return daysFromCivil(c.year, c.month, c.day);
  }
  return floorDiv(floorDiv(value, ticksPerSecond(unit)), kSecondsPerDay);
}

CalendarDate calendarDate(std::int64_t daysSinceEpoch) {
  const Civil c = civilFromDays(daysSinceEpoch);
  return {c.year, c.month, c.day};
}

std::string formatDay(std::int64_t daysSinceEpoch) {
  return dateText(civilFromDays(daysSinceEpoch));
}

std::int64_t dayOfDate(const CalendarDate& date) {
  return daysFromCivil(date.year, date.month, date.day);
}

}  // namespace mb
