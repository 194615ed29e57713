"""A hung collective ends every rank within dist.timeout_s + 15 s, naming rank, operation, and bucket.

Drives megabatch_mpi_tests (its FaultDriver test trains with the gradient reducer) under
`mpirun -np 2` with MEGABATCH_FAULT_HANG: rank 1 sleeps inside its fourth gradient-bucket
collective. Both watchdogs (rank 1 in the hung call, rank 0 waiting for rank 1 in the same
all-reduce) must end the job. Usage: test_watchdog_hang.py PATH/TO/megabatch_mpi_tests
"""
import datetime
import os
import re
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import mbtest  # noqa: E402

TEST_BINARY = None
TIMEOUT_S = 4
GRACE_S = 15


class WatchdogHangTest(unittest.TestCase):
    def test_hung_bucket_ends_both_ranks_with_the_message(self):
        self.check_hang({})

    def test_a_hanging_abort_hook_does_not_keep_ranks_alive(self):
        # An ncclCommAbort that blocks: the watchdog gives up on it after 10 s.
        output = self.check_hang({"MB_TEST_HANGING_ABORT_HOOK": "1"})
        self.assertIn("abort hooks did not finish within 10 s; exiting anyway", output)

    def check_hang(self, extra_env):
        env = dict(os.environ)
        env.update({"MEGABATCH_FAULT_HANG": "1:grad bucket:3", "MB_TEST_WATCHDOG_S": str(TIMEOUT_S)})
        env.update(extra_env)
        cmd = [mbtest.MPIEXEC, "-np", "2", "--oversubscribe", TEST_BINARY,
               "--gtest_filter=FaultDriver.*"]
        start = time.monotonic()
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                              universal_newlines=True, timeout=TIMEOUT_S + GRACE_S + 60)
        wall = time.monotonic() - start
        ended = datetime.datetime.now()
        output = proc.stdout + proc.stderr
        report = "exit %d after %.1f s\n%s" % (proc.returncode, wall, output[-6000:])

        self.assertNotEqual(proc.returncode, 0, report)
        hang = re.search(r"^\[([\d-]+ [\d:.]+)\] \[r1/2\] \[dist\] warning: fault injection: "
                         r"rank 1 hangs in 'grad bucket", output, re.MULTILINE)
        self.assertTrue(hang, report)
        # mpirun returns only once both ranks are gone: measure from the moment rank 1 hung
        # (its log line) to then. Start-up time (loading LibTorch) is not part of the bound.
        hung_at = datetime.datetime.strptime(hang.group(1), "%Y-%m-%d %H:%M:%S.%f")
        hung_for = (ended - hung_at).total_seconds()
        self.assertLess(hung_for, TIMEOUT_S + GRACE_S, report)
        # Every rank that the watchdog ended says which rank, what operation, which bucket.
        fired = re.findall(r"watchdog: rank (\d) has waited [\d.]+ s for grad bucket (\d+)/(\d+) \(", output)
        self.assertTrue(fired, report)
        for rank, bucket, buckets in fired:
            self.assertIn(rank, ("0", "1"), report)
            self.assertLessEqual(int(bucket), int(buckets), report)
        self.assertNotIn("should have ended this process", output, report)
        return output


if __name__ == "__main__":
    TEST_BINARY = sys.argv.pop(1)
    unittest.main()
