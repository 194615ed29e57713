#pragma once
// Shared state of the multi-rank test binary (run under mpirun -np N by CTest).
#include <memory>

#include "dist/Runtime.h"

namespace mb::test {

// The process runtime (MPI initialised when launched by mpirun).
dist::Runtime& runtime();

// The gradient (data) communicator for tensors on test::device(), created collectively on first
// use and then shared: `auto` on the CPU (its own MPI communicator and worker thread, or the
// single-process backend in a world of one); under MEGABATCH_TEST_DEVICE=cuda the MPI backend
// with CUDA tensors staged through host memory, because every rank runs on cuda:0 and NCCL
// refuses two ranks on one GPU (Note [Test device] in tests/support/Device.h).
std::shared_ptr<dist::Communicator> dataCommunicator();

}  // namespace mb::test
