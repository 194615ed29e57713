#pragma once
// The distributed runtime of one process: MPI (when a launcher started us) or nothing (a
// plain process is a world of one), the control communicator (CPU, always MPI or single),
// the node-local rank, and the device this rank uses.
//
// The control communicator carries small host-side agreements (errors, stop flags, metrics).
// Gradients go over the data communicator: NCCL on CUDA, otherwise the control communicator.
#include <cstdint>
#include <memory>
#include <string>

#include "config/Config.h"
#include "dist/Communicator.h"

namespace mb::dist {

struct Topology {
  int rank = 0;
  int size = 1;
  int localRank = 0;  // rank among the processes on this node
  int localSize = 1;
  std::string host;
};

class Runtime {
 public:
  // Initialises MPI when launched by mpirun/srun (MPI_THREAD_MULTIPLE if the library has it,
  // at least MPI_THREAD_SERIALIZED), else a world of one.
  Runtime(int* argc, char*** argv);
  ~Runtime();  // MPI_Finalize
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  bool usesMpi() const { return usesMpi_; }
  // MPI_THREAD_MULTIPLE: the CPU data communicator then has its own MPI communicator and
  // worker thread, so control collectives never queue behind (or between) gradient buckets.
  bool mpiThreadMultiple() const { return threadMultiple_; }
  const Topology& topology() const { return topology_; }
  int rank() const { return topology_.rank; }
  int size() const { return topology_.size; }
  Communicator& control() { return *control_; }
  std::shared_ptr<Communicator> controlShared() { return control_; }

  // The gradient communicator for `backend` on `deviceType` ("cpu" or "cuda"). `auto` picks
  // NCCL for CUDA under a launcher and MPI for CPU (CUDA tensors staged through pinned memory
  // when NCCL is not built); a world of one gets the single-process backend. The MPI data
  // communicator is a duplicate of the world with its own worker thread (see
  // mpiThreadMultiple()); without MPI_THREAD_MULTIPLE it is the control communicator, and then
  // no control collective may run between a step's backward and finishGradients().
  // Collective: every rank calls it with the same arguments.
  std::shared_ptr<Communicator> makeDataCommunicator(BackendKind backend,
                                                     const std::string& deviceType,
                                                     int deviceIndex);

  // The CUDA device of this rank: local rank % visibleGpus. Collective: rank 0 logs every
  // rank's host, local rank and device. Throws ConfigError (on every rank) when a rank sees no
  // GPU. Call it before makeDataCommunicator for CUDA.
  int selectCudaDevice(int visibleGpus);

  // Intra-op CPU threads for this rank: `configured` when > 0 (train.threads), else the CPUs
  // this process may use divided by the ranks on this node (Note [CPU threads on a busy
  // machine] in dist/CpuThreads.h). Never less than 1.
  int cpuThreadsPerRank(std::int64_t configured) const;
  // Sets LibTorch's intra-op threads to cpuThreadsPerRank(configured); rank 0 logs to `logger`
  // one line saying how many, why, and how idle threads wait. Returns the count.
  int useCpuThreads(std::int64_t configured, const std::string& logger) const;

  // Ends every rank now with `code` (MPI_Abort under a launcher). For errors that could not be
  // agreed on, e.g. an exception in the middle of a collective step.
  [[noreturn]] void abortJob(int code);

 private:
  bool usesMpi_ = false;
  bool threadMultiple_ = false;
  Topology topology_;
  std::shared_ptr<Communicator> control_;
  std::shared_ptr<Communicator> mpiData_;  // created on first use, then shared
};

}  // namespace mb::dist
