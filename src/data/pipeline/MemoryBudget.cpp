#include "data/pipeline/MemoryBudget.h"

#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>

#include "common/Error.h"
#include "common/Strings.h"

namespace mb::data {

std::optional<std::int64_t> hostAvailableMemory() {
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    if (!str::startsWith(line, "MemAvailable:")) continue;
    std::istringstream fields(line.substr(13));
    std::int64_t kib = 0;
    if (fields >> kib) return kib * 1024;
  }
  return std::nullopt;
}

#if !MEGABATCH_WITH_CUDA
std::optional<std::int64_t> cudaDeviceMemory(int) {
  return std::nullopt;
}
#endif

MemoryBudget memoryBudget(const DataConfig& config, c10::Device storeDevice, int ranksSharing) {
  MemoryBudget budget;
  ranksSharing = std::max(1, ranksSharing);
  if (config.memoryBudgetMb > 0) {
    budget.bytes = static_cast<std::int64_t>(config.memoryBudgetMb * 1024 * 1024);
    budget.description =
        "data.memory_budget_mb = " + str::humanBytes(static_cast<double>(budget.bytes));
    return budget;
  }
  char fraction[32];
  std::snprintf(fraction, sizeof(fraction), "%g", config.memoryFraction);
  if (storeDevice.is_cuda()) {
    auto total = cudaDeviceMemory(storeDevice.has_index() ? storeDevice.index() : 0);
    if (total) {
      budget.bytes = static_cast<std::int64_t>(config.memoryFraction * static_cast<double>(*total) /
                                               ranksSharing);
      budget.description =
          "data.memory_fraction " + std::string(fraction) + " x " +
          str::humanBytes(static_cast<double>(*total)) + " of " + storeDevice.str() +
          (ranksSharing > 1 ? " / " + std::to_string(ranksSharing) + " ranks sharing it" : "");
      return budget;
    }
  }
  auto available = hostAvailableMemory();
  if (!available) {
    budget.bytes = std::numeric_limits<std::int64_t>::max();
    budget.description = "unknown host memory (no /proc/meminfo): not checked";
    return budget;
  }
  budget.bytes = static_cast<std::int64_t>(config.memoryFraction * static_cast<double>(*available) /
                                           ranksSharing);
  budget.description =
      "data.memory_fraction " + std::string(fraction) + " x " +
      str::humanBytes(static_cast<double>(*available)) + " MemAvailable" +
      (ranksSharing > 1 ? " / " + std::to_string(ranksSharing) + " ranks on this node" : "");
  return budget;
}

void checkMemoryBudget(std::int64_t needed, const MemoryBudget& budget, const std::string& what,
                       Residency residency, int worldSize) {
  if (needed <= budget.bytes) return;
  std::string hint =
      residency == Residency::kStream
          ? "use a smaller data.stream_chunk_items, more ranks, or raise data.memory_fraction"
          : "use data.residency=stream (reads the shard in chunks), more ranks (now " +
                std::to_string(worldSize) +
                "; each holds 1/W of train), or raise data.memory_fraction";
  throw ConfigError("the resident data does not fit: " + what + " needs " +
                        str::humanBytes(static_cast<double>(needed)) + ", the budget is " +
                        str::humanBytes(static_cast<double>(budget.bytes)) + " (" +
                        budget.description + ")",
                    hint);
}

}  // namespace mb::data
