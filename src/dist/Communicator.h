#pragma once
// The one interface the trainer talks to for collectives. Backends: MPI (CPU tensors; CUDA
// tensors staged through pinned host memory), NCCL (CUDA tensors, its own stream), and a
// single-process world of one. Gradient bucketing lives in GradientReducer, not here.
//
// Ordering contract (as in c10d and llm.c): every rank issues the same collectives in the
// same order. Asynchronous calls return a Work handle:
//  - MPI / single: wait() blocks the calling thread until the result is in the tensor.
//  - NCCL: the collective is enqueued on the communicator's stream after an event recorded
//    on the caller's current compute stream; wait() makes the current compute stream wait on
//    the collective's completion event. wait() never blocks the host; nothing calls
//    cudaDeviceSynchronize.
// A tensor handed to an asynchronous call must not be touched until wait() returns.
#include <memory>
#include <string>

#include <ATen/core/Tensor.h>

namespace mb::dist {

enum class ReduceOp { kSum, kAvg, kMax, kMin };

const char* toString(ReduceOp op);

class Work {
 public:
  virtual ~Work() = default;
  // See the ordering contract above. Throws if the collective failed.
  virtual void wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backendName() const = 0;

  // In-place all-reduce of a contiguous tensor (fp32, fp64, bf16, fp16, int32, int64, uint8).
  // `label` names the operation for the watchdog and error messages ("grad bucket 3").
  virtual std::shared_ptr<Work> allReduceAsync(at::Tensor tensor, ReduceOp op,
                                               const std::string& label) = 0;
  void allReduce(at::Tensor tensor, ReduceOp op, const std::string& label = "allreduce") {
    allReduceAsync(std::move(tensor), op, label)->wait();
  }
  // In-place broadcast from `root`.
  virtual void broadcast(at::Tensor tensor, int root, const std::string& label = "broadcast") = 0;
  // Returns [size, *tensor.shape]: every rank's tensor (all ranks pass the same shape).
  virtual at::Tensor allGather(const at::Tensor& tensor,
                               const std::string& label = "allgather") = 0;
  virtual void barrier(const std::string& label = "barrier") = 0;

  // Tears down in-flight operations so no rank blocks forever (NCCL: ncclCommAbort). Called by
  // the watchdog before it ends the process; must be safe from any thread.
  virtual void abort() noexcept {}
};

// A finished Work, for backends that complete collectives synchronously.
class CompletedWork : public Work {
 public:
  void wait() override {}
};

}  // namespace mb::dist
