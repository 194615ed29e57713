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
//     LibTorch's bf16 products do on such a CPU (train/CpuPrecision.h).
// Nothing here is active unless the variable is set.
#include <optional>
#include <string>

namespace mb::dist {

// Called by backends at the start of every collective.
void maybeInjectHang(int rank, const std::string& label);

// Called by the trainer once per micro-batch.
void maybeSlowMicroBatch(int rank);

// MEGABATCH_FAULT_CPU_FLAGS, when set.
std::optional<std::string> fakeCpuFlags();

}  // namespace mb::dist
