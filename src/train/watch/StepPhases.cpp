#include "train/watch/StepPhases.h"

#include <chrono>

#include "common/Error.h"

namespace mb::train {
namespace {

double& slot(PhaseSeconds& seconds, Phase phase) {
  switch (phase) {
    case Phase::kData:
      return seconds.data;
    case Phase::kForwardBackward:
      return seconds.forwardBackward;
    case Phase::kCommunication:
      return seconds.communication;
    case Phase::kOptimizer:
      break;
  }
  return seconds.optimizer;
}

// Note [Step phases] on the CPU: host time between marks.
class HostPhaseClock final : public PhaseClock {
 public:
  void start() override { last_ = Clock::now(); }
  void mark(Phase phase) override {
    auto now = Clock::now();
    slot(sums_, phase) += std::chrono::duration<double>(now - last_).count();
    last_ = now;
  }
  PhaseSeconds collect() override {
    PhaseSeconds out = sums_;
    sums_ = PhaseSeconds();
    return out;
  }

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point last_ = Clock::now();
  PhaseSeconds sums_;
};

}  // namespace

std::unique_ptr<PhaseClock> PhaseClock::create(c10::Device device) {
  if (!device.is_cuda()) return std::make_unique<HostPhaseClock>();
#if MEGABATCH_WITH_CUDA
  return makeCudaPhaseClock(device.has_index() ? device.index() : 0);
#else
  throw RuntimeError("PhaseClock: a CUDA device in a build without CUDA");
#endif
}

}  // namespace mb::train
