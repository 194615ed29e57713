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
