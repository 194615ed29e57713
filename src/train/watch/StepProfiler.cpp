#include "train/watch/StepProfiler.h"

#include <torch/csrc/autograd/profiler_legacy.h>

#include "common/Log.h"

namespace mb::train {

StepProfiler::StepProfiler(int rank, const ProfileRequest& request)
    : first_(request.first), last_(request.last) {
  if (request.path.empty()) return;
  path_ = rank == 0 ? request.path : request.path + ".rank" + std::to_string(rank);
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
