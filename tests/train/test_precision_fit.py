"""Precision that fits the hardware (Note [CPU precision] in src/train/precision/CpuPrecision.h,
Note [CPU auto precision] in src/train/precision/CpuAutoPrecision.h, Note [Precision of a new
run] in src/train/precision/Precision.h).

MEGABATCH_FAULT_CPU_FLAGS stands in for /proc/cpuinfo's flags, so a CPU with or without bf16
units is tested on any machine, and MEGABATCH_FAULT_CPU_BF16_RATIO sets what bf16's time
measures against fp32's, so what `precision: auto` chooses does not depend on the machine. Evaluation batches are slowed with MEGABATCH_FAULT_EVAL_BATCH_MS and the
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
UNITS = {"MEGABATCH_FAULT_CPU_FLAGS": "fpu sse2 avx avx2 fma avx512f avx512_bf16", "OMP_NUM_THREADS": "1"}
PAYS = dict(UNITS, MEGABATCH_FAULT_CPU_BF16_RATIO="0.5")


def trainer_record(run):
    """The precision record of RUN/checkpoints/latest: (trained_precision, auto_precision_cpu,
    auto_precision_trial_ratio)."""
    import h5py
    with open(os.path.join(run, "checkpoints", "latest")) as f:
        name = f.read().strip()
    with h5py.File(os.path.join(run, "checkpoints", name), "r") as f:
        a = f["trainer"].attrs
        return int(a["trained_precision"]), int(a["auto_precision_cpu"]), float(a["auto_precision_trial_ratio"])
# The same checkpoint's val loss, bf16 autocast against fp32: measured 3.8e-4 (relative) on this
# model (docs/operations.md, "Precision on the CPU"); bf16 keeps 8 bits of mantissa (~4e-3 per
# value), so the bound is one bf16 rounding.
BF16_RTOL = 5e-3


class PrecisionFitTest(mbtest.SeriesTrainingTestCase):

    def config(self, run_dir, precision, steps=3):
        return self.write("config-%d.yaml" % len(os.listdir(self.tmp)),
                          CONFIG.format(run_dir=run_dir, data=self.data, steps=steps, precision=precision))

    def train(self, precision, env=None, steps=3, run=None):
        run = run or self.path("run-%s-%d" % (precision, len(os.listdir(self.tmp))))
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
        # auto is fp32 on such a CPU, and nothing to warn about.
        _, r = self.train("auto")
        self.assertIn("train.precision = auto: fp32, this CPU has no bf16 units (no avx512_bf16 or amx_bf16 "
                      "among its flags)", r.output)
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
        plain, r = self.evaluate(run, env=NO_BF16)
        self.assertIn("eval precision: fp32 on the CPU, although the checkpoint trained in bf16, because this "
                      "CPU has no bf16 units", r.output)
        self.assertIn("--precision bf16 runs it as trained", r.output)
        asked, r = self.evaluate(run, "--precision", "bf16", env=NO_BF16)
        self.assertIn("eval precision: --precision bf16: bf16", r.output)
        self.assertEqual(plain["val_samples"], asked["val_samples"])
        difference = abs(plain["val_loss"] - asked["val_loss"]) / abs(plain["val_loss"])
        print("val_loss fp32 %.6g, bf16 %.6g: relative difference %.2e" % (plain["val_loss"], asked["val_loss"],
                                                                          difference))
        self.assertLess(difference, BF16_RTOL)
        self.assertNotEqual(plain["val_loss"], asked["val_loss"], "--precision bf16 really ran in bf16")
        r = mbtest.run(["eval", "--checkpoint", run, "--precision", "bf17"])
        self.assertExit(r, 2, "--precision bf17: expected fp32, bf16, fp16 or auto")

    def test_auto_on_the_cpu_chooses_bf16_where_it_pays_and_keeps_it_on_resume(self):
        run, r = self.train("auto", env=PAYS)
        self.assertIn("train.precision = auto: bf16 (CPU autocast, fp32 master weights): this CPU has bf16 "
                      "units (avx512_bf16), and a trial step of 32 samples took 0.50x of fp32's time", r.output)
        self.assertIn("ranks, precision bf16", r.output)
        code, cpu, ratio = trainer_record(run)
        self.assertEqual((code, ratio), (2, 0.5))
        self.assertNotEqual(cpu, 0)
        # The trial left no trace (dropout's RNG, gradients, the model): the same losses, bit for
        # bit, as a run that asked for bf16.
        plain, _ = self.train("bf16", env=PAYS)
        self.assertEqual(mbtest.train_losses(run), mbtest.train_losses(plain))
        # On the same CPU the resume keeps the choice without measuring (no ratio is faked now).
        _, r = self.train("auto", env=UNITS, steps=6, run=run)
        self.assertIn("train.precision = auto: bf16, as this run chose on this CPU at its start (trial step "
                      "in bf16: 0.50x of fp32's time)", r.output)
        self.assertNotIn("a trial step of", r.output)
        self.assertIn("precision bf16", r.output)
        self.assertEqual(trainer_record(run), (code, cpu, ratio))
        # On another CPU (no bf16 units) it measures again and says what changed.
        _, r = self.train("auto", env=NO_BF16, steps=9, run=run)
        self.assertIn("train.precision = auto: fp32, this CPU has no bf16 units", r.output)
        self.assertIn("the checkpoint's run had chosen bf16 on another CPU", r.output)
        self.assertIn("precision fp32", r.output)
        self.assertEqual(trainer_record(run)[0], 1)

    def test_auto_keeps_fp32_where_the_trial_step_is_not_faster(self):
        # A slow probe: no trial step is needed.
        _, r = self.train("auto", env=dict(UNITS, MEGABATCH_FAULT_CPU_BF16_RATIO="1.3"))
        self.assertIn("train.precision = auto: fp32: this CPU has bf16 units (avx512_bf16), but the probe's "
                      "product at the model's width took 1.30x of fp32's time in bf16", r.output)
        self.assertNotIn("a trial step of", r.output)
        # A fast probe, a trial step just inside the bound: bf16.
        run, r = self.train("auto", env=dict(UNITS, MEGABATCH_FAULT_CPU_BF16_RATIO="0.5:0.8"))
        self.assertIn("a trial step of 32 samples took 0.80x of fp32's time in bf16", r.output)
        self.assertIn("ranks, precision bf16", r.output)
        self.assertEqual(trainer_record(run)[0], 2)
        # A fast probe, a trial step just past it (the demo LSTM's case): fp32, and the trial left
        # no trace: the same losses, bit for bit, as a run that asked for fp32.
        plain, _ = self.train("fp32", env=UNITS)
        auto, r = self.train("auto", env=dict(UNITS, MEGABATCH_FAULT_CPU_BF16_RATIO="0.5:0.84"))
        self.assertRegex(r.output, r"but a trial step of 32 samples took 0\.84x of fp32's time in bf16 .*bf16 must "
                                   r"take at most 0\.83x")
        self.assertIn("ranks, precision fp32", r.output)
        self.assertEqual(trainer_record(auto)[0], 1)
        self.assertEqual(mbtest.train_losses(auto), mbtest.train_losses(plain), "the trial left no trace")

    def test_eval_and_predict_of_an_auto_bf16_checkpoint_run_in_bf16_where_it_pays(self):
        run, _ = self.train("auto", env=PAYS, steps=20)
        as_trained, r = self.evaluate(run, env=UNITS)
        self.assertIn("eval precision: bf16, as the checkpoint trained: train.precision = auto chose it on this "
                      "CPU (trial step in bf16: 0.50x of fp32's time); --precision fp32 for fp32", r.output)
        fp32, r = self.evaluate(run, "--precision", "fp32", env=UNITS)
        self.assertIn("eval precision: --precision fp32: fp32", r.output)
        difference = abs(fp32["val_loss"] - as_trained["val_loss"]) / abs(fp32["val_loss"])
        print("val_loss fp32 %.6g, bf16 %.6g: relative difference %.2e" % (fp32["val_loss"], as_trained["val_loss"],
                                                                          difference))
        self.assertLess(difference, BF16_RTOL)
        self.assertNotEqual(fp32["val_loss"], as_trained["val_loss"], "the default really ran in bf16")
        _, r = self.evaluate(run, env=NO_BF16)
        self.assertIn("eval precision: fp32 on the CPU, although the checkpoint trained in bf16, because this "
                      "CPU has no bf16 units", r.output)
        r = mbtest.run(["predict", "--checkpoint", run, "--data", self.data, "--out", self.path("p.h5")],
                       env=UNITS, timeout=300)
        self.assertEqual(r.returncode, 0, repr(r))
        self.assertIn("predict precision: bf16, as the checkpoint trained", r.output)

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
