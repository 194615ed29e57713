// CUDA builds only (the CMake glob adds *Cuda.cpp files when CUDA is on).
#include <cuda_runtime.h>

#include "data/pipeline/MemoryBudget.h"

namespace mb::data {

std::optional<std::int64_t> cudaDeviceMemory(int index) {
  cudaDeviceProp properties{};
  if (cudaGetDeviceProperties(&properties, index) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later calls are unaffected
    return std::nullopt;
  }
  return static_cast<std::int64_t>(properties.totalGlobalMem);
}

}  // namespace mb::data
