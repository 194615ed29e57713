# shellcheck shell=bash
# Restarts of launch/train-multinode.sh after a lost host (sourced after common.sh, never run).
#
# Note [Restarts after a lost host]
# With --max-restarts N, a job that fails in a way a new start can mend starts again by itself,
# on the hosts that still answer, from run.dir/checkpoints/latest. The batch order does not
# depend on the rank count (DESIGN.md, "Splits and global order"), so the new run trains on the
# batches the uninterrupted run would have, at any rank count: torchrun's elastic agent and
# Horovod Elastic restart too, but reshuffle.
# - What is retried: an exit that means a lost host, a cut link or a dead rank: any code but
#   the ones below. Not retried, whatever N: 0 (done); 2, 3, 4 (a bad config, bad data, a bad
#   checkpoint: a new start meets them again); 1 after "ran out of ... memory" (the same
#   batches need the same memory); 75 and 130 from a user's stop.
# - Which hosts are left: every host of the hostfile is probed at once, each bounded by
#   --probe-timeout, with the command Open MPI starts its daemons with (plm_rsh_agent when
#   MB_MPIRUN_ARGS or OMPI_MCA_plm_rsh_agent names one, else ssh in batch mode): a host answers
#   when `AGENT HOST true` succeeds. This machine always answers. With fewer than --min-hosts
#   left, the probe is repeated every --probe-every seconds for up to --host-wait seconds.
# - The new run gets one rank per slot of the hosts left (at most -n), and the environment
#   of Note [Restart records] (src/train/watch/RestartRecord.h), so that its metrics.jsonl and
#   train.log record the restart. A restart that fails counts too: after N, the launcher gives
#   up with the last failure's code and message.
# - --scale-up: while hosts are missing, they are probed every --probe-every seconds beside the
#   job. When one answers, the job gets SIGUSR1: a checkpoint at the next step and exit 75, as
#   for a user's stop (a few seconds, and the step in flight is redone); then it starts again
#   on every host that answers. Taking a host back is not a failure: it does not count
#   against N.

# True when HOST names this machine: Open MPI starts no daemon there, and it needs no probe.
mb_is_this_host() {
  local name=$1 address
  case $name in localhost | 127.* | ::1) return 0 ;; esac
  [[ $name == "$(hostname)" || $name == "$(hostname -s 2>/dev/null)" ||
    $name == "$(hostname -f 2>/dev/null)" ]] && return 0
  for address in $(hostname -I 2>/dev/null); do
    [[ $name == "$address" ]] && return 0
  done
  return 1
}

# The command Open MPI reaches other hosts with: plm_rsh_agent (its first choice), else ssh.
mb_rsh_agent() {
  local agent=${OMPI_MCA_plm_rsh_agent:-}
  if [[ ${MB_MPIRUN_ARGS:-} =~ plm_rsh_agent[[:space:]]+([^[:space:]]+) ]]; then
    agent=${BASH_REMATCH[1]}
  fi
  agent=${agent%%:*}
  echo "${agent:-ssh}"
}

mb_probe_host() {  # mb_probe_host HOST TIMEOUT_S: 0 when HOST answers within TIMEOUT_S
  mb_is_this_host "$1" && return 0
  local agent
  agent=$(mb_rsh_agent)
  if [[ $(basename "$agent") == ssh ]]; then
    timeout "$2" "$agent" -o BatchMode=yes -o ConnectTimeout="$2" "$1" true </dev/null >/dev/null 2>&1
  else
    timeout "$2" "$agent" "$1" true </dev/null >/dev/null 2>&1
  fi
}

# Probes HOSTS... at once; prints the ones that answer, in the order given.
mb_hosts_that_answer() {
  local host dir
  dir=$(mktemp -d)
  for host in "$@"; do
    (mb_probe_host "$host" "$_mbe_probe_timeout" && touch "$dir/$host") &
  done
  wait
  for host in "$@"; do
    [[ -e $dir/$host ]] && echo "$host"
  done
  rm -rf "$dir"
}

# The hostfile's hosts in order of first appearance, with their slots summed: "HOST SLOTS" lines
# (`slots=N` per line, default 1, as Open MPI counts them).
mb_hostfile_hosts() {
  awk '{ sub(/#.*/, "") } NF == 0 { next }
    { n = 1; for (i = 2; i <= NF; i++) if ($i ~ /^slots=/) { n = substr($i, 7) + 0 }
      if (!($1 in slots)) order[++count] = $1; slots[$1] += n }
    END { for (i = 1; i <= count; i++) print order[i], slots[order[i]] }' "$1"
}

# The last step metrics.jsonl of RUN_DIR logged (0 when none), and the step of its latest checkpoint.
mb_last_logged_step() {
  local step=""
  [[ -r $1/metrics.jsonl ]] &&
    step=$(grep '"event":"train"' "$1/metrics.jsonl" | tail -n 1 | sed -n 's/.*"step":\([0-9]*\).*/\1/p')
  echo "${step:-0}"
}
mb_checkpoint_step() {
  local latest=""
  [[ -r $1/checkpoints/latest ]] && latest=$(sed -n 's/^step-0*\([0-9][0-9]*\)\.h5$/\1/p' "$1/checkpoints/latest")
  echo "${latest:-0}"
}

# Why a failed run must not be retried (empty: a restart may mend it). STATUS LOG
_mb_not_retried_because() {
  case $1 in
    2) echo "exit 2 means a bad command line or config" ;;
    3) echo "exit 3 means bad data" ;;
    4) echo "exit 4 means a checkpoint problem" ;;
    130) echo "it was ended by a second Ctrl-C" ;;
    1) grep -qE 'ran out of [a-zA-Z0-9:]+ memory' "$2" 2>/dev/null &&
      echo "it ran out of memory, which the same batches do again" ;;
  esac
  return 0
}

# The failure's message, for the one that gives up: megabatch's last error (every rank ends with
# the same one), else Open MPI's line that names the rank or host it lost, else its last line
# that names a failure.
_mb_last_error() {
  local line pattern
  for pattern in '\] (critical|error): ' 'noticed that process|lost communication|exited on signal' \
    '(error|lost|failed|abort)'; do
    line=$(grep -iE "$pattern" "$1" 2>/dev/null | grep -v '] error: hint:' | tail -n 1 | cut -c1-2000)
    [[ -z $line ]] || break
  done
  echo "${line:-(no message; see the output above)}"
}

_mb_plural() {  # _mb_plural N WORD
  if [[ $1 == 1 ]]; then echo "$1 $2"; else echo "$1 ${2}s"; fi
}

# The scale-up watch (MB_JOB_WATCHER of mb_run_job): probes the missing hosts beside job PID.
_mb_watch_for_returning_hosts() {
  local job=$1 host
  trap 'exit 0' TERM
  while sleep "$_mbe_probe_every"; do
    kill -0 "$job" 2>/dev/null || exit 0
    for host in "${_mbe_missing[@]}"; do
      if mb_probe_host "$host" "$_mbe_probe_timeout"; then
        echo "$(basename "$0"): host $host answers again at $(date '+%T'): checkpointing at the next" \
          "step to restart with it (--scale-up)" >&2
        touch "$_mbe_dir/scale-up"
        kill -USR1 "$job" 2>/dev/null
        exit 0
      fi
    done
  done
}

# Waits for --min-hosts hosts (up to --host-wait s); sets _mbe_live. False when too few came.
_mb_wait_for_hosts() {
  local waited=0
  mapfile -t _mbe_live < <(mb_hosts_that_answer "${_mbe_hosts[@]}")
  while ((${#_mbe_live[@]} < _mbe_min_hosts)); do
    if ((waited >= _mbe_host_wait)); then return 1; fi
    echo "$(basename "$0"): ${#_mbe_live[@]} of ${#_mbe_hosts[@]} hosts answer, fewer than" \
      "--min-hosts $_mbe_min_hosts: probing again in $_mbe_probe_every s (waited $waited of" \
      "--host-wait $_mbe_host_wait s)" >&2
    sleep "$_mbe_probe_every"
    waited=$((waited + _mbe_probe_every))
    mapfile -t _mbe_live < <(mb_hosts_that_answer "${_mbe_hosts[@]}")
  done
}

# mb_elastic_run HOSTFILE NPROC RUN_DIR MPIRUN_OPTIONS... -- JOB...
# Runs `mpirun -np N --hostfile F MPIRUN_OPTIONS... JOB...` with restarts as above; the settings
# come from MB_ELASTIC_* (set by train-multinode.sh). Sets MB_JOB_STATUS to the code to exit with.
mb_elastic_run() {
  local hostfile=$1 nproc=$2 run_dir=$3 mpi=() job=() host line
  shift 3
  while [[ $1 != -- ]]; do mpi+=("$1"); shift; done
  shift
  job=("$@")
  _mbe_probe_timeout=$MB_ELASTIC_PROBE_TIMEOUT _mbe_probe_every=$MB_ELASTIC_PROBE_EVERY
  _mbe_min_hosts=$MB_ELASTIC_MIN_HOSTS _mbe_host_wait=$MB_ELASTIC_HOST_WAIT
  local max=$MB_ELASTIC_MAX_RESTARTS restarts=0 attempt=0 status ranks_before=0 ended_at
  declare -A slots=()
  _mbe_hosts=()
  while read -r host line; do
    _mbe_hosts+=("$host")
    slots[$host]=$line
  done < <(mb_hostfile_hosts "$hostfile")
  _mbe_live=("${_mbe_hosts[@]}")
  _mbe_dir=$(mktemp -d)
  MB_JOB_LOG=$_mbe_dir/job.log
  local restart_env=()
  MB_STOP_SIGNAL=${MB_STOP_SIGNAL:-}  # a stop before this, since common.sh, is kept
  mb_hold_stops                      # a stop between two runs starts no new one
  while :; do
    attempt=$((attempt + 1))
    if [[ -n $MB_STOP_SIGNAL ]]; then
      echo "$(basename "$0"): SIG$MB_STOP_SIGNAL before the job started: not starting it; the" \
        "checkpoint is in $run_dir: rerun the same command to resume" >&2
      status=75
      break
    fi
    local file=$_mbe_dir/hosts.$attempt ranks=0
    : >"$file"
    for host in "${_mbe_live[@]}"; do
      echo "$host slots=${slots[$host]}" >>"$file"
      ranks=$((ranks + slots[$host]))
    done
    [[ -n $nproc && $nproc -lt $ranks ]] && ranks=$nproc
    _mbe_missing=()
    for host in "${_mbe_hosts[@]}"; do
      [[ " ${_mbe_live[*]} " == *" $host "* ]] || _mbe_missing+=("$host")
    done
    MB_JOB_WATCHER=""
    [[ $MB_ELASTIC_SCALE_UP == 1 && ${#_mbe_missing[@]} -gt 0 ]] && MB_JOB_WATCHER=_mb_watch_for_returning_hosts
    rm -f "$_mbe_dir/scale-up"
    : >"$MB_JOB_LOG"
    mb_run_job mpirun -np "$ranks" --hostfile "$file" "${mpi[@]}" "${restart_env[@]}" "${job[@]}"
    status=$MB_JOB_STATUS
    mb_hold_stops
    ended_at=$(date +%s.%N)
    sleep 0.2  # the tee of the job's output writes its last lines
    ranks_before=$ranks
    local reason="" why
    if [[ $status == 75 && -z $MB_STOP_SIGNAL && -e $_mbe_dir/scale-up ]]; then
      reason="scale up"
    elif [[ $status == 0 || $status == 75 ]]; then
      break  # done, or a user's stop (rerun the same command to resume)
    fi
    why=$(_mb_not_retried_because "$status" "$MB_JOB_LOG")
    [[ -n $why || -z $MB_STOP_SIGNAL ]] || why="it was stopped (SIG$MB_STOP_SIGNAL)"
    if [[ -n $why ]]; then
      echo "$(basename "$0"): the job exited with $status: not restarting, since $why" \
        "(restarts mend lost hosts, cut links and dead ranks)" >&2
      break
    fi
    if [[ -z $reason ]] && ((restarts >= max)); then
      echo "$(basename "$0"): giving up after $(_mb_plural "$restarts" restart) (--max-restarts $max):" \
        "the last run exited with $status: $(_mb_last_error "$MB_JOB_LOG")" >&2
      break
    fi
    if ! _mb_wait_for_hosts; then
      echo "$(basename "$0"): giving up: ${#_mbe_live[@]} of ${#_mbe_hosts[@]} hosts answer" \
        "(${_mbe_live[*]:-none}) after --host-wait $_mbe_host_wait s, fewer than --min-hosts" \
        "$_mbe_min_hosts; the last run exited with $status. The checkpoint is in $run_dir: rerun" \
        "the same command once the hosts are back" >&2
      break
    fi
    local lost=() failed_step resume_step new_ranks=0
    for host in "${_mbe_hosts[@]}"; do
      if [[ " ${_mbe_live[*]} " == *" $host "* ]]; then
        new_ranks=$((new_ranks + slots[$host]))
      else
        lost+=("$host")
      fi
    done
    [[ -n $nproc && $nproc -lt $new_ranks ]] && new_ranks=$nproc
    failed_step=$(mb_last_logged_step "$run_dir")
    resume_step=$(mb_checkpoint_step "$run_dir")
    local what counter
    if [[ -n $reason ]]; then
      counter="not counted against --max-restarts $max"
      what="every host answers again after step $failed_step"
      ((${#lost[@]} == 0)) || what="hosts answer again after step $failed_step (still lost: ${lost[*]})"
    else
      restarts=$((restarts + 1))
      counter="restart $restarts of $max"
      if ((${#lost[@]} > 0)); then
        reason="host lost"
        what="host ${lost[*]} lost after step $failed_step"
        ((${#lost[@]} == 1)) || what="hosts ${lost[*]} lost after step $failed_step"
      else
        reason="rank failed"
        what="the job failed (exit $status) after step $failed_step; every host answers"
      fi
    fi
    echo "$(basename "$0"): $what; restarting on $(_mb_plural "${#_mbe_live[@]}" host)," \
      "$(_mb_plural "$new_ranks" rank), from step $resume_step" \
      "($(_mb_plural $((failed_step > resume_step ? failed_step - resume_step : 0)) step) to redo), $counter" >&2
    local lost_list
    lost_list=$(IFS=,; echo "${lost[*]}")
    export MEGABATCH_RESTART="$restarts/$max" MEGABATCH_RESTART_REASON="$reason"
    export MEGABATCH_RESTART_RANKS_BEFORE=$ranks_before MEGABATCH_RESTART_LOST_HOSTS=$lost_list
    export MEGABATCH_RESTART_FAILED_STEP=$failed_step MEGABATCH_RESTART_FAILED_AT=$ended_at
    restart_env=(-x MEGABATCH_RESTART -x MEGABATCH_RESTART_REASON -x MEGABATCH_RESTART_RANKS_BEFORE
      -x MEGABATCH_RESTART_LOST_HOSTS -x MEGABATCH_RESTART_FAILED_STEP -x MEGABATCH_RESTART_FAILED_AT)
  done
  MB_JOB_STATUS=$status
  trap - USR1 TERM INT HUP
  rm -rf "$_mbe_dir"
  unset MB_JOB_LOG MB_JOB_WATCHER
}
