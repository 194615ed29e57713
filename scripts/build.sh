#!/usr/bin/env bash
# Configures and builds megabatch (CPU with Debian's LibTorch unless told otherwise).
#   scripts/build.sh [BUILD_DIR] [extra cmake args...]   default BUILD_DIR: build
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build}
shift || true
jobs=${MEGABATCH_BUILD_JOBS:-$(nproc)}
start=$(date +%s)
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE:-Release} "$@"
cmake --build "$build_dir" -j "$jobs"
echo "build.sh: built $build_dir in $(( $(date +%s) - start )) s"
