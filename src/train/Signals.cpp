#include "train/Signals.h"

#include <signal.h>

#include <csignal>
#include <cstring>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <string>

#include <ATen/Functions.h>

#include "common/Error.h"
#include "common/Log.h"
#include "dist/Communicator.h"
#include "dist/Watchdog.h"

namespace mb::train {

// Note [Stopping within seconds]
// The trainer used to look for a stop request only between steps. An evaluation of a large val
// split (minutes), or one long step (gpt2-small on a CPU: 39 s), then ran to its end first, and
// SLURM's time limit could come before the checkpoint. Now:
//  - Each rank sees a request at its own moment: its own signal (mpirun and srun forward
//    SIGUSR1 to every rank), or a peer's, which the watchdog's heartbeats carry within about two
//    heartbeat periods (at most 2 s; dist/Watchdog.h). stopSeen() reads both: two atomic loads.
//  - Long loops look at it between units of work and leave early: an evaluation between
//    batches, a training step between micro-batches. No collective is added for it.
//  - The ranks agree in a collective they take anyway:
//      evaluation: the all-reduce of its sums also counts the ranks that left early. If any
//        did, every rank drops the evaluation: no metrics, best.h5 and early stopping do not
//        move. The step's checkpoint records eval_pending_step, so the resumed run evaluates
//        that step first (Note [Checkpoint before evaluation]).
//      training step: one all-reduce after the gradients (voteAfterGradients). It replaces
//        the stop flag that followed every step and StepRedo's out-of-memory vote, so a step
//        pays one small control all-reduce, as before. A rank that left its micro-batches early
//        still sends every gradient bucket (finishGradients), so a peer in its last
//        micro-batch's reduction is not left waiting, as after an out of memory. If any rank
//        left early, the step is dropped: gradients zeroed, carried lane states put back, the
//        optimizer untouched; the checkpoint holds the state before the step, and the resumed
//        run runs that step with the same batches. If none did, the step is whole: it is
//        applied, and the stop follows it.
//  - Without heartbeats (MPI without MPI_THREAD_MULTIPLE) a rank hears of a peer's request
//    only in those collectives: an evaluation then runs to its end on ranks that had no signal.
// The price: a request that comes between steps costs the next step's first micro-batch (a
// whole step without accumulation), which is dropped.
namespace {

std::atomic<int> gSignal{0};

extern "C" void recordStopSignal(int signal) {
  if (signal == SIGINT && gSignal.load() != 0) {
    std::signal(SIGINT, SIG_DFL);
    std::raise(SIGINT);
    return;
  }
  gSignal.store(signal);
}

}  // namespace

// Note [A stop during start-up]
// A rank is started well before it can checkpoint: the dynamic loader, LibTorch's initialisers
// and the re-execution of Note [CPU threads on a busy machine] take about a second. A SIGUSR1 or
// SIGTERM in that time (a stop right after a requeue, a launcher forwarding a user's stop)
// found the default action, which ends the process: the rank died, mpirun reported a failed
// job, and the elastic launcher restarted a run the user had stopped. So `megabatch train`
// blocks the three stop signals from its first instruction (the executable's .preinit_array,
// before any library's initialiser), and the block survives the re-execution; a signal in
// that time stays pending. installStopSignalHandlers() unblocks them once the handler is in
// place, and a pending one is recorded then, as if it had just arrived. The launchers also
// repeat a stop until the job ends (launch/common.sh), since mpirun forwards a signal only to
// the ranks it has already started.
void holdStopSignalsForTraining(int argc, char** argv) {
  if (argc < 2 || argv == nullptr || argv[1] == nullptr ||
      (std::strcmp(argv[1], "train") != 0 && std::strcmp(argv[1], "walk") != 0))
    return;
  sigset_t held;
  sigemptyset(&held);
  for (int signal : {SIGTERM, SIGUSR1, SIGINT})
    sigaddset(&held, signal);
  sigprocmask(SIG_BLOCK, &held, nullptr);
}

void installStopSignalHandlers() {
  struct sigaction action {};
  action.sa_handler = recordStopSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigset_t held;
  sigemptyset(&held);
  for (int signal : {SIGTERM, SIGUSR1, SIGINT}) {
    sigaction(signal, &action, nullptr);
    sigaddset(&held, signal);
  }
  sigprocmask(SIG_UNBLOCK, &held, nullptr);
}

int pendingStopSignal() {
  return gSignal.load();
}

void requestStop(int signal) {
  int none = 0;
  gSignal.compare_exchange_strong(none, signal);
}

const char* signalName(int signal) {
  switch (signal) {
    case SIGTERM:
      return "SIGTERM";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGINT:
      return "SIGINT";
    default:
      return "signal";
  }
}

void shareStopRequestsWithPeers() {
  dist::Watchdog::instance().setStopSource([] { return pendingStopSignal(); });
}

int stopSeen() {
  const int own = pendingStopSignal();
  return own != 0 ? own : dist::Watchdog::instance().peerStop();
}

StepVote voteAfterGradients(dist::Communicator& control, bool leftEarly, int rankThatRanOut,
                            bool checkpointDue) {
  at::Tensor vote =
      at::tensor({stopSeen(), leftEarly ? 1 : 0, rankThatRanOut, checkpointDue ? 1 : 0}, at::kInt);
  control.allReduce(vote, dist::ReduceOp::kMax, "step vote (stop, out of memory, checkpoint)");
  const auto* agreed = vote.data_ptr<int>();
  return StepVote{agreed[0], agreed[1] != 0, agreed[2], agreed[3] != 0};
}

// Note [Stop lead time]
// `#SBATCH --signal=B:USR1@T` gives a job T seconds between the signal and the kill at its
// time limit. A stop then costs, at most: the rest of the micro-batch (or evaluation batch) in
// flight, the heartbeats that tell the other ranks (2 s), the step vote, and one checkpoint
// write; neededSeconds() doubles the measured parts for noise and adds kSlackSeconds. SLURM
// does not export T (22.05: neither the job's environment nor `scontrol show job` holds it), so
// slurm/job.sh reads it from the batch script's #SBATCH line (`scontrol write batch_script`),
// or takes MB_SIGNAL_LEAD_S, and passes it on as MEGABATCH_STOP_LEAD_S. The costs are measured
// as the run goes and kept in the checkpoint (micro_batch_seconds, checkpoint_write_seconds),
// so a requeued run warns at its start, and a new one after its first checkpoint.
StopLeadCheck::StopLeadCheck() {
  const char* text = std::getenv("MEGABATCH_STOP_LEAD_S");
  if (text == nullptr || *text == '\0') return;
  char* end = nullptr;
  const double seconds = std::strtod(text, &end);
  if (end == text || *end != '\0' || !std::isfinite(seconds) || seconds < 0)
    throw ConfigError(std::string("MEGABATCH_STOP_LEAD_S=") + text + " is not a number of seconds",
                      "slurm/job.sh sets it from #SBATCH --signal=B:USR1@SECONDS; unset it, or "
                      "give the seconds, e.g. MEGABATCH_STOP_LEAD_S=300");
  lead_ = seconds;
}

double StopLeadCheck::neededSeconds(double microBatchSeconds, double checkpointWriteSeconds) {
  return 2 * (microBatchSeconds + checkpointWriteSeconds) + kSlackSeconds;
}

bool StopLeadCheck::check(double microBatchSeconds, double checkpointWriteSeconds) {
  if (!lead_ || warned_ || microBatchSeconds <= 0) return false;  // a write may be unmeasured
  const double needed = neededSeconds(microBatchSeconds, checkpointWriteSeconds);
  if (*lead_ >= needed) return false;
  warned_ = true;
  if (log::rank() == 0)
    log::get("train").warn(
        "the stop lead time is {:.0f} s (MEGABATCH_STOP_LEAD_S, from #SBATCH --signal), but a stop "
        "here needs about {:.0f} s: a micro-batch takes {:.1f} s and a checkpoint write {:.1f} s "
        "(twice both, plus {:.0f} s). At the time limit the job may be killed before its "
        "checkpoint: give the template #SBATCH --signal=B:USR1@{:.0f} (docs/operations.md, "
        "\"Stopping cleanly\")",
        *lead_, needed, microBatchSeconds, checkpointWriteSeconds, kSlackSeconds,
        std::ceil(needed / 10) * 10);
  return true;
}

}  // namespace mb::train
