# The fault soak (tests/soak/soak.py, docs/reliability.md "The fault soak"): one run under the
# elastic launcher meets a random schedule of faults and must end as the uninterrupted run
# ends. CI runs two short ones, about 2 minutes each on 2 cores, with waits of 0.5-4 s:
# - soak.short: 5 faults from a fixed seed, on one host;
# - soak.hosts: 5 faults from a new random seed that it prints (replay it with --hosts --seed),
#   on the two-host bed, where the faults between hosts join the others.
# The replays of what the soak found run alone, in seconds. All need root (a tmpfs for the full
# disk; network namespaces for the hosts).
mb_add_python_test(soak.replays soak/test_soak_replays.py LABEL reliability TIMEOUT 300)
set_tests_properties(py.soak.replays PROPERTIES PROCESSORS 2)
mb_add_python_test(soak.short soak/soak.py
                   ARGS --faults 5 --seed 20261207 --max-wait 4
                   LABEL reliability TIMEOUT 600)
set_tests_properties(py.soak.short PROPERTIES PROCESSORS 2)
mb_add_python_test(soak.hosts soak/soak.py
                   ARGS --hosts --faults 5 --seed random --max-wait 4 --steps 300
                   LABEL reliability TIMEOUT 600)
set_tests_properties(py.soak.hosts PROPERTIES PROCESSORS 2)
