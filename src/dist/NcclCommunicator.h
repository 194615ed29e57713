#pragma once
// NCCL backend (CUDA builds only). The stream contract is the one in Communicator.h:
//  - each collective runs on the communicator's own stream, after an event recorded on the
//    caller's current stream (so it sees every kernel the caller queued before the call);
//  - Work::wait() makes the caller's current stream wait on the collective's completion event;
//    the host never blocks (barrier() is the exception: it must block by definition);
//  - nothing calls cudaDeviceSynchronize.
// A monitor thread keeps a watchdog scope open per collective until its completion event fires,
// so a hung collective ends the job (after ncclCommAbort) like a hung MPI call does.
#include <memory>

#include "dist/Communicator.h"

namespace mb::dist {

// Collective over `control`: rank 0 creates the NCCL unique id, `control` broadcasts its bytes
// (MPI_Bcast underneath), and every rank calls ncclCommInitRank on CUDA device `deviceIndex`.
// Two ranks of one node on the same GPU are a ConfigError on every rank (NCCL forbids it).
// The communicator registers a watchdog abort hook that calls ncclCommAbort.
std::shared_ptr<Communicator> makeNcclCommunicator(Communicator& control, int deviceIndex);

}  // namespace mb::dist
