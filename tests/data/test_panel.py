"""The panel layout (dates x instruments x features) on files h5py writes: the batches
`megabatch data check --dump` gathers equal a numpy reference built from the same file (windows
of the per-date normalised values, the mask, the graph's return lookback with NaN where absent,
the targets); float64, gzip chunks, a bool mask, missing instruments and stream residency all
give the same batches, and such a file (float64, gzip, NaN where absent) trains on two
ranks with finite losses; and `megabatch data synth-panel` plants the structure it says it does."""
import json
import os
import sys
import unittest

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import mbtest  # noqa: E402

GZIP = dict(compression="gzip", compression_opts=4, shuffle=True)
WINDOW, LOOKBACK, FEATURE = 5, 12, 1
CONFIG = """data:
  path: {path}
  layout: panel
  canonical_shards: 4
  panel: {{window: %d, normalize: {normalize}, normalize_target: {normalize_target}}}
model: {{kind: gat, graph: {{k: 3, lookback: %d, feature: %d, min_periods: 4, sector_edges: true}}}}
train: {{global_batch: 8}}
""" % (WINDOW, LOOKBACK, FEATURE)


def write_panel(path, dates=240, instruments=9, features=3, dtype="float64", compress=False,
                bool_mask=True):
    """Random values with NaN where absent; instrument 4 lists at date 30."""
    rng = np.random.default_rng(11)
    values = rng.standard_normal((dates, instruments, features)) * 3 + 1
    mask = rng.random((dates, instruments)) > 0.1
    mask[:30, 4] = False
    values[~mask] = np.nan
    target = rng.standard_normal((dates, instruments)).astype("float32")
    target[~mask] = np.nan
    opts = dict(GZIP, chunks=(16, instruments, features)) if compress else {}
    with h5py.File(path, "w") as f:
        f.create_dataset("values", data=values.astype(dtype), **opts)
        f.create_dataset("mask", data=mask if bool_mask else mask.astype("uint8"),
                         **(dict(GZIP, chunks=(16, instruments)) if compress else {}))
        f.create_dataset("target", data=target, **(dict(GZIP, chunks=(16, instruments)) if compress else {}))
        f["time"] = 1_700_000_000 + 86400 * np.arange(dates)
        f["instruments"] = np.array([("I%02d" % i).encode() for i in range(instruments)])
        f["sector"] = np.arange(instruments) % 3
    return values, mask, target


def normalised(x, present, mode):
    """Per-date normalisation across the present instruments (numpy, float64). x: [T, N, ...]."""
    p = present.reshape(present.shape + (1,) * (x.ndim - 2))
    v = np.where(p, x, 0.0).astype(np.float64)
    if mode == "none":
        return v
    count = np.maximum(p.sum(1, keepdims=True), 1)
    if mode == "zscore":
        centred = (v - v.sum(1, keepdims=True) / count) * p
        std = np.sqrt((centred ** 2).sum(1, keepdims=True) / count)
        return np.where(std > 1e-12, centred / np.maximum(std, 1e-12), 0.0)
    key = np.where(p, v, np.inf)
    ranks = np.argsort(np.argsort(key, axis=1, kind="stable"), axis=1, kind="stable")
    return np.where(p, ((ranks + 0.5) / count - 0.5) * np.sqrt(12.0), 0.0)


def read_dump(path):
    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, obj: out.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None)
    return out


class PanelFilesTest(mbtest.TempDirTestCase):
    def check(self, data, normalize="zscore", normalize_target="none", extra=(), np_=1, name="d.h5"):
        cfg = self.write("c-%s.yaml" % name, CONFIG.format(path=data, normalize=normalize,
                                                           normalize_target=normalize_target))
        dump = self.path(name)
        args = ["data", "check", "--config", cfg, "--dump", dump, "--batches", "4"] + list(extra)
        r = mbtest.run(args) if np_ == 1 else mbtest.mpirun(np_, args)
        self.assertExit(r, 0, "layout: panel", "train samples")
        if np_ == 1:
            return read_dump(dump)
        root, ext = os.path.splitext(dump)
        return [read_dump("%s.rank%d%s" % (root, k, ext)) for k in range(np_)]

    def assert_batches_match_numpy(self, dump, values, mask, target, normalize="zscore",
                                   normalize_target="none", groups=None):
        norm = normalised(values, mask, normalize)
        targets = normalised(target, mask, normalize_target)
        groups = groups or ["train/%d" % b for b in range(4)] + ["val", "test"]
        for group in groups:
            idx = dump[group + "/sample_index"]
            self.assertGreater(len(idx), 0, group)
            self.assertTrue(np.all(idx >= LOOKBACK - 1), group)  # a date needs its history
            windows = np.stack([norm[t - WINDOW + 1:t + 1].transpose(1, 0, 2) for t in idx])
            np.testing.assert_allclose(dump[group + "/input0"], windows, rtol=1e-5, atol=1e-5,
                                       err_msg=group)
            np.testing.assert_array_equal(dump[group + "/input1"].astype(bool), mask[idx])
            lookback = np.stack([np.where(mask[t - LOOKBACK + 1:t + 1], norm[t - LOOKBACK + 1:t + 1, :, FEATURE],
                                          np.nan).T for t in idx])
            np.testing.assert_allclose(dump[group + "/input2"], lookback, rtol=1e-5, atol=1e-5,
                                       equal_nan=True, err_msg=group)
            np.testing.assert_array_equal(dump[group + "/input3"], np.tile(np.arange(9) % 3, (len(idx), 1)))
            np.testing.assert_allclose(dump[group + "/targets"], targets[idx], rtol=1e-5, atol=1e-5,
                                       err_msg=group)

    def test_h5py_float64_bool_mask_batches_equal_numpy(self):
        path = self.path("p.h5")
        values, mask, target = write_panel(path)
        with h5py.File(path, "r") as f:
            self.assertEqual(f["mask"].dtype, np.bool_)  # h5py writes an HDF5 enum
        dumps = {}
        for normalize in ("zscore", "rank", "none"):
            with self.subTest(normalize=normalize):
                dumps[normalize] = self.check(path, normalize=normalize, name=normalize + ".h5")
                self.assert_batches_match_numpy(dumps[normalize], values, mask, target, normalize)
        dump = self.check(path, normalize_target="zscore", name="ztarget.h5")
        self.assert_batches_match_numpy(dump, values, mask, target, normalize_target="zscore")
        # The comparison can fail: the same dates normalised another way differ.
        self.assertTrue(np.array_equal(dumps["rank"]["train/0/sample_index"],
                                       dumps["zscore"]["train/0/sample_index"]))
        self.assertFalse(np.allclose(dumps["rank"]["train/0/input0"], dumps["zscore"]["train/0/input0"],
                                     rtol=1e-3, atol=1e-3))

    def test_gzip_chunks_uint8_mask_and_float32_load_identically(self):
        plain, packed = self.path("plain.h5"), self.path("packed.h5")
        values, mask, target = write_panel(plain)
        write_panel(packed, dtype="float32", compress=True, bool_mask=False)
        with h5py.File(packed, "r") as f:
            self.assertEqual(f["values"].compression, "gzip")
        a = self.check(plain, name="a.h5")
        b = self.check(packed, name="b.h5")
        self.assertEqual(sorted(a), sorted(b))
        for key in a:
            np.testing.assert_allclose(a[key], b[key], rtol=1e-5, atol=1e-5, equal_nan=True, err_msg=key)
        self.assert_batches_match_numpy(b, values.astype("float32").astype("float64"), mask, target)

    def test_two_ranks_and_stream_residency_gather_the_same_dates(self):
        path = self.path("p.h5")
        values, mask, target = write_panel(path)
        single = self.check(path, name="one.h5")
        for extra, name in (((), "two.h5"),
                            (("data.residency=stream", "data.stream_chunk_items=7"), "stream.h5")):
            ranks = self.check(path, extra=extra, np_=2, name=name)
            for b in range(4):
                full = list(single["train/%d/sample_index" % b])
                shares = [list(d["train/%d/sample_index" % b]) for d in ranks]
                if not extra:  # stream residency visits chunks in another (canonical) order
                    self.assertEqual(sorted(full), sorted(shares[0] + shares[1]), (name, b))
            for d in ranks:
                self.assert_batches_match_numpy(d, values, mask, target,
                                                groups=["train/%d" % b for b in range(4)])

    def test_h5py_float64_gzip_file_with_missing_instruments_trains(self):
        # The loader's batches are checked above; here the same kind of file goes through
        # `megabatch train` on two ranks and `megabatch eval`: NaN where absent must not reach the
        # loss, the gradients or the IC.
        path = self.path("p.h5")
        write_panel(path, dtype="float64", compress=True)
        with h5py.File(path, "r") as f:
            self.assertEqual((f["values"].dtype, f["values"].compression), (np.float64, "gzip"))
            self.assertTrue(np.isnan(f["values"][()]).any())
        run = self.path("run")
        cfg = self.write("train.yaml", CONFIG.format(path=path, normalize="zscore", normalize_target="zscore")
                         + "run: {dir: %s, log_every: 1}\n" % run)
        r = mbtest.mpirun(2, ["train", "--config", cfg, "train.max_steps=12", "model.hidden=8",
                              "model.head_hidden=8", "model.heads=2"])
        self.assertExit(r, 0)
        with open(os.path.join(run, "metrics.jsonl")) as f:
            records = [json.loads(line) for line in f if line.strip()]
        losses = [m["loss"] for m in records if m["event"] == "train"]
        self.assertEqual(len(losses), 12)
        self.assertTrue(np.all(np.isfinite(losses)), losses)
        r = mbtest.run(["eval", "--checkpoint", run, "--split", "test"])
        self.assertExit(r, 0, "test_ic")
        self.assertNotIn("nan", r.stdout.lower())

    def test_inspect_describes_the_panel(self):
        path = self.path("p.h5")
        write_panel(path)
        r = mbtest.run(["inspect", path])
        self.assertExit(r, 0, "layout: panel", "240 dates of 9 instruments", "/mask", "/sector")


class SynthPanelTest(mbtest.TempDirTestCase):
    @classmethod
    def setUpClass(cls):
        import tempfile
        cls._shared = tempfile.TemporaryDirectory(prefix="mbpanel-")
        cls.data = os.path.join(cls._shared.name, "panel.h5")
        cls.result = mbtest.run(["data", "synth-panel", "--out", cls.data, "--dates", "400",
                                 "--instruments", "60", "--sectors", "6", "--seed", "3"])

    @classmethod
    def tearDownClass(cls):
        cls._shared.cleanup()

    def test_writes_a_panel_with_its_baselines(self):
        self.assertExit(self.result, 0, "panel layout", "oracle", "own-signal oracle")
        with h5py.File(self.data, "r") as f:
            self.assertEqual(f["values"].shape, (400, 60, 8))
            self.assertEqual(f["mask"].shape, (400, 60))
            self.assertFalse(f["mask"][-1].any())  # the last date's target is unknown
            mask = f["mask"][()].astype(bool)
            self.assertTrue(np.isnan(f["values"][()][~mask]).all())
            self.assertTrue(np.isfinite(f["values"][()][mask]).all())
            self.assertTrue(np.isfinite(f["target"][()][mask]).all())
            self.assertLess(mask.mean(), 0.99)
            oracle, own = f.attrs["oracle_val_ic"], f.attrs["own_signal_oracle_val_ic"]
        self.assertGreater(own, 0.05)
        self.assertGreater(oracle, own + 0.03)  # the sector's signal adds to the instrument's

    def test_sector_members_correlate_and_peers_predict(self):
        # Recomputed from the file alone: returns of one sector correlate, others do not; the
        # sector's mean signal predicts an instrument's next return beyond its own signal.
        with h5py.File(self.data, "r") as f:
            values, mask, target = f["values"][()], f["mask"][()].astype(bool), f["target"][()]
            sector = f["sector"][()]
        r = np.where(mask, values[:, :, 0], np.nan)
        r = np.nan_to_num(r - np.nanmean(r, axis=1, keepdims=True))[50:390]  # absent: the mean
        full = mask[50:390].mean(0) > 0.9  # listed over the whole span
        c = np.corrcoef(r[:, full].T)
        s = sector[full]
        same = (s[:, None] == s[None, :]) & ~np.eye(len(s), dtype=bool)
        across = ~same & ~np.eye(len(s), dtype=bool)
        self.assertGreater(c[same].mean(), 0.15)
        self.assertLess(c[across].mean(), 0.05)  # slightly negative: the day's mean is removed
        own, peers, y = [], [], []
        for t in range(50, 390):
            z = np.where(mask[t], values[t, :, 1], np.nan)
            peer = np.array([np.nanmean(z[sector == sector[i]]) for i in range(len(z))])
            use = mask[t]
            own.append(z[use] - z[use].mean())
            peers.append(peer[use] - peer[use].mean())
            y.append(target[t, use] - target[t, use].mean())
        own, peers, y = map(np.concatenate, (own, peers, y))
        x = np.stack([own, peers], 1)
        coef = np.linalg.lstsq(x, y, rcond=None)[0]
        self.assertGreater(coef[0], 0.1)
        self.assertGreater(coef[1], 0.5)  # the peer signal carries weight of its own


if __name__ == "__main__":
    unittest.main(verbosity=2)
