# GPU-only tests (issue 8), label `gpu`: registered in CUDA builds only (MEGABATCH_WITH_CUDA), so
# CPU builds neither compile nor list them. They always run on cuda:0, whatever
# MEGABATCH_TEST_DEVICE says, and fail (never skip) without a usable GPU. They cover what the
# device-switched suite does not: NCCL with a world of one, a BF16 autocast step on CUDA, GPU
# window gathers against the host gather byte for byte, checkpoints across devices, and host
# syncs in the step loop. Run them alone with `ctest -L gpu` (see tests/CMakeLists.txt).
# The label gpu-features (also matched by `ctest -L gpu`) marks the checks of the memory features
# on CUDA: the memory plan against the caching allocator, micro_batch: auto, the out-of-memory
# redo from a real cudaMalloc failure, recomputation, and fp16 against torch.amp.GradScaler on
# the same card (needs python3's torch with CUDA). scripts/gpu-session.sh runs `-L '^gpu$'`
# first, then `-L '^gpu-features$'`.
if(NOT MEGABATCH_WITH_CUDA)
  return()
endif()

set(MB_GPU_SUITES Nccl Autocast DeviceData Checkpoint HostSync)
add_executable(megabatch_gpu_tests
  ${CMAKE_CURRENT_SOURCE_DIR}/gpu/GpuMain.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/gpu/NcclTest.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/gpu/AutocastTest.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/gpu/DeviceDataTest.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/gpu/CheckpointDevicesTest.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/gpu/HostSyncTest.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/gpu/RecomputeTest.cpp
  ${MB_TEST_SUPPORT_SOURCES})
target_link_libraries(megabatch_gpu_tests PRIVATE megabatch_core GTest::gtest)
target_include_directories(megabatch_gpu_tests PRIVATE ${PROJECT_SOURCE_DIR})
megabatch_warnings(megabatch_gpu_tests)
if(MEGABATCH_PCH)
  target_precompile_headers(megabatch_gpu_tests REUSE_FROM megabatch_core)
endif()
foreach(suite ${MB_GPU_SUITES})
  add_test(NAME gpu.${suite} COMMAND megabatch_gpu_tests "--gtest_filter=Gpu${suite}.*")
  set_tests_properties(gpu.${suite} PROPERTIES ENVIRONMENT "${MB_TEST_ENV}" TIMEOUT ${MB_TEST_TIMEOUT}
                       LABELS gpu)
endforeach()

add_test(NAME gpu.Recompute COMMAND megabatch_gpu_tests "--gtest_filter=GpuRecompute.*")
set_tests_properties(gpu.Recompute PROPERTIES ENVIRONMENT "${MB_TEST_ENV}" TIMEOUT ${MB_TEST_TIMEOUT}
                     LABELS gpu-features)

# Resume across devices through the CLI (CUDA -> CPU and CPU -> CUDA).
mb_add_python_test(gpu.cross_device_resume gpu/test_cross_device_resume.py LABEL gpu TIMEOUT 600)

# The memory features and fp16 through the CLI, one CTest entry per test.
foreach(case the_plan_against_the_caching_allocators_peak
             micro_batch_auto_fits_a_budget_the_whole_share_does_not
             a_step_that_meets_a_cuda_malloc_failure_is_redone_at_half)
  mb_add_python_test(gpu.memory.${case} gpu/test_memory_features.py
                     ARGS GpuMemoryFeaturesTest.test_${case} LABEL gpu-features TIMEOUT 300)
endforeach()
mb_add_python_test(gpu.fp16_matches_grad_scaler gpu/test_fp16_cuda.py LABEL gpu-features TIMEOUT 300)
