# Runtime options for the sanitizer build (MEGABATCH_SANITIZE), shared by the unit tests and the
# fuzz targets. Every option that weakens a check is justified here; none may hide our own bugs.
set(MB_SANITIZER_DIR ${CMAKE_CURRENT_LIST_DIR})
set(MB_ASAN_OPTIONS
  # Fail the test at the first error, with a symbolized stack (llvm-symbolizer from `llvm`).
  halt_on_error=1 abort_on_error=0 symbolize=1
  detect_leaks=1 detect_stack_use_after_return=1 check_initialization_order=1
  strict_string_checks=1)
set(MB_UBSAN_OPTIONS halt_on_error=1 print_stacktrace=1 symbolize=1)
string(JOIN ":" _mb_asan ${MB_ASAN_OPTIONS})
string(JOIN ":" _mb_ubsan ${MB_UBSAN_OPTIONS})
set(MB_SANITIZER_ENV ASAN_OPTIONS=${_mb_asan} UBSAN_OPTIONS=${_mb_ubsan})
