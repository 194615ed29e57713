#!/usr/bin/env bash
# The test command: installs everything the tests need, builds, and runs the suite in two CTest
# runs, each ending in its summary line; the command fails when either run fails.
#  0. The demo first (scripts/demo.sh, the README's first command, as a user on a fresh machine
#     runs it; it checks its own picture and evaluation): the command fails when it fails, after
#     the other stages. The main build then compiles only what the demo did not.
#     MEGABATCH_DEMO_STAGE=0 leaves it out.
#  1. The main suite (LibTorch 1.13, build/). It includes the sanitizer stage: the unit tests
#     under AddressSanitizer + UndefinedBehaviorSanitizer and the bounded libFuzzer runs, from a
#     second build with clang in build-asan (CTest entries sanitize.unit and sanitize.fuzz;
#     MEGABATCH_SANITIZE_TESTS=0 leaves that stage out).
#  2. The LibTorch 2.6 stage, in a Debian 13 root (scripts/trixie-root.sh). By default the root
#     holds Debian's CUDA LibTorch 2.6 with CUDA 12.4, NCCL 2.22, NVML and python3-torch-cuda
#     (MEGABATCH_TORCH2_FLAVOUR=cuda): scripts/build-cuda.sh compiles the full CUDA build
#     (every *Cuda.cpp, the NCCL backend, NVML, the GPU test binary) into
#     build-cuda/ with 0 compiler/linker warnings allowed, and the tests labelled torch2 (every
#     unit test, the parity tests against PyTorch 2.6, a 2-rank SIGTERM -> resume, the checkpoint
#     round trip, fp16 against torch.amp.GradScaler: tests/Torch2.cmake) and cuda-build (what a
#     CUDA binary does without a GPU: tests/CudaBuild.cmake) run with that binary on this
#     machine, which has no GPU. ~2.8 GB of packages, an 11 GB root.
#     MEGABATCH_TORCH2_FLAVOUR=cpu builds against the CPU LibTorch 2.6 instead
#     (scripts/build-torch2.sh, build-torch2/, label torch2 only).
#     MEGABATCH_TORCH2_TESTS=0 leaves the stage out (it needs root and the Debian mirror).
#  3. The CPU container image (scripts/image.sh cpu: podman, a debootstrap base; its test stage
#     makes the demo data and trains the demo with megabatch-launch -n 2 inside the image). It
#     reuses what the stages before it downloaded and compiled: the host's apt archive (the same
#     Debian 12 packages) and the main build's compiler cache, so it costs the package layer's
#     install, a link and the test stage (docs/containers.md, "The CPU image in CI").
#     MEGABATCH_IMAGE_TESTS=0 leaves it out. MEGABATCH_CUDA_IMAGE=1 also builds the CUDA image
#     (37 min here).
# Every stage prints how long it took.
#   scripts/test.sh [ctest args...]     e.g. scripts/test.sh -L unit (passed to both runs)
set -euo pipefail
cd "$(dirname "$0")/.."
# CPU seconds of every finished child process (fields cutime + cstime of /proc/PID/stat): on a
# shared machine, wall time depends on the other load, CPU time much less.
tick=$(getconf CLK_TCK)
children_cpu() {  # in clock ticks
  local fields
  read -ra fields </proc/$$/stat
  echo $((fields[15] + fields[16]))
}
started=$SECONDS
stage_start=$SECONDS
stage_cpu=$(children_cpu)

stage_done() {
  local cpu
  cpu=$(children_cpu)
  echo "test.sh: stage '$1' took $((SECONDS - stage_start)) s (CPU $(((cpu - stage_cpu) / tick)) s, load $(cut -d' ' -f1-3 /proc/loadavg))"
  stage_start=$SECONDS
  stage_cpu=$cpu
}

summaries=()
demo_status=0
run_suite() {  # run_suite NAME LOG ctest...: runs a CTest and keeps its summary line
  local name=$1 log=$2 rc
  shift 2
  echo "test.sh: the $name suite"
  "$@" 2>&1 | tee "$log" && rc=0 || rc=${PIPESTATUS[0]}
  summaries+=("$name: $(grep -E '% tests passed' "$log" | tail -n 1)")
  return "$rc"
}

# Stage 1: the README's first command, as a user on a fresh machine runs it (its own apt, the
# build of the binary, training with mpirun, the plot and the evaluation, which it checks), so
# CI fails whenever that command fails. Only ccache is installed before it: the demo's objects
# then enter the compiler cache that the CPU image's build (stage 3) reads, and the main build
# below compiles only what the demo did not (the tests, fuzz targets and benches).
if [[ ${MEGABATCH_DEMO_STAGE:-1} == 1 ]]; then
  if [[ ! -f build/CMakeCache.txt ]] && ! command -v ccache >/dev/null; then
    SUDO=""
    [[ $(id -u) -eq 0 ]] || SUDO=sudo
    $SUDO apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends ccache >/dev/null
  fi
  echo "test.sh: the demo (scripts/demo.sh), the README's first command"
  (. scripts/ccache-env.sh
    export CMAKE_CXX_COMPILER_LAUNCHER=ccache  # read by CMake only when build/ is configured first
    bash scripts/demo.sh) 2>&1 | tee "${TMPDIR:-/tmp}/megabatch-demo.$$.log" && rc=0 || rc=${PIPESTATUS[0]}
  mkdir -p build && mv "${TMPDIR:-/tmp}/megabatch-demo.$$.log" build/demo.log
  stage_done demo
  if ((rc == 0)); then
    summaries+=("demo: passed; $(grep -E '^== the demo took' build/demo.log | tail -n 1 | sed 's/^== //')")
  else
    summaries+=("demo: FAILED (exit $rc; build/demo.log)")
    demo_status=$rc
    echo "test.sh: the demo failed (exit $rc; log: build/demo.log): the README's first command does" \
      "not work; the other stages still run, and the command fails at the end"
  fi
fi
bash scripts/setup.sh --tests
stage_done setup
sanitizer_dir=""
if [[ ${MEGABATCH_SANITIZE_TESTS:-1} == 1 ]]; then
  bash scripts/build-sanitize.sh build-asan
  sanitizer_dir="$PWD/build-asan"
  stage_done "sanitizer build"
fi
torch2=${MEGABATCH_TORCH2_TESTS:-1}
torch2_flavour=${MEGABATCH_TORCH2_FLAVOUR:-cuda}
case $torch2_flavour in
  cuda) torch2_dir=build-cuda torch2_labels='torch2|cuda-build'
    torch2_name="LibTorch 2.6 with CUDA, no GPU (Debian 13 CUDA root, build-cuda/, labels torch2 and cuda-build)" ;;
  cpu) torch2_dir=build-torch2 torch2_labels=torch2
    torch2_name="LibTorch 2.6 (Debian 13 root, build-torch2/, label torch2)" ;;
  *) echo "test.sh: MEGABATCH_TORCH2_FLAVOUR=$torch2_flavour: use cuda (default) or cpu" >&2; exit 2 ;;
esac
if [[ $torch2 == 1 ]]; then
  MEGABATCH_TRIXIE_FLAVOUR=$torch2_flavour bash scripts/trixie-root.sh setup
  stage_done "Debian 13 root ($torch2_flavour)"
  if [[ $torch2_flavour == cuda ]]; then
    bash scripts/build-cuda.sh build-cuda
    stage_done "LibTorch 2.6 CUDA build"
  else
    bash scripts/build-torch2.sh build-torch2
    stage_done "LibTorch 2.6 build"
  fi
fi
# Through ccache: the CPU image's build stage (stage 3) compiles the same sources with the same
# commands at the same path (docker/Dockerfile, SRC) and the same ccache settings
# (scripts/ccache-env.sh), so it takes its objects from this cache. A build/ that exists (the
# demo's) keeps its own settings, so that none of its objects is compiled again; the
# image's build then compiles without the cache's help.
export CCACHE_STATSLOG=$PWD/build/ccache-stats.log
rm -f "$CCACHE_STATSLOG"
main_build_args=("-DMEGABATCH_SANITIZER_BUILD_DIR=$sanitizer_dir")
[[ -f build/CMakeCache.txt ]] || main_build_args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
(. scripts/ccache-env.sh
  bash scripts/build.sh build "${main_build_args[@]}")
echo "test.sh: compiler cache, main build: $(ccache --show-log-stats 2>/dev/null | grep -E '^ *(Hits|Misses):' | tr -s ' ' | paste -sd ';')"
unset CCACHE_STATSLOG
stage_done "main build"

status=$demo_status
jobs=${MEGABATCH_TEST_JOBS:-2}
run_suite "main (LibTorch 1.13, build/)" build/ctest.log \
  ctest --test-dir build --output-on-failure --timeout 900 -j "$jobs" "$@" || status=$?
stage_done "main suite"
if [[ $torch2 == 1 ]]; then
  run_suite "$torch2_name" "$torch2_dir/ctest.log" \
    env MEGABATCH_TRIXIE_FLAVOUR="$torch2_flavour" bash scripts/trixie-root.sh run ctest --test-dir "$torch2_dir" \
    -L "$torch2_labels" --no-tests=error --output-on-failure --timeout 900 -j "$jobs" "$@" || status=$?
  stage_done "LibTorch 2.6 suite ($torch2_flavour)"
fi
if [[ ${MEGABATCH_IMAGE_TESTS:-1} == 1 ]]; then
  echo "test.sh: the CPU image (scripts/image.sh cpu)"
  bash scripts/image.sh cpu 2>&1 | tee build/image-cpu.log && rc=0 || rc=${PIPESTATUS[0]}
  summaries+=("CPU image: $(grep -E 'image.sh: localhost/megabatch:cpu is|image.sh: error' build/image-cpu.log | tail -n 1)")
  ((rc == 0)) || status=$rc
  stage_done "CPU image"
fi
if [[ ${MEGABATCH_CUDA_IMAGE:-0} == 1 ]]; then
  echo "test.sh: the CUDA image (scripts/image.sh cuda)"
  bash scripts/image.sh cuda 2>&1 | tee build/image-cuda.log && rc=0 || rc=${PIPESTATUS[0]}
  summaries+=("CUDA image: $(grep -E 'image.sh: localhost/megabatch:cuda is|image.sh: error' build/image-cuda.log | tail -n 1)")
  ((rc == 0)) || status=$rc
  stage_done "CUDA image"
fi
printf 'test.sh: %s\n' "${summaries[@]}"
echo "test.sh: all stages took $((SECONDS - started)) s (CPU $(($(children_cpu) / tick)) s); exit status $status"
exit "$status"
