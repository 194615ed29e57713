#!/usr/bin/env bash
# The test command: installs everything the tests need, builds, and runs the whole suite
# through CTest. Then the sanitizer stage: the unit tests under AddressSanitizer +
# UndefinedBehaviorSanitizer and the bounded libFuzzer runs (build-asan, clang; skip it with
# MEGABATCH_SANITIZE_TESTS=0). Each stage ends with its CTest summary; the exit status is
# non-zero if either failed.
#   scripts/test.sh [ctest args...]     e.g. scripts/test.sh -L unit   (main stage only)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --tests
bash scripts/build.sh build
status=0
(cd build && ctest --output-on-failure --timeout 900 -j "${MEGABATCH_TEST_JOBS:-2}" "$@") || status=$?
if [[ ${MEGABATCH_SANITIZE_TESTS:-1} == 1 ]]; then
  start=$(date +%s)
  sanitize=0
  bash scripts/build-sanitize.sh build-asan &&
    (cd build-asan && ctest --output-on-failure --timeout 900 -j "${MEGABATCH_TEST_JOBS:-2}") ||
    sanitize=$?
  echo "test.sh: sanitizer stage (build + unit tests + fuzzing) took $(( $(date +%s) - start )) s"
  [[ $sanitize == 0 ]] || status=$sanitize
fi
exit $status
