"""Resume across devices through the CLI (label gpu, CUDA builds only): a run trained on CUDA and
stopped (as by SIGTERM) resumes on the CPU, and a CPU run resumes on CUDA. The resumed run logs
every step once and continues like the run that stayed on its device. tests/gpu/
CheckpointDevicesTest.cpp checks the restored weights and optimizer state bit for bit; here the
comparison crosses devices inside the trainer, which runs TF32 matmuls on CUDA (a 10-bit mantissa,
~1e-3 relative per product), so losses agree to 1e-2.
"""
import os
import sys
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "train"))
import mbtest  # noqa: E402
from test_training import BASE_CONFIG, train_losses  # noqa: E402

STOP, STEPS = 8, 12
# Two runs on one device: float32 rounding on the CPU; on CUDA, kernels (cuDNN autotuning) may
# differ between processes (see mbtest.RUN_RTOL).
SAME_DEVICE_RTOL = {"cpu": 1e-5, "cuda": 1e-3}
CROSS_DEVICE_RTOL = 1e-2


class CrossDeviceResumeTest(mbtest.SeriesTrainingTestCase):
    def train(self, run_dir, device, env=None, expect=0):
        config = self.write("config-%s.yaml" % os.path.basename(run_dir),
                            BASE_CONFIG.format(run_dir=run_dir, data=self.data))
        # An explicit train.device: mbtest leaves it alone whatever MEGABATCH_TEST_DEVICE says.
        r = mbtest.run(["train", "--config", config, "train.device=" + device,
                        "train.max_steps=%d" % STEPS], env=env, timeout=600)
        self.assertEqual(r.returncode, expect, repr(r))
        self.assertIn("device %s" % device, r.output, repr(r))
        return r

    def check(self, first, second):
        reference = self.path("stays-on-" + first)
        self.train(reference, first)
        moved = self.path(first + "-then-" + second)
        self.train(moved, first, env={"MEGABATCH_FAULT_STOP_STEP": str(STOP)}, expect=75)
        r = self.train(moved, second)
        self.assertIn("resuming from", r.output)
        self.assertIn("step-%08d.h5" % STOP, r.output)
        ref, got = train_losses(reference), train_losses(moved)
        self.assertEqual(sorted(got), list(range(1, STEPS + 1)), "every step logged once")
        for step in range(1, STOP + 1):
            np.testing.assert_allclose(got[step], ref[step], rtol=SAME_DEVICE_RTOL[first],
                                       err_msg="step %d, before the move" % step)
        for step in range(STOP + 1, STEPS + 1):
            np.testing.assert_allclose(got[step], ref[step], rtol=CROSS_DEVICE_RTOL,
                                       err_msg="step %d, after the move to %s" % (step, second))

    def test_trained_on_cuda_resumes_on_cpu(self):
        self.check("cuda", "cpu")

    def test_trained_on_cpu_resumes_on_cuda(self):
        self.check("cpu", "cuda")


if __name__ == "__main__":
    unittest.main(verbosity=2)
