#!/usr/bin/env bash
# A fresh Debian 12 machine stand-in: a minbase debootstrap root, a fresh clone, then the README's
# main-job command, timed with its parts.
# Paths are this VM's: the root in /tmp/fresh-bookworm (debootstrap --variant=minbase bookworm), the clone from /work/main.
# FRESH_ROOT_TAR=/tmp/minbase.tar (a tar of a just-debootstrapped root) starts from a pristine root every time.
set -euo pipefail
root=/tmp/fresh-bookworm
rev=${1:-HEAD}
if [[ -n ${FRESH_ROOT_TAR:-} ]]; then
  for m in dev/pts dev sys proc; do mountpoint -q $root/$m && umount $root/$m; done
  rm -rf $root && mkdir -p $root && tar -C $root -xf "$FRESH_ROOT_TAR"
fi
# The root's apt sources use the mirrors this machine's apt sources name (a company mirror, a proxy).
. /work/main/scripts/debian-mirror.sh
mirror=$(debian_mirror) && security=$(debian_mirror security)
cat > $root/etc/apt/sources.list <<SRC
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb $security bookworm-security main
SRC
cp /etc/resolv.conf $root/etc/resolv.conf
for m in proc sys dev dev/pts; do mountpoint -q $root/$m || mount --bind /$m $root/$m; done
rm -rf $root/root/megabatch
git clone -q /work/main $root/root/megabatch
git -C $root/root/megabatch checkout -q "$rev"
echo "fresh-demo: $(git -C $root/root/megabatch log --oneline -1); load $(cut -d' ' -f1-3 /proc/loadavg)"
start=$(date +%s)
chroot $root /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin TERM=dumb \
  bash -c 'cd /root/megabatch && bash scripts/demo.sh'
echo "fresh-demo: scripts/demo.sh took $(($(date +%s) - start)) s end to end"
# Then the main build of scripts/test.sh, the same command it runs (test.sh line "bash scripts/build.sh build
# -DMEGABATCH_SANITIZER_BUILD_DIR=..."): ninja's step lines say what it compiles.
chroot $root /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin TERM=dumb \
  bash -c 'cd /root/megabatch && bash scripts/build.sh build -DMEGABATCH_SANITIZER_BUILD_DIR=/root/megabatch/build-asan' \
  > /tmp/fresh-test-build.log 2>&1
echo "fresh-demo: test.sh's main build after the demo: $(grep -c 'Building CXX object' /tmp/fresh-test-build.log) compile steps:"
grep -E 'Building CXX object|build.sh:' /tmp/fresh-test-build.log
