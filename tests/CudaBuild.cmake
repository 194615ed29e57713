# The CUDA build stage (issue 26), label cuda-build. scripts/test.sh builds this tree a second time
# (its LibTorch 2.6 stage) inside a Debian 13 root with Debian's CUDA LibTorch 2.6 (CUDA 12.4), CUDA toolkit, NCCL 2.22 and
# NVML headers (scripts/build-cuda.sh into build-cuda/, MEGABATCH_CUDA=ON: every *Cuda.cpp, the
# NCCL backend, NVML, the GPU-only test binary) and runs the tests labelled cuda-build there, on a
# machine with no GPU. Why this subset and not the whole CPU suite:
#   - every unit test: the library's CPU code compiled and linked against the CUDA LibTorch, whose
#     headers and dispatch differ from the CPU 1.13 and 2.6 builds (CUDA hooks loaded, the
#     *Cuda.cpp sources in the binary);
#   - the multi-rank MPI tests (smoke, DDP, collectives, loss scaler at 2 ranks): Open MPI and the
#     autograd hooks in a binary that also links NCCL and the CUDA runtime;
#   - the CLI test and two training runs through the CLI (2-rank SIGTERM -> resume, an elastic
#     resume): a CUDA binary on the CPU trains and resumes bit for bit; and the removed key
#     train.cuda_graphs, which that binary refuses in a config file and an override (exit 2);
#   - py.cuda.gpuless: what a CUDA binary must do without a GPU (tests/cuda/test_gpuless.py).
# The same stage also runs the tests labelled torch2 (tests/Torch2.cmake: the PyTorch parity,
# TorchScript and fp16 tests) in this build, against python3-torch-cuda 2.6 of the same root on
# the CPU, so CI builds one LibTorch 2.6 tree, not two (scripts/test.sh, stage 2).
# Left out: the sanitizer, SLURM and launcher stages (host tools, not the binary's build), and the
# gpu-labelled tests, which need a GPU: py.cuda.gpuless checks that they fail here rather than pass.
# The target megabatch_cuda_build builds exactly the binaries those tests and the torch2 ones run.
set(MB_CUDA_BUILD_TESTS
  mpi.smoke.np2 mpi.ddp.np2 mpi.collectives.np2 mpi.loss_scaler.np2 py.cli
  py.train.sigterm_to_every_rank_checkpoints_and_resumes
  py.train.elastic_resume_matches_uninterrupted_run
  py.train.cuda_graphs_key_is_refused_as_removed)
set(MB_CUDA_BUILD_TARGETS megabatch megabatch_unit_tests megabatch_mpi_tests megabatch_optimizer_reference
    megabatch_model_parity)

if(MEGABATCH_WITH_CUDA)
  list(APPEND MB_CUDA_BUILD_TARGETS megabatch_gpu_tests)
  mb_add_python_test(cuda.gpuless cuda/test_gpuless.py LABEL cuda-build TIMEOUT 600)
  set_property(TEST py.cuda.gpuless APPEND PROPERTY ENVIRONMENT
               "MEGABATCH_GPU_TESTS_BIN=$<TARGET_FILE:megabatch_gpu_tests>")
endif()

foreach(test ${MB_CUDA_BUILD_TESTS})
  if(NOT TEST ${test})
    message(FATAL_ERROR "tests/CudaBuild.cmake names ${test}, which no longer exists: "
                        "update MB_CUDA_BUILD_TESTS to the test's new name")
  endif()
  set_property(TEST ${test} APPEND PROPERTY LABELS cuda-build)
endforeach()
get_property(mb_all_tests DIRECTORY PROPERTY TESTS)
foreach(test ${mb_all_tests})
  if(test MATCHES "^unit\\.")
    set_property(TEST ${test} APPEND PROPERTY LABELS cuda-build)
  endif()
endforeach()

add_custom_target(megabatch_cuda_build DEPENDS ${MB_CUDA_BUILD_TARGETS})
