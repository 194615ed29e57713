#!/usr/bin/env bash
# Installs every system dependency of megabatch with apt (Debian 12). Idempotent: packages
# already present are not touched, and apt runs only when something is missing.
#   scripts/setup.sh           build + run dependencies (main job)
#   scripts/setup.sh --tests   also what the test suite needs (Python references, SLURM, clang)
set -euo pipefail

want_tests=0
for arg in "$@"; do
  case "$arg" in
    --tests) want_tests=1 ;;
    -h|--help) sed -n '2,5p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown argument $arg (use --tests or nothing)" >&2; exit 2 ;;
  esac
done

packages=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  libtorch-dev                       # LibTorch 1.13 (CPU)
  libopenblas0-openmp                # fast BLAS for LibTorch (Debian defaults to the reference BLAS)
  libopenmpi-dev openmpi-bin         # MPI
  libhdf5-openmpi-dev hdf5-tools     # parallel HDF5 (MPI-IO)
  libyaml-cpp-dev libspdlog-dev libfmt-dev
  libgtest-dev
  python3 python3-numpy python3-h5py python3-matplotlib   # data checks and `megabatch plot`
)
if [[ $want_tests == 1 ]]; then
  packages+=(
    python3-torch                    # PyTorch reference for parity tests
    slurmctld slurmd slurm-client munge   # the real one-node SLURM test
    clang libclang-rt-14-dev llvm    # libFuzzer and sanitizers; llvm-symbolizer for their stacks
    clang-format                     # the style test (.clang-format)
    iproute2 procps util-linux       # network namespaces, process checks, tmpfs mounts
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
# Services installed here (slurm, munge) must not start at install time in containers.
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "setup.sh: done"
