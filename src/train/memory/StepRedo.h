#pragma once
// Note [A step that runs out of memory is redone]
// Under train.micro_batch: auto, a training step that runs out of memory on some rank (a graph
// batch heavier than the trial's, memory something else took since) is run again, not lost:
//   - The rank that ran out catches the failure, in the forward, in the backward, or in a
//     gradient bucket's launch inside the backward, and leaves its micro-batch loop. Its
//     finishGradients() then launches every bucket it has not sent, so the ranks waiting in
//     those all-reduces get them (the sums are discarded) and no rank is left waiting.
//   - The all-reduce on the control communicator after the gradients (voteAfterGradients in
//     Signals.h, which also carries stop requests) tells every rank whether a rank ran out,
//     and which.
//   - If one did, every rank zeroes the gradients, puts back the RNG state of the step's start,
//     empties CUDA's cache, halves the micro-batch, and runs the same global batch again: the
//     optimizer steps once for it, and the data position does not move. The log and
//     metrics.jsonl (event "oom_redo") say so. A redo that runs out too halves again.
//   - At micro-batch 1 there is nothing to halve: an out of memory ends the run as without auto
//     (Note [Out of memory is an expected error]), as does one outside the training step.
// Without auto an out of memory ends the run.
// Not put back: model buffers that a failed forward moved (BatchNorm statistics of a
// TorchScript model) and the counters of a model's caches.
#include <cstdint>
#include <optional>

#include <c10/core/Device.h>

#include "common/RngState.h"
#include "train/memory/MemoryPlan.h"

namespace mb::train {

class StepRedo {
 public:
  // Takes the RNG state of the step's start when `enabled` (train.micro_batch: auto).
  StepRedo(bool enabled, c10::Device device);

  // Whether an out of memory at this micro-batch size is caught for a redo.
  bool catches(std::int64_t microBatch) const { return enabled_ && microBatch > 1; }
  // Before the step runs again: the RNG state of its start back, CUDA's cache emptied.
  void rewind() const;

 private:
  bool enabled_;
  c10::Device device_;
  std::optional<RngSnapshot> rng_;
};

}  // namespace mb::train
