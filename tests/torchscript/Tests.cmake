# model.kind = torchscript (issue 19): modules scripted with Debian's python3-torch, trained under
# mpirun against plain PyTorch loops; one CTest entry per test so they spread over CTest's workers.
foreach(case losses_match_a_python_loop batch_norm_buffers_are_averaged_at_checkpoints bf16_autocast
             gradient_accumulation nan_guard sigterm_checkpoint_and_resume_on_one_rank export_round_trip
             lstm_checkpoint_continues_in_the_built_in_lstm)
  mb_add_python_test(torchscript.${case} torchscript/test_torchscript.py
                     ARGS TorchScriptTrainingTest.test_${case} TIMEOUT 600)
endforeach()
foreach(case bad_archives_and_modules checkpoint_of_another_module help_says_torchscript_code_runs
             samples_and_tokens_layouts example_trains_exports_and_runs_in_python)
  mb_add_python_test(torchscript.${case} torchscript/test_torchscript.py
                     ARGS TorchScriptInputsTest.test_${case} TIMEOUT 600)
endforeach()

# train.precision = fp16 (Note [Loss scaling]). Training in fp16 on the CPU needs fp16 autocast
# there, which LibTorch has from 2.2 on: the LibTorch 2.6 stage runs those tests (label torch2,
# tests/Torch2.cmake); a 1.13 build checks that it refuses fp16 on the CPU instead.
if(MEGABATCH_TORCH_VERSION VERSION_GREATER_EQUAL 2.2)
  foreach(case matches_grad_scaler stop_mid_growth_interval_resumes_on_one_rank
               checkpoint_without_scaler_state_starts_at_init
               collapse_stops_with_the_last_good_parameters)
    mb_add_python_test(fp16.${case} torchscript/test_fp16.py
                       ARGS Fp16TrainingTest.test_${case} TIMEOUT 900)
    set_property(TEST py.fp16.${case} APPEND PROPERTY LABELS torch2)
  endforeach()
else()
  mb_add_python_test(fp16.fp16_on_the_cpu_needs_libtorch_2_2 torchscript/test_fp16.py
                     ARGS Fp16RefusedTest.test_fp16_on_the_cpu_needs_libtorch_2_2 TIMEOUT 300)
endif()
foreach(case bad_scaler_keys_name_the_key auto_is_fp32_on_the_cpu)
  mb_add_python_test(fp16.${case} torchscript/test_fp16.py ARGS Fp16ConfigTest.test_${case} TIMEOUT 300)
endforeach()
