"""Restarts after a lost host (launch/train-multinode.sh --max-restarts; launch/elastic.sh,
Note [Restarts after a lost host]), on the two-host bed of test_multihost.py with a stand-in
sshd on the second host (TwoHosts(sshd=True)): the host answers the launcher's probe, and Open
MPI's daemon start, only while it runs.

- Host lost after step 13 of 40 (checkpoints every 10): every process of the second host is
  killed, its sshd too. The launcher finds it gone, restarts on the first host alone from step
  10, and the job ends by itself with exit 0 after 40 steps, on the losses and parameters of
  an uninterrupted 2-rank run.
- Link cut for good: the same.
- The host returns (--scale-up): its sshd starts again after the restart; the job checkpoints,
  stops, and ends on 2 ranks, still on the uninterrupted run's batches.
- Not retried (one host, two ranks): a restart that meets a config error ends with exit 2 at
  once; one that always fails stops after --max-restarts with the failure's message; an
  out-of-memory end is never retried.
Needs root and `ip`; fails, never skips, without. On the CPU whatever MEGABATCH_TEST_DEVICE says.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mbtest  # noqa: E402
from test_host_faults import (CHECKPOINT_EVERY, FAULT_AFTER, SLOW_STEP_MS, STEPS, assert_trained_like,  # noqa: E402
                              last_step, run_args)
from test_launch import DEMO, LAUNCH, synth_demo_data  # noqa: E402
from test_multihost import TwoHosts, kill_everything_in  # noqa: E402

RESTART_OPTIONS = ["--cpu", "--max-restarts", "2", "--probe-timeout", "3", "--probe-every", "1"]
JOB_BOUND_S = 150  # the whole faulted job, restarts included


def restarts_in(run_dir):
    return [r for r in mbtest.read_metrics(run_dir) if r.get("event") == "restart"]


class RestartTest(mbtest.TempDirTestCase):
    """One uninterrupted 2-rank run, shared: the batches every restarted run must train on."""

    @classmethod
    def setUpClass(cls):
        cls.shared = tempfile.mkdtemp(prefix="mb-restarts-")
        cls.data = os.path.join(cls.shared, "demo.h5")
        synth_demo_data(cls.data)
        cls.reference = os.path.join(cls.shared, "uninterrupted")
        r = mbtest.mpirun(2, ["train", "--config", DEMO, "train.device=cpu"] + run_args(cls.data, cls.reference),
                          timeout=600)
        if r.returncode != 0:
            raise RuntimeError("the uninterrupted run failed:\n%r" % r)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.shared, ignore_errors=True)

    def start(self, hosts, run_dir, options, slow_step_ms):
        cmd = hosts.on_first(hosts.launcher(self.tmp, DEMO, run_args(self.data, run_dir), options))
        env = hosts.environment(MEGABATCH_FAULT_SLOW_STEP="*:%d" % slow_step_ms)
        self.log = open(self.path("job.log"), "w+")
        return subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, universal_newlines=True, env=env)

    def output(self):
        with open(self.log.name) as f:
            return f.read()

    def wait_for_step(self, job, run_dir, step):
        deadline = time.time() + 120
        while last_step(run_dir) < step and job.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        self.assertIsNone(job.poll(), "the job ended before step %d:\n%s" % (step, self.output()[-3000:]))
        self.assertLess(last_step(run_dir), 2 * CHECKPOINT_EVERY, "the fault must land between checkpoints")

    def finish(self, job):
        try:
            job.wait(timeout=JOB_BOUND_S)
        except subprocess.TimeoutExpired:
            job.kill()
            job.wait()
            self.fail("the job still ran after %d s:\n%s" % (JOB_BOUND_S, self.output()[-4000:]))
        return self.output()

    def fault_and_restart(self, fault, scale_up=False):
        """Two hosts, the fault after step 13; returns (run dir, output, exit code, hosts, the
        seconds from the fault to the end of the restarted run's first step)."""
        run = self.path("two-hosts")
        hosts = TwoHosts(self.tmp, sshd=True)
        try:
            hosts.start_sshd()
            # Steps of 100 ms; 150 with --scale-up, so that the host is back before the run ends.
            job = self.start(hosts, run, RESTART_OPTIONS + (["--scale-up"] if scale_up else []),
                             SLOW_STEP_MS if scale_up else 100)
            self.wait_for_step(job, run, FAULT_AFTER)
            faulted = time.time()
            fault(hosts)
            if scale_up:  # the host comes back once the job runs again without it
                deadline = time.time() + 120
                while not restarts_in(run) and job.poll() is None and time.time() < deadline:
                    time.sleep(0.05)
                self.assertTrue(restarts_in(run), self.output()[-3000:])
                hosts.link(1, "up")
                hosts.start_sshd()
            output = self.finish(job)
        finally:
            hosts.close()
            self.log.close()
        self.assertEqual(hosts.leftovers(), [])
        self.assertEqual(mbtest.crash_signs(output), [], output[-3000:])
        self.assertTrue(restarts_in(run), "no restart record in metrics.jsonl:\n%s" % output[-4000:])
        first = restarts_in(run)[0]
        return run, output, job.returncode, hosts, first["time"] - faulted

    def assert_restarted_on_the_host_left(self, run, output, code, hosts, seconds):
        self.assertEqual(code, 0, output[-4000:])
        line = re.search(r"host %s lost after step (\d+); restarting on 1 host, 1 rank, from step %d "
                         r"\((\d+) steps? to redo\), restart 1 of 2" % (re.escape(hosts.addr[1]), CHECKPOINT_EVERY),
                         output)
        self.assertIsNotNone(line, output[-4000:])
        failed = int(line.group(1))
        self.assertGreaterEqual(failed, FAULT_AFTER)
        self.assertEqual(int(line.group(2)), failed - CHECKPOINT_EVERY)
        record = restarts_in(run)[0]
        want = {"restart": 1, "max_restarts": 2, "reason": "host lost", "ranks_before": 2, "ranks_after": 1,
                "lost_hosts": hosts.addr[1], "resume_step": CHECKPOINT_EVERY, "failed_step": failed,
                "steps_redone": failed - CHECKPOINT_EVERY}
        self.assertEqual({k: record.get(k) for k in want}, want, record)
        self.assertGreater(record["seconds_from_failure"], 0)
        self.assertLess(seconds, 60)
        print("fault after step %d; the restarted run's first step ended %.1f s after the fault "
              "(%.1f s after mpirun ended)" % (failed, seconds, record["seconds_from_failure"]))
        self.assert_trained_like_the_reference(run)

    def assert_trained_like_the_reference(self, run):
        """Every step once, and steps 11 to 40 and the parameters as in the uninterrupted run."""
        self.assertEqual(sorted(mbtest.train_losses(run)), list(range(1, STEPS + 1)))
        assert_trained_like(self, self.reference, run, range(CHECKPOINT_EVERY + 1, STEPS + 1))

    def test_host_lost_restarts_on_the_host_left(self):
        self.assert_restarted_on_the_host_left(*self.fault_and_restart(lambda h: kill_everything_in(h.ns[1])))

    def test_link_cut_for_good_restarts_on_the_host_left(self):
        self.assert_restarted_on_the_host_left(*self.fault_and_restart(lambda h: h.link(1, "down")))

    def test_host_that_returns_is_taken_back(self):
        run, output, code, hosts, _ = self.fault_and_restart(lambda h: kill_everything_in(h.ns[1]), scale_up=True)
        self.assertEqual(code, 0, output[-4000:])
        self.assertIn("host %s answers again" % hosts.addr[1], output)
        lost, back = restarts_in(run)
        self.assertEqual((lost["reason"], lost["ranks_before"], lost["ranks_after"]), ("host lost", 2, 1), lost)
        self.assertEqual((back["reason"], back["ranks_before"], back["ranks_after"]), ("scale up", 1, 2), back)
        self.assertLess(back["resume_step"], STEPS, "the job must end on 2 ranks")
        self.assertRegex(output, r"every host answers again after step \d+; restarting on 2 hosts, 2 ranks, from "
                         r"step %d .*not counted against --max-restarts 2" % back["resume_step"])
        print("host back: resumed on 2 ranks from step %d, %.1f s after the 1-rank run ended (its stop and the "
              "new start)" % (back["resume_step"], back["seconds_from_failure"]))
        self.assert_trained_like_the_reference(run)


class NotRetriedTest(mbtest.TempDirTestCase):
    """One host (localhost, two slots): what a restart cannot mend."""

    def launch(self, run_dir, env, config=DEMO, options=()):
        hostfile = self.write("hosts", "localhost slots=2\n")
        cmd = [os.path.join(LAUNCH, "train-multinode.sh"), "--hostfile", hostfile, "--net", "tcp", "--cpu",
               "--max-restarts", "2", "--probe-timeout", "2"] + list(options) + [config]
        args = run_args(self.data, run_dir, timeout_s=3)
        return cmd + args, dict(os.environ, **env)

    @classmethod
    def setUpClass(cls):
        cls.shared = tempfile.mkdtemp(prefix="mb-not-retried-")
        cls.data = os.path.join(cls.shared, "demo.h5")
        synth_demo_data(cls.data)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.shared, ignore_errors=True)

    def test_a_config_error_after_a_restart_is_not_retried(self):
        config = self.path("demo.yaml")
        with open(DEMO) as f:
            text = f.read()
        self.write("demo.yaml", text)
        run = self.path("run")
        # Rank 1 dies after step 13: a restartable failure.
        cmd, env = self.launch(run, {"MEGABATCH_FAULT_DIE_STEP": "1:13"}, config=config)
        with open(self.path("job.log"), "w+") as log:
            job = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
            deadline = time.time() + 60
            while last_step(run) < 5 and job.poll() is None and time.time() < deadline:
                time.sleep(0.05)
            self.write("demo.yaml", text + "\nno_such_section: 1\n")  # what the restart reads
            job.wait(timeout=90)
            log.seek(0)
            output = log.read()
        self.assertEqual(job.returncode, 2, output[-4000:])
        self.assertEqual(output.count("restarting on 1 host, 2 ranks"), 1, output[-4000:])
        self.assertIn("the job exited with 2: not restarting, since exit 2 means a bad command line or config",
                      output)

    def test_a_restart_that_always_fails_stops_after_max_restarts(self):
        cmd, env = self.launch(self.path("run"), {"MEGABATCH_FAULT_DIE_STEP": "1:3"})
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                           env=env, timeout=120)
        self.assertNotIn(r.returncode, (0, 2, 75), r.stdout[-4000:])
        for k in (1, 2):
            self.assertRegex(r.stdout, r"the job failed \(exit %d\) after step 3; every host answers; restarting on 1 "
                             r"host, 2 ranks, from step 0 \(3 steps to redo\), restart %d of 2" % (r.returncode, k))
        self.assertNotIn("restart 3 of", r.stdout)
        # The last failure's code and message: Open MPI's, naming the rank that died.
        last = re.search(r"giving up after 2 restarts \(--max-restarts 2\): the last run exited with (\d+): (.*)",
                         r.stdout)
        self.assertIsNotNone(last, r.stdout[-4000:])
        self.assertEqual(int(last.group(1)), r.returncode)
        self.assertRegex(last.group(2), r"rank 1 .*signal 9")
        records = restarts_in(self.path("run"))
        self.assertEqual([(x["restart"], x["reason"]) for x in records], [(1, "rank failed"), (2, "rank failed")])

    def test_an_out_of_memory_end_is_not_retried(self):
        cmd, env = self.launch(self.path("run"), {"MEGABATCH_FAULT_OOM": "1:training step 3"})
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                           env=env, timeout=120)
        self.assertEqual(r.returncode, 1, r.stdout[-4000:])
        self.assertIn("not restarting, since it ran out of memory", r.stdout)
        self.assertNotIn("restarting on", r.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
