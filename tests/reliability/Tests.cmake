# Reliability suite (issue 9): fault tests against real mpirun jobs, label `reliability`.
# `ctest -L reliability` runs them together with the earlier fault tests they build on
# (SIGTERM, NaN steps, the watchdog driver, data errors), labelled below.
foreach(case kill9_one_of_four_ranks_then_resume truncated_and_bitflipped_checkpoints_fall_back
             disk_full_keeps_previous_checkpoint hang_in_a_gradient_bucket_ends_every_rank
             hang_in_a_control_collective_ends_every_rank)
  mb_add_python_test(reliability.${case} reliability/test_faults.py ARGS FaultsTest.test_${case}
                     LABEL reliability TIMEOUT 600)
endforeach()
mb_add_python_test(reliability.bad_configs reliability/test_bad_inputs.py ARGS BadConfigTest
                   LABEL reliability TIMEOUT 600)
mb_add_python_test(reliability.bad_data reliability/test_bad_inputs.py ARGS BadDataTest
                   LABEL reliability TIMEOUT 600)

foreach(test py.train.sigterm_to_every_rank_checkpoints_and_resumes py.train.nan_step_is_skipped_on_every_rank
             py.train.too_many_bad_steps_stops_cleanly py.dist_watchdog_hang py.data_errors
             py.train.stop.a_stop_during_an_evaluation_ends_it_within_seconds
             py.train.stop.a_stop_in_a_long_step_drops_it_and_the_resumed_run_redoes_it)
  if(TEST ${test})
    set_property(TEST ${test} APPEND PROPERTY LABELS reliability)
  endif()
endforeach()

# Hostile checkpoints and data files (issue 29, docs/reliability.md "Hostile files: the threat
# model"): exit codes, messages, peak RSS (/usr/bin/time -v) and no read outside the file.
foreach(case UntrustedCheckpointTest LegacyCheckpointTest UntrustedDataTest UntrustedArchiveTest)
  mb_add_python_test(reliability.untrusted.${case} reliability/test_untrusted_files.py ARGS ${case}
                     LABEL reliability TIMEOUT 900)
endforeach()
