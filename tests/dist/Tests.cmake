# Distributed-core tests (issue #4).
foreach(np 1 2 4)
  mb_add_mpi_test(collectives ${np} "Collectives*")
endforeach()
# DDP: equivalence with one process (equal and unequal shares, micro-steps), overlap, ordering,
# start-up parameter synchronisation, and topology helpers. np 3: a 7-sample batch splits 0+4+3 across ranks.
foreach(np 1 2 3 4)
  mb_add_mpi_test(ddp ${np} "Ddp*:ParameterSync*:DistRuntime*")
endforeach()
# fp16 loss scaling: an overflow on one rank skips the step and backs the scale off on every rank.
mb_add_mpi_test(loss_scaler 2 "LossScalerRanks*")
# A hung gradient bucket ends both ranks (watchdog), driven as a real mpirun job.
mb_add_python_test(dist_watchdog_hang dist/test_watchdog_hang.py
  ARGS $<TARGET_FILE:megabatch_mpi_tests> TIMEOUT 120)
