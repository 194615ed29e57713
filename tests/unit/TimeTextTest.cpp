// Note [Times as users write them]: dates and date-times in every unit, back to text, and the
// problems named. The references are Unix times computed by hand (and by `date -u +%s`).
#include <gtest/gtest.h>

#include <limits>

#include "common/TimeText.h"

namespace mb {
namespace {

std::int64_t parsed(const std::string& text, TimeUnit unit) {
  std::string problem;
  std::optional<std::int64_t> value = parseTimeText(text, unit, &problem);
  EXPECT_TRUE(value.has_value()) << text << ": " << problem;
  return value.value_or(-1);
}

std::string problemOf(const std::string& text, TimeUnit unit) {
  std::string problem;
  EXPECT_FALSE(parseTimeText(text, unit, &problem).has_value()) << text;
  return problem;
}

TEST(TimeText, DatesAndDateTimesInSeconds) {
  EXPECT_EQ(parsed("1970-01-01", TimeUnit::kSeconds), 0);
  EXPECT_EQ(parsed("2024-03-01", TimeUnit::kSeconds), 1709251200);
  EXPECT_EQ(parsed("2024-02-29T23:59:59Z", TimeUnit::kSeconds), 1709251199);
  EXPECT_EQ(parsed("2024-03-01 09:30", TimeUnit::kSeconds), 1709251200 + 9 * 3600 + 30 * 60);
  EXPECT_EQ(parsed("2024-03-01T11:30:00+02:00", TimeUnit::kSeconds), 1709251200 + 9 * 3600 + 1800);
  EXPECT_EQ(parsed("2024-03-01T04:30:00-0500", TimeUnit::kSeconds), 1709251200 + 9 * 3600 + 1800);
  EXPECT_EQ(parsed("1969-12-31T23:59:00Z", TimeUnit::kSeconds), -60);
  EXPECT_EQ(parsed("2000-02-29", TimeUnit::kSeconds), 951782400);
}

TEST(TimeText, IntegersAreTakenAsTheyAre) {
  EXPECT_EQ(parsed("1700000000", TimeUnit::kSeconds), 1700000000);
  EXPECT_EQ(parsed("20240301", TimeUnit::kYyyymmdd), 20240301);
  EXPECT_EQ(parsed("-5", TimeUnit::kDays), -5);
}

TEST(TimeText, FinerUnitsKeepTheFraction) {
  EXPECT_EQ(parsed("2024-03-01T00:00:00.250Z", TimeUnit::kMillis), 1709251200250);
  EXPECT_EQ(parsed("2024-03-01T00:00:00.000001", TimeUnit::kMicros), 1709251200000001);
  EXPECT_EQ(parsed("2024-03-01", TimeUnit::kNanos), 1709251200000000000);
  EXPECT_NE(problemOf("2024-03-01T00:00:00.5", TimeUnit::kSeconds).find("more precision"),
            std::string::npos);
}

TEST(TimeText, DayUnits) {
  EXPECT_EQ(parsed("2024-03-01", TimeUnit::kDays), 19783);
  EXPECT_EQ(parsed("2024-03-01T00:00:00Z", TimeUnit::kYyyymmdd), 20240301);
  EXPECT_EQ(parsed("2024-03-01T01:00:00+01:00", TimeUnit::kDays), 19783);
  EXPECT_NE(problemOf("2024-03-01T12:00", TimeUnit::kDays).find("not midnight UTC"),
            std::string::npos);
}

TEST(TimeText, ProblemsSayWhatIsWrong) {
  EXPECT_NE(problemOf("2023-02-29", TimeUnit::kSeconds).find("has no day 29"), std::string::npos);
  EXPECT_NE(problemOf("2024-13-01", TimeUnit::kSeconds).find("month 13"), std::string::npos);
  EXPECT_NE(problemOf("2024-01-01T24:00", TimeUnit::kSeconds).find("time of day"),
            std::string::npos);
  EXPECT_NE(problemOf("next week", TimeUnit::kSeconds).find("ISO-8601"), std::string::npos);
  EXPECT_NE(problemOf("99999999999999999999", TimeUnit::kSeconds).find("64-bit"),
            std::string::npos);
}

TEST(TimeText, FormatsBackToTextThatParsesAgain) {
  EXPECT_EQ(formatTime(1709251200, TimeUnit::kSeconds), "2024-03-01T00:00:00Z");
  EXPECT_EQ(formatTime(-60, TimeUnit::kSeconds), "1969-12-31T23:59:00Z");
  EXPECT_EQ(formatTime(1709251200250, TimeUnit::kMillis), "2024-03-01T00:00:00.25Z");
  EXPECT_EQ(formatTime(19783, TimeUnit::kDays), "2024-03-01");
  EXPECT_EQ(formatTime(20240301, TimeUnit::kYyyymmdd), "2024-03-01");
  EXPECT_EQ(formatTime(20241399, TimeUnit::kYyyymmdd), "20241399");
  for (TimeUnit unit : {TimeUnit::kSeconds, TimeUnit::kMillis, TimeUnit::kMicros, TimeUnit::kNanos,
                        TimeUnit::kDays}) {
    for (std::int64_t value : {std::int64_t{0}, std::int64_t{1709251200}, std::int64_t{-86401},
                               std::int64_t{1709251200123}}) {
      if (unit == TimeUnit::kSeconds && value > 1e11) continue;
      if (unit == TimeUnit::kDays && (value > 1000000 || value < -1000000)) continue;
      EXPECT_EQ(parsed(formatTime(value, unit), unit), value) << timeUnitName(unit) << " " << value;
    }
  }
}

// The ends of int64 in every unit (found by the data-schema fuzzer: the day and second-of-day
// arithmetic overflowed). References: the textbook civil-from-days algorithm in Python's
// arbitrary-precision integers; the nanosecond ends are the well-known 1677/2262 limits.
TEST(TimeText, FormatsTheEndsOfInt64WithoutOverflow) {
  const std::int64_t most = std::numeric_limits<std::int64_t>::max();
  const std::int64_t least = std::numeric_limits<std::int64_t>::min();
  EXPECT_EQ(formatTime(most, TimeUnit::kSeconds), "292277026596-12-04T15:30:07Z");
  EXPECT_EQ(formatTime(least, TimeUnit::kSeconds), "-292277022657-01-27T08:29:52Z");
  EXPECT_EQ(formatTime(most, TimeUnit::kMillis), "292278994-08-17T07:12:55.807Z");
  EXPECT_EQ(formatTime(least, TimeUnit::kMillis), "-292275055-05-16T16:47:04.192Z");
  EXPECT_EQ(formatTime(most, TimeUnit::kMicros), "294247-01-10T04:00:54.775807Z");
  EXPECT_EQ(formatTime(least, TimeUnit::kMicros), "-290308-12-21T19:59:05.224192Z");
  EXPECT_EQ(formatTime(most, TimeUnit::kNanos), "2262-04-11T23:47:16.854775807Z");
  EXPECT_EQ(formatTime(least, TimeUnit::kNanos), "1677-09-21T00:12:43.145224192Z");
  EXPECT_EQ(formatTime(most, TimeUnit::kDays), "25252734927768524-07-27");
  EXPECT_EQ(formatTime(least, TimeUnit::kDays), "-25252734927764585-06-07");
  EXPECT_EQ(formatTime(least, TimeUnit::kYyyymmdd), std::to_string(least));
  EXPECT_EQ(dayOfTime(least, TimeUnit::kSeconds), -106751991167301);
  EXPECT_EQ(formatDay(most).substr(0, 17), "25252734927768524");
}

}  // namespace
}  // namespace mb
