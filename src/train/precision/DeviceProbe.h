#pragma once
// Note [Device probe]: what a megabatch binary says about CUDA where it runs. A CUDA
// build runs on a machine without a GPU (CI, a container started without the GPUs passed
// through); there it must say why no GPU is usable and how to pass one through, rather than
// LibTorch's bare "no CUDA GPUs are available".
#include <string>

namespace mb::train {

// Whether this binary was built with CUDA (a CPU build has nothing to fall back from, so it does
// not announce the CPU under train.device = auto).
#if defined(MEGABATCH_WITH_CUDA) && MEGABATCH_WITH_CUDA
constexpr bool kCudaBuild = true;
#else
constexpr bool kCudaBuild = false;
#endif

// "" when a CUDA device is usable; else why not, in words (e.g. "the NVIDIA kernel driver is not
// loaded (libcuda.so.1 not found): no GPU visible"). CPU builds: "this megabatch build has no
// CUDA". Probes once per process and caches the answer.
std::string cudaAbsenceReason();

// How to make a GPU visible, for errors that need one.
std::string cudaVisibilityHint();

// ", CUDA 12.4, NCCL 2.22.3" in CUDA builds (the versions compiled against), "" in CPU builds:
// appended to --version.
std::string cudaBuildDescription();

}  // namespace mb::train
