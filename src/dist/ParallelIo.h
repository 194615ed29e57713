#pragma once
// HDF5 property lists for reading one file from every rank of a communicator: the only place
// data loading touches MPI (src/data never calls MPI).
//
//  - MPI world of more than one rank, HDF5 built for MPI: MPI-IO file access on the
//    communicator's MPI_Comm and collective transfers (H5FD_MPIO_COLLECTIVE). Opening and
//    closing the file and every H5Dread through transfer() are then collective: every rank
//    makes the same calls in the same order (a rank with nothing to read selects none).
//  - A world of one, a non-MPI communicator, or serial HDF5: the default sec2 driver and
//    independent transfers; nothing is collective.
//
// Threads: MPI runs at MPI_THREAD_SERIALIZED and MpiCommunicator issues its own MPI calls on a
// worker thread. Collective reads happen on the main thread while no collective of that
// communicator is in flight (the loader only calls its synchronous collectives in between).
#include <string>

#include "common/Hdf5.h"

namespace mb::dist {

class Communicator;

class ParallelIo {
 public:
  explicit ParallelIo(Communicator& comm);

  hid_t fileAccess() const { return fileAccess_.get(); }  // H5P_FILE_ACCESS list
  hid_t transfer() const { return transfer_.get(); }      // H5P_DATASET_XFER list
  // True when reads are collective: every rank must issue the same H5Dread calls.
  bool collective() const { return collective_; }
  // "MPI-IO, collective transfers" or "sec2, independent transfers", for logs.
  std::string describe() const;

 private:
  h5::Handle fileAccess_;
  h5::Handle transfer_;
  bool collective_ = false;
};

}  // namespace mb::dist
