#!/usr/bin/env bash
# Builds megabatch against LibTorch 2.6 (Debian 13's libtorch-dev, CPU) inside the trixie root of
# scripts/trixie-root.sh, which it makes on first use (a few minutes). Builds the binaries that
# the tests labelled torch2 need (target megabatch_torch2, tests/Torch2.cmake), with ccache.
# scripts/test.sh runs those tests:
#   scripts/trixie-root.sh run ctest --test-dir build-torch2 -L torch2 --output-on-failure
#   scripts/build-torch2.sh [BUILD_DIR] [extra cmake args...]   default BUILD_DIR: build-torch2
# MEGABATCH_TORCH2_TARGET=all builds everything (benchmarks included).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build-torch2}
shift || true
export MEGABATCH_BUILD_JOBS=${MEGABATCH_BUILD_JOBS:-$(nproc)}
start=$(date +%s)
bash scripts/trixie-root.sh setup
bash scripts/trixie-root.sh run bash -c '
  set -euo pipefail
  build_dir=$1
  shift
  # ccache: the root keeps its cache (/root/.cache/ccache), so a kept root rebuilds from it. Every
  # megabatch object includes the precompiled LibTorch header, which ccache refuses without this
  # sloppiness (it counted 92 of 95 compilations "could not use precompiled header"); BASEDIR
  # lets another checkout of the same sources hit too.
  export CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
  export CCACHE_BASEDIR=$PWD
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE:-Release} \
    -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DMEGABATCH_CUDA=OFF "$@"
  cmake --build "$build_dir" -j "$MEGABATCH_BUILD_JOBS" --target "${MEGABATCH_TORCH2_TARGET:-megabatch_torch2}"
' build "$build_dir" "$@"
echo "build-torch2.sh: built $build_dir against LibTorch 2.6 in $(($(date +%s) - start)) s"
