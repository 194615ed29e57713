#!/bin/sh
# Run before apt in the package steps of docker/Dockerfile. Where scripts/image.sh mounted a
# folder of already downloaded Debian packages at /mnt/host-debs (read-only: the host's apt
# archive for the CPU image on a Debian 12 host), copy them into apt's archive, so apt installs
# them instead of downloading them again: apt takes a file there only when its name, size and
# checksum match what the package index names, so a stale or foreign file is downloaded anew.
# The step's own `apt-get clean` then removes them from the layer. Without the mount (a plain
# `docker build`) this does nothing.
set -eu
[ -d /mnt/host-debs ] || exit 0
count=$(find /mnt/host-debs -maxdepth 1 -name '*.deb' | wc -l)
echo "host-debs.sh: $count packages from /mnt/host-debs"
[ "$count" -gt 0 ] || exit 0
find /mnt/host-debs -maxdepth 1 -name '*.deb' -exec cp -t /var/cache/apt/archives/ {} +
