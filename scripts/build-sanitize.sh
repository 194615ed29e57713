#!/usr/bin/env bash
# Configures and builds the sanitizer + fuzzing test build with clang: the unit tests and the
# libFuzzer targets only, instrumented with AddressSanitizer + UndefinedBehaviorSanitizer
# (docs/reliability.md, "Sanitizers and fuzzing"). scripts/test.sh runs its tests.
#   scripts/build-sanitize.sh [BUILD_DIR] [extra cmake args...]   default BUILD_DIR: build-asan
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build-asan}
shift || true
jobs=${MEGABATCH_BUILD_JOBS:-$(nproc)}
for tool in clang clang++; do
  command -v "$tool" >/dev/null ||
    { echo "build-sanitize.sh: $tool not found; run scripts/setup.sh --tests" >&2; exit 1; }
done
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
start=$(date +%s)
# -O1 with line tables: readable sanitizer stacks at a fraction of -O0's run time and -g's size.
CC=clang CXX=clang++ cmake -S . -B "$build_dir" -G Ninja "${launcher[@]}" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only" \
  "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only" \
  -DMEGABATCH_SANITIZE=address,undefined -DMEGABATCH_FUZZ=ON \
  -DMEGABATCH_UNIT_TESTS_ONLY=ON -DMEGABATCH_BENCH=OFF -DMEGABATCH_CUDA=OFF "$@"
cmake --build "$build_dir" -j "$jobs" --target megabatch_unit_tests megabatch_fuzzers
echo "build-sanitize.sh: built $build_dir in $(( $(date +%s) - start )) s"
