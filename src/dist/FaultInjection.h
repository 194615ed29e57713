#pragma once
// Test-only fault hooks, driven by environment variables so tests can attack a real run:
//   MEGABATCH_FAULT_HANG=RANK:LABEL[:SKIP]
//     rank RANK stops before the (SKIP+1)-th collective whose label contains LABEL and sleeps
//     forever, e.g. "1:grad bucket:3". The watchdog must end the job.
//   MEGABATCH_FAULT_SLOW_STEP=RANK:MS[:spin]
//     every training micro-batch of rank RANK (* = every rank) takes MS milliseconds longer:
//     asleep, or computing (spinning on a core) with ":spin". A slow rank is not a hung one:
//     the watchdog must wait for it (Note [Watchdog heartbeat]).
//   MEGABATCH_FAULT_CPU_FLAGS="flag flag ..."
//     the CPU flags that precision checks see instead of /proc/cpuinfo's, e.g. "avx2" for a CPU
//     without bf16 units; without them the precision probe also runs without oneDNN, as
//     LibTorch's bf16 products do on such a CPU (train/precision/CpuPrecision.h).
//   MEGABATCH_FAULT_CPU_BF16_RATIO=R or PROBE:TRIAL
//     bf16's measured time is R times fp32's in the CPU probe and in the trial step of
//     train.precision = auto (both still run), or PROBE times in the probe and TRIAL times in
//     the trial, so a test decides what auto chooses on any CPU
//     (train/precision/CpuAutoPrecision.h).
//   MEGABATCH_FAULT_NAN_STEP=S, _COUNT=N (default 1), _RANK=R (default every rank)
//     the training loss is NaN on steps [S, S+N) on rank R; MEGABATCH_FAULT_NAN_STEPS="3,9,10"
//     on the steps listed.
//   MEGABATCH_FAULT_STOP_STEP=S
//     a SIGTERM arrives (on every rank) when step S has finished.
//   MEGABATCH_FAULT_DIE_STEP=RANK:S
//     rank RANK dies of a SIGKILL when step S has finished: a dead rank, as a crash or the
//     kernel's OOM killer leaves one (the launchers' restarts: launch/elastic.sh).
//   MEGABATCH_FAULT_EVAL_BATCH_MS=MS
//     every evaluation batch takes MS milliseconds longer.
//   MEGABATCH_FAULT_CHECKPOINT_WRITE_MS=MS
//     every checkpoint's temporary file stays MS milliseconds longer before it becomes the
//     checkpoint, so a test can kill rank 0 while it writes one (tests/soak/soak.py).
//   MEGABATCH_FAULT_OOM=RANK:PHASE[:SKIP] lives in common/OutOfMemory.h (a refused allocation
//   at the start of a phase).
// Each variable is read once, on first use. Nothing here is active unless the variable is set.
#include <cstdint>
#include <optional>
#include <set>
#include <string>

namespace mb::dist {

// Called by backends at the start of every collective.
void maybeInjectHang(int rank, const std::string& label);

// Called by the trainer once per micro-batch.
void maybeSlowMicroBatch(int rank);

// MEGABATCH_FAULT_CPU_FLAGS, when set.
std::optional<std::string> fakeCpuFlags();
// MEGABATCH_FAULT_CPU_BF16_RATIO, when set: the probe's ratio, or the trial step's.
std::optional<double> fakeCpuBf16Ratio(bool forTrial);

// The trainer's faults: NaN losses and a stop signal at chosen steps.
struct TrainingFaults {
  std::int64_t nanStep = -1;
  std::int64_t nanCount = 1;
  int nanRank = -1;  // -1: every rank
  std::set<std::int64_t> nanSteps;
  std::int64_t stopStep = -1;
  int dieRank = -1;
  std::int64_t dieStep = -1;

  // The loss of `step` (1-based) on `rank` is to be NaN.
  bool nanLossAt(std::int64_t step, int rank) const;
  // A SIGTERM is to arrive once `step` has finished.
  bool stopAfter(std::int64_t step) const { return step == stopStep; }
  // `rank` is to die once `step` has finished.
  bool dieAfter(std::int64_t step, int rank) const { return step == dieStep && rank == dieRank; }
};
const TrainingFaults& trainingFaults();

// Called once per evaluation batch.
void maybeSlowEvalBatch();

// Called between a checkpoint's temporary file and its rename.
void maybeSlowCheckpointWrite();

}  // namespace mb::dist
