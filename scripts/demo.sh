#!/usr/bin/env bash
# The main job, end to end on CPU: install dependencies, build, make the demo data, train the
# demo LSTM with `mpirun -np 2`, plot the curves, and evaluate the result.
#   scripts/demo.sh            (run from anywhere; needs root or sudo for apt)
set -euo pipefail
cd "$(dirname "$0")/.."

demo_start=$(date +%s)
bash scripts/setup.sh
setup_end=$(date +%s)
# Only the binary the demo runs: the tests, fuzz targets and benches come with scripts/test.sh,
# which reuses these objects (issue 40). scripts/build.sh prints its estimate before it starts.
bash scripts/build.sh --target megabatch build
build_end=$(date +%s)
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
$mb eval --checkpoint "$run_dir" --split test
echo "== what a model must beat on this data (val MSE of the naive forecasts):"
$mb inspect data/demo.h5 | grep -E "baseline_(mean|last_value)_val_mse" || true
echo
echo "== result: $run_dir"
ls -la "$run_dir" "$run_dir/checkpoints"
echo "curves: $run_dir/curves.png"
echo "last metrics:"
tail -n 3 "$run_dir/metrics.jsonl"
echo "== the demo took $(($(date +%s) - demo_start)) s: setup $((setup_end - demo_start)) s," \
  "build $((build_end - setup_end)) s, training $((train_end - start)) s"
