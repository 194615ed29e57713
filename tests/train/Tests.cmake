# Trainer tests (issue #5).
add_executable(megabatch_optimizer_reference tools/OptimizerReference.cpp ${MB_TEST_SUPPORT_SOURCES})
target_link_libraries(megabatch_optimizer_reference PRIVATE megabatch_core)
target_include_directories(megabatch_optimizer_reference PRIVATE ${PROJECT_SOURCE_DIR})  # tests/support
megabatch_warnings(megabatch_optimizer_reference)
mb_add_python_test(optimizer_parity train/test_optimizer_parity.py)
set_property(TEST py.optimizer_parity APPEND PROPERTY ENVIRONMENT
  MB_OPTIMIZER_REFERENCE=$<TARGET_FILE:megabatch_optimizer_reference>)

# End-to-end trainer tests, one CTest entry per test so they spread over CTest's workers.
foreach(case elastic_resume_matches_uninterrupted_run nan_step_is_skipped_on_every_rank
             too_many_bad_steps_stops_cleanly bf16_trains_like_fp32 keep_last_latest_and_best
             sigterm_to_every_rank_checkpoints_and_resumes progress_bar_on_a_terminal_and_lines_otherwise
             stateful_lanes_are_world_size_independent_and_resume stateful_config_errors
             cuda_graphs_key_is_refused_as_removed host_sync_log_masks_bad_steps_on_the_device)
  mb_add_python_test(train.${case} train/test_training.py ARGS TrainingTest.test_${case} TIMEOUT 900)
endforeach()

# A resume inside a log window carries the window's losses.
mb_add_python_test(train.log_window train/test_log_window.py TIMEOUT 300)

# Graph models end to end (issue 18), one CTest entry per test.
foreach(case elastic_resume_2_to_1_matches_the_uninterrupted_run
             gin_learns_the_motifs_far_above_the_node_only_baseline
             eval_metrics_in_metrics_jsonl_and_one_prediction_per_graph
             balanced_class_weights_come_from_the_train_split)
  mb_add_python_test(train.graphs_${case} train/test_graphs_training.py
                     ARGS GraphTrainingTest.test_${case} TIMEOUT 900)
endforeach()

# kind: gat on the panel layout (issue 17), one CTest entry per test.
foreach(case elastic_resume_2_to_1_matches_the_uninterrupted_run
             each_dates_graph_is_built_once_or_once_per_epoch step_time_split_and_eval_ic
             the_graph_beats_the_same_encoder_without_it)
  mb_add_python_test(train.panel.${case} train/test_panel_training.py
                     ARGS PanelTrainingTest.test_${case} TIMEOUT 900)
endforeach()

# Progress of long work (issue 28), one CTest entry per test.
foreach(case slow_evaluation_in_train_writes_a_line_at_least_every_30s
             training_in_log_mode_writes_a_line_when_no_step_line_came_for_30s
             the_rank_with_the_most_samples_speaks eval_and_predict_show_progress
             sample_over_many_prompts_shows_progress data_tools_show_progress
             eval_bar_on_a_terminal_then_the_training_bar_again data_tool_bar_on_a_terminal
             run_log_level_applies_to_training)
  mb_add_python_test(progress.${case} train/test_progress.py ARGS ProgressTest.test_${case} TIMEOUT 900)
endforeach()

# Precision that fits the hardware and a watchdog that waits for slow ranks.
foreach(case bf16_on_a_cpu_without_bf16_units_warns_once_naming_fp32_and_auto
             eval_of_a_bf16_checkpoint_runs_in_fp32_on_the_cpu_and_matches_bf16
             auto_on_the_cpu_chooses_bf16_where_it_pays_and_keeps_it_on_resume
             auto_keeps_fp32_where_the_trial_step_is_not_faster
             eval_and_predict_of_an_auto_bf16_checkpoint_run_in_bf16_where_it_pays
             eval_start_line_comes_before_the_first_batch)
  mb_add_python_test(precision_fit.${case} train/test_precision_fit.py ARGS PrecisionFitTest.test_${case}
                     TIMEOUT 300)
endforeach()
foreach(case a_single_rank_step_longer_than_the_timeout_finishes
             two_ranks_wait_for_a_slow_peer_that_makes_progress
             two_ranks_wait_for_a_peer_that_computes_one_long_micro_batch
             a_step_longer_than_a_minute_says_it_is_still_running)
  mb_add_python_test(slow_steps.${case} train/test_slow_steps.py ARGS SlowStepTest.test_${case} TIMEOUT 300)
endforeach()

# Out of memory is an expected error (issue 36 item 3), one CTest entry per test.
foreach(case OneRankTest.test_every_training_phase_ends_with_a_message
             OneRankTest.test_commands_on_a_checkpoint_end_with_a_message
             OneRankTest.test_a_failed_final_evaluation_loses_no_training
             OneRankTest.test_sample_ends_with_a_message
             OneRankTest.test_a_model_too_big_for_the_address_space_as_a_user_meets_it
             TwoRanksTest.test_every_phase_ends_every_rank_well_within_the_timeout
             TwoRanksTest.test_checkpoint_assembly_keeps_the_last_checkpoint
             AutoRedoTest.test_a_step_that_runs_out_in_the_forward_or_the_backward_is_redone_at_half
             AutoRedoTest.test_without_auto_the_same_fault_ends_every_rank)
  string(REGEX REPLACE "^[A-Za-z]+\\.test_" "" short ${case})
  mb_add_python_test(train.oom.${short} train/test_out_of_memory.py ARGS ${case} TIMEOUT 300)
endforeach()

# A stop request within seconds: during an evaluation, and in a long step.
foreach(case a_stop_during_an_evaluation_ends_it_within_seconds
             a_stop_in_a_long_step_drops_it_and_the_resumed_run_redoes_it
             a_lead_time_shorter_than_a_stop_is_warned_about)
  mb_add_python_test(train.stop.${case} train/test_stopping.py ARGS StoppingTest.test_${case} TIMEOUT 300)
endforeach()

# One run directory, one writer: a second trainer is refused; the lock dies with its holder.
foreach(case a_second_trainer_is_refused_and_the_first_trains_as_if_alone
             kill_9_then_the_same_command_resumes_at_once
             kill_9_with_a_lock_file_resumes_at_once_on_the_same_host
             on_two_ranks_every_rank_of_the_second_job_ends
             a_trainer_that_is_ending_is_waited_for_a_bounded_time
             eval_and_inspect_read_a_run_being_trained)
  mb_add_python_test(train.run_lock.${case} train/test_run_lock.py ARGS RunLockTest.test_${case} TIMEOUT 180)
  set_property(TEST py.train.run_lock.${case} APPEND PROPERTY LABELS reliability)
endforeach()

# The evaluation batch fits the memory budget, on a reduced gpt2-small.
mb_add_python_test(train.eval_batch train/test_eval_batch.py TIMEOUT 300)

# Activation recomputation (issue 37), one CTest entry per test.
foreach(case gpt_blocks_give_the_same_gradients_bit_for_bit_on_two_ranks
             graph_layers_give_the_same_gradients_bit_for_bit
             a_run_resumes_across_the_setting_both_ways
             a_micro_batch_that_fits_only_with_recomputation
             kinds_without_segments_say_what_happens
             lstm_time_segments_train_like_the_run_without
             bf16_autocast_gives_the_same_gradients_bit_for_bit)
  mb_add_python_test(train.recompute.${case} train/test_recompute.py
                     ARGS RecomputeTest.test_${case} TIMEOUT 300)
endforeach()
# fp16 on the CPU needs LibTorch >= 2.2 (tests/torchscript/Tests.cmake): the LibTorch 2.6 stage.
if(MEGABATCH_TORCH_VERSION VERSION_GREATER_EQUAL 2.2)
  mb_add_python_test(train.recompute.fp16_with_loss_scaling_gives_the_same_gradients_bit_for_bit
                     train/test_recompute.py
                     ARGS RecomputeTest.test_fp16_with_loss_scaling_gives_the_same_gradients_bit_for_bit
                     TIMEOUT 300)
  set_property(TEST py.train.recompute.fp16_with_loss_scaling_gives_the_same_gradients_bit_for_bit
               APPEND PROPERTY LABELS torch2)
endif()

# The memory plan (issue 36 item 1), one CTest entry per test.
foreach(case a_run_with_the_plan_equals_one_without_bit_for_bit
             the_plan_is_logged_and_recorded_by_the_neediest_of_two_ranks
             micro_batch_auto_fits_a_budget_the_hand_set_size_does_not_on_two_ranks)
  mb_add_python_test(train.memory_plan.${case} train/test_memory_plan.py
                     ARGS MemoryPlanTest.test_${case} TIMEOUT 600)
endforeach()

# Checkpoints by time (run.checkpoint_every_s): every 2 s, the same step on every rank (10 s).
mb_add_python_test(train.checkpoint_every_s train/test_checkpoint_schedule.py TIMEOUT 300)
set_tests_properties(py.train.checkpoint_every_s PROPERTIES PROCESSORS 2)

# TensorBoard event files, read with python3-protobuf and python3-crc32c (about 30 s in all).
foreach(case every_scalar_of_metrics_jsonl_is_in_the_event_file a_kill_and_a_resume_show_every_step_once
             the_switch_turns_them_off)
  mb_add_python_test(train.tensorboard.${case} train/test_tensorboard.py ARGS TensorBoardTest.test_${case}
                     TIMEOUT 300)
endforeach()
set_tests_properties(py.train.tensorboard.every_scalar_of_metrics_jsonl_is_in_the_event_file
                     PROPERTIES PROCESSORS 2)

# Retraining as data arrives: splits by time, warm starts, the resume's data check, periods.
foreach(case TimeSplitTest WarmStartTest DataContinuityTest EveryValueTest PeriodTest PrecisionResumeTest)
  string(REGEX REPLACE "Test$" "" short ${case})
  mb_add_python_test(retraining.${short} train/test_retraining.py ARGS ${case} TIMEOUT 600)
endforeach()

# Is the model any good: baselines, IC, rank IC, hit rate and results by period against numpy,
# scipy and pandas, on 1, 2 and 3 ranks.
mb_add_python_test(judging train/test_judging.py TIMEOUT 300)
set_tests_properties(py.judging PROPERTIES PROCESSORS 2)
# eval --predictions on files written with h5py: no training, a few seconds.
mb_add_python_test(judging_predictions train/test_judging_predictions.py TIMEOUT 120)
