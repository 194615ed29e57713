#!/usr/bin/env bash
# Submits a walk-forward whose folds start fresh (walk.warm_start: false) as a job array: one
# task per fold (slurm/walk-fold.sbatch, megabatch walk --fold DAY), then a job that starts when
# every task has ended (slurm/walk.sbatch, --dependency=afterany) and runs megabatch walk: it
# finds the folds done, stitches RUN/predictions.h5 and reports. A fold whose task failed for
# good, that job trains itself. Folds already done (an earlier submission) are skipped by their
# tasks in seconds.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

usage() {
  cat <<'USAGE'
Usage: slurm/walk.sh [--parallel K] [--SBATCH-OPTION=VALUE ...] CONFIG [key=value ...]

  slurm/walk.sh --parallel 4 configs/demo-walk.yaml walk.warm_start=false

Options:
  --parallel K   at most K folds run at once (--array=0-N%K); default: no limit
  -h, --help     this text
Any other option, written --name=value, goes to sbatch for every job (the folds and the final
walk) and overrides the #SBATCH lines of the templates: --partition=gpu --time=2:00:00
--ntasks-per-node=2 --gpus-per-node=2 (two ranks per fold).
A CPU walk: MB_DEVICE=cpu slurm/walk.sh --gpus-per-node=0 --cpus-per-task=2 CONFIG ...
The folds are listed by megabatch walk --plan, here, before anything is submitted.
USAGE
}

parallel="" sbatch_opts=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --parallel) parallel=$2; shift 2 ;;
    --*=*) sbatch_opts+=("$1"); shift ;;
    -*) echo "walk.sh: unknown option $1 (sbatch options must be written --name=value; see --help)" >&2; exit 2 ;;
    *) break ;;
  esac
done
[[ $# -ge 1 ]] || { usage >&2; exit 2; }
export MEGABATCH_HOME=${MEGABATCH_HOME:-$(cd "$here/.." && pwd)}
MB_HOME=$MEGABATCH_HOME
source "$here/../launch/common.sh"
bin=$(mb_find_bin)

# The plan: one JSON line per fold. Folds with no sample to predict need no task.
plan=$("$bin" walk --config "$@" --plan) || { echo "walk.sh: megabatch walk --plan failed (above); nothing submitted" >&2; exit 2; }
folds=() chained=""
while IFS= read -r line; do
  [[ $line == '{'* ]] || continue
  name=$(sed -n 's/.*"fold":"\([^"]*\)".*/\1/p' <<<"$line")
  begin=$(sed -n 's/.*"predict_begin":\([0-9]*\).*/\1/p' <<<"$line")
  end=$(sed -n 's/.*"predict_end":\([0-9]*\).*/\1/p' <<<"$line")
  [[ -z $chained && $line == *'"init_from":"'*/folds/* ]] && chained=$name
  (( end > begin )) && folds+=("$name")
done <<<"$plan"
if [[ -n $chained ]]; then
  echo "walk.sh: the folds start from each other's weights (walk.warm_start: true; fold $chained" \
    "needs the one before it), so they cannot run side by side" >&2
  echo "hint: add walk.warm_start=false to run the folds as a job array, or submit the walk as one" \
    "job: sbatch slurm/walk.sbatch $*" >&2
  exit 2
fi
(( ${#folds[@]} > 0 )) || { echo "walk.sh: the walk has no fold with a sample to predict (megabatch walk --plan)" >&2; exit 2; }

export MB_WALK_FOLDS="${folds[*]}"
array="0-$(( ${#folds[@]} - 1 ))${parallel:+%$parallel}"
array_id=$(sbatch --parsable --array="$array" "${sbatch_opts[@]}" "$here/walk-fold.sbatch" "$@")
array_id=${array_id%%;*}
walk_id=$(sbatch --parsable --dependency="afterany:$array_id" "${sbatch_opts[@]}" "$here/walk.sbatch" "$@")
echo "walk.sh: array job $array_id (${#folds[@]} folds: $array): ${folds[*]}"
echo "walk.sh: walk job ${walk_id%%;*} runs after it (afterany): it stitches the predictions and reports"
