# launch/ scripts (issue #7): one process, mpirun -np 2, a hostfile naming localhost twice, and
# a clean stop through mpirun; the stretch test runs mpirun across two network namespaces.
mb_add_python_test(launch launch/test_launch.py LABEL launch TIMEOUT 900)
set_tests_properties(py.launch PROPERTIES PROCESSORS 2)
mb_add_python_test(multihost launch/test_multihost.py LABEL launch TIMEOUT 900)
set_tests_properties(py.multihost PROPERTIES PROCESSORS 2)
# Faults between hosts (issue 39) on the same two-namespace test bed: a host lost mid-run.
mb_add_python_test(host_faults.host_lost launch/test_host_faults.py
                   ARGS HostLostTest.test_host_lost_mid_run_ends_every_rank_and_resumes_on_the_host_left
                   LABEL launch TIMEOUT 300)
set_tests_properties(py.host_faults.host_lost PROPERTIES PROCESSORS 2)
