"""`megabatch plot PREDICTIONS.h5`: one PNG of a model's predictions against the truth, and what
`megabatch predict` writes for it (task, layout, time_unit, and a panel's /present).

Each kind of model trains a few steps on tiny data, predicts, and is drawn: series regression
(configs/demo.yaml), panel regression (configs/panel-gat.yaml, kind gat), and classification (an
mlp on a samples file with integer labels and timestamps in days). The errors: a file that is not
a predictions file, one whose datasets disagree, no h5py, and `predict` of a language model.
"""
import os
import struct
import sys
import tempfile
import unittest

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import mbtest  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
QUICK = ["train.max_steps=12", "train.eval_every=12", "run.log_every=6", "run.checkpoint_every=12",
         "train.precision=fp32", "model.hidden=8", "model.head_hidden=8"]
CLASSIFIER = """data: {{path: {data}, layout: samples, canonical_shards: 4, time_unit: days}}
model: {{kind: mlp, task: classification, hidden: 16, head_hidden: 16}}
train: {{global_batch: 32}}
optim: {{lr: 0.01}}
"""


def png_size(path):
    """(width, height) from the PNG's IHDR chunk, after checking its signature."""
    with open(path, "rb") as f:
        head = f.read(24)
    if head[:8] != PNG_MAGIC:
        raise AssertionError("%s is not a PNG" % path)
    return struct.unpack(">II", head[16:24])


class PredictionPlotTest(mbtest.TempDirTestCase):
    @classmethod
    def setUpClass(cls):
        cls._shared = tempfile.TemporaryDirectory(prefix="mbpredplot-")
        cls.series = cls.make("series.h5", ["synth-series", "--rows", "12000", "--features", "2",
                                            "--streams", "m1:1,m5:5,h1:60", "--seed", "3"])
        cls.panel = cls.make("panel.h5", ["synth-panel", "--dates", "260", "--instruments", "24",
                                          "--missing", "0.1", "--seed", "3"])
        rng = np.random.default_rng(3)
        x = rng.normal(size=(1200, 4)).astype("f4")
        cls.samples = os.path.join(cls._shared.name, "samples.h5")
        with h5py.File(cls.samples, "w") as f:
            f["features"] = x
            f["targets"] = np.argmax(x[:, :3] + 0.5 * rng.normal(size=(1200, 3)), 1).astype("i8")
            f["timestamps"] = 19000 + np.arange(1200, dtype="i8")  # days: 2022-01-08 on

    @classmethod
    def make(cls, name, args):
        path = os.path.join(cls._shared.name, name)
        r = mbtest.run(["data"] + args + ["--out", path])
        if r.returncode != 0:
            raise RuntimeError("could not make test data:\n%r" % r)
        return path

    @classmethod
    def tearDownClass(cls):
        cls._shared.cleanup()

    def train_and_predict(self, config, data, *overrides, choice=("--split", "all")):
        run_dir = self.path("run")
        r = mbtest.run(["train", "--config", config, "data.path=" + data, "run.dir=" + run_dir]
                       + list(overrides), timeout=120)
        self.assertExit(r, 0)
        predictions = self.path("p.h5")
        r = mbtest.run(["predict", "--checkpoint", run_dir, "--data", data, "--out", predictions]
                       + list(choice))
        self.assertExit(r, 0)
        return predictions

    def plot(self, predictions, *extra):
        r = mbtest.run(["plot", predictions] + list(extra), timeout=120)
        self.assertExit(r, 0)
        out = extra[-1] if extra else predictions[:-len(".h5")] + ".png"
        width, height = png_size(out)
        self.assertGreaterEqual((width, height), (900, 500))
        self.assertGreater(os.path.getsize(out), 30000, "an empty picture?")
        keep = os.environ.get("MB_KEEP_PLOTS")  # a folder to keep the pictures in, to look at
        if keep:
            os.makedirs(keep, exist_ok=True)
            with open(out, "rb") as src, open(os.path.join(keep, self.id().split(".")[-1] + ".png"),
                                              "wb") as dst:
                dst.write(src.read())
        return r

    def test_series_regression(self):
        p = self.train_and_predict(mbtest.config_path("demo.yaml"), self.series, *QUICK,
                                   "train.global_batch=32")
        with h5py.File(p, "r") as f:
            attrs = dict(f.attrs)
            self.assertEqual((attrs["task"], attrs["layout"], attrs["time_unit"]),
                             ("regression", "series", "s"))
            self.assertEqual(f["timestamps"].shape, f["predictions"].shape[:1])
            self.assertNotIn("present", f)
        out = self.path("elsewhere.png")
        r = self.plot(p, "--out", out)
        self.assertIn(out, r.output)
        self.assertFalse(os.path.exists(self.path("p.png")))

    def test_panel_regression(self):
        p = self.train_and_predict(mbtest.config_path("panel-gat.yaml"), self.panel, *QUICK,
                                   "train.epochs=0", "train.global_batch=8",
                                   "data.panel.window=5", "model.graph.lookback=20",
                                   "model.graph.min_periods=10", "model.graph.k=4",
                                   "model.heads=2",
                                   choice=("--from", "2020-03-02"))
        with h5py.File(p, "r") as f, h5py.File(self.panel, "r") as data:
            self.assertEqual((f.attrs["task"], f.attrs["layout"]), ("regression", "panel"))
            rows = f["sample_index"][()]
            present = f["present"][()]
            self.assertEqual(present.dtype, np.uint8)
            self.assertEqual(present.shape, f["predictions"].shape)
            np.testing.assert_array_equal(present, data["mask"][()][rows].astype(np.uint8))
            self.assertFalse(present.all(), "synth-panel --missing 0.1 leaves instruments out")
            np.testing.assert_array_equal(f["timestamps"][()], data["time"][()][rows])
            self.assertEqual(f.attrs["time_unit"], "s")
            self.assertEqual((f.attrs["split"], f.attrs["from"]), ("period", "2020-03-02"))
            self.assertGreater(len(rows), 100)
        self.plot(p)

    def test_classification(self):
        config = self.write("c.yaml", CLASSIFIER.format(data=self.samples))
        p = self.train_and_predict(config, self.samples, "train.max_steps=30",
                                   "train.eval_every=30", "run.checkpoint_every=30")
        with h5py.File(p, "r") as f:
            self.assertEqual((f.attrs["task"], f.attrs["layout"], f.attrs["time_unit"]),
                             ("classification", "samples", "days"))
            self.assertEqual(f["probabilities"].shape, (1200, 3))
        self.plot(p)

    def test_a_walk_forwards_folds_are_marked(self):
        # A stitched walk-forward file as h5py writes one: three folds of 30 days each.
        rng = np.random.default_rng(4)
        rows = 360
        y = rng.standard_normal(rows).astype("f4")
        p = (0.5 * y + rng.standard_normal(rows)).astype("f4")
        stamps = 1704067200 + 21600 * np.arange(rows, dtype="i8")  # 4 rows a day from 2024-01-01
        walk, plain = self.path("walk.h5"), self.path("plain.h5")
        for path in (walk, plain):
            with h5py.File(path, "w") as f:
                f["predictions"] = p
                f["targets"] = y
                f["timestamps"] = stamps
                f.attrs["time_unit"] = "s"
                if path == walk:
                    f["fold"] = np.repeat(np.arange(3), rows // 3)
                    f.attrs["fold_names"] = "2024-01-01\n2024-01-31\n2024-03-01\n"
        r = self.plot(walk)
        self.assertIn("fold boundaries: 2024-01-01 at 2024-01-01T00:00:00, 2024-01-31 at "
                      "2024-01-31T00:00:00, 2024-03-01 at 2024-03-01T00:00:00", r.stdout)
        r = self.plot(plain)
        self.assertNotIn("fold boundaries", r.output)
        # The lines are in the picture: its lower half (below the titles, which name the folds)
        # differs from the plain file's, which holds the same values but no /fold.
        import matplotlib.image  # noqa: E402  only this test reads pixels
        marked = matplotlib.image.imread(walk[:-3] + ".png")
        unmarked = matplotlib.image.imread(plain[:-3] + ".png")
        self.assertEqual(marked.shape, unmarked.shape)
        half = marked.shape[0] // 2
        self.assertGreater(np.abs(marked[half:] - unmarked[half:]).max(), 0.3, "no fold line drawn")

    def test_files_it_cannot_draw(self):
        # A data file is HDF5 but no predictions file.
        r = mbtest.run(["plot", self.samples])
        self.assertExit(r, 3, "is not a predictions file: it has no /predictions dataset",
                        "megabatch predict --checkpoint")
        self.assertExit(mbtest.run(["plot", self.path("missing.h5")]), 3, "missing.h5: no such file")
        text = self.write("notes.txt", "not HDF5\n")
        self.assertExit(mbtest.run(["plot", text]), 3, "is not an HDF5 file")
        # Datasets that disagree: the script says which.
        bad = self.path("bad.h5")
        with h5py.File(bad, "w") as f:
            f["predictions"] = np.zeros(5, "f4")
            f["targets"] = np.zeros(4, "f4")
        self.assertExit(mbtest.run(["plot", bad]), 3, "/predictions has 5 rows but /targets 4",
                        "cannot be drawn")
        # No h5py (a module of that name that fails to import first on the path).
        fake = self.path("fake")
        os.makedirs(fake)
        self.write("fake/h5py.py", "raise ImportError('no h5py here')\n")
        good = self.path("good.h5")
        with h5py.File(good, "w") as f:
            f["predictions"] = np.zeros(50, "f4")
            f["targets"] = np.ones(50, "f4")
        r = mbtest.run(["plot", good], env={"PYTHONPATH": fake})
        self.assertExit(r, 1, "h5py is not installed: apt-get install python3-h5py")
        self.assertFalse(os.path.exists(self.path("good.png")))

    def test_predict_refuses_a_language_model(self):
        tokens = self.path("arith.h5")
        self.assertExit(mbtest.run(["data", "arith", "--out", tokens, "--problems", "500",
                                    "--heldout", "10"]), 0)
        run_dir = self.path("gpt")
        self.assertExit(mbtest.run(["train", "--config", mbtest.config_path("arith-gpt.yaml"),
                                    "data.path=" + tokens, "run.dir=" + run_dir,
                                    "train.max_steps=2", "train.eval_every=2", "run.log_every=1",
                                    "run.checkpoint_every=2", "model.hidden=16", "model.layers=1",
                                    "train.global_batch=8", "train.precision=fp32"]), 0)
        r = mbtest.run(["predict", "--checkpoint", run_dir, "--data", tokens, "--out",
                        self.path("p.h5")])
        self.assertExit(r, 2, "gpt language model: use megabatch sample")
        self.assertFalse(os.path.exists(self.path("p.h5")))


if __name__ == "__main__":
    unittest.main()
