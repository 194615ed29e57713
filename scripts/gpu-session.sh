#!/usr/bin/env bash
# One command for a session on a GPU machine, in phases (each phase one device call when a
# call is limited to 10 minutes; run the calls back to back so the build survives):
#   scripts/gpu-session.sh build     versions of everything + scripts/build-gpu.sh
#   scripts/gpu-session.sh test      ctest on the build with MEGABATCH_TEST_DEVICE=cuda
#   scripts/gpu-session.sh bench     bench/gpu/gpu_bench.py, when it exists
#   scripts/gpu-session.sh build test bench     (several phases share one time budget)
# Logs: $OUT (default out/gpu-session): build.log, test.log, bench.log, summary.txt, bench/.
# Environment (optional):
#   MB_SESSION_BUDGET_S  seconds the whole call may take (default 570); each phase is cut at it
#   BUILD_DIR            the build (default build-gpu); MEGABATCH_DEPS_DEBS (default .gpu-debs)
#   MB_CTEST_ARGS        ctest selection (default: -LE '^(slurm|style)$': SLURM needs apt to
#                        install it, the style check needs clang-format; neither is on a GPU image)
#   MB_TEST_JOBS         parallel tests (default: half the cores)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root=$(pwd)

budget=${MB_SESSION_BUDGET_S:-570}
deadline=$(( $(date +%s) + budget ))
out=${OUT:-$root/out/gpu-session}
mkdir -p "$out"
build_dir=${BUILD_DIR:-build-gpu}
summary=$out/summary.txt
phases=("$@")
[[ ${#phases[@]} -gt 0 ]] || phases=(build test)

note() { echo "gpu-session: $*" | tee -a "$summary"; }
left() { echo $(( deadline - $(date +%s) )); }

# Runs a command in its own process group, ended (TERM, then KILL) at the deadline less
# MARGIN seconds, so the call always returns in time. Returns the command's status, 124 on
# timeout.
run_until_deadline() {  # run_until_deadline MARGIN COMMAND...
  local margin=$1 pid rc
  shift
  setsid "$@" &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    if [[ $(left) -le $margin ]]; then
      echo "gpu-session: time budget reached: stopping $1" >&2
      kill -TERM -- "-$pid" 2>/dev/null
      sleep 5
      kill -KILL -- "-$pid" 2>/dev/null
      wait "$pid" 2>/dev/null
      return 124
    fi
    sleep 2
  done
  wait "$pid"
  rc=$?
  return "$rc"
}

# Open MPI as root (containers) and without ptrace (CMA single copy off), for mpirun anywhere.
if [[ $(id -u) -eq 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}

versions() {
  echo "== date: $(date -u '+%Y-%m-%d %H:%M:%S UTC'); host $(hostname); $(nproc) cores;" \
       "$(free -g | awk '/Mem:/{print $2 " GiB"}') RAM"
  # shellcheck disable=SC1091
  echo "== os: $(. /etc/os-release && echo "$PRETTY_NAME"); kernel $(uname -r)"
  echo "== git: $(git -C "$root" log -1 --format='%h %s' 2>/dev/null || echo 'not a git checkout')"
  if command -v nvidia-smi >/dev/null; then
    echo "== nvidia-smi"
    nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total,clocks.max.sm,power.limit \
      --format=csv 2>&1
  else
    echo "== nvidia-smi: not found"
  fi
  echo "== python: $(command -v python3) $(python3 --version 2>&1)"
  python3 - <<'EOF' 2>&1
import torch
print("torch", torch.__version__, "| CUDA", torch.version.cuda,
      "| cuDNN", torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
      "| cxx11 ABI", torch._C._GLIBCXX_USE_CXX11_ABI)
print("cuda available:", torch.cuda.is_available(), "| devices:", torch.cuda.device_count())
if torch.cuda.is_available():
    print("device 0:", torch.cuda.get_device_name(0), "| capability", torch.cuda.get_device_capability(0))
    print("NCCL (torch):", ".".join(map(str, torch.cuda.nccl.version())))
try:
    import h5py
    print("h5py", h5py.__version__, "| HDF5", h5py.version.hdf5_version)
except ImportError as e:
    print("h5py: missing:", e)
EOF
  echo "== nvcc: $( (command -v nvcc || ls /usr/local/cuda/bin/nvcc) 2>/dev/null) $( (nvcc --version || /usr/local/cuda/bin/nvcc --version) 2>/dev/null | tail -2 | head -1)"
  echo "== c++: $(c++ --version 2>/dev/null | head -1)"
  echo "== cmake: $(cmake --version 2>/dev/null | head -1); ninja $(ninja --version 2>/dev/null)"
  local tool path
  for tool in mpirun h5pcc clang-format ssh ip slurmctld; do
    path=$(command -v "$tool" 2>/dev/null)
    [[ -n $path && -x $path ]] || path=missing
    echo "== system $tool: $path"
  done
}

phase_build() {
  local log=$out/build.log rc
  versions 2>&1 | tee -a "$summary" >"$log"
  { nvidia-smi; echo "== scripts/build-gpu.sh $build_dir"; } >>"$log" 2>&1
  run_until_deadline 10 "$root/scripts/build-gpu.sh" "$build_dir" >>"$log" 2>&1
  rc=$?
  if [[ $rc -eq 0 ]]; then
    note "build: ok ($build_dir/megabatch); log build.log"
    awk '/feature summary/{on=1} on{print} on && /-----------$/{if (++n == 2) exit}' "$build_dir/configure.log" >>"$summary"
  else
    note "build: FAILED (rc $rc); last lines of build.log:"
    grep -E 'error|Error|hint' "$log" | head -20 | tee -a "$summary"
    tail -5 "$log" | tee -a "$summary"
  fi
  return "$rc"
}

phase_test() {
  local log=$out/test.log rc jobs
  if [[ ! -x $build_dir/megabatch || ! -f $build_dir/megabatch-env.sh ]]; then
    note "test: no build in $build_dir: building first"
    phase_build || return 1
  fi
  # shellcheck disable=SC1091  # written by build-gpu.sh
  . "$build_dir/megabatch-env.sh"
  export MEGABATCH_TEST_DEVICE=cuda
  jobs=${MB_TEST_JOBS:-$(( $(nproc) / 2 > 0 ? $(nproc) / 2 : 1 ))}
  local select=(-LE '^(slurm|style)$')
  if [[ -n ${MB_CTEST_ARGS+set} ]]; then
    read -ra select <<<"$MB_CTEST_ARGS"
  fi
  {
    echo "== MEGABATCH_TEST_DEVICE=cuda ctest -j $jobs ${select[*]} (budget $(left) s)"
    nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader 2>&1 || true
  } >"$log"
  run_until_deadline 15 ctest --test-dir "$build_dir" -j "$jobs" --output-on-failure \
    "${select[@]}" >>"$log" 2>&1
  rc=$?
  [[ $rc -eq 124 ]] && note "test: cut at the time budget: the summary below is partial"
  note "test: ctest rc $rc (selection: ${select[*]}); log test.log"
  grep -E 'tests passed|tests failed|^ *[0-9]+ - .*\((Failed|Timeout|Not Run|SEGFAULT|Subprocess aborted|Exception)\)|Total Test time' \
    "$log" | tee -a "$summary"
  # Per-label times, when ctest printed them.
  sed -n '/^Label Time Summary:/,/^$/p' "$log" >>"$summary"
  return "$rc"
}

phase_bench() {
  local log=$out/bench.log script=bench/gpu/gpu_bench.py rc
  if [[ ! -f $script ]]; then
    note "bench: $script is not in this tree: skipped"
    return 0
  fi
  [[ -x $build_dir/megabatch ]] || { note "bench: no $build_dir/megabatch: run the build phase first"; return 1; }
  # shellcheck disable=SC1091  # written by build-gpu.sh
  . "$build_dir/megabatch-env.sh"
  mkdir -p "$out/bench"
  echo "== python3 $script --bin $build_dir/megabatch --out $out/bench (budget $(left) s)" >"$log"
  run_until_deadline 10 python3 "$script" --bin "$build_dir/megabatch" --out "$out/bench" >>"$log" 2>&1
  rc=$?
  note "bench: rc $rc; log bench.log, results in bench/"
  tail -30 "$log" >>"$summary"
  return "$rc"
}

status=0
echo "== gpu-session $(date -u '+%F %T UTC'): phases ${phases[*]}, budget ${budget} s" >>"$summary"
for phase in "${phases[@]}"; do
  case $phase in
    build | test | bench) ;;
    *) echo "gpu-session: unknown phase $phase (build, test, bench)" >&2; exit 2 ;;
  esac
  if [[ $(left) -le 30 ]]; then
    note "$phase: skipped, the time budget is spent"
    status=1
    continue
  fi
  start=$(date +%s)
  case $phase in
    build) phase_build ;;
    test) phase_test ;;
    bench) phase_bench ;;
  esac
  rc=$?
  note "$phase: $(( $(date +%s) - start )) s"
  [[ $rc -eq 0 ]] || status=1
  # A failed build leaves nothing to test or measure.
  [[ $phase == build && $rc -ne 0 ]] && break
done
echo "gpu-session: summary in $summary"
exit "$status"
