"""Training kind: gat on the panel layout end to end, under mpirun: elastic resume 2 -> 1 sees
the same batches and losses step for step as the uninterrupted run, each date's graph is built
once and cached (or once per epoch), the step-time split is recorded, and `megabatch eval`
prints the daily IC. The data is a small `megabatch data synth-panel` file."""
import os
import re
import sys
import tempfile
import unittest

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import mbtest  # noqa: E402
from mbtest import checkpoint_params, read_metrics, train_losses  # noqa: E402

CONFIG = """
run:
  dir: {run_dir}
  log_every: 1
  keep_last: 10
data:
  path: {data}
  layout: panel
  canonical_shards: 4
  panel: {{window: 8, normalize: zscore, normalize_target: zscore}}
model:
  kind: gat
  hidden: 8
  layers: 1
  heads: 2
  head_hidden: 8
  dropout: 0.0
  graph: {{layers: 1, k: 4, lookback: 20, min_periods: 10}}
train:
  global_batch: 8
  max_steps: 40
  precision: fp32
  threads: 1
optim:
  lr: 0.005
  warmup_steps: 4
"""
DATES, INSTRUMENTS = 300, 30
# Dates with a complete history: [lookback - 1, DATES); train is the first 80%.
TRAIN_DATES = int((DATES - 19) * 0.8)


class PanelTrainingTest(mbtest.TempDirTestCase):
    @classmethod
    def setUpClass(cls):
        cls._shared = tempfile.TemporaryDirectory(prefix="mbpanel-")
        cls.data = os.path.join(cls._shared.name, "panel.h5")
        r = mbtest.run(["data", "synth-panel", "--out", cls.data, "--dates", str(DATES),
                        "--instruments", str(INSTRUMENTS), "--features", "4", "--sectors", "5",
                        "--seed", "5"])
        if r.returncode != 0:
            raise RuntimeError("could not make test data:\n%r" % r)

    @classmethod
    def tearDownClass(cls):
        cls._shared.cleanup()

    def config(self, run_dir):
        return self.write("config-%d.yaml" % len(os.listdir(self.tmp)),
                          CONFIG.format(run_dir=run_dir, data=self.data))

    def train(self, np_, config, overrides=(), env=None, expect=0):
        args = ["train", "--config", config] + list(overrides)
        r = (mbtest.run(args, env=env, timeout=600) if np_ == 1
             else mbtest.mpirun(np_, args, env=env, timeout=600))
        self.assertEqual(r.returncode, expect, repr(r))
        return r

    def test_elastic_resume_2_to_1_matches_the_uninterrupted_run(self):
        run_a = self.path("A")
        config = self.config(run_a)
        self.train(2, config)
        losses_a = train_losses(run_a)
        self.assertEqual(sorted(losses_a), list(range(1, 41)))
        params_a = checkpoint_params(os.path.join(run_a, "checkpoints", "step-00000040.h5"))

        run_b = self.path("B")
        r = self.train(2, config, ["run.dir=" + run_b], env={"MEGABATCH_FAULT_STOP_STEP": "20"},
                       expect=75)
        self.assertIn("stopping at step 20", r.output)
        self.train(1, config, ["run.dir=" + run_b])  # resumes on one rank, crosses an epoch
        losses_b = train_losses(run_b)
        self.assertEqual(sorted(losses_b), list(range(1, 41)), "no step skipped or repeated")
        for step in range(1, 41):
            np.testing.assert_allclose(losses_b[step], losses_a[step], rtol=mbtest.RUN_RTOL,
                                       err_msg="step %d loss" % step)
        params_b = checkpoint_params(os.path.join(run_b, "checkpoints", "step-00000040.h5"))
        self.assertEqual(sorted(params_a), sorted(params_b))
        for name in params_a:
            np.testing.assert_allclose(params_b[name], params_a[name], rtol=mbtest.RUN_RTOL,
                                       atol=mbtest.RUN_ATOL, err_msg=name)
        self.assertIn("gat.0.att_src", params_a)
        # The comparison can fail: another seed gives other losses.
        run_c = self.path("C")
        self.train(2, config, ["run.dir=" + run_c, "train.seed=9", "train.max_steps=20"])
        self.assertFalse(np.allclose(train_losses(run_c)[20], losses_a[20], rtol=mbtest.RUN_RTOL))

    def graph_counts(self, output):
        """{epoch: {name: value}} from the 'epoch E model: ...' log lines."""
        counts = {}
        for epoch, text in re.findall(r"epoch (\d+) model: (.*)", output):
            counts[int(epoch)] = {k: float(v) for k, v in
                                  (item.rsplit(" ", 1) for item in text.strip().split(", "))}
        return counts

    def test_each_dates_graph_is_built_once_or_once_per_epoch(self):
        steps = 2 * (TRAIN_DATES // 8)  # two epochs of 28 full batches
        run_once = self.path("once")
        r = self.train(1, self.config(run_once), ["run.dir=" + run_once, "train.max_steps=0",
                                                  "train.epochs=2", "run.log_every=50"])
        counts = self.graph_counts(r.output)
        self.assertEqual(sorted(counts), [0, 1], r.output)
        self.assertEqual(counts[0]["graphs_built_epoch"], TRAIN_DATES)
        self.assertEqual(counts[1]["graphs_built_epoch"], 0)  # epoch 2 builds nothing
        val = counts[1]["graphs_built"] - TRAIN_DATES  # the val dates, built at the first eval
        self.assertGreater(val, 0)
        self.assertEqual(counts[1]["graphs_cached"], TRAIN_DATES + val)
        self.assertGreater(counts[1]["graph_cache_hits"], steps * 8 - TRAIN_DATES - 8)
        run_each = self.path("each")
        r = self.train(1, self.config(run_each), ["run.dir=" + run_each, "train.max_steps=0",
                                                  "train.epochs=2", "run.log_every=50",
                                                  "model.graph.rebuild=per_epoch"])
        counts = self.graph_counts(r.output)
        self.assertEqual(counts[1]["graphs_built_epoch"], TRAIN_DATES)
        # Both runs trained the same model: the cache changes nothing but the work.
        np.testing.assert_allclose(train_losses(run_each)[steps], train_losses(run_once)[steps],
                                   rtol=mbtest.RUN_RTOL)
        # A budget too small for the dates is logged, and they are rebuilt when used.
        run_small = self.path("small")
        r = self.train(1, self.config(run_small), ["run.dir=" + run_small, "train.max_steps=30",
                                                   "model.graph.cache_mb=0.001"])
        record = [m for m in read_metrics(run_small) if m["event"] == "train"][-1]
        self.assertGreater(record["graphs_uncached"], 0)
        self.assertLessEqual(record["graph_cache_mb"], 0.001)

    def test_step_time_split_and_eval_ic(self):
        run = self.path("split")
        r = self.train(2, self.config(run), ["run.dir=" + run, "run.log_every=5"])
        self.assertRegex(r.output, r"samples/s \| step [0-9.]+ ms \(data \d+% fwd-bwd \d+% comm \d+% opt \d+% other \d+%\)")
        records = [m for m in read_metrics(run) if m["event"] == "train"]
        self.assertGreater(len(records), 4)
        for m in records:
            parts = [m["data_time_s"], m["fwd_bwd_time_s"], m["comm_time_s"], m["optimizer_time_s"]]
            self.assertTrue(all(p >= 0 for p in parts), m)
            self.assertLessEqual(sum(parts), m["step_time_s"] * 1.05, m)
            self.assertGreater(m["fwd_bwd_time_s"], m["data_time_s"], m)
            self.assertGreater(m["samples_per_s"], 0)
            self.assertNotIn("gpu_util", m)  # the CPU has no utilisation to report
        r = mbtest.run(["eval", "--checkpoint", run, "--split", "test"])
        self.assertExit(r, 0, "test_ic", "test_rank_ic", "test_mse")
        values = dict(re.findall(r"(test_\w+)\s+(-?[0-9.e+-]+)", r.stdout))
        self.assertLessEqual(abs(float(values["test_ic"])), 1.0)

    def test_the_graph_beats_the_same_encoder_without_it(self):
        # A panel whose sectors share a signal (synth-panel): attending to the neighbours found by
        # return correlation must beat the same LSTM encoder alone, and both the cross-sectional
        # mean (whose daily IC is 0), on the daily IC of dates the runs never trained on.
        data = self.path("ic.h5")
        r = mbtest.run(["data", "synth-panel", "--out", data, "--dates", "700", "--instruments", "100",
                        "--features", "4", "--seed", "11"])
        self.assertExit(r, 0)
        config = self.write("ic.yaml", IC_CONFIG.format(data=data))
        ic = {}
        for name, overrides in (("gat", []), ("encoder", ["model.graph.layers=0"])):
            run_dir = self.path(name)
            self.train(1, config, ["run.dir=" + run_dir] + overrides)
            for split in ("val", "test"):
                r = mbtest.run(["eval", "--checkpoint", run_dir, "--split", split])
                self.assertExit(r, 0)
                ic[name, split] = float(re.search(r"%s_ic\s+(-?[0-9.e+-]+)" % split, r.stdout).group(1))
        print(ic)
        for split in ("val", "test"):
            self.assertGreater(ic["encoder", split], 0.1, ic)  # the encoder alone beats the mean
            self.assertGreater(ic["gat", split], ic["encoder", split] + 0.01, ic)


IC_CONFIG = """
run: {{log_every: 1000}}
data: {{path: {data}, layout: panel, canonical_shards: 4, panel: {{window: 10, normalize_target: zscore}}}}
model:
  kind: gat
  hidden: 16
  layers: 1
  heads: 2
  head_hidden: 16
  graph: {{layers: 2, k: 8, lookback: 40, min_periods: 15}}
train: {{global_batch: 16, epochs: 10, threads: 1, seed: 1}}
optim: {{lr: 0.003, warmup_steps: 10}}
"""


if __name__ == "__main__":
    unittest.main(verbosity=2)
