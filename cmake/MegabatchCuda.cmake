# What a CUDA LibTorch needs from a project that finds it, and the checks that make a wrong
# toolkit fail at configure time. Functions only (no side effects on include), so
# tests/cmake/CudaChecks.cmake exercises them in `cmake -P` and in a fake-torch configure.
#
# Note [NVTX shim]
# LibTorch's CMake files (Caffe2/public/cuda.cmake, TorchConfig.cmake) have asked for NVTX in
# three ways across 2.x releases:
#   - find_path(nvtx3_dir NAMES nvtx3 ...) limited to the *consumer's* third_party/NVTX folder;
#     when it fails they fall back to torch::nvtoolsext -> CUDA::nvToolsExt;
#   - CUDA::nvToolsExt itself: the library libnvToolsExt.so, which CUDA 12.9+ and 13 no longer
#     ship (NVTX 3 is header-only), so the target is missing and configure or generate fails
#     ("Failed to find nvToolsExt", or "links to target CUDA::nvToolsExt but the target was not
#     found");
#   - CUDA::nvtx3 (FindCUDAToolkit, CMake >= 3.25) behind torch::nvtx3.
# Before find_package(Torch) we preset nvtx3_dir and define the CUDA:: targets that are missing,
# all pointing at header-only NVTX 3; after it, any torch:: NVTX target that the torch targets
# name but nothing defined. Existing targets are never replaced, so a toolkit that still has
# libnvToolsExt keeps it.

# First folder among DIRS that holds nvtx3/nvToolsExt.h, or "" in OUT.
function(megabatch_find_nvtx3 out)
  set(found "")
  foreach(dir IN LISTS ARGN)
    if(dir AND EXISTS "${dir}/nvtx3/nvToolsExt.h")
      set(found "${dir}")
      break()
    endif()
  endforeach()
  set(${out} "${found}" PARENT_SCOPE)
endfunction()

# Folders where NVTX 3 headers live next to a pip torch: torch/include (wheels since 2.8 carry
# them) and the nvidia-nvtx wheel (nvidia/nvtx/include for CUDA 12, nvidia/cu13/include for 13).
function(megabatch_nvtx3_candidates_near_torch out torch_root)
  set(dirs "${torch_root}/include" "${torch_root}/../nvidia/nvtx/include")
  file(GLOB cu_dirs LIST_DIRECTORIES true "${torch_root}/../nvidia/cu*/include")
  list(APPEND dirs ${cu_dirs})
  set(${out} "${dirs}" PARENT_SCOPE)
endfunction()

# The torch roots (site-packages/torch or an unpacked LibTorch) of every Torch/TorchConfig.cmake
# that CMAKE_PREFIX_PATH (variable and environment) or Torch_DIR names.
function(megabatch_torch_roots out)
  set(roots "")
  set(prefixes ${CMAKE_PREFIX_PATH} $ENV{CMAKE_PREFIX_PATH})
  string(REPLACE ":" ";" prefixes "${prefixes}")
  if(Torch_DIR)
    get_filename_component(root "${Torch_DIR}/../../.." ABSOLUTE)
    list(APPEND roots "${root}")
  endif()
  foreach(prefix IN LISTS prefixes)
    foreach(config "${prefix}/Torch" "${prefix}/share/cmake/Torch")
      if(EXISTS "${config}/TorchConfig.cmake")
        get_filename_component(root "${config}/../../.." ABSOLUTE)
        list(APPEND roots "${root}")
      endif()
    endforeach()
  endforeach()
  list(REMOVE_DUPLICATES roots)
  set(${out} "${roots}" PARENT_SCOPE)
endfunction()

# Run before find_package(Torch), with the NVTX 3 include folder (see Note [NVTX shim]).
function(megabatch_nvtx_before_torch include_dir)
  if(NOT include_dir)
    return()
  endif()
  if(NOT nvtx3_dir)  # unset, or NOTFOUND from an earlier configure
    set(nvtx3_dir "${include_dir}" CACHE PATH "Folder holding nvtx3/ (preset for LibTorch's cuda.cmake)" FORCE)
  endif()
  if(NOT TARGET CUDA::nvtx3)  # FindCUDAToolkit defines it from CMake 3.25 on
    add_library(CUDA::nvtx3 INTERFACE IMPORTED)
    target_include_directories(CUDA::nvtx3 SYSTEM INTERFACE "${include_dir}")
    target_link_libraries(CUDA::nvtx3 INTERFACE ${CMAKE_DL_LIBS})
  endif()
  if(NOT TARGET CUDA::nvToolsExt)
    # Header-only stand-in for the library CUDA 12.9+ dropped. TORCH_CUDA_USE_NVTX3 makes
    # LibTorch's headers include <nvtx3/nvToolsExt.h>, which needs no library.
    add_library(CUDA::nvToolsExt INTERFACE IMPORTED)
    target_link_libraries(CUDA::nvToolsExt INTERFACE CUDA::nvtx3)
    target_compile_definitions(CUDA::nvToolsExt INTERFACE TORCH_CUDA_USE_NVTX3)
  endif()
endfunction()

# Run after find_package(Torch): defines the torch:: NVTX targets that torch's CMake files did
# not, because the torch targets may name them (CMake resolves those names at generate time).
function(megabatch_nvtx_after_torch include_dir)
  if(NOT include_dir)
    return()
  endif()
  if(NOT TARGET torch::nvtx3)
    add_library(torch::nvtx3 INTERFACE IMPORTED)
    target_include_directories(torch::nvtx3 SYSTEM INTERFACE "${include_dir}")
    target_compile_definitions(torch::nvtx3 INTERFACE TORCH_CUDA_USE_NVTX3)
  endif()
  if(NOT TARGET torch::nvtoolsext)
    add_library(torch::nvtoolsext INTERFACE IMPORTED)
    target_link_libraries(torch::nvtoolsext INTERFACE CUDA::nvToolsExt)
  endif()
endfunction()

# The CUDA version a LibTorch was built with ("13.0"), or "" in OUT when nothing says:
# a pip torch's version.py (`cuda = '13.0'`, or `cuda: Optional[str] = '13.0'`), else a LibTorch
# archive's build-version (`2.6.0+cu124` -> 12.4).
function(megabatch_torch_cuda_version out torch_root)
  set(version "")
  if(EXISTS "${torch_root}/version.py")
    file(STRINGS "${torch_root}/version.py" lines REGEX "^cuda[^=]*=")
    foreach(line IN LISTS lines)
      if(line MATCHES "['\"]([0-9]+\\.[0-9]+)['\"]")
        set(version "${CMAKE_MATCH_1}")
      endif()
    endforeach()
  endif()
  if(NOT version AND EXISTS "${torch_root}/build-version")
    file(READ "${torch_root}/build-version" text)
    if(text MATCHES "\\+cu([0-9]+)([0-9])")
      set(version "${CMAKE_MATCH_1}.${CMAKE_MATCH_2}")
    endif()
  endif()
  set(${out} "${version}" PARENT_SCOPE)
endfunction()

# Stops the configure when the toolkit's CUDA major version (nvcc, CUDAToolkit_VERSION) is not the
# one LibTorch was built with. Minor versions may differ (CUDA's minor-version compatibility).
function(megabatch_require_cuda_match toolkit_version torch_cuda_version toolkit_root)
  if(NOT toolkit_version OR NOT torch_cuda_version)
    return()
  endif()
  string(REGEX MATCH "^[0-9]+" toolkit_major "${toolkit_version}")
  string(REGEX MATCH "^[0-9]+" torch_major "${torch_cuda_version}")
  if(toolkit_major STREQUAL torch_major)
    return()
  endif()
  string(REGEX REPLACE "^([0-9]+)\\.([0-9]+).*" "cu\\1\\2" toolkit_wheel "${toolkit_version}")
  message(FATAL_ERROR
    "CUDA version mismatch: the CUDA toolkit (nvcc) at ${toolkit_root} is CUDA "
    "${toolkit_version}, but LibTorch was built with CUDA ${torch_cuda_version}. The major "
    "versions must agree: libtorch_cuda needs the CUDA ${torch_major} runtime, and linking "
    "megabatch against CUDA ${toolkit_major}'s would load two CUDA runtimes into one process.\n"
    "  hint: use a CUDA ${torch_major}.x toolkit (put its bin/ first on PATH or set CUDA_HOME "
    "for scripts/build-gpu.sh; CUDAToolkit_ROOT and CMAKE_CUDA_COMPILER for plain cmake), or a "
    "torch built for CUDA ${toolkit_major} (pip install torch --index-url "
    "https://download.pytorch.org/whl/${toolkit_wheel}). MEGABATCH_TORCH_CUDA_VERSION overrides "
    "the torch CUDA version read from its version.py or build-version.")
endfunction()

# The NVTX 3 include folder for the shim: MEGABATCH_NVTX3_INCLUDE_DIR when set, else the first of
# TOOLKIT_INCLUDE_DIRS (the CUDA toolkit's) and the folders next to each torch found through
# CMAKE_PREFIX_PATH / Torch_DIR. "" in OUT when none has nvtx3/nvToolsExt.h.
function(megabatch_nvtx3_include_dir out)
  set(candidates ${MEGABATCH_NVTX3_INCLUDE_DIR} ${ARGN})
  megabatch_torch_roots(roots)
  foreach(root IN LISTS roots)
    megabatch_nvtx3_candidates_near_torch(near "${root}")
    list(APPEND candidates ${near})
  endforeach()
  megabatch_find_nvtx3(found ${candidates})
  if(MEGABATCH_NVTX3_INCLUDE_DIR AND NOT found STREQUAL MEGABATCH_NVTX3_INCLUDE_DIR)
    message(FATAL_ERROR "MEGABATCH_NVTX3_INCLUDE_DIR=${MEGABATCH_NVTX3_INCLUDE_DIR} has no "
                        "nvtx3/nvToolsExt.h\n  hint: name the folder that holds nvtx3/ (e.g. "
                        "/usr/local/cuda/include), or leave it unset to search the CUDA toolkit")
  endif()
  set(${out} "${found}" PARENT_SCOPE)
endfunction()

# The CUDA version LibTorch was built with: MEGABATCH_TORCH_CUDA_VERSION when set, else what
# TORCH_ROOT's files say; a warning (and "" in OUT) when neither says.
function(megabatch_torch_cuda_version_or_warn out torch_root)
  set(version "${MEGABATCH_TORCH_CUDA_VERSION}")
  if(NOT version)
    megabatch_torch_cuda_version(version "${torch_root}")
  endif()
  if(NOT version)
    message(WARNING "Cannot tell which CUDA version the LibTorch in ${torch_root} was built with "
                    "(no version.py or build-version there), so the toolkit's version is not "
                    "checked against it. Set MEGABATCH_TORCH_CUDA_VERSION (e.g. 13.0: python3 -c "
                    "'import torch; print(torch.version.cuda)') to check it.")
  endif()
  set(${out} "${version}" PARENT_SCOPE)
endfunction()

# Run when LibTorch has CUDA (after find_package(Torch)): the torch:: side of the NVTX shim, and
# the toolkit against torch's CUDA version. Sets MEGABATCH_TORCH_CUDA in the caller's scope.
function(megabatch_check_cuda_torch nvtx3_include_dir)
  megabatch_nvtx_after_torch("${nvtx3_include_dir}")
  if(NOT nvtx3_include_dir)
    message(WARNING "No NVTX 3 headers found (nvtx3/nvToolsExt.h in the CUDA toolkit's include "
                    "folder or the pip nvidia wheels). If CMake then reports a missing "
                    "CUDA::nvToolsExt or torch::nvtx3 target, set MEGABATCH_NVTX3_INCLUDE_DIR to "
                    "a folder holding nvtx3/ (CUDA 12.9+ ship NVTX 3 as headers only).")
  endif()
  megabatch_torch_cuda_version_or_warn(version "${TORCH_INSTALL_PREFIX}")
  get_filename_component(toolkit_root "${CUDAToolkit_BIN_DIR}/.." ABSOLUTE)
  megabatch_require_cuda_match("${CUDAToolkit_VERSION}" "${version}" "${toolkit_root}")
  set(MEGABATCH_TORCH_CUDA "${version}" PARENT_SCOPE)
endfunction()

# find_package(Torch REQUIRED) for megabatch: the CUDA toolkit is looked for first (quietly: CPU
# builds need none), the NVTX shim goes around LibTorch's CMake files, and a CUDA LibTorch is
# checked against the toolkit. A macro, so that find_package's results reach the caller. Sets
# _mb_torch_has_cuda, MEGABATCH_TORCH_CUDA (torch's CUDA version, "" when unknown or none), and
# CUDAToolkit_* as find_package(CUDAToolkit) does.
macro(megabatch_find_torch)
  set(MEGABATCH_NVTX3_INCLUDE_DIR "" CACHE PATH
      "Folder holding nvtx3/nvToolsExt.h (default: the CUDA toolkit's, else the pip wheels')")
  set(MEGABATCH_TORCH_CUDA_VERSION "" CACHE STRING
      "CUDA version LibTorch was built with, e.g. 13.0 (default: from its version.py or build-version)")
  find_package(CUDAToolkit QUIET)
  set(_mb_nvtx3_dir "")
  if(CUDAToolkit_FOUND)
    megabatch_nvtx3_include_dir(_mb_nvtx3_dir ${CUDAToolkit_INCLUDE_DIRS})
    megabatch_nvtx_before_torch("${_mb_nvtx3_dir}")
  endif()
  find_package(Torch REQUIRED)
  set(_mb_torch_has_cuda OFF)
  set(MEGABATCH_TORCH_CUDA "")
  if(TARGET torch_cuda OR TARGET c10_cuda OR CAFFE2_USE_CUDA)
    set(_mb_torch_has_cuda ON)
    megabatch_check_cuda_torch("${_mb_nvtx3_dir}")
  endif()
endmacro()
