"""The SLURM path on a real SLURM cluster (Debian's slurmctld, slurmd, munge) on localhost:
slurm/train-cpu.sbatch with 2 tasks runs the demo config to completion; a job signalled the
way SLURM does before its time limit (scancel --signal=USR1 --batch) checkpoints, exits 75,
requeues itself, resumes, and completes with a metrics.jsonl whose steps continue with no gap
and no repeat; SLURM's own --signal=B:USR1@45 before a 1-minute limit does the same;
slurm/sweep.sh runs a job array with a summary job that depends on it; and slurm/walk.sh runs a
walk-forward's folds as a job array, one task preempted, with the walk that stitches them after.

If the cluster cannot be installed or started, the test fails and says why: it never skips.
Deliberately on the CPU (train-cpu.sbatch, MB_DEVICE=cpu) whatever MEGABATCH_TEST_DEVICE says:
the local cluster has no GPU resources (gres) to schedule; it tests SLURM's signals and requeue.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import unittest

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)
import mbtest  # noqa: E402
from slurmcluster import SlurmCluster, kill_leftovers  # noqa: E402

TEMPLATE = os.path.join(mbtest.SOURCE_DIR, "slurm", "train-cpu.sbatch")
DEMO = mbtest.config_path("demo.yaml")


def train_steps(run_dir):
    """Steps of the train records in metrics.jsonl, in file order."""
    steps = []
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            if line.strip():
                record = json.loads(line)
                if record.get("event") == "train":
                    steps.append(record["step"])
    return steps


def read(path):
    with open(path, errors="replace") as f:
        return f.read()


class SlurmTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.started = time.time()
        cls._tmp = tempfile.TemporaryDirectory(prefix="mbslurm-")
        cls.tmp = cls._tmp.name
        os.chmod(cls.tmp, 0o755)  # munged: the directories above its socket must be searchable
        cls.cluster = SlurmCluster(os.path.join(cls.tmp, "cluster"), cpus=2)
        try:
            cls.cluster.start()
        except BaseException:
            cls.cluster.stop()
            kill_leftovers(cls.cluster.conf)
            cls._tmp.cleanup()
            raise
        print("cluster up in %.1f s" % (time.time() - cls.started), flush=True)
        cls.data = os.path.join(cls.tmp, "demo.h5")
        # The streams of configs/demo.yaml, fewer rows: the demo's shapes at test size.
        r = mbtest.run(["data", "synth-series", "--out", cls.data, "--rows", "20000", "--streams", "m1:1,m5:5,h1:60"],
                       timeout=300)
        if r.returncode != 0:
            cls.tearDownClass()
            raise RuntimeError("could not make the demo data:\n%r" % r)

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop()
        kill_leftovers(cls.cluster.conf)
        cls._tmp.cleanup()
        print("slurm test total %.1f s" % (time.time() - cls.started), flush=True)

    def submit(self, name, steps, extra=(), sbatch=(), env=None):
        run_dir = os.path.join(self.tmp, name)
        log = os.path.join(self.tmp, name + ".out")
        args = ["--job-name=" + name, "--output=" + log] + list(sbatch) + [
            TEMPLATE, DEMO, "data.path=" + self.data, "run.dir=" + run_dir, "train.max_steps=%d" % steps,
            "run.log_every=1"] + list(extra)
        job = self.cluster.sbatch(args, cwd=self.tmp, env=dict(env or {}, MEGABATCH_HOME=mbtest.SOURCE_DIR))
        return job, run_dir, log

    def wait_for_steps(self, run_dir, steps, what, story, timeout=300):
        """Waits until run_dir's metrics.jsonl has `steps` train records; fails with story()."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if os.path.exists(os.path.join(run_dir, "metrics.jsonl")) and len(train_steps(run_dir)) >= steps:
                return
            time.sleep(0.2)
        self.fail("%s made no progress in %d s\n%s" % (what, timeout, story()))

    def assertContinuous(self, run_dir, steps, log):
        got = train_steps(run_dir)
        self.assertEqual(got, list(range(1, steps + 1)),
                         "metrics.jsonl train steps must be 1..%d in order, no gap, no repeat\n%s" % (steps, read(log)[-4000:]))

    def latest_checkpoint(self, run_dir):
        ckpt = os.path.join(run_dir, "checkpoints")
        latest = os.path.join(ckpt, "latest")
        self.assertTrue(os.path.exists(latest), "no checkpoints/latest in %s" % run_dir)
        path = os.path.join(ckpt, read(latest).strip())
        self.assertTrue(os.path.getsize(path) > 0, path)
        return path

    def test_a_job_completes(self):
        start = time.time()
        steps = 30
        job, run_dir, log = self.submit("complete", steps, ["run.checkpoint_every=10", "train.eval_every=10"])
        info = self.cluster.wait_for(job, ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"), timeout=400)
        self.assertEqual(info.get("JobState"), "COMPLETED", "%s\n%s" % (info, read(log)[-4000:]))
        self.assertEqual(info.get("ExitCode"), "0:0", info)
        self.assertEqual(info.get("NumTasks"), "2", info)
        self.assertContinuous(run_dir, steps, log)
        self.assertTrue(self.latest_checkpoint(run_dir).endswith("step-%08d.h5" % steps))
        self.assertIn("srun --mpi=pmix", read(log))
        # Note [Stop lead time]: SLURM exports no lead time; job.sh reads train-cpu.sbatch's line.
        self.assertIn("stop lead 60 s", read(log))
        print("completion path: %.1f s" % (time.time() - start), flush=True)

    def test_b_preempt_requeue_resume(self):
        self.preempt_requeue_resume("preempt", {}, "srun --mpi=pmix")

    def test_e_preempt_requeue_resume_under_mpirun(self):
        """The same with MB_LAUNCHER=mpirun: Open MPI's mpirun inside the allocation."""
        self.preempt_requeue_resume("preempt-mpirun", {"MB_LAUNCHER": "mpirun"}, "job.sh: mpirun -np 2")

    def preempt_requeue_resume(self, name, env, launcher):
        start = time.time()
        steps = 60
        job, run_dir, log = self.submit(name, steps, ["run.checkpoint_every=1000", "train.eval_every=1000"], env=env)
        self.cluster.wait_for(job, "RUNNING", timeout=120)
        # Let the first run make progress, then signal the batch shell as --signal=B:USR1 does.
        self.wait_for_steps(run_dir, 3, "the first run", lambda: read(log)[-4000:])
        self.cluster.scancel("--signal=USR1", "--batch", job)
        requeued = self.cluster.wait_for(job, ("PENDING", "FAILED", "CANCELLED", "COMPLETED"), timeout=300)
        self.assertEqual(requeued.get("JobState"), "PENDING", "%s\n%s" % (requeued, read(log)[-4000:]))
        self.assertEqual(requeued.get("Restarts"), "1", requeued)
        stopped = self.latest_checkpoint(run_dir)
        stopped_step = int(os.path.basename(stopped)[5:13])
        self.assertLess(stopped_step, steps, "the first run must stop early, at a checkpoint")
        self.assertEqual(train_steps(run_dir)[-1], stopped_step,
                         "the checkpoint is written at the step boundary where the run stopped")

        info = self.cluster.wait_for(job, ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"), timeout=400)
        out = read(log)
        self.assertEqual(info.get("JobState"), "COMPLETED", "%s\n%s" % (info, out[-4000:]))
        self.assertEqual(info.get("Restarts"), "1", info)
        self.assertIn("job.sh: SIGUSR1", out)
        self.assertIn("training step exited with 75", out)
        self.assertIn("requeueing job %s" % job, out)
        self.assertIn("run 2 on", out)
        self.assertIn(launcher, out)
        self.assertRegex(out, r"resuming from .*step-%08d\.h5" % stopped_step)
        self.assertContinuous(run_dir, steps, log)
        self.assertTrue(self.latest_checkpoint(run_dir).endswith("step-%08d.h5" % steps))
        print("preempt-requeue-resume path (%s): %.1f s (stopped at step %d of %d)"
              % (launcher, time.time() - start, stopped_step, steps), flush=True)

    def test_c_time_limit_signal_from_slurm(self):
        """No scancel: SLURM itself sends --signal=B:USR1@45 to a job with a 1-minute limit."""
        start = time.time()
        steps = 100000  # more than two runs can do: each run ends by the signal
        job, run_dir, log = self.submit("timelimit", steps, ["run.checkpoint_every=1000000", "train.eval_every=1000000"],
                                        sbatch=["--time=1", "--signal=B:USR1@45"], env={"MB_MAX_RESTARTS": "1"})
        info = self.cluster.wait_for(job, ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"), timeout=400)
        out = read(log)
        # Run 1: signalled, checkpointed, requeued. Run 2: signalled, checkpointed, and, with
        # MB_MAX_RESTARTS=1, not requeued again: the job ends with the trainer's 75.
        self.assertEqual((info.get("JobState"), info.get("ExitCode"), info.get("Restarts")), ("FAILED", "75:0", "1"),
                         "%s\n%s" % (info, out[-4000:]))
        self.assertEqual(out.count("job.sh: SIGUSR1"), 2, out[-4000:])
        self.assertEqual(out.count("training step exited with 75"), 2, out[-4000:])
        self.assertIn("already restarted 1 times (MB_MAX_RESTARTS=1): not requeueing", out)
        got = train_steps(run_dir)
        self.assertEqual(got, list(range(1, len(got) + 1)), "steps continue with no gap and no repeat")
        self.assertTrue(self.latest_checkpoint(run_dir).endswith("step-%08d.h5" % got[-1]))
        print("time-limit signal path: %.1f s (%d steps over 2 runs)" % (time.time() - start, got[-1]), flush=True)

    def test_f_a_failed_step_requeues_within_max_restarts(self):
        """A rank that dies after step 5, as one on a lost node does: the step fails, job.sh
        requeues the job, and the requeued run resumes from step 4's checkpoint. Its rank dies
        again (the fault is in the job's environment), and with MB_MAX_RESTARTS=1 the job ends
        there, with the failure's code."""
        start = time.time()
        job, run_dir, log = self.submit("failure", 40, ["run.checkpoint_every=2", "train.eval_every=1000",
                                                        "dist.timeout_s=3"],
                                        env={"MB_MAX_RESTARTS": "1", "MEGABATCH_FAULT_DIE_STEP": "1:5"})
        info = self.cluster.wait_for(job, ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"), timeout=400)
        out = read(log)
        self.assertEqual((info.get("JobState"), info.get("Restarts")), ("FAILED", "1"), "%s\n%s" % (info, out[-4000:]))
        code = re.search(r"training step exited with (\d+)", out)
        self.assertNotIn(int(code.group(1)), (0, 2, 3, 4, 75), out[-4000:])
        self.assertEqual(info.get("ExitCode"), "%s:0" % code.group(1), info)
        self.assertIn("the training step failed (exit %s: a lost node, a cut link or a dead rank); requeueing job %s "
                      "(restart 1 of 1)" % (code.group(1), job), out)
        self.assertIn("already restarted 1 times (MB_MAX_RESTARTS=1): not requeueing", out)
        self.assertRegex(out, r"resuming from .*step-00000004\.h5")
        records = [r for r in mbtest.read_metrics(run_dir) if r.get("event") == "restart"]
        self.assertEqual([(r["restart"], r["max_restarts"], r["reason"], r["resume_step"]) for r in records],
                         [(1, 1, "requeued by SLURM", 4)], records)
        print("failure-requeue path: %.1f s" % (time.time() - start), flush=True)

    def test_d_sweep_array_and_dependent_summary(self):
        start = time.time()
        env = dict(self.cluster.env, MB_SWEEP="optim.lr=1e-3;optim.lr=3e-3 model.hidden=16", MB_DEVICE="cpu",
                   MEGABATCH_HOME=mbtest.SOURCE_DIR)
        cmd = [os.path.join(mbtest.SOURCE_DIR, "slurm", "sweep.sh"), "--parallel", "1", "--dir", "sweep",
               "--gpus-per-node=0", "--cpus-per-task=1", "--ntasks-per-node=2", DEMO, "data.path=" + self.data,
               "train.max_steps=10", "train.eval_every=5", "run.log_every=5"]
        r = subprocess.run(cmd, cwd=self.tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           universal_newlines=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout)
        array, summary = re.search(r"array job (\d+) \(2 tasks: 0-1%1\)", r.stdout), re.search(r"summary job (\d+)", r.stdout)
        self.assertTrue(array and summary, r.stdout)
        info = self.cluster.wait_for(summary.group(1), ("COMPLETED", "FAILED", "CANCELLED"), timeout=300)
        self.assertEqual(info.get("JobState"), "COMPLETED", info)
        self.assertEqual(info.get("Dependency"), "(null)", info)  # satisfied, after the array
        for task in ("0", "1"):
            t = self.cluster.job("%s_%s" % (array.group(1), task))
            self.assertEqual((t.get("JobState"), t.get("ExitCode")), ("COMPLETED", "0:0"), t)
        table = read(os.path.join(self.tmp, "slurm-megabatch-sweep-summary-%s.out" % summary.group(1)))
        for name in ("optim.lr=1e-3", "optim.lr=3e-3_model.hidden=16"):
            self.assertEqual(train_steps(os.path.join(self.tmp, "sweep", name)), list(range(5, 11, 5)))
            self.assertRegex(table, r"%s\s+\d\.\d+\s+(5|10)\s+10\s" % re.escape(name))
        print("sweep (array of 2 + afterany summary): %.1f s" % (time.time() - start), flush=True)

    def test_g_walk_folds_as_an_array_with_a_preempted_task(self):
        """slurm/walk.sh: a task per fold, one at a time; the first is preempted mid-fold,
        requeued and resumed; the dependent walk job stitches and reports. predictions.h5 equals,
        bit for bit, the same walk run as one process (1 rank, 1 thread, as each task)."""
        start = time.time()
        config = mbtest.config_path("demo-walk.yaml")
        keys = ["data.path=" + self.data, "walk.every=day", "walk.from=2024-01-11", "walk.to=2024-01-14",
                "walk.warm_start=false", "train.max_steps=200", "train.eval_every=100",
                "run.checkpoint_every=1000", "run.log_every=1"]
        env = dict(self.cluster.env, MB_DEVICE="cpu", MEGABATCH_HOME=mbtest.SOURCE_DIR)
        cmd = [os.path.join(mbtest.SOURCE_DIR, "slurm", "walk.sh"), "--parallel", "1",
               "--gpus-per-node=0", "--cpus-per-task=1", "--ntasks-per-node=1", config,
               "run.dir=walk-array"] + keys
        r = subprocess.run(cmd, cwd=self.tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           universal_newlines=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout)
        array = re.search(r"array job (\d+) \(3 folds: 0-2%1\): 2024-01-11 2024-01-12 2024-01-13", r.stdout)
        walk = re.search(r"walk job (\d+) runs after it", r.stdout)
        self.assertTrue(array and walk, r.stdout)
        first = "%s_0" % array.group(1)
        fold = os.path.join(self.tmp, "walk-array", "folds", "2024-01-11")
        self.wait_for_steps(fold, 3, "the first fold", self.cluster.logs)
        # As --signal=B:USR1 does. scancel may report a failure, or retry, while an array task
        # changes state; what counts is that the task was requeued and its fold resumed.
        signal = self.cluster._run(["scancel", "-v", "--signal=USR1", "--batch", first], timeout=60)
        info = self.cluster.wait_for(walk.group(1), ("COMPLETED", "FAILED", "CANCELLED"), timeout=600)
        walk_log = read(os.path.join(self.tmp, "slurm-megabatch-walk-%s.out" % walk.group(1)))
        self.assertEqual(info.get("JobState"), "COMPLETED", "%s\n%s" % (info, walk_log[-4000:]))
        self.assertNotIn("training on samples", walk_log, "every fold was done by its task")
        self.assertIn("every out-of-sample prediction together", walk_log)
        task = self.cluster.job(first)
        task_log = read(os.path.join(self.tmp, "slurm-megabatch-walk-fold-%s.out" % first))
        story = "\n".join(line for line in task_log.splitlines() if "job.sh" in line or "stop" in line)
        self.assertEqual(task.get("JobState"), "COMPLETED", "%s\n%s" % (task, story))
        self.assertGreaterEqual(int(task.get("Restarts", "0")), 1, "%s\n%s\nscancel: %s%s" % (
            task, story, signal.stdout, signal.stderr))
        self.assertIn("requeueing job", task_log)
        self.assertRegex(task_log, r"resuming from .*step-\d{8}\.h5")
        self.assertEqual(train_steps(fold), list(range(1, 201)), "the preempted fold's steps continue")
        for i in (1, 2):
            t = self.cluster.job("%s_%d" % (array.group(1), i))
            self.assertEqual((t.get("JobState"), t.get("ExitCode")), ("COMPLETED", "0:0"), t)
        alone = os.path.join(self.tmp, "walk-alone")
        r = mbtest.run(["walk", "--config", config, "run.dir=" + alone, "train.device=cpu",
                        "train.threads=1"] + keys, timeout=300)
        self.assertEqual(r.returncode, 0, repr(r))
        with h5py.File(os.path.join(self.tmp, "walk-array", "predictions.h5"), "r") as a, \
                h5py.File(os.path.join(alone, "predictions.h5"), "r") as b:
            self.assertEqual(sorted(a), sorted(b))
            for key in a:
                np.testing.assert_array_equal(a[key][()], b[key][()], err_msg=key)
        print("walk as a job array (3 folds, one preempted) + dependent walk: %.1f s"
              % (time.time() - start), flush=True)


if __name__ == "__main__":
    unittest.main(verbosity=2)
