"""A resume inside a log window (Note [Log windows across a resume] in src/train/watch/LogWindow.h):
the first train record after it averages the same steps as the uninterrupted run's record, bit
for bit on the same rank count and to float rounding on another; a checkpoint without
/log_window (written before it existed) still resumes, its first record averaging only the
steps after the resume, which is what the carried window fixes."""
import os
import shutil
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import mbtest  # noqa: E402

import h5py  # noqa: E402

STEPS = 20
LOG_EVERY = 8
STOP = 11  # 3 steps into the window of steps 9-16


class LogWindowTest(mbtest.SeriesTrainingTestCase):
    SERIES_ARGS = ["--rows", "12000", "--features", "2", "--streams", "m1:1,m5:5,h1:60", "--seed", "3"]

    def train(self, ranks, run_dir, env=None, expect=0):
        args = ["train", "--config", mbtest.config_path("demo.yaml"), "data.path=" + self.data,
                "run.dir=" + run_dir, "train.max_steps=%d" % STEPS, "run.log_every=%d" % LOG_EVERY,
                "train.eval_every=0", "run.checkpoint_every=0", "train.precision=fp32", "model.hidden=8",
                "model.head_hidden=8", "run.progress=lines"]
        r = mbtest.mpirun(ranks, mbtest.with_device(args, ranks), env=env, timeout=120)
        self.assertExit(r, expect)
        return r

    def test_the_first_record_after_a_resume_averages_the_whole_window(self):
        whole = self.path("uninterrupted")
        self.train(2, whole)
        want = mbtest.train_losses(whole)
        self.assertEqual(sorted(want), [8, 16, 20])

        stopped = self.path("stopped")
        self.train(2, stopped, env={"MEGABATCH_FAULT_STOP_STEP": str(STOP)}, expect=75)
        with h5py.File(os.path.join(stopped, "checkpoints", "step-%08d.h5" % STOP), "r") as f:
            self.assertEqual(int(f["log_window"]["steps"][0]), STOP - LOG_EVERY)
            self.assertEqual(f["log_window"]["loss_sums"].shape, (2,))

        for ranks in (2, 1):
            resumed = self.path("resumed on %d" % ranks)
            shutil.copytree(stopped, resumed)
            r = self.train(ranks, resumed)
            self.assertIn("written %d step(s) into a log window" % (STOP - LOG_EVERY), r.output)
            got = mbtest.train_losses(resumed)
            self.assertEqual(sorted(got), [8, 16, 20], "each step's record once")
            if ranks == 2:  # the same floats, added in the same order
                self.assertEqual(got, want)
            else:
                for step in want:
                    self.assertAlmostEqual(got[step], want[step], delta=mbtest.RUN_RTOL * abs(want[step]),
                                           msg="step %d" % step)

        # A checkpoint written before the window travelled: it resumes, and its first record
        # averages steps 12-16 only (the record this fixes).
        older = self.path("older checkpoint")
        shutil.copytree(stopped, older)
        with h5py.File(os.path.join(older, "checkpoints", "step-%08d.h5" % STOP), "r+") as f:
            del f["log_window"]
            manifest = f["meta"].attrs["manifest"]
            manifest = manifest.decode() if isinstance(manifest, bytes) else manifest
            f["meta"].attrs["manifest"] = "".join(
                line + "\n" for line in manifest.splitlines() if not line.startswith("log_window/"))
        r = self.train(2, older)
        self.assertNotIn("into a log window", r.output)
        got = mbtest.train_losses(older)
        self.assertEqual(sorted(got), [8, 16, 20])
        self.assertNotEqual(got[16], want[16])
        self.assertEqual(got[20], want[20])


if __name__ == "__main__":
    unittest.main(verbosity=2)
