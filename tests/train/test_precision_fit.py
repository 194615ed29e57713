"""Precision that fits the hardware (issue 38; Note [CPU precision] in src/train/precision/CpuPrecision.h,
Note [Precision of a new run] in src/train/precision/Precision.h).

MEGABATCH_FAULT_CPU_FLAGS stands in for /proc/cpuinfo's flags, so a CPU without bf16 units is
tested on any machine. Evaluation batches are slowed with MEGABATCH_FAULT_EVAL_BATCH_MS and the
progress clock is scaled (MEGABATCH_PROGRESS_CLOCK_SCALE) as in test_progress.py.
"""
import json
import os
import re
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import mbtest  # noqa: E402

CONFIG = """
run: {{dir: {run_dir}, log_every: 1}}
data:
  path: {data}
  layout: series
  streams:
    - {{name: m1, window: 16}}
  canonical_shards: 2
  split: {{train_fraction: 0.8, val_fraction: 0.1, test_fraction: 0.1}}
model: {{kind: lstm, hidden: 16, layers: 1, head_hidden: 8, dropout: 0.1}}
train:
  global_batch: 32
  max_steps: {steps}
  eval_every: 0
  precision: {precision}
  threads: 1
optim: {{name: adamw, lr: 0.01}}
"""
NO_BF16 = {"MEGABATCH_FAULT_CPU_FLAGS": "fpu sse2 avx avx2 fma", "OMP_NUM_THREADS": "1"}
# The same checkpoint's val loss, bf16 autocast against fp32: measured 3.8e-4 (relative) on this
# model (docs/operations.md, "Precision on the CPU"); bf16 keeps 8 bits of mantissa (~4e-3 per
# value), so the bound is one bf16 rounding.
BF16_RTOL = 5e-3


class PrecisionFitTest(mbtest.SeriesTrainingTestCase):

    def config(self, run_dir, precision, steps=3):
        return self.write("config-%d.yaml" % len(os.listdir(self.tmp)),
                          CONFIG.format(run_dir=run_dir, data=self.data, steps=steps, precision=precision))

    def train(self, precision, env=None, steps=3):
        run = self.path("run-%s-%d" % (precision, len(os.listdir(self.tmp))))
        r = mbtest.run(["train", "--config", self.config(run, precision, steps)], env=env or NO_BF16,
                       timeout=300)
        self.assertEqual(r.returncode, 0, repr(r))
        return run, r

    def test_bf16_on_a_cpu_without_bf16_units_warns_once_naming_fp32_and_auto(self):
        run, r = self.train("bf16")
        warnings = re.findall(r"warning: (train\.precision = bf16: matrix products run about [0-9.]+x slower than "
                              r"in fp32 on this CPU .*)$", r.output, re.MULTILINE)
        self.assertEqual(len(warnings), 1, r.output[-3000:])
        self.assertIn("this CPU has no bf16 units (no avx512_bf16 or amx_bf16 among its flags)", warnings[0])
        self.assertIn("Use train.precision=fp32 here, or train.precision=auto", warnings[0])
        with open(os.path.join(run, "train.log")) as f:
            self.assertIn(warnings[0], f.read(), "the warning is in the run's train.log too")
        # auto keeps its meaning on the CPU: fp32, and nothing to warn about.
        _, r = self.train("auto")
        self.assertIn("train.precision = auto: fp32 on the CPU", r.output)
        self.assertNotIn("slower than in fp32", r.output)
        # fp32 asks nothing of the CPU.
        _, r = self.train("fp32")
        self.assertNotIn("slower than in fp32", r.output)

    def evaluate(self, run, *extra, env=None):
        out = self.path("eval-%d.json" % len(os.listdir(self.tmp)))
        r = mbtest.run(["eval", "--checkpoint", run, "--out", out] + list(extra), env=env, timeout=300)
        self.assertEqual(r.returncode, 0, repr(r))
        with open(out) as f:
            return json.load(f), r

    def test_eval_of_a_bf16_checkpoint_runs_in_fp32_on_the_cpu_and_matches_bf16(self):
        run, _ = self.train("bf16", steps=20)
        plain, r = self.evaluate(run)
        self.assertIn("eval precision: fp32 on the CPU, although the checkpoint trained with "
                      "train.precision = bf16", r.output)
        self.assertIn("--precision bf16 runs it as trained", r.output)
        asked, r = self.evaluate(run, "--precision", "bf16")
        self.assertIn("eval precision: --precision bf16: bf16", r.output)
        self.assertEqual(plain["val_samples"], asked["val_samples"])
        difference = abs(plain["val_loss"] - asked["val_loss"]) / abs(plain["val_loss"])
        print("val_loss fp32 %.6g, bf16 %.6g: relative difference %.2e" % (plain["val_loss"], asked["val_loss"],
                                                                          difference))
        self.assertLess(difference, BF16_RTOL)
        self.assertNotEqual(plain["val_loss"], asked["val_loss"], "--precision bf16 really ran in bf16")
        r = mbtest.run(["eval", "--checkpoint", run, "--precision", "bf17"])
        self.assertExit(r, 2, "--precision bf17: expected fp32, bf16, fp16 or auto")

    def test_eval_start_line_comes_before_the_first_batch(self):
        run, _ = self.train("fp32")
        # Each batch takes 1.5 s of real time; on a 20x clock the 10 s notice comes after 0.5 s.
        env = {"MEGABATCH_FAULT_EVAL_BATCH_MS": "1500", "MEGABATCH_PROGRESS_CLOCK_SCALE": "20",
               "OMP_NUM_THREADS": "1"}
        _, r = self.evaluate(run, "--batch", "8", "--max-samples", "16", env=env)
        messages = [line.split("] ", 3)[-1] for line in r.stderr.splitlines() if "[train]" in line]
        start = [i for i, m in enumerate(messages) if re.match(r"info: eval val of \S+: \d+ samples, batches of 8$", m)]
        # The ticker looks every 0.25 s of real time, 5 s of this clock: the notice says 10-15s.
        notice = [i for i, m in enumerate(messages)
                  if re.match(r"info: eval val: the first batch is still running after 1[0-5]s$", m)]
        done = [i for i, m in enumerate(messages) if m.startswith("info: eval val: done, 16 samples")]
        self.assertEqual((len(start), len(notice), len(done)), (1, 1, 1), messages)
        self.assertLess(start[0], notice[0])
        self.assertLess(notice[0], done[0])


if __name__ == "__main__":
    unittest.main()
