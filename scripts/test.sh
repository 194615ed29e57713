#!/usr/bin/env bash
# The test command: installs everything the tests need, builds, and runs the whole suite
# through one CTest run (its summary line is the last thing printed). The suite includes the
# sanitizer stage: the unit tests under AddressSanitizer + UndefinedBehaviorSanitizer and the
# bounded libFuzzer runs, from a second build with clang in build-asan (CTest entries
# sanitize.unit and sanitize.fuzz; MEGABATCH_SANITIZE_TESTS=0 leaves that stage out).
#   scripts/test.sh [ctest args...]     e.g. scripts/test.sh -L unit
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --tests
sanitizer_dir=""
if [[ ${MEGABATCH_SANITIZE_TESTS:-1} == 1 ]]; then
  bash scripts/build-sanitize.sh build-asan
  sanitizer_dir="$PWD/build-asan"
fi
bash scripts/build.sh build "-DMEGABATCH_SANITIZER_BUILD_DIR=$sanitizer_dir"
cd build
ctest --output-on-failure --timeout 900 -j "${MEGABATCH_TEST_JOBS:-2}" "$@"
