#pragma once
// MPI backend. One worker thread per communicator issues every MPI call in FIFO order (the
// c10d ProcessGroupMPI design), so MPI_THREAD_SERIALIZED is enough and asynchronous
// all-reduces overlap with the caller's backward pass.
//
// CPU tensors are reduced in place. CUDA tensors (when NCCL is not available) are staged:
// the caller's thread copies them into pinned host memory (a blocking copy, so the producer
// kernels have finished), the worker reduces the host copy, and wait() copies the result back.
// bf16 and fp16 are reduced with custom MPI operators in their own 2-byte format.
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

#include <mpi.h>

#include "dist/Communicator.h"

namespace mb::dist {

class MpiCommunicator final : public Communicator {
 public:
  // Duplicates `comm`, so this communicator's traffic never matches anyone else's.
  explicit MpiCommunicator(MPI_Comm comm);
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backendName() const override { return "mpi"; }

  std::shared_ptr<Work> allReduceAsync(at::Tensor tensor, ReduceOp op,
                                       const std::string& label) override;
  void broadcast(at::Tensor tensor, int root, const std::string& label) override;
  at::Tensor allGather(const at::Tensor& tensor, const std::string& label) override;
  void barrier(const std::string& label) override;

  // The duplicated communicator, for MPI-IO (parallel HDF5) in src/dist/ParallelIo.cpp.
  MPI_Comm handle() const { return comm_; }

 private:
  struct Task {
    std::string label;
    std::function<void()> body;
    std::promise<void> done;
  };
  std::shared_future<void> enqueue(const std::string& label, std::function<void()> body);
  void workerLoop();

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::unique_ptr<Task>> queue_;
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace mb::dist
