#!/usr/bin/env bash
# Builds megabatch's container images with podman, without a registry or a container runtime,
# and runs their test stage (docker/test-image.sh, a RUN step of the Dockerfile's
# `test` target: `podman run` needs cgroups that a CI sandbox may not have).
#   scripts/image.sh cpu    Debian 12 + LibTorch 1.13  -> localhost/megabatch:cpu
#   scripts/image.sh cuda   Debian 13 + CUDA LibTorch 2.6, NCCL 2.22 -> localhost/megabatch:cuda
#                           (with the cuDNN stand-in unless MEGABATCH_CUDNN=nvidia: Note [cuDNN
#                           stand-in] in scripts/cudnn-standin.sh)
# The base image comes from debootstrap + podman import (it stands in for debian:bookworm /
# debian:trixie, which a user with a registry pulls instead), from the Debian mirror this
# machine's apt sources name (scripts/debian-mirror.sh; MEGABATCH_TRIXIE_MIRROR overrides it). Everything lives under .images/
# of the checkout (git-ignored): storage/ (podman's images and layers), tmp/ (podman's temporary
# files), ccache/ (the compiler cache mounted into the build stage), containers.conf,
# storage.conf. MEGABATCH_IMAGES moves it. Needs root.
# Note [Image temporary files]: podman writes every new layer to a temporary file before storing
# it (containers.conf [engine] image_copy_tmp_dir, default /var/tmp, and TMPDIR), and the build
# stage's package layer is 1.5 GB (CPU) to 6 GB (CUDA). Where /var/tmp is small or another
# filesystem, the commit fails with "storing layer ... to file: io: read/write on closed pipe"
# (seen in CI) or "no space left on device". So image_copy_tmp_dir and TMPDIR point into
# .images/tmp, on the storage's filesystem; free space is checked before the build, and df of
# both folders is printed at the start and on failure.
# MEGABATCH_IMAGE_CCACHE: the compiler cache (below); MEGABATCH_IMAGE_DEBS: downloaded packages.
# MEGABATCH_IMAGE_JOBS: compile jobs in the build stage (default: nproc).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
. scripts/debian-mirror.sh
flavour=${1:-}
die() {
  echo "image.sh: error: $1" >&2
  [[ -n ${2:-} ]] && echo "  hint: $2" >&2
  exit 1
}
case $flavour in
  cpu) suite=bookworm components=main need_gb=8 ;;
  cuda) suite=trixie components=main,contrib,non-free need_gb=30 ;;
  *) die "which image? scripts/image.sh cpu|cuda" ;;
esac
[[ $(id -u) -eq 0 ]] || die "needs root (debootstrap, podman build --isolation chroot)" "run it as root or with sudo"
missing=()
for tool in podman debootstrap; do command -v "$tool" >/dev/null || missing+=("$tool"); done
if ((${#missing[@]})); then
  echo "image.sh: installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }
fi

images=${MEGABATCH_IMAGES:-$repo/.images}
mkdir -p "$images/storage" "$images/run" "$images/tmp" "$images/ccache"
# Note [Image temporary files]
cat >"$images/containers.conf" <<CONF
[containers]
# A chroot build cannot set rlimits (no default ulimits: the RUN steps inherit the caller's).
default_ulimits = []

[engine]
# New layers are written here before they are stored: the storage's filesystem, not /var/tmp.
image_copy_tmp_dir = "$images/tmp"
CONF
cat >"$images/storage.conf" <<CONF
[storage]
driver = "overlay"
graphroot = "$images/storage"
runroot = "$images/run"
CONF
export CONTAINERS_CONF=$images/containers.conf CONTAINERS_STORAGE_CONF=$images/storage.conf
export TMPDIR=$images/tmp
rm -rf "${images:?}"/tmp/*  # what a killed build left

show_space() {
  echo "image.sh: disk space ($1):"
  df -h "$images/storage" "$images/tmp" /var/tmp | sed 's/^/  /'
}
show_space "before the build"
free_gb=$(($(df --output=avail -k "$images/storage" | tail -n 1) / 1024 / 1024))
((free_gb >= need_gb)) ||
  die "the $flavour image needs about $need_gb GB free under $images (base, packages, the build stage's layers and their temporary copies); $free_gb GB are free" \
      "free space there, or set MEGABATCH_IMAGES to a folder on a bigger filesystem"
used_before=$(du -sk "$images" | cut -f1)
start=$SECONDS

# The base image: debootstrap + podman import (stands in for debian:$suite).
base=localhost/megabatch-base:$suite
if ! podman image exists "$base"; then
  echo "image.sh: debootstrap $suite -> $base"
  mirror=$(debian_mirror) || die "no Debian mirror to bootstrap $suite from" "see the line above"
  rm -rf "$images/base-$suite"
  unshare --mount --propagation private -- debootstrap --variant=minbase --components="$components" "$suite" \
    "$images/base-$suite" "$mirror" >"$images/base-$suite.log" 2>&1 ||
    { tail -20 "$images/base-$suite.log" >&2; die "debootstrap $suite failed (log: $images/base-$suite.log)"; }
  rm -rf "$images/base-$suite"/var/cache/apt/archives/*.deb "$images/base-$suite"/var/lib/apt/lists/*
  tar -C "$images/base-$suite" -c . | podman import --change 'CMD ["/bin/bash"]' - "$base" >/dev/null
  rm -rf "$images/base-$suite" "$images/base-$suite.log"
  echo "image.sh: base image made in $((SECONDS - start)) s"
fi

# SRC: the build stage compiles at the checkout's own path (see the Dockerfile's header).
build_args=(--build-arg FLAVOUR="$flavour" --build-arg BASE="$base" --build-arg SRC="$repo")
[[ $flavour == cuda ]] && build_args+=(--build-arg CUDNN="${MEGABATCH_CUDNN:-standin}")
[[ -n ${MEGABATCH_IMAGE_JOBS:-} ]] && build_args+=(--build-arg MEGABATCH_BUILD_JOBS="$MEGABATCH_IMAGE_JOBS")
# The compiler cache of the build stage: MEGABATCH_IMAGE_CCACHE, else the host's (the CPU image
# compiles what a Debian 12 host's build/ compiled, with the same compiler and LibTorch), else
# .images/ccache. The CUDA image's compiler (Debian 13) never matches the host's.
ccache_dir=${MEGABATCH_IMAGE_CCACHE:-}
if [[ -z $ccache_dir ]]; then
  ccache_dir=$images/ccache
  host_cache=$(ccache -k cache_dir 2>/dev/null) || host_cache=${CCACHE_DIR:-$HOME/.cache/ccache}
  [[ $flavour == cpu && -d $host_cache ]] && ccache_dir=$host_cache
fi
mkdir -p "$ccache_dir"
echo "image.sh: compiler cache $ccache_dir"
# Packages already downloaded (docker/host-debs.sh): MEGABATCH_IMAGE_DEBS (a folder, or `none`),
# else for the CPU image on a Debian 12 host the host's apt archive, which scripts/setup.sh
# filled with the same bookworm packages. The CUDA image downloads its own.
debs_dir=${MEGABATCH_IMAGE_DEBS:-}
if [[ -z $debs_dir && $flavour == cpu ]] && grep -qs '^VERSION_CODENAME=bookworm$' /etc/os-release; then
  debs_dir=/var/cache/apt/archives
fi
[[ $debs_dir == none ]] && debs_dir=""
volumes=(-v "$ccache_dir:/root/.cache/ccache")
if [[ -n $debs_dir ]]; then
  [[ -d $debs_dir ]] || die "MEGABATCH_IMAGE_DEBS=$debs_dir is not a folder" "name a folder of .deb files, or none"
  volumes+=(-v "$debs_dir:/mnt/host-debs:ro")
  echo "image.sh: packages from $debs_dir ($(find "$debs_dir" -maxdepth 1 -name '*.deb' | wc -l) .deb files) before downloading"
fi
build() {  # build TARGET TAG
  podman build --isolation chroot --layers --pull=never "${build_args[@]}" "${volumes[@]}" \
    -f docker/Dockerfile --target "$1" -t "$2" . || {
    show_space "after the failure"
    die "podman build of the $flavour image (target $1) failed (output above)" \
        "a failure while storing a layer is most often space: see the df above and Note [Image temporary files] in $0"
  }
}
echo "image.sh: building localhost/megabatch:$flavour (target test runs docker/test-image.sh)"
build test "localhost/megabatch-test:$flavour"
build runtime "localhost/megabatch:$flavour"
size=$(podman image inspect --format '{{.Size}}' "localhost/megabatch:$flavour")
show_space "after the build"
echo "image.sh: localhost/megabatch:$flavour is $((size / 1000 / 1000)) MB; .images/ grew by $((($(du -sk "$images" | cut -f1) - used_before) / 1024)) MB; built and tested in $((SECONDS - start)) s"
echo "image.sh: export it with: podman save --format docker-archive -o megabatch-$flavour.tar localhost/megabatch:$flavour"
