// megabatch: distributed trainer for time-ordered data. See README.md and docs/.
#include "app/Cli.h"
#include "dist/CpuThreads.h"
#include "train/Signals.h"

namespace {

// Runs before any shared library's initialiser: a stop signal from here on waits for the
// trainer's handler (Note [A stop during start-up] in train/Signals.cpp), and the OpenMP
// runtime has not yet read its wait policy (Note [CPU threads on a busy machine] in
// dist/CpuThreads.h).
void beforeLibraries(int argc, char** argv, char** envp) {
  mb::train::holdStopSignalsForTraining(argc, argv);
  mb::dist::chooseOpenMpWaitPolicy(argc, argv, envp);
}

}  // namespace

__attribute__((section(".preinit_array"),
               used)) static void (*const earlyStart)(int, char**, char**) = beforeLibraries;

int main(int argc, char** argv) {
  return mb::app::main(argc, argv);
}
