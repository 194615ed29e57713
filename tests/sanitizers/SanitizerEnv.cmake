# Runtime options for the sanitizer build (MEGABATCH_SANITIZE), shared by the unit tests and the
# fuzz targets.
#
# No suppressions and no weakened checks: with Debian's uninstrumented LibTorch, HDF5 and
# yaml-cpp the unit tests and fuzzers run clean under ASan + UBSan as they are.
#  - Leak detection stays on (LibTorch's and HDF5's caches stay reachable, so LSan does not
#    report them).
#  - detect_container_overflow needs no change: libstdc++ only annotates containers when built
#    with _GLIBCXX_SANITIZE_VECTOR, so mixing instrumented and LibTorch code cannot trip it.
#  - UBSan's vptr check stays on: Debian's LibTorch has RTTI, and no false report appeared.
# If an option ever has to be weakened, say here which report it silences and why it is not
# ours.
set(MB_ASAN_OPTIONS
  # Fail at the first error, with a symbolized stack (llvm-symbolizer, package `llvm`).
  halt_on_error=1 abort_on_error=0 symbolize=1
  detect_leaks=1 detect_stack_use_after_return=1 check_initialization_order=1
  strict_string_checks=1)
set(MB_UBSAN_OPTIONS halt_on_error=1 print_stacktrace=1 symbolize=1)
string(JOIN ":" _mb_asan ${MB_ASAN_OPTIONS})
string(JOIN ":" _mb_ubsan ${MB_UBSAN_OPTIONS})
set(MB_SANITIZER_ENV ASAN_OPTIONS=${_mb_asan} UBSAN_OPTIONS=${_mb_ubsan})
