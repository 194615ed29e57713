"""Bad input ends every rank with the right exit code and a message naming the file, the
dataset, and the expected vs found value; no rank hangs (each run has a timeout). Every case
runs `megabatch data check` under mpirun -np 2 and looks for the message on both ranks, and
(issue 9, fault 5) checks that the job ended within CASE_DEADLINE_S without a crash.
tests/reliability/test_bad_inputs.py adds bad configs and more files, through `train`."""
import os
import sys
import unittest

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import mbtest  # noqa: E402

# Every bad input ends the job within this many seconds (issue 9).
CASE_DEADLINE_S = 10

SAMPLES = """data: {{path: {path}, layout: samples, canonical_shards: {shards}}}
train: {{global_batch: 16}}
model: {{task: {task}}}
"""
SERIES = """data:
  path: {path}
  layout: series
  streams: [{{name: m1, window: 10}}, {{name: h1, window: 2}}]
  canonical_shards: 4
train: {{global_batch: 16}}
"""
PANEL = """data:
  path: {path}
  layout: panel
  canonical_shards: 4
  panel: {{window: 10}}
model: {{kind: gat, graph: {{k: 3, lookback: 20, min_periods: 5}}}}
train: {{global_batch: 8}}
"""
TOKENS = """data: {{path: {path}, layout: tokens, context: 8, canonical_shards: 4}}
model: {{kind: gpt}}
"""


def samples_file(path, n=200, features=None, targets=None, timestamps=None):
    with h5py.File(path, "w") as f:
        f["features"] = features if features is not None else np.random.default_rng(0).standard_normal((n, 3)).astype("f4")
        f["targets"] = targets if targets is not None else np.zeros(n, "f4")
        if timestamps is not None:
            f["timestamps"] = timestamps


def series_file(path, rows=3000, m1_ends=None, h1_ends=None, m1_values=None):
    t = np.arange(59, rows)
    with h5py.File(path, "w") as f:
        f["series/m1/values"] = m1_values if m1_values is not None else np.ones((rows, 2), "f4")
        f["series/h1/values"] = np.ones((rows // 60, 2), "f4")
        f["samples/end/m1"] = m1_ends if m1_ends is not None else t
        f["samples/end/h1"] = h1_ends if h1_ends is not None else (t + 1) // 60 - 1
        f["targets"] = np.zeros(len(t), "f4")


def panel_file(path, dates=400, instruments=6, values=None, mask=None, target=None):
    """A panel of `dates` x `instruments` x 3 with names A, B, ...; mask=False writes none."""
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        f["values"] = values if values is not None else rng.standard_normal((dates, instruments, 3)).astype("f4")
        if mask is not False:
            f["mask"] = mask if mask is not None else np.ones((dates, instruments), bool)
        f["target"] = target if target is not None else np.zeros((dates, instruments), "f4")
        f["instruments"] = np.array([chr(65 + i).encode() for i in range(instruments)])


class DataErrorsTest(mbtest.TempDirTestCase):
    def run_check(self, template, path, *overrides, np_=2, **fields):
        values = dict(path=path, shards=4, task="regression")
        values.update(fields)
        cfg = self.write("c.yaml", template.format(**values))
        return mbtest.mpirun(np_, ["data", "check", "--config", cfg] + list(overrides), timeout=120)

    def assertAllRanks(self, r, code, *fragments):
        self.assertExit(r, code, *fragments)
        self.assertLess(r.seconds, CASE_DEADLINE_S, repr(r))
        self.assertFalse(mbtest.crash_signs(r.output), repr(r))
        for rank in ("r0/2", "r1/2"):
            self.assertIn("[%s] [app] error" % rank, r.output, repr(r))
        # Each fragment appears on both ranks' error lines.
        for fragment in fragments:
            self.assertGreaterEqual(r.output.count(fragment), 2, "%r on every rank\n%r" % (fragment, r))

    # --- the file itself -------------------------------------------------------------

    def test_missing_empty_and_non_hdf5_files(self):
        missing = self.path("nope.h5")
        self.assertAllRanks(self.run_check(SAMPLES, missing), 3, "nope.h5: no such file")
        empty = self.write("empty.h5", "")
        self.assertAllRanks(self.run_check(SAMPLES, empty), 3, "empty.h5: not an HDF5 file")
        text = self.write("text.h5", "time,price\n1,2\n")
        self.assertAllRanks(self.run_check(SAMPLES, text), 3, "text.h5: not an HDF5 file")

    def test_file_missing_on_one_rank_only(self):
        good = self.path("good.h5")
        samples_file(good)
        cfg = self.write("c.yaml", SAMPLES.format(path=good, shards=4, task="regression"))
        missing = self.path("elsewhere/good.h5")
        cmd = [mbtest.MPIEXEC, "--oversubscribe", "-np", "1", mbtest.BIN, "data", "check", "--config", cfg,
               ":", "-np", "1", mbtest.BIN, "data", "check", "--config", cfg, "data.path=" + missing]
        r = mbtest._run(cmd, 120, None, None)
        self.assertAllRanks(r, 3, "rank 1: " + missing + ": no such file")

    def test_different_files_on_different_ranks(self):
        a, b = self.path("a.h5"), self.path("b.h5")
        samples_file(a, n=200)
        samples_file(b, n=300)
        cfg = self.write("c.yaml", SAMPLES.format(path=a, shards=4, task="regression"))
        cmd = [mbtest.MPIEXEC, "--oversubscribe", "-np", "1", mbtest.BIN, "data", "check", "--config", cfg,
               ":", "-np", "1", mbtest.BIN, "data", "check", "--config", cfg, "data.path=" + b]
        r = mbtest._run(cmd, 120, None, None)
        self.assertEqual(r.returncode, 3, repr(r))
        self.assertIn("rank 1 sees different content than rank 0", r.output)
        self.assertLess(r.seconds, CASE_DEADLINE_S, repr(r))
        self.assertFalse(mbtest.crash_signs(r.output), repr(r))

    # --- structure ---------------------------------------------------------------------

    def test_missing_dataset_names_what_is_there(self):
        path = self.path("x.h5")
        with h5py.File(path, "w") as f:
            f["features"] = np.zeros((50, 2), "f4")
            f["labels"] = np.zeros(50, "f4")
        self.assertAllRanks(self.run_check(SAMPLES, path), 3, "dataset /targets is missing", "found: /features, /labels")
        # data.names remaps it.
        r = self.run_check(SAMPLES, path, "data.names.targets=labels", "data.split.val_fraction=0.1",
                           "data.split.test_fraction=0.1")
        self.assertExit(r, 0)

    def test_wrong_rank_and_mismatched_n(self):
        path = self.path("x.h5")
        samples_file(path, features=np.zeros(100, "f4"))
        self.assertAllRanks(self.run_check(SAMPLES, path), 3, "dataset /features: expected shape [N, T, F] or [N, F], found 1 dimension(s) [100]")
        samples_file(path, features=np.zeros((100, 2), "f4"), targets=np.zeros(90, "f4"))
        self.assertAllRanks(self.run_check(SAMPLES, path), 3, "dataset /targets: expected N = 100 rows", "found 90")

    def test_non_numeric_dtypes(self):
        path = self.path("x.h5")
        samples_file(path, features=np.array([["a", "b"]] * 60, dtype="S1"))
        self.assertAllRanks(self.run_check(SAMPLES, path), 3, "dataset /features: expected a numeric dtype, found string")
        samples_file(path, n=60, targets=np.zeros(60, bool))
        self.assertAllRanks(self.run_check(SAMPLES, path), 3, "dataset /targets: expected a numeric dtype, found enum")
        samples_file(path, n=60, targets=np.zeros(60, dtype=[("a", "f4"), ("b", "i4")]))
        self.assertAllRanks(self.run_check(SAMPLES, path), 3, "dataset /targets: expected a numeric dtype, found compound")
        samples_file(path, n=60, targets=np.zeros(60, "f4"))
        self.assertAllRanks(self.run_check(SAMPLES, path, task="classification"), 3,
                            "model.task = classification needs integer class labels, found float32")

    def test_class_ids_instead_of_class_indices(self):
        # A label of 2**34 once made the loader allocate a count per class (found by the fuzzer).
        path = self.path("x.h5")
        samples_file(path, n=60, targets=np.array([0, 1, 2**34] * 20, "i8"))
        self.assertAllRanks(self.run_check(SAMPLES, path, task="classification"), 3,
                            "dataset /targets: class label 17179869184", "at most 1048576 classes",
                            "np.unique(ids, return_inverse=True)")
        samples_file(path, n=60, targets=np.array([0, 1, 2**20 - 1] * 20, "i8"))
        self.assertExit(self.run_check(SAMPLES, path, task="classification"), 0)

    # --- values --------------------------------------------------------------------------

    def test_non_finite_values_report_the_first_index(self):
        path = self.path("x.h5")
        x = np.ones((200, 3), "f4")
        x[57, 1] = np.nan
        x[150, 0] = np.inf
        samples_file(path, features=x)
        self.assertAllRanks(self.run_check(SAMPLES, path), 3, "dataset /features: non-finite value (nan) at sample 57")
        y = np.zeros(200, "f4")
        y[190] = -np.inf
        samples_file(path, targets=y)
        self.assertAllRanks(self.run_check(SAMPLES, path), 3, "dataset /targets: non-finite value (-inf) at sample 190")
        values = np.ones((3000, 2), "f4")
        values[300, 1] = np.nan
        series_file(path, m1_values=values)
        self.assertAllRanks(self.run_check(SERIES, path), 3, "/series/m1/values: non-finite value (nan) at row 300 of stream m1")

    def test_decreasing_timestamps(self):
        path = self.path("x.h5")
        ts = np.arange(200, dtype="i8")
        ts[140] = 5
        samples_file(path, timestamps=ts)
        self.assertAllRanks(self.run_check(SAMPLES, path), 3, "dataset /timestamps: timestamps decrease at sample 140 (139 then 5)")

    def test_series_end_rows_out_of_range_or_decreasing(self):
        path = self.path("x.h5")
        t = np.arange(59, 3000)
        ends = t.copy()
        ends[-1] = 3000
        series_file(path, m1_ends=ends)
        self.assertAllRanks(self.run_check(SERIES, path), 3, "dataset /samples/end/m1: window end rows of sample 2940 is row 3000, outside the stream's rows [0, 3000)")
        ends = t.copy()
        ends[100] = 3
        series_file(path, m1_ends=ends)
        self.assertAllRanks(self.run_check(SERIES, path), 3, "/samples/end/m1: window end rows decrease at sample 100")

    def test_missing_stream_and_tokens_problems(self):
        path = self.path("x.h5")
        series_file(path)
        r = self.run_check(SERIES.replace("name: h1", "name: h4"), path)
        self.assertAllRanks(r, 3, "stream 'h4' of data.streams has no group /series/h4")
        with h5py.File(path, "w") as f:
            f["tokens"] = np.arange(100, dtype="u2")
        self.assertAllRanks(self.run_check(TOKENS, path), 3, "dataset /tokens: attribute vocab_size is missing")
        with h5py.File(path, "w") as f:
            d = f.create_dataset("tokens", data=(np.arange(1000) % 60).astype("u2"))
            d.attrs["vocab_size"] = 50
        self.assertAllRanks(self.run_check(TOKENS, path), 3, "dataset /tokens: token 50 at position 50 is outside [0, vocab_size = 50)")

    def test_corrupt_chunk_in_one_ranks_rows(self):
        # The collective read fails on rank 1 only; rank 0 keeps taking part, both stop.
        path = self.path("x.h5")
        with h5py.File(path, "w") as f:
            f.create_dataset("features", data=np.ones((20000, 8), "f4"), chunks=(500, 8), compression="gzip")
            f["targets"] = np.zeros(20000, "f4")
        with h5py.File(path, "r") as f:
            chunk = f["features"].id.get_chunk_info(30)  # rows 15000-15500: rank 1's train shards
        with open(path, "r+b") as f:
            f.seek(chunk.byte_offset + 4)
            f.write(b"\xff" * 32)
        self.assertAllRanks(self.run_check(SAMPLES, path), 3, "rank 1: ", "dataset /features: read of rows [8000, 16000) failed")

    # --- panel layout -------------------------------------------------------------------

    def test_panel_wrong_ranks_and_mask_shape(self):
        path = self.path("p.h5")
        panel_file(path, values=np.zeros((400, 6), "f4"))
        self.assertAllRanks(self.run_check(PANEL, path), 3,
                            "dataset /values: expected shape [T, N, F] (dates x instruments x features), "
                            "found 2 dimension(s) [400, 6]", "a single feature as [T, N, 1]: values[..., None]")
        panel_file(path, target=np.zeros(400, "f4"))
        self.assertAllRanks(self.run_check(PANEL, path), 3,
                            "dataset /target: expected shape [T, N] or [T, N, K], found 1 dimension(s) [400]",
                            "write one target per date and instrument")
        panel_file(path, mask=np.ones(400, bool))
        self.assertAllRanks(self.run_check(PANEL, path), 3,
                            "dataset /mask: expected shape [T, N] (instrument present on the date), found 1 "
                            "dimension(s) [400]", "write the mask as a [T, N] array")
        panel_file(path, target=np.zeros((400, 7), "f4"))
        self.assertAllRanks(self.run_check(PANEL, path), 3,
                            "dataset /target: expected [T, N] = [400, 6] leading dimensions (as /values "
                            "[400, 6, 3]), found [400, 7]", "write one target per date and instrument of /values")
        panel_file(path, mask=np.ones((400, 5), bool))
        self.assertAllRanks(self.run_check(PANEL, path), 3,
                            "dataset /mask: expected [T, N] = [400, 6] leading dimensions (as /values "
                            "[400, 6, 3]), found [400, 5]", "write one mask entry per date and instrument")
        panel_file(path, mask=np.ones((400, 6), "f4"))
        self.assertAllRanks(self.run_check(PANEL, path), 3,
                            "dataset /mask: expected bool or integer entries (nonzero = present), found float32",
                            "write the mask as bool or uint8")

    def test_panel_non_finite_where_the_mask_says_present(self):
        path = self.path("p.h5")
        values = np.random.default_rng(1).standard_normal((400, 6, 3)).astype("f4")
        values[150, 2, 1] = np.nan
        panel_file(path, values=values)
        self.assertAllRanks(self.run_check(PANEL, path), 3,
                            "dataset /values: non-finite value (nan) at date 150, instrument 2 ('C'), where "
                            "/mask says the instrument is present", "set /mask to 0 where the instrument has no data")
        mask = np.ones((400, 6), bool)
        mask[150, 2] = False  # absent: its NaN is allowed
        panel_file(path, values=values, mask=mask)
        self.assertExit(self.run_check(PANEL, path), 0)
        target = np.zeros((400, 6), "f4")
        target[120, 4] = np.inf
        panel_file(path, target=target)
        self.assertAllRanks(self.run_check(PANEL, path), 3,
                            "dataset /target: non-finite value (inf) at date 120, instrument 4 ('E')",
                            "set the mask to 0 where the target is unknown")
        panel_file(path, values=values, mask=False)
        self.assertAllRanks(self.run_check(PANEL, path), 3, "(the file has no /mask)", "add a /mask [T, N]")

    def test_panel_shorter_than_the_window_and_missing_sector(self):
        path = self.path("p.h5")
        panel_file(path, dates=15)
        self.assertAllRanks(self.run_check(PANEL, path), 3,
                            "dataset /values has T = 15 dates, but a sample needs 20 dates of history "
                            "(data.panel.window = 10, model.graph.lookback = 20)",
                            "use a longer panel, or lower data.panel.window")
        panel_file(path)
        self.assertAllRanks(self.run_check(PANEL, path, "model.graph.sector_edges=true"), 3,
                            "model.graph.sector_edges = true, but the file has no dataset /sector",
                            "write /sector [N] integer sector ids")
        self.assertAllRanks(self.run_check(PANEL, path, "model.graph.feature=3"), 2,
                            "model.graph.feature = 3 is not a column of")

    # --- config vs data -------------------------------------------------------------------

    def test_too_few_samples_for_the_shards_and_fewer_shards_than_ranks(self):
        path = self.path("x.h5")
        samples_file(path, n=40)
        self.assertAllRanks(self.run_check(SAMPLES, path, shards=64), 3,
                            "the train split has 32 samples, fewer than data.canonical_shards = 64")
        self.assertAllRanks(self.run_check(SAMPLES, path, shards=1), 2,
                            "data.canonical_shards = 1 is smaller than the 2 ranks launched")

    def test_memory_budget(self):
        path = self.path("x.h5")
        samples_file(path, n=4000, features=np.ones((4000, 64), "f4"))
        r = self.run_check(SAMPLES, path, "data.memory_budget_mb=0.1")
        self.assertAllRanks(r, 2, "the resident data does not fit", "data.residency=stream")


if __name__ == "__main__":
    unittest.main(verbosity=2)
