#!/usr/bin/env bash
# Note [cuDNN stand-in]. Debian 13's libtorch-cuda depends on cuDNN 9, which Debian
# ships only as a downloader (nvidia-cudnn fetches the library from NVIDIA's server at install
# time). CI cannot reach that server, so the CUDA root (scripts/trixie-root.sh with
# MEGABATCH_TRIXIE_FLAVOUR=cuda) installs this local package instead:
#   - its name and version satisfy the cuDNN dependency that `apt-cache depends` reports for
#     libtorch-cuda (read here, not assumed), and it says "stand-in" in its description;
#   - it holds a libcudnn.so.9 with every cuDNN function that libtorch_cuda imports (read from
#     libtorch_cuda.so's dynamic symbols), and those that python3-torch-cuda's libtorch_python
#     imports (cudnnGetProperty and a few more; that package is the torch2 tests' reference in
#     the CUDA root), each returning CUDNN_STATUS_NOT_INITIALIZED, so the
#     dynamic linker loads megabatch and LibTorch. It cannot run a cuDNN kernel; a machine without
#     a GPU never calls one (megabatch's models use no convolutions; LibTorch asks cuDNN only for
#     CUDA tensors).
# On a GPU machine, install NVIDIA's cuDNN instead (apt install nvidia-cudnn, which downloads it;
# the CUDA image takes --build-arg CUDNN=nvidia, see docker/Dockerfile).
#   scripts/cudnn-standin.sh ROOT     builds ROOT/var/cache/megabatch/cudnn-standin.deb and
#                                     installs it into ROOT (a Debian 13 root with contrib; / for
#                                     the running system, as scripts/setup.sh --cuda does)
set -euo pipefail
root=${1:?usage: scripts/cudnn-standin.sh ROOT}
repo=$(cd "$(dirname "$0")/.." && pwd -P)
work=$root/var/cache/megabatch
die() {
  echo "cudnn-standin.sh: $*" >&2
  exit 1
}
for tool in gcc nm dpkg-deb; do
  command -v "$tool" >/dev/null || die "$tool not found on the host; install gcc, binutils and dpkg"
done
mkdir -p "$work"
# ROOT=/ (scripts/setup.sh --cuda in a container or on a Debian 13 host) runs in place.
in_root() {
  if [[ $(cd "$root" && pwd -P) == / ]]; then
    "$@"
  else
    unshare --mount --propagation private -- bash "$repo/scripts/trixie-root.sh" __enter "$@"
  fi
}

# 1. What libtorch-cuda really depends on, and its library package.
in_root bash -c 'set -e; apt-get update -qq
  dev=libtorch-cuda-dev
  lib=$(apt-cache depends "$dev" | sed -n "s/^ *Depends: \(libtorch-cuda-[0-9.]*\)$/\1/p" | head -n1)
  [ -n "$lib" ] || { echo "no libtorch-cuda-X.Y among the dependencies of $dev" >&2; exit 1; }
  echo "$lib" >/var/cache/megabatch/torch-lib
  apt-cache show "$lib" | sed -n "s/^Depends: //p" | head -n1 | tr "," "\n" | sed "s/^ *//" |
    grep -i cudnn >/var/cache/megabatch/cudnn-deps || true
  cd /var/cache/megabatch && rm -f ./libtorch-cuda*.deb ./python3-torch-cuda*.deb
  for pkg in "$lib" python3-torch-cuda; do
    # apt keeps what it installed in its archive: a root being brought up to date reuses that.
    cached=$(ls /var/cache/apt/archives/"$pkg"_*.deb 2>/dev/null | head -n1)
    if [ -n "$cached" ]; then cp "$cached" .; else apt-get download -qq "$pkg" 2>/dev/null; fi
  done'
lib=$(cat "$work/torch-lib")
[[ -s $work/cudnn-deps ]] || die "$lib does not depend on cuDNN: the stand-in is not needed (drop it)"
echo "cudnn-standin.sh: $lib depends on: $(paste -sd';' "$work/cudnn-deps")"
# A dependency like "libcudnn9-cuda-12 (>= 9.1.0)" or "nvidia-cudnn | libcudnn9-cuda-12": take
# the first alternative named libcudnn*, else the first one.
dep=$(tr '|' '\n' <"$work/cudnn-deps" | sed 's/^ *//;s/ *$//' | grep -m1 '^libcudnn' ||
  tr '|' '\n' <"$work/cudnn-deps" | sed 's/^ *//;s/ *$//' | head -n1)
name=${dep%% *}
version=9.99.0
if [[ $dep =~ \(\>=\ *([^\)]+)\) || $dep =~ \(=\ *([^\)]+)\) ]]; then version=${BASH_REMATCH[1]}; fi
version+="+megabatch.standin"

# 2. The cuDNN functions libtorch_cuda (and python3-torch-cuda's libraries) import.
rm -rf "$work/x" "$work/pkg"
mkdir -p "$work/x"
for deb in "$work"/libtorch-cuda*.deb "$work"/python3-torch-cuda*.deb; do
  [[ -f $deb ]] && dpkg-deb -x "$deb" "$work/x"
done
so=$(find "$work/x" -name 'libtorch_cuda.so*' -type f | head -n1)
[[ -n $so ]] || die "no libtorch_cuda.so in $lib"
mapfile -t importers < <(find "$work/x" -name '*.so*' -type f)
mapfile -t symbols < <(for f in "${importers[@]}"; do nm -D --undefined-only "$f" 2>/dev/null; done |
  awk '{print $2}' | grep '^cudnn' | sed 's/@.*//' | sort -u)
# The imports are versioned (cudnnCreate@libcudnn.so.9): the stub defines that version node.
node=$(nm -D --undefined-only "$so" | awk '{print $2}' | grep -m1 '^cudnn.*@' | sed 's/^[^@]*@*//' || true)
((${#symbols[@]} > 0)) || die "libtorch_cuda.so imports no cudnn* symbol: check what $lib needs"
needed=$(objdump -p "$so" 2>/dev/null | awk '/NEEDED/ && /cudnn/ {print $2}' | head -n1)
soname=${needed:-libcudnn.so.9}
echo "cudnn-standin.sh: $so needs $soname, ${#symbols[@]} cudnn functions (symbol version ${node:-none})"

# 3. The stub library and the package.
mkdir -p "$work/pkg/DEBIAN" "$work/pkg/usr/lib/x86_64-linux-gnu"
{
  echo '// Generated by scripts/cudnn-standin.sh: Note [cuDNN stand-in]. Every function fails.'
  echo 'const char* cudnnGetErrorString(int s) { (void)s; return "cuDNN stand-in (megabatch CI): no cuDNN installed"; }'
  for s in "${symbols[@]}"; do
    [[ $s == cudnnGetErrorString ]] && continue
    if [[ $s == cudnnGetVersion || $s == cudnnGetCudartVersion || $s == cudnnGetMaxDeviceVersion ]]; then
      echo "unsigned long $s(void) { return 0; }"
    else
      echo "int $s() { return 1001; }  // CUDNN_STATUS_NOT_INITIALIZED"
    fi
  done
} >"$work/stub.c"
version_flags=()
if [[ -n $node ]]; then
  printf '%s {\n  global: cudnn*;\n  local: *;\n};\n' "$node" >"$work/stub.map"
  version_flags=(-Wl,--version-script="$work/stub.map")
fi
gcc -shared -fPIC -O1 -w -Wl,-soname,"$soname" "${version_flags[@]}" \
  -o "$work/pkg/usr/lib/x86_64-linux-gnu/$soname" "$work/stub.c"
# The linker needs every import defined, with its version: check before packaging.
missing=$(comm -23 <(printf '%s\n' "${symbols[@]}") \
  <(nm -D --defined-only "$work/pkg/usr/lib/x86_64-linux-gnu/$soname" | awk '{print $3}' | sed 's/@.*//' | sort -u))
[[ -z $missing ]] || die "the stub lacks: $missing"
defined=$(nm -D --defined-only "$work/pkg/usr/lib/x86_64-linux-gnu/$soname")
if [[ -n $node && $defined != *"@@$node"* ]]; then
  die "the stub's symbols lack the version node $node"
fi
cat >"$work/pkg/DEBIAN/control" <<EOF
Package: $name
Version: $version
Architecture: amd64
Maintainer: megabatch CI <ci@megabatch.invalid>
Provides: $(printf '%s\n' libcudnn9-cuda-12 nvidia-cudnn | grep -vx "$name" | sed "s/\$/ (= $version)/" | paste -sd, | sed 's/,/, /g')
Section: contrib/libs
Priority: optional
Description: cuDNN stand-in for building and testing megabatch without a GPU (NOT cuDNN)
 Made by megabatch's scripts/cudnn-standin.sh because NVIDIA's cuDNN cannot be downloaded
 in CI. Satisfies libtorch-cuda's dependency; every cuDNN function fails. Replace it with
 NVIDIA's cuDNN (apt install nvidia-cudnn) on a machine with a GPU.
EOF
dpkg-deb --root-owner-group -Zxz --build "$work/pkg" "$work/cudnn-standin.deb" >/dev/null
rm -rf "$work/x" "$work/pkg" "$work"/libtorch-cuda*.deb "$work"/python3-torch-cuda*.deb
in_root bash -c 'DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --reinstall --allow-downgrades /var/cache/megabatch/cudnn-standin.deb >/dev/null'
echo "cudnn-standin.sh: installed $name $version (a stand-in, not cuDNN) into $root"
