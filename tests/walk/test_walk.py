"""megabatch walk: the folds' cuts, their predictions, resuming, extending, refusing changes.

The references are independent of megabatch: the calendar periods are pandas' to_period, the cuts
numpy's searchsorted over the file's /timestamps (read with h5py), the series embargo is worked
out from the file's window-end arrays, and each fold's rows are what `megabatch predict` of that
fold writes. Data: a minute series file (synth-series, 2024-01-01 on) walked by day, and a daily
`samples` file of business days written here with h5py, planned by week, month and quarter.
"""
import hashlib
import json
import os
import shutil
import signal
import subprocess
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

SERIES = ["--features", "3", "--streams", "m1:1,m5:5", "--seed", "7"]
ROWS, GROWN_ROWS = 8000, 9000  # one minute a row from 2024-01-01T00:00Z: to 01-06 13:19, 01-07 06:00
WINDOWS = {"m1": 16, "m5": 8}
HORIZON = 8
CONFIG = """run: {{dir: {run}, checkpoint_every: 5, log_every: 5}}
data:
  path: {data}
  layout: series
  streams: [{{name: m1, window: 16}}, {{name: m5, window: 8}}]
  canonical_shards: 6
  horizon: 8
  split: {{train_fraction: 0.8, val_fraction: 0.1, test_fraction: 0.1}}
walk: {{from: 2024-01-04, every: day, val: 1}}
model: {{kind: lstm, hidden: 8, layers: 1, head_hidden: 8}}
train: {{global_batch: 24, max_steps: 10, eval_every: 5, eval_batches: 2, threads: 1}}
"""
DAILY = """run: {{dir: {run}}}
data: {{path: {data}, layout: samples, canonical_shards: 4, horizon: {horizon}}}
walk: {{from: 2021-03-03, every: week}}
model: {{kind: mlp, hidden: 8, layers: 1}}
train: {{global_batch: 16, max_steps: 4, threads: 1}}
"""
FREQ = {"day": "D", "week": "W-SUN", "month": "M", "quarter": "Q", "year": "A"}


def stamp(text):
    return int(pd.Timestamp(text).value // 10**9)


def reference_periods(start, every, last, to=None):
    """[(from, to)] in Unix seconds: pandas periods from `start` through the one holding `last`."""
    first = pd.Timestamp(start).to_period(FREQ[every])
    out, i = [], 0
    while True:
        begin = stamp(start) if i == 0 else stamp((first + i).start_time)
        if (to is not None and begin >= stamp(to)) or (to is None and begin > last):
            return out
        end = stamp((first + i + 1).start_time)
        out.append((begin, min(end, stamp(to)) if to else end))
        i += 1


def series_train_end(ends, val_begin, horizon):
    """The last train sample + 1 whose windows share no row with val's first sample's windows, and
    whose target (horizon rows ahead) comes before it: the series embargo, from the window ends."""
    last = val_begin - horizon - 1
    for name, end in ends.items():
        first_row = end[val_begin] - WINDOWS[name] + 1
        last = min(last, int(np.searchsorted(end, first_row, "left")) - 1)
    return last + 1


def reference_folds(ts, every, start, val, window, retrain, horizon, train_end_of, to=None, first=0):
    """The folds as the walk's table says: [{name, train, val, predict}] in sample numbers."""
    periods = reference_periods(start, every, ts[-1], to)
    grid = pd.Timestamp(start).to_period(FREQ[every])
    folds = []
    for p in range(0, len(periods), retrain):
        end = min(p + retrain, len(periods))
        pb = int(np.searchsorted(ts, periods[p][0]))
        pe = int(np.searchsorted(ts, periods[end - 1][1]))
        vb = pb if val == 0 else int(np.searchsorted(ts, stamp((grid + p - val).start_time)))
        tb = first
        if window:
            tb = max(first, int(np.searchsorted(ts, stamp((grid + p - val - window).start_time))))
        ve = vb if val == 0 else pb - horizon
        folds.append({"name": str(pd.Timestamp(periods[p][0], unit="s").date()),
                      "train": (tb, train_end_of(vb)), "val": (vb, ve), "predict": (pb, pe)})
    return folds


def planned(result):
    assert result.returncode == 0, repr(result)
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def as_reference(plan):
    return [{"name": f["fold"], "train": (f["train_begin"], f["train_end"]),
             "val": (f["val_begin"], f["val_end"]), "predict": (f["predict_begin"], f["predict_end"])}
            for f in plan]


def tree_digest(folder):
    """{relative path: sha256} of every file below `folder`: what 'nothing changed' compares (the
    walk's own log and lock aside: a refused walk says why in walk.log)."""
    out = {}
    for root, _, files in os.walk(folder):
        for name in files:
            if root == folder and name in ("walk.log", "run.lock"):
                continue
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, folder)] = hashlib.sha256(f.read()).hexdigest()
    return out


def datasets(path):
    with h5py.File(path, "r") as f:
        return {name: f[name][()] for name in f}


class Files(mbtest.TempDirTestCase):
    """The minute series file (and its grown copy) and the daily samples file, made once."""

    @classmethod
    def setUpClass(cls):
        cls._shared = tempfile.TemporaryDirectory(prefix="mbwalk-")
        cls.small = os.path.join(cls._shared.name, "small.h5")
        cls.grown = os.path.join(cls._shared.name, "grown.h5")
        for path, rows in ((cls.small, ROWS), (cls.grown, GROWN_ROWS)):
            r = mbtest.run(["data", "synth-series", "--out", path, "--rows", str(rows)] + SERIES)
            if r.returncode != 0:
                raise RuntimeError("could not make test data:\n%r" % r)
        cls.daily = os.path.join(cls._shared.name, "daily.h5")
        days = pd.bdate_range("2020-01-01", "2022-12-30")  # business days: weekends are gaps
        rng = np.random.default_rng(3)
        with h5py.File(cls.daily, "w") as f:
            f["features"] = rng.standard_normal((len(days), 4)).astype(np.float32)
            f["targets"] = rng.standard_normal(len(days)).astype(np.float32)
            f["timestamps"] = (days.values.astype("datetime64[s]").astype(np.int64))

    @classmethod
    def tearDownClass(cls):
        cls._shared.cleanup()

    def config(self, run="run", data=None, text=CONFIG, **extra):
        return self.write(run + ".yaml", text.format(run=self.path(run), data=data or self.small,
                                                    **extra))

    def walk(self, *overrides, run="run", data=None, np_=1, env=None, timeout=300):
        args = ["walk", "--config", self.config(run, data)] + list(overrides)
        if np_ > 1:
            return mbtest.mpirun(np_, args, env=env, timeout=timeout)
        return mbtest.run(args, env=env, timeout=timeout)

    def series_ends(self, path):
        with h5py.File(path, "r") as f:
            return {name: f["samples/end/" + name][()] for name in WINDOWS}, f["timestamps"][()]


class PlanTest(Files):
    """--plan: every fold's periods and splits, against pandas and numpy, on 1 and 3 ranks."""

    def test_daily_series_cuts_equal_numpys_on_1_and_3_ranks(self):
        ends, ts = self.series_ends(self.small)
        first = max(int(np.searchsorted(end, WINDOWS[name] - 1)) for name, end in ends.items())
        reference = reference_folds(ts, "day", "2024-01-04", 1, 0, 1, HORIZON,
                                    lambda vb: series_train_end(ends, vb, HORIZON), first=first)
        for np_ in (1, 3):
            plan = planned(self.walk("--plan", np_=np_))
            self.assertEqual(as_reference(plan), reference, "%d rank(s)" % np_)
        for fold in reference:  # no target that trains or selects the model reaches its period
            self.assertLess(fold["train"][1] - 1 + HORIZON, fold["val"][0])
            self.assertLess(fold["val"][1] - 1 + HORIZON, fold["predict"][0])
        self.assertEqual([f["name"] for f in reference], ["2024-01-04", "2024-01-05", "2024-01-06"])

    def test_weeks_months_and_quarters_with_windows_and_retraining_equal_pandas(self):
        with h5py.File(self.daily, "r") as f:
            ts = f["timestamps"][()]
        cases = [("week", "2021-03-03", 2, 0, 1, 1),      # a Wednesday: the first week is short
                 ("month", "2021-01-01", 1, 6, 2, 2),     # sliding 6 months, a model every 2
                 ("quarter", "2021-04-01", 1, 0, 1, 0),   # no horizon known: the whole embargo
                 ("week", "2022-06-06", 0, 4, 1, 1)]      # no val split
        for every, start, val, window, retrain, horizon in cases:
            with self.subTest(every=every, val=val, window=window, retrain=retrain):
                config = self.config("daily-%s" % every, self.daily, DAILY, horizon=horizon)
                r = mbtest.run(["walk", "--config", config, "--plan", "walk.every=" + every,
                                "walk.from=" + start, "walk.val=%d" % val,
                                "walk.train_window=%d" % window, "walk.retrain_every=%d" % retrain])
                gap = max(horizon, 0)
                # [N, F] samples: the embargo is the horizon alone; with none known, 0 samples
                reference = reference_folds(ts, every, start, val, window, retrain, gap,
                                            lambda vb: vb - gap)
                self.assertEqual(as_reference(planned(r)), reference)

    def test_warm_starts_chain_the_folds_and_fresh_starts_do_not(self):
        plan = planned(self.walk("--plan"))
        self.assertEqual([f["init_from"] for f in plan],
                         ["", self.path("run", "folds", "2024-01-04"), self.path("run", "folds", "2024-01-05")])
        plan = planned(self.walk("--plan", "walk.warm_start=false"))
        self.assertEqual([f["init_from"] for f in plan], ["", "", ""])

    def test_bad_walks_say_what_is_wrong_before_any_training(self):
        r = self.walk("walk.every=fortnight")
        self.assertExit(r, 2, "walk.every", "fortnight", "day", "week", "month", "quarter", "year")
        r = self.walk("walk.from=2024-01-01T06:00")  # no train sample before its val day
        _, ts = self.series_ends(self.small)
        last = str(np.datetime64(int(ts[-1]), "s"))[:16]  # the file's last time, in the message
        self.assertExit(r, 3, "fold 2024-01-01", "2024-01-01T", last)
        r = self.walk("walk.to=2024-01-03")
        self.assertExit(r, 3, "walk.to = 2024-01-03 is not after walk.from = 2024-01-04")
        r = self.walk("walk.from=")
        self.assertExit(r, 2, "walk.from is not set")
        text = CONFIG.replace("layout: series", "layout: tokens").replace(
            "  streams: [{{name: m1, window: 16}}, {{name: m5, window: 8}}]\n", "").replace(
            "kind: lstm, hidden: 8, layers: 1, head_hidden: 8", "kind: gpt, hidden: 8, layers: 1, heads: 2").replace(
            "  horizon: 8\n", "")
        r = mbtest.run(["walk", "--config", self.config("tokens", text=text)])
        self.assertExit(r, 2, "data.layout = tokens has no time")
        self.assertFalse(os.path.exists(self.path("run")), "nothing is written")


class WalkTest(Files):
    """A walk run, its folds as run directories, and its predictions against predict's."""

    def test_each_folds_rows_are_predicts_and_every_sample_is_there_once(self):
        r = self.walk()
        self.assertExit(r, 0, "fold 1/3", "fold 3/3", "walk ETA")
        out = datasets(self.path("run", "predictions.h5"))
        _, ts = self.series_ends(self.small)
        begin = int(np.searchsorted(ts, stamp("2024-01-04")))
        np.testing.assert_array_equal(out["sample_index"], np.arange(begin, len(ts)))
        np.testing.assert_array_equal(out["timestamps"], ts[begin:])
        with h5py.File(self.path("run", "predictions.h5"), "r") as f:
            names = f.attrs["fold_names"].split("\n")
            periods = [p.split(" ") for p in f.attrs["fold_periods"].split("\n")]
        self.assertEqual(names, ["2024-01-04", "2024-01-05", "2024-01-06"])
        for k, (name, (start, end)) in enumerate(zip(names, periods)):
            fold = self.path("run", "folds", name)
            alone = self.path("alone-%s.h5" % name)
            p = mbtest.run(["predict", "--checkpoint", fold, "--data", self.small, "--from", start,
                            "--to", end, "--out", alone])
            self.assertExit(p, 0)
            rows = out["fold"] == k
            for key, value in datasets(alone).items():
                np.testing.assert_array_equal(out[key][rows], value, err_msg="%s %s" % (name, key))
            with open(os.path.join(fold, "train.log")) as f:
                log = f.read()
            self.assertIn("splits by time:", log)
            self.assertIn("val   [", log)
            self.assertNotIn("fold 2/3", log, "a fold's log is its own")
            if k == 0:  # a fold is an ordinary run directory (one is enough to show it)
                for command in (["eval", "--checkpoint", fold, "--split", "val"], ["inspect", fold],
                                ["plot", fold, "--out", self.path("%s.png" % name)]):
                    self.assertExit(mbtest.run(command), 0)
            with open(os.path.join(fold, "fold.json")) as f:
                record = json.load(f)
            self.assertEqual(record["rows"], int(rows.sum()))
            self.assertEqual(record["step"], 10)
        with open(self.path("run", "walk.log")) as f:
            self.assertIn("fold 3/3", f.read())

    def test_a_changed_config_is_exit_3_and_changes_nothing(self):
        self.assertExit(self.walk(), 0)
        before = tree_digest(self.path("run"))
        r = self.walk("optim.lr=0.01")
        self.assertExit(r, 3, "optim.lr", "2024-01-04", "new run.dir", "run.allow_data_change")
        self.assertEqual(tree_digest(self.path("run")), before)
        # a later walk.to, another path to the same data, threads: an extension, not a change
        copy = self.path("same.h5")
        shutil.copy(self.small, copy)
        self.assertExit(self.walk("train.threads=2", "data.path=" + copy), 0)
        r = self.walk("optim.lr=0.01", "run.allow_data_change=true")
        self.assertExit(r, 0, "going on")
        with open(self.path("run", "walk.json")) as f:
            self.assertIn("optim.lr", f.read())

    def test_one_restated_input_value_is_exit_3_before_any_training_on_1_and_3_ranks(self):
        self.assertExit(self.walk(), 0)
        restated = self.path("restated.h5")
        shutil.copy(self.small, restated)
        with h5py.File(restated, "r+") as f:
            f["series/m1/values"][2000, 0] += 1.0  # a training row of every fold
        before = tree_digest(self.path("run"))
        for np_ in (1, 3):
            r = self.walk("data.path=" + restated, np_=np_)
            self.assertExit(r, 3, "/series/m1/values", "2024-01-04", "restated", "new run.dir")
            self.assertNotIn("training on", r.output)
            self.assertEqual(tree_digest(self.path("run")), before, "%d rank(s)" % np_)

    def test_a_grown_file_trains_only_the_new_periods(self):
        self.assertExit(self.walk(), 0)
        old = datasets(self.path("run", "predictions.h5"))
        folds = self.path("run", "folds")
        checkpoints = {name: tree_digest(os.path.join(folds, name, "checkpoints"))
                       for name in os.listdir(folds)}
        r = self.walk("data.path=" + self.grown)
        self.assertExit(r, 0, "predicting the new ones")
        self.assertEqual(sorted(os.listdir(folds)), ["2024-01-04", "2024-01-05", "2024-01-06", "2024-01-07"])
        for name, digest in checkpoints.items():
            self.assertEqual(tree_digest(os.path.join(folds, name, "checkpoints")), digest, name)
        new = datasets(self.path("run", "predictions.h5"))
        n = len(old["sample_index"])
        for key in ("predictions", "sample_index", "targets", "timestamps", "fold"):
            np.testing.assert_array_equal(new[key][:n], old[key], err_msg=key)
        _, ts = self.series_ends(self.grown)
        np.testing.assert_array_equal(new["sample_index"], np.arange(old["sample_index"][0], len(ts)))
        with open(os.path.join(folds, "2024-01-07", "train.log")) as f:
            self.assertIn(os.path.join(folds, "2024-01-06"), f.read(), "warm-started from the last old fold")


class FoldTest(Files):
    """walk --fold: one fold alone, in any order, then `walk` stitching what the folds left; the
    whole walk, which keeps the rows of one fold's load for the next, equals them bit for bit."""

    def weights(self, fold_dir):
        with h5py.File(os.path.join(fold_dir, "checkpoints", "best.h5"), "r") as f:
            return {name: f["model"][name][()] for name in f["model"]}

    def test_folds_alone_in_any_order_equal_the_whole_walk_bit_for_bit_on_1_and_2_ranks(self):
        # Read, not mapped: the whole walk's second fold takes the rows its ranks held from the
        # first (Note [Rows kept between loads]); a fold alone reads them all from the file.
        fresh = ["walk.warm_start=false", "walk.to=2024-01-06", "data.host_mmap=false"]
        names = ["2024-01-04", "2024-01-05"]
        for np_ in (1, 2):
            whole, alone = "whole%d" % np_, "alone%d" % np_
            self.assertExit(self.walk(*fresh, run=whole, np_=np_), 0, "from the load before")
            for name in reversed(names):  # the later fold first: fresh folds are independent
                r = self.walk("--fold", name, *fresh, run=alone, np_=np_)
                self.assertExit(r, 0, "fold %s is done" % name)
                self.assertNotIn("walk ETA", r.output, "one fold, not the walk")
            self.assertFalse(os.path.exists(self.path(alone, "predictions.h5")))
            r = self.walk(*fresh, run=alone, np_=np_)  # finds every fold done: stitches, reports
            self.assertExit(r, 0, "every out-of-sample prediction together")
            self.assertNotIn("training on samples", r.output)
            for key, value in datasets(self.path(whole, "predictions.h5")).items():
                np.testing.assert_array_equal(datasets(self.path(alone, "predictions.h5"))[key],
                                              value, err_msg="%d rank(s): %s" % (np_, key))
            for name in names:
                mine, theirs = (self.weights(self.path(run, "folds", name)) for run in (alone, whole))
                self.assertEqual(sorted(mine), sorted(theirs))
                for key in mine:
                    np.testing.assert_array_equal(mine[key], theirs[key], err_msg=key)

    def test_a_warm_fold_before_its_predecessor_and_an_unknown_fold_are_exit_2(self):
        r = self.walk("--fold", "2024-01-05")
        self.assertExit(r, 2, "starts from the weights of fold 2024-01-04, which is not done",
                        "walk.warm_start: false")
        r = self.walk("--fold", "2024-01-07")
        self.assertExit(r, 2, "the walk has no fold of that name", "2024-01-04, 2024-01-05")
        self.assertFalse(os.path.exists(self.path("run", "folds", "2024-01-05", "checkpoints")))


class ReportTest(Files):
    """The report (walk.json, and what it prints) against numpy, scipy and pandas on the walk's own
    predictions.h5 and the data file."""

    def test_the_report_equals_numpys_over_every_out_of_sample_prediction(self):
        r = self.walk()
        self.assertExit(r, 0, "every out-of-sample prediction together", "by fold:",
                        "train mean (each fold's)", "the model beat the zero forecast in")
        plan = {f["fold"]: f for f in planned(self.walk("--plan"))}
        out = datasets(self.path("run", "predictions.h5"))
        with h5py.File(self.small, "r") as f:
            targets = f["targets"][()].astype(np.float64)
        with open(self.path("run", "walk.json")) as f:
            report = json.load(f)
        p, t = out["predictions"].astype(np.float64), out["targets"].astype(np.float64)
        index = out["sample_index"]
        np.testing.assert_array_equal(t, targets[index])
        names = ["2024-01-04", "2024-01-05", "2024-01-06"]
        mean = np.empty_like(t)  # each row's own fold's train mean, from the fold's train split
        for k, name in enumerate(names):
            train = targets[plan[name]["train_begin"]:plan[name]["train_end"]]
            mean[out["fold"] == k] = train.mean()
            with h5py.File(self.path("run", "folds", name, "checkpoints", "best.h5"), "r") as f:
                np.testing.assert_allclose(f["meta"].attrs["train_target_mean"], [train.mean()], rtol=1e-6)
        np.testing.assert_allclose(out["train_mean"], mean, rtol=1e-6)
        last = targets[index - HORIZON]

        def judged(rows):
            pp, tt = p[rows], t[rows]
            mse = np.mean((pp - tt) ** 2)
            zero, mean_mse = np.mean(tt ** 2), np.mean((tt - mean[rows]) ** 2)
            last_mse = np.mean((tt - last[rows]) ** 2)
            kept = tt != 0
            return {"mse": mse, "mae": np.mean(np.abs(pp - tt)), "ic": stats.pearsonr(pp, tt)[0],
                    "rank_ic": stats.spearmanr(pp, tt)[0],
                    "hit_rate": np.mean(np.sign(pp[kept]) == np.sign(tt[kept])),
                    "baseline_zero_mse": zero, "baseline_zero_skill": 1 - mse / zero,
                    "baseline_mean_mse": mean_mse, "baseline_mean_skill": 1 - mse / mean_mse,
                    "baseline_last_mse": last_mse, "baseline_last_skill": 1 - mse / last_mse}

        for name, want in judged(np.ones_like(t, dtype=bool)).items():
            self.assertAlmostEqual(report["metrics"][name] / want, 1.0, delta=1e-6, msg=name)
        by_fold = pd.DataFrame({"fold": out["fold"]}).groupby("fold").indices
        self.assertEqual([f["fold"] for f in report["folds"]], names)
        for k, fold in enumerate(report["folds"]):
            rows = np.zeros_like(t, dtype=bool)
            rows[by_fold[k]] = True
            for name, want in judged(rows).items():
                self.assertAlmostEqual(fold["metrics"][name] / want, 1.0, delta=1e-6, msg="%s %s" % (fold["fold"], name))
            self.assertEqual(fold["rows"], int(rows.sum()))
            self.assertEqual(fold["step"], 10)
            for key in ("seconds_training", "seconds_evaluation", "seconds_prediction", "seconds_overhead"):
                self.assertGreaterEqual(fold[key], 0.0)
            self.assertIn("2024-01-0", fold["train"])  # its splits as times
        # eval --predictions on the walk's file says the same
        e = mbtest.run(["eval", "--predictions", self.path("run", "predictions.h5"), "--out", self.path("e.json")])
        self.assertExit(e, 0)
        with open(self.path("e.json")) as f:
            again = json.load(f)
        for name in ("mse", "ic", "baseline_mean_mse", "baseline_last_mse"):
            self.assertAlmostEqual(again[name], report["metrics"][name], places=12, msg=name)

    def test_a_panel_walks_by_month_and_reports_the_daily_ic(self):
        panel = self.path("panel.h5")
        self.assertExit(mbtest.run(["data", "synth-panel", "--out", panel, "--dates", "300",
                                    "--instruments", "30"]), 0)
        config = os.path.join(mbtest.SOURCE_DIR, "configs", "panel-gat.yaml")
        r = mbtest.run(["walk", "--config", config, "data.path=" + panel, "run.dir=" + self.path("pw"),
                        "walk.from=2020-08-01", "walk.every=month", "train.max_steps=4",
                        "model.hidden=8", "model.head_hidden=8", "model.graph.lookback=20",
                        "train.threads=1"], timeout=300)
        self.assertExit(r, 0, "fold 3/3 2020-10", "ic_ratio", "by fold:")
        with open(self.path("pw", "walk.json")) as f:
            report = json.load(f)
        self.assertIn("ic_ratio", report["metrics"])
        self.assertEqual([f["fold"] for f in report["folds"]], ["2020-08-01", "2020-09-01", "2020-10-01"])
        with h5py.File(self.path("pw", "predictions.h5"), "r") as f:
            days = pd.to_datetime(f["timestamps"][()], unit="s")
            self.assertEqual(f["present"].shape, f["predictions"].shape[:2])
        self.assertEqual(days.min(), pd.Timestamp("2020-08-01"))
        self.assertEqual(list(pd.Series(days).dt.to_period("M").value_counts().sort_index().index.astype(str)),
                         ["2020-08", "2020-09", "2020-10"])


class StopTest(Files):
    """A stop or a kill anywhere, then the same command: the uninterrupted walk's predictions."""

    LONGER = ["train.max_steps=60"]  # a fold long enough to be stopped inside, even when idle

    def start(self, run, np_=2):
        cmd = [mbtest.MPIEXEC, "-np", str(np_), "--oversubscribe", mbtest.BIN] + mbtest.with_device(
            ["walk", "--config", self.config(run)] + self.LONGER, np_)
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                universal_newlines=True, start_new_session=True)

    def wait_for(self, proc, text, timeout=120):
        lines, deadline = [], time.time() + timeout
        for line in proc.stdout:
            lines.append(line)
            if text in line:
                return "".join(lines)
            if time.time() > deadline:
                break
        raise AssertionError("never saw %r:\n%s" % (text, "".join(lines)))

    def ranks(self, run):
        found = subprocess.run(["pgrep", "-f", "megabatch walk --config " + self.path(run + ".yaml")],
                               stdout=subprocess.PIPE, universal_newlines=True).stdout.split()
        return [int(p) for p in found]

    def test_sigterm_and_kill_9_end_with_the_uninterrupted_predictions(self):
        reference = self.walk(*self.LONGER, run="reference", np_=2)
        self.assertExit(reference, 0)
        proc = self.start("run")
        self.wait_for(proc, "fold 2/3 2024-01-05: training")
        stopped = time.time()
        for pid in self.ranks("run"):
            if pid != proc.pid:
                os.kill(pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, 75, out)
        self.assertLess(time.time() - stopped, 30, "a stop ends the walk within seconds")
        self.assertIn("run the same command again", out)
        proc = self.start("run")  # the requeue: it goes on, then a kill -9 of the whole job
        self.wait_for(proc, "fold 3/3 2024-01-06: training")
        time.sleep(0.3)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        r = self.walk(*self.LONGER, np_=2)
        self.assertExit(r, 0)
        self.assertNotIn("fold 1/3 2024-01-04: training", r.output, "a done fold is kept")
        want, got = datasets(self.path("reference", "predictions.h5")), datasets(self.path("run", "predictions.h5"))
        self.assertEqual(sorted(want), sorted(got))
        for key in want:
            np.testing.assert_array_equal(got[key], want[key], err_msg=key)

    def test_a_second_walk_on_the_same_run_dir_is_refused(self):
        proc = self.start("run", np_=1)
        self.wait_for(proc, "fold 1/3")
        r = self.walk()
        self.assertExit(r, 2, "run.lock")
        proc.wait(timeout=120)
        self.assertEqual(proc.returncode, 0)


if __name__ == "__main__":
    unittest.main()
