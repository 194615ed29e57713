#pragma once
// DDP-style gradient reduction for LibTorch C++ (which has no DistributedDataParallel).
//
// Usage, per optimizer step:
//   reducer.prepareForBackward(lastMicroStep);   // before each micro-step's backward
//   loss.backward();                             // hooks launch bucket all-reduces as
//                                                // gradients become ready (overlap)
//   ...more micro-steps...
//   reducer.finishGradients();                   // wait for every bucket; grads now equal
//   optimizer.step();
//
// Contract:
//  - Parameters go into buckets in reverse registration order (the order backward produces
//    gradients), capped at bucketMb, the first bucket capped at firstBucketMb so the first
//    all-reduce starts early (see PyTorch c10d reducer.cpp).
//  - A bucket's all-reduce (SUM) is launched from the gradient-accumulator post-hooks as soon
//    as its last gradient is accumulated on the last micro-step, while backward still runs.
//    Earlier micro-steps only accumulate locally (no_sync).
//  - finishGradients() launches any bucket whose gradients never arrived (unused parameters,
//    or a rank with no samples in this step: it contributes zeros), waits for all buckets,
//    and writes the summed gradients back. The loss is already divided by the global sample
//    count, so the sum is the exact global-batch mean, also with unequal per-rank counts.
//  - Optional compressed transport (dist.grad_dtype = bf16 or fp16): buckets travel in that
//    dtype; gradients are accumulated and stored in the parameters' dtype (fp32 for an fp32
//    model). A bucket whose parameters already have the transport dtype is sent as is.
//  - Gradients live in one flat buffer per bucket: after the first prepareForBackward or
//    finishGradients, every parameter's .grad is a view into it (PyTorch DDP's
//    gradient_as_bucket_view). Optimizer::zero_grad() works on them (in place in LibTorch
//    1.13; set_to_none in 2.x is repaired at the next prepareForBackward). After
//    finishGradients() every reduced parameter has a defined .grad (zeros where no rank
//    produced one). Construct the reducer after the model is on its device.
//  - Ordering: the bucket all-reduces go over `comm` in bucket order on every rank. No other
//    collective may be issued on the same communicator between the last micro-step's
//    prepareForBackward and finishGradients: use Runtime::makeDataCommunicator, which is a
//    communicator of its own (NCCL, or a duplicated MPI communicator with its own worker), so
//    control traffic (agreement, metrics) may run at any time.
//  - Threads: the hooks run on autograd's threads (the caller's on CPU, one per device on
//    CUDA); the reducer locks its state. On CUDA the hooks launch on the stream autograd set
//    for the accumulation, and finishGradients() leaves the caller's current stream waiting
//    for the reductions (no host synchronisation with NCCL).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "config/Config.h"
#include "dist/Communicator.h"

namespace torch::nn {
class Module;
}

namespace mb::dist {

struct ReducerOptions {
  double bucketMb = 25.0;
  double firstBucketMb = 1.0;
  at::ScalarType transportType = at::kFloat;  // kFloat, kBFloat16 or kHalf (dist.grad_dtype)
};

struct ReducerStats {
  std::int64_t buckets = 0;
  // Launch counters: the overlap is launchedDuringBackward / (launchedDuringBackward +
  // launchedAtFinish).
  std::int64_t launchedDuringBackward = 0;  // bucket launches from hooks, cumulative
  std::int64_t launchedAtFinish = 0;        // launched by finishGradients, cumulative
  double waitSeconds = 0;                   // time blocked in finishGradients, cumulative
};

class GradientReducer {
 public:
  // `params` in registration order (module.named_parameters()), with their names for errors.
  GradientReducer(std::shared_ptr<Communicator> comm, std::vector<at::Tensor> params,
                  std::vector<std::string> names, ReducerOptions options);
  ~GradientReducer();

  void prepareForBackward(bool lastMicroStep);
  void finishGradients();

  const ReducerStats& stats() const;
  // Parameter names per bucket, in launch order (for logs and tests).
  std::vector<std::vector<std::string>> bucketLayout() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Options from the config's dist section (bucket_mb, first_bucket_mb, grad_dtype).
ReducerOptions reducerOptionsFrom(const DistConfig& config);

// Start-up: rank 0 broadcasts every parameter and buffer, then every rank checks a checksum
// and the name/shape list against rank 0. A mismatch (e.g. different configs on different
// nodes) throws ConfigError on every rank naming the first differing rank and parameter.
void synchronizeParameters(Communicator& comm, torch::nn::Module& module);

// Makes every rank's buffers equal: the mean over ranks of floating-point buffers, rank 0's
// value of the others (Note [Buffers across ranks] in ParameterSync.cpp). Collective.
void averageBuffers(Communicator& comm, torch::nn::Module& module);

}  // namespace mb::dist
