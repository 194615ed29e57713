#!/usr/bin/env bash
# The main job, end to end on CPU: install dependencies, build, make the demo data, train the
# demo LSTM with `mpirun -np 2`, plot the curves, and evaluate the result.
#   scripts/demo.sh            (run from anywhere; needs root or sudo for apt)
set -euo pipefail
cd "$(dirname "$0")/.."

demo_start=$(date +%s)
rest_note=""
# apt in two parts: what compiling needs first, then the rest (Python and matplotlib
# for the plot, about a quarter of apt's time on a fresh machine) in the background while the
# build runs, where it mostly uses the core left idle while the precompiled header is built.
# sudo must not ask for a password in the background: without root or a cached sudo, it all
# installs first.
bash scripts/setup.sh --build-only
rest_pid=""
if [[ $(id -u) -eq 0 ]] || sudo -n true 2>/dev/null; then
  mkdir -p build
  rest_log=build/setup-rest.log
  (
    start=$(date +%s)
    rc=0
    bash scripts/setup.sh || rc=$?
    echo "background install: $(($(date +%s) - start)) s, exit $rc"
    exit $rc
  ) > "$rest_log" 2>&1 &
  rest_pid=$!
  # If the build fails, let apt finish rather than leave dpkg half done.
  trap '[[ -n $rest_pid ]] && wait $rest_pid' EXIT
  echo "demo: installing the rest (Python for the plot) in the background while building; log: $rest_log"
else
  bash scripts/setup.sh
fi
setup_end=$(date +%s)
# Only the binary the demo runs: the tests, fuzz targets and benches come with scripts/test.sh,
# which reuses these objects. scripts/build.sh prints its estimate before it starts.
bash scripts/build.sh --target megabatch build
build_end=$(date +%s)
if [[ -n $rest_pid ]]; then
  if ! wait $rest_pid; then
    rest_pid=""
    echo "demo: installing the Python packages failed (log: $rest_log, its end below); fix apt, then run" \
      "scripts/demo.sh again (what is built and installed is kept)" >&2
    tail -n 20 "$rest_log" >&2
    exit 1
  fi
  rest_pid=""
  rest_note=" (then $(tail -n 1 "$rest_log" | sed -n 's/^background install: \([0-9]*\) s.*/\1/p') s in the background, alongside the build)"
fi
mb=./build/megabatch

mkdir -p data
if [[ ! -f data/demo.h5 ]]; then
  $mb data synth-series --out data/demo.h5
fi

run_dir="runs/demo-$(date +%Y%m%d-%H%M%S)"
mpi_flags=(--oversubscribe)
[[ $(id -u) -eq 0 ]] && mpi_flags+=(--allow-run-as-root)
# Containers without ptrace: disable the CMA single-copy path of Open MPI's shared memory.
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}

echo "== training: mpirun -np 2 megabatch train --config configs/demo.yaml run.dir=$run_dir"
start=$(date +%s)
mpirun -np 2 "${mpi_flags[@]}" $mb train --config configs/demo.yaml "run.dir=$run_dir"
train_end=$(date +%s)
echo "== trained in $((train_end - start)) s"

$mb plot "$run_dir"
echo "== evaluation of the final checkpoint on the test split"
eval_out=$($mb eval --checkpoint "$run_dir" --split test)
echo "$eval_out"
echo
echo "== result: $run_dir"
ls -la "$run_dir" "$run_dir/checkpoints"
echo "curves: $run_dir/curves.png"
echo "last metrics:"
tail -n 3 "$run_dir/metrics.jsonl"
# The demo checks its own result (CI runs it first, scripts/test.sh): a picture was drawn and the
# evaluation printed its metrics. Any command that failed has already ended it (set -e).
demo_fail() {
  echo "demo: $1" >&2
  exit 1
}
[[ -s $run_dir/curves.png ]] || demo_fail "megabatch plot wrote no $run_dir/curves.png"
[[ $(head -c 8 "$run_dir/curves.png" | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]] ||
  demo_fail "$run_dir/curves.png is not a PNG file"
grep -qE '^ +test_loss +[0-9.eE+-]+$' <<<"$eval_out" ||
  demo_fail "megabatch eval printed no test_loss for $run_dir (its output is above)"
grep -qE '^ +zero forecast +mse [0-9.eE+-]+ +skill' <<<"$eval_out" ||
  demo_fail "megabatch eval printed no baselines for $run_dir (its output is above)"
echo "== demo checked: $run_dir/curves.png is a PNG, and the evaluation printed test_loss and" \
  "the baselines it beats or not"
echo "== the demo took $(($(date +%s) - demo_start)) s: setup $((setup_end - demo_start)) s$rest_note," \
  "build $((build_end - setup_end)) s, training $((train_end - start)) s"
