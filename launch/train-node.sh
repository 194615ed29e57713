#!/usr/bin/env bash
# One node, N ranks (one per GPU) under mpirun, each rank bound to its own cores.
# See docs/operations.md.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() {
  cat <<'EOF'
Usage: launch/train-node.sh [options] CONFIG [key=value ...]

Runs `mpirun -np N megabatch train --config CONFIG [key=value ...]` on this node: one rank per
GPU (rank r drives GPU r), each rank bound to its own block of cores, OMP_NUM_THREADS set to
the size of that block.

Options:
  -n, --nproc N        ranks; default: the visible GPUs (CUDA_VISIBLE_DEVICES or nvidia-smi).
                       Required on a node without GPUs (then add --cpu).
  --cpus-per-rank C    cores per rank; default: physical cores / N (at least 1)
  --bind MODE          core (default): --map-by ppr:N:node:PE=C --bind-to core
                       numa: ranks fill NUMA domains in order, each bound to its domain
                       none: no binding (--bind-to none), e.g. when sharing the node
  --cpu                train on the CPU (adds train.device=cpu)
  --dry-run            print the mpirun command, run nothing
  -h, --help           this text

Everything after CONFIG is passed to `megabatch train` unchanged. Extra mpirun options go in
$MB_MPIRUN_ARGS (split on spaces), e.g. MB_MPIRUN_ARGS="--report-bindings".
When more ranks than cores are asked for, binding is dropped and --oversubscribe added.
Runs as root (containers) get --allow-run-as-root; no one else does.

The binary: $MEGABATCH_BIN, else <repo>/build/megabatch, else megabatch on PATH.
The script's exit code is the job's: 0 done, 1 failure, 2 config, 3 data, 4 checkpoint,
75 stopped after a checkpoint (rerun the same command to resume). To stop cleanly, send the
script SIGTERM or SIGINT (Ctrl-C) or SIGUSR1: it asks every rank to checkpoint and stop,
within seconds, and exits 75. A second Ctrl-C ends the job at once. See docs/operations.md.

Examples:
  launch/train-node.sh configs/gpt2-small.yaml                 # all GPUs of the node
  launch/train-node.sh -n 4 configs/lstm-multitf.yaml optim.lr=2e-3    # 4 of them
  launch/train-node.sh -n 2 --cpu configs/demo.yaml            # 2 CPU ranks
EOF
}

nproc_arg="" cpus_per_rank="" bind=core cpu=0 dry_run=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    -n|--nproc|-np) [[ $# -ge 2 ]] || mb_die 2 "$1 needs a number"; nproc_arg=$2; shift 2 ;;
    --nproc=*) nproc_arg=${1#*=}; shift ;;
    --cpus-per-rank) [[ $# -ge 2 ]] || mb_die 2 "$1 needs a number"; cpus_per_rank=$2; shift 2 ;;
    --cpus-per-rank=*) cpus_per_rank=${1#*=}; shift ;;
    --bind) [[ $# -ge 2 ]] || mb_die 2 "--bind needs core, numa, or none"; bind=$2; shift 2 ;;
    --bind=*) bind=${1#*=}; shift ;;
    --cpu) cpu=1; shift ;;
    --dry-run) dry_run=1; shift ;;
    --) shift; break ;;
    -*) mb_die 2 "unknown option $1" "see launch/train-node.sh --help" ;;
    *) break ;;
  esac
done
[[ $# -ge 1 ]] || mb_die 2 "no CONFIG given" "usage: launch/train-node.sh [options] CONFIG [key=value ...]"
config=$1
shift
[[ $bind == core || $bind == numa || $bind == none ]] || mb_die 2 "--bind $bind: expected core, numa, or none"

if [[ -z $nproc_arg ]]; then
  nproc_arg=$(mb_count_gpus)
  [[ $nproc_arg -gt 0 ]] || mb_die 2 "no GPU found (CUDA_VISIBLE_DEVICES and nvidia-smi), so the rank count is unknown" \
    "give it: launch/train-node.sh -n 2 --cpu CONFIG"
fi
[[ $nproc_arg =~ ^[1-9][0-9]*$ ]] || mb_die 2 "--nproc $nproc_arg is not a positive number"
np=$nproc_arg
cores=$(mb_count_cores)
if [[ -n $cpus_per_rank ]]; then
  [[ $cpus_per_rank =~ ^[1-9][0-9]*$ ]] || mb_die 2 "--cpus-per-rank $cpus_per_rank is not a positive number"
else
  cpus_per_rank=$(( cores / np ))
  [[ $cpus_per_rank -ge 1 ]] || cpus_per_rank=1
fi

mpi=(mpirun -np "$np" "${MB_ROOT_FLAGS[@]}")
if (( np * cpus_per_rank > cores )); then
  echo "train-node.sh: $np ranks x $cpus_per_rank cores > $cores cores: no binding, oversubscribed" >&2
  bind=none
  mpi+=(--oversubscribe)
fi
case $bind in
  core) mpi+=(--map-by "ppr:$np:node:PE=$cpus_per_rank" --bind-to core) ;;
  numa)
    domains=$(lscpu -p=NODE 2>/dev/null | grep -v '^#' | sort -u | wc -l)
    [[ $domains -ge 1 ]] || domains=1
    (( np % domains == 0 )) || mb_die 2 "--bind numa: $np ranks do not split evenly over $domains NUMA domains" \
      "use --bind core, or a rank count that is a multiple of $domains"
    mpi+=(--map-by "ppr:$(( np / domains )):numa" --bind-to numa) ;;
  none) mpi+=(--bind-to none) ;;
esac
# Ranks on this node inherit mpirun's environment, OMP_NUM_THREADS included.
export OMP_NUM_THREADS=$cpus_per_rank
# shellcheck disable=SC2206  # MB_MPIRUN_ARGS is a list of words on purpose
[[ -n ${MB_MPIRUN_ARGS:-} ]] && mpi+=(${MB_MPIRUN_ARGS})

bin=$(mb_find_bin)
cmd=("${mpi[@]}" "$bin" train --config "$config")
[[ $cpu == 1 ]] && cmd+=(train.device=cpu)
cmd+=("$@")

if [[ $dry_run == 1 ]]; then
  echo "OMP_NUM_THREADS=$OMP_NUM_THREADS"
  mb_show_command "${cmd[@]}"
  exit 0
fi
# Note [Stop signals in the launchers] (common.sh): SIGTERM, SIGINT and SIGHUP reach mpirun as
# SIGUSR1, so the job checkpoints and this script exits 75.
mb_run_job "${cmd[@]}"
exit "$MB_JOB_STATUS"
