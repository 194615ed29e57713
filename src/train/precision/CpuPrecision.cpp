#include "train/precision/CpuPrecision.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <sstream>
#include <vector>

#include <ATen/Context.h>
#include <ATen/Functions.h>
#include <c10/core/GradMode.h>
#include <fmt/format.h>

#include "config/ConfigSchema.h"
#include "dist/FaultInjection.h"
#include "train/precision/Precision.h"

namespace mb::train {
namespace {

// Rows of the probe's product: an LSTM step's batch, or a few transformer tokens.
constexpr std::int64_t kProbeRows = 256;
// Each precision is timed for at least this long (after one warm-up call), then the median of
// its calls is taken.
constexpr double kProbeSeconds = 0.05;
constexpr int kMaxCalls = 200;

std::vector<std::string> unitFlags(DType dtype) {
  if (dtype == DType::kFp16) return {"avx512_fp16", "amx_fp16"};
  return {"avx512_bf16", "amx_bf16"};
}

double medianCallMs(const std::function<void()>& call) {
  using Clock = std::chrono::steady_clock;
  call();  // warm-up: first-call allocations, oneDNN primitive creation
  std::vector<double> times;
  const Clock::time_point start = Clock::now();
  while (static_cast<int>(times.size()) < kMaxCalls &&
         (times.size() < 3 ||
          std::chrono::duration<double>(Clock::now() - start).count() < kProbeSeconds)) {
    const Clock::time_point before = Clock::now();
    call();
    times.push_back(std::chrono::duration<double, std::milli>(Clock::now() - before).count());
  }
  std::nth_element(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2),
                   times.end());
  return times[times.size() / 2];
}

}  // namespace

std::string cpuFlags() {
  if (auto fake = dist::fakeCpuFlags()) return *fake;
  std::ifstream info("/proc/cpuinfo");
  for (std::string line; std::getline(info, line);) {
    if (line.rfind("flags", 0) == 0) return line.substr(line.find(':') + 1);
  }
  return "";
}

bool cpuHasUnitsFor(DType dtype, const std::string& flags, std::string* found) {
  std::istringstream words(flags);
  std::vector<std::string> present;
  for (std::string word; words >> word;)
    present.push_back(word);
  std::string named;
  for (const std::string& flag : unitFlags(dtype)) {
    if (std::find(present.begin(), present.end(), flag) != present.end())
      named += (named.empty() ? "" : ", ") + flag;
  }
  const std::vector<std::string> wanted = unitFlags(dtype);
  if (found)
    *found = named.empty() ? "no " + wanted[0] + " or " + wanted[1] + " among its flags" : named;
  return !named.empty();
}

CpuPrecisionCost measureCpuPrecision(DType dtype, std::int64_t width) {
  CpuPrecisionCost cost;
  cost.hasUnits = cpuHasUnitsFor(dtype, cpuFlags(), &cost.flags);
  width = std::max<std::int64_t>(width, 16);
  at::NoGradGuard noGrad;
  // Not random: the probe must not draw from the generator that initialises the model.
  const at::Tensor input = at::linspace(-1, 1, kProbeRows * width).reshape({kProbeRows, width});
  const at::Tensor weight = at::linspace(1, -1, 4 * width * width).reshape({4 * width, width});
  cost.fp32Ms = medianCallMs([&] { at::linear(input, weight); });
  // Faked flags without units (a test): LibTorch would not send the product to oneDNN on such
  // a CPU, so neither does the probe.
  const bool emulate =
      dist::fakeCpuFlags().has_value() && !cost.hasUnits && at::globalContext().userEnabledMkldnn();
  if (emulate) at::globalContext().setUserEnabledMkldnn(false);
  cost.reducedMs = medianCallMs([&] {
    AutocastScope autocast(c10::DeviceType::CPU, dtype);
    at::linear(input, weight);
  });
  if (emulate) at::globalContext().setUserEnabledMkldnn(true);
  if (auto ratio = dist::fakeCpuBf16Ratio(false)) cost.reducedMs = cost.fp32Ms * *ratio;  // a test
  return cost;
}

std::string cpuPrecisionWarning(DType dtype, const CpuPrecisionCost& cost) {
  const double slowdown = cost.slowdown();
  if (cost.hasUnits && slowdown < kSlowerRatio) return "";
  const std::string name = toString(dtype);
  const std::string why =
      cost.hasUnits ? fmt::format(
                          "although it has {} units ({}), the casts around each product cost more "
                          "than they save at this width",
                          name, cost.flags)
                    : fmt::format("this CPU has no {} units ({}), so LibTorch emulates {}", name,
                                  cost.flags, name);
  const std::string headline =
      slowdown >= 1
          ? fmt::format("matrix products run about {:.1f}x slower than in fp32 on this CPU",
                        slowdown)
          : std::string("is emulated on this CPU");
  return fmt::format(
      "train.precision = {}: {} (measured: a {}-row product at the model's width, {:.3f} ms in "
      "fp32 against {:.3f} ms in {}): {}. Use train.precision=fp32 here, or "
      "train.precision=auto (fp32 on this CPU, as it measures; bf16 or fp16 on a GPU that has it), "
      "so one config "
      "serves both",
      name, headline, kProbeRows, cost.fp32Ms, cost.reducedMs, name, why);
}

}  // namespace mb::train
