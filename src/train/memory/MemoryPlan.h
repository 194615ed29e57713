#pragma once
// Note [Memory plan]
// Before step 1 every rank knows what it will hold:
//   - parameters, gradients (the reducer's bucket buffers: one per parameter byte) and the
//     optimizer's state, counted from their tensors;
//   - the resident data, as the data layer holds it;
//   - the activations of one micro-batch and the workspace around them, measured by a trial
//     forward + backward on the heaviest micro-batch of the run's size: the micro-batch itself
//     and the bytes still held when the forward ends are the activations, and the rest of the
//     peak during backward is workspace.
// On the CPU the trial counts LibTorch's CPU allocations (CpuAllocationScope); on CUDA the
// caching allocator's peak statistics (MemoryPlanCuda.cpp).
// The trial changes nothing: the reducer accumulates without a collective, the gradients are
// zeroed again (step 1 then adds to zeros, as without a trial), and the RNG state and the
// model's buffers are put back. A run with the plan equals one without, bit for bit
// (py.train.memory_plan.*).
// The budget is train.memory_budget_mb when set, else 90% of the device's memory (CUDA) or of
// the host's MemAvailable divided among the node's ranks. The rank that needs the most prints
// the plan; metrics.jsonl records every rank's total.
#include <cstdint>
#include <string>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "data/Batch.h"
#include "train/precision/Precision.h"

namespace mb::model {
class Model;
}
namespace mb::dist {
class GradientReducer;
}

namespace mb::train {

class LossScaler;
class Optimizer;

struct MemoryPlan {
  std::int64_t microBatch = 0;
  std::int64_t parameters = 0;
  std::int64_t gradients = 0;
  std::int64_t optimizer = 0;
  std::int64_t data = 0;
  std::int64_t activations = 0;  // held at the end of the trial's forward
  std::int64_t workspace = 0;    // the rest of the trial's peak
  // Note [Evaluation batch]: the samples of an evaluation's forward pass, and what it takes
  // (measured; -1 when not), beside the fixed part (the training's activations are gone then).
  std::int64_t evalBatch = 0;
  std::int64_t evalBytes = -1;
  std::int64_t budget = 0;   // 0: unknown
  std::string budgetSource;  // "train.memory_budget_mb", "0.9 x 22.1 GiB MemAvailable / 2"
  std::string device;        // "CPU" or "GPU"

  std::int64_t fixedBytes() const;  // parameters, gradients, optimizer state and data
  std::int64_t total() const;
  // One line: "1.20 GiB of a 19.9 GiB budget (parameters ..., activations ... at micro batch 64)".
  std::string describe() const;
};

// What the trial step runs on.
struct TrialStep {
  model::Model& model;
  dist::GradientReducer& reducer;
  Optimizer& optimizer;
  const LossScaler& scaler;
  c10::Device device;
  DType precision;
  // > 0, on the CPU: an allocation past this many live bytes throws AllocationCapExceeded, so a
  // micro-batch that does not fit the budget is stopped there (Note [Automatic micro-batch]).
  std::int64_t capBytes = 0;
};

// Measures one forward + backward of `batch` into plan.activations and plan.workspace, and
// leaves the model, its gradients and the RNG as they were (Note [Memory plan]).
void measureTrialStep(const TrialStep& trial, const data::Batch& batch, MemoryPlan& plan);

// Measures an evaluation's forward pass of `batch` (no autograd, eval mode: forward, loss,
// metrics) into its peak bytes on the device, and leaves the model as it was. On the CPU an
// allocation past `capBytes` (> 0) stops it: AllocationCapExceeded.
std::int64_t measureEvalForward(model::Model& model, const data::Batch& batch, c10::Device device,
                                DType precision, std::int64_t capBytes);

// The per-rank budget (Note [Memory plan]); `ranksOnNode` share the host's memory.
void setMemoryBudget(MemoryPlan& plan, double budgetMb, c10::Device device, int ranksOnNode);

// CUDA: resets the peak statistics of `device`; the bytes allocated now / at peak since. Both
// -1 without CUDA (MemoryPlanCuda.cpp).
void resetDevicePeak(c10::Device device);
std::int64_t deviceAllocatedBytes(c10::Device device);
std::int64_t devicePeakBytes(c10::Device device);
// CUDA: hands the caching allocator's unused blocks back to the driver, after an allocation
// failed (no-op without CUDA).
void releaseCachedDeviceMemory(c10::Device device);

}  // namespace mb::train
