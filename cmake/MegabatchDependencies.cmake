# Finds every dependency and exposes it as an imported or interface target:
#   megabatch_torch, MPI::MPI_CXX, megabatch_hdf5 (parallel HDF5), yaml-cpp, spdlog::spdlog,
#   Threads::Threads, and on CUDA builds megabatch_nccl + CUDA::cudart.
find_package(Threads REQUIRED)

# --- LibTorch -------------------------------------------------------------
# Debian's libtorch-dev installs TorchConfig.cmake system-wide; a pip CUDA PyTorch has it under
# $(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)'): pass it as CMAKE_PREFIX_PATH.
# A CUDA LibTorch's CMake files need the CUDA toolkit and NVTX 3 whatever MEGABATCH_CUDA says:
# megabatch_find_torch looks for the toolkit first, gives them NVTX 3 (Note [NVTX shim] in
# cmake/MegabatchCuda.cmake), and stops on a toolkit whose CUDA major version is not torch's.
include(MegabatchCuda)
megabatch_find_torch()
add_library(megabatch_torch INTERFACE)
target_link_libraries(megabatch_torch INTERFACE torch)
# TORCH_CXX_FLAGS carries the libstdc++ ABI flag that LibTorch was built with.
separate_arguments(_mb_torch_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
target_compile_options(megabatch_torch INTERFACE ${_mb_torch_flags})
if(TORCH_CXX_FLAGS MATCHES "_GLIBCXX_USE_CXX11_ABI=0")
  # pip wheels before PyTorch 2.7 and the "pre-cxx11" LibTorch archives: the flag reaches all of
  # megabatch, but the distribution's yaml-cpp, spdlog and GoogleTest use the C++11 ABI.
  message(WARNING "This LibTorch uses the pre-C++11 libstdc++ ABI (_GLIBCXX_USE_CXX11_ABI=0); "
                  "linking against the system yaml-cpp/spdlog/GoogleTest will fail with undefined "
                  "std::string symbols. Use PyTorch >= 2.7 or the cxx11-abi LibTorch archive.")
endif()
set(MEGABATCH_TORCH_VERSION "${Torch_VERSION}")
if(NOT MEGABATCH_TORCH_VERSION)
  set(MEGABATCH_TORCH_VERSION "unknown")
endif()

# --- MPI --------------------------------------------------------------------
find_package(MPI REQUIRED COMPONENTS CXX)
set(MEGABATCH_MPIEXEC "${MPIEXEC_EXECUTABLE}")

# --- HDF5 (parallel) -------------------------------------------------------
set(HDF5_PREFER_PARALLEL TRUE)
find_package(HDF5 REQUIRED COMPONENTS C)
add_library(megabatch_hdf5 INTERFACE)
if(TARGET HDF5::HDF5)
  target_link_libraries(megabatch_hdf5 INTERFACE HDF5::HDF5)
else()
  target_include_directories(megabatch_hdf5 SYSTEM INTERFACE ${HDF5_INCLUDE_DIRS})
  target_link_libraries(megabatch_hdf5 INTERFACE ${HDF5_LIBRARIES})
  target_compile_definitions(megabatch_hdf5 INTERFACE ${HDF5_DEFINITIONS})
endif()
if(HDF5_IS_PARALLEL)
  target_compile_definitions(megabatch_hdf5 INTERFACE MEGABATCH_HDF5_PARALLEL=1)
else()
  message(WARNING "HDF5 is not built for MPI: every rank will read its shard with serial HDF5. "
                  "Install libhdf5-openmpi-dev (Debian) for collective MPI-IO reads.")
endif()

# --- yaml-cpp, spdlog -------------------------------------------------------
find_package(yaml-cpp REQUIRED)
find_package(spdlog REQUIRED)

# --- CUDA + NCCL ------------------------------------------------------------
set(MEGABATCH_WITH_CUDA OFF)
set(MEGABATCH_NCCL_COMPILE_CHECK OFF)
if(NOT MEGABATCH_CUDA STREQUAL "OFF")  # CUDAToolkit was looked for before LibTorch
  # A pip CUDA PyTorch (2.1+) brings NCCL as the nvidia-nccl wheel next to torch/: use that
  # torch's NCCL when nothing else is named.
  set(_mb_pip_nccl "${TORCH_INSTALL_PREFIX}/../nvidia/nccl")
  find_path(MEGABATCH_NCCL_INCLUDE_DIR nccl.h
    HINTS ENV NCCL_ROOT ENV NCCL_HOME ${NCCL_ROOT} ${_mb_pip_nccl} ${CUDAToolkit_INCLUDE_DIRS}
    PATH_SUFFIXES include)
  find_library(MEGABATCH_NCCL_LIBRARY NAMES nccl libnccl.so.2
    HINTS ENV NCCL_ROOT ENV NCCL_HOME ${NCCL_ROOT} ${_mb_pip_nccl} ${CUDAToolkit_LIBRARY_DIR}
    PATH_SUFFIXES lib lib64)
  if(_mb_torch_has_cuda AND CUDAToolkit_FOUND AND MEGABATCH_NCCL_INCLUDE_DIR AND MEGABATCH_NCCL_LIBRARY)
    set(MEGABATCH_WITH_CUDA ON)
    add_library(megabatch_nccl INTERFACE)
    target_include_directories(megabatch_nccl SYSTEM INTERFACE ${MEGABATCH_NCCL_INCLUDE_DIR})
    target_link_libraries(megabatch_nccl INTERFACE ${MEGABATCH_NCCL_LIBRARY})
  elseif(MEGABATCH_CUDA STREQUAL "ON")
    message(FATAL_ERROR
      "MEGABATCH_CUDA=ON but the CUDA build is not possible:\n"
      "  LibTorch with CUDA: ${_mb_torch_has_cuda}\n"
      "  CUDA toolkit:       ${CUDAToolkit_FOUND}\n"
      "  nccl.h:             ${MEGABATCH_NCCL_INCLUDE_DIR}\n"
      "  libnccl:            ${MEGABATCH_NCCL_LIBRARY}\n"
      "Point CMAKE_PREFIX_PATH at a CUDA LibTorch and NCCL_ROOT at NCCL, or use scripts/build-gpu.sh.")
  elseif(CUDAToolkit_FOUND AND MEGABATCH_NCCL_INCLUDE_DIR)
    # CPU LibTorch, but CUDA headers are here: compile the NCCL backend to prove it builds.
    set(MEGABATCH_NCCL_COMPILE_CHECK ON)
    set(MEGABATCH_CUDA_INCLUDE_DIR ${CUDAToolkit_INCLUDE_DIRS})
  endif()
endif()
