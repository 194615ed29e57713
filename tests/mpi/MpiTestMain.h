#pragma once
// Shared state of the multi-rank test binary (run under mpirun -np N by CTest).
#include "dist/Runtime.h"

namespace mb::test {

// The process runtime (MPI initialised when launched by mpirun).
dist::Runtime& runtime();

}  // namespace mb::test
