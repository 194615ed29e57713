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
