#pragma once
// The steps since the last log line: what the next `train` record averages.
//
// Note [Log windows across a resume]
// A record at step S with run.log_every = L averages the losses of steps S-L+1..S. A run
// stopped inside a window (a preemption at step 167 with L = 25) and resumed would otherwise
// start an empty window, and its step-175 record would average steps 168-175 only: a point no
// uninterrupted run shows, in metrics.jsonl, TensorBoard and the plot. So a checkpoint keeps the
// window's loss sums under /log_window: `steps` (the window's steps so far) and `loss_sums`
// (each rank's float sum, one per rank of the run that wrote it). A resume on the same rank
// count gives each rank its own sum back, and the record equals the uninterrupted run's bit for
// bit (each rank goes on adding to the same float, in the same order); on another rank count
// rank 0 takes their total and the others none (equal to float rounding, like the parameters).
// Only the loss travels: the time a window took, its samples/s and its phases are measured over
// the steps this process ran, since a stop and a restart are not training time. A checkpoint
// without /log_window (written before it existed) starts an empty window, as before.
#include <chrono>
#include <cstdint>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "train/checkpoints/Checkpoint.h"

namespace mb::dist {
class Communicator;
}

namespace mb::train {

struct LogWindow {
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  std::int64_t steps = 0;    // steps this process ran in the window: the time's divisor
  std::int64_t samples = 0;  // their samples
  // Steps before a resume whose losses lossSum already holds (Note [Log windows across a
  // resume]); the loss's divisor is steps + carriedSteps.
  std::int64_t carriedSteps = 0;
  at::Tensor lossSum;  // sum over steps of this rank's normalised loss contribution
  // Wall time of the work between this window's steps: evaluations and checkpoints. It is left
  // out of the step time and samples/s (Note [Step phases]).
  double evalSeconds = 0;
  double checkpointSeconds = 0;

  void add(const at::Tensor& loss, std::int64_t stepSamples);
  std::int64_t lossSteps() const { return steps + carriedSteps; }
  // A new window that keeps the carried losses: when the step loop (re)starts, so the time
  // before it is not counted.
  void startClock() { start = std::chrono::steady_clock::now(); }
};

// Every rank's loss sum of `window`, as a checkpoint stores it under /log_window (collective on
// `control`; empty tensors where the window has no step).
NamedTensors gatherLogWindow(const LogWindow& window, dist::Communicator& control);

// Every rank: the window a checkpoint kept. `stored` is the checkpoint's /log_window on rank 0
// (empty elsewhere, and where the checkpoint has none); `storedWorld` the rank count that wrote
// it. Collective on `control`.
void restoreLogWindow(LogWindow& window, const NamedTensors& stored, std::int64_t storedWorld,
                      dist::Communicator& control, c10::Device device);

}  // namespace mb::train
