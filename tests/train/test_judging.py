"""Is the model any good? Baselines on the same samples, IC, rank IC and hit rate, results by
period, in eval and in training.

The references are independent of megabatch: numpy, scipy.stats and pandas over `predict`'s
output (its predictions, targets, sample numbers and timestamps) and over the data file read with
h5py. The data is a `series` file written here with h5py, with no attributes: a daily random
walk whose next return a noisy feature announces, so a small model learns a real IC.
"""
import json
import os
import re
import shutil
import sys
import tempfile
import time
import unittest

import h5py
import numpy as np
import pandas as pd
from scipy import stats

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import mbtest  # noqa: E402

ROWS = 2400  # days from 2015-01-01
HORIZON = 1
CONFIG = """run: {{dir: {run}, checkpoint_every: 40, log_every: 10}}
data:
  path: {data}
  layout: series
  streams: [{{name: d1, window: 8}}]
  canonical_shards: 6
  time_unit: s
  horizon: {horizon}
  split: {{train_fraction: 0.7, val_fraction: 0.15, test_fraction: 0.15}}
model: {{kind: lstm, hidden: 8, layers: 1, head_hidden: 8}}
train: {{global_batch: 32, max_steps: 40, eval_every: 20, threads: 1}}
optim: {{lr: 0.01}}
"""
TOL = 1e-6
CLASSES = """run: {{dir: {run}, checkpoint_every: 30}}
data: {{path: {data}, layout: samples, canonical_shards: 4}}
model: {{kind: mlp, task: classification, hidden: 16}}
train: {{global_batch: 32, max_steps: 30, eval_every: 0, threads: 1}}
"""


def write_series(path, seed=5, timestamps=True):
    rng = np.random.default_rng(seed)
    r = rng.standard_normal(ROWS + 1).astype(np.float32)
    hint = (r[1:] + 0.7 * rng.standard_normal(ROWS)).astype(np.float32)  # row t: r[t+1] + noise
    values = np.stack([r[:ROWS], hint, rng.standard_normal(ROWS).astype(np.float32)], 1)
    t = np.arange(7, ROWS)
    with h5py.File(path, "w") as f:
        f["series/d1/values"] = values
        f["samples/end/d1"] = t
        f["targets"] = r[t + 1]  # the next day's return: HORIZON = 1 sample ahead
        if timestamps:
            f["timestamps"] = (1420070400 + 86400 * t).astype(np.int64)


def read(path, *names):
    with h5py.File(path, "r") as f:
        return [f[n][()] for n in names]


def reference(pred, y, sample, train_mean, targets):
    """numpy's and scipy's figures for predictions `pred` of targets `y` (file samples `sample`)."""
    pred, y = pred.astype(np.float64), y.astype(np.float64)
    mse = np.mean((pred - y) ** 2)
    nz = y != 0
    last = targets[sample - HORIZON].astype(np.float64)
    out = {"mse": mse, "ic": stats.pearsonr(pred, y)[0], "rank_ic": stats.spearmanr(pred, y)[0],
           "hit_rate": np.mean(np.sign(pred[nz]) == np.sign(y[nz])),
           "baseline_zero_mse": np.mean(y ** 2), "baseline_mean_mse": np.mean((y - train_mean) ** 2),
           "baseline_last_mse": np.mean((y - last) ** 2)}
    for name in ("zero", "mean", "last"):
        out["baseline_%s_skill" % name] = 1 - mse / out["baseline_%s_mse" % name]
    return out


class Judging(mbtest.TempDirTestCase):
    @classmethod
    def setUpClass(cls):
        cls._shared = tempfile.TemporaryDirectory(prefix="mbjudge-")
        d = cls._shared.name
        cls.data = os.path.join(d, "series.h5")
        write_series(cls.data)
        cls.run_dir = os.path.join(d, "run")
        cls.config_file = os.path.join(d, "c.yaml")
        with open(cls.config_file, "w") as f:
            f.write(CONFIG.format(run=cls.run_dir, data=cls.data, horizon=HORIZON))
        r = mbtest.run(["train", "--config", cls.config_file], timeout=240)
        if r.returncode != 0:
            raise RuntimeError("training failed:\n%r" % r)
        cls.predictions = {}
        for split in ("train", "test"):
            out = os.path.join(d, "p-%s.h5" % split)
            r = mbtest.run(["predict", "--checkpoint", cls.run_dir, "--data", cls.data, "--out", out,
                            "--split", split])
            if r.returncode != 0:
                raise RuntimeError("predict failed:\n%r" % r)
            cls.predictions[split] = out
        (cls.targets,) = read(cls.data, "targets")
        (train_targets,) = read(cls.predictions["train"], "targets")
        cls.train_mean = np.mean(train_targets.astype(np.float64))

    @classmethod
    def tearDownClass(cls):
        cls._shared.cleanup()

    def eval(self, *args, np_=1, expect=0):
        command = ["eval", "--checkpoint", self.run_dir] + list(args)
        r = mbtest.mpirun(np_, command) if np_ > 1 else mbtest.run(command)
        self.assertEqual(r.returncode, expect, repr(r))
        return r

    def test_eval_figures_equal_numpy_and_scipy_on_1_2_and_3_ranks(self):
        pred, y, sample = read(self.predictions["test"], "predictions", "targets", "sample_index")
        want = reference(pred, y, sample, self.train_mean, self.targets)
        seen = {}
        for np_ in (1, 2, 3):
            out = self.path("e%d.json" % np_)
            r = self.eval("--split", "test", "--out", out, np_=np_)
            with open(out) as f:
                got = json.load(f)
            self.assertEqual(got["test_samples"], len(y))
            for name, value in want.items():
                self.assertAlmostEqual(got["test_" + name], value, delta=TOL,
                                       msg="%s on %d ranks" % (name, np_))
            seen[np_] = got
            for words in ("zero forecast", "train mean (", "last known target (1 ahead)"):
                self.assertRegex(r.stdout, r"\n +%s.* mse [0-9.e+-]+ +skill [+-][0-9.]+\n" % re.escape(words))
        self.assertGreater(want["ic"], 0.2, "the model learned the announced return")
        self.assertGreater(want["baseline_zero_skill"], 0, "and beats the zero forecast")

    def test_eval_by_month_matches_a_pandas_groupby_of_predict_output(self):
        out = self.path("months.csv")
        r = self.eval("--split", "test", "--by", "month", "--out", out)
        got = pd.read_csv(out).set_index("period")
        pred, y, sample, ts = read(self.predictions["test"], "predictions", "targets", "sample_index",
                                   "timestamps")
        frame = pd.DataFrame({"p": pred.astype(np.float64), "y": y.astype(np.float64), "s": sample,
                              "month": pd.to_datetime(ts, unit="s").to_period("M").astype(str)})
        self.assertEqual(list(got.index), sorted(frame["month"].unique()))
        self.assertGreaterEqual(len(got), 10)
        for month, part in frame.groupby("month"):
            want = reference(part["p"].values, part["y"].values, part["s"].values, self.train_mean,
                             self.targets)
            row = got.loc[month]
            self.assertEqual(row["samples"], len(part))
            for name, value in want.items():
                self.assertAlmostEqual(row[name], value, delta=TOL, msg="%s in %s" % (name, month))
            self.assertIn("  %s " % month, r.stdout)
        beaten = int((got["baseline_zero_skill"] > 0).sum())
        self.assertIn("the model beat the zero forecast in %d of %d months" % (beaten, len(got)), r.stdout)

    def train_range(self):
        """The train split's [begin, end) samples, as train.log gives them."""
        with open(os.path.join(self.run_dir, "train.log")) as f:
            found = re.findall(r"\btrain +\[(\d+), (\d+)\)", f.read())
        self.assertTrue(found, "train.log names the train split's samples")
        return int(found[-1][0]), int(found[-1][1])

    def period(self):
        """A --from date in the test split, and the samples from it on (the period eval takes)."""
        (ts,) = read(self.predictions["test"], "timestamps")
        day = int(ts[len(ts) // 2]) // 86400 * 86400
        (times,) = read(self.data, "timestamps")
        return time.strftime("%Y-%m-%d", time.gmtime(day)), np.flatnonzero(times >= day)

    def test_every_evaluation_compares_with_the_checkpoints_train_mean_on_1_and_2_ranks(self):
        begin, end = self.train_range()
        want = np.mean(self.targets[begin:end].astype(np.float64))
        self.assertAlmostEqual(want, self.train_mean, delta=1e-6)  # predict's train split agrees
        best = os.path.join(self.run_dir, "checkpoints", "best.h5")
        with h5py.File(best, "r") as f:
            recorded = f["meta"].attrs["train_target_mean"]
        self.assertEqual(recorded.shape, (1,))
        self.assertAlmostEqual(recorded[0], want, delta=1e-9)
        start, samples = self.period()
        y = self.targets[samples].astype(np.float64)
        for np_ in (1, 2):
            out = self.path("period%d.json" % np_)
            r = self.eval("--from", start, "--out", out, np_=np_)
            with open(out) as f:
                got = json.load(f)
            self.assertEqual(got["period_samples"], len(samples))
            self.assertAlmostEqual(got["period_baseline_mean_mse"], np.mean((y - want) ** 2), delta=TOL,
                                   msg="on %d ranks" % np_)
            self.assertIn("train mean (%.4g)" % want, r.stdout)
        # predict of the same period carries it, with what judging its file needs.
        out = self.path("period.h5")
        self.assertExit(mbtest.run(["predict", "--checkpoint", self.run_dir, "--data", self.data,
                                    "--out", out, "--from", start]), 0)
        with h5py.File(out, "r") as f:
            np.testing.assert_array_equal(f["sample_index"][()], samples)
            self.assertEqual(f["train_mean"].dtype, np.float64)
            np.testing.assert_allclose(f["train_mean"][()], np.full(len(samples), want), rtol=1e-12)
            self.assertEqual((f.attrs["horizon"], f.attrs["targets_dataset"]), (HORIZON, "targets"))

    def test_a_checkpoint_without_a_recorded_train_mean(self):
        old = self.path("old.h5")
        shutil.copy(os.path.join(self.run_dir, "checkpoints", "best.h5"), old)
        with h5py.File(old, "r+") as f:
            del f["meta"].attrs["train_target_mean"]
        # A whole split: the train split it loads, as before.
        out = self.path("old.json")
        r = mbtest.run(["eval", "--checkpoint", old, "--split", "test", "--out", out])
        self.assertExit(r, 0, "train mean (%.4g)" % self.train_mean)
        with open(out) as f:
            got = json.load(f)
        (y,) = read(self.predictions["test"], "targets")
        self.assertAlmostEqual(got["test_baseline_mean_mse"],
                               np.mean((y.astype(np.float64) - self.train_mean) ** 2), delta=TOL)
        # A period cannot know it: left out, with the reason, rather than a wrong one.
        start, _ = self.period()
        r = mbtest.run(["eval", "--checkpoint", old, "--from", start, "--out", out])
        self.assertExit(r, 0, "train mean: left out, %s was written before checkpoints recorded their "
                              "train split's mean target" % old)
        with open(out) as f:
            got = json.load(f)
        self.assertNotIn("period_baseline_mean_mse", got)
        self.assertIn("period_baseline_zero_mse", got)

    def test_eval_predictions_of_predict_output_equals_eval_of_the_checkpoint(self):
        checkpoint, judged = self.path("c.json"), self.path("p.json")
        self.eval("--split", "test", "--out", checkpoint)
        r = mbtest.run(["eval", "--predictions", self.predictions["test"], "--out", judged])
        self.assertExit(r, 0, "train mean (%.4g)" % self.train_mean, "last known target (1 ahead)")
        with open(checkpoint) as f:
            want = json.load(f)
        with open(judged) as f:
            got = json.load(f)
        # The model's own mae sums in float32; the file's predictions are the same values.
        self.assertAlmostEqual(got["mae"], want["test_mae"], delta=1e-5)
        for name in ("ic", "rank_ic", "hit_rate", "baseline_zero_mse", "baseline_mean_mse",
                     "baseline_last_mse", "baseline_zero_skill", "baseline_mean_skill",
                     "baseline_last_skill", "samples"):
            self.assertAlmostEqual(got[name], want["test_" + name], delta=TOL, msg=name)

    def test_training_records_the_baselines_once_and_the_forecast_metrics_each_evaluation(self):
        records = mbtest.read_metrics(self.run_dir)
        baselines = [r for r in records if r.get("event") == "baseline"]
        self.assertEqual(len(baselines), 1, baselines)
        self.assertEqual(baselines[0]["split"], "val")
        self.assertIn("zero_mse", baselines[0])
        self.assertIn("last_skill", baselines[0])
        evals = [r for r in records if r.get("event") == "eval"]
        self.assertEqual(len(evals), 2)
        for record in evals:
            for name in ("ic", "rank_ic", "hit_rate"):
                self.assertTrue(-1 <= record[name] <= 1, record)
            self.assertFalse([k for k in record if k.startswith("baseline_")], record)

    def test_early_stopping_on_the_ic_keeps_the_best_and_refuses_mode_min(self):
        run_dir = self.path("es")
        r = mbtest.run(["train", "--config", self.config_file, "run.dir=" + run_dir,
                        "train.early_stopping.metric=val_ic"])
        self.assertExit(r, 2, "train.early_stopping.metric = val_ic is higher for a better model",
                        "train.early_stopping.mode = max")
        r = mbtest.run(["train", "--config", self.config_file, "run.dir=" + run_dir, "train.max_steps=20",
                        "train.eval_every=10", "train.early_stopping.metric=val_rank_ic",
                        "train.early_stopping.mode=max"], timeout=240)
        self.assertEqual(r.returncode, 0, repr(r))
        self.assertTrue(os.path.exists(os.path.join(run_dir, "checkpoints", "best.h5")))

    def test_errors_name_the_problem(self):
        r = self.eval("--by", "fortnight", expect=2)
        self.assertIn("--by fortnight: expected day, week, month, quarter or year", r.output)
        bare = self.path("bare.h5")
        write_series(bare, timestamps=False)
        r = self.eval("--data", bare, "--by", "month", expect=3)
        self.assertIn(bare + " has no /timestamps dataset, so its samples cannot be grouped by period",
                      r.output)
        arith = self.path("arith.h5")
        self.assertExit(mbtest.run(["data", "arith", "--out", arith, "--problems", "500", "--heldout", "10"]), 0)
        gpt = self.path("gpt")
        r = mbtest.run(["train", "--config", mbtest.config_path("arith-gpt.yaml"), "data.path=" + arith,
                        "run.dir=" + gpt, "train.max_steps=1", "train.eval_every=0", "model.hidden=16",
                        "model.layers=1", "train.global_batch=8", "data.canonical_shards=2",
                        "train.threads=1"], timeout=120)
        self.assertEqual(r.returncode, 0, repr(r))
        r = mbtest.run(["eval", "--checkpoint", gpt, "--by", "month"])
        self.assertExit(r, 2, "makes none to judge: a language model predicts tokens", "leave out --by")


class ClassificationBaselines(mbtest.TempDirTestCase):
    """Majority class and class frequencies against numpy, on a samples file of 3 classes."""

    def test_majority_and_prior_baselines(self):
        rng = np.random.default_rng(9)
        n = 1500
        x = rng.standard_normal((n, 4)).astype(np.float32)
        labels = (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0.8).astype(np.int64)
        data = self.path("c.h5")
        with h5py.File(data, "w") as f:
            f["features"] = x
            f["targets"] = labels
        run_dir = self.path("run")
        config = self.write("c.yaml", CLASSES.format(run=run_dir, data=data))
        r = mbtest.run(["train", "--config", config], timeout=120)
        self.assertEqual(r.returncode, 0, repr(r))
        preds = {}
        for split in ("train", "test"):
            preds[split] = self.path("p-%s.h5" % split)
            self.assertExit(mbtest.run(["predict", "--checkpoint", run_dir, "--data", data, "--out",
                                        preds[split], "--split", split]), 0)
        out = self.path("e.json")
        r = mbtest.mpirun(2, ["eval", "--checkpoint", run_dir, "--split", "test", "--out", out])
        self.assertEqual(r.returncode, 0, repr(r))
        with open(out) as f:
            got = json.load(f)
        (train_labels,) = read(preds["train"], "targets")
        y, probabilities, predicted = read(preds["test"], "targets", "probabilities", "predicted_class")
        counts = np.bincount(train_labels, minlength=3).astype(np.float64)
        majority = np.argmax(counts)
        accuracy = np.mean(predicted == y)
        log_loss = np.mean(-np.log(probabilities[np.arange(len(y)), y].astype(np.float64)))
        base_accuracy = np.mean(y == majority)
        prior = np.mean(-np.log(counts[y] / counts.sum()))
        self.assertAlmostEqual(got["test_baseline_majority_accuracy"], base_accuracy, delta=1e-8)
        self.assertAlmostEqual(got["test_baseline_majority_skill"],
                               1 - (1 - accuracy) / (1 - base_accuracy), delta=TOL)
        self.assertAlmostEqual(got["test_baseline_prior_log_loss"], prior, delta=1e-8)
        self.assertAlmostEqual(got["test_log_loss"], log_loss, delta=1e-5)
        self.assertAlmostEqual(got["test_baseline_prior_skill"], 1 - log_loss / prior, delta=1e-5)
        self.assertIn("majority class", r.stdout)
        self.assertIn("class frequencies", r.stdout)


class PanelJudging(mbtest.TempDirTestCase):
    """A panel's daily IC, its ratio, the hit rate and the baselines against numpy, per date over the
    instruments present, on 1 and 2 ranks."""

    def test_panel_figures_equal_numpy(self):
        data = self.path("panel.h5")
        self.assertExit(mbtest.run(["data", "synth-panel", "--out", data, "--dates", "900",
                                    "--instruments", "40"]), 0)
        run_dir = self.path("run")
        r = mbtest.run(["train", "--config", mbtest.config_path("panel-gat.yaml"), "data.path=" + data,
                        "run.dir=" + run_dir, "train.max_steps=20", "train.eval_every=0",
                        "train.threads=1"], timeout=180)
        self.assertEqual(r.returncode, 0, repr(r))
        preds = self.path("p.h5")
        self.assertExit(mbtest.run(["predict", "--checkpoint", run_dir, "--data", data, "--out", preds,
                                    "--split", "test"]), 0)
        p, y, present = read(preds, "predictions", "targets", "present")
        p, y, present = p.astype(np.float64), y.astype(np.float64), present.astype(bool)
        daily, mse, zero, hits, counted = [], [], [], 0, 0
        for d in range(len(y)):
            pd_, yd = p[d][present[d]], y[d][present[d]]
            if len(yd) == 0:  # a date without instruments counts, as in the panel loss
                daily.append(0.0), mse.append(0.0), zero.append(0.0)
                continue
            daily.append(np.corrcoef(pd_, yd)[0, 1] if len(yd) > 1 and pd_.std() > 0 and yd.std() > 0 else 0.0)
            mse.append(np.mean((pd_ - yd) ** 2))
            zero.append(np.mean(yd ** 2))
            nz = yd != 0
            hits += int(np.sum(np.sign(pd_[nz]) == np.sign(yd[nz])))
            counted += int(nz.sum())
        daily = np.array(daily)
        want = {"ic": daily.mean(), "ic_ratio": daily.mean() / daily.std(ddof=1),
                "hit_rate": hits / counted, "baseline_zero_mse": np.mean(zero),
                "baseline_zero_skill": 1 - np.mean(mse) / np.mean(zero)}
        for np_ in (1, 2):
            out = self.path("e%d.json" % np_)
            command = ["eval", "--checkpoint", run_dir, "--split", "test", "--out", out]
            r = mbtest.mpirun(np_, command) if np_ > 1 else mbtest.run(command)
            self.assertEqual(r.returncode, 0, repr(r))
            with open(out) as f:
                got = json.load(f)
            for name, value in want.items():
                self.assertAlmostEqual(got["test_" + name], value, delta=TOL, msg="%s on %d ranks" % (name, np_))
            self.assertIn("test_baseline_mean_mse", got)
            self.assertIn("zero forecast", r.stdout)


if __name__ == "__main__":
    unittest.main()
