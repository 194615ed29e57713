#!/usr/bin/env bash
# One process, no mpirun: a single GPU, or the CPU. See docs/operations.md.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() {
  cat <<'EOF'
Usage: launch/train-single.sh [options] CONFIG [key=value ...]

Runs `megabatch train --config CONFIG [key=value ...]` as one plain process (a world of one;
no mpirun, no MPI). Use it for one GPU, or for the CPU.

Options:
  --gpu I          use only GPU I (sets CUDA_VISIBLE_DEVICES=I); the trainer then sees cuda:0
  --cpu            train on the CPU even where GPUs exist (adds train.device=cpu)
  --threads N      CPU threads: adds train.threads=N and sets OMP_NUM_THREADS=N; default: the
                   trainer's own choice (the CPUs this process may run on)
  --dry-run        print the command and the environment it sets, run nothing
  -h, --help       this text

Everything after CONFIG is passed to `megabatch train` unchanged (dotted overrides such as
optim.lr=1e-3 train.max_steps=100, or --print-config).

The binary: $MEGABATCH_BIN, else <repo>/build/megabatch, else megabatch on PATH.
The script execs the trainer, so its exit code is the trainer's (0 done, 1 failure, 2 config,
3 data, 4 checkpoint, 75 stopped by SIGTERM/SIGUSR1/SIGINT after a checkpoint: run the same
command again to resume).

Examples:
  launch/train-single.sh configs/demo.yaml
  launch/train-single.sh --gpu 1 configs/lstm-multitf.yaml optim.lr=1e-3
  launch/train-single.sh --cpu --threads 4 configs/demo.yaml train.max_steps=50
EOF
}

gpu="" cpu=0 threads="" dry_run=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --gpu) [[ $# -ge 2 ]] || mb_die 2 "--gpu needs a GPU index"; gpu=$2; shift 2 ;;
    --gpu=*) gpu=${1#*=}; shift ;;
    --cpu) cpu=1; shift ;;
    --threads) [[ $# -ge 2 ]] || mb_die 2 "--threads needs a number"; threads=$2; shift 2 ;;
    --threads=*) threads=${1#*=}; shift ;;
    --dry-run) dry_run=1; shift ;;
    --) shift; break ;;
    -*) mb_die 2 "unknown option $1" "see launch/train-single.sh --help" ;;
    *) break ;;
  esac
done
[[ $# -ge 1 ]] || mb_die 2 "no CONFIG given" "usage: launch/train-single.sh [options] CONFIG [key=value ...]"
config=$1
shift
[[ -z $gpu || $gpu =~ ^[0-9]+$ ]] || mb_die 2 "--gpu $gpu is not a GPU index" "use --gpu 0, --gpu 1, ..."
[[ -z $gpu || $cpu == 0 ]] || mb_die 2 "--gpu and --cpu exclude each other"
[[ -z $threads || $threads =~ ^[1-9][0-9]*$ ]] || mb_die 2 "--threads $threads is not a positive number"

bin=$(mb_find_bin)
[[ -n $gpu ]] && export CUDA_VISIBLE_DEVICES=$gpu
[[ -n $threads ]] && export OMP_NUM_THREADS=$threads
cmd=("$bin" train --config "$config")
[[ $cpu == 1 ]] && cmd+=(train.device=cpu)
[[ -n $threads ]] && cmd+=("train.threads=$threads")
cmd+=("$@")

if [[ $dry_run == 1 ]]; then
  [[ -n $gpu ]] && echo "CUDA_VISIBLE_DEVICES=$gpu"
  [[ -n $threads ]] && echo "OMP_NUM_THREADS=$threads"
  mb_show_command "${cmd[@]}"
  exit 0
fi
if [[ -n $MB_STOP_SIGNAL ]]; then
  echo "$(basename "$0"): SIG$MB_STOP_SIGNAL before the trainer started: not starting it; rerun the" \
    "same command to resume (exit 75)" >&2
  exit 75
fi
trap - USR1 TERM INT HUP  # the trainer takes them from here on
exec "${cmd[@]}"
