# Sourced (POSIX sh) from the checkout's root by scripts/test.sh's main build and by
# docker/Dockerfile's build stage: one definition of the compiler-cache settings, so the image's
# compile hits what the host's main build cached. ccache's key also covers the base dir (paths
# under it are hashed as relative ones) and the locale variables LANG, LC_ALL, LC_CTYPE and
# LC_MESSAGES: either differing gave 0 hits of 103 (docs/containers.md, "The CPU image in CI").
export CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
export CCACHE_BASEDIR="$PWD" LANG=C.UTF-8
unset LC_ALL LC_CTYPE LC_MESSAGES
