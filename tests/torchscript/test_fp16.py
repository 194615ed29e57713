"""train.precision = fp16 with dynamic loss scaling (Note [Loss scaling] in src/train/precision/LossScaler.h).

End to end on the CPU, which needs fp16 autocast there (LibTorch >= 2.2: the LibTorch 2.6 stage):
- parity with a plain PyTorch loop of the same TorchScript module on the same batches under
  torch.autocast("cpu", float16) with torch.amp.GradScaler: the scale after every step, the
  skipped steps and the weights, over 60 steps with overflows injected at chosen steps; the same
  loop with another backoff factor parts from megabatch (the comparison can fail);
- a stop in the middle of a growth interval (MEGABATCH_FAULT_STOP_STEP, the SIGTERM path) on 2
  ranks resumed on 1: the scale and the losses continue as in an uninterrupted run;
- a checkpoint without scaler state (written before fp16, or by an fp32 run) resumes at init;
- a collapsing scale stops the run (exit 1) with a message and the last good parameters.

With LibTorch 1.13 (no fp16 CPU autocast) the binary refuses fp16 on the CPU (exit 2, naming
bf16 and fp32): Fp16RefusedTest, registered for such builds instead (tests/torchscript/Tests.cmake).
Every build checks the scaler keys (Fp16ConfigTest).
"""
import os
import sys
import unittest

import h5py
import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)
import mbtest  # noqa: E402
from mbtest import read_metrics, train_losses  # noqa: E402
from test_torchscript import TorchScriptCase, checkpoint, make_optimizer  # noqa: E402

STEPS = 60
INIT, GROWTH, BACKOFF, INTERVAL = 2.0 ** 16, 2.0, 0.5, 5
POISONED = (4, 11, 12, 30)  # steps whose loss is NaN on the last rank (MEGABATCH_FAULT_NAN_STEPS)
CLIP = 0.5
# How far two fp16 runs that differ only in float rounding drift apart over tens of steps: a
# few ulp of the update become a few float16 ulp (2^-11 = 5e-4) of the activations, compounded.
FP16_RTOL = 2e-2
SCALER_KEYS = ["train.precision=fp16", "train.loss_scale.init=%g" % INIT,
               "train.loss_scale.growth_factor=%g" % GROWTH, "train.loss_scale.backoff_factor=%g" % BACKOFF,
               "train.loss_scale.growth_interval=%d" % INTERVAL, "train.grad_clip=%g" % CLIP]


def poison_env(steps=POISONED, rank=1):
    return {"MEGABATCH_FAULT_NAN_STEPS": ",".join(str(s) for s in steps), "MEGABATCH_FAULT_NAN_RANK": str(rank)}


def grad_scaler_training(archive, rank_batches, backoff=BACKOFF, poisoned=POISONED, poison_rank=1,
                         micro_batch=16, device="cpu"):
    """torch.amp.GradScaler's recipe on rank_batches[step] = [(m1, m5, y) per rank]: per step the
    scale after update(), whether the step was skipped, the loss, and the unscaled gradient norm;
    and the module (on the CPU). The loss of `poison_rank` is NaN on the `poisoned` steps, as
    megabatch's fault hook makes it. device="cuda" runs it on the GPU: CUDA autocast, and
    GradScaler's fused CUDA kernels."""
    model = torch.jit.load(archive, map_location=device)
    model.train()
    opt = make_optimizer(model, "sgd")
    params = [p for p in model.parameters() if p.requires_grad]
    scaler = torch.amp.GradScaler(device, init_scale=INIT, growth_factor=GROWTH, backoff_factor=backoff,
                                  growth_interval=INTERVAL)
    rank_batches = [[tuple(t.to(device) for t in part) for part in parts] for parts in rank_batches]
    scales, skipped, losses, norms = [], [], [], []
    for step, parts in enumerate(rank_batches, start=1):
        total = sum(len(y) for _, _, y in parts)
        opt.zero_grad()
        loss_sum = 0.0
        for rank, (m1, m5, y) in enumerate(parts):
            for begin in range(0, len(y), micro_batch):
                rows = slice(begin, begin + micro_batch)
                with torch.autocast(device, dtype=torch.float16):
                    out = model(m1[rows], m5[rows]).squeeze(1).float()
                    part = F.mse_loss(out, y[rows].float(), reduction="sum").float()
                if step in poisoned and rank == poison_rank:
                    part = part * float("nan")
                scaler.scale(part / total).backward()
                loss_sum += part.item()
        before = scaler.get_scale()
        scaler.unscale_(opt)
        norms.append(float(torch.nn.utils.clip_grad_norm_(params, CLIP)))
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.get_scale())
        skipped.append(scaler.get_scale() < before)
        losses.append(loss_sum / total)
    return scales, skipped, losses, norms, model.cpu()


def assert_weights_within_fp16_drift(saved, model):
    """Every tensor of `model` (a module) against a checkpoint's, within FP16_RTOL. Elements near
    zero drift by the tensor's float16 ulp, not their own: atol scales with the tensor."""
    for name, value in model.state_dict().items():
        expected = value.numpy()
        np.testing.assert_allclose(saved[name], expected, rtol=FP16_RTOL,
                                   atol=FP16_RTOL * float(np.abs(expected).max()), err_msg=name)


def metric_series(run_dir, key):
    return {r["step"]: r[key] for r in read_metrics(run_dir) if r["event"] == "train"}


class Fp16TrainingTest(TorchScriptCase):
    def fp16_config(self, run, steps=STEPS):
        return self.config(run, optim="sgd", steps=steps)

    def test_matches_grad_scaler(self):
        batches = self.dump_batches(self.config(self.path("dump"), steps=STEPS), np_=2, steps=STEPS)
        run = self.path("fp16")
        r = self.train(2, self.fp16_config(run), SCALER_KEYS + ["run.checkpoint_every=%d" % STEPS],
                       env=poison_env())
        self.assertIn("train.precision = fp16 (CPU autocast), with dynamic loss scaling", r.output)
        self.assertNotIn("non-finite gradient norm", r.output, "an overflow skip is not warned about")
        ours_scale, ours_skipped = metric_series(run, "loss_scale"), metric_series(run, "skipped_steps")
        ours_loss, ours_norm = train_losses(run), metric_series(run, "grad_norm")
        self.assertEqual(sorted(ours_scale), list(range(1, STEPS + 1)))
        scales, skipped, losses, norms, model = grad_scaler_training(self.archives["net"], batches)
        steps = range(1, STEPS + 1)
        self.assertEqual([ours_scale[s] for s in steps], scales, "the scale after every step")
        self.assertEqual([bool(ours_skipped[s]) for s in steps], skipped, "the skipped steps")
        finite = [s for s in steps if not skipped[s - 1]]
        # Until the first update both sides compute the same float32 and float16 values; after
        # it, megabatch's update (Note [Fused CPU update]) and PyTorch's foreach AdamW differ in
        # the last bit, and float16's 11-bit rounding of the activations spreads that: the runs
        # stay within FP16_RTOL of each other, where fp32 runs agree to 1e-5.
        np.testing.assert_allclose([ours_loss[s] for s in (1, 2)], losses[:2], rtol=1e-5,
                                   err_msg="losses before updates differ in the last bit")
        np.testing.assert_allclose([ours_loss[s] for s in finite], [losses[s - 1] for s in finite],
                                   rtol=FP16_RTOL, err_msg="losses of the steps taken")
        # A norm sums squares of many values that drift alike, so it drifts faster: the first 30
        # steps (four overflows and the growths between them) are compared.
        early = [s for s in finite if s <= 30]
        np.testing.assert_allclose([ours_norm[s] for s in early], [norms[s - 1] for s in early],
                                   rtol=FP16_RTOL, err_msg="unscaled gradient norms (the clip's input)")
        assert_weights_within_fp16_drift(checkpoint(run, STEPS), model)
        # The comparison has power: every injected overflow was a skip, the scale grew and fell,
        # the clip bound, and GradScaler with another backoff factor parts from megabatch.
        for s in POISONED:
            self.assertTrue(skipped[s - 1], "injected overflow at step %d is skipped" % s)
        self.assertGreater(max(scales), INIT, "the scale grew")
        self.assertGreater(sum(n > CLIP for n in norms), 0, "the clip bound")
        other, _, _, _, _ = grad_scaler_training(self.archives["net"], batches, backoff=0.25)
        self.assertNotEqual([ours_scale[s] for s in steps], other, "backoff 0.25 gives other scales")
        print("fp16, 2 ranks, %d steps: %d skipped (%d injected), scale %g..%g, equal to GradScaler's; "
              "max relative loss difference %.2g" % (
                  STEPS, sum(skipped), len(POISONED), min(scales), max(scales),
                  max(abs(ours_loss[s] - losses[s - 1]) / losses[s - 1] for s in finite)))

    def test_stop_mid_growth_interval_resumes_on_one_rank(self):
        # A small initial scale (no overflows of its own), INTERVAL 5 and an overflow at step 4:
        # the scale grows after step 9, and step 13 is 4 clean steps into the next interval.
        total, stop = 30, 13
        overrides = SCALER_KEYS + ["train.loss_scale.init=1024", "train.micro_batch=16",
                                   "run.checkpoint_every=1000"]
        reference = self.path("uninterrupted")
        self.train(2, self.fp16_config(reference, total), overrides, env=poison_env((4, 20)))
        run = self.path("stopped")
        config = self.fp16_config(run, total)
        env = dict(poison_env((4, 20)), MEGABATCH_FAULT_STOP_STEP=str(stop))
        r = self.train(2, config, overrides, env=env, expect=75)
        self.assertIn("SIGTERM received", r.output)
        with h5py.File(os.path.join(run, "checkpoints", "step-%08d.h5" % stop), "r") as f:
            tracker = int(f["trainer"].attrs["loss_scale_growth_tracker"])
            saved_scale = float(f["trainer"].attrs["loss_scale"])
        self.assertTrue(0 < tracker < INTERVAL, "stopped mid growth interval (tracker %d)" % tracker)
        r = self.train(1, config, overrides, env=poison_env((4, 20), rank=0))
        self.assertIn("loss scale %g from the checkpoint (%d clean steps)" % (saved_scale, tracker), r.output)
        steps = range(1, total + 1)
        ours, ref = metric_series(run, "loss_scale"), metric_series(reference, "loss_scale")
        self.assertEqual([ours[s] for s in steps], [ref[s] for s in steps], "scale after every step")
        a, b = train_losses(run), train_losses(reference)
        taken = [s for s in steps if s not in (4, 20)]
        # 1 rank against 2: the same rows in other micro-batches sum in another order, and
        # float16 rounding spreads the difference (see FP16_RTOL).
        np.testing.assert_allclose([a[s] for s in taken], [b[s] for s in taken], rtol=FP16_RTOL)
        print("fp16: stopped at step %d on 2 ranks (scale %g, %d clean steps), resumed on 1 rank: "
              "scales and losses equal the uninterrupted run's" % (stop, saved_scale, tracker))

    def test_checkpoint_without_scaler_state_starts_at_init(self):
        run = self.path("old")
        config = self.fp16_config(run, 4)
        self.train(1, config, ["train.precision=fp32"])
        edited = set()  # best.h5 is a hard link to its step's file: edit each file once
        for name in sorted(os.listdir(os.path.join(run, "checkpoints"))):
            path = os.path.join(run, "checkpoints", name)
            if name.endswith(".h5") and os.stat(path).st_ino not in edited:
                edited.add(os.stat(path).st_ino)
                with h5py.File(path, "r+") as f:
                    for key in ("loss_scale", "loss_scale_growth_tracker"):
                        del f["trainer"].attrs[key]  # as written before fp16
        r = self.train(1, config, SCALER_KEYS + ["train.max_steps=8"])
        self.assertIn("the checkpoint holds no loss scale (an fp32 or bf16 run): starting at %g" % INIT, r.output)
        self.assertEqual(sorted(train_losses(run)), list(range(1, 9)))

    def test_collapse_stops_with_the_last_good_parameters(self):
        run = self.path("collapse")
        overrides = ["train.precision=fp16", "train.loss_scale.init=1", "train.loss_scale.min=0.01",
                     "train.max_bad_steps=3", "run.checkpoint_every=1"]
        env = {"MEGABATCH_FAULT_NAN_STEP": "3", "MEGABATCH_FAULT_NAN_COUNT": "1000"}
        r = self.train(2, self.fp16_config(run, 40), overrides, env=env, expect=1)
        self.assertIn("stopping: the fp16 loss scale collapsed", r.output)
        self.assertIn("train.loss_scale.min = 0.01", r.output)
        # Every step from 3 overflows; step s runs at scale 2^-(s-3), under 0.01 from step 10 on,
        # so steps 10, 11 and 12 are the three overflows in a row under the minimum.
        with open(os.path.join(run, "checkpoints", "latest")) as f:
            latest = f.read().strip()
        with h5py.File(os.path.join(run, "checkpoints", latest), "r") as f:
            stopped = int(f["trainer"].attrs["step"])
            self.assertEqual(float(f["trainer"].attrs["loss_scale"]), 1.0, "restarts at init")
            params = {n: f["model"][n][()] for n in f["model"]}
        self.assertEqual(stopped, 12, "stopped at the 3rd overflow under the minimum (steps 10-12)")
        good = checkpoint(run, 2)
        for name in good:
            np.testing.assert_array_equal(params[name], good[name], err_msg="skipped steps changed " + name)


class Fp16RefusedTest(TorchScriptCase):
    def test_fp16_on_the_cpu_needs_libtorch_2_2(self):
        r = self.train(1, self.config(self.path("refused")), ["train.precision=fp16"], expect=2)
        self.assertIn("train.precision = fp16 on the CPU needs LibTorch 2.2 or newer", r.output)
        self.assertIn("use train.precision=bf16 or fp32 on the CPU", r.output)


class Fp16ConfigTest(TorchScriptCase):
    def test_bad_scaler_keys_name_the_key(self):
        config = self.config(self.path("keys"))
        for override, message in [
                ("train.loss_scale.init=0", "train.loss_scale.init = 0 must be > 0"),
                ("train.loss_scale.init=-4", "train.loss_scale.init = -4 must be > 0"),
                ("train.loss_scale.growth_factor=1", "train.loss_scale.growth_factor = 1 must be > 1"),
                ("train.loss_scale.backoff_factor=1.5", "train.loss_scale.backoff_factor = 1.5 must be in (0, 1)"),
                ("train.loss_scale.backoff_factor=0", "train.loss_scale.backoff_factor = 0 must be in (0, 1)"),
                ("train.loss_scale.growth_interval=0", "train.loss_scale.growth_interval = 0 must be >= 1"),
                ("data.resident_dtype=fp16", "data.resident_dtype = fp16 is not offered")]:
            with self.subTest(override=override):
                r = mbtest.run(["train", "--config", config, override, "--print-config"])
                self.assertEqual(r.returncode, 2, repr(r))
                self.assertIn(message, r.output)

    def test_auto_is_fp32_on_the_cpu(self):
        # On a CPU without bf16 units (faked, so on any machine): auto never means fp16 on a CPU.
        r = self.train(1, self.config(self.path("auto"), steps=2), ["train.precision=auto"],
                       env={"MEGABATCH_FAULT_CPU_FLAGS": "fpu sse2 avx2 fma"})
        self.assertIn("train.precision = auto: fp32, this CPU has no bf16 units", r.output)
        self.assertNotIn("loss scale", r.output)


if __name__ == "__main__":
    unittest.main()
