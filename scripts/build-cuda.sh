#!/usr/bin/env bash
# Builds the full CUDA build of megabatch (MEGABATCH_CUDA=ON: every *Cuda.cpp, the NCCL backend,
# NVML, the GPU-only test binary) against Debian 13's CUDA LibTorch 2.6 (libtorch-cuda-dev, CUDA
# 12.4), nvidia-cuda-toolkit 12.4, libnccl-dev 2.22 and libnvidia-ml-dev, inside the CUDA root of
# scripts/trixie-root.sh (MEGABATCH_TRIXIE_FLAVOUR=cuda; made on first use, ~1.5 GB download).
# No GPU is needed to compile, link or run it. It builds the binaries of the tests
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
  # Debian builds libtorch-cuda against the release'"'"'s one CUDA toolkit, and the package records
  # no CUDA version of its own (no version.py or build-version): name the toolkit'"'"'s, so that
  # cmake/MegabatchCuda.cmake checks the pair instead of warning that it cannot.
  torch_cuda=$(dpkg-query -W -f="\${Version}" nvidia-cuda-toolkit | sed -E "s/^([0-9]+\.[0-9]+).*/\1/")
  # -Wno-dev: LibTorch'"'"'s own CMake files trip a CMake developer warning (nvtx3 in Caffe2).
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE:-Release} -Wno-dev \
    -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DMEGABATCH_CUDA=ON -DMEGABATCH_BENCH=OFF \
    -DMEGABATCH_TORCH_CUDA_VERSION="$torch_cuda" -DTORCH_CUDA_ARCH_LIST="${MEGABATCH_CUDA_ARCHS//;/ }" \
    -DCMAKE_CUDA_ARCHITECTURES="${MEGABATCH_CUDA_ARCHS//./}" "$@"
  cmake --build "$build_dir" -j "$MEGABATCH_BUILD_JOBS" --target "${MEGABATCH_CUDA_TARGET:-megabatch_cuda_build}"
' build "$build_dir" "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
# Compiler and linker warnings of this run: GCC's "file:line:col: warning:" and ld's
# "ld: warning:" / "/usr/bin/ld: warning:" (ccache replays a cached object's warnings; ninja
# rebuilds nothing that is current, so a second run counts only what it compiled again).
# CMake's configure warnings come from LibTorch's own CMake files (Debian's packaging: no kineto,
# no nvrtc hash) and are listed, not counted.
pattern='(: warning:|ld: warning:|ld\.gold: warning:)'
warnings=$(grep -cE "$pattern" "$log" || true)
cmake_warnings=$(grep -c '^CMake Warning' "$log" || true)
if ((cmake_warnings > 0)); then
  echo "build-cuda.sh: $cmake_warnings CMake configure warning(s), from LibTorch's CMake files (not counted):"
  grep -A2 '^CMake Warning' "$log" | grep -v '^--$' | sed 's/^/  /'
fi
if ((rc != 0)); then
  echo "build-cuda.sh: the CUDA build failed (exit $rc; whole log: $log)" >&2
  exit "$rc"
fi
if ((warnings > max_warnings)); then
  grep -nE "$pattern" "$log" | head -n 40 >&2
  echo "build-cuda.sh: $warnings compiler/linker warnings in $log, more than MEGABATCH_MAX_WARNINGS=$max_warnings (listed above): fix them" >&2
  exit 1
fi
echo "build-cuda.sh: built $build_dir against CUDA LibTorch 2.6 with $warnings compiler/linker warnings (limit $max_warnings) in $(($(date +%s) - start)) s"
