# The CUDA CMake logic (cmake/MegabatchCuda.cmake: NVTX shim, toolkit/torch CUDA version check),
# checked in script mode and against a fake CUDA LibTorch: needs no GPU, no CUDA and no nvcc.
add_test(NAME cmake.cuda_checks
         COMMAND ${CMAKE_COMMAND} -DMB_SOURCE_DIR=${PROJECT_SOURCE_DIR}
                 -DMB_WORK_DIR=${CMAKE_CURRENT_BINARY_DIR}/cmake-cuda-checks
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/cmake/CudaChecks.cmake)
set_tests_properties(cmake.cuda_checks PROPERTIES LABELS "unit;cmake" TIMEOUT 120)
