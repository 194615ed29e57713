#!/usr/bin/env bash
# Submits a hyperparameter sweep: a job array (slurm/sweep.sbatch, one task per override set)
# and a summary job that starts when every task has ended (--dependency=afterany), whatever
# their exit codes and however often they were preempted and requeued.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

usage() {
  cat <<'USAGE'
Usage: slurm/sweep.sh [--parallel K] [--dir DIR] [--SBATCH-OPTION=VALUE ...] CONFIG [key=value ...]

  MB_SWEEP='optim.lr=1e-3;optim.lr=3e-3;optim.lr=1e-2' slurm/sweep.sh configs/lstm-multitf.yaml

MB_SWEEP holds override sets separated by ';' (default: optim.lr = 1e-3, 2e-3, 5e-3, 1e-2).
Options:
  --parallel K   at most K array tasks run at once (--array=0-N%K); default: no limit
  --dir DIR      where the runs go (MB_SWEEP_DIR); default runs/sweep-<array job id>
  -h, --help     this text
Any other option, written --name=value, goes to sbatch for the array tasks and overrides the
#SBATCH lines of slurm/sweep.sbatch: --partition=gpu --account=proj --time=2:00:00.
A CPU sweep: MB_DEVICE=cpu slurm/sweep.sh --gpus-per-node=0 --cpus-per-task=2 CONFIG
The summary job prints, per run, the best validation loss and its step, best first.
All the runs in one picture: build/megabatch plot DIR (writes DIR/runs.png); in TensorBoard:
tensorboard --logdir DIR.
USAGE
}

parallel="" dir="" sbatch_opts=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --parallel) parallel=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --*=*) sbatch_opts+=("$1"); shift ;;
    -*) echo "sweep.sh: unknown option $1 (sbatch options must be written --name=value; see --help)" >&2; exit 2 ;;
    *) break ;;
  esac
done
[[ $# -ge 1 ]] || { usage >&2; exit 2; }
export MB_SWEEP=${MB_SWEEP:-optim.lr=1e-3;optim.lr=2e-3;optim.lr=5e-3;optim.lr=1e-2}
IFS=';' read -ra sets <<<"$MB_SWEEP"
array="0-$(( ${#sets[@]} - 1 ))${parallel:+%$parallel}"
[[ -n $dir ]] && export MB_SWEEP_DIR=$dir
export MEGABATCH_HOME=${MEGABATCH_HOME:-$(cd "$here/.." && pwd)}

array_id=$(sbatch --parsable --array="$array" "${sbatch_opts[@]}" "$here/sweep.sbatch" "$@")
array_id=${array_id%%;*}
runs=${MB_SWEEP_DIR:-runs/sweep-$array_id}
summary_id=$(sbatch --parsable --dependency="afterany:$array_id" --job-name=megabatch-sweep-summary \
  --ntasks=1 --cpus-per-task=1 --time=00:10:00 --output="slurm-%x-%j.out" \
  --wrap="python3 '$here/sweep-summary.py' '$runs'")
echo "sweep.sh: array job $array_id (${#sets[@]} tasks: $array) -> $runs"
echo "sweep.sh: summary job ${summary_id%%;*} runs after it (afterany): slurm-megabatch-sweep-summary-${summary_id%%;*}.out"
