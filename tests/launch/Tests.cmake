# launch/ scripts (issue #7): one process, mpirun -np 2, a hostfile naming localhost twice, and
# a clean stop through mpirun; the stretch test runs mpirun across two network namespaces.
mb_add_python_test(launch launch/test_launch.py LABEL launch TIMEOUT 900)
set_tests_properties(py.launch PROPERTIES PROCESSORS 2)
mb_add_python_test(multihost launch/test_multihost.py LABEL launch TIMEOUT 900)
set_tests_properties(py.multihost PROPERTIES PROCESSORS 2)
# Faults between hosts (issue 39) on the same two-namespace test bed: a host lost mid-run, a
# link cut for longer than dist.timeout_s, a short one the run rides out, and a slow link
# (about 15 s each).
foreach(fault IN ITEMS
        "host_lost:test_host_lost_mid_run_ends_every_rank_and_resumes_on_the_host_left"
        "link_cut:test_link_cut_longer_than_the_timeout_ends_every_rank_and_resumes_on_the_host_left"
        "short_link_cut:test_link_cut_shorter_than_the_timeout_is_ridden_out")
  string(REPLACE ":" ";" parts "${fault}")
  list(GET parts 0 name)
  list(GET parts 1 method)
  mb_add_python_test(host_faults.${name} launch/test_host_faults.py ARGS HostFaultTest.${method}
                     LABEL launch TIMEOUT 300)
  set_tests_properties(py.host_faults.${name} PROPERTIES PROCESSORS 2)
endforeach()
mb_add_python_test(host_faults.slow_link launch/test_host_faults.py
                   ARGS SlowLinkTest.test_a_slow_link_trains_the_same_and_shows_as_communication
                   LABEL launch TIMEOUT 300)
set_tests_properties(py.host_faults.slow_link PROPERTIES PROCESSORS 2)
# Restarts after a lost host (launch/elastic.sh): on the two-host bed, a host lost, a link cut
# for good, and a host that returns (one uninterrupted run shared, about 70 s); on one host,
# what is not retried (about 40 s).
mb_add_python_test(restarts.two_hosts launch/test_restarts.py ARGS RestartTest LABEL launch TIMEOUT 400)
set_tests_properties(py.restarts.two_hosts PROPERTIES PROCESSORS 2)
mb_add_python_test(restarts.not_retried launch/test_restarts.py ARGS NotRetriedTest LABEL launch TIMEOUT 300)
set_tests_properties(py.restarts.not_retried PROPERTIES PROCESSORS 2)
