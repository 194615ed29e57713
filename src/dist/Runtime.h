#pragma once
// The distributed runtime of one process: MPI (when a launcher started us) or nothing (a
// plain process is a world of one), the control communicator (CPU, always MPI or single),
// the node-local rank, and the device this rank uses.
//
// The control communicator carries small host-side agreements (errors, stop flags, metrics).
// Gradients go over the data communicator: NCCL on CUDA, otherwise the control communicator.
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
  // Initialises MPI when launched by mpirun/srun (MPI_THREAD_SERIALIZED), else a world of one.
  Runtime(int* argc, char*** argv);
  ~Runtime();  // MPI_Finalize
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  bool usesMpi() const { return usesMpi_; }
  const Topology& topology() const { return topology_; }
  int rank() const { return topology_.rank; }
  int size() const { return topology_.size; }
  Communicator& control() { return *control_; }
  std::shared_ptr<Communicator> controlShared() { return control_; }

  // The gradient communicator for `backend` on `deviceType` ("cpu" or "cuda"). `auto` picks
  // NCCL for CUDA and the control communicator (MPI or single) for CPU.
  std::shared_ptr<Communicator> makeDataCommunicator(BackendKind backend, const std::string& deviceType,
                                                     int deviceIndex);

  // Ends every rank now with `code` (MPI_Abort under a launcher). For errors that could not be
  // agreed on, e.g. an exception in the middle of a collective step.
  [[noreturn]] void abortJob(int code);

 private:
  bool usesMpi_ = false;
  Topology topology_;
  std::shared_ptr<Communicator> control_;
};

}  // namespace mb::dist
