"""Bad inputs (issue 9, fault 5): malformed configs and HDF5 data files, written here with h5py,
each given to `mpirun -np 2 megabatch train` the way a user would.

Every case must end both ranks within CASE_DEADLINE_S with the right exit code (2 config,
3 data), and both ranks' error lines must name the problem; nothing may crash or dump core.
tests/data/test_data_errors.py (py.data_errors) holds the other bad data files (missing,
empty, not HDF5, missing datasets, wrong ranks, string dtypes, NaN/Inf, decreasing timestamps,
too few samples, ...) under the same checks, through `megabatch data check`; this suite adds
bad configs and the files it lacks, through `train`, the command users actually run.
Usage: test_bad_inputs.py [BadConfigTest|BadDataTest]
"""
import os
import re
import sys
import unittest

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "data"))
import faultkit  # noqa: E402
from faultkit import mbtest  # noqa: E402
from test_data_errors import CASE_DEADLINE_S, samples_file  # noqa: E402

# A config that trains the samples file below (the control case proves it works).
SAMPLES = """run: {{dir: {run}, log_every: 1}}
data: {{path: {path}, layout: samples, canonical_shards: {shards}}}
model: {{kind: mlp, task: regression, hidden: 8}}
train: {{global_batch: 16, max_steps: 2, eval_every: 0, threads: 1}}
"""


def read(path):
    with open(path) as f:
        return f.read()


class BadInputCase(mbtest.TempDirTestCase):
    """Runs one bad input under mpirun -np 2 and checks code, message, time, and crash signs."""

    def config(self, template=SAMPLES, **fields):
        values = dict(run=self.path("run"), path=self.path("data.h5"), shards=4)
        values.update(fields)
        return self.write("config.yaml", template.format(**values))

    def train(self, config, overrides=(), command=None):
        cmd = command or faultkit.train_command(2, config, overrides)
        return mbtest._run(cmd, 120, faultkit.CHILD_ENV, self.tmp)

    def assertRejected(self, r, code, *fragments):
        report = "%.1f s\n%r" % (r.seconds, r)
        self.assertEqual(r.returncode, code, report)
        for rank in ("r0/2", "r1/2"):
            # A rank's error may span lines (a list of config problems): take its block.
            blocks = re.findall(r"^\[[^\]]*\] \[%s\] \[app\] error: .*(?:\n(?!\[).*)*" % re.escape(rank),
                                r.output, re.MULTILINE)
            self.assertTrue(blocks, "rank %s reports an error\n%s" % (rank, report))
            text = "\n".join(blocks)
            for fragment in fragments:
                self.assertIn(fragment, text, "rank %s names the problem\n%s" % (rank, report))
        self.assertLess(r.seconds, CASE_DEADLINE_S, report)
        self.assertFalse(faultkit.crash_signs(r.output), report)
        self.assertFalse([f for f in os.listdir(self.tmp) if f.startswith("core")], "core dump\n" + report)
        first = re.search(r"\[r1/2\] \[app\] error: (.*)", r.output).group(1)
        print("%s: exit %d in %.1f s: %s" % (self.id().split(".")[-1], r.returncode, r.seconds, first[:300]))


class BadConfigTest(BadInputCase):
    def setUp(self):
        super().setUp()
        samples_file(self.path("data.h5"))

    def bad(self, text):
        return self.write("bad.yaml", text)

    def test_yaml_syntax_error(self):
        path = self.bad("train: {global_batch: 16\nmodel: [mlp\n")
        self.assertRejected(self.train(path), 2, path, "not valid YAML at line")

    def test_config_is_a_list_not_a_map(self):
        path = self.bad("- data\n- train\n")
        self.assertRejected(self.train(path), 2, path, "the config must be a YAML map of sections")

    def test_config_file_missing(self):
        path = self.path("nope.yaml")
        self.assertRejected(self.train(path), 2, "cannot read config file '%s'" % path)

    def test_config_path_is_a_directory(self):
        path = self.path("configs")
        os.mkdir(path)
        self.assertRejected(self.train(path), 2, "cannot read config file '%s'" % path, "is a directory")

    def test_config_file_is_binary(self):
        path = self.path("bad.yaml")
        with open(path, "wb") as f:
            f.write(bytes(range(256)) * 4)
        self.assertRejected(self.train(path), 2, path + ": the config must be a YAML map of sections")

    def test_empty_config_file(self):
        self.assertRejected(self.train(self.bad("")), 2, "data.path is not set")

    def test_wrong_type(self):
        text = read(self.config()).replace("global_batch: 16", "global_batch: sixteen")
        path = self.bad(text)
        self.assertRejected(self.train(path), 2, path + ": train.global_batch: expected an integer, got 'sixteen'")

    def test_unknown_key_names_the_closest(self):
        text = read(self.config()).replace("global_batch", "global_bach")
        self.assertRejected(self.train(self.bad(text)), 2, "unknown config key 'train.global_bach'",
                            "did you mean train.global_batch?")

    def test_value_out_of_range(self):
        self.assertRejected(self.train(self.config(), ["optim.lr=-1"]), 2, "optim.lr")

    def test_section_given_a_scalar(self):
        text = read(self.config()) + "optim: 0.1\n"
        self.assertRejected(self.train(self.bad(text)), 2, "optim: expected a section with keys")

    def test_unknown_layout(self):
        self.assertRejected(self.train(self.config(), ["data.layout=rows"]), 2, "data.layout", "'rows'")


class BadDataTest(BadInputCase):
    def data(self):
        return self.path("data.h5")

    def test_control_good_file_trains(self):
        samples_file(self.data())
        r = self.train(self.config())
        self.assertEqual(r.returncode, 0, repr(r))

    def test_truncated_hdf5_file(self):
        samples_file(self.data(), n=2000)
        with open(self.data(), "r+b") as f:
            f.truncate(os.path.getsize(self.data()) // 2)
        self.assertRejected(self.train(self.config()), 3, self.data())

    def test_dataset_is_a_group(self):
        with h5py.File(self.data(), "w") as f:
            f.create_group("features")
            f["targets"] = np.zeros(200, "f4")
        self.assertRejected(self.train(self.config()), 3, self.data() + ": dataset /features is a group, not a dataset")

    def test_targets_of_wrong_rank(self):
        samples_file(self.data(), targets=np.zeros((200, 2, 2), "f4"))
        self.assertRejected(self.train(self.config()), 3, "dataset /targets", "found 3 dimension(s)")

    def test_zero_rows(self):
        samples_file(self.data(), features=np.zeros((0, 2), "f4"), targets=np.zeros(0, "f4"))
        self.assertRejected(self.train(self.config()), 3, self.data() + ": the file has no samples (N = 0)")

    def test_nan_value(self):
        x = np.ones((200, 3), "f4")
        x[57, 1] = np.nan
        samples_file(self.data(), features=x)
        self.assertRejected(self.train(self.config()), 3, "dataset /features: non-finite value (nan) at sample 57")

    def test_timestamps_of_wrong_length(self):
        samples_file(self.data(), timestamps=np.arange(150, dtype="i8"))
        self.assertRejected(self.train(self.config()), 3, "/timestamps", "150")

    def test_fewer_canonical_shards_than_ranks(self):
        samples_file(self.data())
        self.assertRejected(self.train(self.config(shards=1)), 2,
                            "data.canonical_shards = 1 is smaller than the 2 ranks launched")

    def test_file_readable_on_rank0_missing_on_rank1(self):
        # Rank 1 runs in its own mount namespace where the data directory is an empty tmpfs:
        # the same path exists on "node" 0 and not on "node" 1, as on a cluster without a
        # shared file system.
        data_dir = self.path("data")
        os.mkdir(data_dir)
        path = os.path.join(data_dir, "data.h5")
        samples_file(path)
        config = self.config(path=path)
        rank = [mbtest.BIN] + mbtest.with_device(["train", "--config", config], 2)
        hide = ["unshare", "-m", "--propagation", "private", "sh", "-c",
                'mount -t tmpfs mbtest-hidden "$0" && exec "$@"', data_dir]
        cmd = [mbtest.MPIEXEC, "--oversubscribe", "-np", "1"] + rank + [":", "-np", "1"] + hide + rank
        self.assertRejected(self.train(config, command=cmd), 3, "rank 1: " + path + ": no such file")


if __name__ == "__main__":
    unittest.main(verbosity=2)
