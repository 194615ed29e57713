#!/usr/bin/env bash
# The body of the sbatch templates in slurm/ (they `exec` it, so it IS the batch shell and
# receives `--signal=B:...`). It starts the training step, forwards a stop signal to it, and
# requeues the job when the trainer stopped for the preemption signal, or failed in a way a new
# start can mend (a lost node, a cut link, a dead rank). Not submitted by itself.
#
#   exec bash "$MEGABATCH_HOME/slurm/job.sh" CONFIG [key=value ...]
#
# Settings (environment; docs/operations.md "SLURM"):
#   MB_LAUNCHER=srun|mpirun  srun (default): `srun --mpi=pmix`, one task per rank;
#                            mpirun: Open MPI's mpirun inside the allocation
#   MB_DEVICE=cpu            adds train.device=cpu (train-cpu.sbatch sets it)
#   MB_COMMAND=train|walk    the megabatch command the step runs (default train; walk.sbatch:
#                            walk, whose exit 75 and requeue work as train's)
#   MB_REQUEUE=1|0           requeue after exit 75 from the preemption signal, and after a
#                            failure a restart can mend (default 1)
#   MB_MAX_RESTARTS=N        stop requeueing after N restarts, of either kind (default 50)
#   MB_SRUN_ARGS, MB_MPIRUN_ARGS   extra launcher options, split on spaces
#   MB_SIGNAL_LEAD_S=T       the seconds --signal gives before the time limit, when it was given
#                            on the sbatch command line (job.sh reads the #SBATCH line itself)
#
# Note [Signals and requeue]
# `#SBATCH --signal=B:USR1@300` makes SLURM send SIGUSR1 to this shell only, 300 s before the
# time limit. A shell runs traps only between commands, so the step runs in the background
# and the shell waits; the trap forwards SIGUSR1 to srun or mpirun, both of which pass it to
# every rank. The ranks agree within seconds, between evaluation batches or micro-batches
# (Note [Stopping within seconds] in src/train/Signals.cpp), rank 0 writes a checkpoint, and
# every rank exits 75. Then this shell calls `scontrol requeue`: the job goes back to the queue with
# the same id, and its next run resumes from run.dir/checkpoints/latest (run.resume: auto).
# That run takes run.dir/run.lock first (Note [One writer per run directory] in
# src/train/checkpoints/RunLock.cpp): free here, since this shell requeues after the step has exited; a run
# that is still ending when the next one starts is waited for (run.lock_wait_s).
# SIGTERM is forwarded the same way (as SIGUSR1: mpirun would kill its ranks on SIGTERM) but
# never requeues: it means scancel, the time limit, or the scheduler's own preemption
# (PreemptMode=REQUEUE requeues the job by itself).
# A failure is requeued too when a new start may mend it (Note [Restarts after a lost host] in
# launch/elastic.sh): any exit but 0, 2, 3, 4 (config, data, checkpoint), 75, 130, and 1 after
# an out-of-memory end. The requeued job starts on the nodes SLURM gives it, without the node it
# marked down, and resumes from checkpoints/latest on its rank count. A node that fails under
# the batch shell itself ends this shell too: SLURM then requeues the job by itself when it was
# submitted with --requeue (the templates are) and JobRequeue is on (the default). Either way
# SLURM_RESTART_COUNT counts the restarts, and MB_MAX_RESTARTS bounds them.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../launch/common.sh"
source "$(dirname "${BASH_SOURCE[0]}")/../launch/elastic.sh"

[[ $# -ge 1 ]] || mb_die 2 "no CONFIG given" "sbatch slurm/train.sbatch CONFIG [key=value ...]"
[[ -n ${SLURM_JOB_ID:-} ]] || mb_die 2 "not inside a SLURM job (SLURM_JOB_ID is unset)" \
  "submit a template: sbatch slurm/train.sbatch CONFIG; without SLURM use launch/train-node.sh"
config=$1
shift
launcher=${MB_LAUNCHER:-srun}
restarts=${SLURM_RESTART_COUNT:-0}
max_restarts=${MB_MAX_RESTARTS:-50}
cpus=${SLURM_CPUS_PER_TASK:-1}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$cpus}

bin=$(mb_find_bin)
case $launcher in
  srun)
    # srun does not inherit --cpus-per-task from sbatch since Slurm 22.05: pass it on.
    # --kill-on-bad-exit=0: rank 0 may still be writing the checkpoint when the others exit 75.
    step=(srun --mpi=pmix --kill-on-bad-exit=0 --cpus-per-task="$cpus") ;;
  mpirun)
    step=(mpirun -np "${SLURM_NTASKS:?SLURM_NTASKS is unset: give the template --ntasks or --ntasks-per-node}"
          "${MB_ROOT_FLAGS[@]}" --map-by "slot:PE=$cpus" --bind-to core) ;;
  *) mb_die 2 "MB_LAUNCHER=$launcher: expected srun or mpirun" ;;
esac
extra=${MB_SRUN_ARGS:-}
[[ $launcher == mpirun ]] && extra=${MB_MPIRUN_ARGS:-}
# mpirun's daemons must find a host behind a cut link before the watchdog ends the ranks (see
# launch/common.sh); srun leaves that to Slurm, which notices a silent node itself.
# shellcheck disable=SC2207  # a list of words on purpose
[[ $launcher == mpirun ]] && step+=($(mb_daemon_keepalive_args "$extra" "$bin" "$config" "$@"))
# shellcheck disable=SC2206  # a list of words on purpose
[[ -n $extra ]] && step+=($extra)
step+=("$bin" "${MB_COMMAND:-train}" --config "$config")
[[ ${MB_DEVICE:-} == cpu ]] && step+=(train.device=cpu)
step+=("$@")

# Note [Stop lead time] (src/train/Signals.cpp): SLURM does not export --signal's lead time;
# megabatch warns when it is shorter than a stop costs. SBATCH_SIGNAL (a submit-time setting
# the job inherits), else the batch script's last #SBATCH --signal line; no @T means 60 s.
signal_spec=${SBATCH_SIGNAL:-$(scontrol write batch_script "$SLURM_JOB_ID" - 2>/dev/null |
  sed -n 's/^#SBATCH[[:space:]]*--signal[= ]\([^[:space:]]*\).*/\1/p' | tail -n 1)}
lead=${MB_SIGNAL_LEAD_S:-}
if [[ -z $lead && -n $signal_spec ]]; then
  lead=60
  [[ $signal_spec == *@* ]] && lead=${signal_spec##*@}
fi
[[ -n $lead ]] && export MEGABATCH_STOP_LEAD_S=$lead
# Note [Restart records] (src/train/watch/RestartRecord.h): the requeued run records that it is one.
if ((restarts > 0)); then
  export MEGABATCH_RESTART="$restarts/$max_restarts" MEGABATCH_RESTART_REASON="requeued by SLURM"
fi

echo "job.sh: job $SLURM_JOB_ID run $((restarts + 1)) on ${SLURM_JOB_NODELIST:-?} at $(date '+%F %T'):" \
  "${SLURM_NTASKS:-?} task(s), $cpus CPU(s) per task, stop lead ${lead:-unknown} s"
echo "job.sh: $(mb_show_command "${step[@]}")"

# Note [Stop signals in the launchers] (launch/common.sh): every stop signal reaches the step as
# SIGUSR1.
MB_JOB_LOG=$(mktemp)  # what the step said, for _mb_not_retried_because
mb_run_job "${step[@]}"
status=$MB_JOB_STATUS
stop_signal=$MB_STOP_SIGNAL
echo "job.sh: training step exited with $status at $(date '+%T')"
sleep 0.2  # the tee of the step's output writes its last lines
why=$(_mb_not_retried_because "$status" "$MB_JOB_LOG")
rm -f "$MB_JOB_LOG"

requeue() {  # requeue WHAT: scontrol requeue, within MB_REQUEUE and MB_MAX_RESTARTS
  if [[ ${MB_REQUEUE:-1} != 1 ]]; then
    echo "job.sh: MB_REQUEUE=${MB_REQUEUE}: not requeueing; submit the same command again to resume."
    return 1
  fi
  if ((restarts >= max_restarts)); then
    echo "job.sh: already restarted $restarts times (MB_MAX_RESTARTS=$max_restarts): not requeueing." >&2
    return 1
  fi
  echo "job.sh: $1; requeueing job $SLURM_JOB_ID (restart $((restarts + 1)) of $max_restarts)"
  if ! scontrol requeue "$SLURM_JOB_ID"; then
    echo "job.sh: scontrol requeue $SLURM_JOB_ID failed: the job is not requeueable." \
      "Submit with --requeue (the templates have #SBATCH --requeue), or resubmit by hand to resume." >&2
  fi
}

if [[ $status == 0 ]]; then
  exit 0
fi
if [[ $status != 75 ]]; then
  if [[ -n $why ]]; then
    echo "job.sh: not requeueing, since $why; fix it and submit again (the checkpoint is kept)." >&2
  else
    requeue "the training step failed (exit $status: a lost node, a cut link or a dead rank)" || true
  fi
  # After a requeue the controller ends this shell; the failure's code covers the moment before.
  exit "$status"
fi
if [[ $stop_signal == TERM || $stop_signal == INT || $stop_signal == HUP ]]; then
  echo "job.sh: stopped by SIG$stop_signal (scancel, time limit, or the scheduler); not requeueing." \
    "The checkpoint is in run.dir: submit the same command again to resume."
  exit 75
fi
requeue "checkpoint written" || true
# The controller now ends this shell; exit 75 covers the moment before it does.
exit 75
