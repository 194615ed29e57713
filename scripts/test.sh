#!/usr/bin/env bash
# The test command: installs everything the tests need, builds, and runs the whole suite
# through CTest (its summary line is the last thing printed).
#   scripts/test.sh [ctest args...]     e.g. scripts/test.sh -L unit
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --tests
bash scripts/build.sh build
cd build
ctest --output-on-failure --timeout 900 -j "${MEGABATCH_TEST_JOBS:-2}" "$@"
