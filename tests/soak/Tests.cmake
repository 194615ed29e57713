# The fault soak (tests/soak/soak.py, docs/reliability.md "The fault soak"): one run under the
# elastic launcher meets a random schedule of faults and must end as the uninterrupted run
# ends. CI runs a short one: 5 faults from a fixed seed, then 5 from a new random seed that it
# prints (replay it with --seed), waits of 0.5-4 s; about 3 minutes on 2 cores. The replays of
# what the soak found run alone, in seconds. Both need root (a tmpfs for the full disk).
mb_add_python_test(soak.replays soak/test_soak_replays.py LABEL reliability TIMEOUT 300)
set_tests_properties(py.soak.replays PROPERTIES PROCESSORS 2)
mb_add_python_test(soak.short soak/soak.py
                   ARGS --faults 5 --seed 20261207 --seed random --max-wait 4
                   LABEL reliability TIMEOUT 600)
set_tests_properties(py.soak.short PROPERTIES PROCESSORS 2)
