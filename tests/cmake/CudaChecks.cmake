# Checks cmake/MegabatchCuda.cmake without a GPU or a CUDA LibTorch (CTest: cmake.cuda_checks):
#   cmake -DMB_SOURCE_DIR=<repo> -DMB_WORK_DIR=<scratch> -P tests/cmake/CudaChecks.cmake
# 1. its functions in script mode: torch's CUDA version read from version.py and build-version,
#    the NVTX 3 folder search, and the toolkit/torch version check (a mismatch must stop cmake,
#    naming both versions);
# 2. configures of tests/cmake/fake, a project that finds a fake CUDA LibTorch (each 2.x way of
#    asking for NVTX) next to a fake CUDA 13 toolkit without libnvToolsExt, as megabatch does.
#    Control runs without the shim must fail, so the configures that pass prove the shim.
# Internal: -DCASE=mismatch runs one check that must fail (in a child cmake).
cmake_minimum_required(VERSION 3.21)
list(APPEND CMAKE_MODULE_PATH "${MB_SOURCE_DIR}/cmake")
include(MegabatchCuda)

set(failures 0)
macro(expect_equal actual expected what)
  if(NOT "${actual}" STREQUAL "${expected}")
    message(SEND_ERROR "${what}: expected '${expected}', got '${actual}'")
    math(EXPR failures "${failures} + 1")
  endif()
endmacro()
# CMake wraps long messages: whitespace runs in TEXT count as one space.
macro(expect_match text regex what)
  string(REGEX REPLACE "[ \t\r\n]+" " " _flat "${text}")
  if(NOT "${_flat}" MATCHES "${regex}")
    message(SEND_ERROR "${what}: '${regex}' not found in:\n${text}")
    math(EXPR failures "${failures} + 1")
  endif()
endmacro()

if(CASE STREQUAL "mismatch")
  megabatch_require_cuda_match("12.4.131" "13.0" "/usr/local/cuda-12.4")
  return()  # not reached: the call above must stop cmake
endif()

if(NOT MB_SOURCE_DIR OR NOT MB_WORK_DIR)
  message(FATAL_ERROR "usage: cmake -DMB_SOURCE_DIR=<repo> -DMB_WORK_DIR=<scratch> -P ${CMAKE_CURRENT_LIST_FILE}")
endif()
file(REMOVE_RECURSE "${MB_WORK_DIR}")
file(MAKE_DIRECTORY "${MB_WORK_DIR}")

# --- 1. functions ---------------------------------------------------------------------------
function(torch_version_from name content expected)
  set(root "${MB_WORK_DIR}/version-${name}")
  file(MAKE_DIRECTORY "${root}")
  foreach(entry IN LISTS content)
    string(REPLACE "=>" ";" parts "${entry}")
    list(GET parts 0 file)
    list(GET parts 1 text)
    file(WRITE "${root}/${file}" "${text}\n")
  endforeach()
  megabatch_torch_cuda_version(version "${root}")
  expect_equal("${version}" "${expected}" "torch CUDA version (${name})")
  set(failures ${failures} PARENT_SCOPE)
endfunction()
torch_version_from(py-plain "version.py=>__version__ = '2.11.0+cu130'\ncuda = '13.0'" "13.0")
torch_version_from(py-typed "version.py=>cuda: Optional[str] = '12.8'\nhip = None" "12.8")
torch_version_from(py-cpu "version.py=>cuda: Optional[str] = None" "")
torch_version_from(archive "build-version=>2.6.0+cu124" "12.4")
torch_version_from(archive-13 "build-version=>2.11.0+cu130" "13.0")
torch_version_from(archive-cpu "build-version=>2.6.0+cpu" "")
torch_version_from(nothing "README=>no version here" "")

set(include_dir "${MB_WORK_DIR}/cuda/include")
file(WRITE "${include_dir}/nvtx3/nvToolsExt.h" "/* fake NVTX 3 */\n")
file(MAKE_DIRECTORY "${MB_WORK_DIR}/empty/include")
megabatch_find_nvtx3(found "${MB_WORK_DIR}/missing" "${MB_WORK_DIR}/empty/include" "${include_dir}")
expect_equal("${found}" "${include_dir}" "NVTX 3 folder: the first that holds nvtx3/nvToolsExt.h")
megabatch_find_nvtx3(found "${MB_WORK_DIR}/empty/include")
expect_equal("${found}" "" "NVTX 3 folder: none")

megabatch_require_cuda_match("13.0.88" "13.0" "/usr/local/cuda")  # same major: passes
megabatch_require_cuda_match("13.1.20" "13.0" "/usr/local/cuda")  # minor versions may differ
megabatch_require_cuda_match("12.4" "" "/usr/local/cuda")  # torch's version unknown: no check
execute_process(COMMAND "${CMAKE_COMMAND}" -DMB_SOURCE_DIR=${MB_SOURCE_DIR} -DCASE=mismatch
                        -P "${CMAKE_CURRENT_LIST_FILE}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(rc EQUAL 0)
  message(SEND_ERROR "CUDA 12.4 nvcc with a CUDA 13.0 torch did not stop cmake:\n${out}")
  math(EXPR failures "${failures} + 1")
endif()
expect_match("${out}" "CUDA 12\\.4\\.131.*CUDA 13\\.0" "mismatch message names both versions")
expect_match("${out}" "hint:.*CUDA 13\\.x toolkit.*whl/cu124" "mismatch message says what to do")

# --- 2. fake-torch configures ----------------------------------------------------------------
set(torch_root "${MB_WORK_DIR}/site-packages/torch")
file(MAKE_DIRECTORY "${torch_root}/share/cmake/Torch")
file(COPY "${CMAKE_CURRENT_LIST_DIR}/fake/TorchConfig.cmake" DESTINATION "${torch_root}/share/cmake/Torch")
file(WRITE "${torch_root}/version.py" "__version__ = '2.11.0+cu130'\ncuda: Optional[str] = '13.0'\n")

# configure(NAME EXPECT_RC_ZERO STYLE [cmake -D args...]): one configure + generate of the fake
# consumer; its output in `out`, its result.txt in `result`.
function(configure name expect_ok style)
  set(build "${MB_WORK_DIR}/configure-${name}")
  execute_process(
    COMMAND "${CMAKE_COMMAND}" -S "${CMAKE_CURRENT_LIST_DIR}/fake" -B "${build}"
            -DMB_SOURCE_DIR=${MB_SOURCE_DIR} -DTorch_DIR=${torch_root}/share/cmake/Torch
            -DFAKE_TORCH_STYLE=${style} -DFAKE_CUDA_INCLUDE=${include_dir} ${ARGN}
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(expect_ok AND NOT rc EQUAL 0)
    message(SEND_ERROR "configure ${name} failed:\n${out}")
    math(EXPR failures "${failures} + 1")
  elseif(NOT expect_ok AND rc EQUAL 0)
    message(SEND_ERROR "configure ${name} passed but must fail:\n${out}")
    math(EXPR failures "${failures} + 1")
  endif()
  set(result "")
  if(EXISTS "${build}/result.txt")
    file(READ "${build}/result.txt" result)
  endif()
  set(out "${out}" PARENT_SCOPE)
  set(result "${result}" PARENT_SCOPE)
  set(failures ${failures} PARENT_SCOPE)
endfunction()

foreach(style third_party library toolkit)
  configure(${style} TRUE ${style} -DFAKE_CUDA_VERSION=13.0.88)
  expect_match("${result}" "torch_cuda=13\\.0" "${style}: torch's CUDA version read from version.py")
endforeach()
expect_match("${result}" "nvtx3_dir=${include_dir}" "nvtx3_dir preset to the toolkit's include folder")
configure(old-cmake TRUE toolkit -DFAKE_CUDA_VERSION=13.0.88 -DFAKE_OLD_CMAKE=ON)

# Controls: without the shim, the 2.1-2.7 styles fail as they do with real CUDA 12.9+ toolkits.
configure(third_party-no-shim FALSE third_party -DFAKE_CUDA_VERSION=13.0.88 -DFAKE_NO_SHIM=ON)
expect_match("${out}" "torch::nvtx3" "without the shim: the missing torch::nvtx3 is reported")
configure(library-no-shim FALSE library -DFAKE_CUDA_VERSION=13.0.88 -DFAKE_NO_SHIM=ON)
expect_match("${out}" "Failed to find nvToolsExt" "without the shim: no CUDA::nvToolsExt")

configure(mismatch FALSE toolkit -DFAKE_CUDA_VERSION=12.4.131)
expect_match("${out}" "CUDA version mismatch.*CUDA 12\\.4\\.131.*CUDA 13\\.0" "configure stops on a mismatch")
configure(override FALSE toolkit -DFAKE_CUDA_VERSION=13.0.88 -DMEGABATCH_TORCH_CUDA_VERSION=12.8)
expect_match("${out}" "built with CUDA 12\\.8" "MEGABATCH_TORCH_CUDA_VERSION overrides version.py")
configure(nvtx-dir-wrong FALSE toolkit -DFAKE_CUDA_VERSION=13.0.88
          -DMEGABATCH_NVTX3_INCLUDE_DIR=${MB_WORK_DIR}/empty/include)
expect_match("${out}" "has no nvtx3/nvToolsExt.h" "a wrong MEGABATCH_NVTX3_INCLUDE_DIR is named")

if(failures GREATER 0)
  message(FATAL_ERROR "${failures} CUDA CMake check(s) failed")
endif()
message(STATUS "CUDA CMake checks passed")
