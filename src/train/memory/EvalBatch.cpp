#include "train/memory/EvalBatch.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "common/CpuAllocationScope.h"
#include "common/HostAllocator.h"
#include "common/OutOfMemory.h"
#include "common/Strings.h"
#include "model/Model.h"
#include "train/memory/MemoryPlan.h"
#include "train/memory/MicroBatchSearch.h"

namespace mb::train {

std::int64_t evalBatchLimit(std::int64_t trainMicroBatch, const c10::Device& device) {
  if (device.is_cuda()) return std::max<std::int64_t>(trainMicroBatch, 1);
  return std::max(trainMicroBatch, kCpuEvalBatch);
}

namespace {

// The trial's size: small enough to be cheap (GPT-2 at 1024 tokens: seconds), large enough
// that the bound from it is not all fixed-size buffers (a GPT's chunk of logits).
constexpr std::int64_t kTrialSize = 4;

// One trial: the evaluation's peak at `size` samples, or -1 when it passed the cap or ran out.
std::int64_t measureSize(const EvalBatchTrial& trial, std::int64_t size, std::int64_t capBytes) {
  const std::int64_t items = std::min(size, std::max<std::int64_t>(trial.items, 1));
  try {
    const std::int64_t peak = measureEvalForward(trial.model, trial.heaviest(items), trial.device,
                                                 trial.precision, capBytes);
    return peak * size / items;  // fewer items than the size: taken as proportional
  } catch (const AllocationCapExceeded&) {
    takeFailedPhase();  // expected here: the batch is then 1
    return -1;
  } catch (const std::exception& e) {
    if (!asOutOfMemory(e)) throw;
    takeFailedPhase();
    releaseCachedDeviceMemory(trial.device);
    return -1;
  }
}

}  // namespace

std::int64_t grownEvalBatch(std::int64_t batch, std::int64_t peakBytes, std::int64_t roomBytes,
                            std::int64_t limit) {
  if (peakBytes <= 0 || roomBytes <= 0 || batch >= limit) return std::min(batch, limit);
  const double fits = static_cast<double>(roomBytes) / (1.0 + kActivationMargin);
  const auto bound = static_cast<std::int64_t>(
      std::floor(static_cast<double>(batch) * fits / static_cast<double>(peakBytes)));
  return std::clamp<std::int64_t>(bound, batch, limit);
}

EvalBatchChoice chooseEvalBatch(const EvalBatchTrial& trial, std::int64_t limit) {
  EvalBatchChoice chosen;
  limit = std::max<std::int64_t>(1, trial.items > 0 ? std::min(limit, trial.items) : limit);
  chosen.roomBytes = std::max<std::int64_t>(trial.budget - trial.fixedBytes, 1);
  const double fits = static_cast<double>(chosen.roomBytes) / (1.0 + kActivationMargin);
  chosen.batch = 1;
  // The trial's size, halved until it fits; the batch is then the bound it gives.
  for (std::int64_t size = std::min(limit, kTrialSize); size >= 1; size /= 2) {
    const std::int64_t bytes =
        measureSize(trial, size, trial.device.is_cuda() ? 0 : chosen.roomBytes);
    chosen.trials += fmt::format(
        "{}{}: {}", chosen.trials.empty() ? "" : ", ", size,
        bytes < 0 ? std::string("over the budget") : str::humanBytes(static_cast<double>(bytes)));
    if (bytes < 0 || static_cast<double>(bytes) > fits) continue;
    chosen.batch = grownEvalBatch(size, bytes, chosen.roomBytes, limit);
    chosen.bytes = static_cast<std::int64_t>(
        static_cast<double>(bytes) * static_cast<double>(chosen.batch) / static_cast<double>(size));
    break;
  }
  return chosen;
}

bool returnsFreedHostMemory(std::int64_t roomBytes, const c10::Device& device) {
  return roomBytes > 0 && !device.is_cuda() &&
         static_cast<double>(kKeptHostHeapBytes) >
             kActivationMargin * static_cast<double>(roomBytes);
}

std::int64_t modelBytes(model::Model& model) {
  std::int64_t bytes = 0;
  for (const auto& t : model.parameters())
    bytes += t.numel() * static_cast<std::int64_t>(t.element_size());
  for (const auto& t : model.buffers())
    bytes += t.numel() * static_cast<std::int64_t>(t.element_size());
  return bytes;
}

std::int64_t commandMemoryBudget(double budgetMb, const c10::Device& device, int ranksOnNode,
                                 std::int64_t heldBytes, std::string& source) {
  MemoryPlan plan;
  plan.parameters = heldBytes;  // on the host, counted into the budget (Note [Memory plan])
  setMemoryBudget(plan, budgetMb, device, ranksOnNode);
  source = budgetMb > 0 ? "--memory-budget-mb" : plan.budgetSource;
  return plan.budget;
}

CommandBatch commandEvalBatch(EvalBatchTrial trial, std::int64_t limit, std::int64_t givenBatch,
                              double budgetMb, int ranksOnNode) {
  std::string source;
  trial.budget = commandMemoryBudget(budgetMb, trial.device, ranksOnNode, trial.fixedBytes, source);
  CommandBatch chosen;
  const std::string budget =
      trial.budget > 0 ? fmt::format("a {} budget ({}) with {} held",
                                     str::humanBytes(static_cast<double>(trial.budget)), source,
                                     str::humanBytes(static_cast<double>(trial.fixedBytes)))
                       : std::string("no memory budget known");
  if (trial.budget > 0)
    chosen.roomBytes = std::max<std::int64_t>(1, trial.budget - trial.fixedBytes);
  if (givenBatch > 0) {
    chosen.batch = givenBatch;
    chosen.line = fmt::format("batch {} (--batch), within {}", givenBatch, budget);
    return chosen;
  }
  if (trial.budget <= 0) {
    chosen.batch = std::max<std::int64_t>(1, limit);
    chosen.line = fmt::format("batch {}: {}", chosen.batch, budget);
    return chosen;
  }
  const EvalBatchChoice choice = chooseEvalBatch(trial, limit);
  chosen.batch = choice.batch;
  chosen.line = fmt::format(
      "batch {} of at most {} (at most {} by the trial: {}), growing while it fits {}",
      choice.batch, limit,
      choice.bytes < 0 ? std::string("?") : str::humanBytes(static_cast<double>(choice.bytes)),
      choice.trials, budget);
  return chosen;
}

}  // namespace mb::train
