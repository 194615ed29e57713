#include "dist/Runtime.h"

#include <unistd.h>

#include <cstdlib>

#include <mpi.h>

#include "common/Check.h"
#include "common/Environment.h"
#include "common/Log.h"
#include "dist/MpiCommunicator.h"
#include "dist/SingleCommunicator.h"

#if MEGABATCH_WITH_NCCL
#include "dist/NcclCommunicator.h"
#endif

namespace mb::dist {
namespace {

std::string hostName() {
  char name[256] = {0};
  gethostname(name, sizeof(name) - 1);
  return name;
}

// Local rank: launcher variables first, then ask MPI which ranks share this node.
void discoverLocalRank(Topology& topology) {
  MPI_Comm local = MPI_COMM_NULL;
  MB_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, topology.rank,
                                   MPI_INFO_NULL, &local));
  int localRank = 0;
  MB_MPI_CHECK(MPI_Comm_rank(local, &localRank));
  MB_MPI_CHECK(MPI_Comm_size(local, &topology.localSize));
  MB_MPI_CHECK(MPI_Comm_free(&local));
  topology.localRank = env::launcherLocalRank().value_or(localRank);
}

}  // namespace

Runtime::Runtime(int* argc, char*** argv) {
  topology_.host = hostName();
  usesMpi_ = env::launchedByMpiLauncher();
  if (!usesMpi_) {
    control_ = std::make_shared<SingleCommunicator>();
    log::init(0, 1);
    return;
  }
  int provided = 0;
  MB_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided));
  if (provided < MPI_THREAD_SERIALIZED) {
    throw RuntimeError("the MPI library provides thread level " + std::to_string(provided) +
                           ", megabatch needs MPI_THREAD_SERIALIZED",
                       "use an MPI built with thread support (Open MPI 4 has it)");
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MB_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &topology_.rank));
  MB_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &topology_.size));
  discoverLocalRank(topology_);
  log::init(topology_.rank, topology_.size);
  control_ = std::make_shared<MpiCommunicator>(MPI_COMM_WORLD);
}

Runtime::~Runtime() {
  control_.reset();  // joins the worker thread before MPI goes away
  if (!usesMpi_) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

std::shared_ptr<Communicator> Runtime::makeDataCommunicator(BackendKind backend,
                                                            const std::string& deviceType,
                                                            int deviceIndex) {
  bool cuda = deviceType == "cuda";
  if (backend == BackendKind::kSingle) {
    if (topology_.size != 1)
      throw ConfigError("dist.backend = single, but " + std::to_string(topology_.size) +
                            " ranks were launched",
                        "use dist.backend=auto (or mpi/nccl), or launch one process");
    return control_;
  }
  if (backend == BackendKind::kNccl || (backend == BackendKind::kAuto && cuda && usesMpi_)) {
#if MEGABATCH_WITH_NCCL
    if (!cuda)
      throw ConfigError("dist.backend = nccl needs train.device = cuda",
                        "use dist.backend=mpi (or auto) on CPU");
    return makeNcclCommunicator(*control_, deviceIndex);
#else
    if (backend == BackendKind::kNccl)
      throw ConfigError("dist.backend = nccl, but this megabatch was built without NCCL",
                        "rebuild with scripts/build-gpu.sh, or use dist.backend=mpi");
#endif
  }
  return control_;  // MPI (CUDA tensors staged through pinned memory) or single
}

void Runtime::abortJob(int code) {
  log::flush();
  if (usesMpi_) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace mb::dist
