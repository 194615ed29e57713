# Sanitizer and libFuzzer builds (docs/reliability.md, "Sanitizers and fuzzing").
#
#   -DMEGABATCH_SANITIZE=address,undefined   instruments megabatch's own targets (LibTorch, HDF5,
#                                            yaml-cpp stay uninstrumented: Debian's builds)
#   -DMEGABATCH_FUZZ=ON                      adds libFuzzer coverage to megabatch_core and the
#                                            fuzz targets of tests/fuzz (clang only)
#
# scripts/test.sh configures both in build-asan with clang. A missing clang or libFuzzer runtime
# is a configure error that says what to install, never a silently skipped test.
include(CheckCXXSourceCompiles)

set(MB_SANITIZE_FLAGS "")
if(MEGABATCH_SANITIZE)
  list(APPEND MB_SANITIZE_FLAGS -fsanitize=${MEGABATCH_SANITIZE} -fno-omit-frame-pointer)
  if(MEGABATCH_SANITIZE MATCHES "undefined")
    # UBSan only prints by default; a test must fail on undefined behaviour.
    list(APPEND MB_SANITIZE_FLAGS -fno-sanitize-recover=undefined)
  endif()
endif()

if(MEGABATCH_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "MEGABATCH_FUZZ=ON needs clang (libFuzzer), but the C++ compiler is "
                        "${CMAKE_CXX_COMPILER_ID}: configure with CC=clang CXX=clang++ "
                        "(Debian: apt-get install clang libclang-rt-14-dev)")
  endif()
  set(CMAKE_REQUIRED_LINK_OPTIONS -fsanitize=fuzzer)
  check_cxx_source_compiles([[
    #include <cstddef>
    #include <cstdint>
    extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t*, std::size_t) { return 0; }
  ]] MB_HAVE_LIBFUZZER)
  unset(CMAKE_REQUIRED_LINK_OPTIONS)
  if(NOT MB_HAVE_LIBFUZZER)
    message(FATAL_ERROR "MEGABATCH_FUZZ=ON: clang cannot link -fsanitize=fuzzer; install the "
                        "libFuzzer runtime (Debian: apt-get install libclang-rt-14-dev)")
  endif()
  # Coverage feedback for everything the fuzz targets reach, not only their own file.
  list(APPEND MB_SANITIZE_FLAGS -fsanitize=fuzzer-no-link)
endif()

# Adds the sanitizer (and fuzzer coverage) flags to one of megabatch's targets.
function(megabatch_sanitize target)
  if(MB_SANITIZE_FLAGS)
    target_compile_options(${target} PRIVATE ${MB_SANITIZE_FLAGS})
    target_link_options(${target} PRIVATE ${MB_SANITIZE_FLAGS})
  endif()
endfunction()
