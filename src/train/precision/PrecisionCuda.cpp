// CUDA builds only (the CMake glob adds *Cuda.cpp files when CUDA is on).
#include <cuda_runtime.h>

#include "train/precision/Precision.h"

namespace mb::train {

std::optional<CudaDeviceInfo> cudaDeviceInfo(int index) {
  cudaDeviceProp properties{};
  if (cudaGetDeviceProperties(&properties, index) != cudaSuccess) {
    cudaGetLastError();  // clear the error so later calls are unaffected
    return std::nullopt;
  }
  return CudaDeviceInfo{properties.name, properties.major, properties.minor};
}

}  // namespace mb::train
