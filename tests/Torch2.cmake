# The LibTorch 2.x stage (issue 16). scripts/test.sh builds this tree a second time inside a
# Debian 13 root against its LibTorch 2.6 and runs the tests labelled torch2 there, with
# /usr/bin/python3 of that root as the reference: by default the CUDA root (Debian's CUDA
# LibTorch 2.6 and python3-torch-cuda, on a machine without a GPU: scripts/build-cuda.sh into
# build-cuda/, with the cuda-build label of tests/CudaBuild.cmake); with
# MEGABATCH_TORCH2_FLAVOUR=cpu the CPU root (python3-torch 2.6, scripts/build-torch2.sh into
# build-torch2/). The label marks:
#   - every unit test (unit.Checkpoint holds the checkpoint round trip, unit.Gpt/unit.Lstm the
#     BF16 autocast path whose API moved in 2.4),
#   - the PyTorch parity tests of the models and the optimizers,
#   - a 2-rank mpirun train -> SIGTERM -> resume, and an elastic resume (a checkpoint written
#     on W ranks continues on W' ranks),
#   - the multi-rank DDP and collectives tests (autograd hooks and MPI under 2.6),
#   - a TorchScript module trained against a PyTorch 2.6 loop (the graph executor's CPU fusion
#     hung on 2.6: Note [TorchScript fusion on the CPU]),
#   - fp16 training on the CPU (fp16 CPU autocast needs LibTorch >= 2.2): the parity with
#     torch.amp.GradScaler and the resumes (labelled in tests/torchscript/Tests.cmake).
# The target megabatch_torch2 builds exactly the binaries those tests run.
set(MB_TORCH2_TESTS
  py.model.parity py.optimizer_parity
  py.train.sigterm_to_every_rank_checkpoints_and_resumes
  py.train.elastic_resume_matches_uninterrupted_run
  mpi.ddp.np2 mpi.collectives.np2 mpi.loss_scaler.np2
  py.torchscript.losses_match_a_python_loop
  py.train.recompute.gpt_blocks_give_the_same_gradients_bit_for_bit_on_two_ranks
  py.train.recompute.lstm_time_segments_train_like_the_run_without)
set(MB_TORCH2_TARGETS
  megabatch megabatch_unit_tests megabatch_model_parity megabatch_optimizer_reference
  megabatch_mpi_tests)

foreach(test ${MB_TORCH2_TESTS})
  if(NOT TEST ${test})
    message(FATAL_ERROR "tests/Torch2.cmake names ${test}, which no longer exists: "
                        "update MB_TORCH2_TESTS to the test's new name")
  endif()
  set_property(TEST ${test} APPEND PROPERTY LABELS torch2)
endforeach()
get_property(mb_all_tests DIRECTORY PROPERTY TESTS)
foreach(test ${mb_all_tests})
  if(test MATCHES "^unit\\.")
    set_property(TEST ${test} APPEND PROPERTY LABELS torch2)
  endif()
endforeach()

add_custom_target(megabatch_torch2 DEPENDS ${MB_TORCH2_TARGETS})
