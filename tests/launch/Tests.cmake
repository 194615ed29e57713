# launch/ scripts (issue #7): one process, mpirun -np 2, a hostfile naming localhost twice, and
# a clean stop through mpirun; the stretch test runs mpirun across two network namespaces.
mb_add_python_test(launch launch/test_launch.py LABEL launch TIMEOUT 900)
set_tests_properties(py.launch PROPERTIES PROCESSORS 2)
mb_add_python_test(multihost launch/test_multihost.py LABEL launch TIMEOUT 900)
set_tests_properties(py.multihost PROPERTIES PROCESSORS 2)
