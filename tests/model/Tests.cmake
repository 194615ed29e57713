# Models (issue #6): PyTorch parity of every model kind (the state_dict-name contract).
add_executable(megabatch_model_parity ${CMAKE_CURRENT_SOURCE_DIR}/model/ParityDump.cpp ${MB_TEST_SUPPORT_SOURCES})
target_link_libraries(megabatch_model_parity PRIVATE megabatch_core)
target_include_directories(megabatch_model_parity PRIVATE ${PROJECT_SOURCE_DIR})  # tests/support
megabatch_warnings(megabatch_model_parity)
if(MEGABATCH_PCH)
  target_precompile_headers(megabatch_model_parity REUSE_FROM megabatch_core)
endif()
mb_add_python_test(model.parity model/test_parity.py ARGS $<TARGET_FILE:megabatch_model_parity>)
