"""A slow rank is not a hung one (issue 38; Note [Watchdog heartbeat] in src/dist/Watchdog.cpp).

MEGABATCH_FAULT_SLOW_STEP=RANK:MS[:spin] makes every training micro-batch of a rank MS longer,
asleep or computing. The watchdog must wait for a slow step as long as some rank makes progress
(it still ends a job in which no rank does: tests/reliability/test_faults.py, fault 6), and a
step longer than a minute says that it is still running.
"""
import os
import re
import sys
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import mbtest  # noqa: E402

CONFIG = """
run: {{dir: {run_dir}, log_every: 1, progress: lines}}
data:
  path: {data}
  layout: series
  streams:
    - {{name: m1, window: 16}}
  canonical_shards: 4
  split: {{train_fraction: 0.8, val_fraction: 0.1, test_fraction: 0.1}}
model: {{kind: lstm, hidden: 8, layers: 1, head_hidden: 8, dropout: 0.0}}
train:
  global_batch: 16
  micro_batch: {micro_batch}
  max_steps: 2
  eval_every: 0
  eval_batches: 1
  precision: fp32
  threads: 1
optim: {{name: adamw, lr: 0.01}}
dist: {{timeout_s: {timeout}}}
"""
TIMEOUT_S = 3


class SlowStepTest(mbtest.SeriesTrainingTestCase):

    def config(self, micro_batch=16, timeout=TIMEOUT_S):
        run = self.path("run-%d" % len(os.listdir(self.tmp)))
        path = self.write("config-%d.yaml" % len(os.listdir(self.tmp)),
                          CONFIG.format(run_dir=run, data=self.data, micro_batch=micro_batch, timeout=timeout))
        return path, run

    def train(self, np_, slow, micro_batch=16, extra_env=None):
        config, run = self.config(micro_batch)
        env = {"MEGABATCH_FAULT_SLOW_STEP": slow, "OMP_NUM_THREADS": "1"}
        env.update(extra_env or {})
        args = ["train", "--config", config]
        r = mbtest.mpirun(np_, args, env=env, timeout=300) if np_ > 1 else mbtest.run(args, env=env, timeout=300)
        self.assertEqual(r.returncode, 0, repr(r))
        self.assertNotIn("watchdog: rank", r.output.replace("watchdog: rank 0 has waited", ""), r.output[-3000:])
        self.assertIn("step 2/2", r.output)
        return r

    def test_a_single_rank_step_longer_than_the_timeout_finishes(self):
        # One micro-batch of 4 s per step: no progress mark for longer than dist.timeout_s = 3.
        start = time.monotonic()
        self.train(1, "0:4000")
        self.assertGreater(time.monotonic() - start, 2 * 4.0)

    def test_two_ranks_wait_for_a_slow_peer_that_makes_progress(self):
        # Rank 1's step is 4 micro-batches of 1.5 s (6 s > dist.timeout_s = 3), asleep: its
        # micro-batches are its progress. Rank 0 waits in the gradient all-reduce and says why.
        r = self.train(2, "1:1500", micro_batch=2)
        notes = re.findall(r"\[r0/2\] \[dist\] info: watchdog: rank 0 has waited [0-9.]+ s for (.*?) \(longer than "
                           r"dist\.timeout_s = 3\), but the job is making progress: (.*?): still waiting", r.output)
        self.assertTrue(notes, r.output[-3000:])
        self.assertTrue(any("rank 1 (is in 'training step" in busy for _, busy in notes), notes)

    def test_two_ranks_wait_for_a_peer_that_computes_one_long_micro_batch(self):
        # One micro-batch of 5 s of compute on rank 1, no mark inside it: its CPU time counts.
        self.train(2, "1:5000:spin")

    def test_a_step_longer_than_a_minute_says_it_is_still_running(self):
        # 4 micro-batches of 0.5 s on a 60x clock: the step lasts 2 minutes of that clock.
        r = self.train(1, "0:500", micro_batch=4, extra_env={"MEGABATCH_PROGRESS_CLOCK_SCALE": "60"})
        still = re.findall(r"training step 1 is still running after 1m00s: \d+% \((\d)/4 micro-batches\) \|", r.output)
        self.assertEqual(len(still), 1, r.output[-3000:])
        self.assertIn(int(still[0]), (1, 2, 3))
        self.assertRegex(r.output, r"training step 1: done, 4 micro-batches in ")


if __name__ == "__main__":
    unittest.main()
