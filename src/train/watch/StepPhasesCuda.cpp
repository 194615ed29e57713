// CUDA builds only (the CMake glob adds *Cuda.cpp files when CUDA is on): Note [Step phases]
// with CUDA events on the compute stream.
#include <cuda_runtime.h>

#include <optional>
#include <vector>

#include "common/Error.h"
#include "dist/CudaStreams.h"
#include "train/watch/StepPhases.h"

namespace mb::train {
namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw RuntimeError(std::string("step timing: ") + what + ": " + cudaGetErrorString(status));
}

class CudaPhaseClock final : public PhaseClock {
 public:
  explicit CudaPhaseClock(int device) : device_(device) {}
  ~CudaPhaseClock() override {
    for (auto& mark : marks_)
      cudaEventDestroy(mark.event);
    for (auto event : spare_)
      cudaEventDestroy(event);
  }

  void start() override { record(std::nullopt); }
  void mark(Phase phase) override { record(phase); }

  PhaseSeconds collect() override {
    PhaseSeconds out;
    if (marks_.empty()) return out;
    check(cudaEventSynchronize(marks_.back().event), "waiting for the last step event");
    for (std::size_t i = 1; i < marks_.size(); ++i) {
      if (!marks_[i].phase) continue;  // a step start ends no phase
      float ms = 0;
      check(cudaEventElapsedTime(&ms, marks_[i - 1].event, marks_[i].event), "elapsed time");
      add(out, *marks_[i].phase, ms / 1000.0);
    }
    // Keep the last event: the next mark's phase may start from it.
    for (std::size_t i = 0; i + 1 < marks_.size(); ++i)
      spare_.push_back(marks_[i].event);
    marks_.erase(marks_.begin(), marks_.end() - 1);
    marks_.front().phase.reset();
    return out;
  }

 private:
  struct Mark {
    cudaEvent_t event;
    std::optional<Phase> phase;  // the phase this event ends; none for a step start
  };

  static void add(PhaseSeconds& out, Phase phase, double seconds) {
    switch (phase) {
      case Phase::kData:
        out.data += seconds;
        break;
      case Phase::kForwardBackward:
        out.forwardBackward += seconds;
        break;
      case Phase::kCommunication:
        out.communication += seconds;
        break;
      case Phase::kOptimizer:
        out.optimizer += seconds;
        break;
    }
  }

  void record(std::optional<Phase> phase) {
    cudaEvent_t event;
    if (spare_.empty()) {
      check(cudaEventCreate(&event), "creating an event");
    } else {
      event = spare_.back();
      spare_.pop_back();
    }
    check(cudaEventRecord(event, dist::cuda::currentStream(device_)), "recording an event");
    marks_.push_back({event, phase});
  }

  int device_;
  std::vector<Mark> marks_;
  std::vector<cudaEvent_t> spare_;
};

}  // namespace

std::unique_ptr<PhaseClock> makeCudaPhaseClock(int device) {
  return std::make_unique<CudaPhaseClock>(device);
}

}  // namespace mb::train
