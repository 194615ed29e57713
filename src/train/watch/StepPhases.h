#pragma once
// Where a training step's time goes, for the log lines and metrics.jsonl.
//
// Note [Step phases]
// A step is split into four phases, marked by the trainer as they end:
//   data              gathering the micro-batches (ShardedData::trainBatch)
//   forward_backward  the forward passes, losses and backward passes
//   communication     waiting for the other ranks: the last gradient buckets' all-reduce after
//                     backward (the exposed part; buckets that finished during backward cost
//                     nothing here), the step vote, and a log line's metrics all-reduce. A link
//                     that stalls shows here whichever of them it stalls.
//   optimizer         the gradient norm, clipping, the update and zeroing the gradients
// On the CPU a phase is the host time between its marks. On CUDA the host only queues work,
// so host clocks would time the queueing: there each mark records a CUDA event on the compute
// stream, and the phases are the device time between consecutive events, read when the log
// line collects them (which waits for the last event; nothing waits in the step itself).
// The log line's step time is the wall time of its window less the evaluations and checkpoints
// run between its steps (reported beside it, as Lightning and torchtitan leave validation out
// of throughput); what the four phases leave of it is `other` (the carried states, logging),
// so the parts of a line add up to its step time.
#include <memory>

#include <c10/core/Device.h>

namespace mb::train {

enum class Phase { kData = 0, kForwardBackward = 1, kCommunication = 2, kOptimizer = 3 };

struct PhaseSeconds {
  double data = 0;
  double forwardBackward = 0;
  double communication = 0;
  double optimizer = 0;
  double total() const { return data + forwardBackward + communication + optimizer; }
};

class PhaseClock {
 public:
  virtual ~PhaseClock() = default;
  // A step begins: the next mark's phase starts now.
  virtual void start() = 0;
  // `phase` ends now (and the next one begins).
  virtual void mark(Phase phase) = 0;
  // The time of each phase since the previous collect().
  virtual PhaseSeconds collect() = 0;

  // Host clocks on the CPU, CUDA events on a CUDA device (CUDA builds).
  static std::unique_ptr<PhaseClock> create(c10::Device device);
};

// CUDA events on `device`'s current stream; StepPhasesCuda.cpp (CUDA builds only).
std::unique_ptr<PhaseClock> makeCudaPhaseClock(int device);

}  // namespace mb::train
