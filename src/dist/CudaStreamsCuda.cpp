// CUDA builds only (the CMake glob routes *Cuda.cpp there): see CudaStreams.h.
#include "dist/CudaStreams.h"

#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>

namespace mb::dist::cuda {

CUstream_st* currentStream(int device) {
  return c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream();
}

void recordStream(const at::Tensor& tensor, CUstream_st* stream) {
  auto wrapped = c10::cuda::getStreamFromExternal(stream, tensor.device().index());
  c10::cuda::CUDACachingAllocator::recordStream(tensor.storage().data_ptr(), wrapped);
}

}  // namespace mb::dist::cuda
