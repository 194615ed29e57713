#pragma once
// What the NCCL backend needs from c10's CUDA layer, behind plain functions: NcclCommunicator.cpp
// then compiles with only cuda_runtime.h, nccl.h, and CPU ATen headers (the compile-only check
// on machines whose LibTorch has no CUDA). Defined in CudaStreamsCuda.cpp, CUDA builds only.
struct CUstream_st;  // cudaStream_t is CUstream_st*

namespace at {
class Tensor;
}

namespace mb::dist::cuda {

// The calling thread's current stream on `device` (c10::cuda::getCurrentCUDAStream): the
// stream that CUDAStreamGuard and autograd's per-node stream semantics select.
CUstream_st* currentStream(int device);

// A high-priority stream of c10's pool on `device` (getStreamFromPool): communication kernels
// should not queue behind the next forward's. Pool streams live as long as the process, which
// matters: a tensor recorded on a stream (recordStream) may be freed after its communicator is
// gone, and the caching allocator then records an event on that stream. A stream of our own,
// destroyed with the communicator, made that free jump to a null pointer (H200, 2026-11-28).
CUstream_st* poolStream(int device);

// Tells the caching allocator that `tensor`'s memory is in use on `stream`, so it is not handed
// out again before the work queued there has finished (c10 recordStream).
void recordStream(const at::Tensor& tensor, CUstream_st* stream);

}  // namespace mb::dist::cuda
