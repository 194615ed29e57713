#pragma once
// What the launcher (mpirun, srun, or nothing) told this process through its environment.
// Plain getenv: no MPI here, so every layer may ask before MPI is initialised.
#include <optional>
#include <string>

namespace mb::env {

std::optional<std::string> get(const char* name);
std::optional<long> getInt(const char* name);

// True when a launcher started this process as one of several (or as an MPI singleton that
// asked for MPI): Open MPI, PMIx, PMI (MPICH/Hydra), or srun.
bool launchedByMpiLauncher();
int launcherRank();       // 0 when not launched by a launcher
int launcherWorldSize();  // 1 when not launched by a launcher
// Rank within the node, from OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, or SLURM_LOCALID.
std::optional<int> launcherLocalRank();

// This host's name (gethostname), as other hosts and the user know it.
std::string hostName();

}  // namespace mb::env
