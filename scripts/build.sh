#!/usr/bin/env bash
# Configures and builds megabatch (CPU with Debian's LibTorch unless told otherwise).
#   scripts/build.sh [--target T]... [BUILD_DIR] [extra cmake args...]   default BUILD_DIR: build
#     --target T              build only T (and what it needs), e.g. --target megabatch for the
#                             binary alone; repeatable. Default: every target (tests included).
#   MEGABATCH_BUILD_TARGET    the same as --target, for one target
#   MEGABATCH_BUILD_JOBS      parallel jobs (default: nproc)
# A later call in the same BUILD_DIR keeps what the first configured (compiler, launcher, type),
# so after the demo's `--target megabatch` a full build compiles only the rest.
# No compiler cache unless asked (-DCMAKE_CXX_COMPILER_LAUNCHER=ccache): on a cold cache it made
# the demo's build about 20% slower (hashing and storing the 460 MB precompiled header).
set -euo pipefail
cd "$(dirname "$0")/.."
targets=()
[[ -n ${MEGABATCH_BUILD_TARGET:-} ]] && targets+=("$MEGABATCH_BUILD_TARGET")
while [[ $# -gt 0 && $1 == --target ]]; do
  [[ $# -ge 2 ]] || { echo "build.sh: --target needs a target name, e.g. --target megabatch" >&2; exit 2; }
  targets+=("$2")
  shift 2
done
build_dir=${1:-build}
shift || true
jobs=${MEGABATCH_BUILD_JOBS:-$(nproc)}
# How long the build will take, before it starts: the objects not yet compiled, at the CPU time
# one took on a 2-core EPYC VM (README.md, "Build time"): about 36 s for a unity unit of 16
# sources, 14 s for one source. ccache hits make it shorter. (Objects there but out of date are
# not counted: `ninja -n` cannot say, since the glob check always re-runs CMake in a dry run.)
estimate() {
  command -v ninja >/dev/null || return 0
  local units=0 per_unit=14 cores minutes object
  while read -r object; do
    [[ -e $build_dir/$object ]] || units=$((units + 1))
  done < <(ninja -C "$build_dir" -t commands "${targets[@]}" 2>/dev/null | grep -oE ' -o [^ ]+\.o ' | awk '{print $2}')
  ((units > 0)) || return 0
  grep -q "^MEGABATCH_UNITY_BUILD:BOOL=ON" "$build_dir/CMakeCache.txt" && per_unit=36
  cores=$((jobs < units ? jobs : units))
  minutes=$(((units * per_unit + cores * 60 - 1) / (cores * 60)))
  echo "build.sh: $units compile units to build ${targets[*]:-everything}: about $minutes min on $jobs cores (less where ccache has them)"
}
start=$(date +%s)
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE:-Release} "$@"
target_args=()
for t in "${targets[@]}"; do target_args+=(--target "$t"); done
estimate
cmake --build "$build_dir" -j "$jobs" "${target_args[@]}"
echo "build.sh: built ${targets[*]:-everything} in $build_dir in $(($(date +%s) - start)) s"
