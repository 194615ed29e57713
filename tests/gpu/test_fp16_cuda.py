"""train.precision = fp16 with dynamic loss scaling on CUDA (label gpu-features, CUDA builds only):
megabatch on cuda:0 against torch.amp.GradScaler on the same card, the same TorchScript module and
the same batches (tests/torchscript/test_fp16.py's recipe, run with device="cuda": CUDA autocast
and GradScaler's fused unscale and update kernels, as megabatch's LossScaler uses them). Over 12
steps with overflows injected at steps 4 and 5 (two backoffs, then growth after 5 clean steps): the
scale after every step and the skipped steps equal, the first step's loss (before any update) within
1e-5, every loss of a step taken and the final weights within the fp16 drift bound of the CPU test
(FP16_RTOL).
Usage: test_fp16_cuda.py [GpuFp16Test[.test_x]]
"""
import os
import sys
import unittest

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "torchscript"))
from mbtest import train_losses  # noqa: E402
from test_fp16 import (FP16_RTOL, SCALER_KEYS, assert_weights_within_fp16_drift, grad_scaler_training,  # noqa: E402
                       metric_series, poison_env)
from test_torchscript import TorchScriptCase, checkpoint  # noqa: E402

STEPS = 12
POISONED = (4, 5)


class GpuFp16Test(TorchScriptCase):
    def test_matches_grad_scaler_on_the_same_card(self):
        self.assertTrue(torch.cuda.is_available(), "this test compares with PyTorch on the GPU: python3's "
                        "torch needs CUDA (torch.version.cuda = %s)" % torch.version.cuda)
        config = self.config(self.path("fp16"), steps=STEPS)
        batches = self.dump_batches(self.config(self.path("dump"), steps=STEPS), np_=1, steps=STEPS)
        run = self.path("fp16")
        r = self.train(1, config, SCALER_KEYS + ["train.device=cuda", "run.checkpoint_every=%d" % STEPS],
                       env=poison_env(POISONED, rank=0))
        self.assertIn("device cuda:0", r.output)
        self.assertIn("train.precision = fp16, with dynamic loss scaling", r.output)
        scales, skipped, losses, _, model = grad_scaler_training(self.archives["net"], batches, poisoned=POISONED,
                                                                 poison_rank=0, device="cuda")
        steps = range(1, STEPS + 1)
        ours_scale, ours_skipped = metric_series(run, "loss_scale"), metric_series(run, "skipped_steps")
        ours_loss = train_losses(run)
        self.assertEqual([ours_scale[s] for s in steps], scales, "the scale after every step")
        self.assertEqual([bool(ours_skipped[s]) for s in steps], skipped, "the skipped steps")
        for s in POISONED:
            self.assertTrue(skipped[s - 1], "the injected overflow at step %d is skipped" % s)
        self.assertGreater(max(scales[5:]), min(scales), "the scale grew again after the backoffs")
        np.testing.assert_allclose(ours_loss[1], losses[0], rtol=1e-5, err_msg="step 1, before any update")
        taken = [s for s in steps if not skipped[s - 1]]
        np.testing.assert_allclose([ours_loss[s] for s in taken], [losses[s - 1] for s in taken],
                                   rtol=FP16_RTOL, err_msg="losses of the steps taken")
        assert_weights_within_fp16_drift(checkpoint(run, STEPS), model)
        print("fp16 on %s, %d steps: scales %s equal to GradScaler's; max relative loss difference %.2g"
              % (torch.cuda.get_device_name(0), STEPS, scales,
                 max(abs(ours_loss[s] - losses[s - 1]) / losses[s - 1] for s in taken)))


if __name__ == "__main__":
    unittest.main()
