#!/usr/bin/env bash
# Installs every system dependency of megabatch with apt (Debian 12). Idempotent: packages
# already present are not touched, and apt runs only when something is missing.
#   scripts/setup.sh           build + run dependencies (main job)
#   scripts/setup.sh --tests   also what the test suite needs (Python references, SLURM, clang)
#   scripts/setup.sh --build-only   only what compiling needs: scripts/demo.sh installs the rest
#                              (Python for plots, about a quarter of apt's time) while it builds
#   scripts/setup.sh --cuda    the CUDA build instead, on Debian 13 ("trixie") with the
#                              contrib and non-free sections enabled: libtorch-cuda-dev 2.6 (CUDA
#                              12.4), nvidia-cuda-toolkit + nvidia-cuda-dev 12.4, libnccl-dev 2.22,
#                              libnvidia-ml-dev. Then scripts/build.sh build -DMEGABATCH_CUDA=ON.
#     cuDNN: libtorch-cuda depends on nvidia-cudnn, a downloader package that fetches cuDNN from
#     NVIDIA's server during apt install (it asks to accept NVIDIA's licence). Where that server
#     cannot be reached (CI), MEGABATCH_CUDNN=standin installs the local stand-in of
#     scripts/cudnn-standin.sh instead (Note [cuDNN stand-in]: every cuDNN call fails; enough to
#     build and to run on the CPU, not for a GPU). Default: nvidia (the real one).
set -euo pipefail

want_tests=0
want_cuda=0
build_only=0
for arg in "$@"; do
  case "$arg" in
    --tests) want_tests=1 ;;
    --cuda) want_cuda=1 ;;
    --build-only) build_only=1 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown argument $arg (use --tests, --cuda, --build-only or nothing)" >&2; exit 2 ;;
  esac
done

torch_packages=(libtorch-dev)       # LibTorch 1.13 (CPU; Debian 12)
if [[ $want_cuda == 1 ]]; then
  torch_packages=(
    libtorch-cuda-dev                # LibTorch 2.6 for CUDA 12.4 (contrib)
    nvidia-cuda-toolkit nvidia-cuda-dev   # nvcc, CUDA 12.4 runtime and headers (non-free)
    libnccl-dev                      # NCCL 2.22 (non-free)
    libnvidia-ml-dev                 # nvml.h
  )
fi
packages=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  "${torch_packages[@]}"
  libopenblas0-openmp                # fast BLAS for LibTorch (Debian defaults to the reference BLAS)
  libopenmpi-dev openmpi-bin         # MPI
  libhdf5-openmpi-dev hdf5-tools     # parallel HDF5 (MPI-IO)
  libyaml-cpp-dev libspdlog-dev libfmt-dev
  libgtest-dev
  protobuf-compiler libprotobuf-dev libboost-dev   # TensorBoard event files: protoc, Boost.CRC
)
if [[ $build_only == 0 ]]; then
  packages+=(python3 python3-numpy python3-h5py python3-matplotlib)   # data checks and `megabatch plot`
fi
if [[ $want_tests == 1 ]]; then
  packages+=(
    python3-torch                    # PyTorch reference for parity tests
    python3-scipy python3-pandas     # references for eval's IC, rank IC and results by period
    python3-protobuf python3-crc32c  # an independent reader of the TensorBoard event files
    slurmctld slurmd slurm-client munge   # the real one-node SLURM test
    clang libclang-rt-14-dev llvm    # libFuzzer and sanitizers; llvm-symbolizer for their stacks
    clang-format                     # the style test (.clang-format)
    iproute2 procps util-linux       # network namespaces, process checks, tmpfs mounts
    ccache podman debootstrap        # the CPU image stage: its build reuses the main build's objects
  )
fi

missing=()
for pkg in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "setup.sh: all ${#packages[@]} packages already installed"
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "setup.sh: run as root (or install sudo) to install: ${missing[*]}" >&2; exit 1; }
  SUDO="sudo"
fi
echo "setup.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
if [[ $want_cuda == 1 ]]; then
  if [[ -z $(apt-cache policy libtorch-cuda-dev 2>/dev/null | sed -n 's/^ *Candidate: //p' | grep -v '(none)') ]]; then
    echo "setup.sh: apt knows no libtorch-cuda-dev: --cuda needs Debian 13 (trixie) with the contrib and" \
      "non-free sections (add 'Components: main contrib non-free' to /etc/apt/sources.list.d/debian.sources)" >&2
    exit 1
  fi
  case ${MEGABATCH_CUDNN:-nvidia} in
    nvidia) echo "setup.sh: nvidia-cudnn will download cuDNN from NVIDIA during the install" \
      "(MEGABATCH_CUDNN=standin where that server cannot be reached)" ;;
    standin)
      if ! dpkg-query -W -f='${Status}' nvidia-cudnn 2>/dev/null | grep -q "install ok installed"; then
        $SUDO apt-get install -y -qq --no-install-recommends gcc libc6-dev binutils dpkg-dev >/dev/null
        $SUDO bash "$(dirname "$0")/cudnn-standin.sh" /
      fi ;;
    *) echo "setup.sh: MEGABATCH_CUDNN=${MEGABATCH_CUDNN}: use nvidia or standin" >&2; exit 2 ;;
  esac
fi
# Services installed here (slurm, munge) must not start at install time in containers. The lock
# timeout lets a second apt (scripts/demo.sh's background install, unattended-upgrades) finish first.
$SUDO apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=600 "${missing[@]}"
echo "setup.sh: done"
