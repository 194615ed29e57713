#!/usr/bin/env bash
# The Debian packages that hold the shared libraries BINARY loads (ldd), plus what megabatch
# needs at run time without linking it: Open MPI's mpirun and plugins, OpenBLAS (LibTorch's BLAS
# through the alternatives system), procps. One package a line, for the runtime stage.
#   docker/runtime-packages.sh BINARY FLAVOUR
set -euo pipefail
bin=$1
flavour=${2:-cpu}
ldd "$bin" >/dev/null || { echo "runtime-packages.sh: ldd $bin failed" >&2; exit 1; }
{
  ldd "$bin" | awk '/=> \// {print $3}' | while read -r lib; do
    real=$(readlink -f "$lib")
    for path in "$lib" "$real" "${lib#/usr}" "/usr$lib" "${real#/usr}" "/usr$real"; do
      if owner=$(dpkg -S "$path" 2>/dev/null); then
        echo "${owner%%:*}"
        break
      fi
    done
  done
  echo openmpi-bin
  echo libopenblas0-openmp
  echo procps
} | sort -u | grep -v -e '^libc6$' -e '^nvidia-cudnn$'
