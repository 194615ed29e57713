#pragma once
// Note [Operator profile]
// MEGABATCH_PROFILE=FILE records every ATen operator that training steps FIRST..LAST run
// (MEGABATCH_PROFILE_STEPS=FIRST:LAST, default 21:40: after warm-up) with LibTorch's profiler,
// as a Chrome trace in FILE (rank 0; other ranks write FILE.rank<r>). bench/profile_ops.py
// turns it, and a torch.profiler trace of a Python baseline, into operators per step and
// their self time side by side (docs/benchmarks.md). The profiler costs a few microseconds per
// operator, so profiled steps are not timed ones.
#include <cstdint>
#include <memory>
#include <string>

namespace torch::autograd::profiler {
struct RecordProfile;
}

namespace mb::train {

// What MEGABATCH_PROFILE and MEGABATCH_PROFILE_STEPS ask for (read by `megabatch train`,
// src/app/TrainCommand.cpp); an empty path records nothing.
struct ProfileRequest {
  std::string path;
  std::int64_t first = 21;
  std::int64_t last = 40;
};

class StepProfiler {
 public:
  StepProfiler(int rank, const ProfileRequest& request);
  ~StepProfiler();
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  void beforeStep(std::int64_t step);  // `step`: the step about to run (1-based)
  void afterStep(std::int64_t step);   // the step just finished

 private:
  std::string path_;
  std::int64_t first_;
  std::int64_t last_;
  std::unique_ptr<torch::autograd::profiler::RecordProfile> recording_;
};

}  // namespace mb::train
