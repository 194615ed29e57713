#include "data/pipeline/Splits.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/Error.h"

namespace mb::data {
namespace {

std::string show(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", value);
  return text;
}

std::int64_t cutAt(std::int64_t n, double fraction) {
  // The small epsilon keeps 0.8 * 1000 at 800 despite binary rounding.
  auto cut = static_cast<std::int64_t>(std::floor(static_cast<double>(n) * fraction + 1e-9));
  return std::clamp<std::int64_t>(cut, 0, n);
}

void requireNonEmpty(const SampleRange& range, double fraction, const char* name, std::int64_t cut,
                     std::int64_t gapStart, const std::string& file) {
  if (fraction <= 0 || range.size() > 0) return;
  throw DataError(file + ": the " + std::string(name) + " split is empty: data.split." + name +
                      "_fraction = " + show(fraction) + " gives samples up to " +
                      std::to_string(cut) +
                      ", but the embargo gap after the previous split runs to sample " +
                      std::to_string(gapStart),
                  "use more data, a larger data.split." + std::string(name) +
                      "_fraction, shorter windows, or a smaller data.split.embargo");
}

}  // namespace

std::array<SampleRange, 3> planSplits(SampleRange usable, const SplitConfig& split,
                                      const NextStart& nextStart, const std::string& file) {
  std::int64_t n = usable.size();
  std::int64_t cut1 = usable.begin + cutAt(n, split.trainFraction);
  std::int64_t cut2 = usable.begin + cutAt(n, split.trainFraction + split.valFraction);
  if (split.testFraction <= 0) cut2 = usable.end;  // val takes the rounding remainder
  if (split.valFraction <= 0) cut2 = std::max(cut2, cut1);

  std::array<SampleRange, 3> splits{};
  auto& train = splits[static_cast<int>(Split::kTrain)];
  auto& val = splits[static_cast<int>(Split::kVal)];
  auto& test = splits[static_cast<int>(Split::kTest)];
  train = {usable.begin, cut1};
  if (train.size() < 1)
    throw DataError(
        file + ": the train split is empty (" + std::to_string(n) +
            " usable samples x data.split.train_fraction = " + show(split.trainFraction) + ")",
        "use more data or a larger data.split.train_fraction");

  std::int64_t previousLast = train.end - 1;
  if (split.valFraction > 0) {
    std::int64_t start = std::min(nextStart(previousLast, cut1), std::max(cut2, cut1));
    val = {start, std::max(start, cut2)};
    requireNonEmpty(val, split.valFraction, "val", cut2, nextStart(previousLast, cut1), file);
    previousLast = val.end - 1;
  } else {
    val = {cut1, cut1};
  }
  if (split.testFraction > 0) {
    std::int64_t start = std::min(nextStart(previousLast, cut2), usable.end);
    test = {start, usable.end};
    requireNonEmpty(test, split.testFraction, "test", usable.end, nextStart(previousLast, cut2),
                    file);
  } else {
    test = {usable.end, usable.end};
  }
  return splits;
}

NextStart fixedGap(std::int64_t gap) {
  return [gap](std::int64_t, std::int64_t cut) { return cut + gap; };
}

NextStart pastTheHorizon(std::int64_t horizon, NextStart inner) {
  return [horizon, inner = std::move(inner)](std::int64_t previousLast, std::int64_t cut) {
    return std::max(inner(previousLast, cut), previousLast + horizon + 1);
  };
}

SampleRange evalPart(SampleRange split, int rank, int worldSize) {
  std::int64_t n = split.size();
  return {split.begin + n * rank / worldSize, split.begin + n * (rank + 1) / worldSize};
}

SampleRange trainPart(SampleRange trainSplit, const GlobalOrder& order, int rank, int worldSize) {
  ItemRange items =
      order.itemsOfShards(GlobalOrder::shardsOfRank(order.numShards(), rank, worldSize));
  return {trainSplit.begin + items.begin, trainSplit.begin + items.end};
}

}  // namespace mb::data
