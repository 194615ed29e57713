# Trainer tests (issue #5).
add_executable(megabatch_optimizer_reference tools/OptimizerReference.cpp)
target_link_libraries(megabatch_optimizer_reference PRIVATE megabatch_core)
megabatch_warnings(megabatch_optimizer_reference)
mb_add_python_test(optimizer_parity train/test_optimizer_parity.py)
set_property(TEST py.optimizer_parity APPEND PROPERTY ENVIRONMENT
  MB_OPTIMIZER_REFERENCE=$<TARGET_FILE:megabatch_optimizer_reference>)
