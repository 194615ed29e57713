#!/usr/bin/env bash
# The GPU check of a CUDA build, in phases that fit calls limited to 10 minutes each:
#   scripts/gpu-session.sh prepare   HERE, on the CPU machine, before any device call: fetches
#                                    .gpu-debs when missing, checks that what the device tool
#                                    carries fits its 64 MiB, prints the call plan below
#   scripts/gpu-session.sh build     on the GPU machine: preflight (torch, nvcc, deps, Python
#                                    modules), versions, then build-gpu.sh of what the first
#                                    tests need only: megabatch + megabatch_gpu_tests, no benches
#   scripts/gpu-session.sh gpu       `ctest -L '^gpu$'` (megabatch + the GPU tests; no rest of the
#                                    build): NCCL, autocast, device data, checkpoints, host syncs
#   scripts/gpu-session.sh features  `ctest -L '^gpu-features$'`: the memory plan against the caching
#                                    allocator, micro_batch auto, the OOM redo from a real cudaMalloc
#                                    failure, recomputation, fp16 against torch.amp.GradScaler
#   scripts/gpu-session.sh gpt       bench/gpu/gpu_bench.py --only gpt: gpt2-small's tokens/s and MFU,
#                                    megabatch against eager PyTorch and torch.compile
#   scripts/gpu-session.sh test      the rest of the build, then the rest of the suite on cuda; tests
#                                    that passed on this build before are not run again, so repeated
#                                    calls continue where one stopped
#   scripts/gpu-session.sh bench     bench/gpu/gpu_bench.py's other sections (needs h5py, numpy,
#                                    torch); MB_BENCH_ARGS adds arguments, e.g. "--only lstm,nccl"
#   scripts/gpu-session.sh profile   bench/gpu/lstm_step_profile.py: where the seed LSTM's step goes at
#                                    batch 128 (torch.profiler), and the step in a CUDA graph
#   scripts/gpu-session.sh demo      the README's demo on the GPU (data, train, plot, eval, inspect)
# With no phase: build gpu features gpt test bench, the call below. Phases share one time budget
# per call; each ends in time for the call to return; a phase that finds no build builds first.
#
# Call plan for the device tool: 15 minutes of device time a task, the machine's start (a minute
# or more) included; 10 minutes a call; the machine goes back about 30 s after a call ends, taking
# build-gpu/ with it. Seconds on a 16-core H200 (m: measured on 2026-11-28, e: estimated):
#   0. here, in the checkout the device tool sends (the session's own; a helper's worktree does
#      not travel):   scripts/gpu-session.sh prepare
#   1. run(command="MB_SESSION_BUDGET_S=520 bash scripts/gpu-session.sh", carry=[".gpu-debs"],
#          timeout_s=570)
#        phase     s      by   what
#        build     110 m  110  preflight, megabatch + megabatch_gpu_tests (105 s, 109 s)
#        gpu        15 m  125  6 entries (12 s)
#        features   60 e  185  6 entries: 13 short megabatch runs, the fp16 test's PyTorch side
#        gpt       150 e  335  matmul rate, megabatch, eager, torch.compile (~60 s of compiling)
#        test      150 e  485  the rest of the build (~80 s), then as much of the suite as fits
#        bench      35 e  520  --only data,lstm,nccl --repeats 2 (lstm and nccl took 71 s in
#                              2026-11-28's call 2: what does not fit is skipped and said so)
#   2. at once, while the machine is warm (one call: ~200 s of device time are left):
#      run(command="MB_SESSION_BUDGET_S=200 bash scripts/gpu-session.sh gpu features test bench")
#      after a fix: reruns what has not passed on this build (a rebuilt binary: everything), and
#      continues the suite. A machine that went back means a fresh build (110 s) first. With
#      everything passed, "profile" (~40 s e) instead: where the LSTM step's time goes.
# The CPU check of this plan (no GPU; the 2-core VM of CI):
#   MEGABATCH_CUDA=OFF MB_TEST_DEVICE=cpu MB_SESSION_BUDGET_S=520 bash scripts/gpu-session.sh
#   (Debian 12: PATH=/usr/bin:$PATH TORCH_CMAKE_PREFIX=/usr/lib/x86_64-linux-gnu/cmake; ccache
#   through CMAKE_CXX_COMPILER_LAUNCHER=ccache)
# Each call's logs come back under $OUT (at most 8 files: summary.txt, build.log, test.log, demo.log,
# bench.log, bench/*): read summary.txt first.
#
# Environment (optional):
#   MB_SESSION_BUDGET_S  seconds the whole call may take (default 520); each phase is cut at it
#   BUILD_DIR            the build (default build-gpu); MEGABATCH_DEPS_DEBS (default .gpu-debs)
#   MB_CTEST_ARGS        extra ctest arguments for the rest of the suite, e.g. "-L unit|mpi" (no
#                        -E: it is taken). SLURM and style tests never run there (no apt for
#                        SLURM, no clang-format). A test call first rebuilds megabatch and the
#                        GPU tests; when sources changed that, every test runs again.
#   MB_BENCH_RESERVE_S   seconds the test phase leaves for a bench phase after it (default 40)
#   MB_TEST_JOBS         parallel tests (default: the cores; ctest counts a test's PROCESSORS)
#   MB_CARRY             prepare: the ignored paths the calls carry (default: .gpu-debs)
#   MEGABATCH_CUDA=OFF and MB_TEST_DEVICE=cpu check this script on a CPU machine (no GPU tests,
#                        CUDA preflight skipped; see scripts/build-gpu.sh)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root=$(pwd)

budget=${MB_SESSION_BUDGET_S:-520}
deadline=$(($(date +%s) + budget))
out=${OUT:-$root/out/gpu-session}
mkdir -p "$out"
build_dir=${BUILD_DIR:-build-gpu}
debs=${MEGABATCH_DEPS_DEBS:-.gpu-debs}
summary=$out/summary.txt
carry_limit=$((64 * 1024 * 1024))  # the device tool's limit on everything that travels
first_targets=(megabatch megabatch_gpu_tests)
[[ ${MEGABATCH_CUDA:-ON} == OFF ]] && first_targets=(megabatch)  # CPU builds have no GPU tests
passed_file=$build_dir/gpu-session-passed.txt  # tests passed on this build, one name a line
phases=("$@")
[[ ${#phases[@]} -gt 0 ]] || phases=(build gpu features gpt test bench)
check_mode=0  # MEGABATCH_CUDA=OFF: the CPU check of the script (no GPU tests, a quick bench)
[[ ${MEGABATCH_CUDA:-ON} == OFF ]] && check_mode=1

note() { echo "gpu-session: [$(($(date +%s) + budget - deadline)) s] $*" | tee -a "$summary"; }
left() { echo $((deadline - $(date +%s))); }
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }

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
      echo "gpu-session: time budget reached ($(left) s left, margin $margin s): stopping $*" >&2
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

# --- prepare (the CPU machine) ---------------------------------------------------------------

# .gpu-debs holds the set that packages.txt lists (gpu-deps.sh fetch writes both).
debs_complete() {
  local listed present
  [[ -f $debs/packages.txt ]] || return 1
  listed=$(grep -cv '^#' "$debs/packages.txt")
  present=$(find "$debs" -maxdepth 1 -name '*.deb' | wc -l)
  [[ $listed -gt 0 && $listed -eq $present ]]
}

prepare_debs() {
  if debs_complete; then
    note "prepare: $debs holds $(find "$debs" -maxdepth 1 -name '*.deb' | wc -l) packages"
    return 0
  fi
  if command -v apt-get >/dev/null && grep -qs 'VERSION_CODENAME=bookworm' /etc/os-release; then
    note "prepare: $debs is missing or incomplete: fetching it (scripts/gpu-deps.sh fetch $debs)"
    bash "$root/scripts/gpu-deps.sh" fetch "$debs" | tee -a "$summary" && debs_complete && return 0
    note "prepare: FAILED to fetch $debs (apt sources? network?)"
    return 1
  fi
  note "prepare: FAILED: $debs is missing or incomplete, and this is no Debian 12 machine with apt"
  note "  fix: on a Debian 12 machine run 'scripts/gpu-deps.sh fetch $debs' and copy the folder here"
  return 1
}

bytes_of_files() {  # NUL-separated paths on stdin -> total bytes of the regular files among them
  xargs -0 -r stat -c '%s %F' 2>/dev/null | awk '$2 == "regular" { s += $1 } END { print s + 0 }'
}

# What the device tool sends: the tracked files, the untracked ones git does not ignore, shared/,
# and the carried paths, 64 MiB in all.
prepare_size() {
  local tracked untracked carried=0 total path bytes carry
  read -ra carry <<<"${MB_CARRY:-$debs}"
  tracked=$(git -C "$root" ls-files -z | bytes_of_files)
  untracked=$(git -C "$root" ls-files -z --others --exclude-standard | bytes_of_files)
  note "prepare: tracked files $(mib "$tracked"), untracked (not ignored) $(mib "$untracked")"
  # A shared/ folder inside the checkout travels even when git ignores it.
  [[ -d $root/shared ]] && git -C "$root" check-ignore -q shared && carry+=(shared)
  for path in "${carry[@]}"; do
    [[ -e $path ]] || { note "prepare: FAILED: carried path $path does not exist"; return 1; }
    bytes=$(du -sb "$path" | cut -f1)
    carried=$((carried + bytes))
    note "prepare: carried $path $(mib "$bytes")"
  done
  total=$((tracked + untracked + carried))
  if [[ $total -gt $carry_limit ]]; then
    note "prepare: FAILED: $(mib "$total") would travel, over the device tool's $(mib "$carry_limit")"
    note "  fix: git-ignore or delete large untracked files (git status), or carry less"
    return 1
  fi
  note "prepare: $(mib "$total") travels, $(mib $((carry_limit - total))) under the $(mib "$carry_limit") limit"
}

phase_prepare() {
  prepare_debs || return 1
  prepare_size || return 1
  note "prepare: ready. Device calls (see the header of $0):"
  sed -n '/^# Call plan/,/^# bench.log/p' "$0" | sed -e 's/^# \{0,1\}/  /' | tee -a "$summary"
}

# --- preflight and versions (the GPU machine) ------------------------------------------------

# Problems that would only show minutes into the build, said at once. Prints one line each;
# returns 1 when the build cannot work.
preflight() {
  local fatal=0
  if [[ ${MEGABATCH_CUDA:-ON} == OFF ]]; then
    note "preflight: MEGABATCH_CUDA=OFF: torch and nvcc are not checked (a CPU check of the scripts)"
  else
    preflight_cuda || fatal=1
  fi
  preflight_deps || fatal=1
  preflight_tools || fatal=1
  python_modules_ok || note "preflight: the Python tests and benches will be skipped (see above)"
  return "$fatal"
}

# python3's torch has CUDA, and nvcc is there with torch's CUDA major version.
preflight_cuda() {
  local fatal=0 torch_cuda nvcc nvcc_version
  if ! torch_cuda=$(python3 -c 'import torch; print(torch.version.cuda or "")' 2>&1); then
    note "preflight: FATAL: python3 cannot import torch: ${torch_cuda##*$'\n'}"
    fatal=1
  elif [[ -z $torch_cuda ]]; then
    note "preflight: FATAL: python3's torch has no CUDA (torch.version.cuda is None)"
    fatal=1
  fi
  nvcc=$(command -v nvcc || ls "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" 2>/dev/null)
  nvcc_version=$("${nvcc:-false}" --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')
  if [[ -z $nvcc_version ]]; then
    note "preflight: FATAL: no nvcc (PATH, CUDA_HOME, /usr/local/cuda)"
    fatal=1
  elif [[ -n $torch_cuda && ${nvcc_version%%.*} != "${torch_cuda%%.*}" ]]; then
    note "preflight: FATAL: nvcc is CUDA $nvcc_version, torch is built with CUDA $torch_cuda"
    fatal=1
  else
    note "preflight: torch CUDA $torch_cuda, nvcc $nvcc_version ($nvcc)"
  fi
  return "$fatal"
}

preflight_deps() {
  if debs_complete; then
    command -v dpkg-deb >/dev/null && return 0
    note "preflight: FATAL: $debs is here but dpkg-deb (to unpack it) is not"
    return 1
  fi
  local tool
  for tool in mpicxx mpirun h5pcc; do
    command -v "$tool" >/dev/null && continue
    note "preflight: FATAL: no $debs (or it is incomplete) and no system $tool"
    note "  fix: on the CPU machine run scripts/gpu-session.sh prepare, and carry $debs"
    return 1
  done
}

preflight_tools() {
  local tool status=0
  for tool in cmake c++ ninja; do
    command -v "$tool" >/dev/null && continue
    [[ $tool == ninja ]] && { note "preflight: no ninja: build-gpu.sh uses make (slower)"; continue; }
    note "preflight: FATAL: no $tool on PATH"
    status=1
  done
  return "$status"
}

# The Python tests and benches need h5py and numpy next to torch. Says which is missing.
python_modules_ok() {
  local python=${MB_PYTHON_FOR_TESTS:-python3} missing
  missing=$("$python" - <<'EOF' 2>&1
import importlib
print(" ".join(m for m in ("torch", "h5py", "numpy") if importlib.util.find_spec(m) is None))
EOF
  ) || missing="(python failed: $missing)"
  [[ -z $missing ]] && return 0
  note "python: $python lacks: $missing"
  note "  fix: carry wheels (.whl, see /work/.library/device/README.md) or pip install them"
  return 1
}

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
for name in ("h5py", "numpy"):
    try:
        module = __import__(name)
        print(name, module.__version__)
    except ImportError as e:
        print(name + ": missing:", e)
EOF
  echo "== nvcc: $( (command -v nvcc || ls /usr/local/cuda/bin/nvcc) 2>/dev/null) $( (nvcc --version || /usr/local/cuda/bin/nvcc --version) 2>/dev/null | tail -2 | head -1)"
  echo "== c++: $(c++ --version 2>/dev/null | head -1)"
  echo "== cmake: $(cmake --version 2>/dev/null | head -1); ninja $(ninja --version 2>/dev/null)"
  local tool path
  for tool in mpirun h5pcc dpkg-deb clang-format ssh ip slurmctld; do
    path=$(command -v "$tool" 2>/dev/null)
    [[ -n $path && -x $path ]] || path=missing
    echo "== system $tool: $path"
  done
}

# --- build and test (the GPU machine) --------------------------------------------------------

built() { [[ -x $build_dir/megabatch && -f $build_dir/megabatch-env.sh ]]; }

phase_build() {
  local log=$out/build.log rc
  versions 2>&1 | tee -a "$summary" >>"$log"
  preflight || { note "build: not started: fix the FATAL lines above"; return 1; }
  { command -v nvidia-smi >/dev/null && nvidia-smi; echo "== scripts/build-gpu.sh $build_dir (${first_targets[*]})"; } >>"$log" 2>&1
  rm -f "$passed_file"  # a new configure may change any test
  run_until_deadline 10 env MEGABATCH_BENCH=OFF MEGABATCH_BUILD_TARGETS="${first_targets[*]}" \
    bash "$root/scripts/build-gpu.sh" "$build_dir" >>"$log" 2>&1
  rc=$?
  if [[ $rc -eq 0 ]]; then
    note "build: ok (${first_targets[*]} in $build_dir); log build.log"
    awk '/feature summary/{on=1} on{print} on && /-----------$/{if (++n == 2) exit}' "$build_dir/configure.log" >>"$summary"
  else
    note "build: FAILED (rc $rc); last lines of build.log:"
    grep -E 'error|Error|hint' "$log" | head -20 | tee -a "$summary"
    tail -5 "$log" | tee -a "$summary"
  fi
  return "$rc"
}

# Builds every remaining target (the CPU suite's binaries) into the existing build.
build_rest() {
  local log=$out/build.log rc
  echo "== cmake --build $build_dir (everything else; budget $(left) s)" >>"$log"
  run_until_deadline $((60 + reserve)) cmake --build "$build_dir" -j "$(nproc)" >>"$log" 2>&1
  rc=$?
  [[ $rc -eq 0 ]] && note "test: the rest of the build is done" ||
    note "test: the rest of the build stopped (rc $rc; log build.log): the next test call continues it"
  return "$rc"
}

passed_count() {
  if [[ -f $passed_file ]]; then wc -l <"$passed_file"; else echo 0; fi
}

# ctest's -E pattern: the tests that passed on this build before, and EXTRA (a regex) if given;
# "" when there is nothing to leave out.
exclude_regex() {  # exclude_regex [EXTRA]
  local alternatives=()
  [[ -n ${1:-} ]] && alternatives+=("$1")
  [[ -s $passed_file ]] &&
    alternatives+=("$(sed -E 's/[][\\.*+?^$(){}|]/\\&/g' "$passed_file" | paste -sd'|')")
  [[ ${#alternatives[@]} -gt 0 ]] || return 0
  local IFS='|'
  echo "^(${alternatives[*]})\$"
}

# Runs ctest with ARGS, leaving out the tests passed before and those EXCLUDE matches; logs to
# test.log and records the new passes. Stops `reserve` (a global) seconds early when a later
# phase needs them. A run cut at the budget with no failure returns 0: the next call continues it.
run_ctest() {  # run_ctest TITLE EXCLUDE CTEST_ARGS...
  local title=$1 pattern jobs rc tmp=$out/.ctest-run.log skip=() failed=""
  pattern=$(exclude_regex "$2")
  shift 2
  [[ -n $pattern ]] && skip=(-E "$pattern")
  jobs=${MB_TEST_JOBS:-$(nproc)}
  {
    echo "== $title: ctest -j $jobs $* (budget $(left) s; $(passed_count) passed before)"
    nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader 2>&1 || true
  } >>"$out/test.log"
  run_until_deadline $((15 + reserve)) ctest --test-dir "$build_dir" -j "$jobs" --output-on-failure "${skip[@]}" \
    "$@" >"$tmp" 2>&1
  rc=$?
  cat "$tmp" >>"$out/test.log"
  sed -n 's/^ *[0-9]*\/[0-9]* Test *#[0-9]*: \([^ ]*\) .*Passed.*/\1/p' "$tmp" >>"$passed_file"
  grep -qE '\*\*\*(Failed|Timeout|Exception)|\(SEGFAULT\)|Subprocess aborted' "$tmp" && failed=1
  if [[ $rc -eq 124 ]]; then
    note "$title: cut at the time budget: the next test call runs what is left"
    [[ -z $failed ]] && rc=0
  fi
  grep -q 'No tests were found' "$tmp" && [[ -s $passed_file ]] &&
    note "$title: nothing left to run ($(passed_count) tests passed on this build before)"
  note "$title: ctest rc $rc; log test.log"
  grep -E 'tests passed|tests failed|No tests were found|^ *[0-9]+ - .*\((Failed|Timeout|Not Run|SEGFAULT|Subprocess aborted|Exception)\)|Total Test time' \
    "$tmp" | tee -a "$summary"
  rm -f "$tmp"
  return "$rc"
}

# Brings megabatch and the GPU tests up to date with the sources that came with this call. When
# that rebuilt anything, the earlier passes no longer count.
refresh_first_targets() {
  local before after
  before=$(stat -c %Y "$build_dir/megabatch" "$build_dir/megabatch_gpu_tests" 2>/dev/null)
  echo "== cmake --build $build_dir --target ${first_targets[*]}" >>"$out/build.log"
  run_until_deadline 60 cmake --build "$build_dir" -j "$(nproc)" --target "${first_targets[@]}" \
    >>"$out/build.log" 2>&1 || { note "test: rebuilding ${first_targets[*]} FAILED (log build.log)"; return 1; }
  after=$(stat -c %Y "$build_dir/megabatch" "$build_dir/megabatch_gpu_tests" 2>/dev/null)
  if [[ $before != "$after" ]]; then
    rm -f "$passed_file"
    note "test: the sources changed since the build: rebuilt, and every test runs again"
  fi
}

phase_test() {
  local status=0 select=(-LE '^(gpu|gpu-features|slurm|style)$') python_skip=""
  if ! built; then
    note "test: no build in $build_dir (a fresh machine?): building first"
    phase_build || return 1
  fi
  refresh_first_targets || return 1
  # shellcheck disable=SC1091  # written by build-gpu.sh
  . "$build_dir/megabatch-env.sh"
  export MEGABATCH_TEST_DEVICE=${MB_TEST_DEVICE:-cuda}
  [[ $(left) -gt $((90 + reserve)) ]] || { note "test: no time left for the rest of the suite"; return 1; }
  build_rest || return 1
  if ! MB_PYTHON_FOR_TESTS=$(python_for_tests) python_modules_ok; then
    python_skip='py\..*'
    note "test: skipping the $(ctest --test-dir "$build_dir" -N -R '^py\.' | grep -c 'Test *#') Python tests (py.*): their python lacks modules"
  fi
  [[ -n ${MB_CTEST_ARGS:-} ]] && read -ra select <<<"${select[*]} $MB_CTEST_ARGS"
  run_ctest "test (rest of the suite)" "$python_skip" "${select[@]}" || status=1
  return "$status"
}

# The interpreter the build's Python tests run with (MB_PYTHON in its CMake cache).
python_for_tests() {
  sed -n 's/^MB_PYTHON:[A-Z]*=//p' "$build_dir/CMakeCache.txt" 2>/dev/null | grep . || echo python3
}

# The tests of one label (gpu: what a short lease checks first; gpu-features), which need
# megabatch and megabatch_gpu_tests only.
run_label() {  # run_label PHASE LABEL
  local phase=$1 label=$2
  if ! built; then
    note "$phase: no build in $build_dir (a fresh machine?): building first"
    phase_build || return 1
  fi
  refresh_first_targets || return 1
  # shellcheck disable=SC1091  # written by build-gpu.sh
  . "$build_dir/megabatch-env.sh"
  export MEGABATCH_TEST_DEVICE=${MB_TEST_DEVICE:-cuda}
  if ! ctest --test-dir "$build_dir" -N -L "^$label\$" | grep -q 'Test *#'; then
    note "$phase: this build registers no $label tests (not a CUDA build: see the feature summary)"
    return "$((1 - check_mode))"
  fi
  run_ctest "$phase -L $label" "" -L "^$label\$"
}

phase_gpu() { run_label gpu gpu; }
phase_features() { run_label features gpu-features; }

# The README's demo, on the GPU, as a user runs it: every command's output in demo.log.
phase_demo() {
  local log=$out/demo.log work=${MB_DEMO_DIR:-/tmp/megabatch-demo} mb rc=0
  built || { note "demo: no build in $build_dir: run the build phase first"; return 1; }
  # shellcheck disable=SC1091  # written by build-gpu.sh
  . "$build_dir/megabatch-env.sh"
  mb=$root/$build_dir/megabatch
  rm -rf "$work" && mkdir -p "$work"
  demo_step() {  # demo_step COMMAND...: logged with its time and status
    local start=$(date +%s) status
    echo "== $*" >>"$log"
    run_until_deadline 10 "$@" >>"$log" 2>&1
    status=$?
    echo "== rc $status in $(($(date +%s) - start)) s" >>"$log"
    note "demo: rc $status in $(($(date +%s) - start)) s: ${*:1:5}"
    return "$status"
  }
  demo_step "$mb" data synth-series --out "$work/demo.h5" || return 1
  demo_step mpirun -np 1 "$mb" train --config configs/demo.yaml "data.path=$work/demo.h5" \
    "run.dir=$work/run" train.max_steps=300 || rc=1
  demo_step "$mb" plot "$work/run" || rc=1
  demo_step "$mb" eval --checkpoint "$work/run" --split test || rc=1
  demo_step "$mb" eval --checkpoint "$work/run" --split test --precision auto || rc=1
  demo_step "$mb" inspect "$work/run/checkpoints/latest" || rc=1
  grep -E 'device|backend|precision|step +300|done|error' "$log" | head -20 >>"$summary"
  return "$rc"
}

# bench/gpu/gpu_bench.py: its results as $OUT/bench/NAME.json and NAME.md, its progress in
# bench.log (the device tool returns 8 files at most).
run_bench() {  # run_bench PHASE NAME ARGS...
  local phase=$1 name=$2 log=$out/bench.log script=bench/gpu/gpu_bench.py rc results
  shift 2
  built || { note "$phase: no build in $build_dir: run the build phase first"; return 1; }
  if ! python_modules_ok; then
    note "$phase: skipped: $script imports torch, h5py and numpy"
    return 1
  fi
  # shellcheck disable=SC1091  # written by build-gpu.sh
  . "$build_dir/megabatch-env.sh"
  local extra=()
  read -ra extra <<<"${MB_BENCH_ARGS:-}"
  ((check_mode)) && extra=(--device cpu --quick "${extra[@]}")
  results=$(mktemp -d)
  mkdir -p "$out/bench"
  echo "== $phase: python3 $script --bin $build_dir/megabatch $* ${extra[*]} (budget $(left) s)" >>"$log"
  run_until_deadline 10 python3 "$script" --bin "$build_dir/megabatch" --out "$results" \
    --budget-s $(($(left) > 40 ? $(left) - 20 : 20)) "$@" "${extra[@]}" >>"$log" 2>&1
  rc=$?
  cp "$results/gpu_bench.json" "$out/bench/$name.json" 2>/dev/null
  cp "$results/gpu_bench.md" "$out/bench/$name.md" 2>/dev/null
  rm -rf "$results"
  note "$phase: rc $rc; log bench.log, results bench/$name.md and .json"
  grep -E '^\[ *[0-9.]+ s\] .*(TFLOP|tokens/s|samples/s|x torch|error|skipped)' "$log" | tail -12 >>"$summary"
  return "$rc"
}

phase_gpt() { run_bench gpt gpt --only gpt; }
# data first: the one section no lease has run yet (lstm and nccl ran on 2026-11-28).
phase_bench() { run_bench bench sections --only data,lstm,nccl --repeats 2; }

# Where the seed LSTM's step goes, and what a CUDA graph of it buys (bench/gpu/lstm_step_profile.py).
phase_profile() {
  local args=(--out "$out/bench") rc
  python_modules_ok || { note "profile: skipped: bench/gpu/lstm_step_profile.py imports torch and h5py"; return 1; }
  ((check_mode)) && args+=(--quick)
  mkdir -p "$out/bench"
  echo "== profile: python3 bench/gpu/lstm_step_profile.py ${args[*]} (budget $(left) s)" >>"$out/bench.log"
  run_until_deadline 10 python3 bench/gpu/lstm_step_profile.py "${args[@]}" >>"$out/bench.log" 2>&1
  rc=$?
  note "profile: rc $rc; results in $out/bench: lstm_profile.md and .json"
  grep -E '^Profiled|^\| (plain|forward|cudnn)' "$out/bench/lstm_profile.md" 2>/dev/null >>"$summary"
  return "$rc"
}

# The device tool returns files of at most 16 MiB: keep the head and the tail of larger logs.
trim_logs() {
  local file limit=$((15 * 1024 * 1024))
  for file in "$out"/*.log; do
    [[ -f $file && $(stat -c %s "$file") -gt $limit ]] || continue
    { head -c 1048576 "$file"; printf '\n[... trimmed by gpu-session.sh ...]\n'; tail -c 13631488 "$file"; } >"$file.tmp"
    mv "$file.tmp" "$file"
  done
}

# The device tool returns 8 files at most: past that, everything but the summary goes in one
# archive.
fit_out_files() {
  local files
  files=$(find "$out" -type f | wc -l)
  [[ $files -le 8 ]] && return 0
  (cd "$out" && find . -type f ! -name summary.txt ! -name logs.tar.gz -print0 |
    tar --null -czf logs.tar.gz -T - --remove-files)
  note "$files files under \$OUT, more than the device tool returns: all but summary.txt are in logs.tar.gz"
}

status=0
timings=()
call_start=$(date +%s)
reserve=0  # seconds the test phase leaves for a bench phase after it (MB_BENCH_RESERVE_S)
echo "== gpu-session $(date -u '+%F %T UTC'): phases ${phases[*]}, budget ${budget} s" >>"$summary"
for phase in "${phases[@]}"; do
  case $phase in
    prepare | build | gpu | features | gpt | test | bench | profile | demo) ;;
    *) echo "gpu-session: unknown phase $phase (prepare, build, gpu, features, gpt, test, bench, profile, demo)" >&2
       exit 2 ;;
  esac
  if [[ $(left) -le 30 ]]; then
    note "$phase: skipped, the time budget is spent"
    status=1
    continue
  fi
  start=$(date +%s)
  reserve=0
  [[ $phase == test && " ${phases[*]} " == *" test "*"bench "* ]] && reserve=${MB_BENCH_RESERVE_S:-40}
  "phase_$phase"
  rc=$?
  note "$phase: $(($(date +%s) - start)) s"
  timings+=("$phase $(($(date +%s) - start)) s (rc $rc)")
  [[ $rc -eq 0 ]] || status=1
  # A failed prepare or build leaves nothing to carry, test or measure.
  [[ ($phase == build || $phase == prepare) && $rc -ne 0 ]] && break
done
trim_logs
note "call: $(printf '%s, ' "${timings[@]}")$(($(date +%s) - call_start)) s in all, of a ${budget} s budget"
fit_out_files
echo "gpu-session: summary in $summary"
exit "$status"
