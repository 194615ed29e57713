#pragma once
// Note [Out of memory is an expected error]
// Running out of memory is how most new runs fail, and the person it happens to needs to know
// where, by how much, and what to change, not LibTorch's stack frames. Every phase of
// a run that allocates in earnest runs inside a MemoryPhase: building the model, loading the
// data, the memory plan's trial step, each training step, evaluation, assembling a checkpoint,
// predict, export and sample. An allocator's failure that leaves a phase:
//   - c10::OutOfMemoryError (CUDA's caching allocator),
//   - the CPU allocator's "DefaultCPUAllocator: can't allocate memory" (a c10::Error),
//   - std::bad_alloc,
//   - a CpuAllocationScope cap (AllocationCapExceeded),
// is turned where errors are reported (dist::agreed, the command's handler) into an mb::Error
// that names the phase, the rank, the bytes asked for and the memory plan when there is one,
// and lists the remedies in the order seed 001's troubleshooting gives them, in megabatch's
// keys. Its exit code is 1 ("anything else" in DESIGN.md): a job script must not requeue it
// unchanged, as it would a preemption (75), and needs nothing finer to know that.
//
// MEGABATCH_FAULT_OOM=RANK:PHASE[:SKIP[:cuda]] (tests): on rank RANK (* = every rank), the
// (SKIP+1)-th phase whose name contains PHASE starts with a real allocation the CPU allocator
// refuses (with :cuda, CUDA's caching allocator: a real cudaMalloc failure). Inner
// phases: each micro-batch's forward ("running the forward of micro-batch 2/4 in step 3") and
// each gradient bucket's launch ("sending grad bucket 2/5", inside the backward).
#include <cstdint>
#include <exception>
#include <optional>
#include <string>

#include "common/Error.h"

namespace mb {

// What an allocator's failure said.
struct OutOfMemory {
  std::string device;                // "CPU" or "GPU"
  std::int64_t requestedBytes = -1;  // -1: the failure did not say
};

// The out-of-memory failure `e` is, if it is one.
std::optional<OutOfMemory> asOutOfMemory(const std::exception& e);

// Names what the run is doing while it lives. An exception that leaves it records the innermost
// phase it left, for the message (failedPhase()).
class MemoryPhase {
 public:
  explicit MemoryPhase(std::string name);
  ~MemoryPhase();
  MemoryPhase(const MemoryPhase&) = delete;
  MemoryPhase& operator=(const MemoryPhase&) = delete;

 private:
  std::string name_;
  int exceptionsAtStart_;
};

// The phase the last exception left on this thread ("training step 12"), once; "" if none.
std::string takeFailedPhase();

// One line on the memory plan (train/memory/MemoryPlan), quoted by the message; "" clears it.
void setMemoryPlanSummary(const std::string& summary);

// The error that replaces an out-of-memory failure on `rank` (exit 1), with its remedies.
Error outOfMemoryError(const OutOfMemory& oom, int rank, const std::string& phase);

// outOfMemoryError for `e` when it is an out-of-memory failure, on this process's rank and in
// the phase it left; nullopt otherwise.
std::optional<Error> explainOutOfMemory(const std::exception& e);

}  // namespace mb
