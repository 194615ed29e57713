#include "train/watch/PaceWatch.h"

#include <fmt/format.h>

#include "common/Log.h"
#include "common/Strings.h"
#include "train/watch/Metrics.h"
#include "train/watch/TrainLog.h"

namespace mb::train {
PaceWatch::PaceWatch(const TrainConfig& train, bool isRoot, int worldSize, int coresUsed,
                     std::unique_ptr<GpuUtilisation> utilisation)
    : train_(train),
      isRoot_(isRoot),
      worldSize_(worldSize),
      utilisation_(std::move(utilisation)),
      starvation_(train.gpuUtilWarn),
      contention_(coresUsed) {}

PaceWatch::~PaceWatch() = default;

// Rank 0 on CUDA: " | gpu 64%", and a warning when the utilisation stays under
// train.gpu_util_warn (StarvationWatch: two judged log windows in a row, the first window not
// judged, then every 20th).
std::string PaceWatch::gpuPart(const std::string& split, double& utilisation) {
  std::optional<double> sampled = utilisation_ ? utilisation_->sinceLastCall() : std::nullopt;
  utilisation = sampled.value_or(-1.0);
  if (utilisation < 0) return "";
  if (starvation_.observe(utilisation))
    trainLog().warn(
        "GPU utilisation is {:.0f}%, under train.gpu_util_warn = {:g}% for {} log windows: the GPU "
        "waits for the host (step time: {}). Try a larger train.global_batch, "
        "data.residency=device, fewer ranks per GPU, or train.precision=bf16",
        utilisation, train_.gpuUtilWarn, starvation_.lowWindows(), split);
  return fmt::format(" | gpu {:.0f}%", utilisation);
}

// On the first slow window and then every 20th.
void PaceWatch::judgeWindow(double dataShare, double communicationShare, double stepSeconds) {
  if (isRoot_) {
    const std::string contention =
        contention_.window(stepSeconds, dist::CpuContentionWatch::runnableNow());
    if (!contention.empty()) trainLog().warn("busy CPU: {}", contention);
  }
  const bool slowData = dataShare > 0.10;
  const bool slowComm = communicationShare > 0.10 && worldSize_ > 1;
  if (!isRoot_ || !(slowData || slowComm) || slowWindows_++ % 20 != 0) return;
  if (slowData)
    trainLog().warn(
        "input pipeline: data time is {:.0f}% of step time; the model waits for batches "
        "(use data.residency=device or host rather than stream, or give each rank more threads)",
        100 * dataShare);
  if (slowComm)
    trainLog().warn(
        "communication: waiting for gradients takes {:.0f}% of step time (a slower rank, or the "
        "network: try a larger per-rank batch, dist.grad_dtype=bf16, or fewer ranks per node)",
        100 * communicationShare);
}

void PaceWatch::epochStarted() {
  epochMemoryStart_ = processMemoryBytes();
}

void PaceWatch::epochEnded(std::int64_t epoch) {
  const std::int64_t now = processMemoryBytes();
  const double growthMb = static_cast<double>(now - epochMemoryStart_) / (1 << 20);
  if (epochMemoryStart_ > 0 && epoch > 0 && growthMb > train_.memoryGrowthWarnMb)
    trainLog().warn(
        "the resident set size (RSS) of the process grew by {:.0f} MiB during epoch {} (now {}); a "
        "steady climb across epochs is a host-memory leak (GPU memory is not counted; "
        "train.memory_growth_warn_mb = {:g})",
        growthMb, epoch, str::humanBytes(static_cast<double>(now)), train_.memoryGrowthWarnMb);
}

}  // namespace mb::train
