"""The dataset tools, checked with h5py and numpy: synth-series (streams aggregate the finest
one, end rows point at completed bars, targets look ahead, the stated baselines are right, and
the planted signal is learnable), arith (correct problems, held-out set never in training),
text (bytes round-trip), and inspect."""
import os
import subprocess
import sys
import unittest

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import mbtest  # noqa: E402


class SynthSeriesTest(mbtest.TempDirTestCase):
    @classmethod
    def setUpClass(cls):
        import tempfile
        cls._dir = tempfile.TemporaryDirectory(prefix="mbtest-synth-")
        cls.file = os.path.join(cls._dir.name, "demo.h5")
        cls.result = mbtest.run(["data", "synth-series", "--out", cls.file, "--rows", "30000"])

    @classmethod
    def tearDownClass(cls):
        cls._dir.cleanup()

    def test_reports_the_baselines(self):
        self.assertExit(self.result, 0, "mean baseline", "last-value baseline", "oracle")

    def test_streams_aggregate_the_finest_and_ends_are_completed_bars(self):
        with h5py.File(self.file, "r") as f:
            m1 = f["series/m1/values"][()]
            times = f["timestamps"][()]
            self.assertEqual(sorted(f["series"]), ["h1", "h4", "m1", "m15", "m5"])
            t = (times - f["series/m1/timestamps"][0]) // 60  # finest row of each sample
            for name, p in (("m5", 5), ("h1", 60), ("h4", 240)):
                v = f["series/%s/values" % name][()]
                self.assertEqual(f["series/%s" % name].attrs["period_rows"], p)
                bars = m1[:len(v) * p].reshape(len(v), p, 4)
                np.testing.assert_allclose(v[:, 0], bars[:, -1, 0], rtol=1e-6)  # close
                np.testing.assert_allclose(v[:, 1], bars[:, :, 1].mean(1), rtol=1e-4, atol=1e-5)
                np.testing.assert_allclose(v[:, 2], bars[:, :, 2].max(1), rtol=1e-6)
                np.testing.assert_allclose(v[:, 3], bars[:, :, 3].min(1), rtol=1e-6)
                ends = f["samples/end/%s" % name][()]
                self.assertTrue(np.array_equal(ends, (t + 1) // p - 1))
                # The bar an end row points at closed at or before the sample's time.
                bar_close = f["series/%s/timestamps" % name][()][ends]
                self.assertTrue(np.all(bar_close <= times))
            self.assertTrue(np.array_equal(f["samples/end/m1"][()], t))
            h = f.attrs["horizon_rows"]
            self.assertTrue(np.array_equal(f["targets"][()], m1[t + h, 0]))

    def test_stated_baselines_match_a_recomputation(self):
        with h5py.File(self.file, "r") as f:
            y = f["targets"][()].astype("f8")
            close = f["series/m1/values"][()][f["samples/end/m1"][()], 0].astype("f8")
            a, b = [int(v) for v in f.attrs["val_samples"].strip("[)").split(",")]
            mean_mse = np.mean((y[a:b] - y[:a].mean()) ** 2)
            last_mse = np.mean((y[a:b] - close[a:b]) ** 2)
            self.assertAlmostEqual(f.attrs["baseline_mean_val_mse"], mean_mse, places=4)
            self.assertAlmostEqual(f.attrs["baseline_last_value_val_mse"], last_mse, places=4)
            self.assertLess(f.attrs["oracle_val_mse"], 0.1 * mean_mse)

    def test_the_planted_signal_is_learnable_from_a_short_window(self):
        # Ridge regression on the last 32 finest closes already beats both baselines by far
        # more than 30%: the demo's LSTM has a signal to find.
        with h5py.File(self.file, "r") as f:
            m1 = f["series/m1/values"][()][:, 0].astype("f8")
            ends = f["samples/end/m1"][()]
            y = f["targets"][()].astype("f8")
            base = min(f.attrs["baseline_mean_val_mse"], f.attrs["baseline_last_value_val_mse"])
            a, b = [int(v) for v in f.attrs["val_samples"].strip("[)").split(",")]
        keep = ends >= 31
        X = np.stack([m1[ends - k] for k in range(32)], 1)[keep]
        y, n = y[keep], len(ends) - keep.sum()
        a, b = a - n, b - n
        X = np.hstack([X, np.ones((len(X), 1))])
        w = np.linalg.solve(X[:a].T @ X[:a] + 1e-3 * np.eye(X.shape[1]), X[:a].T @ y[:a])
        mse = np.mean((X[a:b] @ w - y[a:b]) ** 2)
        self.assertLess(mse, 0.7 * base)

    def test_dtype_chunking_and_compression_options(self):
        out = self.path("c.h5")
        r = mbtest.run(["data", "synth-series", "--out", out, "--rows", "2000", "--features", "6", "--streams",
                        "m1:1,m10:10", "--dtype", "float16", "--chunk-rows", "256", "--compression", "gzip",
                        "--targets", "3"])
        self.assertExit(r, 0)
        with h5py.File(out, "r") as f:
            v = f["series/m1/values"]
            self.assertEqual(v.dtype, np.float16)
            self.assertEqual(v.shape, (2000, 6))
            self.assertEqual(v.chunks, (256, 6))
            self.assertEqual(v.compression, "gzip")
            self.assertEqual(f["targets"].shape[1], 3)
        self.assertExit(mbtest.run(["data", "synth-series", "--out", out, "--streams", "m1:x"]), 2, "--streams")
        self.assertExit(mbtest.run(["data", "synth-series"]), 2, "needs --out")


class TokenToolsTest(mbtest.TempDirTestCase):
    def test_arith_problems_are_correct_and_heldout_never_trains(self):
        out = self.path("a.h5")
        r = mbtest.run(["data", "arith", "--out", out, "--digits", "2", "--ops", "+-*/", "--problems", "5000",
                        "--heldout", "300", "--seed", "3"])
        self.assertExit(r, 0, "5000 problems", "300 held-out")
        with h5py.File(out, "r") as f:
            self.assertEqual(f["tokens"].attrs["vocab_size"], 128)
            self.assertEqual(f["tokens"].dtype, np.uint8)
            text = bytes(f["tokens"][()]).decode("ascii")
            prompts = [bytes(row).rstrip(b"\0").decode() for row in f["heldout/prompts"][()]]
            answers = [bytes(row).rstrip(b"\0").decode() for row in f["heldout/answers"][()]]
            ops = bytes(f["heldout/ops"][()]).decode()
        lines = text.split("\n")
        self.assertEqual(lines[-1], "")
        lines = lines[:-1]
        self.assertEqual(len(lines), 5000)

        def solve(prompt):
            for op in "+-*/":
                a, sep, b = prompt[:-1].partition(op)
                if sep and a.isdigit() and b.isdigit():
                    a, b = int(a), int(b)
                    return op, {"+": a + b, "-": a - b, "*": a * b, "/": a // max(b, 1)}[op]
            raise AssertionError(prompt)

        seen_ops = set()
        for line in lines:
            prompt, answer = line.split("=")
            op, value = solve(prompt + "=")
            seen_ops.add(op)
            self.assertEqual(int(answer), value, line)
            self.assertTrue(all(len(x) <= 2 for x in prompt.split(op)), line)
        self.assertEqual(seen_ops, set("+-*/"))
        self.assertEqual(len(set(prompts)), 300)
        training = {line.split("=")[0] + "=" for line in lines}
        for prompt, answer, op in zip(prompts, answers, ops):
            self.assertNotIn(prompt, training)
            self.assertEqual(solve(prompt), (op, int(answer)))

    def test_text_bytes_round_trip(self):
        src = self.path("in.txt")
        data = "héllo, world\n".encode("utf-8") * 50
        with open(src, "wb") as f:
            f.write(data)
        out = self.path("t.h5")
        self.assertExit(mbtest.run(["data", "text", "--in", src, "--out", out]), 0, "%d byte tokens" % len(data))
        with h5py.File(out, "r") as f:
            self.assertEqual(bytes(f["tokens"][()]), data)
            self.assertEqual(f["tokens"].attrs["vocab_size"], 256)
        self.assertExit(mbtest.run(["data", "text", "--in", self.path("none.txt"), "--out", out]), 2, "cannot read")

    def test_unknown_subcommand_suggests(self):
        self.assertExit(mbtest.run(["data", "arth"]), 2, "unknown subcommand 'arth'", "did you mean megabatch data arith?")
        self.assertExit(mbtest.run(["data"]), 2, "needs a subcommand")


class InspectTest(mbtest.TempDirTestCase):
    def test_describes_each_layout(self):
        s = self.path("s.h5")
        self.assertExit(mbtest.run(["data", "synth-series", "--out", s, "--rows", "3000", "--compression", "gzip",
                                    "--chunk-rows", "500"]), 0)
        r = mbtest.run(["inspect", s])
        self.assertExit(r, 0, "layout: series", "m1 [3000, 4]", "samples: 2753", "2024-01-01T04:00:00Z",
                        "/series/m1/values", "chunks [500, 4] gzip", "baseline_mean_val_mse")
        a = self.path("a.h5")
        self.assertExit(mbtest.run(["data", "arith", "--out", a, "--problems", "100", "--heldout", "10"]), 0)
        self.assertExit(mbtest.run(["inspect", a]), 0, "layout: tokens", "vocab_size 128", "/heldout/prompts")
        x = self.path("x.h5")
        with h5py.File(x, "w") as f:
            f["features"] = np.zeros((10, 4, 2), "f8")
            f["targets"] = np.zeros(10, "f4")
        self.assertExit(mbtest.run(["inspect", x]), 0, "layout: samples", "features [10, 4, 2] float64", "samples: 10")

    def test_checkpoints_and_non_hdf5(self):
        c = self.path("c.h5")
        with h5py.File(c, "w") as f:
            f.create_group("meta")
        # A /meta group marks a checkpoint; without its format attributes it is a corrupt one (exit 4).
        self.assertExit(mbtest.run(["inspect", c]), 4, "attribute 'format_version' is missing")
        t = self.write("t.txt", "hello")
        self.assertExit(mbtest.run(["inspect", t]), 3, "not an HDF5 file")


if __name__ == "__main__":
    unittest.main(verbosity=2)
