#pragma once
// The warnings that a run is slower or larger than it should be, each said sparingly so SLURM
// logs stay readable: the GPU starved (Note [GPU utilisation]), the input pipeline or the
// gradient exchange taking over 10% of step time, and the process's resident memory (RSS)
// growing across an epoch (train.memory_growth_warn_mb), and other processes taking the run's
// CPU cores (Note [CPU threads on a busy machine]). Rank 0 speaks for the job.
#include <cstdint>
#include <memory>
#include <string>

#include "config/Config.h"
#include "dist/CpuThreads.h"
#include "train/watch/GpuUtilisation.h"

namespace mb::train {

class PaceWatch {
 public:
  // `utilisation`: rank 0's NVML reader on CUDA, else null. `coresUsed`: CPU threads per rank
  // times the ranks on rank 0's node.
  PaceWatch(const TrainConfig& train, bool isRoot, int worldSize, int coresUsed,
            std::unique_ptr<GpuUtilisation> utilisation);
  ~PaceWatch();

  // The log line's GPU part (" | gpu 64%"; "" without a reader), and its starvation warning
  // when due. `split`: the step time's split, for the warning. `utilisation` is set to the
  // sampled percentage, or -1.
  std::string gpuPart(const std::string& split, double& utilisation);
  // Shares of step time over a log window, and its mean step time.
  void judgeWindow(double dataShare, double communicationShare, double stepSeconds);
  void epochStarted();
  void epochEnded(std::int64_t epoch);

 private:
  const TrainConfig& train_;
  bool isRoot_;
  int worldSize_;
  std::unique_ptr<GpuUtilisation> utilisation_;
  StarvationWatch starvation_;
  dist::CpuContentionWatch contention_;
  std::int64_t slowWindows_ = 0;  // log windows with a data or communication warning
  std::int64_t epochMemoryStart_ = -1;
};

}  // namespace mb::train
