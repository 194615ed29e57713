// CUDA builds only (the CMake glob routes *Cuda.cpp there): see CudaStreams.h.
#include "dist/CudaStreams.h"

#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDAStream.h>

namespace mb::dist::cuda {

CUstream_st* currentStream(int device) {
  return c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream();
}

CUstream_st* poolStream(int device) {
  return c10::cuda::getStreamFromPool(/*isHighPriority=*/true,
                                      static_cast<c10::DeviceIndex>(device))
      .stream();
}

void recordStream(const at::Tensor& tensor, CUstream_st* stream) {
  // Tensor::record_stream is the stable public form of CUDACachingAllocator::recordStream
  // (LibTorch 1.13 and 2.x); getStreamFromExternal wraps a stream c10 did not create.
  tensor.record_stream(c10::cuda::getStreamFromExternal(stream, tensor.device().index()));
}

}  // namespace mb::dist::cuda
