# shellcheck shell=bash
# Shared by the launch/ scripts and slurm/job.sh (sourced, never run). Bash only.
# Everything here is a function or a fact about this machine; nothing is launched.

# The repository root: launch/..
MB_HOME=${MEGABATCH_HOME:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}

mb_die() {  # mb_die CODE MESSAGE [HINT]
  echo "$(basename "$0"): error: $2" >&2
  [[ -n ${3:-} ]] && echo "  hint: $3" >&2
  exit "$1"
}

# The megabatch binary: $MEGABATCH_BIN, then <repo>/build/megabatch, then megabatch on PATH.
mb_find_bin() {
  if [[ -n ${MEGABATCH_BIN:-} ]]; then
    [[ -x $MEGABATCH_BIN ]] || mb_die 2 "MEGABATCH_BIN=$MEGABATCH_BIN is not an executable file" \
      "point MEGABATCH_BIN at the built binary (build/megabatch) or unset it"
    echo "$MEGABATCH_BIN"
  elif [[ -x $MB_HOME/build/megabatch ]]; then
    echo "$MB_HOME/build/megabatch"
  elif command -v megabatch >/dev/null 2>&1; then
    command -v megabatch
  else
    mb_die 2 "no megabatch binary: MEGABATCH_BIN is unset, $MB_HOME/build/megabatch does not exist, and megabatch is not on PATH" \
      "build it (bash scripts/build.sh) or set MEGABATCH_BIN=/path/to/megabatch"
  fi
}

# Open MPI refuses to start as root unless told; containers often run as root. Only then.
# shellcheck disable=SC2034  # used by the scripts that source this file
if [[ $(id -u) -eq 0 ]]; then MB_ROOT_FLAGS=(--allow-run-as-root); else MB_ROOT_FLAGS=(); fi

# GPUs this process may use: CUDA_VISIBLE_DEVICES when set, else nvidia-smi, else 0.
mb_count_gpus() {
  if [[ -n ${CUDA_VISIBLE_DEVICES+set} ]]; then
    local ids
    IFS=, read -ra ids <<<"$CUDA_VISIBLE_DEVICES"
    [[ ${ids[0]:-} == NoDevFiles ]] && ids=()
    echo "${#ids[@]}"
  elif command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true
  else
    echo 0
  fi
}

# Physical cores of this node (what --bind-to core hands out), falling back to nproc.
mb_count_cores() {
  local cores
  cores=$(lscpu -p=CORE,SOCKET 2>/dev/null | grep -v '^#' | sort -u | wc -l)
  [[ $cores -gt 0 ]] || cores=$(nproc)
  echo "$cores"
}

# Prints a command as one line a user can paste (used by --dry-run and the launch banner).
mb_show_command() {
  local word out=""
  for word in "$@"; do out+=" $(printf '%q' "$word")"; done
  echo "${out# }"
}

# dist.timeout_s of `megabatch train --config CONFIG [key=value ...]` as the binary resolves it
# (defaults, the file, then the overrides); 300, the default, when the config cannot be read
# (megabatch itself then says what is wrong with it). --print-config may write 300 as 3e+02.
mb_dist_timeout() {  # mb_dist_timeout BIN CONFIG [key=value ...]
  local bin=$1 config=$2 timeout
  shift 2
  timeout=$("$bin" train --config "$config" "$@" --print-config 2>/dev/null |
    awk '/^dist:/ { d = 1; next } /^[^ ]/ { d = 0 } d && $1 == "timeout_s:" { print $2 + 0 }')
  [[ $timeout =~ ^[0-9]+([.][0-9]*)?$ ]] || timeout=300
  echo "$timeout"
}

# Open MPI's daemons (mpirun and one orted per host) talk over TCP. A host that dies closes its
# sockets and mpirun ends the job at once, but a cut link closes nothing. Once megabatch's
# watchdog has ended a rank, mpirun sends the unreachable daemon a kill order; from then on the
# socket holds unacknowledged data, keepalive is off, and mpirun waits out TCP's retransmissions
# (about 15 minutes; docs/reliability.md, "Faults between hosts"). So the daemons must find the
# silent daemon first: keepalive probes every TIMEOUT/8 s, the daemon lost after 4 unanswered,
# which ends the job T/2 to 5T/8 after the link went silent, plus Open MPI's teardown (6.7 s in
# all for T = 8 on the test bed). A shorter silence is ridden out. mpirun names the host it lost.
# USER_ARGS are the user's own extra mpirun options: Open MPI refuses a parameter given twice, so
# keepalive settings there win and nothing is printed.
mb_daemon_keepalive_args() {  # mb_daemon_keepalive_args USER_ARGS BIN CONFIG [key=value ...]
  [[ $1 == *oob_tcp_keepalive* ]] && return 0
  shift
  awk -v t="$(mb_dist_timeout "$@")" 'BEGIN {
    interval = int(t / 8); if (interval < 1) interval = 1
    probes = 4; if (t < 8) probes = int(t / 2) - 1; if (probes < 1) probes = 1
    printf "--mca oob_tcp_keepalive_time %d --mca oob_tcp_keepalive_intvl %d", interval, interval
    printf " --mca oob_tcp_keepalive_probes %d\n", probes }'
}

# Note [Stop signals in the launchers]
# megabatch stops cleanly on SIGUSR1, SIGTERM or SIGINT: a checkpoint, then exit 75 (rerun the
# same command to resume). Open MPI's mpirun forwards only SIGUSR1 (and SIGUSR2) that way. On
# SIGTERM or SIGINT it kills its ranks: SIGTERM after odls_base_sigkill_timeout (1 s), SIGKILL
# 1 s later, and it exits 1 even when the ranks made their checkpoint in that second. So the
# launchers never let mpirun see those: it runs in its own session (setsid), where a Ctrl-C or
# a kill of the launcher's process group does not reach it, and the launcher turns SIGTERM,
# SIGINT and SIGHUP into SIGUSR1 for it, waits for the job, and exits with its code. A second
# SIGINT ends the job at once: SIGKILL to mpirun, whose ranks follow within seconds; srun gets
# two SIGINTs, its own "end the step now". The launcher then exits 130.
# mpirun forwards a signal only to the ranks it has started, so a stop that comes while it
# starts them would be lost, and the run would train on (the fault soak found it): the launcher
# repeats SIGUSR1 every 2 s until the job ends (megabatch takes a repeated stop as one). A
# megabatch rank holds a stop that comes before its handler is in place (Note [A stop during
# start-up] in src/train/Signals.cpp).
# mb_run_job CMD... runs CMD so; it sets MB_STOP_SIGNAL (USR1, TERM, INT, HUP, or empty) and
# MB_JOB_STATUS (the job's exit code, 130 after a second SIGINT). With MB_JOB_LOG set, the job's
# output (stdout and stderr together) is also appended to that file, by a tee that ignores the
# stop signals, so that a Ctrl-C never breaks the job's pipe. With MB_JOB_WATCHER set, that
# command runs beside the job with the job's pid as its argument, and ends with it
# (launch/elastic.sh's scale-up watch).
mb_run_job() {
  MB_STOP_SIGNAL=${MB_STOP_SIGNAL:-}  # a stop mb_hold_stops took before the start is kept
  MB_JOB_STATUS=0
  _mb_job_name=$(basename "$1")
  _mb_interrupted=0
  _mb_ended=0
  _mb_job=""
  _mb_repeater=""
  mb_hold_stops
  if [[ -n ${MB_JOB_LOG:-} ]]; then
    setsid "$@" </dev/null > >(trap '' INT TERM HUP USR1; exec tee -a "$MB_JOB_LOG") 2>&1 &
  else
    setsid "$@" </dev/null &
  fi
  _mb_job=$!
  local watcher=""
  if [[ -n ${MB_JOB_WATCHER:-} ]]; then
    "$MB_JOB_WATCHER" "$_mb_job" &
    watcher=$!
  fi
  # A signal before the job started: sent once the job can take it (megabatch holds one from
  # its first instruction on, mpirun only once its handler is in place).
  [[ -n $MB_STOP_SIGNAL ]] && _mb_repeat_stop 1
  # `wait` returns early (status > 128) when a trap runs; wait again for the job's own status.
  while :; do
    _mb_interrupted=0
    MB_JOB_STATUS=0
    wait "$_mb_job" || MB_JOB_STATUS=$?  # not a failure under set -e: the status is the job's
    [[ $_mb_interrupted == 1 ]] || break
  done
  [[ $_mb_ended == 1 ]] && MB_JOB_STATUS=130  # as a process that Ctrl-C ended
  if [[ -n $MB_STOP_SIGNAL && $MB_JOB_STATUS == 138 ]]; then
    # SIGUSR1 ended a process of the job before it could take it: a rank still loading its
    # libraries, or mpirun itself. That job had trained nothing, so this is a stop like any:
    # the checkpoint before it stands, and the same command resumes from it.
    echo "$(basename "$0"): the stop reached the job while it started, before it could" \
      "checkpoint; it had trained nothing since the last checkpoint: rerun the same command to" \
      "resume (exit 75)" >&2
    MB_JOB_STATUS=75
  fi
  local helper
  for helper in "$watcher" "$_mb_repeater"; do
    [[ -n $helper ]] || continue
    kill "$helper" 2>/dev/null || true  # it may have ended by itself
    wait "$helper" 2>/dev/null || true
  done
  _mb_repeater=""
  trap - USR1 TERM INT HUP
}

# The stop signals' traps, also between jobs (launch/elastic.sh's restarts): a stop then sets
# MB_STOP_SIGNAL, and no job is started after it.
mb_hold_stops() {
  _mb_job=""
  trap '_mb_stop_job USR1' USR1
  trap '_mb_stop_job TERM' TERM
  trap '_mb_stop_job INT' INT
  trap '_mb_stop_job HUP' HUP
}

# SIGUSR1 to the job after FIRST seconds, then every 2 s while it runs (Note [Stop signals in
# the launchers]).
_mb_repeat_stop() {
  [[ -z $_mb_repeater ]] || return 0
  local job=$_mb_job
  (
    trap '' INT TERM HUP USR1
    sleep "$1"
    while kill -USR1 "$job" 2>/dev/null; do sleep 2; done
  ) &
  _mb_repeater=$!
}

_mb_stop_job() {  # the trap of mb_run_job
  _mb_interrupted=1
  if [[ -z $_mb_job ]]; then  # not started yet: mb_run_job forwards it
    [[ -n $MB_STOP_SIGNAL ]] || MB_STOP_SIGNAL=$1
    return
  fi
  if [[ $1 == INT && -n $MB_STOP_SIGNAL ]]; then
    echo "$(basename "$0"): second SIGINT at $(date '+%T'): ending the job now, without a checkpoint" >&2
    _mb_ended=1
    if [[ $_mb_job_name == srun ]]; then
      kill -INT "$_mb_job" 2>/dev/null
      sleep 0.2
      kill -INT "$_mb_job" 2>/dev/null
    else
      kill -KILL "$_mb_job" 2>/dev/null
    fi
    return
  fi
  [[ -n $MB_STOP_SIGNAL ]] || MB_STOP_SIGNAL=$1
  echo "$(basename "$0"): SIG$1 at $(date '+%T'): asking the training job to checkpoint and stop" \
    "(SIGUSR1 to $_mb_job_name); a second Ctrl-C ends it at once" >&2
  kill -USR1 "$_mb_job" 2>/dev/null
  _mb_repeat_stop 2
}

# From the launcher's first lines: a stop that comes before its job starts is kept, not fatal
# (a launcher is a shell script: SIGTERM's default action would end it before it started
# anything, with no exit 75 for a requeue to see).
MB_STOP_SIGNAL=""
mb_hold_stops
