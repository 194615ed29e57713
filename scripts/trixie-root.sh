#!/usr/bin/env bash
# A Debian 13 ("trixie") root for building and testing megabatch against LibTorch 2.6 (Debian's
# libtorch-dev and python3-torch 2.6, CPU) on a Debian 12 machine. Needs root.
#   scripts/trixie-root.sh setup              make the root, or bring its packages up to date
#   scripts/trixie-root.sh run CMD [ARGS...]  setup, then run CMD inside the root
#   scripts/trixie-root.sh path               print the root's folder
# The root lives in .trixie-root/ of the checkout (git-ignored; MEGABATCH_TRIXIE_ROOT moves it,
# the Debian mirror is the one this machine's apt sources name, scripts/debian-mirror.sh;
# MEGABATCH_TRIXIE_MIRROR overrides it).
# MEGABATCH_TRIXIE_FLAVOUR=cuda makes a second root, .trixie-cuda-root/, with the
# contrib and non-free sections and the CUDA build's packages instead of the CPU LibTorch:
# libtorch-cuda-dev 2.6 (CUDA 12.4), nvidia-cuda-toolkit/nvidia-cuda-dev 12.4, libnccl-dev 2.22
# and libnvidia-ml-dev (about 1.5 GB to download, 5 GB installed). Note [cuDNN stand-in]: Debian's
# cuDNN (nvidia-cudnn) is a downloader package that fetches cuDNN from NVIDIA's server, which CI
# cannot reach; the CUDA root installs instead a local package made by scripts/cudnn-standin.sh
# that provides libcudnn9-cuda-12 and a libcudnn.so.9 whose functions all fail. It satisfies the
# dependency and the dynamic linker; it cannot run a cuDNN kernel, which a machine without a GPU
# never does. A GPU machine installs NVIDIA's cuDNN (nvidia-cudnn, or the image's --build-arg). setup is idempotent: debootstrap runs once,
# and apt runs again only when the package list below or the mirror changed (a stamp in the
# root records them), so a current root costs about a second.
# run mounts /proc, /sys, /dev (with /dev/pts and /dev/shm, which Open MPI uses), a fresh /tmp
# and the checkout at its own path, so build trees made inside keep their paths. CMD starts in
# the caller's folder when that lies in the checkout, else in the checkout. Only MEGABATCH_*,
# MB_*, OMPI_*, CTEST_*, OMP_*, CI and TERM cross into the root. The exit status is CMD's.
# Note [Root mounts]: every mount is made in a private mount namespace (unshare), so nothing
# outside ever sees it and the kernel drops it when the namespace's last process exits, even
# after SIGKILL; an EXIT trap also unmounts explicitly, and SIGINT/TERM/HUP are passed on to CMD.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd -P)
flavour=${MEGABATCH_TRIXIE_FLAVOUR:-cpu}
case $flavour in
  cpu) root=${MEGABATCH_TRIXIE_ROOT:-$repo/.trixie-root} ;;
  cuda) root=${MEGABATCH_TRIXIE_ROOT:-$repo/.trixie-cuda-root} ;;
  *) echo "trixie-root.sh: MEGABATCH_TRIXIE_FLAVOUR=$flavour: use cpu or cuda" >&2; exit 2 ;;
esac
. "$repo/scripts/debian-mirror.sh"
mirror=$(debian_mirror) || exit 1
suite=trixie
stamp=etc/megabatch-packages

if [[ $flavour == cuda ]]; then
  components=main,contrib,non-free
  packages=(
    libtorch-cuda-dev                     # LibTorch 2.6 built for CUDA 12.4 (contrib)
    nvidia-cuda-toolkit nvidia-cuda-dev   # nvcc and the CUDA 12.4 headers/libraries (non-free)
    libnccl-dev                           # NCCL 2.22 (non-free)
    libnvidia-ml-dev                      # nvml.h (megabatch dlopens libnvidia-ml at run time)
    libopenblas0-openmp
    python3 python3-h5py python3-numpy    # the demo data and the gpuless tests
    python3-torch-cuda                    # PyTorch 2.6 (CUDA build, runs on the CPU): the
                                          # reference of the tests labelled torch2 (~40 MB more)
    libopenmpi-dev openmpi-bin libhdf5-openmpi-dev
    libyaml-cpp-dev libspdlog-dev libfmt-dev libgtest-dev
    protobuf-compiler libprotobuf-dev libboost-dev   # TensorBoard event files
    cmake ninja-build g++ pkg-config ccache procps
  )
else
  components=main
  packages=(
  libtorch-dev python3-torch              # LibTorch 2.6 and PyTorch 2.6 (CPU)
  libopenblas0-openmp                     # the BLAS the Debian 12 build uses (scripts/setup.sh)
  python3-h5py python3-numpy              # Python references and data checks
  libopenmpi-dev openmpi-bin              # MPI
  libhdf5-openmpi-dev                     # parallel HDF5
  libyaml-cpp-dev libspdlog-dev libfmt-dev libgtest-dev
  protobuf-compiler libprotobuf-dev libboost-dev   # TensorBoard event files
  cmake ninja-build g++ pkg-config ccache
  python3-dev python3-setuptools          # torch.compile (inductor) builds C++ kernels on the CPU,
  libsleef-dev                            # vectorised ones only with sleef.h (else scalar code)
  procps                                  # pgrep, used by the SIGTERM test
  )
fi

die() {
  echo "trixie-root.sh: $*" >&2
  exit 1
}

need_root() {
  [[ $(id -u) -eq 0 ]] || die "needs root (debootstrap, chroot and mounts); run it as root or with sudo"
  local tool
  for tool in unshare chroot flock mount; do
    command -v "$tool" >/dev/null || die "$tool not found; install util-linux and coreutils"
  done
}

# Refuses to delete a folder with anything mounted below it (a mount left by a foreign tool).
assert_unmounted() {
  if grep -q " $1[/ ]" /proc/self/mounts; then
    die "$1 has mounts below it (see /proc/self/mounts); unmount them before it can be rebuilt"
  fi
}

bootstrap() {
  [[ -f $root/.megabatch-bootstrapped ]] && return
  if ! command -v debootstrap >/dev/null; then
    echo "trixie-root.sh: installing debootstrap"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null ||
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap; }
  fi
  local partial=$root.partial start=$SECONDS
  [[ ! -e $root ]] || die "$root exists but is no finished root of this script; move it away or delete it"
  assert_unmounted "$partial"
  rm -rf "$partial"
  echo "trixie-root.sh: debootstrap $suite from $mirror into $root"
  unshare --mount --propagation private -- debootstrap --variant=minbase --components="$components" "$suite" "$partial" "$mirror" \
    >"$partial.log" 2>&1 || { tail -20 "$partial.log" >&2; die "debootstrap failed (whole log: $partial.log); is $mirror reachable?"; }
  rm -f "$partial.log"
  # Lean apt: no recommends, no documentation, no fsync per file (after a crash, delete the root
  # and make it again), no services started by package scripts.
  printf 'APT::Install-Recommends "false";\nAcquire::Retries "3";\n' >"$partial/etc/apt/apt.conf.d/90megabatch"
  printf 'path-exclude=/usr/share/doc/*\npath-exclude=/usr/share/man/*\npath-exclude=/usr/share/locale/*\nforce-unsafe-io\n' \
    >"$partial/etc/dpkg/dpkg.cfg.d/90megabatch"
  printf '#!/bin/sh\nexit 101\n' >"$partial/usr/sbin/policy-rc.d"
  chmod +x "$partial/usr/sbin/policy-rc.d"
  touch "$partial/.megabatch-bootstrapped"
  mv "$partial" "$root"
  echo "trixie-root.sh: debootstrap took $((SECONDS - start)) s"
}

install_packages() {
  local want
  want=$(printf '%s\n' "$mirror" "${packages[@]}")
  [[ $flavour == cuda ]] && want+=$'\n'$(sha256sum "$repo/scripts/cudnn-standin.sh" | cut -d' ' -f1)
  [[ -f $root/$stamp && $(cat "$root/$stamp") == "$want" ]] && return
  local start=$SECONDS
  echo "trixie-root.sh: installing ${packages[*]}"
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  if [[ $flavour == cuda ]]; then  # Note [cuDNN stand-in]
    bash "$repo/scripts/cudnn-standin.sh" "$root" || die "making the cuDNN stand-in failed (output above)"
  fi
  unshare --mount --propagation private -- bash "$0" __enter env DEBIAN_FRONTEND=noninteractive \
    bash -c 'dpkg --configure -a && apt-get update -qq && apt-get install -y -qq "$@" >/dev/null' apt "${packages[@]}" ||
    die "apt-get inside $root failed (output above); run 'bash $0 setup' again, or delete $root to start over"
  printf '%s\n' "$want" >"$root/$stamp"
  echo "trixie-root.sh: packages took $((SECONDS - start)) s"
}

setup() {
  mkdir -p "$(dirname "$root")"
  exec 9>"$root.lock"
  flock 9  # concurrent callers (CTest workers) wait for one setup
  bootstrap
  install_packages
  exec 9>&-
}

# --- inside the private mount namespace (Note [Root mounts]) ------------------------------
mounted=()
unmount_all() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
    umount -R -l "${mounted[i]}" 2>/dev/null || true
  done
}

mount_into() {  # mount_into TARGET mount-args...
  local target=$root$1
  shift
  mkdir -p "$target"
  mount "$@" "$target"
  mounted+=("$target")
}

enter() {
  trap unmount_all EXIT
  mount_into /proc -t proc proc
  mount_into /sys --rbind /sys
  mount_into /dev --rbind /dev
  mount_into /tmp -t tmpfs -o mode=1777 tmpfs
  mount_into "$repo" --bind "$repo"
  cp /etc/hosts "$root/etc/hosts"
  local cwd=$repo var
  [[ $PWD == "$repo" || $PWD == "$repo"/* ]] && cwd=$PWD
  local env=(HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8)
  while IFS= read -r var; do
    [[ $var =~ ^(MEGABATCH_|MB_|OMPI_|CTEST_|OMP_|CI$|TERM$) ]] && env+=("$var=${!var}")
  done < <(compgen -e)
  exec 3<&0  # a background job's stdin would be /dev/null
  chroot "$root" /usr/bin/env -i "${env[@]}" /bin/bash -c 'cd "$1" && shift && exec "$@"' cmd "$cwd" "$@" <&3 &
  local child=$! rc=0 sig
  for sig in INT TERM HUP; do
    trap "kill -s $sig $child 2>/dev/null || true" "$sig"
  done
  while true; do
    wait "$child" && rc=0 || rc=$?
    kill -0 "$child" 2>/dev/null || break  # wait returned for a signal: CMD still runs
  done
  return "$rc"
}

case ${1:-} in
  setup)
    need_root
    setup
    ;;
  run)
    shift
    [[ $# -gt 0 ]] || die "run needs a command, e.g. scripts/trixie-root.sh run cmake --version"
    need_root
    setup
    exec unshare --mount --propagation private -- bash "$0" __enter "$@"
    ;;
  __enter)
    shift
    enter "$@"
    ;;
  path) echo "$root" ;;
  *)
    sed -n '2,6p' "$0" >&2
    exit 2
    ;;
esac
