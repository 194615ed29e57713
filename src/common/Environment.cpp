#include "common/Environment.h"

#include <unistd.h>

#include <cstdlib>

namespace mb::env {

std::optional<std::string> get(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

std::optional<long> getInt(const char* name) {
  auto text = get(name);
  if (!text) return std::nullopt;
  char* end = nullptr;
  long value = std::strtol(text->c_str(), &end, 10);
  if (end == text->c_str() || *end != '\0') return std::nullopt;
  return value;
}

static std::optional<long> firstInt(std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (auto value = getInt(name)) return value;
  }
  return std::nullopt;
}

bool launchedByMpiLauncher() {
  // SLURM_STEP_ID alone is not enough (an sbatch script itself has no step); srun sets
  // SLURM_STEPID and SLURM_PROCID for each task it starts.
  return get("OMPI_COMM_WORLD_SIZE") || get("PMIX_RANK") || get("PMI_RANK") || get("PMI_SIZE") ||
         (get("SLURM_STEPID") && get("SLURM_PROCID") && get("SLURM_NTASKS"));
}

int launcherRank() {
  return static_cast<int>(
      firstInt({"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}).value_or(0));
}

int launcherWorldSize() {
  return static_cast<int>(
      firstInt({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"}).value_or(1));
}

std::optional<int> launcherLocalRank() {
  auto value = firstInt({"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"});
  if (!value) return std::nullopt;
  return static_cast<int>(*value);
}

std::string hostName() {
  char name[256] = {0};
  gethostname(name, sizeof(name) - 1);
  return name;
}

}  // namespace mb::env
