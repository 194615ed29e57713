#include "train/precision/CpuAutoPrecision.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <vector>

#include <fmt/format.h>

#include "common/OutOfMemory.h"
#include "config/ConfigSchema.h"
#include "data/Batch.h"
#include "dist/FaultInjection.h"
#include "dist/GradientReducer.h"
#include "model/Model.h"
#include "train/loop/Optimizer.h"
#include "train/memory/MemoryPlan.h"
#include "train/memory/TrialRestorer.h"

namespace mb::train {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kMaxTrialRepeats = 5;

double millisecondsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

double median(std::vector<double> values) {
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2),
                   values.end());
  return values[values.size() / 2];
}

// One forward and backward, as a training micro-batch runs it (Trainer::accumulateGradients).
double trialStepMs(const TrialStep& trial, const data::Batch& batch, DType dtype) {
  const Clock::time_point start = Clock::now();
  trial.reducer.prepareForBackward(false);  // accumulate only: no collective in the trial
  at::Tensor loss;
  {
    AutocastScope autocast(trial.device.type(), dtype);
    at::Tensor output = trial.model.forward(batch);
    loss = trial.model.lossSum(output, batch).to(at::kFloat);
  }
  loss.backward();
  return millisecondsSince(start);
}

std::string ratioText(double ratio) {
  return fmt::format("{:.2f}x", ratio);
}

// What the run's start measured, as the resume repeats it: the trial step where one ran, else
// the probe (a start that decided by the probe alone ran no trial).
std::string startMeasurement(const TrainerState& state) {
  if (state.autoPrecisionTrialRatio > 0)
    return "trial step in bf16: " + ratioText(state.autoPrecisionTrialRatio) + " of fp32's time";
  if (state.autoPrecisionProbeRatio > 0)
    return "the probe's product in bf16: " + ratioText(state.autoPrecisionProbeRatio) +
           " of fp32's time; no trial step ran";
  if (state.autoPrecisionProbeRatio < 0) return "this CPU has no bf16 units";
  return "the checkpoint does not record what it measured";
}

std::string unitsNote(const CpuPrecisionCost& probe) {
  return "this CPU has bf16 units (" + probe.flags + ")";
}

}  // namespace

std::int64_t precisionCode(DType dtype) {
  switch (dtype) {
    case DType::kFp32:
      return 1;
    case DType::kBf16:
      return 2;
    case DType::kFp16:
      return 3;
  }
  return 0;
}

std::optional<DType> precisionFromCode(std::int64_t code) {
  for (DType dtype : {DType::kFp32, DType::kBf16, DType::kFp16})
    if (precisionCode(dtype) == code) return dtype;
  return std::nullopt;
}

std::string cpuModelName() {
  std::ifstream info("/proc/cpuinfo");
  for (std::string line; std::getline(info, line);) {
    if (line.rfind("model name", 0) == 0) {
      std::string name = line.substr(line.find(':') + 1);
      name.erase(0, name.find_first_not_of(' '));
      return name;
    }
  }
  return "";
}

std::int64_t cpuIdentity() {
  // FNV-1a: stable across builds and LibTorch versions, unlike std::hash.
  std::uint64_t hash = 1469598103934665603ULL;
  for (char c : cpuModelName() + "\n" + cpuFlags()) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ULL;
  }
  const auto identity = static_cast<std::int64_t>(hash);
  return identity == 0 ? 1 : identity;
}

CpuTrialTimes timeTrialSteps(const TrialStep& trial,
                             const std::function<data::Batch(std::int64_t)>& batchOf,
                             std::int64_t maxItems) {
  // Names the trial in an out-of-memory message (Note [Out of memory is an expected error]).
  MemoryPhase phase("the trial step of train.precision = auto");
  CpuTrialTimes times;
  const Clock::time_point start = Clock::now();
  auto leaveNoTrace = [&] {
    trial.optimizer.zeroGrad();  // step 1 adds its gradients to zeros, as without a trial
    if (auto* cache = model::capability<model::EpochCache>(trial.model)) cache->forget();
  };
  // One step in each precision at a new size: its first allocations, oneDNN's primitives for
  // its shapes.
  std::vector<double> fp32;
  std::vector<double> bf16;
  auto warmUp = [&](const data::Batch& batch) {
    fp32 = {trialStepMs(trial, batch, DType::kFp32)};
    bf16 = {trialStepMs(trial, batch, DType::kBf16)};
    return fp32[0] + bf16[0];
  };
  try {
    TrialRestorer restorer(trial.model, trial.device);
    trial.model.train();
    // From 1 item, 4x at a time while a pair of steps stays short: a model whose step takes
    // seconds on this CPU is timed on fewer items, within the budget.
    std::int64_t items = 1;
    data::Batch batch = batchOf(items);
    double pairMs = warmUp(batch);
    while (items < maxItems) {
      const std::int64_t next = std::min(maxItems, items * 4);
      const double predictedMs = pairMs * static_cast<double>(next) / static_cast<double>(items);
      if (predictedMs > kLongestTrialPairSeconds * 1000 ||
          millisecondsSince(start) + predictedMs > kTrialBudgetSeconds * 1000 * 0.6)
        break;
      items = next;
      batch = batchOf(items);
      pairMs = warmUp(batch);
    }
    // Pairs until the budget is spent (at most kMaxTrialRepeats). Where the warm-up pair alone
    // spent it (a step of seconds), the warm-up pair is the measurement: its first-call costs
    // are small beside such a step.
    const bool timedWarmUp = millisecondsSince(start) >= kTrialBudgetSeconds * 1000;
    if (!timedWarmUp) {
      fp32.clear();
      bf16.clear();
    }
    while (fp32.empty() || (static_cast<int>(fp32.size()) < kMaxTrialRepeats &&
                            millisecondsSince(start) < kTrialBudgetSeconds * 1000)) {
      // Alternating which goes first, so neither always runs on a warmer cache.
      const bool fp32First = fp32.size() % 2 == 0;
      if (fp32First) fp32.push_back(trialStepMs(trial, batch, DType::kFp32));
      bf16.push_back(trialStepMs(trial, batch, DType::kBf16));
      if (!fp32First) fp32.push_back(trialStepMs(trial, batch, DType::kFp32));
    }
    times.warmUpOnly = timedWarmUp;
    times.repeats = static_cast<int>(fp32.size());
    times.fp32Ms = median(fp32);
    times.bf16Ms = median(bf16);
    if (auto ratio = dist::fakeCpuBf16Ratio(true)) times.bf16Ms = times.fp32Ms * *ratio;  // a test
    times.items = batch.size();
  } catch (...) {
    leaveNoTrace();
    throw;
  }
  leaveNoTrace();
  times.seconds = millisecondsSince(start) / 1000;
  return times;
}

PrecisionChoice decideCpuAuto(const CpuAutoEvidence& evidence) {
  const CpuPrecisionCost& probe = evidence.probe;
  const std::string head = "train.precision = auto: ";
  if (!probe.hasUnits)
    return {DType::kFp32, head + "fp32, this CPU has no bf16 units (" + probe.flags + ")"};
  const std::string units = unitsNote(probe);
  if (probe.slowdown() > kPaysRatio)
    return {DType::kFp32,
            fmt::format("{}fp32: {}, but the probe's product at the model's width took {} of "
                        "fp32's time in bf16 ({:.3f} ms against {:.3f} ms; bf16 must take at most "
                        "{:.2f}x)",
                        head, units, ratioText(probe.slowdown()), probe.reducedMs, probe.fp32Ms,
                        kPaysRatio)};
  if (evidence.trial.fp32Ms <= 0)
    return {DType::kFp32, fmt::format("{}fp32: {} and the probe's product took {} of fp32's time, "
                                      "but no trial step ran ({}), and the probe alone "
                                      "misjudges some models",
                                      head, units, ratioText(probe.slowdown()),
                                      evidence.notTried.empty() ? "none" : evidence.notTried)};
  const CpuTrialTimes& trial = evidence.trial;
  const std::string measured = fmt::format(
      "a trial step of {} took {} of fp32's time in bf16 ({:.1f} ms against {:.1f} ms, "
      "{}; the probe's product {}; {:.2f} s in all)",
      trial.items == 1 ? std::string("1 sample") : fmt::format("{} samples", trial.items),
      ratioText(trial.ratio()), trial.bf16Ms, trial.fp32Ms,
      trial.warmUpOnly ? std::string("its first steps: longer ones are not repeated")
                       : fmt::format("median of {}", trial.repeats),
      ratioText(probe.slowdown()), trial.seconds);
  if (trial.ratio() > kPaysRatio)
    return {DType::kFp32, fmt::format("{}fp32: {}, but {}: bf16 must take at most {:.2f}x "
                                      "(train.precision=bf16 runs it anyway)",
                                      head, units, measured, kPaysRatio)};
  return {DType::kBf16, fmt::format("{}bf16 (CPU autocast, fp32 master weights): {}, and {} "
                                    "(train.precision=fp32 keeps fp32)",
                                    head, units, measured)};
}

PrecisionChoice chooseCpuAuto(TrainerState& state, const CpuAutoInputs& inputs) {
  const std::int64_t identity = cpuIdentity();
  const std::optional<DType> recorded = precisionFromCode(state.trainedPrecision);
  if (recorded && state.autoPrecisionCpu == identity)
    return {*recorded,
            fmt::format("train.precision = auto: {}, as this run chose on this CPU at its start "
                        "({}); kept, so that a resume does not change the run's precision",
                        toString(*recorded), startMeasurement(state))};
  CpuAutoEvidence evidence;
  evidence.probe.hasUnits = cpuHasUnitsFor(DType::kBf16, cpuFlags(), &evidence.probe.flags);
  if (evidence.probe.hasUnits) evidence.probe = measureCpuPrecision(DType::kBf16, inputs.width);
  if (evidence.probe.hasUnits && evidence.probe.slowdown() <= kPaysRatio) {
    if (inputs.trial)
      evidence.trial = inputs.trial();
    else
      evidence.notTried = inputs.notTried;
  }
  PrecisionChoice choice = decideCpuAuto(evidence);
  if (recorded && state.autoPrecisionCpu != 0)
    choice.reason += fmt::format(
        "; the checkpoint's run had chosen {} on another CPU (its model name or flags differ "
        "from this one's: {}), so auto measured again here",
        toString(*recorded), cpuModelName().empty() ? "unknown model" : cpuModelName());
  else if (recorded && *recorded != choice.dtype)
    choice.reason +=
        fmt::format("; the checkpoint's run trained in {} until now", toString(*recorded));
  state.trainedPrecision = precisionCode(choice.dtype);
  state.autoPrecisionCpu = identity;
  state.autoPrecisionTrialRatio = evidence.trial.ratio();
  state.autoPrecisionProbeRatio = evidence.probe.hasUnits ? evidence.probe.slowdown() : -1;
  return choice;
}

std::optional<PrecisionChoice> cpuInferenceInBf16(const TrainerState& trained, Precision configured,
                                                  std::int64_t width, std::string& whyNot) {
  whyNot.clear();
  const std::optional<DType> recorded = precisionFromCode(trained.trainedPrecision);
  const bool inBf16 = recorded ? *recorded == DType::kBf16 : configured == Precision::kBf16;
  if (!inBf16) return std::nullopt;
  if (trained.autoPrecisionCpu == cpuIdentity())
    return PrecisionChoice{
        DType::kBf16,
        fmt::format("bf16, as the checkpoint trained: train.precision = auto chose it on this CPU "
                    "(trial step in bf16: {} of fp32's time); --precision fp32 for fp32",
                    ratioText(trained.autoPrecisionTrialRatio))};
  const CpuPrecisionCost probe = measureCpuPrecision(DType::kBf16, width);
  if (!probe.hasUnits) {
    whyNot = "this CPU has no bf16 units (" + probe.flags + ")";
    return std::nullopt;
  }
  if (probe.slowdown() > kPaysRatio) {
    whyNot = fmt::format("{}, but the probe's product took {} of fp32's time in bf16",
                         unitsNote(probe), ratioText(probe.slowdown()));
    return std::nullopt;
  }
  return PrecisionChoice{
      DType::kBf16, fmt::format("bf16, as the checkpoint trained: {} and the probe's product took "
                                "{} of fp32's time in bf16; --precision fp32 for fp32",
                                unitsNote(probe), ratioText(probe.slowdown()))};
}

}  // namespace mb::train
