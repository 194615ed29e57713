#pragma once
// How much memory one rank's resident data may use, checked before anything is loaded
// (DESIGN.md "Residency"): data.memory_budget_mb when set, else data.memory_fraction of
//  - the device's memory, for data resident on a CUDA device (ranks sharing a GPU share it);
//  - the host's MemAvailable divided among the node's ranks, for host residency and CPU runs.
#include <cstdint>
#include <optional>
#include <string>

#include <c10/core/Device.h>

#include "config/Config.h"

namespace mb::data {

struct MemoryBudget {
  std::int64_t bytes = 0;
  std::string description;  // "0.75 x 79.2 GiB of cuda:0", "0.75 x 22.1 GiB MemAvailable / 4 ranks
                            // on this node"
};

// `ranksOnDevice`: ranks of this node that share the memory (host) or the device (CUDA).
MemoryBudget memoryBudget(const DataConfig& config, c10::Device storeDevice, int ranksSharing);

// Throws ConfigError (exit 2) when `needed` exceeds the budget, saying what is needed and how
// to fix it. `what` describes the data ("train shard + val + test parts of rank 1").
void checkMemoryBudget(std::int64_t needed, const MemoryBudget& budget, const std::string& what,
                       Residency residency, int worldSize);

// Total memory of CUDA device `index` (CUDA builds; nullopt elsewhere). MemoryBudgetCuda.cpp.
std::optional<std::int64_t> cudaDeviceMemory(int index);
// MemAvailable from /proc/meminfo (nullopt when unknown).
std::optional<std::int64_t> hostAvailableMemory();

}  // namespace mb::data
