#include "dist/FaultInjection.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <utility>
#include <vector>

#include "common/Environment.h"
#include "common/Log.h"
#include "common/Strings.h"

namespace mb::dist {
namespace {

// The colon-separated fields of `variable` ("1:grad bucket:3"); empty when it is unset or has
// fewer than two.
std::vector<std::string> specFields(const char* variable) {
  auto text = env::get(variable);
  if (!text) return {};
  auto fields = str::split(*text, ':');
  return fields.size() < 2 ? std::vector<std::string>{} : fields;
}

struct HangSpec {
  bool active = false;
  int rank = -1;
  std::string label;
  long skip = 0;
};

HangSpec parseHangSpec() {
  HangSpec spec;
  const auto fields = specFields("MEGABATCH_FAULT_HANG");
  if (fields.empty()) return spec;
  spec.active = true;
  spec.rank = std::stoi(fields[0]);
  spec.label = fields[1];
  spec.skip = fields.size() > 2 ? std::stol(fields[2]) : 0;
  return spec;
}

struct SlowSpec {
  bool active = false;
  int rank = -1;  // -1: every rank
  long ms = 0;
  bool spin = false;
};

SlowSpec parseSlowSpec() {
  SlowSpec spec;
  const auto fields = specFields("MEGABATCH_FAULT_SLOW_STEP");
  if (fields.empty()) return spec;
  spec.active = true;
  spec.rank = fields[0] == "*" ? -1 : std::stoi(fields[0]);
  spec.ms = std::stol(fields[1]);
  spec.spin = fields.size() > 2 && fields[2] == "spin";
  return spec;
}

TrainingFaults parseTrainingFaults() {
  TrainingFaults faults;
  if (auto step = env::getInt("MEGABATCH_FAULT_NAN_STEP")) faults.nanStep = *step;
  if (auto rank = env::getInt("MEGABATCH_FAULT_NAN_RANK")) faults.nanRank = static_cast<int>(*rank);
  if (auto count = env::getInt("MEGABATCH_FAULT_NAN_COUNT")) faults.nanCount = *count;
  if (auto step = env::getInt("MEGABATCH_FAULT_STOP_STEP")) faults.stopStep = *step;
  if (auto die = env::get("MEGABATCH_FAULT_DIE_STEP")) {
    const std::vector<std::string> parts = str::split(*die, ':');
    if (parts.size() == 2) {
      faults.dieRank = std::stoi(parts[0]);
      faults.dieStep = std::stoll(parts[1]);
    }
  }
  if (auto steps = env::get("MEGABATCH_FAULT_NAN_STEPS")) {
    for (const std::string& step : str::split(*steps, ','))
      faults.nanSteps.insert(std::stoll(step));
  }
  return faults;
}

}  // namespace

void maybeInjectHang(int rank, const std::string& label) {
  static const HangSpec spec = parseHangSpec();
  static std::atomic<long> seen{0};
  if (!spec.active || rank != spec.rank || label.find(spec.label) == std::string::npos) return;
  if (seen++ < spec.skip) return;
  log::get("dist").warn("fault injection: rank {} hangs in '{}' (MEGABATCH_FAULT_HANG)", rank,
                        label);
  while (true)
    std::this_thread::sleep_for(std::chrono::hours(1));
}

void maybeSlowMicroBatch(int rank) {
  static const SlowSpec spec = parseSlowSpec();
  if (!spec.active || (spec.rank >= 0 && spec.rank != rank)) return;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(spec.ms);
  if (!spec.spin) {
    std::this_thread::sleep_until(until);
    return;
  }
  volatile double sink = 0;  // burns CPU time, as real compute does
  while (std::chrono::steady_clock::now() < until) {
    for (int i = 0; i < 10000; ++i)
      sink = sink + 1e-9 * i;
  }
}

std::optional<std::string> fakeCpuFlags() {
  static const std::optional<std::string> flags = env::get("MEGABATCH_FAULT_CPU_FLAGS");
  return flags;
}

std::optional<double> fakeCpuBf16Ratio(bool forTrial) {
  static const std::optional<std::pair<double, double>> ratios =
      []() -> std::optional<std::pair<double, double>> {
    const std::optional<std::string> text = env::get("MEGABATCH_FAULT_CPU_BF16_RATIO");
    if (!text) return std::nullopt;
    const std::size_t colon = text->find(':');
    const double probe = std::stod(text->substr(0, colon));
    return std::make_pair(probe,
                          colon == std::string::npos ? probe : std::stod(text->substr(colon + 1)));
  }();
  if (!ratios) return std::nullopt;
  return forTrial ? ratios->second : ratios->first;
}

bool TrainingFaults::nanLossAt(std::int64_t step, int rank) const {
  const bool chosen =
      (nanStep > 0 && step >= nanStep && step < nanStep + nanCount) || nanSteps.count(step) > 0;
  return chosen && (nanRank < 0 || nanRank == rank);
}

const TrainingFaults& trainingFaults() {
  static const TrainingFaults faults = parseTrainingFaults();
  return faults;
}

void maybeSlowEvalBatch() {
  static const long ms = env::getInt("MEGABATCH_FAULT_EVAL_BATCH_MS").value_or(0);
  if (ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

void maybeSlowCheckpointWrite() {
  static const long ms = env::getInt("MEGABATCH_FAULT_CHECKPOINT_WRITE_MS").value_or(0);
  if (ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

}  // namespace mb::dist
