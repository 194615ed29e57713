#!/bin/sh
# Run first in every stage of docker/Dockerfile: lean apt (no recommends, no documentation or
# locales, no services started) and, for FLAVOUR=cuda, the contrib and non-free sections that
# Debian's CUDA packages live in (debian:trixie lists main only).
set -eu
printf 'APT::Install-Recommends "false";\nAcquire::Retries "3";\n' >/etc/apt/apt.conf.d/90megabatch
printf 'path-exclude=/usr/share/doc/*\npath-exclude=/usr/share/man/*\npath-exclude=/usr/share/locale/*\n' \
  >/etc/dpkg/dpkg.cfg.d/90megabatch
printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
if [ "${1:-cpu}" = cuda ]; then
  for f in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list; do
    [ -f "$f" ] || continue
    sed -i -e 's/^Components: main$/Components: main contrib non-free non-free-firmware/' \
      -e 's/^\(deb .* trixie[a-z-]*\) main$/\1 main contrib non-free/' "$f"
  done
fi
