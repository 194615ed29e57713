// CUDA builds only (the CMake glob adds *Cuda.cpp files when CUDA is on): Note [Device probe].
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

#include <string>

#include "train/precision/DeviceProbe.h"

namespace mb::train {
namespace {

std::string probe() {
  // The CUDA runtime reports a missing driver as "CUDA driver version is insufficient", which
  // misleads on a machine (or container) that has no driver at all: look for it first.
  if (void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) {
    dlclose(driver);
  } else {
    return "the NVIDIA kernel driver is not loaded here (libcuda.so.1 not found): no GPU visible";
  }
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error for LibTorch
    return std::string("no GPU visible: the CUDA runtime says ") + cudaGetErrorString(status);
  }
  if (count < 1) return "no GPU visible: the CUDA runtime finds 0 devices (CUDA_VISIBLE_DEVICES?)";
  return "";
}

}  // namespace

std::string cudaAbsenceReason() {
  static const std::string reason = probe();
  return reason;
}

std::string cudaBuildDescription() {
  return ", CUDA " + std::to_string(CUDART_VERSION / 1000) + "." +
         std::to_string(CUDART_VERSION % 1000 / 10) + ", NCCL " + std::to_string(NCCL_MAJOR) + "." +
         std::to_string(NCCL_MINOR) + "." + std::to_string(NCCL_PATCH);
}

}  // namespace mb::train
