#!/usr/bin/env bash
# Builds the full CUDA build of megabatch (MEGABATCH_CUDA=ON: every *Cuda.cpp, the NCCL backend,
# NVML, the GPU-only test binary) against Debian 13's CUDA LibTorch 2.6 (libtorch-cuda-dev, CUDA
# 12.4), nvidia-cuda-toolkit 12.4, libnccl-dev 2.22 and libnvidia-ml-dev, inside the CUDA root of
# scripts/trixie-root.sh (MEGABATCH_TRIXIE_FLAVOUR=cuda; made on first use, ~1.5 GB download).
# No GPU is needed to compile, link or run it (issue 26). It builds the binaries of the tests
# labelled cuda-build (target megabatch_cuda_build, tests/CudaBuild.cmake), with ccache, and
# fails when the build log holds more compiler/linker warnings than MEGABATCH_MAX_WARNINGS
# (default 0). scripts/test.sh runs those tests:
#   MEGABATCH_TRIXIE_FLAVOUR=cuda scripts/trixie-root.sh run ctest --test-dir build-cuda -L cuda-build
#   scripts/build-cuda.sh [BUILD_DIR] [extra cmake args...]   default BUILD_DIR: build-cuda
# MEGABATCH_CUDA_TARGET=all builds everything (benchmarks included); CUDA_ARCHS (default
# "8.0;9.0", A100 and H100) are the architectures LibTorch's CMake is told about (megabatch
# itself has no CUDA kernels: *Cuda.cpp files are C++ against the CUDA runtime).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build-cuda}
shift || true
export MEGABATCH_TRIXIE_FLAVOUR=cuda
export MEGABATCH_BUILD_JOBS=${MEGABATCH_BUILD_JOBS:-$(nproc)}
export MEGABATCH_CUDA_ARCHS=${CUDA_ARCHS:-8.0;9.0}
max_warnings=${MEGABATCH_MAX_WARNINGS:-0}
start=$(date +%s)
bash scripts/trixie-root.sh setup
mkdir -p "$build_dir"
log=$build_dir/build.log
set +e
bash scripts/trixie-root.sh run bash -c '
  set -euo pipefail
  build_dir=$1
  shift
  # ccache as in scripts/build-torch2.sh (the root keeps its own cache).
  export CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
  export CCACHE_BASEDIR=$PWD
  export TORCH_CUDA_ARCH_LIST=${MEGABATCH_CUDA_ARCHS//;/ }
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE:-Release} \
    -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DMEGABATCH_CUDA=ON -DMEGABATCH_BENCH=OFF \
    -DCMAKE_CUDA_ARCHITECTURES="${MEGABATCH_CUDA_ARCHS//./}" "$@"
  cmake --build "$build_dir" -j "$MEGABATCH_BUILD_JOBS" --target "${MEGABATCH_CUDA_TARGET:-megabatch_cuda_build}"
' build "$build_dir" "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
# Compiler and linker warnings of this run (ccache replays a cached object's warnings; ninja
# rebuilds nothing that is current, so a second run counts only what it compiled again). CMake's
# own configure warnings ("CMake Warning") are counted too.
warnings=$(grep -cE '(^|[^A-Za-z])(warning|Warning):|CMake Warning' "$log" || true)
if ((rc != 0)); then
  echo "build-cuda.sh: the CUDA build failed (exit $rc; whole log: $log)" >&2
  exit "$rc"
fi
if ((warnings > max_warnings)); then
  grep -nE '(^|[^A-Za-z])(warning|Warning):|CMake Warning' "$log" | head -n 40 >&2
  echo "build-cuda.sh: $warnings compiler/linker warnings in $log, more than MEGABATCH_MAX_WARNINGS=$max_warnings (listed above): fix them" >&2
  exit 1
fi
echo "build-cuda.sh: built $build_dir against CUDA LibTorch 2.6 with $warnings compiler/linker warnings in $(($(date +%s) - start)) s"
