"""megabatch's AdamW / Adam / SGD and LR schedules against torch.optim (PyTorch 1.13).

tests/tools/OptimizerReference.cpp runs 6 steps of each optimizer on fixed gradients; here
torch.optim replays them (weight decay only on the matrix, as megabatch applies it to dim >= 2)
and the warmup + cosine/linear schedule is recomputed from its textbook definition. Each case
runs twice: with the host update, and with the device-masked update plus two skipped steps.
Under MEGABATCH_TEST_DEVICE=cuda the tool steps the optimizers on the GPU; the tolerance stays:
an optimizer step is elementwise (no reduction whose order could change), and CUDA's division and
square root are correctly rounded, so only fused multiply-adds move the last bit.
"""
import math
import os
import subprocess
import sys
import tempfile
import unittest

import h5py
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import mbtest  # noqa: E402

TOOL = os.environ["MB_OPTIMIZER_REFERENCE"]


def schedule(kind, step, total, lr, warmup, min_ratio):
    if step < warmup:
        return lr * (step + 1) / warmup
    if kind == "constant":
        return lr
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    floor = lr * min_ratio
    if kind == "linear":
        return lr - (lr - floor) * progress
    return floor + (lr - floor) * 0.5 * (1 + math.cos(math.pi * progress))


class OptimizerParity(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.path = os.path.join(cls.tmp.name, "opt.h5")
        subprocess.run([TOOL, cls.path], check=True)
        cls.file = h5py.File(cls.path, "r")

    @classmethod
    def tearDownClass(cls):
        cls.file.close()
        cls.tmp.cleanup()

    def replay(self, name, masked=False):
        f = self.file
        g = f[name + "_masked" if masked else name]
        a = {k: g.attrs[k] for k in g.attrs}
        matrix = torch.nn.Parameter(torch.tensor(f["initial_matrix"][()]))
        bias = torch.nn.Parameter(torch.tensor(f["initial_bias"][()]))
        groups = [{"params": [matrix], "weight_decay": float(a["weight_decay"])},
                  {"params": [bias], "weight_decay": 0.0}]
        if name == "adamw":
            opt = torch.optim.AdamW(groups, lr=float(a["lr"]), betas=(float(a["beta1"]), float(a["beta2"])),
                                    eps=float(a["eps"]))
        elif name == "adam":
            opt = torch.optim.Adam(groups, lr=float(a["lr"]), betas=(float(a["beta1"]), float(a["beta2"])),
                                   eps=float(a["eps"]))
        else:
            opt = torch.optim.SGD(groups, lr=float(a["lr"]), momentum=float(a["momentum"]),
                                  nesterov=bool(a["nesterov"]))
        steps = len(g["lrs"][()])
        kind = a["schedule"].decode() if isinstance(a["schedule"], bytes) else a["schedule"]
        for s in range(steps):
            lr = schedule(kind, s, steps, float(a["lr"]), int(a["warmup_steps"]), float(a["min_lr_ratio"]))
            self.assertAlmostEqual(lr, float(g["lrs"][s]), places=12, msg="%s lr at step %d" % (name, s))
            for group in opt.param_groups:
                group["lr"] = lr
            matrix.grad = torch.tensor(f["grad_matrix_%d" % s][()])
            bias.grad = torch.tensor(f["grad_bias_%d" % s][()])
            opt.step()
        for pname, p in (("matrix", matrix), ("bias", bias)):
            ours = torch.tensor(g[pname][()])
            self.assertTrue(torch.allclose(ours, p.detach(), rtol=1e-5, atol=1e-6),
                            "%s %s differs: max |d| = %g" % (name, pname, (ours - p.detach()).abs().max()))
        # Skipped (masked) steps do not count: bias corrections and SGD's first buffer follow.
        self.assertEqual(int(g.attrs["step_count"]), steps)
        # The test must be able to fail: the parameters really moved.
        self.assertFalse(torch.allclose(torch.tensor(f["initial_matrix"][()]), matrix.detach()))

    def test_steps_ran_on_the_test_device(self):
        device = self.file.attrs["device"]
        device = device.decode() if isinstance(device, bytes) else device
        self.assertTrue(device.startswith(mbtest.DEVICE), device)

    def test_adamw(self):
        self.replay("adamw")

    def test_adam(self):
        self.replay("adam")

    def test_sgd(self):
        self.replay("sgd")

    def test_sgd_nesterov(self):
        self.replay("sgd_nesterov")

    # The device-masked update (train.host_sync = log): the same steps plus two skipped ones
    # with other gradients (Note [Step checks] in src/train/Trainer.cpp).
    def test_adamw_masked(self):
        self.replay("adamw", masked=True)

    def test_adam_masked(self):
        self.replay("adam", masked=True)

    def test_sgd_masked(self):
        self.replay("sgd", masked=True)

    def test_sgd_nesterov_masked(self):
        self.replay("sgd_nesterov", masked=True)


if __name__ == "__main__":
    unittest.main(verbosity=2)
