# A stand-in for CMake's FindCUDAToolkit (tests/cmake/CudaChecks.cmake): a CUDA toolkit of version
# FAKE_CUDA_VERSION whose include folder FAKE_CUDA_INCLUDE holds the NVTX 3 headers and which has
# no libnvToolsExt (as CUDA 12.9 and 13). CUDA::nvtx3 is defined as CMake >= 3.25 does, unless
# FAKE_OLD_CMAKE is set.
set(CUDAToolkit_FOUND TRUE)
set(CUDAToolkit_VERSION "${FAKE_CUDA_VERSION}")
set(CUDAToolkit_INCLUDE_DIRS "${FAKE_CUDA_INCLUDE}")
get_filename_component(CUDAToolkit_BIN_DIR "${FAKE_CUDA_INCLUDE}/../bin" ABSOLUTE)
if(NOT FAKE_OLD_CMAKE AND NOT TARGET CUDA::nvtx3)
  add_library(CUDA::nvtx3 INTERFACE IMPORTED)
  target_include_directories(CUDA::nvtx3 SYSTEM INTERFACE "${FAKE_CUDA_INCLUDE}")
endif()
