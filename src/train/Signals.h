#pragma once
// Stop requests (Note [Stopping within seconds] in Signals.cpp). SIGTERM, SIGUSR1 (what SLURM's
// --signal and mpirun forward), and SIGINT only record that a stop was asked for. Loops that
// run long (an evaluation's batches, a step's micro-batches) look at stopSeen() between units
// of work and leave early; the ranks then agree in a collective they take anyway, a checkpoint
// is written, and the process exits 75 (DESIGN.md "CLI"). A second SIGINT ends the process at
// once, as Ctrl-C twice should.
#include <cstdint>
#include <optional>

namespace mb::dist {
class Communicator;
}

namespace mb::train {

// Note [A stop during start-up]: from the executable's .preinit_array, for `megabatch train`.
void holdStopSignalsForTraining(int argc, char** argv);
// Installs the handlers, then lets the held signals in.
void installStopSignalHandlers();
// The signal number received since start (0: none).
int pendingStopSignal();
// As if `signal` had arrived (MEGABATCH_FAULT_STOP_STEP: FaultInjection.h).
void requestStop(int signal);
const char* signalName(int signal);

// The heartbeats carry this rank's stop request to its peers (dist/Watchdog.h).
void shareStopRequestsWithPeers();
// This rank's stop request, else one a peer's heartbeat brought (0: none). Not collective and
// cheap (two atomic loads): the ranks see a request at different moments, so what a loop does
// on it must be settled by a collective afterwards.
int stopSeen();

// What every rank knows after a training step's gradients (one collective over `control`).
struct StepVote {
  int stopSignal = 0;          // some rank saw a stop request (its signal)
  bool incomplete = false;     // some rank left its micro-batches early: the step must be dropped
  int rankThatRanOut = -1;     // the highest rank that ran out of memory (StepRedo), or -1
  bool checkpointDue = false;  // rank 0's clock asks for a checkpoint (run.checkpoint_every_s)
};
StepVote voteAfterGradients(dist::Communicator& control, bool leftEarly, int rankThatRanOut,
                            bool checkpointDue);

// Note [Stop lead time] (Signals.cpp): warns, once, when the time SLURM gives between its stop
// signal and the kill (MEGABATCH_STOP_LEAD_S, which slurm/job.sh reads from the batch script's
// `#SBATCH --signal`) is shorter than a stop costs here.
class StopLeadCheck {
 public:
  StopLeadCheck();  // reads MEGABATCH_STOP_LEAD_S
  // With what a stop costs as last measured (0: not yet; nothing is said before a micro-batch
  // was measured); rank 0 speaks. True: it warned.
  bool check(double microBatchSeconds, double checkpointWriteSeconds);
  // What a stop needs: twice one micro-batch and one checkpoint write, plus kSlackSeconds.
  static double neededSeconds(double microBatchSeconds, double checkpointWriteSeconds);
  static constexpr double kSlackSeconds = 10;  // heartbeats (2 s), the vote, the exit

 private:
  std::optional<double> lead_;
  bool warned_ = false;
};

}  // namespace mb::train
