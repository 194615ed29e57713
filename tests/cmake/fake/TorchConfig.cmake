# A stand-in for a CUDA LibTorch's TorchConfig.cmake (with its Caffe2/public/cuda.cmake), reduced
# to how each generation of 2.x asks for NVTX. tests/cmake/CudaChecks.cmake copies it to
# <torch root>/share/cmake/Torch/ and writes <torch root>/version.py beside it. FAKE_TORCH_STYLE:
#   third_party  2.5-2.7: nvtx3 is looked for only in the consumer's third_party/NVTX folder,
#                with a fall-back to CUDA::nvToolsExt; torch_cuda names torch::nvtx3, which the
#                wheel was built with;
#   library      2.1-2.4: fails unless the target CUDA::nvToolsExt (the library) exists;
#   toolkit      2.8 on: torch::nvtx3 over FindCUDAToolkit's CUDA::nvtx3.
get_filename_component(TORCH_INSTALL_PREFIX "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
set(CAFFE2_USE_CUDA ON)

if(FAKE_TORCH_STYLE STREQUAL "third_party")
  find_path(nvtx3_dir NAMES nvtx3 PATHS "${PROJECT_SOURCE_DIR}/third_party/NVTX/c/include"
            NO_DEFAULT_PATH)
  if(nvtx3_dir)
    add_library(torch::nvtx3 INTERFACE IMPORTED)
    target_include_directories(torch::nvtx3 INTERFACE "${nvtx3_dir}")
  else()
    add_library(torch::nvtoolsext INTERFACE IMPORTED)
    set_property(TARGET torch::nvtoolsext PROPERTY INTERFACE_LINK_LIBRARIES CUDA::nvToolsExt)
  endif()
  set(_fake_nvtx torch::nvtx3)
elseif(FAKE_TORCH_STYLE STREQUAL "library")
  if(NOT TARGET CUDA::nvToolsExt)
    message(FATAL_ERROR "Failed to find nvToolsExt")
  endif()
  add_library(torch::nvtoolsext INTERFACE IMPORTED)
  set_property(TARGET torch::nvtoolsext PROPERTY INTERFACE_LINK_LIBRARIES CUDA::nvToolsExt)
  set(_fake_nvtx torch::nvtoolsext)
elseif(FAKE_TORCH_STYLE STREQUAL "toolkit")
  add_library(torch::nvtx3 INTERFACE IMPORTED)
  set_property(TARGET torch::nvtx3 PROPERTY INTERFACE_LINK_LIBRARIES CUDA::nvtx3)
  set(_fake_nvtx torch::nvtx3)
else()
  message(FATAL_ERROR "fake TorchConfig.cmake: unknown FAKE_TORCH_STYLE '${FAKE_TORCH_STYLE}'")
endif()

add_library(torch_cuda INTERFACE IMPORTED)
set_property(TARGET torch_cuda PROPERTY INTERFACE_LINK_LIBRARIES ${_fake_nvtx})
add_library(torch INTERFACE IMPORTED)
set_property(TARGET torch PROPERTY INTERFACE_LINK_LIBRARIES torch_cuda)
set(TORCH_CXX_FLAGS "")
set(Torch_FOUND TRUE)
