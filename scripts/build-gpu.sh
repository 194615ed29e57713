#!/usr/bin/env bash
# Builds megabatch with CUDA + NCCL against the LibTorch inside a pip-installed CUDA PyTorch
# (found through python) or an official LibTorch archive, and that torch's NCCL (the
# nvidia-nccl wheel next to torch). Where Open MPI, parallel HDF5, yaml-cpp, spdlog or
# GoogleTest are missing, it unpacks the Debian 12 packages of scripts/gpu-deps.sh into a
# prefix and builds against those.
#
#   scripts/build-gpu.sh [BUILD_DIR] [extra cmake args...]        default BUILD_DIR: build-gpu
#
# Environment (all optional):
#   PYTHON                  the python with the CUDA torch (default: python3)
#   TORCH_CMAKE_PREFIX      a folder with Torch/TorchConfig.cmake (default: torch.utils.cmake_prefix_path)
#   LIBTORCH                an unpacked LibTorch archive (uses LIBTORCH/share/cmake)
#   MEGABATCH_CUDA          ON (default) | AUTO | OFF: OFF accepts a CPU LibTorch (checks this script)
#   CUDA_ARCHS              e.g. 9.0 or "8.0;9.0" (default: nvidia-smi's compute capability)
#   NCCL_ROOT               a folder with include/nccl.h and lib/libnccl.so* (default: torch's wheel)
#   MEGABATCH_DEPS          auto (default: the system's when all are there, else the prefix) | system | prefix
#   MEGABATCH_DEPS_DEBS     folder of .debs from `scripts/gpu-deps.sh fetch` (default: .gpu-debs)
#   MEGABATCH_DEPS_PREFIX   where to unpack them (default: /opt/megabatch-deps, or ~/.cache/megabatch-deps)
#   MEGABATCH_BUILD_JOBS    parallel jobs (default: nproc);  CMAKE_BUILD_TYPE (default: Release)
#   MEGABATCH_BUILD_TARGETS targets to build, e.g. "megabatch megabatch_gpu_tests" (default: all)
#   MEGABATCH_BENCH         ON | OFF: configure the C++ benchmark targets (default: the project's, ON)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

say() { echo "build-gpu.sh: $*"; }
die() {  # die MESSAGE [HINT]
  echo "build-gpu.sh: error: $1" >&2
  [[ -n ${2:-} ]] && echo "  hint: $2" >&2
  exit 1
}

build_dir=${1:-${BUILD_DIR:-build-gpu}}
shift || true
cuda_mode=${MEGABATCH_CUDA:-ON}
case $cuda_mode in ON | AUTO | OFF) ;; *) die "MEGABATCH_CUDA=$cuda_mode" "use ON, AUTO or OFF" ;; esac
python=${PYTHON:-python3}
jobs=${MEGABATCH_BUILD_JOBS:-$(nproc)}
arch=x86_64-linux-gnu

command -v cmake >/dev/null || die "cmake is not on PATH" "pip install cmake, or install it with your package manager"
command -v c++ >/dev/null || command -v g++ >/dev/null ||
  die "no C++ compiler (c++/g++) on PATH" "install g++ (build-essential); LibTorch needs GCC >= 9"
generator=(-G Ninja)
command -v ninja >/dev/null || { say "ninja not found: using make (pip install ninja is faster)"; generator=(-G "Unix Makefiles"); }

# --- LibTorch --------------------------------------------------------------------------
torch_cuda="" torch_version=""
if [[ -n ${TORCH_CMAKE_PREFIX:-} ]]; then
  torch_prefix=$TORCH_CMAKE_PREFIX
elif [[ -n ${LIBTORCH:-} ]]; then
  torch_prefix=$LIBTORCH/share/cmake
  [[ -f $LIBTORCH/build-version ]] && torch_version=$(cat "$LIBTORCH/build-version")
  [[ -d $LIBTORCH/lib ]] && compgen -G "$LIBTORCH/lib/libtorch_cuda.so" >/dev/null && torch_cuda=yes
else
  command -v "$python" >/dev/null ||
    die "$python not found" "set PYTHON=/path/to/python (with a CUDA torch), TORCH_CMAKE_PREFIX, or LIBTORCH"
  info=$("$python" - <<'EOF' 2>&1
import torch
print(torch.utils.cmake_prefix_path)
print(torch.__version__)
print(torch.version.cuda or "")
EOF
  ) || die "$python cannot import torch: ${info##*$'\n'}" \
         "pip install torch (a CUDA wheel), or set PYTHON, TORCH_CMAKE_PREFIX or LIBTORCH"
  mapfile -t lines <<<"$info"
  torch_prefix=${lines[0]} torch_version=${lines[1]:-} torch_cuda=${lines[2]:-}
fi
[[ -f $torch_prefix/Torch/TorchConfig.cmake ]] ||
  die "no Torch/TorchConfig.cmake under $torch_prefix" \
      "point TORCH_CMAKE_PREFIX at the folder holding Torch/, or LIBTORCH at an unpacked LibTorch"
say "LibTorch ${torch_version:-?} (CUDA ${torch_cuda:-none}) from $torch_prefix"
if [[ $cuda_mode == ON && -z $torch_cuda && -z ${TORCH_CMAKE_PREFIX:-} ]]; then
  die "this torch has no CUDA (torch.version.cuda is None)" \
      "install a CUDA wheel (pip install torch --index-url https://download.pytorch.org/whl/cu1XX), or set MEGABATCH_CUDA=OFF for a CPU build"
fi
torch_root=$(cd "$torch_prefix/../.." && pwd)   # site-packages/torch or the LibTorch folder

cmake_args=(-DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-Release}" -DMEGABATCH_CUDA="$cuda_mode")
if [[ -n ${MEGABATCH_BENCH:-} ]]; then
  case $MEGABATCH_BENCH in ON | OFF) cmake_args+=(-DMEGABATCH_BENCH="$MEGABATCH_BENCH") ;;
    *) die "MEGABATCH_BENCH=$MEGABATCH_BENCH" "use ON or OFF" ;;
  esac
fi
read -ra build_targets <<<"${MEGABATCH_BUILD_TARGETS:-}"
prefix_path=("$torch_prefix")

# --- CUDA toolkit, architectures, NCCL ---------------------------------------------------
if [[ $cuda_mode != OFF ]]; then
  nvcc=$(command -v nvcc || true)
  [[ -z $nvcc && -x ${CUDA_HOME:-/usr/local/cuda}/bin/nvcc ]] && nvcc=${CUDA_HOME:-/usr/local/cuda}/bin/nvcc
  if [[ -n $nvcc ]]; then
    cuda_root=$(cd "$(dirname "$nvcc")/.." && pwd)
    nvcc_version=$("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')
    say "CUDA toolkit $nvcc_version at $cuda_root"
    # libtorch_cuda needs its own CUDA major's runtime: another major cannot work (CMake checks
    # this too, cmake/MegabatchCuda.cmake, for builds that do not come through this script).
    [[ -z $torch_cuda || ${nvcc_version%%.*} == "${torch_cuda%%.*}" ]] ||
      die "nvcc ($nvcc) is CUDA $nvcc_version, but torch was built with CUDA $torch_cuda: the major versions must agree" \
          "put a CUDA ${torch_cuda%%.*}.x toolkit's bin/ first on PATH (or set CUDA_HOME), or install the torch wheel for CUDA ${nvcc_version%%.*} (pip install torch --index-url https://download.pytorch.org/whl/cu$(echo "$nvcc_version" | cut -d. -f1-2 | tr -d .))"
    cmake_args+=(-DCUDAToolkit_ROOT="$cuda_root" -DCMAKE_CUDA_COMPILER="$nvcc")
    [[ -n $torch_cuda ]] && cmake_args+=(-DMEGABATCH_TORCH_CUDA_VERSION="$torch_cuda")
  elif [[ $cuda_mode == ON ]]; then
    die "nvcc not found (PATH, CUDA_HOME, /usr/local/cuda)" \
        "LibTorch's CMake files need the CUDA toolkit matching torch (CUDA ${torch_cuda:-?}); install it or put its bin/ on PATH"
  fi
  # Compute capability of the GPUs here: LibTorch's CMake compiles nothing for them, but it
  # probes the GPU when TORCH_CUDA_ARCH_LIST is unset and warns about it.
  archs=${CUDA_ARCHS:-}
  if [[ -z $archs ]] && command -v nvidia-smi >/dev/null; then
    archs=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | sort -u | paste -sd';' || true)
  fi
  if [[ -z $archs ]]; then
    archs="8.0;9.0"
    say "no GPU visible (nvidia-smi): building for CUDA architectures $archs (A100, H100); set CUDA_ARCHS to change"
  fi
  export TORCH_CUDA_ARCH_LIST=${archs//;/ }
  cmake_args+=(-DCMAKE_CUDA_ARCHITECTURES="${archs//./}")
  say "CUDA architectures: $archs"

  # NCCL: the nvidia-nccl wheel that torch depends on sits next to torch/ in site-packages.
  nccl_root=${NCCL_ROOT:-}
  if [[ -z $nccl_root ]]; then
    for candidate in "$torch_root/../nvidia/nccl" "$torch_root"/../nvidia/cu*/ "$torch_root" /usr/local/cuda /usr; do
      if [[ -f $candidate/include/nccl.h ]]; then nccl_root=$(cd "$candidate" && pwd); break; fi
    done
  fi
  if [[ -n $nccl_root && -f $nccl_root/include/nccl.h ]]; then
    nccl_version=$(awk '/define NCCL_(MAJOR|MINOR|PATCH) /{printf "%s%s", sep, $3; sep="."}' "$nccl_root/include/nccl.h")
    say "NCCL $nccl_version at $nccl_root"
    export NCCL_ROOT=$nccl_root
    cmake_args+=(-DNCCL_ROOT="$nccl_root")
  elif [[ $cuda_mode == ON ]]; then
    die "nccl.h not found (next to torch in site-packages, NCCL_ROOT, /usr/local/cuda, /usr)" \
        "pip install the nvidia-nccl wheel matching your torch (e.g. nvidia-nccl-cu13), or set NCCL_ROOT"
  fi
fi

# --- MPI, parallel HDF5, yaml-cpp, spdlog, GoogleTest ------------------------------------
has_config() {  # has_config NAME: a CMake package config on the usual system paths
  local dir
  for dir in /usr/lib/$arch/cmake /usr/lib/cmake /usr/share/cmake /usr/local/lib/cmake /usr/local/share/cmake \
             /usr/local/lib/$arch/cmake /usr/lib64/cmake; do
    compgen -G "$dir/$1/*onfig.cmake" >/dev/null && return 0
  done
  return 1
}
have_program() {  # have_program NAME: an executable NAME on PATH
  local path
  path=$(command -v "$1" 2>/dev/null) && [[ -x $path ]]
}
missing=()
have_program mpicxx || missing+=(mpicxx)
have_program mpirun || missing+=(mpirun)
have_program h5pcc || missing+=("parallel HDF5 (h5pcc)")
has_config yaml-cpp || missing+=(yaml-cpp)
has_config spdlog || missing+=(spdlog)
has_config GTest || missing+=(GoogleTest)

deps_mode=${MEGABATCH_DEPS:-auto}
case $deps_mode in
  auto) if [[ ${#missing[@]} -eq 0 ]]; then deps_mode=system; else deps_mode=prefix; fi ;;
  system) [[ ${#missing[@]} -eq 0 ]] || die "MEGABATCH_DEPS=system, but missing: ${missing[*]}" \
            "install them (scripts/setup.sh on Debian/Ubuntu), or use MEGABATCH_DEPS=prefix with .gpu-debs" ;;
  prefix) ;;
  *) die "MEGABATCH_DEPS=$deps_mode" "use auto, system or prefix" ;;
esac

deps_env=""
if [[ $deps_mode == prefix ]]; then
  # All of them from the prefix, never a mix: its HDF5 is built against its Open MPI.
  debs=${MEGABATCH_DEPS_DEBS:-.gpu-debs}
  [[ ${#missing[@]} -eq 0 ]] || say "missing on this system: ${missing[*]}: using the Debian packages in $debs"
  [[ -d $debs ]] || die "no folder $debs with the dependency packages" \
    "on a Debian 12 machine with network: scripts/gpu-deps.sh fetch $debs, and copy the folder here (or install the missing packages)"
  deps_prefix=${MEGABATCH_DEPS_PREFIX:-}
  if [[ -z $deps_prefix ]]; then
    if mkdir -p /opt/megabatch-deps 2>/dev/null && [[ -w /opt/megabatch-deps ]]; then
      deps_prefix=/opt/megabatch-deps
    else
      deps_prefix=${XDG_CACHE_HOME:-$HOME/.cache}/megabatch-deps
    fi
  fi
  bash "$root/scripts/gpu-deps.sh" unpack "$debs" "$deps_prefix"
  deps_env=$deps_prefix/env.sh
  # shellcheck disable=SC1090  # written by gpu-deps.sh unpack
  . "$deps_env"
  usr=$deps_prefix/usr
  prefix_path+=("$usr")
  cmake_args+=(
    -DMPI_C_COMPILER="$usr/bin/mpicc" -DMPI_CXX_COMPILER="$usr/bin/mpicxx"
    -DMPIEXEC_EXECUTABLE="$usr/bin/mpiexec"
    -DHDF5_C_COMPILER_EXECUTABLE="$usr/bin/h5pcc"
    -Dyaml-cpp_DIR="$usr/lib/$arch/cmake/yaml-cpp" -Dspdlog_DIR="$usr/lib/$arch/cmake/spdlog"
    -Dfmt_DIR="$usr/lib/$arch/cmake/fmt" -DGTest_DIR="$usr/lib/$arch/cmake/GTest"
  )
else
  say "Open MPI, parallel HDF5, yaml-cpp, spdlog, GoogleTest: the system's"
fi

# The tests' Python reference needs torch and h5py: use this python when it has both.
if "$python" -c 'import torch, h5py' >/dev/null 2>&1; then
  cmake_args+=(-DMB_PYTHON="$(command -v "$python")")
else
  say "warning: $python lacks torch or h5py: the Python tests use MB_PYTHON's default (/usr/bin/python3)"
fi

# --- Configure, build --------------------------------------------------------------------
mkdir -p "$build_dir"
prefix_list=$(IFS=';'; echo "${prefix_path[*]}")
start=$(date +%s)
say "configuring $build_dir"
cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_PREFIX_PATH="$prefix_list" "${cmake_args[@]}" "$@" \
  2>&1 | tee "$build_dir/configure.log"
[[ ${PIPESTATUS[0]} -eq 0 ]] || die "configure failed (log: $build_dir/configure.log)" \
  "read the first CMake error above; the feature summary is printed only on success"
target_args=()
[[ ${#build_targets[@]} -gt 0 ]] && target_args=(--target "${build_targets[@]}")
say "building ${build_targets[*]:-all targets} with $jobs jobs"
cmake --build "$build_dir" -j "$jobs" "${target_args[@]}" ||
  die "build failed" "the first compiler error above is the one to fix; rerun with MEGABATCH_BUILD_JOBS=1 for a readable log"

# Where to find it, and how to run it.
cat >"$build_dir/megabatch-env.sh" <<EOF
# Written by scripts/build-gpu.sh: source it before running $build_dir/megabatch or its tests.
${deps_env:+. $deps_env}
MEGABATCH_BIN=$root/$build_dir/megabatch
export MEGABATCH_BIN
EOF
echo
awk '/feature summary/{on=1} on{print} on && /-----------$/{if (++rules == 2) exit}' "$build_dir/configure.log"
say "built $build_dir in $(( $(date +%s) - start )) s"
cat <<EOF

Run it:
  . $build_dir/megabatch-env.sh      # ${deps_env:+Open MPI etc. from $deps_prefix; }sets MEGABATCH_BIN for launch/
  \$MEGABATCH_BIN data synth-series --out data/demo.h5
  launch/train-single.sh configs/demo.yaml               # one process, GPU 0
  launch/train-node.sh configs/demo.yaml                 # mpirun, one rank per GPU
  ctest --test-dir $build_dir --output-on-failure         # MEGABATCH_TEST_DEVICE=cuda: the GPU
EOF
