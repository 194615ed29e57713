"""A stop request is honoured within seconds, whatever runs (Note [Stopping within seconds] in
src/train/Signals.cpp): an evaluation is abandoned between batches and left to the resumed run; a
long step is left between micro-batches and dropped, and the resumed run redoes it, reaching the
losses of a run that was never stopped. The test hooks MEGABATCH_FAULT_EVAL_BATCH_MS and
MEGABATCH_FAULT_SLOW_STEP (src/dist/FaultInjection.h) make the evaluation and the step long.
"""
import os
import re
import signal
import subprocess
import sys
import time
import unittest

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import mbtest  # noqa: E402
from mbtest import read_metrics, train_losses  # noqa: E402

CONFIG = """
run:
  dir: {run_dir}
  log_every: 1
  checkpoint_every: 0
data:
  path: {data}
  layout: series
  streams:
    - {{name: m1, window: 16}}
    - {{name: m5, window: 8}}
  canonical_shards: 10
  split: {{train_fraction: 0.45, val_fraction: 0.5, test_fraction: 0.05}}
model:
  kind: lstm
  hidden: 16
  layers: 1
  head_hidden: 16
  dropout: 0.0
train:
  global_batch: 32
  eval_every: 0
  precision: fp32
  threads: 1
optim:
  name: adamw
  lr: 0.01
"""


def latest_trainer_attrs(run_dir):
    ckpt = os.path.join(run_dir, "checkpoints")
    with open(os.path.join(ckpt, "latest")) as f:
        with h5py.File(os.path.join(ckpt, f.read().strip()), "r") as h5:
            return dict(h5["trainer"].attrs)


class StoppingTest(mbtest.SeriesTrainingTestCase):
    # A val split of 10,000 samples: 20 batches of 256 on each of 2 ranks.
    SERIES_ARGS = ["--rows", "20000", "--features", "3", "--streams", "m1:1,m5:5", "--seed", "7"]

    def config(self, name):
        run_dir = self.path(name)
        return self.write(name + ".yaml", CONFIG.format(run_dir=run_dir, data=self.data)), run_dir

    def start(self, config, overrides, env):
        cmd = [mbtest.MPIEXEC, "-np", "2", "--oversubscribe", mbtest.BIN] + \
            mbtest.with_device(["train", "--config", config] + overrides, 2)
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                                env=dict(os.environ, **env))

    def wait_for_step(self, proc, run_dir, step, timeout=120):
        deadline = time.time() + timeout
        metrics = os.path.join(run_dir, "metrics.jsonl")
        while time.time() < deadline and proc.poll() is None:
            if os.path.exists(metrics) and step in train_losses(run_dir):
                return
            time.sleep(0.1)
        proc.kill()
        self.fail("step %d was not logged within %d s:\n%s" % (step, timeout, proc.communicate()[0][-3000:]))

    def stop_and_time(self, proc, pid):
        """Sends SIGUSR1 to `pid`; the job's output and seconds from the signal to its exit."""
        sent = time.monotonic()
        os.kill(pid, signal.SIGUSR1)
        out, _ = proc.communicate(timeout=120)
        seconds = time.monotonic() - sent
        print("%s: exit %d, %.2f s after the signal" % (self.id().split(".")[-1], proc.returncode, seconds), flush=True)
        return out, seconds

    def test_a_stop_during_an_evaluation_ends_it_within_seconds(self):
        """SIGUSR1 to one rank only: the other hears of it through the heartbeats."""
        config, run_dir = self.config("eval")
        overrides = ["train.max_steps=20", "train.eval_every=10"]
        # 20 batches of 3 s: an evaluation of at least 60 s.
        proc = self.start(config, overrides, {"MEGABATCH_FAULT_EVAL_BATCH_MS": "3000"})
        self.wait_for_step(proc, run_dir, 10)
        time.sleep(4)  # into the evaluation
        ranks = subprocess.run(["pgrep", "-f", "megabatch train --config " + config], stdout=subprocess.PIPE,
                               universal_newlines=True).stdout.split()
        ranks = [int(p) for p in ranks if int(p) != proc.pid]
        self.assertEqual(len(ranks), 2, ranks)
        out, seconds = self.stop_and_time(proc, ranks[-1])
        self.assertEqual(proc.returncode, 75, out[-3000:])
        self.assertLess(seconds, 10, "the job must end within 10 s of the signal:\n" + out[-3000:])
        self.assertIn("the evaluation of step 10 was left after", out)
        attrs = latest_trainer_attrs(run_dir)
        self.assertEqual((attrs["step"], attrs["eval_pending_step"]), (10, 10), attrs)
        self.assertEqual([r for r in read_metrics(run_dir) if r["event"] == "eval"], [],
                         "an abandoned evaluation records nothing")
        self.assertFalse(os.path.exists(os.path.join(run_dir, "checkpoints", "best.h5")))

        r = mbtest.mpirun(2, ["train", "--config", config] + overrides, timeout=300)
        self.assertEqual(r.returncode, 0, repr(r))
        self.assertIn("step 10's checkpoint was written before its evaluation", r.output)
        evals = [r["step"] for r in read_metrics(run_dir) if r["event"] == "eval"]
        self.assertEqual(evals, [10, 20], "the resumed run evaluates step 10 first")
        self.assertEqual(sorted(train_losses(run_dir)), list(range(1, 21)))

    def test_a_stop_in_a_long_step_drops_it_and_the_resumed_run_redoes_it(self):
        """40 micro-batches of 0.5 s a step: SIGUSR1 to mpirun in step 2."""
        overrides = ["train.max_steps=3", "train.global_batch=80", "train.micro_batch=1"]
        config_ref, run_ref = self.config("reference")
        r = mbtest.mpirun(2, ["train", "--config", config_ref] + overrides, timeout=300)
        self.assertEqual(r.returncode, 0, repr(r))

        config, run_dir = self.config("stopped")
        proc = self.start(config, overrides, {"MEGABATCH_FAULT_SLOW_STEP": "*:500"})
        self.wait_for_step(proc, run_dir, 1)
        time.sleep(5)  # 10 of step 2's 40 micro-batches
        out, seconds = self.stop_and_time(proc, proc.pid)
        self.assertEqual(proc.returncode, 75, out[-3000:])
        self.assertLess(seconds, 3, "the job must end within 3 s of the signal:\n" + out[-3000:])
        self.assertRegex(out, r"step 2 was left after \d+ of its 40 micro-batches")
        self.assertEqual(latest_trainer_attrs(run_dir)["step"], 1, "the checkpoint holds the state before step 2")
        self.assertEqual(sorted(train_losses(run_dir)), [1])

        r = mbtest.mpirun(2, ["train", "--config", config] + overrides, timeout=300)
        self.assertEqual(r.returncode, 0, repr(r))
        self.assertEqual([r["step"] for r in read_metrics(run_dir) if r["event"] == "train"], [1, 2, 3])
        losses, ref = train_losses(run_dir), train_losses(run_ref)
        np.testing.assert_allclose([losses[s] for s in (1, 2, 3)], [ref[s] for s in (1, 2, 3)],
                                   rtol=mbtest.RUN_RTOL, err_msg="stopped and resumed vs never stopped")

    def test_a_lead_time_shorter_than_a_stop_is_warned_about(self):
        """Note [Stop lead time]: after the first checkpoint, and at the start of a resumed run."""
        config, run_dir = self.config("lead")
        overrides = ["train.max_steps=2", "run.checkpoint_every=2", "train.micro_batch=16"]
        slow = {"MEGABATCH_FAULT_SLOW_STEP": "*:1000", "MEGABATCH_STOP_LEAD_S": "5"}
        r = mbtest.run(["train", "--config", config] + overrides, env=slow, timeout=300)
        self.assertEqual(r.returncode, 0, repr(r))
        warning = r"the stop lead time is 5 s .* but a stop here needs about (\d+) s: a micro-batch takes 1\.\d s"
        needed = int(re.search(warning, r.output).group(1))
        self.assertGreaterEqual(needed, 12, "twice (1 s + the write) plus 10 s")
        self.assertEqual(r.output.count("the stop lead time is"), 1, "once")
        resumed = mbtest.run(["train", "--config", config, "train.max_steps=3"] + overrides[1:],
                             env={"MEGABATCH_STOP_LEAD_S": "5"}, timeout=300)
        self.assertEqual(resumed.returncode, 0, repr(resumed))
        before_training = resumed.output.split("training 3 steps")[0]
        self.assertRegex(before_training, warning, "a requeued run warns at its start, from the checkpoint")
        enough = mbtest.run(["train", "--config", config, "train.max_steps=4"] + overrides[1:],
                            env={"MEGABATCH_STOP_LEAD_S": "300"}, timeout=300)
        self.assertNotIn("the stop lead time is", enough.output)


if __name__ == "__main__":
    unittest.main()
