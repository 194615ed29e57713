// megabatch: distributed trainer for time-ordered data. See README.md and docs/.
#include "app/Cli.h"
#include "dist/CpuThreads.h"

// Runs before any shared library's initialiser, so before the OpenMP runtime reads its wait
// policy (Note [CPU threads on a busy machine] in dist/CpuThreads.h).
__attribute__((section(".preinit_array"), used)) static void (*const chooseWaitPolicy)(
    int, char**, char**) = mb::dist::chooseOpenMpWaitPolicy;

int main(int argc, char** argv) {
  return mb::app::main(argc, argv);
}
