#include "data/pipeline/TimeSplits.h"

#include <algorithm>
#include <functional>

#include "common/Error.h"

namespace mb::data {
namespace {

const char* const kCutHint =
    "move the cut inside the file's time range, or grow the file (`megabatch inspect FILE` "
    "shows its timestamps; data.time_unit says what they count)";

}  // namespace

SampleTimes::SampleTimes(IndexReader& index, DatasetMeta timestamps, TimeUnit unit,
                         std::string file)
    : index_(index), timestamps_(std::move(timestamps)), unit_(unit), file_(std::move(file)) {}

std::int64_t SampleTimes::firstAtOrAfter(SampleRange range, std::int64_t time) {
  std::int64_t low = range.begin, high = range.end;
  while (low < high) {
    const std::int64_t middle = low + (high - low) / 2;
    if (at(middle) < time)
      low = middle + 1;
    else
      high = middle;
  }
  return low;
}

std::string SampleTimes::text(std::int64_t sample) {
  return formatTime(at(sample), unit_);
}

TimeSpan SampleTimes::span(SampleRange range) {
  if (range.size() <= 0) return {};
  return {at(range.begin), at(range.end - 1), true};
}

std::string SampleTimes::rangeSentence(SampleRange range, const std::string& what) {
  if (range.size() <= 0) return what + ": no sample";
  return what + ": " + text(range.begin) + " to " + text(range.end - 1) + " (samples " +
         std::to_string(range.begin) + " to " + std::to_string(range.end - 1) +
         ", data.time_unit = " + timeUnitName(unit_) + ")";
}

std::int64_t SampleTimes::cut(const std::string& key, const std::string& text) const {
  std::string problem;
  std::optional<std::int64_t> value = parseTimeText(text, unit_, &problem);
  if (!value) throw ConfigError(key + ": " + problem);
  return *value;
}

namespace {

// The largest end e in [low, high] whose gap fits: fits(e) holds for low and turns false at
// most once as e grows (a later train end needs a later start after it).
std::int64_t lastFitting(std::int64_t low, std::int64_t high,
                         const std::function<bool(std::int64_t)>& fits) {
  while (low < high) {
    const std::int64_t middle = low + (high - low + 1) / 2;
    if (fits(middle))
      low = middle;
    else
      high = middle - 1;
  }
  return low;
}

// With val_from: every gap comes out of the split before its cut. Train ends where its embargo
// clears val's first sample; val ends data.horizon samples before test's first (its targets stop
// before test's rows; with no horizon known, the whole embargo), and test starts at val_until.
std::array<SampleRange, 3> gapsBeforeCuts(
    SampleRange usable, std::int64_t begin, const SplitConfig& split, SampleTimes& times,
    const NextStart& nextStart, std::int64_t horizon,
    const std::function<DataError(const std::string&, const std::string&, const std::string&)>&
        outside) {
  const std::int64_t valBegin =
      times.firstAtOrAfter({begin, usable.end}, times.cut("data.split.val_from", split.valFrom));
  if (valBegin == begin)
    throw outside("data.split.val_from", split.valFrom,
                  "leaves the train split empty (no sample before it)");
  std::int64_t testBegin = usable.end;
  if (!split.valUntil.empty())
    testBegin = times.firstAtOrAfter({valBegin, usable.end},
                                     times.cut("data.split.val_until", split.valUntil));
  const std::int64_t trainEnd = lastFitting(begin, valBegin, [&](std::int64_t end) {
    return end == begin || nextStart(end - 1, end) <= valBegin;
  });
  if (trainEnd == begin)
    throw DataError(
        "the train split is empty: the embargo before data.split.val_from = " + split.valFrom +
            " (sample " + std::to_string(valBegin) + ", " + times.text(valBegin) +
            ") reaches back past its first sample " + std::to_string(begin) + " (" +
            times.text(begin) + "); " + times.rangeSentence(usable, "the file's samples"),
        "move data.split.val_from later, use shorter windows, or a smaller "
        "data.split.embargo");
  std::int64_t valEnd = testBegin;
  if (testBegin < usable.end) {  // no test sample: nothing for val's targets to reach
    valEnd = lastFitting(valBegin, testBegin, [&](std::int64_t end) {
      if (end == valBegin) return true;
      return horizon > 0 ? end - 1 + horizon < testBegin : nextStart(end - 1, end) <= testBegin;
    });
  }
  if (valEnd == valBegin && valBegin < testBegin)
    throw DataError("the val split is empty: its samples from data.split.val_from = " +
                        split.valFrom + " to data.split.val_until = " + split.valUntil +
                        " all have targets that reach the test split's first sample " +
                        std::to_string(testBegin) + " (" + times.text(testBegin) + "; " +
                        (horizon > 0 ? "data.horizon = " + std::to_string(horizon)
                                     : std::string("one embargo: data.horizon is not set")) +
                        "); " + times.rangeSentence(usable, "the file's samples"),
                    horizon > 0 ? "validate on a longer period"
                                : "set data.horizon (how many samples a target looks ahead), or "
                                  "validate on a longer period");
  std::array<SampleRange, 3> splits{};
  splits[static_cast<int>(Split::kTrain)] = {begin, trainEnd};
  splits[static_cast<int>(Split::kVal)] = {valBegin, valEnd};
  splits[static_cast<int>(Split::kTest)] = {testBegin, usable.end};
  return splits;
}

}  // namespace

std::array<SampleRange, 3> planTimeSplits(SampleRange usable, const SplitConfig& split,
                                          SampleTimes& times, const NextStart& nextStart,
                                          std::int64_t horizon) {
  const std::string file = "the file's samples";
  auto outside = [&](const std::string& key, const std::string& text, const std::string& why) {
    return DataError(key + " = " + text + " " + why + ": " + times.rangeSentence(usable, file),
                     kCutHint);
  };
  std::int64_t begin = usable.begin;
  if (!split.trainFrom.empty()) {
    begin = times.firstAtOrAfter(usable, times.cut("data.split.train_from", split.trainFrom));
    if (begin == usable.end)
      throw outside("data.split.train_from", split.trainFrom, "is after the last sample");
  }
  if (!split.valFrom.empty())
    return gapsBeforeCuts(usable, begin, split, times, nextStart, horizon, outside);
  const std::int64_t cut1 = times.firstAtOrAfter(
      {begin, usable.end}, times.cut("data.split.train_until", split.trainUntil));
  if (cut1 == begin)
    throw outside("data.split.train_until", split.trainUntil,
                  split.trainFrom.empty() ? "leaves the train split empty (no sample before it)"
                                          : "leaves the train split empty (no sample from "
                                            "data.split.train_from = " +
                                                split.trainFrom + " to it)");
  if (cut1 == usable.end)
    throw outside("data.split.train_until", split.trainUntil,
                  "is after the last sample: nothing is left to validate on");
  std::int64_t cut2 = usable.end;
  if (!split.valUntil.empty()) {
    cut2 =
        times.firstAtOrAfter({cut1, usable.end}, times.cut("data.split.val_until", split.valUntil));
    if (cut2 == usable.end)
      throw outside("data.split.val_until", split.valUntil,
                    "is after the last sample: nothing is left to test on (leave "
                    "data.split.val_until out to validate on every sample after train_until)");
  }
  std::array<SampleRange, 3> splits{};
  splits[static_cast<int>(Split::kTrain)] = {begin, cut1};
  auto after = [&](SampleRange previous, std::int64_t cut, std::int64_t end, const char* name,
                   const std::string& cutKey) {
    const std::int64_t start = nextStart(previous.end - 1, cut);
    if (start < end) return SampleRange{start, end};
    throw DataError(
        "the " + std::string(name) + " split is empty: the embargo after " + cutKey + " (sample " +
            std::to_string(cut) + ", " + times.text(cut) + ") runs to sample " +
            std::to_string(start) + ", past its last sample " + std::to_string(end - 1) + " (" +
            times.text(end - 1) + "); " + times.rangeSentence(usable, file),
        "move the cuts further apart, use shorter windows, or a smaller data.split.embargo");
  };
  splits[static_cast<int>(Split::kVal)] =
      after(splits[0], cut1, cut2, "val", "data.split.train_until");
  splits[static_cast<int>(Split::kTest)] =
      split.valUntil.empty() ? SampleRange{usable.end, usable.end}
                             : after(splits[1], cut2, usable.end, "test", "data.split.val_until");
  return splits;
}

SampleRange selectPeriod(SampleRange within, const PeriodSelection& period, SampleTimes& times,
                         const std::string& what) {
  SampleRange chosen = within;
  if (!period.from.empty())
    chosen.begin = times.firstAtOrAfter(within, times.cut("--from", period.from));
  if (!period.to.empty()) chosen.end = times.firstAtOrAfter(within, times.cut("--to", period.to));
  chosen.end = std::max(chosen.begin, chosen.end);
  if (chosen.size() > 0) return chosen;
  std::string asked = (period.from.empty() ? "" : "--from " + period.from) +
                      (period.from.empty() || period.to.empty() ? "" : " ") +
                      (period.to.empty() ? "" : "--to " + period.to);
  throw DataError(
      "no sample of " + what + " falls in " + asked + ": " + times.rangeSentence(within, what),
      "choose a period inside that range (--from is inclusive, --to exclusive)");
}

}  // namespace mb::data
