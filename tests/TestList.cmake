# Registered multi-rank and Python tests, one file per area (unit tests register themselves).
foreach(np 1 2 4)
  mb_add_mpi_test(smoke ${np} "Smoke.*")
endforeach()
mb_add_python_test(cli cli/test_cli.py)

include(${CMAKE_CURRENT_SOURCE_DIR}/dist/Tests.cmake OPTIONAL)
include(${CMAKE_CURRENT_SOURCE_DIR}/data/Tests.cmake OPTIONAL)
include(${CMAKE_CURRENT_SOURCE_DIR}/model/Tests.cmake OPTIONAL)
include(${CMAKE_CURRENT_SOURCE_DIR}/train/Tests.cmake OPTIONAL)
include(${CMAKE_CURRENT_SOURCE_DIR}/reliability/Tests.cmake OPTIONAL)
include(${CMAKE_CURRENT_SOURCE_DIR}/launch/Tests.cmake OPTIONAL)
include(${CMAKE_CURRENT_SOURCE_DIR}/slurm/Tests.cmake OPTIONAL)
