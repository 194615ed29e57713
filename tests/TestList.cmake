# Registered multi-rank and Python tests, one file per area (unit tests register themselves).
foreach(np 1 2 4)
  mb_add_mpi_test(smoke ${np} "Smoke.*")
endforeach()
mb_add_python_test(cli cli/test_cli.py)
mb_add_python_test(plot cli/test_plot.py TIMEOUT 300)
mb_add_python_test(prediction_plot cli/test_prediction_plot.py TIMEOUT 300)
# Starts CPU burners on every core: it runs alone.
mb_add_python_test(cpu_threads cli/test_cpu_threads.py TIMEOUT 300)
set_tests_properties(py.cpu_threads PROPERTIES PROCESSORS 2)
mb_add_python_test(doc_commands docs/test_doc_commands.py TIMEOUT 600 LABEL docs)

include(${CMAKE_CURRENT_SOURCE_DIR}/dist/Tests.cmake OPTIONAL)
include(${CMAKE_CURRENT_SOURCE_DIR}/data/Tests.cmake OPTIONAL)
include(${CMAKE_CURRENT_SOURCE_DIR}/model/Tests.cmake OPTIONAL)
include(${CMAKE_CURRENT_SOURCE_DIR}/torchscript/Tests.cmake OPTIONAL)
include(${CMAKE_CURRENT_SOURCE_DIR}/train/Tests.cmake OPTIONAL)
include(${CMAKE_CURRENT_SOURCE_DIR}/walk/Tests.cmake OPTIONAL)
include(${CMAKE_CURRENT_SOURCE_DIR}/reliability/Tests.cmake OPTIONAL)
include(${CMAKE_CURRENT_SOURCE_DIR}/launch/Tests.cmake OPTIONAL)
include(${CMAKE_CURRENT_SOURCE_DIR}/soak/Tests.cmake OPTIONAL)
include(${CMAKE_CURRENT_SOURCE_DIR}/slurm/Tests.cmake OPTIONAL)
include(${CMAKE_CURRENT_SOURCE_DIR}/gpu/Tests.cmake OPTIONAL)  # CUDA builds only
include(${CMAKE_CURRENT_SOURCE_DIR}/cmake/Tests.cmake OPTIONAL)

# Style: every C++ file follows .clang-format (fails, never skips, without clang-format).
file(GLOB_RECURSE MB_STYLE_FILES CONFIGURE_DEPENDS
  ${PROJECT_SOURCE_DIR}/src/*.cpp ${PROJECT_SOURCE_DIR}/src/*.h ${PROJECT_SOURCE_DIR}/tests/*.cpp
  ${PROJECT_SOURCE_DIR}/tests/*.h ${PROJECT_SOURCE_DIR}/bench/*.cpp)
find_program(MB_CLANG_FORMAT clang-format)
if(MB_CLANG_FORMAT)
  add_test(NAME style.clang_format COMMAND ${MB_CLANG_FORMAT} --dry-run -Werror ${MB_STYLE_FILES})
else()
  add_test(NAME style.clang_format COMMAND ${CMAKE_COMMAND} -E echo
           "clang-format not found: install it (scripts/setup.sh --tests) to check the code style")
  set_tests_properties(style.clang_format PROPERTIES WILL_FAIL TRUE)
endif()
set_tests_properties(style.clang_format PROPERTIES LABELS style)

# Layers: every #include in src/ runs down app -> train -> model -> data -> dist -> config ->
# common, train/'s rooms never include the trainer above them, and no file in src/ is over 600
# lines (docs/architecture.md).
mb_add_python_test(style_layering style/test_layering.py LABEL style TIMEOUT 60)
# Every project path named in a comment or document exists (tests/style/test_paths.py).
mb_add_python_test(style_paths style/test_paths.py LABEL style TIMEOUT 60)
# The Debian mirror bootstrapped roots are made from: the one the apt sources name.
mb_add_python_test(scripts.debian_mirror scripts/test_debian_mirror.py TIMEOUT 60)

# Shipped configs: each one's header commands run, shrunk (tests/configs/test_config_headers.py).
file(GLOB MB_SHIPPED_CONFIGS RELATIVE ${PROJECT_SOURCE_DIR} CONFIGURE_DEPENDS
  ${PROJECT_SOURCE_DIR}/configs/*.yaml ${PROJECT_SOURCE_DIR}/examples/*/*.yaml)
foreach(config ${MB_SHIPPED_CONFIGS})
  mb_add_python_test(config_header.${config} configs/test_config_headers.py ARGS ${config} TIMEOUT 1200
                     LABEL config_header)
endforeach()
