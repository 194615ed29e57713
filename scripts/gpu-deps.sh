#!/usr/bin/env bash
# Carries megabatch's system dependencies (Open MPI, parallel HDF5, yaml-cpp, spdlog, fmt,
# GoogleTest) as Debian 12 packages to a machine that lacks them and has no apt access, such
# as a CUDA PyTorch image. Nothing is installed into /: the packages are unpacked into a prefix.
#
#   scripts/gpu-deps.sh fetch [DIR]           (Debian 12, apt) download the .debs into DIR
#                                             (default .gpu-debs) and write DIR/packages.txt
#   scripts/gpu-deps.sh unpack DIR PREFIX     (any glibc x86-64 Linux with dpkg-deb) unpack them
#                                             into PREFIX, repair links, write PREFIX/env.sh
#   scripts/gpu-deps.sh check PREFIX          report shared libraries that do not resolve
#
# Then `. PREFIX/env.sh` and build with scripts/build-gpu.sh (which runs unpack itself).
# The prefix's Open MPI is Debian's 4.1.4: single node (shared memory, TCP) works without
# anything else; mpirun across hosts needs ssh, which is not carried.
set -euo pipefail

die() {  # die MESSAGE [HINT]
  echo "gpu-deps.sh: error: $1" >&2
  [[ -n ${2:-} ]] && echo "  hint: $2" >&2
  exit 1
}

# --- What is carried -----------------------------------------------------------------------
# The packages megabatch builds and runs against; their Depends are followed (see below).
ROOTS=(
  openmpi-bin openmpi-common libopenmpi3 libopenmpi-dev   # mpirun/orterun, plugins, help, mpicxx
  libhdf5-openmpi-dev libhdf5-openmpi-103-1 libhdf5-openmpi-hl-100   # parallel HDF5
  libyaml-cpp-dev libyaml-cpp0.7
  libspdlog-dev libspdlog1.10 libfmt-dev libfmt9
  libgtest-dev                                          # the test suite (static libraries)
  protobuf-compiler libprotoc32 libprotobuf-dev libprotobuf-lite32 libprotobuf32   # TensorBoard
  libboost1.74-dev                                      # Boost.CRC (headers only)
  libunistring2   # Debian 12's libpsl (curl, HDF5's ros3) needs .so.2; Ubuntu 24.04 has .so.5
)

# Present on any Ubuntu 24.04 image (the ubuntu:24.04 base, which CUDA images extend) under
# the same soname, so neither carried nor followed. Debian 12 names; Ubuntu 24.04 renamed some
# to *t64 (libssl3t64, libgnutls30t64, libdb5.3t64) with the same sonames. libstdc++6 and
# libgcc-s1 must come from the system: the image's are newer and LibTorch needs them.
BASE=(
  libc6 libc-bin libgcc-s1 libstdc++6 gcc-12-base zlib1g libzstd1 liblzma5 libbz2-1.0 liblz4-1
  libcrypt1 libselinux1 libpcre2-8-0 libudev1 libsystemd0 libcap2 libcap-ng0 libaudit1
  libaudit-common libgcrypt20 libgpg-error0 libtinfo6 libuuid1 libmd0 libffi8 libgmp10
  libgnutls30 libhogweed6 libnettle8 libp11-kit0 libtasn1-6 libidn2-0 libcom-err2
  libdb5.3 libacl1 libattr1 libblkid1 libmount1 libseccomp2 libxxhash0 libsemanage2
  libsemanage-common libsepol2 libpam0g libpam-modules libpam-runtime
  debconf perl-base dpkg tar debianutils adduser passwd init-system-helpers sensible-utils
)

# Not needed to build or run megabatch, so neither carried nor followed:
#   compilers and Fortran (the image has its own C++ compiler; megabatch has no Fortran);
#   the -dev packages that libopenmpi-dev and libhdf5-openmpi-dev pull in only so that static
#   or wrapper links of other programs work (megabatch links libmpi and libhdf5 shared, whose
#   own DT_NEEDED entries name the rest);
#   HDF5's C++ and Fortran bindings; test sources; JavaScript docs; ssh (multi-host mpirun);
#   hwloc's optional plugins (PCI/XML/OpenCL; they pull libxml2 + 9 MiB of ICU).
SKIP=(
  gfortran gfortran-11 gfortran-12 flang-16 flang-19 flang-22 gcc gcc-11 gcc-12 cpp libstdc++-12-dev
  libgfortran5 libgfortran-11-dev libgfortran-12-dev libc6-dev linux-libc-dev libcrypt-dev
  libibverbs-dev libhwloc-dev libevent-dev libpmix-dev zlib1g-dev libaec-dev libjpeg-dev
  libjpeg62-turbo-dev libcurl4-openssl-dev libcurl4-gnutls-dev libcurl4-nss-dev libssl-dev
  libnuma-dev libnl-3-dev libnl-route-3-dev libltdl-dev libtirpc-dev libnsl-dev
  libhdf5-openmpi-fortran-102 libhdf5-openmpi-hl-fortran-100 libhdf5-openmpi-cpp-103-1
  libhdf5-openmpi-hl-cpp-100
  googletest catch2 libjs-jquery libjs-jquery-ui openssh-client
  libhwloc-plugins
)

DEFAULT_DIR=.gpu-debs

in_list() {  # in_list WORD LIST...
  local word=$1 item
  shift
  for item in "$@"; do [[ $item == "$word" ]] && return 0; done
  return 1
}

# Prints one line per dependency group (Depends and Pre-Depends) of the packages named: the
# alternatives, with a virtual package's providers listed after it.
dep_groups() {
  apt-cache depends --no-recommends --no-suggests --no-enhances --no-conflicts --no-breaks \
    --no-replaces "$@" 2>/dev/null | awk '
    function flush() { if (group != "") print group; group = "" }
    /^[^ ]/ { flush(); cont = 0; virtual = 0; next }
    /^ *\|?(Pre)?Depends: / {
      if (!cont) flush()
      group = group (group == "" ? "" : " ") $2
      cont = ($0 ~ /^ *\|/); virtual = ($2 ~ /^</); next
    }
    /^    [^ ]/ { if (virtual) group = group " " $1; next }
    /^  [A-Za-z]/ { if (!cont) flush(); virtual = 0; next }
    END { flush() }'
}

# The closure of ROOTS over Depends, minus BASE and SKIP, one package a line. Breadth first,
# one apt-cache call per level.
closure() {
  local -A chosen=()
  local level=("${ROOTS[@]}") next todo pkg group alt pick
  while [[ ${#level[@]} -gt 0 ]]; do
    todo=()
    for pkg in "${level[@]}"; do
      [[ -n ${chosen[$pkg]:-} ]] && continue
      in_list "$pkg" "${BASE[@]}" "${SKIP[@]}" && continue
      chosen[$pkg]=1
      todo+=("$pkg")
    done
    [[ ${#todo[@]} -gt 0 ]] || break
    apt-cache show --no-all-versions "${todo[@]}" >/dev/null 2>&1 ||
      die "apt does not know one of: ${todo[*]}" "run apt-get update (this needs Debian 12 sources)"
    next=()
    while read -r group; do
      pick=""
      for alt in $group; do
        # A group is satisfied by the base system, deliberately left out, or already chosen.
        if in_list "$alt" "${BASE[@]}" "${SKIP[@]}" || [[ -n ${chosen[$alt]:-} ]]; then
          pick=none
          break
        fi
      done
      if [[ -z $pick ]]; then
        for alt in $group; do
          [[ $alt == \<* ]] && continue
          pick=$alt
          break
        done
      fi
      [[ -n $pick && $pick != none ]] && next+=("$pick")
    done < <(dep_groups "${todo[@]}")
    level=("${next[@]}")
  done
  printf '%s\n' "${!chosen[@]}" | sort
}

cmd_fetch() {
  local dir=${1:-$DEFAULT_DIR}
  if ! command -v apt-get >/dev/null || ! command -v apt-cache >/dev/null; then
    die "fetch needs apt (Debian 12)" "run it on a Debian 12 machine and carry the folder"
  fi
  grep -qs 'VERSION_CODENAME=bookworm' /etc/os-release ||
    echo "gpu-deps.sh: warning: this is not Debian 12 (bookworm); the packages are whatever apt offers here" >&2
  mkdir -p "$dir"
  local packages
  mapfile -t packages < <(closure)
  [[ ${#packages[@]} -gt 0 ]] || die "no packages chosen" "check apt (apt-get update)"
  echo "gpu-deps.sh: ${#packages[@]} packages (roots: ${#ROOTS[@]}; base and skipped lists in $0)"
  # Download into a fresh folder, then replace the old set: DIR holds exactly this set.
  # apt-get download writes into the current directory and needs no root.
  local fresh=$dir/.download
  rm -rf "$fresh"
  mkdir -p "$fresh"
  local sandbox=()
  [[ $(id -u) -eq 0 ]] && sandbox=(-o APT::Sandbox::User=root)   # no _apt warning as root
  (cd "$fresh" && apt-get download -q "${sandbox[@]}" "${packages[@]}" >/dev/null) ||
    die "apt-get download failed" "check the network and apt sources (apt-get update)"
  local got=("$fresh"/*.deb)
  [[ ${#got[@]} -eq ${#packages[@]} ]] ||
    die "downloaded ${#got[@]} of ${#packages[@]} packages" "rerun fetch; apt-get download may have failed for some"
  rm -f "$dir"/*.deb
  mv "$fresh"/*.deb "$dir"/
  rmdir "$fresh"
  local deb
  {
    echo "# megabatch GPU dependencies: Debian 12 packages, written by scripts/gpu-deps.sh fetch"
    for deb in "$dir"/*.deb; do
      # shellcheck disable=SC2016  # dpkg-deb's format, not the shell's
      dpkg-deb -W --showformat='${Package} ${Version} ' "$deb"
      stat -c %s "$deb"
    done
  } >"$dir/packages.txt"
  local bytes
  bytes=$(du -cb "$dir"/*.deb | tail -1 | cut -f1)
  echo "gpu-deps.sh: $dir: ${#packages[@]} .deb files, $(awk -v b="$bytes" 'BEGIN{printf "%.1f MiB", b/1048576}');" \
       "list in $dir/packages.txt"
}

# Makes PREFIX/LINK point at PREFIX/TARGET with a relative link, when the target exists.
link_in_prefix() {  # link_in_prefix PREFIX LINK TARGET
  local prefix=$1 link=$2 target=$3
  [[ -n $target && -e $prefix$target ]] || return 0
  mkdir -p "$(dirname "$prefix$link")"
  ln -sfn "$(realpath -s --relative-to="$(dirname "$prefix$link")" "$prefix$target")" "$prefix$link"
}

# The alternatives a package's postinst would register (update-alternatives --install LINK NAME
# PATH PRIO and its --slave LINK NAME PATH), as "LINK PATH" lines.
alternatives_of() {  # alternatives_of DEB
  dpkg-deb -I "$1" postinst 2>/dev/null | sed -e ':a' -e '/\\$/N; s/\\\n//; ta' | tr -s ' \t' '  ' |
    grep -o -- '--\(install\|slave\) [^ ]\+ [^ ]\+ [^ ]\+' | awk '{print $2, $4}' || true
}

cmd_unpack() {
  [[ $# -eq 2 ]] || die "usage: gpu-deps.sh unpack DIR PREFIX"
  local dir=$1 prefix=$2
  [[ -d $dir ]] || die "no folder $dir" "run scripts/gpu-deps.sh fetch $dir on Debian 12 first"
  local debs=("$dir"/*.deb)
  [[ -e ${debs[0]} ]] || die "no .deb files in $dir" "run scripts/gpu-deps.sh fetch $dir on Debian 12 first"
  command -v dpkg-deb >/dev/null || die "dpkg-deb is missing" "unpack needs dpkg-deb (Debian/Ubuntu)"
  [[ $(uname -m) == x86_64 ]] || die "these are amd64 packages; this machine is $(uname -m)"
  prefix=$(mkdir -p "$prefix" && cd "$prefix" && pwd)
  [[ $prefix != / && $prefix != /usr && $prefix != /usr/local ]] ||
    die "refusing to unpack into $prefix" "name a folder of its own, e.g. /opt/megabatch-deps"

  # Unpacking the same set twice is a no-op; a different set replaces an earlier unpack.
  local stamp=$prefix/.megabatch-deps sum
  sum=$(cat "$dir/packages.txt" 2>/dev/null || ls -l "${debs[@]}")
  sum=$(printf '%s' "$sum" | cksum | cut -d' ' -f1)
  if [[ -f $stamp && $(cat "$stamp") == "$sum" && -f $prefix/env.sh ]]; then
    echo "gpu-deps.sh: $prefix is up to date (${#debs[@]} packages)"
    return 0
  fi
  if [[ -n $(ls -A "$prefix") ]]; then
    [[ -f $stamp ]] || die "$prefix is not empty and was not made by gpu-deps.sh" "name an empty or new folder"
    rm -rf "${prefix:?}/usr" "${prefix:?}/etc" "${prefix:?}"/lib* "${prefix:?}/bin" "${prefix:?}/sbin" "$prefix/env.sh"
  fi

  local deb link target
  for deb in "${debs[@]}"; do
    dpkg-deb -x "$deb" "$prefix"
  done
  # Debian 12 packages still ship some files in /lib (libnl, libkeyutils): give the prefix the
  # merged-/usr layout of the systems they come from, so that usr/lib holds every library.
  local top
  for top in lib lib64 bin sbin; do
    [[ -d $prefix/$top && ! -L $prefix/$top ]] || continue
    mkdir -p "$prefix/usr/$top"
    cp -a "$prefix/$top/." "$prefix/usr/$top/"
    rm -rf "${prefix:?}/$top"
    ln -s "usr/$top" "$prefix/$top"
  done
  # 1. The alternatives symlinks (mpirun, mpicxx, h5pcc, libmpi.so, ...) that postinst makes.
  for deb in "${debs[@]}"; do
    while read -r link target; do
      [[ -n $link ]] && link_in_prefix "$prefix" "$link" "$target"
    done < <(alternatives_of "$deb")
  done
  # 2. Absolute symlinks point outside the prefix: point them at the prefix's copy.
  local dangling=0
  while IFS= read -r -d '' link; do
    target=$(readlink "$link")
    [[ $target == /* ]] || continue
    if [[ -e $prefix$target ]]; then
      ln -sfn "$(realpath -s --relative-to="$(dirname "$link")" "$prefix$target")" "$link"
    else
      dangling=$((dangling + 1))
    fi
  done < <(find "$prefix" -type l -print0)

  local usr=$prefix/usr arch=x86_64-linux-gnu
  local lib=$usr/lib/$arch
  # 3. h5pcc (a shell script) names /usr and the static-link dependencies of libhdf5
  #    (-lcrypto -lcurl -lsz -lz): point it at the prefix, and keep only what a shared link
  #    needs, because the -dev packages of those libraries are not carried (libhdf5.so names
  #    them itself), and link shared by default (CMake's FindHDF5 first compiles a test program
  #    with plain `h5pcc test.c`, then reads the flags from `h5pcc -show -shlib`).
  local h5pcc=$usr/bin/h5pcc.openmpi
  if [[ -f $h5pcc ]]; then
    # shellcheck disable=SC2016  # the sed expressions name the script's own variables
    sed -i -e "s|^prefix=\"/usr\"|prefix=\"$usr\"|" \
           -e 's|^H5BLD_LIBS=.*|H5BLD_LIBS="-ldl -lm "|' \
           -e 's|USE_SHARED_LIB="${HDF5_USE_SHLIB:-no}"|USE_SHARED_LIB="${HDF5_USE_SHLIB:-yes}"|' \
           -e "s|^CCBASE=\"mpicc.openmpi\"|CCBASE=\"$usr/bin/mpicc.openmpi\"|" \
           -e "s|^CLINKERBASE=\"mpicc.openmpi\"|CLINKERBASE=\"$usr/bin/mpicc.openmpi\"|" "$h5pcc"
  fi
  # 4. pkg-config files: prefix=/usr -> the prefix (CMake does not need them; users may).
  local pc
  for pc in "$lib"/pkgconfig/*.pc "$usr"/share/pkgconfig/*.pc; do
    [[ -f $pc && ! -L $pc ]] && sed -i -e "s|=/usr\$|=$usr|" -e "s|=/usr/|=$usr/|g" "$pc"
  done

  # 5. env.sh. Open MPI (Debian's, configured for /usr) finds itself through OPAL_PREFIX; its
  #    sysconfdir (/etc/openmpi) and PMIx's plugin folder are outside /usr and named separately.
  #    In containers without ssh, Open MPI 4 refuses to start even on one node ("plm_rsh_agent
  #    ... could not be found") unless the rsh launcher's agent is set empty.
  cat >"$prefix/env.sh" <<EOF
# Written by scripts/gpu-deps.sh unpack: Debian 12 packages unpacked into this folder.
# Source it (sh or bash) before building or running megabatch against them:  . $prefix/env.sh
# Its libraries (Open MPI, HDF5, and their curl, OpenSSL, Kerberos, ...) then come before the
# system's: source it in the shells that build or run megabatch, not in a login profile.
MEGABATCH_DEPS_PREFIX=$prefix
export MEGABATCH_DEPS_PREFIX
OPAL_PREFIX=$usr
OPAL_SYSCONFDIR=$prefix/etc/openmpi
PMIX_INSTALL_PREFIX=$usr
PMIX_MCA_mca_base_component_path=$lib/pmix2/lib/pmix
export OPAL_PREFIX OPAL_SYSCONFDIR PMIX_INSTALL_PREFIX PMIX_MCA_mca_base_component_path
PATH=$usr/bin\${PATH:+:\$PATH}
LD_LIBRARY_PATH=$lib/openmpi/lib:$lib/hdf5/openmpi:$lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
CMAKE_PREFIX_PATH=$usr\${CMAKE_PREFIX_PATH:+:\$CMAKE_PREFIX_PATH}
PKG_CONFIG_PATH=$lib/pkgconfig\${PKG_CONFIG_PATH:+:\$PKG_CONFIG_PATH}
export PATH LD_LIBRARY_PATH CMAKE_PREFIX_PATH PKG_CONFIG_PATH
# No ssh: an empty launcher agent lets mpirun start ranks on this node.
mb_ssh=\$(command -v ssh 2>/dev/null || true)
if [ -z "\${OMPI_MCA_plm_rsh_agent+set}" ] && { [ -z "\$mb_ssh" ] || [ ! -x "\$mb_ssh" ]; }; then
  OMPI_MCA_plm_rsh_agent=
  export OMPI_MCA_plm_rsh_agent
fi
unset mb_ssh
EOF
  echo "$sum" >"$stamp"
  echo "gpu-deps.sh: unpacked ${#debs[@]} packages into $prefix ($(du -sh "$prefix" | cut -f1));" \
       "$dangling absolute links have no target here (documentation, left-out packages)"
  cmd_check "$prefix"
  echo "gpu-deps.sh: use it with:  . $prefix/env.sh"
}

# Every ELF file in the prefix: do its shared libraries resolve (with env.sh)? Missing ones
# name a package to add to ROOTS or take out of BASE. Fails when a library megabatch itself
# loads is affected; plugins with missing libraries only warn (Open MPI skips them).
cmd_check() {
  [[ $# -eq 1 ]] || die "usage: gpu-deps.sh check PREFIX"
  local prefix=$1 file missing report="" fatal=""
  [[ -f $prefix/env.sh ]] || die "$prefix/env.sh is missing" "run scripts/gpu-deps.sh unpack DIR $prefix"
  while IFS= read -r -d '' file; do
    [[ $(head -c 4 "$file" | od -An -c | tr -d ' ') == 177ELF ]] || continue
    # shellcheck disable=SC1091  # written by unpack
    missing=$( { (. "$prefix/env.sh"; ldd "$file" 2>&1) || true; } | awk '/not found/{print $1} /error while loading/{print "(unreadable:" $0 ")"}' | sort -u | tr '\n' ' ')
    [[ -z $missing ]] && continue
    report+="  ${file#"$prefix"/}: $missing"$'\n'
    case $file in
      */libmpi.so.*|*/libhdf5*.so.*|*/libcurl.so.*|*/libpsl.so.*|*/libyaml-cpp.so.*|*/libspdlog.so.*|*/libfmt.so.*|*/orterun|*/orted)
        fatal+="${file##*/} " ;;
    esac
  done < <(find "$prefix/usr/bin" "$prefix/usr/lib" -type f \( -perm -u+x -o -name '*.so*' \) -print0)
  if [[ -z $report ]]; then
    echo "gpu-deps.sh: check: every shared library in $prefix resolves"
    return 0
  fi
  echo "gpu-deps.sh: check: shared libraries not found on this system:" >&2
  printf '%s' "$report" >&2
  [[ -z $fatal ]] ||
    die "needed by $fatal" "fetch the Debian 12 packages that provide them (add to ROOTS in $0), or install the system's"
  echo "gpu-deps.sh: check: only optional plugins are affected; Open MPI skips them" >&2
}

case ${1:-} in
  fetch) shift; cmd_fetch "$@" ;;
  unpack) shift; cmd_unpack "$@" ;;
  check) shift; cmd_check "$@" ;;
  -h|--help|help) sed -n '2,15p' "$0" ;;
  *) sed -n '2,15p' "$0" >&2; exit 2 ;;
esac
