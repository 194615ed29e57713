"""`megabatch eval --predictions FILE.h5`: a predictions file judged on its own, as a walk-forward's
stitched file is, against numpy, scipy.stats and pandas.

Every file here is written with h5py, so no model is trained and each test takes a second or two: a
data file whose targets the last known target reads before the file's first rows, and predictions
files of two folds with their own train means, of a panel, of a classifier, with only the three
required datasets, and the hostile and malformed ones that must end in exit code 3.
"""
import json
import os
import sys
import time
import unittest

import h5py
import numpy as np
import pandas as pd
from scipy import stats

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import mbtest  # noqa: E402

REL = 1e-6
N = 400          # samples of the data file
FIRST = 100      # the predictions file holds samples FIRST..N-1
HORIZON = 3
DAY = 86400
START = 1704067200  # 2024-01-01T00:00:00Z
FOLD_AT = 260       # the second fold starts at this sample


def close(test, got, want, what):
    test.assertLessEqual(abs(got - want), REL * max(1.0, abs(want)), "%s: %r vs %r" % (what, got, want))


def reference(p, y, mean, last):
    """numpy's and scipy's figures of predictions p of targets y, a per-row train mean and the last
    known targets (None: that baseline is not there)."""
    p, y = p.astype(np.float64), y.astype(np.float64)
    mse = np.mean((p - y) ** 2)
    nz = y != 0
    out = {"mse": mse, "mae": np.mean(np.abs(p - y)), "ic": stats.pearsonr(p, y)[0],
           "rank_ic": stats.spearmanr(p, y)[0],
           "hit_rate": np.mean(np.sign(p[nz]) == np.sign(y[nz])),
           "baseline_zero_mse": np.mean(y ** 2)}
    if mean is not None:
        out["baseline_mean_mse"] = np.mean((y - mean) ** 2)
    if last is not None:
        out["baseline_last_mse"] = np.mean((y - last) ** 2)
    for name in ("zero", "mean", "last"):
        if "baseline_%s_mse" % name in out:
            out["baseline_%s_skill" % name] = 1 - mse / out["baseline_%s_mse" % name]
    return out


class PredictionsFileTest(mbtest.TempDirTestCase):
    def setUp(self):
        super().setUp()
        rng = np.random.default_rng(11)
        self.targets = rng.standard_normal(N).astype(np.float32)
        self.data = self.path("data.h5")
        with h5py.File(self.data, "w") as f:
            f["targets"] = self.targets
        sample = np.arange(FIRST, N)
        self.sample = sample
        self.y = self.targets[sample]
        self.p = (0.6 * self.y + 0.8 * rng.standard_normal(len(sample))).astype(np.float32)
        self.times = (START + DAY * (sample - FIRST) // 4).astype(np.int64)  # 4 samples a day
        self.fold = (sample >= FOLD_AT).astype(np.int64)
        self.mean = np.where(self.fold == 0, 0.05, -0.12)

    def walk_file(self, name="walk.h5", **changes):
        """A walk's stitched file, as predict's format plus /fold and its attributes."""
        path = self.path(name)
        datasets = {"predictions": self.p, "targets": self.y, "sample_index": self.sample,
                    "timestamps": self.times, "train_mean": self.mean, "fold": self.fold}
        attrs = {"horizon": HORIZON, "data": self.data, "targets_dataset": "targets",
                 "time_unit": "s", "task": "regression", "layout": "series",
                 "fold_names": "2024-01-01\n2024-02-10\n",
                 "fold_periods": "2024-01-01 2024-02-10\n2024-02-10 2024-03-11\n",
                 "fold_checkpoints": "folds/2024-01-01/checkpoints/best.h5\n"
                                     "folds/2024-02-10/checkpoints/best.h5\n"}
        for key, value in changes.items():
            target = datasets if key in datasets else attrs
            if value is None:
                target.pop(key)
            else:
                target[key] = value
        with h5py.File(path, "w") as f:
            for key, value in datasets.items():
                f.create_dataset(key, data=value, compression="gzip")
            for key, value in attrs.items():
                f.attrs[key] = value
        return path

    def eval(self, path, *args, expect=0):
        r = mbtest.run(["eval", "--predictions", path] + list(args), timeout=60)
        self.assertEqual(r.returncode, expect, repr(r))
        return r

    def judged(self, path, *args):
        out = self.path("judged.json")
        r = self.eval(path, "--out", out, *args)
        with open(out) as f:
            return json.load(f), r

    def test_metrics_and_every_baseline_equal_numpy(self):
        got, r = self.judged(self.walk_file())
        last = self.targets[self.sample - HORIZON]  # the first rows' come from the data file
        want = reference(self.p, self.y, self.mean, last)
        for name, value in want.items():
            close(self, got[name], value, name)
        self.assertEqual(got["samples"], len(self.y))
        self.assertEqual(got["folds"], 2)
        self.assertIn("train mean (each fold's)", r.stdout)
        self.assertIn("last known target (3 ahead)", r.stdout)
        self.assertNotIn("left out", r.stdout)

    def test_by_fold_and_by_week_tables_equal_pandas(self):
        walk = self.walk_file()
        frame = pd.DataFrame({"p": self.p.astype(np.float64), "y": self.y.astype(np.float64),
                              "mean": self.mean, "last": self.targets[self.sample - HORIZON],
                              "fold": np.array(["2024-01-01", "2024-02-10"])[self.fold],
                              "week": pd.to_datetime(self.times, unit="s").to_period("W").astype(str)})
        for by, column in (("fold", "fold"), ("week", "week")):
            out = self.path("%s.csv" % by)
            r = self.eval(walk, "--by", by, "--out", out)
            got = pd.read_csv(out, dtype={column if by == "fold" else "period": str})
            got = got.set_index(got.columns[0])
            self.assertEqual(list(got.index), sorted(frame[column].unique()))
            self.assertGreaterEqual(len(got), 2)
            for label, part in frame.groupby(column):
                want = reference(part["p"].values, part["y"].values, part["mean"].values,
                                 part["last"].values.astype(np.float64))
                row = got.loc[label]
                self.assertEqual(row["samples"], len(part))
                for name, value in want.items():
                    close(self, row[name], value, "%s in %s %s" % (name, by, label))
                self.assertIn("  %s " % label, r.stdout)
            beaten = int((got["baseline_last_skill"] > 0).sum())
            self.assertIn("the model beat the last known target in %d of %d %ss" % (beaten, len(got), by),
                          r.stdout)
        # Without --by the fold table is printed all the same.
        r = self.eval(walk)
        self.assertIn("by fold:", r.stdout)
        self.assertIn("the model beat the zero forecast in", r.stdout)

    def test_a_file_with_only_the_three_required_datasets(self):
        path = self.path("bare.h5")
        with h5py.File(path, "w") as f:
            f["predictions"] = self.p
            f["targets"] = self.y
            f["timestamps"] = self.times
        got, r = self.judged(path)
        for name, value in reference(self.p, self.y, None, None).items():
            close(self, got[name], value, name)
        self.assertNotIn("baseline_mean_mse", got)
        self.assertNotIn("baseline_last_mse", got)
        self.assertIn("train mean: left out, %s has no /train_mean" % path, r.stdout)
        self.assertIn("last known target: left out, %s does not say how far its targets look ahead" % path,
                      r.stdout)
        self.assertNotIn("by fold", r.stdout)
        r = self.eval(path, "--by", "day")  # the time unit defaults to seconds
        self.assertIn("2024-01-01 ", r.stdout)

    def test_last_known_from_the_files_rows_then_the_data_file_or_left_out_with_why(self):
        # The data file is read for the samples before the file's first rows only: its later
        # targets are wrong on purpose, and the file's own rows are used for those.
        mixed = self.path("mixed.h5")
        with h5py.File(mixed, "w") as f:
            f["targets"] = np.where(np.arange(N) < FIRST, self.targets, 999.0)
        got, _ = self.judged(self.walk_file(data=mixed))
        want = reference(self.p, self.y, self.mean, self.targets[self.sample - HORIZON])
        close(self, got["baseline_last_mse"], want["baseline_last_mse"], "last known")
        # No readable data file: left out, saying why.
        got, r = self.judged(self.walk_file(data="/nonexistent/data.h5"))
        self.assertNotIn("baseline_last_mse", got)
        self.assertIn("last known target: left out, the targets 3 samples before the first rows are not "
                      "in the file, and /nonexistent/data.h5: no such file", r.stdout)
        got, r = self.judged(self.walk_file(data=None))
        self.assertIn("does not name its data file (attribute data)", r.stdout)
        # A data file whose targets are shorter than the samples named.
        short = self.path("short.h5")
        with h5py.File(short, "w") as f:
            f["targets"] = self.targets[:50]
        _, r = self.judged(self.walk_file("short-walk.h5", data=short))
        self.assertIn("expected at least 100 rows of 1 term(s), found [50]", r.stdout)

    def test_a_panel_file_matches_numpy_per_date(self):
        rng = np.random.default_rng(3)
        dates, names = 60, 12
        y = rng.standard_normal((dates, names))
        p = 0.3 * y + rng.standard_normal((dates, names))
        present = (rng.random((dates, names)) > 0.2).astype(np.uint8)
        present[7] = 0  # a date without instruments counts as a date
        mean = np.full(dates, 0.01)
        path = self.path("panel.h5")
        with h5py.File(path, "w") as f:
            f["predictions"], f["targets"], f["present"], f["train_mean"] = p, y, present, mean
            f["timestamps"] = START + DAY * np.arange(dates)
            f.attrs["layout"] = "panel"
        daily, ranked, mse, zero, base, hits, counted = [], [], [], [], [], 0, 0
        for d in range(dates):
            on = present[d].astype(bool)
            pd_, yd = p[d][on], y[d][on]
            if not on.any():
                daily.append(0.0), ranked.append(0.0), mse.append(0.0), zero.append(0.0), base.append(0.0)
                continue
            daily.append(np.corrcoef(pd_, yd)[0, 1])
            ranked.append(stats.spearmanr(pd_, yd)[0])
            mse.append(np.mean((pd_ - yd) ** 2)), zero.append(np.mean(yd ** 2))
            base.append(np.mean((yd - 0.01) ** 2))
            hits += int(np.sum(np.sign(pd_) == np.sign(yd)))
            counted += len(yd)
        daily = np.array(daily)
        want = {"ic": daily.mean(), "ic_ratio": daily.mean() / daily.std(ddof=1), "mse": np.mean(mse),
                "rank_ic": np.mean(ranked),
                "hit_rate": hits / counted, "baseline_zero_mse": np.mean(zero),
                "baseline_mean_mse": np.mean(base)}
        got, r = self.judged(path)
        for name, value in want.items():
            close(self, got[name], value, name)
        self.assertNotIn("last known", r.stdout)  # as eval: a panel has none

    def test_a_classifier_file(self):
        rng = np.random.default_rng(5)
        logits = rng.standard_normal((300, 3))
        labels = np.argmax(logits + rng.standard_normal((300, 3)), 1).astype(np.int64)
        path = self.path("classes.h5")
        with h5py.File(path, "w") as f:
            f["predictions"], f["targets"] = logits, labels
            f.attrs["task"] = "classification"
        got, r = self.judged(path)
        log_p = logits - np.log(np.exp(logits).sum(1, keepdims=True))
        close(self, got["accuracy"], np.mean(np.argmax(logits, 1) == labels), "accuracy")
        close(self, got["log_loss"], -np.mean(log_p[np.arange(300), labels]), "log_loss")
        self.assertIn("majority class and class frequencies: left out", r.stdout)

    def test_bad_input_ends_in_exit_3_naming_file_dataset_expected_and_found(self):
        def bad(name, expected, build):
            path = self.path(name)
            with h5py.File(path, "w") as f:
                build(f)
            start = time.monotonic()
            r = self.eval(path, expect=3)
            for fragment in (path,) + expected:
                self.assertIn(fragment, r.output, repr(r))
            self.assertLess(time.monotonic() - start, 30)

        def pair(f, p=None, y=None):
            f["predictions"] = self.p if p is None else p
            f["targets"] = self.y if y is None else y

        bad("no-targets.h5", ("dataset /targets is missing",), lambda f: f.create_dataset("predictions", data=self.p))
        bad("lengths.h5", ("dataset /targets: expected shape [300] (as /predictions), found [299]",),
            lambda f: pair(f, y=self.y[:-1]))
        bad("rank.h5", ("dataset /predictions: expected shape [M] or [M, K], found 3 dimension(s) [300, 1, 1]",),
            lambda f: pair(f, p=self.p.reshape(-1, 1, 1), y=self.y.reshape(-1, 1, 1)))
        bad("dtype.h5", ("dataset /targets: expected numbers, found string",),
            lambda f: pair(f, y=np.array([b"x"] * len(self.y))))
        # Huge dims in a tiny file: never written (a fill value), and chunked, compressed, unwritten.
        bad("huge.h5", ("dataset /predictions declares [1000000000000] float64", "stores 0 bytes"),
            lambda f: (f.create_dataset("predictions", shape=(10 ** 12,), dtype="f8"),
                       f.create_dataset("targets", shape=(10 ** 12,), dtype="f8")))
        bad("huge-chunked.h5", ("dataset /predictions declares [1000000000000, 4] float32",
                                "compressed bytes, more than compression can expand to"),
            lambda f: (f.create_dataset("predictions", shape=(10 ** 12, 4), dtype="f4", chunks=(1024, 4),
                                        compression="gzip"),
                       f.create_dataset("targets", data=np.zeros((10, 4)))))
        bad("order.h5", ("dataset /sample_index: expected non-negative sample numbers, strictly increasing",
                         "found 5 at row 2 after 7"),
            lambda f: (pair(f, p=self.p[:4], y=self.y[:4]), f.create_dataset("sample_index", data=[3, 7, 5, 9])))
        bad("fold.h5", ("dataset /fold: row 1 is in fold 2, expected 0..1",),
            lambda f: (pair(f, p=self.p[:3], y=self.y[:3]), f.create_dataset("fold", data=[0, 2, 1]),
                       f.attrs.create("fold_names", "a\nb\n")))
        bad("mean.h5", ("dataset /train_mean: expected shape [300] or [300, 1]", "found [299]"),
            lambda f: (pair(f), f.create_dataset("train_mean", data=np.zeros(len(self.y) - 1))))
        bad("unit.h5", ("attribute 'time_unit' is 'fortnights', expected s, ms, us, ns, days or yyyymmdd",),
            lambda f: (pair(f), f.attrs.create("time_unit", "fortnights")))
        bad("nan.h5", ("dataset /predictions: row 4 holds a value that is not finite",),
            lambda f: pair(f, p=np.where(np.arange(len(self.p)) == 4, np.nan, self.p)))
        text = self.write("notes.h5", "not HDF5\n")
        r = self.eval(text, expect=3)
        self.assertIn(text + ": not an HDF5 file", r.output)
        r = self.eval(self.path("absent.h5"), expect=3)
        self.assertIn("absent.h5: no such file", r.output)
        r = self.eval(self.walk_file(fold=None), "--by", "fold", expect=3)
        self.assertIn("has no /fold dataset, so its rows cannot be grouped by fold", r.output)
        r = mbtest.run(["eval", "--predictions", self.walk_file(), "--split", "test"])
        self.assertExit(r, 2, "--split applies to evaluating a checkpoint")


if __name__ == "__main__":
    unittest.main()
