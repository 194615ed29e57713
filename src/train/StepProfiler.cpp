#include "train/StepProfiler.h"

#include <torch/csrc/autograd/profiler_legacy.h>

#include "common/Environment.h"
#include "common/Error.h"
#include "common/Log.h"
#include "common/Strings.h"

namespace mb::train {

StepProfiler::StepProfiler(int rank) {
  std::optional<std::string> path = env::get("MEGABATCH_PROFILE");
  if (!path || path->empty()) return;
  path_ = rank == 0 ? *path : *path + ".rank" + std::to_string(rank);
  if (std::optional<std::string> steps = env::get("MEGABATCH_PROFILE_STEPS")) {
    std::vector<std::string> range = str::split(*steps, ':');
    try {
      if (range.size() != 2) throw std::invalid_argument("not FIRST:LAST");
      first_ = std::stoll(range[0]);
      last_ = std::stoll(range[1]);
    } catch (const std::exception&) {
      throw ConfigError("MEGABATCH_PROFILE_STEPS=" + *steps + " is not FIRST:LAST",
                        "e.g. MEGABATCH_PROFILE_STEPS=21:40");
    }
  }
}

StepProfiler::~StepProfiler() = default;

void StepProfiler::beforeStep(std::int64_t step) {
  if (path_.empty() || step != first_) return;
  log::get("train").info("recording the operators of steps {}..{} into {} (MEGABATCH_PROFILE)",
                         first_, last_, path_);
  recording_ = std::make_unique<torch::autograd::profiler::RecordProfile>(path_);
}

void StepProfiler::afterStep(std::int64_t step) {
  if (recording_ && step >= last_) recording_.reset();  // writes the trace
}

}  // namespace mb::train
