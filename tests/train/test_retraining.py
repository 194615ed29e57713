"""Retraining as data arrives: splits by time, warm starts, a resume that notices the data
changed, and eval/predict on a period.

The references are independent of megabatch: the split boundaries are numpy's searchsorted over
the file's /timestamps (read with h5py), a period's samples and its MSE come from the timestamps
and from `predict`'s own output, and a warm start's weights are the origin checkpoint's tensors
read with h5py. A grown file is `synth-series` with more rows, whose first rows equal the smaller
file's (checked here, since the resume check relies on it).
"""
import json
import os
import re
import shutil
import sys
import tempfile
import unittest

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import mbtest  # noqa: E402

SERIES = ["--features", "3", "--streams", "m1:1,m5:5", "--seed", "7"]
ROWS, GROWN_ROWS = 8000, 9000  # one minute a row from 2024-01-01T00:00Z
TRAIN_UNTIL, VAL_UNTIL = "2024-01-05", "2024-01-06T00:00:00Z"
TIME_CUTS = ["data.split.train_until=" + TRAIN_UNTIL, "data.split.val_until=" + VAL_UNTIL]
CONFIG = """run: {{dir: {run}, checkpoint_every: 10, log_every: 5}}
data:
  path: {data}
  layout: series
  streams: [{{name: m1, window: 16}}, {{name: m5, window: 8}}]
  canonical_shards: 6
  split: {{train_fraction: 0.8, val_fraction: 0.1, test_fraction: 0.1}}
model: {{kind: lstm, hidden: 8, layers: 1, head_hidden: 8}}
train: {{global_batch: 24, max_steps: 10, eval_every: 10, eval_batches: 2}}
"""


def unix(text):
    return int(np.datetime64(text.replace("Z", ""), "s").astype(np.int64))


def timestamps(path, name="timestamps"):
    with h5py.File(path, "r") as f:
        return f[name][()]


def report_splits(result, report):
    assert result.returncode == 0, repr(result)
    with open(report) as f:
        return [tuple(s) for s in json.load(f)["splits"]]


# Note [Content hash], written again from its description, over h5py reads of the file.
MASK = (1 << 64) - 1
GOLDEN, SEED = 0x9E3779B97F4A7C15, 0x6D65676162617463
HELD = {"float32": np.float32, "int32": np.int32, "int64": np.int64}


def fmix(x):
    x = x ^ (x >> np.uint64(33))
    x = x * np.uint64(0xFF51AFD7ED558CCD)
    x = x ^ (x >> np.uint64(33))
    x = x * np.uint64(0xC4CEB9FE1A85EC53)
    return x ^ (x >> np.uint64(33))


def content_hash(values, unit_rows):
    """The sum over units of `unit_rows` rows of fmix(s + fmix(fmix(SEED + k) + bytes)), s the
    sum of fmix(word_i + (i + 1) * GOLDEN) over the unit's little-endian words."""
    rows = values.shape[0]
    raw = np.ascontiguousarray(values).view(np.uint8).reshape(rows, -1)
    total = 0
    with np.errstate(over="ignore"):
        for k in range(-(-rows // unit_rows)):
            unit = raw[k * unit_rows:(k + 1) * unit_rows].reshape(-1)
            padded = np.zeros(-(-unit.size // 8) * 8, np.uint8)
            padded[:unit.size] = unit
            words = padded.view("<u8")
            steps = np.arange(1, words.size + 1, dtype=np.uint64) * np.uint64(GOLDEN)
            s = int(fmix(words + steps).sum(dtype=np.uint64))
            key = int(fmix(fmix(np.array([SEED + k], np.uint64)) + np.uint64(unit.size))[0])
            total += int(fmix(np.array([(s + key) & MASK], np.uint64))[0])
    return "%016x" % (total & MASK)


def bf16_bits(values):
    import torch  # the reference's rounding to bf16
    return torch.from_numpy(values).to(torch.bfloat16).view(torch.int16).numpy()


def fnv1a(data, h):
    for b in data:
        h = ((h ^ b) * 1099511628211) & MASK
    return h


def scheme_one_hash(values):
    """What a checkpoint written before every value counted holds: FNV-1a of a per-sample
    array, else of 32 evenly spaced rows."""
    rows, h = values.shape[0], SEED
    if values.ndim == 1 and rows <= 1 << 23:
        return "%016x" % fnv1a(values.tobytes(), h)
    width = min(rows, 64) if values.ndim == 1 else 1
    for k in range(32):
        row = min(rows - width, (rows - width) * k // 31)
        h = fnv1a(values[row:row + width].tobytes(), h)
    return "%016x" % h


def scheme_one(identity_yaml, data):
    """A checkpoint's identity as one from before every value counted would have it."""
    import yaml
    identity = yaml.safe_load(identity_yaml)
    assert identity.pop("scheme") == 2
    datasets = []
    with h5py.File(data, "r") as f:
        for d in identity["datasets"]:
            if "since_scheme" not in d:
                datasets.append({"path": d["path"], "dims": d["dims"], "type": d["type"],
                                 "hash": scheme_one_hash(f[d["path"]][()])})
    identity["datasets"] = datasets
    return yaml.safe_dump(identity)


def run_dir_state(run_dir):
    """What a refused resume must leave as it was: every file of the run but its log and its
    lock (which names the last process that held the run)."""
    state = {}
    for root, _, files in os.walk(run_dir):
        for name in files:
            if name not in ("train.log", "run.lock"):
                with open(os.path.join(root, name), "rb") as f:
                    state[os.path.relpath(os.path.join(root, name), run_dir)] = f.read()
    return state


class Shared(mbtest.TempDirTestCase):
    """Two series files made once: `small` and `grown` (the same rows, then 1000 more)."""

    @classmethod
    def setUpClass(cls):
        cls._shared = tempfile.TemporaryDirectory(prefix="mbretrain-")
        cls.small = os.path.join(cls._shared.name, "small.h5")
        cls.grown = os.path.join(cls._shared.name, "grown.h5")
        for path, rows in ((cls.small, ROWS), (cls.grown, GROWN_ROWS)):
            r = mbtest.run(["data", "synth-series", "--out", path, "--rows", str(rows)] + SERIES)
            if r.returncode != 0:
                raise RuntimeError("could not make test data:\n%r" % r)

    @classmethod
    def tearDownClass(cls):
        cls._shared.cleanup()

    def config(self, run="run", data=None):
        return self.write("c.yaml", CONFIG.format(run=self.path(run), data=data or self.small))

    def check(self, *overrides, data=None, np_=1):
        report = self.path("report.json")
        args = ["data", "check", "--config", self.config(data=data), "--report", report]
        r = mbtest.mpirun(np_, args + list(overrides)) if np_ > 1 else mbtest.run(args + list(overrides))
        return r, report

    def train(self, *overrides, run="run", data=None, np_=1, env=None):
        args = ["train", "--config", self.config(run, data)] + list(overrides)
        return mbtest.mpirun(np_, args, env=env) if np_ > 1 else mbtest.run(args, env=env)

    def start(self, *overrides, run="run", np_=1, data=None):
        r = self.train("train.max_steps=10", *overrides, run=run, np_=np_, data=data)
        self.assertExit(r, 0)

    def copy(self, name, source=None):
        path = self.path(name)
        shutil.copy(source or self.small, path)
        return path

    def restated(self, path, dataset, row, delta=1.0):
        with h5py.File(path, "r+") as f:
            f[dataset][row, 0] = f[dataset][row, 0] + delta


class TimeSplitTest(Shared):
    def test_grown_file_starts_with_the_small_files_rows(self):
        with h5py.File(self.small, "r") as a, h5py.File(self.grown, "r") as b:
            for name in ("timestamps", "targets", "series/m1/values", "series/m5/values",
                         "samples/end/m1"):
                n = a[name].shape[0]
                self.assertGreater(b[name].shape[0], n, name)
                np.testing.assert_array_equal(a[name][()], b[name][:n], err_msg=name)

    def test_cuts_are_where_the_timestamps_say(self):
        ts = timestamps(self.small)
        cut1, cut2 = unix(TRAIN_UNTIL), unix(VAL_UNTIL)
        r, report = self.check(*TIME_CUTS, "data.split.embargo=0")
        train, val, test = report_splits(r, report)
        self.assertEqual(train[1], np.searchsorted(ts, cut1, "left"))
        self.assertEqual(val, (np.searchsorted(ts, cut1), np.searchsorted(ts, cut2)))
        self.assertEqual(test, (np.searchsorted(ts, cut2), len(ts)))
        self.assertTrue(ts[train[1] - 1] < cut1 <= ts[val[0]], (train, val))
        # each split as sample numbers and as times
        self.assertRegex(r.output, r"train samples \[%d, %d\): \d+ samples, 2024-01-\d\dT" % train)
        self.assertIn("val   samples [%d, %d)" % val, r.output)
        self.assertIn("2024-01-05T00:00:00Z to 2024-01-05T23:59:00Z", r.output)
        self.assertIn("splits by time", r.output)

    def test_the_embargo_and_train_from_work_as_with_fractions(self):
        ts = timestamps(self.small)
        r, report = self.check(*TIME_CUTS, "data.split.train_from=2024-01-02T06:00")
        train, val, test = report_splits(r, report)
        self.assertEqual(train, (np.searchsorted(ts, unix("2024-01-02T06:00")),
                                 np.searchsorted(ts, unix(TRAIN_UNTIL))))
        cut2 = np.searchsorted(ts, unix(VAL_UNTIL))
        self.assertEqual(val[1], cut2)
        # one window (16 m1 rows, 8 m5 bars of 5 rows: 40 rows) between the splits
        self.assertGreaterEqual(val[0] - train[1], 16)
        self.assertGreaterEqual(test[0] - cut2, 16)

    def test_appended_rows_keep_train_and_val_and_grow_test(self):
        small = report_splits(*self.check(*TIME_CUTS))
        for np_ in (2, 3):  # the same splits on any number of ranks
            self.assertEqual(report_splits(*self.check(*TIME_CUTS, np_=np_)), small)
        grown = report_splits(*self.check(*TIME_CUTS, data=self.grown))
        self.assertEqual(small[:2], grown[:2])
        self.assertEqual(small[2][0], grown[2][0])
        self.assertEqual(grown[2][1] - small[2][1], GROWN_ROWS - ROWS)
        # with fractions, the same growth moves every split
        moved = report_splits(*self.check(data=self.grown))
        self.assertNotEqual(report_splits(*self.check())[0], moved[0])

    def test_a_time_cut_override_replaces_the_files_fractions(self):
        r = self.train(*TIME_CUTS, "train.max_steps=1", "--print-config")
        self.assertExit(r, 0, "data.split.train_until (an override) replaces the split fractions",
                        "train_until: " + TRAIN_UNTIL)
        self.assertNotIn("train_fraction", r.stdout)

    def test_both_ways_in_one_place_is_exit_2_naming_both(self):
        r = self.train("data.split.train_until=2024-01-05", "data.split.val_fraction=0.2")
        self.assertExit(r, 2, "data.split.train_until and data.split.val_fraction are both set")
        text = CONFIG.format(run=self.path("run"), data=self.small).replace(
            "test_fraction: 0.1}", "test_fraction: 0.1, train_until: 2024-01-05}")
        r = mbtest.run(["train", "--config", self.write("both.yaml", text)])
        self.assertExit(r, 2, "both.yaml: data.split.train_until and data.split.train_fraction are "
                              "both set")

    def test_bad_cuts_name_the_key_and_the_files_time_range(self):
        cases = [
            (["data.split.train_until=2023-06-01"], 3, "leaves the train split empty"),
            (["data.split.train_until=2024-02-01"], 3, "is after the last sample"),
            ([TIME_CUTS[0], "data.split.val_until=2024-03-01"], 3, "nothing is left to test on"),
            (["data.split.train_until=2024-01-05", "data.split.val_until=2024-01-05T00:05"], 3,
             "the val split is empty: the embargo"),
        ]
        for overrides, code, message in cases:
            r = self.train(*overrides)
            last = str(np.datetime64(int(timestamps(self.small)[-1]), "s")) + "Z"
            self.assertExit(r, code, message, "2024-01-01T", last)
            self.assertFalse(os.path.exists(self.path("run", "checkpoints", "latest")))
        for overrides, message in (
                (["data.split.train_until=2024-13-01"], "month 13 is not 1-12"),
                (["data.split.train_until=last tuesday"], "neither an integer nor an ISO-8601"),
                (["data.split.val_until=2024-01-05"], "data.split.train_until is not set"),
                (["data.split.train_until=2024-01-05", "data.split.val_until=2024-01-04"],
                 "must come before data.split.val_until")):
            self.assertExit(self.train(*overrides), 2, message)

    def test_a_file_without_timestamps_or_a_layout_without_time_is_refused(self):
        path = self.path("plain.h5")
        with h5py.File(path, "w") as f:
            f["features"] = np.zeros((50, 3), "float32")
            f["targets"] = np.zeros(50, "float32")
        text = "data: {path: %s, layout: samples, canonical_shards: 2}\nmodel: {kind: mlp}\n" % path
        r = mbtest.run(["data", "check", "--config", self.write("p.yaml", text),
                        "data.split.train_until=2024-01-05"])
        self.assertExit(r, 3, "has no timestamps (dataset /timestamps)", "split by time",
                        "data.split.train_fraction")
        for layout, kind in (("tokens", "gpt"), ("graphs", "gnn")):
            text = "data: {path: x.h5, layout: %s}\nmodel: {kind: %s}\n" % (layout, kind)
            r = mbtest.run(["train", "--config", self.write("t.yaml", text),
                            "data.split.train_until=2024-01-05", "--print-config"])
            self.assertExit(r, 2, "data.layout = %s has no timestamps" % layout,
                            "data.split.train_fraction")

    def test_time_units_and_date_forms(self):
        days = np.arange(19700, 19900)  # 2023-12-09 onward, one sample a day
        units = {
            "days": days,
            "ms": days * 86_400_000 + 3_600_000,
            "yyyymmdd": np.array([int(str(np.datetime64(int(d), "D")).replace("-", ""))
                                  for d in days]),
        }
        for unit, ts in units.items():
            path = self.path(unit + ".h5")
            with h5py.File(path, "w") as f:
                f["features"] = np.random.default_rng(0).standard_normal((len(ts), 3)).astype("float32")
                f["targets"] = np.zeros(len(ts), "float32")
                f["timestamps"] = ts.astype("int64")
            text = ("data: {path: %s, layout: samples, canonical_shards: 2, time_unit: %s, "
                    "split: {train_until: 2024-03-01, val_until: '2024-04-15T00:00:00+00:00'}}\n"
                    "model: {kind: mlp}\ntrain: {global_batch: 8}\n" % (path, unit))
            report = self.path(unit + ".json")
            r = mbtest.run(["data", "check", "--config", self.write(unit + ".yaml", text), "--report",
                            report])
            train, val, test = report_splits(r, report)
            cut1 = np.searchsorted(days, int(np.datetime64("2024-03-01", "D").astype(np.int64)))
            cut2 = np.searchsorted(days, int(np.datetime64("2024-04-15", "D").astype(np.int64)))
            self.assertEqual((train[1], val[1], test[1]), (cut1, cut2, len(ts)), unit)
            self.assertIn("2024-02-29", r.output, unit)  # the last train day, as a date
        text = "data: {path: %s, layout: samples, time_unit: days}\nmodel: {kind: mlp}\n" % path
        r = mbtest.run(["data", "check", "--config", self.write("d.yaml", text),
                        "data.split.train_until=2024-03-01T12:00"])
        self.assertExit(r, 2, "is not midnight UTC, but data.time_unit = days")

    def test_a_panel_splits_by_its_dates(self):
        path = self.path("panel.h5")
        dates, n = 120, 6
        time = 1_700_000_000 + 86400 * np.arange(dates)
        with h5py.File(path, "w") as f:
            f["values"] = np.random.default_rng(1).standard_normal((dates, n, 2)).astype("float32")
            f["target"] = np.zeros((dates, n), "float32")
            f["time"] = time
        text = ("data: {path: %s, layout: panel, canonical_shards: 2, panel: {window: 5}}\n"
                "model: {kind: gat, graph: {k: 2, lookback: 10, min_periods: 4}}\n"
                "train: {global_batch: 4}\n" % path)
        report = self.path("panel.json")
        cut = time[80]
        r = mbtest.run(["data", "check", "--config", self.write("panel.yaml", text), "--report", report,
                        "data.split.train_until=%d" % cut, "data.split.embargo=0"])
        train, val, test = report_splits(r, report)
        self.assertEqual((train[1], val), (80, (80, dates)), r.output)
        self.assertEqual(test[0], test[1])


class WarmStartTest(Shared):
    """A run from another run's weights."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.origin = os.path.join(cls._shared.name, "origin")
        text = CONFIG.format(run=cls.origin, data=cls.small)
        config = os.path.join(cls._shared.name, "origin.yaml")
        with open(config, "w") as f:
            f.write(text)
        r = mbtest.run(["train", "--config", config] + TIME_CUTS)
        if r.returncode != 0:
            raise RuntimeError("could not train the origin:\n%r" % r)
        cls.origin_file = os.path.join(cls.origin, "checkpoints", "best.h5")

    def meta(self, path, name):
        with h5py.File(path, "r") as f:
            return f["meta"].attrs[name]

    def test_weights_come_from_the_origin_and_the_rest_starts_afresh(self):
        for np_ in (1, 3):
            run = "w%d" % np_
            # lr 1e-30: a step leaves float32 weights as they were, so the run's first checkpoint
            # holds exactly the weights it started from
            r = self.train(*TIME_CUTS, "train.init_from=" + self.origin, "optim.lr=1e-30",
                           "train.max_steps=1", "optim.warmup_steps=0", "data.path=" + self.grown,
                           run=run, np_=np_)
            self.assertExit(r, 0, "a new run from the weights of " + self.origin_file,
                            "optimizer moments fresh")
            latest = self.path(run, "checkpoints", "step-00000001.h5")
            mine, origin = mbtest.checkpoint_params(latest), mbtest.checkpoint_params(self.origin_file)
            self.assertEqual(sorted(mine), sorted(origin))
            for name in origin:
                np.testing.assert_array_equal(mine[name], origin[name], err_msg=name)
            with h5py.File(latest, "r") as f:
                self.assertEqual(f["trainer"].attrs["step"], 1)
                self.assertEqual(f["meta"].attrs["optimizer_steps"], 1)
                origin_yaml = f["meta"].attrs["init_from"]
            self.assertIn("path: " + self.origin_file, origin_yaml)
            self.assertIn("step: 10", origin_yaml)
            self.assertRegex(origin_yaml, r"checksum: fnv1a64:[0-9a-f]{16}")
            self.assertIn('data_fingerprint: "small.h5|series|', origin_yaml)
            record = [m for m in mbtest.read_metrics(self.path(run)) if m["event"] == "init_from"]
            self.assertEqual(len(record), 1)
            self.assertEqual((record[0]["init_from"], record[0]["init_from_step"]),
                             (self.origin_file, 10))
            r = mbtest.run(["inspect", latest])
            self.assertExit(r, 0, "started from: {path: " + self.origin_file)

    def test_init_from_optimizer_keeps_the_moments(self):
        r = self.train(*TIME_CUTS, "train.init_from=" + self.origin_file, "optim.lr=1e-30",
                       "train.init_from_optimizer=true", "train.max_steps=1", run="opt")
        self.assertExit(r, 0, "optimizer moments kept")
        r = self.train(*TIME_CUTS, "train.init_from=" + self.origin_file, "optim.lr=1e-30",
                       "train.max_steps=1", run="fresh")
        self.assertExit(r, 0, "optimizer moments fresh")

        def second_moments(path):
            with h5py.File(path, "r") as f:
                return f["meta"].attrs["optimizer_steps"], np.concatenate(
                    [f["optimizer"][p]["exp_avg_sq"][()].ravel() for p in sorted(f["optimizer"])])

        steps, origin = second_moments(self.origin_file)
        kept_steps, kept = second_moments(self.path("opt", "checkpoints", "step-00000001.h5"))
        fresh_steps, fresh = second_moments(self.path("fresh", "checkpoints", "step-00000001.h5"))
        self.assertEqual((kept_steps, fresh_steps), (steps + 1, 1))
        # Both runs take the same first step (the same weights, seed and batch, so the same
        # gradient g): kept = beta2 * origin + (1 - beta2) g^2 and fresh = (1 - beta2) g^2.
        self.assertGreater(np.abs(origin).max(), 0)
        np.testing.assert_allclose(kept - fresh, 0.999 * origin, rtol=1e-4,
                                   atol=1e-6 * np.abs(origin).max())

    def test_a_model_that_does_not_match_is_exit_4_listing_every_difference(self):
        r = self.train(*TIME_CUTS, "train.init_from=" + self.origin, "model.hidden=4", run="bad")
        self.assertExit(r, 4, "train.init_from = " + self.origin_file, "differ in shape",
                        "train.init_from needs the model this config builds")
        self.assertEqual(r.output.count(" in the checkpoint but "), 9, r.output)  # all nine
        self.assertNotIn("more)", r.output)
        self.assertFalse(os.path.exists(self.path("bad", "checkpoints", "latest")))
        r = self.train("train.init_from=" + self.path("nowhere"), run="bad2")
        self.assertEqual(r.returncode, 4, repr(r))
        self.assertIn("nowhere", r.output)

    def test_a_resume_wins_over_init_from(self):
        r = self.train(*TIME_CUTS, "train.max_steps=5", run="own")
        self.assertExit(r, 0)
        r = self.train(*TIME_CUTS, "train.init_from=" + self.origin, "train.max_steps=10", run="own")
        self.assertExit(r, 0, "train.init_from = " + self.origin + " is ignored: this run resumes",
                        "resuming from")
        self.assertNotIn("a new run from the weights", r.output)
        with h5py.File(self.path("own", "checkpoints", "step-00000010.h5"), "r") as f:
            self.assertNotIn("init_from", f["meta"].attrs)


class DataContinuityTest(Shared):
    """A resume on the data its checkpoint trained on, on more of it, or on other data."""

    def test_appended_rows_with_time_splits_resume_on_1_2_and_3_ranks(self):
        # started on one count of ranks, resumed on another: as after a restart on fewer hosts
        for started, resumed in ((1, 1), (3, 2), (2, 3)):
            run = "grow%d%d" % (started, resumed)
            self.start(*TIME_CUTS, run=run, np_=started)
            r = self.train(*TIME_CUTS, "train.max_steps=20", run=run, np_=resumed, data=self.grown)
            self.assertExit(r, 0, "grew since", "rows appended; the splits by time held train and val",
                            "(+1000)")
            with h5py.File(self.path(run, "checkpoints", "step-00000020.h5"), "r") as f:
                self.assertIn("samples: %d" % len(timestamps(self.grown)), f["meta"].attrs["data_identity"])
                self.assertNotIn("data_changes", f["meta"].attrs)

    def test_a_resume_that_would_move_the_splits_stops_before_step_1(self):
        for np_, cuts in ((1, []), (3, []), (2, TIME_CUTS[:1])):  # fractions; val without val_until
            run = "moved%d" % np_
            self.start(*cuts, run=run, np_=np_)
            before = open(self.path(run, "metrics.jsonl")).read()
            r = self.train(*cuts, "train.max_steps=20", run=run, np_=np_, data=self.grown)
            self.assertExit(r, 3, "is not the data " + self.path(run, "checkpoints", "step-00000010.h5"),
                            "trained on: ", "the splits moved: ", "train.init_from=",
                            "run.allow_data_change=true", "put the file the run trained on back")
            if not cuts:
                self.assertIn("Fraction splits move whenever rows are added", r.output)
                self.assertIn("rows were appended (%d -> %d samples)" % (
                    len(timestamps(self.small)), len(timestamps(self.grown))), r.output)
            self.assertEqual(mbtest.crash_signs(r.output), [])
            for rank in range(np_):  # every rank ends with the message
                self.assertIn("[r%d/%d] [app] error" % (rank, np_), r.output)
            self.assertEqual(open(self.path(run, "metrics.jsonl")).read(), before)
            self.assertEqual(os.listdir(self.path(run, "checkpoints")).count("step-00000020.h5"), 0)

    def test_a_changed_file_is_refused_and_a_copy_elsewhere_is_not(self):
        self.start(*TIME_CUTS)
        copy = self.path("elsewhere.h5")
        shutil.copy(self.small, copy)
        r = self.train(*TIME_CUTS, "train.max_steps=12", data=copy)
        self.assertExit(r, 0)
        self.assertNotIn("is not the data", r.output)
        with h5py.File(copy, "r+") as f:  # a restated target in the middle of the train split
            f["targets"][1000] = f["targets"][1000] + 1
        r = self.train(*TIME_CUTS, "train.max_steps=14", data=copy)
        self.assertExit(r, 3, "the file changed (/targets holds other values)")

    def test_allow_data_change_resumes_and_records_it(self):
        self.start()
        r = self.train("train.max_steps=20", "run.allow_data_change=true", data=self.grown)
        self.assertExit(r, 0, "resuming anyway (run.allow_data_change = true)")
        records = [m for m in mbtest.read_metrics(self.path("run")) if m["event"] == "data_change"]
        self.assertEqual(len(records), 1)
        self.assertEqual(records[0]["step"], 10)
        self.assertIn("the splits moved", records[0]["change"])
        with h5py.File(self.path("run", "checkpoints", "step-00000020.h5"), "r") as f:
            self.assertIn("step 10: ", f["meta"].attrs["data_changes"])
        r = mbtest.run(["inspect", self.path("run", "checkpoints", "step-00000020.h5")])
        self.assertExit(r, 0, "data changes: accepted by run.allow_data_change")


class EveryValueTest(Shared):
    """Every value of every row counts (Note [Data continuity]): the identity against a reference
    of the hash written again in numpy, one restated value anywhere, and checkpoints of the scheme
    of before (sampled rows), which resume as they did."""

    def test_every_value_counts_on_1_2_and_3_ranks_as_the_reference_says(self):
        identities = {}
        for np_, dtype in ((1, "fp32"), (2, "fp32"), (3, "fp32"), (2, "bf16")):
            r, report = self.check("data.resident_dtype=" + dtype, np_=np_)
            self.assertExit(r, 0)
            with open(report) as f:
                identities[np_, dtype] = json.load(f)["identity"]
        self.assertEqual(identities[1, "fp32"], identities[2, "fp32"])
        self.assertEqual(identities[1, "fp32"], identities[3, "fp32"])
        fp32, bf16 = identities[1, "fp32"], identities[2, "bf16"]
        self.assertEqual(sorted(fp32), ["samples/end/m1", "samples/end/m5", "series/m1/values",
                                        "series/m5/values", "targets", "timestamps"])
        with h5py.File(self.small, "r") as f:
            for path, d in fp32.items():
                values = f[path][()].astype(HELD[d["held_as"]])
                self.assertEqual(d["unit_rows"], max(1, 4096 // (values.nbytes // len(values))))
                self.assertEqual(d["hash"], content_hash(values, d["unit_rows"]), path)
            for path in ("series/m1/values", "series/m5/values"):  # as data.resident_dtype holds them
                self.assertEqual(bf16[path]["held_as"], "bfloat16")
                self.assertEqual(bf16[path]["hash"],
                                 content_hash(bf16_bits(f[path][()]), bf16[path]["unit_rows"]), path)
            self.assertEqual(bf16["targets"], fp32["targets"])

    def test_one_restated_input_value_is_refused_on_1_and_3_ranks(self):
        r, report = self.check()
        train, val, _ = report_splits(r, report)
        with h5py.File(self.small, "r") as f:
            ends = f["samples/end/m1"][()]
        # a row in the embargo gap: in no window of train or val, so no rank holds it
        gap = (ends[train[1] - 1] + ends[val[0]] - 15) // 2
        self.assertLess(ends[train[1] - 1], gap)
        self.assertLess(gap, ends[val[0]] - 15)
        # a value of a training row (as a user measured: values[2000, 0]), and one in the gap
        for np_, row in ((3, 2000), (1, gap)):
            run = "restated%d_%d" % (np_, row)
            data = self.copy(run + ".h5")
            self.start(run=run, np_=np_, data=data)
            before = run_dir_state(self.path(run))
            self.restated(data, "series/m1/values", row)
            r = self.train("train.max_steps=20", run=run, np_=np_, data=data)
            self.assertExit(r, 3, "the file changed (/series/m1/values holds other values)",
                            "run.allow_data_change=true")
            self.assertEqual(mbtest.crash_signs(r.output), [])
            self.assertEqual(run_dir_state(self.path(run)), before)

    def test_a_grown_file_with_a_restated_old_value_is_changed(self):
        self.start(*TIME_CUTS)
        grown = self.copy("grown.h5", self.grown)
        self.restated(grown, "series/m5/values", 100, 0.25)
        r = self.train(*TIME_CUTS, "train.max_steps=20", data=grown)
        self.assertExit(r, 3, "/series/m5/values grew from 1600 to 1800 rows, and its first 1600 "
                              "rows hold other values")
        self.restated(grown, "series/m5/values", 100, -0.25)  # put back: appended again
        r = self.train(*TIME_CUTS, "train.max_steps=20", data=grown)
        self.assertExit(r, 0, "rows appended; the splits by time held train and val")

    def test_a_checkpoint_of_the_sampled_rows_scheme_resumes_as_it_did(self):
        self.start(*TIME_CUTS)
        checkpoint = os.path.join("checkpoints", "step-00000010.h5")
        with h5py.File(self.path("run", checkpoint), "r+") as f:
            f["meta"].attrs["data_identity"] = scheme_one(f["meta"].attrs["data_identity"],
                                                          self.small)
        for run in ("same", "grown", "restated"):
            shutil.copytree(self.path("run"), self.path(run))
        r = self.train(*TIME_CUTS, "train.max_steps=12", run="same")
        self.assertExit(r, 0)
        self.assertNotIn("is not the data", r.output)
        r = self.train(*TIME_CUTS, "train.max_steps=12", run="grown", data=self.grown)
        self.assertExit(r, 0, "rows appended; the splits by time held train and val")
        # the old scheme sees a restated target (it hashed them whole), not an input between
        # its sampled rows: as before
        data = self.copy("restated.h5")
        self.restated(data, "series/m1/values", 2000)
        with h5py.File(data, "r+") as f:
            f["targets"][1000] = f["targets"][1000] + 1
        r = self.train(*TIME_CUTS, "train.max_steps=12", run="restated", data=data)
        self.assertExit(r, 3, "the file changed (/targets holds other values)")
        self.assertNotIn("/series/m1/values", r.output)


class PeriodTest(Shared):
    """eval and predict on a period of a file that holds everything."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.run_dir = os.path.join(cls._shared.name, "trained")
        config = os.path.join(cls._shared.name, "trained.yaml")
        with open(config, "w") as f:
            f.write(CONFIG.format(run=cls.run_dir, data=cls.small))
        r = mbtest.run(["train", "--config", config] + TIME_CUTS)
        if r.returncode != 0:
            raise RuntimeError("could not train:\n%r" % r)

    def test_predict_and_eval_agree_on_a_period_on_any_rank_count(self):
        ts = timestamps(self.grown)
        start, end = unix("2024-01-06T12:00"), unix("2024-01-07")
        expected = np.flatnonzero((ts >= start) & (ts < end))
        out = self.path("p.h5")
        r = mbtest.run(["predict", "--checkpoint", self.run_dir, "--data", self.grown, "--out", out,
                        "--from", "2024-01-06T12:00", "--to", "2024-01-07"])
        self.assertExit(r, 0, "the period 2024-01-06T12:00:00Z to 2024-01-06T23:59:00Z")
        with h5py.File(out, "r") as f:
            np.testing.assert_array_equal(f["sample_index"][()], expected)
            np.testing.assert_array_equal(f["timestamps"][()], ts[expected])
            mse = float(np.mean((f["predictions"][()] - f["targets"][()]) ** 2))
        results = []
        for np_ in (1, 2):
            report = self.path("e%d.json" % np_)
            args = ["eval", "--checkpoint", self.run_dir, "--data", self.grown, "--from",
                    "2024-01-06T12:00", "--to", "2024-01-07", "--out", report]
            r = mbtest.mpirun(np_, args) if np_ > 1 else mbtest.run(args)
            self.assertExit(r, 0, "the period 2024-01-06T12:00:00Z to 2024-01-06T23:59:00Z "
                                  "(--from 2024-01-06T12:00 --to 2024-01-07, every split) (%d samples)"
                            % len(expected))
            with open(report) as f:
                results.append(json.load(f))
        for result in results:
            self.assertEqual(result["period_samples"], len(expected))
            self.assertEqual((result["first_time"], result["from"]),
                             ("2024-01-06T12:00:00Z", "2024-01-06T12:00"))
            self.assertAlmostEqual(result["period_mse"], mse, delta=1e-5 * max(1.0, mse))

    def test_a_period_within_a_split(self):
        ts = timestamps(self.small)
        r = mbtest.run(["eval", "--checkpoint", self.run_dir, "--split", "val", "--from",
                        "2024-01-05T12:00"])
        # the val split runs to val_until; the period is its second half
        count = int(np.sum((ts >= unix("2024-01-05T12:00")) & (ts < unix(VAL_UNTIL))))
        self.assertExit(r, 0, "within the val split) (%d samples)" % count)
        r = mbtest.run(["eval", "--checkpoint", self.run_dir, "--split", "val", "--from", "2024-01-06"])
        self.assertExit(r, 3, "no sample of the val split falls in --from 2024-01-06",
                        "the val split: 2024-01-05T")
        r = mbtest.run(["eval", "--checkpoint", self.run_dir, "--from", "tomorrow"])
        self.assertExit(r, 2, "--from: 'tomorrow' is neither an integer nor an ISO-8601")


class PrecisionResumeTest(Shared):
    def test_a_resume_repeats_what_the_start_measured(self):
        for ratio in ("1.6", "0.5:0.6"):  # the probe says no (no trial); the probe and a trial
            run = "auto" + ratio.replace(":", "_")
            env = {"MEGABATCH_FAULT_CPU_BF16_RATIO": ratio,
                   "MEGABATCH_FAULT_CPU_FLAGS": "avx512f avx512_bf16 amx_bf16"}
            r = self.train("train.precision=auto", "train.max_steps=5", run=run, env=env)
            self.assertExit(r, 0, "train.precision = auto: ")
            r = self.train("train.precision=auto", "train.max_steps=10", run=run, env=env)
            line = [l for l in r.output.splitlines() if "as this run chose on this CPU" in l]
            self.assertEqual(len(line), 1, r.output)
            self.assertNotIn("0.00x", line[0])
            expected = ("the probe's product in bf16: 1.60x of fp32's time; no trial step ran"
                        if ratio == "1.6" else "trial step in bf16: 0.60x of fp32's time")
            self.assertIn(expected, line[0])


if __name__ == "__main__":
    unittest.main(verbosity=2)
