# Distributed-core tests (issue #4).
foreach(np 1 2 4)
  mb_add_mpi_test(collectives ${np} "Collectives*")
endforeach()
