#!/usr/bin/env bash
# Runs a command in a private mount namespace in which this machine's installed copies of the
# packages in a gpu-deps folder are hidden, so that a build or run can only succeed from the
# unpacked prefix (a check on Debian 12, where those packages are also installed system-wide).
#   tests/tools/hide_system_deps.sh DEBDIR COMMAND [ARGS...]      (root; needs unshare)
# Hidden: each package's files (an empty file is bound over each regular file) and its private
# folders (an empty folder over /usr/lib/<arch>/openmpi, .../hdf5, .../pmix2, /etc/openmpi,
# /usr/share/openmpi, /usr/include/{hdf5,spdlog,fmt,gtest,gmock,yaml-cpp}, the cmake configs).
set -euo pipefail
[[ $# -ge 2 ]] || { sed -n '2,7p' "$0" >&2; exit 2; }
debdir=$1
shift
[[ -f $debdir/packages.txt ]] || { echo "hide_system_deps.sh: no $debdir/packages.txt" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "hide_system_deps.sh: needs root (mount namespaces)" >&2; exit 2; }

if [[ -z ${MB_HIDE_INSIDE:-} ]]; then
  exec unshare --mount --propagation private env MB_HIDE_INSIDE=1 "$0" "$debdir" "$@"
fi

arch=x86_64-linux-gnu
empty_dir=$(mktemp -d)
empty_file=$(mktemp)
dirs=(
  "/usr/lib/$arch/openmpi" "/usr/lib/$arch/hdf5" "/usr/lib/$arch/pmix2" /etc/openmpi /usr/share/openmpi
  /usr/share/pmix /usr/include/hdf5 /usr/include/spdlog /usr/include/fmt /usr/include/gtest
  /usr/include/gmock /usr/include/yaml-cpp "/usr/lib/$arch/cmake/GTest" "/usr/lib/$arch/cmake/fmt"
  "/usr/lib/$arch/cmake/spdlog" "/usr/lib/$arch/cmake/yaml-cpp" /usr/src/googletest /usr/src/gtest
)
hidden=0
for dir in "${dirs[@]}"; do
  [[ -d $dir ]] || continue
  mount --bind "$empty_dir" "$dir"
  hidden=$((hidden + 1))
done
while read -r pkg _; do
  [[ $pkg == \#* || -z $pkg ]] && continue
  dpkg -s "$pkg" >/dev/null 2>&1 || continue
  while IFS= read -r file; do
    [[ -f $file && ! -L $file ]] || continue
    case $file in /usr/share/doc/* | /usr/share/man/*) continue ;; esac
    mount --bind "$empty_file" "$file" 2>/dev/null && hidden=$((hidden + 1))
  done < <(dpkg -L "$pkg")
done <"$debdir/packages.txt"
echo "hide_system_deps.sh: $hidden system paths hidden" >&2
exec "$@"
