#include "dist/ParallelIo.h"

#include "common/Check.h"
#include "dist/Communicator.h"
#include "dist/MpiCommunicator.h"

namespace mb::dist {

ParallelIo::ParallelIo(Communicator& comm)
    : fileAccess_(MB_HDF5_CHECK(H5Pcreate(H5P_FILE_ACCESS), ExitCode::kData), H5Pclose),
      transfer_(MB_HDF5_CHECK(H5Pcreate(H5P_DATASET_XFER), ExitCode::kData), H5Pclose) {
#if MEGABATCH_HDF5_PARALLEL
  auto* mpi = dynamic_cast<MpiCommunicator*>(&comm);
  if (mpi != nullptr && comm.size() > 1) {
    MB_HDF5_CHECK(H5Pset_fapl_mpio(fileAccess_.get(), mpi->handle(), MPI_INFO_NULL),
                  ExitCode::kData);
    MB_HDF5_CHECK(H5Pset_dxpl_mpio(transfer_.get(), H5FD_MPIO_COLLECTIVE), ExitCode::kData);
    collective_ = true;
  }
#else
  (void)comm;
#endif
}

std::string ParallelIo::describe() const {
  return collective_ ? "MPI-IO, collective transfers" : "sec2, independent transfers";
}

}  // namespace mb::dist
