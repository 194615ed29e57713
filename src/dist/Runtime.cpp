#include "dist/Runtime.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include <mpi.h>

#include <ATen/Functions.h>
#include <ATen/Parallel.h>

#include "common/Environment.h"
#include "common/Log.h"
#include "common/Strings.h"
#include "dist/Agreement.h"
#include "dist/CpuThreads.h"
#include "dist/Heartbeat.h"
#include "dist/MpiCheck.h"
#include "dist/MpiCommunicator.h"
#include "dist/SingleCommunicator.h"
#include "dist/Watchdog.h"

#if MEGABATCH_WITH_NCCL
#include "dist/NcclCommunicator.h"
#endif

namespace mb::dist {
namespace {

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
  topology_.host = env::hostName();
  usesMpi_ = env::launchedByMpiLauncher();
  if (!usesMpi_) {
    control_ = std::make_shared<SingleCommunicator>();
    log::init(0, 1);
    Watchdog::instance().setWorld(1, nullptr);
    return;
  }
  int provided = 0;
  MB_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
  threadMultiple_ = provided >= MPI_THREAD_MULTIPLE;
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
  // Note [Watchdog heartbeat]: peers tell a busy rank from a hung one through heartbeats.
  const bool heartbeats = threadMultiple_ && topology_.size > 1;
  Watchdog::instance().setWorld(
      topology_.size, heartbeats ? std::make_unique<MpiHeartbeat>(MPI_COMM_WORLD) : nullptr);
  if (!threadMultiple_ && topology_.rank == 0)
    log::get("dist").warn(
        "the MPI library provides MPI_THREAD_SERIALIZED only: gradients share the control "
        "communicator's queue");
}

Runtime::~Runtime() {
  Watchdog::instance().dropPeers();  // the heartbeats stop before MPI does
  mpiData_.reset();                  // join the worker threads before MPI goes away
  control_.reset();
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
      throw ConfigError(
          "dist.backend = single, but " + std::to_string(topology_.size) + " ranks were launched",
          "use dist.backend=auto (or mpi/nccl), or launch one process");
    return control_;
  }
  bool many = topology_.size > 1;
  if (backend == BackendKind::kNccl || (backend == BackendKind::kAuto && cuda && many)) {
#if MEGABATCH_WITH_NCCL
    if (!cuda)
      throw ConfigError("dist.backend = nccl needs a CUDA device, but this run trains on the CPU",
                        "use dist.backend=mpi (or auto) on the CPU; with train.device=auto, the "
                        "message before says why no GPU was usable");
    return makeNcclCommunicator(*control_, deviceIndex);
#else
    if (backend == BackendKind::kNccl)
      throw ConfigError("dist.backend = nccl, but this megabatch was built without NCCL",
                        "rebuild with scripts/build-gpu.sh, or use dist.backend=mpi");
    if (topology_.rank == 0)
      log::get("dist").warn(
          "this megabatch was built without NCCL: CUDA gradients go over MPI "
          "through pinned host memory (slow)");
#endif
  }
  // A world of one: every collective is the identity (and CUDA tensors are not staged).
  if (!many) return std::make_shared<SingleCommunicator>();
  if (!threadMultiple_) return control_;
  // MPI gets its own duplicate of the world and its own worker thread. Sharing the control
  // communicator's FIFO would let a control collective slip between two gradient buckets on
  // one rank but not on another (buckets launch from backward hooks, or at finishGradients on
  // a rank whose gradients arrived late), and collectives would then pair up wrongly.
  if (!mpiData_) mpiData_ = std::make_shared<MpiCommunicator>(MPI_COMM_WORLD);
  return mpiData_;
}

int Runtime::selectCudaDevice(int visibleGpus) {
  int device = visibleGpus > 0 ? topology_.localRank % visibleGpus : -1;
  agreed(*control_, "selecting the CUDA device", [&] {
    if (visibleGpus <= 0)
      throw ConfigError("train.device = cuda, but rank " + std::to_string(topology_.rank) +
                            " on host " + topology_.host + " sees no CUDA device",
                        "check the node's GPUs and CUDA_VISIBLE_DEVICES, or use train.device=cpu");
  });
  // Rank 0 logs the whole map, so one log shows where every rank runs.
  constexpr std::int64_t kRecord = 128;
  std::string text = std::to_string(topology_.localRank) + " " + std::to_string(device) + " " +
                     std::to_string(visibleGpus) + " " + topology_.host;
  text = text.substr(0, kRecord - 1);
  at::Tensor record = at::zeros({kRecord}, at::kByte);
  std::memcpy(record.data_ptr(), text.data(), text.size());
  at::Tensor all = control_->allGather(record, "device map");  // [W, kRecord]
  auto& logger = log::get("dist");
  for (int r = 0; r < topology_.size; ++r) {
    auto fields = str::split(reinterpret_cast<const char*>(all[r].data_ptr()), ' ');
    if (fields.size() < 4) continue;
    logger.info("rank {}: host {}, local rank {} -> cuda:{} (of {} visible)", r, fields[3],
                fields[0], fields[1], fields[2]);
  }
  if (topology_.localSize > visibleGpus && topology_.rank == 0)
    logger.warn(
        "{} ranks share {} GPUs on host {}: GPUs are shared (the NCCL backend needs one "
        "GPU per rank)",
        topology_.localSize, visibleGpus, topology_.host);
  return device;
}

int Runtime::cpuThreadsPerRank(std::int64_t configured) const {
  return chooseThreads(configured, topology_.localSize, CpuBudget::read()).threads;
}

int Runtime::useCpuThreads(std::int64_t configured, const std::string& logger) const {
  CpuBudget budget = CpuBudget::read();
  if (configured <= 0 && budget.ompNumThreads.empty())
    budget.othersRunnable = CpuBudget::sampleOthers(topology_.localSize);
  const ThreadChoice choice = chooseThreads(configured, topology_.localSize, budget);
  at::set_num_threads(choice.threads);
  if (rank() == 0)
    log::get(logger).info(
        "{} CPU thread(s) per rank, from {}{}", choice.threads, choice.why,
        choice.threads > 1 ? "; idle threads wait with " + takeOpenMpWaitChoice() : std::string());
  return choice.threads;
}

void Runtime::abortJob(int code) {
  log::flush();
  if (usesMpi_) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace mb::dist
