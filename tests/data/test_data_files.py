"""Files written by h5py load, and the batches `megabatch data check --dump` gathers from them
equal numpy slices of the same file: series windows, samples rows, token windows. Chunked and
gzip-compressed files give byte-identical batches to contiguous ones, and the shares of 2 ranks
merge into the 1-rank batches."""
import os
import sys
import unittest

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import mbtest  # noqa: E402

GZIP = dict(compression="gzip", compression_opts=4, shuffle=True)


def write_series(path, rows=3000, compress=False, dtype="float32"):
    """Three streams (periods 1, 5, 15), 4 features, sample i ends at finest row 40 + i."""
    rng = np.random.default_rng(7)
    opts = GZIP if compress else {}
    t = np.arange(40, rows)
    with h5py.File(path, "w") as f:
        for name, period in (("m1", 1), ("m5", 5), ("m15", 15)):
            values = rng.standard_normal((rows // period, 4)).astype(dtype)
            f.create_dataset("series/%s/values" % name, data=values,
                             chunks=(97, 4) if compress else None, **opts)
            f.create_dataset("samples/end/%s" % name, data=(t + 1) // period - 1,
                             chunks=(101,) if compress else None, **opts)
        f.create_dataset("targets", data=rng.standard_normal(len(t)).astype("float32"), **opts)
        f.create_dataset("timestamps", data=1_700_000_000 + 60 * t, **opts)


def write_samples(path, n=600, compress=False):
    rng = np.random.default_rng(3)
    opts = dict(GZIP, chunks=(64, 5, 3)) if compress else {}
    with h5py.File(path, "w") as f:
        f.create_dataset("features", data=rng.standard_normal((n, 5, 3)).astype("float64"), **opts)
        f.create_dataset("targets", data=rng.standard_normal((n, 2)).astype("float32"),
                         **(dict(GZIP, chunks=(64, 2)) if compress else {}))


def write_tokens(path, n=20000, compress=False):
    rng = np.random.default_rng(5)
    opts = dict(GZIP, chunks=(1000,)) if compress else {}
    with h5py.File(path, "w") as f:
        d = f.create_dataset("tokens", data=rng.integers(0, 1000, n).astype("uint16"), **opts)
        d.attrs["vocab_size"] = 1000


CONFIGS = {
    "series": """data:
  path: {path}
  layout: series
  streams: [{{name: m1, window: 30}}, {{name: m5, window: 8}}, {{name: m15, window: 4}}]
  canonical_shards: 8
train: {{global_batch: 32}}
""",
    "samples": """data: {{path: {path}, layout: samples, canonical_shards: 8}}
train: {{global_batch: 32}}
""",
    "tokens": """data: {{path: {path}, layout: tokens, context: 16, canonical_shards: 8}}
model: {{kind: gpt}}
train: {{global_batch: 32}}
""",
}

WRITERS = {"series": write_series, "samples": write_samples, "tokens": write_tokens}


def read_dump(path):
    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, obj: out.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None)
    return out


class DataFilesTest(mbtest.TempDirTestCase):
    def check(self, layout, data_path, extra=(), np_=1, dump_name="dump.h5"):
        cfg = self.write(layout + ".yaml", CONFIGS[layout].format(path=data_path))
        dump = self.path(dump_name)
        args = ["data", "check", "--config", cfg, "--dump", dump, "--batches", "5"] + list(extra)
        r = mbtest.run(args) if np_ == 1 else mbtest.mpirun(np_, args)
        self.assertExit(r, 0, "train samples", "load:")
        if np_ == 1:
            return read_dump(dump)
        root, ext = os.path.splitext(dump)
        return [read_dump("%s.rank%d%s" % (root, k, ext)) for k in range(np_)]

    def assert_same(self, a, b):
        self.assertEqual(sorted(a), sorted(b))
        for key in a:
            self.assertEqual(a[key].dtype, b[key].dtype, key)
            self.assertTrue(np.array_equal(a[key], b[key]), key)

    def test_series_windows_equal_numpy_slices(self):
        path = self.path("s.h5")
        write_series(path)
        dump = self.check("series", path)
        windows = {"m1": 30, "m5": 8, "m15": 4}
        with h5py.File(path, "r") as f:
            for group in ["train/%d" % b for b in range(5)] + ["val", "test"]:
                idx = dump[group + "/sample_index"]
                self.assertGreater(len(idx), 0)
                for k, (name, w) in enumerate(windows.items()):
                    values = f["series/%s/values" % name][()]
                    ends = f["samples/end/%s" % name][()]
                    expected = np.stack([values[ends[i] - w + 1:ends[i] + 1] for i in idx])
                    self.assertTrue(np.array_equal(dump["%s/input%d" % (group, k)], expected), (group, name))
                self.assertTrue(np.array_equal(dump[group + "/targets"], f["targets"][()][idx]))

    def test_float16_series_loads_as_its_float32_values(self):
        path = self.path("s16.h5")
        write_series(path, dtype="float16")
        dump = self.check("series", path)
        with h5py.File(path, "r") as f:
            values = f["series/m1/values"][()].astype("float32")
            ends = f["samples/end/m1"][()]
        idx = dump["train/0/sample_index"]
        expected = np.stack([values[ends[i] - 29:ends[i] + 1] for i in idx])
        self.assertTrue(np.array_equal(dump["train/0/input0"], expected))

    def test_compressed_and_chunked_files_load_identically(self):
        for layout, writer in WRITERS.items():
            plain, packed = self.path(layout + "-plain.h5"), self.path(layout + "-gzip.h5")
            writer(plain)
            writer(packed, compress=True)
            with h5py.File(packed, "r") as f:
                name = {"series": "series/m1/values", "samples": "features", "tokens": "tokens"}[layout]
                self.assertEqual(f[name].compression, "gzip")
                self.assertIsNotNone(f[name].chunks)
            a = self.check(layout, plain, dump_name=layout + "-a.h5")
            b = self.check(layout, packed, dump_name=layout + "-b.h5")
            self.assert_same(a, b)

    def test_samples_rows_and_token_windows(self):
        path = self.path("x.h5")
        write_samples(path)
        dump = self.check("samples", path)
        with h5py.File(path, "r") as f:
            x, y = f["features"][()], f["targets"][()]
        idx = dump["train/2/sample_index"]
        self.assertTrue(np.array_equal(dump["train/2/input0"], x[idx].astype("float32")))
        self.assertTrue(np.array_equal(dump["train/2/targets"], y[idx]))

        path = self.path("t.h5")
        write_tokens(path)
        dump = self.check("tokens", path)
        with h5py.File(path, "r") as f:
            tokens = f["tokens"][()].astype("int64")
        for group in ("train/0", "val", "test"):
            idx = dump[group + "/sample_index"]
            windows = np.stack([tokens[i * 16:i * 16 + 17] for i in idx])
            self.assertTrue(np.array_equal(dump[group + "/input0"], windows[:, :16]), group)
            self.assertTrue(np.array_equal(dump[group + "/targets"], windows[:, 1:]), group)

    def test_two_rank_shares_merge_into_the_one_rank_batches(self):
        path = self.path("s.h5")
        write_series(path)
        single = self.check("series", path, dump_name="one.h5")
        ranks = self.check("series", path, np_=2, dump_name="two.h5")
        for b in range(5):
            full = list(single["train/%d/sample_index" % b])
            shares = [list(d["train/%d/sample_index" % b]) for d in ranks]
            self.assertEqual(sorted(full), sorted(shares[0] + shares[1]), b)
            for share in shares:  # each share keeps the global order of its items
                self.assertEqual([i for i in full if i in set(share)], share)
            merged = {int(i): k for k, d in enumerate(ranks) for i in d["train/%d/sample_index" % b]}
            for j, i in enumerate(full):
                d = ranks[merged[int(i)]]
                pos = list(d["train/%d/sample_index" % b]).index(i)
                self.assertTrue(np.array_equal(d["train/%d/input0" % b][pos], single["train/%d/input0" % b][j]))
        # Eval parts: rank 0 then rank 1 tile the split.
        val = np.concatenate([d["val/sample_index"] for d in ranks])
        self.assertTrue(np.array_equal(np.diff(val), np.ones(len(val) - 1, dtype=val.dtype)))

    def test_mapped_and_read_rows_agree_with_a_userblock(self):
        # Zero-copy host residency maps the file at the dataset's offset; a userblock shifts it.
        path = self.path("ub.h5")
        rng = np.random.default_rng(9)
        with h5py.File(path, "w", userblock_size=4096) as f:
            f["features"] = rng.standard_normal((600, 5, 3)).astype("float32")
            f["targets"] = rng.standard_normal(600).astype("float32")
        mapped = self.check("samples", path, dump_name="mapped.h5")
        read = self.check("samples", path, extra=["data.host_mmap=false"], dump_name="read.h5")
        self.assert_same(mapped, read)
        with h5py.File(path, "r") as f:
            x = f["features"][()]
        self.assertTrue(np.array_equal(mapped["train/0/input0"], x[mapped["train/0/sample_index"]]))

    def test_bf16_and_stream_residency(self):
        path = self.path("s.h5")
        write_series(path)
        base = self.check("series", path, dump_name="base.h5")
        bf16 = self.check("series", path, extra=["data.resident_dtype=bf16"], dump_name="bf16.h5")
        diff = np.abs(bf16["train/0/input0"] - base["train/0/input0"])
        self.assertTrue(np.all(diff <= np.abs(base["train/0/input0"]) * 2 ** -8 + 1e-30))
        self.assertFalse(np.array_equal(bf16["train/0/input0"], base["train/0/input0"]))
        # Stream mode visits chunks in order; its windows still equal the file's rows.
        stream = self.check("series", path, extra=["data.residency=stream", "data.stream_chunk_items=50"],
                            np_=2, dump_name="stream.h5")
        with h5py.File(path, "r") as f:
            values, ends = f["series/m1/values"][()], f["samples/end/m1"][()]
        for d in stream:
            for b in range(5):
                idx = d["train/%d/sample_index" % b]
                expected = np.stack([values[ends[i] - 29:ends[i] + 1] for i in idx])
                self.assertTrue(np.array_equal(d["train/%d/input0" % b], expected))


if __name__ == "__main__":
    unittest.main(verbosity=2)
