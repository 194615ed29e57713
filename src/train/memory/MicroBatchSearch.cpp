#include "train/memory/MicroBatchSearch.h"

#include <algorithm>
#include <cmath>

#include "common/Strings.h"

namespace mb::train {
namespace {

// The size whose activations would just fill `room`: from the two closest trials as a line
// (activations = constant + per-sample x size: one step to the answer when memory is affine in
// the size), else from one trial as proportional.
double estimateSize(const std::vector<MicroBatchTrial>& trials, double room) {
  std::vector<MicroBatchTrial> measured;
  for (const auto& t : trials)
    if (t.outcome.variableBytes > 0) measured.push_back(t);
  if (measured.empty()) return -1;
  const MicroBatchTrial& last = measured.back();
  if (measured.size() >= 2) {
    const MicroBatchTrial& before = measured[measured.size() - 2];
    const double perSample =
        static_cast<double>(last.outcome.variableBytes - before.outcome.variableBytes) /
        static_cast<double>(last.microBatch - before.microBatch);
    if (perSample > 0) {
      const double constant =
          static_cast<double>(last.outcome.variableBytes) - perSample * last.microBatch;
      return (room - constant) / perSample;
    }
  }
  return room /
         (static_cast<double>(last.outcome.variableBytes) / static_cast<double>(last.microBatch));
}

}  // namespace

std::int64_t balancedMicroBatch(std::int64_t share, std::int64_t fits) {
  if (fits <= 0 || share <= 0) return 0;
  const std::int64_t steps = (share + fits - 1) / fits;
  return (share + steps - 1) / steps;
}

MicroBatchChoice searchMicroBatch(std::int64_t largest, std::int64_t fixedBytes,
                                  std::int64_t budget, const MeasureMicroBatch& measure) {
  MicroBatchChoice choice;
  // Bytes the activations and workspace may take, margin included.
  const double room = static_cast<double>(budget - fixedBytes) / (1.0 + kActivationMargin);
  std::int64_t fitting = 0;            // the largest size known to fit
  std::int64_t failing = largest + 1;  // the smallest size known not to
  std::int64_t size = largest;
  bool ranOut = false;
  while (static_cast<int>(choice.trials.size()) < kMaxTrials) {
    MicroBatchTrial trial;
    trial.microBatch = size;
    trial.outcome = measure(size);
    const std::int64_t bytes = trial.outcome.variableBytes;
    trial.fits = bytes >= 0 && static_cast<double>(bytes) <= room;
    choice.trials.push_back(trial);
    (trial.fits ? fitting : failing) = size;
    if (room <= 0) break;  // the fixed part alone fills the budget
    // Close enough: within 1/32 of the size (a sample of 1 at the bottom).
    if (failing - fitting <= std::max<std::int64_t>(1, failing / 32)) break;
    // Once a size ran out of memory for real, the measure no longer tells where memory ends:
    // bisect from then on.
    ranOut = ranOut || trial.outcome.ranOut;
    const double estimate = ranOut ? -1 : estimateSize(choice.trials, room);
    const std::int64_t next =
        estimate > 0 ? static_cast<std::int64_t>(std::floor(estimate)) : (fitting + failing) / 2;
    size = std::clamp<std::int64_t>(next, fitting + 1, failing - 1);
  }
  choice.microBatch = balancedMicroBatch(largest, fitting);
  return choice;
}

std::string MicroBatchChoice::describeTrials() const {
  std::vector<std::string> parts;
  for (const auto& t : trials) {
    const std::int64_t measured = t.outcome.variableBytes;
    const std::string bytes = t.outcome.ranOut    ? "ran out of memory"
                              : t.outcome.overCap ? "stopped at the budget"
                              : measured < 0      ? "not measured"
                                                  : str::humanBytes(static_cast<double>(measured));
    parts.push_back(std::to_string(t.microBatch) + ": " + bytes +
                    (t.fits ? " (fits)" : " (does not fit)"));
  }
  return str::join(parts, ", ");
}

}  // namespace mb::train
