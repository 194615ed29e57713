# Registered multi-rank and Python tests. Unit tests register themselves (gtest discovery).
foreach(np 1 2 4)
  mb_add_mpi_test(smoke ${np} "Smoke.*")
  mb_add_mpi_test(collectives ${np} "Collectives.*")
endforeach()

mb_add_python_test(cli cli/test_cli.py)
