#pragma once
// Preemption signals. SIGTERM, SIGUSR1 (what SLURM's --signal and mpirun forward), and SIGINT
// only record that a stop was asked for; the trainer checks at every step boundary, all ranks
// agree, a checkpoint is written, and the process exits 75 (DESIGN.md "CLI"). A second SIGINT
// ends the process at once, as Ctrl-C twice should.
namespace mb::train {

void installStopSignalHandlers();
// The signal number received since start (0: none).
int pendingStopSignal();
const char* signalName(int signal);

}  // namespace mb::train
