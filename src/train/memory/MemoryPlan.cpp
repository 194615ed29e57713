#include "train/memory/MemoryPlan.h"

#include <limits>
#include <memory>
#include <vector>

#include <c10/core/GradMode.h>

#include "common/CpuAllocationScope.h"
#include "common/OutOfMemory.h"
#include "common/Strings.h"
#include "data/pipeline/MemoryBudget.h"
#include "dist/GradientReducer.h"
#include "model/Model.h"
#include "train/loop/Optimizer.h"
#include "train/memory/TrialRestorer.h"
#include "train/precision/LossScaler.h"

namespace mb::train {
namespace {

std::string planBytes(std::int64_t bytes) {
  return str::humanBytes(static_cast<double>(bytes));
}

// The micro-batch itself: a step holds it while it runs.
std::int64_t batchBytes(const data::Batch& batch) {
  auto bytes = [](const at::Tensor& t) {
    return t.defined() ? t.numel() * static_cast<std::int64_t>(t.element_size()) : 0;
  };
  std::int64_t total = 0;
  for (const auto& input : batch.inputs)
    total += bytes(input);
  for (const at::Tensor* t :
       {&batch.targets, &batch.sampleIndex, &batch.lanes, &batch.nodeFeatures, &batch.nodeTypes,
        &batch.edgeIndex, &batch.edgeFeatures, &batch.nodeGraph})
    total += bytes(*t);
  return total;
}

// Counts the bytes the trial allocates on its device: the CPU allocator's (CpuAllocationScope)
// or CUDA's caching allocator's.
class TrialCounter {
 public:
  TrialCounter(c10::Device device, std::int64_t capBytes) : device_(device) {
    if (device_.is_cuda()) {
      resetDevicePeak(device_);
      start_ = deviceAllocatedBytes(device_);
    } else {
      scope_ = std::make_unique<CpuAllocationScope>(capBytes);
    }
  }
  std::int64_t live() const {
    return scope_ ? scope_->liveBytes() : deviceAllocatedBytes(device_) - start_;
  }
  std::int64_t peak() const {
    return scope_ ? scope_->peakBytes() : devicePeakBytes(device_) - start_;
  }

 private:
  c10::Device device_;
  std::int64_t start_ = 0;
  std::unique_ptr<CpuAllocationScope> scope_;
};

}  // namespace

#if !MEGABATCH_WITH_CUDA
void resetDevicePeak(c10::Device) {}
std::int64_t deviceAllocatedBytes(c10::Device) {
  return -1;
}
std::int64_t devicePeakBytes(c10::Device) {
  return -1;
}
void releaseCachedDeviceMemory(c10::Device) {}
#endif

std::int64_t MemoryPlan::fixedBytes() const {
  return parameters + gradients + optimizer + data;
}

std::int64_t MemoryPlan::total() const {
  return fixedBytes() + activations + workspace;
}

std::string MemoryPlan::describe() const {
  std::string text = planBytes(total()) + " of " + device + " memory";
  if (budget > 0) text += " of a " + planBytes(budget) + " budget (" + budgetSource + ")";
  text += ": parameters " + planBytes(parameters) + ", gradients " + planBytes(gradients) +
          ", optimizer state " + planBytes(optimizer) + ", resident data " + planBytes(data) +
          ", activations " + planBytes(activations) + " and workspace " + planBytes(workspace) +
          " at micro batch " + std::to_string(microBatch);
  if (evalBatch > 0)
    text += "; evaluation " +
            (evalBytes >= 0 ? planBytes(evalBytes) + " at batch " : std::string("batch ")) +
            std::to_string(evalBatch);
  return text;
}

void measureTrialStep(const TrialStep& trial, const data::Batch& batch, MemoryPlan& plan) {
  MemoryPhase phase("the memory plan's trial step");  // Note [Out of memory is an expected error]
  // Also when the trial runs out of memory (train.micro_batch: auto tries a smaller one next).
  auto leaveNoTrace = [&] {
    trial.optimizer.zeroGrad();  // step 1 adds its gradients to zeros, as without a trial
    if (auto* cache = model::capability<model::EpochCache>(trial.model)) cache->forget();
  };
  try {
    TrialRestorer restorer(trial.model, trial.device);
    trial.model.train();
    trial.reducer.prepareForBackward(false);  // accumulate only: no collective in the trial
    TrialCounter counter(trial.device, trial.capBytes);
    at::Tensor loss;
    {
      AutocastScope autocast(trial.device.type(), trial.precision);
      at::Tensor output = trial.model.forward(batch);
      loss = trial.model.lossSum(output, batch).to(at::kFloat);
    }
    plan.activations = counter.live() + batchBytes(batch);  // the batch was gathered before
    trial.scaler.scaleLoss(loss).backward();
    loss = at::Tensor();
    plan.workspace = std::max<std::int64_t>(0, counter.peak() - plan.activations);
  } catch (...) {
    leaveNoTrace();
    throw;
  }
  leaveNoTrace();
}

std::int64_t measureEvalForward(model::Model& model, const data::Batch& batch, c10::Device device,
                                DType precision, std::int64_t capBytes) {
  MemoryPhase phase("the memory plan's evaluation trial");
  // As after a trial step: what the model cached for these items is not the run's.
  auto forget = [&] {
    if (auto* cache = model::capability<model::EpochCache>(model)) cache->forget();
  };
  std::int64_t peak = 0;
  try {
    TrialRestorer restorer(model, device);
    model.eval();
    at::NoGradGuard noGrad;
    TrialCounter counter(device, capBytes);
    {
      AutocastScope autocast(device.type(), precision);
      at::Tensor output = model.forward(batch);
      at::Tensor loss = model.lossSum(output, batch);
      model::NamedTensors metrics = model.metricSums(output, batch);
      if (auto* rows = model::capability<model::SplitMetrics>(model))
        rows->splitRows(output, batch);
    }
    peak = counter.peak();
  } catch (...) {
    forget();
    throw;
  }
  forget();
  return peak + batchBytes(batch);  // the batch was gathered before
}

void setMemoryBudget(MemoryPlan& plan, double budgetMb, c10::Device device, int ranksOnNode) {
  if (budgetMb > 0) {
    plan.budget = static_cast<std::int64_t>(budgetMb * 1024 * 1024);
    plan.budgetSource = "train.memory_budget_mb";
    return;
  }
  DataConfig fraction;
  fraction.memoryFraction = 0.9;
  const data::MemoryBudget budget = data::memoryBudget(fraction, device, ranksOnNode);
  if (budget.bytes == std::numeric_limits<std::int64_t>::max()) return;  // unknown: no budget
  plan.budget = budget.bytes;
  // On the host, MemAvailable was read after this rank loaded its data and built its model:
  // what it already holds is part of its budget.
  if (!device.is_cuda()) plan.budget += plan.parameters + plan.optimizer + plan.data;
  plan.budgetSource = budget.description.substr(budget.description.find(' ') + 1);
}

}  // namespace mb::train
