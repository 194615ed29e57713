#pragma once
// Note [Times as users write them]
// A time cut (data.split.train_until, `eval --from`) is written either as an integer, taken as
// is in the unit of the file's /timestamps, or as an ISO-8601 date or date-time in UTC
// ("2024-03-01", "2024-03-01T09:30", "2024-03-01 09:30:00.250Z", an offset such as "+02:00" is
// converted to UTC). A date needs the file's unit to become a number (data.time_unit):
//   s, ms, us, ns : since 1970-01-01T00:00:00Z (Unix time)
//   days          : days since 1970-01-01 (a date-time must then fall on midnight)
//   yyyymmdd      : the date as the decimal number 20240301 (panel files often store dates so)
// The same unit turns a file's timestamps back into text for messages and summaries.
#include <cstdint>
#include <optional>
#include <string>

namespace mb {

enum class TimeUnit { kSeconds, kMillis, kMicros, kNanos, kDays, kYyyymmdd };

// The unit's name as data.time_unit writes it ("s", "days", ...), and back (nullopt: none).
const char* timeUnitName(TimeUnit unit);
std::optional<TimeUnit> timeUnitNamed(const std::string& name);

// `text` as a timestamp in `unit`, or nullopt with `problem` saying what is wrong with it.
std::optional<std::int64_t> parseTimeText(const std::string& text, TimeUnit unit,
                                          std::string* problem);

// A timestamp in `unit` as text a user can read and paste back as a cut:
// "2024-03-01T09:30:00Z" (with the fraction where the unit has one and it is not zero), or
// "2024-03-01" for days and yyyymmdd. A value the unit cannot describe as a date (yyyymmdd
// 20241399) is written as the plain number.
std::string formatTime(std::int64_t value, TimeUnit unit);

// The UTC calendar day of a timestamp in `unit`, as days since 1970-01-01; nullopt for a
// yyyymmdd value that is no date.
std::optional<std::int64_t> dayOfTime(std::int64_t value, TimeUnit unit);
// Year, month (1-12) and day (1-31) of a day counted since 1970-01-01.
struct CalendarDate {
  std::int64_t year = 1970, month = 1, day = 1;
};
CalendarDate calendarDate(std::int64_t daysSinceEpoch);
// And back: the day (since 1970-01-01) of a date; months past 12 are not carried.
std::int64_t dayOfDate(const CalendarDate& date);
// "2024-03-01"
std::string formatDay(std::int64_t daysSinceEpoch);

}  // namespace mb
