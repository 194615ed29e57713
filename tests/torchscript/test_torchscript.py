"""model.kind = torchscript end to end: modules scripted here with Debian's python3-torch
(tests/torchscript/modules.py) trained by the real `megabatch` binary under mpirun, against plain
PyTorch training loops of the same archives on the same batches.

The batches come from `megabatch data check --dump` (the trainer's own gather, epoch 0). The
Python loop replays them with torch.optim.SGD / AdamW (weight decay on the matrices only, as
megabatch applies it), torch.nn.utils.clip_grad_norm_, and, for several ranks, each rank's
forward pass on its own rows with its own buffers (batch norm: Note [Buffers across ranks] in
src/dist/ParameterSync.cpp).
"""
import os
import signal
import subprocess
import sys
import tempfile
import time
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
import modules  # noqa: E402

# megabatch runs TorchScript on the CPU without the graph executor's TensorExpr fuser (Note
# [TorchScript fusion on the CPU] in src/model/kinds/TorchScriptModel.cpp: with PyTorch 2.6 a fused
# fp32 graph hung); the Python references run the same graphs.
torch._C._jit_set_texpr_fuser_enabled(False)

STEPS = 20
RTOL = 1e-5  # the acceptance: per-step losses within 1e-5 relative
LR = {"sgd": 0.05, "adamw": 0.01}
WEIGHT_DECAY = 0.01
CLIP = 0.5

BASE_CONFIG = """
run: {{dir: {run_dir}, log_every: 1, keep_last: 50}}
data:
  path: {data}
  layout: series
  streams:
    - {{name: m1, window: 16}}
    - {{name: m5, window: 8}}
  canonical_shards: 10
  split: {{train_fraction: 0.8, val_fraction: 0.1, test_fraction: 0.1}}
model: {{kind: torchscript, path: {archive}}}
train: {{global_batch: 32, max_steps: {steps}, eval_every: 0, precision: fp32, threads: 1, grad_clip: {clip}}}
optim: {{name: {optim}, lr: {lr}, momentum: 0.9, weight_decay: {wd}, schedule: constant, warmup_steps: 0}}
"""


def checkpoint(run_dir, step):
    path = os.path.join(run_dir, "checkpoints", "step-%08d.h5" % step)
    with h5py.File(path, "r") as f:
        return {name: f["model"][name][()] for name in f["model"]}


def latest_step(run_dir):
    with open(os.path.join(run_dir, "checkpoints", "latest")) as f:
        name = f.read().strip()
    with h5py.File(os.path.join(run_dir, "checkpoints", name), "r") as f:
        return int(f["trainer"].attrs["step"])


def read_batches(path, steps):
    """[(m1, m5, targets)] of the first `steps` train batches of a data-check dump."""
    with h5py.File(path, "r") as f:
        return [tuple(torch.from_numpy(f["train/%d/%s" % (b, k)][()]) for k in ("input0", "input1", "targets"))
                for b in range(steps)]


def make_optimizer(model, name):
    trainable = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in trainable if p.dim() >= 2], "weight_decay": WEIGHT_DECAY},
              {"params": [p for p in trainable if p.dim() < 2], "weight_decay": 0.0}]
    if name == "sgd":
        return torch.optim.SGD(groups, lr=LR[name], momentum=0.9)
    return torch.optim.AdamW(groups, lr=LR[name], betas=(0.9, 0.999), eps=1e-8)


def buffer_values(model):
    return {n: b.detach().clone() for n, b in model.named_buffers()}


def set_buffers(model, values):
    with torch.no_grad():
        for n, b in model.named_buffers():
            b.copy_(values[n])


def python_training(archive, rank_batches, optim, average_at=(), micro_batch=32):
    """Plain PyTorch training of `archive` on rank_batches[step] = [(m1, m5, y) per rank], each
    rank's rows in forward passes of at most `micro_batch` rows (megabatch's micro-batches,
    which matter to batch norm): the losses per step, the module, the buffers of each rank, and
    how many steps were clipped."""
    model = torch.jit.load(archive)
    model.train()
    opt = make_optimizer(model, optim)
    params = [p for p in model.parameters() if p.requires_grad]
    buffers = [buffer_values(model) for _ in rank_batches[0]]
    losses, clipped = [], 0
    for step, parts in enumerate(rank_batches, start=1):
        total = sum(len(y) for _, _, y in parts)
        opt.zero_grad()
        loss_sum = 0.0
        for rank, (m1, m5, y) in enumerate(parts):
            set_buffers(model, buffers[rank])
            for begin in range(0, len(y), micro_batch):
                rows = slice(begin, begin + micro_batch)
                part = F.mse_loss(model(m1[rows], m5[rows]).squeeze(1), y[rows], reduction="sum")
                (part / total).backward()
                loss_sum += part.item()
            buffers[rank] = buffer_values(model)
        norm = torch.nn.utils.clip_grad_norm_(params, CLIP)
        clipped += int(norm > CLIP)
        opt.step()
        losses.append(loss_sum / total)
        if step in average_at:  # Note [Buffers across ranks]
            mean = {n: (torch.stack([b[n].double() for b in buffers]).mean(0).to(v.dtype)
                        if v.is_floating_point() else buffers[0][n]) for n, v in buffers[0].items()}
            buffers = [dict(mean) for _ in buffers]
    return losses, model, buffers, clipped


class TorchScriptCase(mbtest.SeriesTrainingTestCase):
    """The series file, every archive of modules.py, and the helpers of the tests below."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls._archive_dir = tempfile.TemporaryDirectory(prefix="mbts-")
        cls.archives = modules.save_all(cls._archive_dir.name)

    @classmethod
    def tearDownClass(cls):
        cls._archive_dir.cleanup()
        super().tearDownClass()

    def config(self, run_dir, archive="net", optim="sgd", steps=STEPS):
        text = BASE_CONFIG.format(run_dir=run_dir, data=self.data, archive=self.archives.get(archive, archive),
                                  steps=steps, clip=CLIP, optim=optim, lr=LR[optim], wd=WEIGHT_DECAY)
        return self.write("config-%d.yaml" % len(os.listdir(self.tmp)), text)

    def train(self, np_, config, overrides=(), env=None, expect=0):
        args = ["train", "--config", config] + list(overrides)
        r = mbtest.run(args, env=env, timeout=600) if np_ == 1 else mbtest.mpirun(np_, args, env=env, timeout=600)
        self.assertEqual(r.returncode, expect, repr(r))
        self.assertEqual(mbtest.crash_signs(r.output), [], repr(r))
        return r

    def dump_batches(self, config, np_=1, steps=STEPS):
        """The first `steps` global batches: per step, one (m1, m5, targets) per rank."""
        dump = self.path("batches-%d.h5" % np_)
        args = ["data", "check", "--config", config, "--batches", str(steps), "--dump", dump]
        r = mbtest.run(args) if np_ == 1 else mbtest.mpirun(np_, args)
        self.assertEqual(r.returncode, 0, repr(r))
        if np_ == 1:
            return [[b] for b in read_batches(dump, steps)]
        per_rank = [read_batches(dump.replace(".h5", ".rank%d.h5" % r), steps) for r in range(np_)]
        return [list(parts) for parts in zip(*per_rank)]

    def windows(self, samples, streams):
        """The inputs of `samples`, cut from the series file as docs/data-format.md defines."""
        inputs = []
        with h5py.File(self.data, "r") as f:
            for name, window in streams.items():
                values = torch.from_numpy(f["series/%s/values" % name][()]).float()
                ends = torch.from_numpy(f["samples/end/%s" % name][()])[samples]
                inputs.append(values[ends.unsqueeze(1) + torch.arange(-window + 1, 1)])
        return inputs


class TorchScriptTrainingTest(TorchScriptCase):
    # --- acceptance: per-step losses of a plain PyTorch loop ---------------------------------

    def test_losses_match_a_python_loop(self):
        batches = self.dump_batches(self.config(self.path("dump")))
        for optim in ("sgd", "adamw"):
            with self.subTest(optim=optim):
                run = self.path("parity-" + optim)
                self.train(2, self.config(run, optim=optim), ["run.checkpoint_every=%d" % STEPS])
                ours = train_losses(run)
                self.assertEqual(sorted(ours), list(range(1, STEPS + 1)))
                theirs, model, _, clipped = python_training(self.archives["net"], batches, optim)
                np.testing.assert_allclose([ours[s] for s in range(1, STEPS + 1)], theirs, rtol=RTOL, atol=0,
                                           err_msg="megabatch (2 ranks) vs the Python loop, " + optim)
                # The comparison has power: the run trained, clipping was exercised, and the
                # Python loop on other batches (batch 11 twice) parts from megabatch's losses.
                self.assertLess(theirs[-1], 0.9 * theirs[0], "the module trains")
                self.assertGreater(clipped, 0, "the clip at %g bound at least once" % CLIP)
                shifted = batches[:10] + batches[11:12] + batches[11:STEPS]
                other, _, _, _ = python_training(self.archives["net"], shifted, optim)
                self.assertFalse(np.allclose(other[10], ours[11], rtol=RTOL, atol=0))
                # The weights agree too, under their PyTorch names.
                saved = checkpoint(run, STEPS)
                state = model.state_dict()
                self.assertEqual(set(saved), set(state))
                for name, value in state.items():
                    np.testing.assert_allclose(saved[name], value.numpy(), rtol=1e-4, atol=1e-6, err_msg=name)
                print("%s: %d steps, loss %.5f -> %.5f, %d clipped, max relative loss difference %.2g" % (
                    optim, STEPS, theirs[0], theirs[-1], clipped,
                    max(abs(ours[s + 1] - t) / t for s, t in enumerate(theirs))))

    def test_batch_norm_buffers_are_averaged_at_checkpoints(self):
        """Rank-local running statistics between checkpoints, their mean at each checkpoint."""
        steps, every = 10, 5
        batches = self.dump_batches(self.config(self.path("dump"), "net_bn"), np_=2, steps=steps)
        run = self.path("bn")
        self.train(2, self.config(run, "net_bn", steps=steps), ["run.checkpoint_every=%d" % every])
        ours = train_losses(run)
        # 2 ranks: micro-batches of 32 / 2 = 16 rows (a rank with 17 rows runs 16 + 1).
        theirs, model, buffers, _ = python_training(self.archives["net_bn"], batches, "sgd",
                                                    average_at=(every,), micro_batch=16)
        np.testing.assert_allclose([ours[s] for s in range(1, steps + 1)], theirs, rtol=RTOL, atol=0,
                                   err_msg="2 ranks with batch norm vs the Python replay of both ranks")
        # Before the checkpoint at step 10 the ranks' statistics differ; the checkpoint holds their mean.
        mean = buffers[0]["enc_m1.norm.running_mean"].numpy()
        other = buffers[1]["enc_m1.norm.running_mean"].numpy()
        self.assertFalse(np.allclose(mean, other, rtol=1e-3), "rank-local statistics differ")
        saved = checkpoint(run, steps)
        for name in ("running_mean", "running_var"):
            for stream in ("m1", "m5"):
                key = "enc_%s.norm.%s" % (stream, name)
                expected = (buffers[0][key].double() + buffers[1][key].double()) / 2
                np.testing.assert_allclose(saved[key], expected.numpy(), rtol=1e-5, atol=1e-7, err_msg=key)
        self.assertEqual(int(saved["enc_m1.norm.num_batches_tracked"]),
                         int(buffers[0]["enc_m1.norm.num_batches_tracked"]), "rank 0's count")
        self.assertGreaterEqual(int(saved["enc_m1.norm.num_batches_tracked"]), steps)

    # --- acceptance: the trainer's features with a TorchScript model ------------------------

    def test_bf16_autocast(self):
        runs = {p: self.path("bf16-" + p) for p in ("fp32", "bf16")}
        for precision, run in runs.items():
            self.train(2, self.config(run, optim="adamw", steps=40), ["train.precision=" + precision])
        l32, l16 = train_losses(runs["fp32"]), train_losses(runs["bf16"])
        tail = lambda losses: float(np.mean([losses[s] for s in range(31, 41)]))  # noqa: E731
        self.assertLess(abs(tail(l16) - tail(l32)) / tail(l32), 0.05, (tail(l16), tail(l32)))
        # Autocast reaches the TorchScript code: CPU runs are deterministic, so without it the
        # two runs would agree bit for bit; with it the first forward pass already differs, and
        # the runs drift apart by bf16's rounding (~1e-3), far beyond fp32's.
        self.assertNotEqual(l16[1], l32[1])
        drift = max(abs(l16[s] - l32[s]) / l32[s] for s in range(1, 41))
        self.assertGreater(drift, 1e-3, "largest relative loss difference of bf16 and fp32")
        print("bf16 vs fp32, 2 ranks, 40 steps: mean loss of steps 31-40 %.5f vs %.5f (%.2g relative), "
              "largest per-step relative difference %.2g" % (
                  tail(l16), tail(l32), abs(tail(l16) - tail(l32)) / tail(l32), drift))
        with h5py.File(os.path.join(runs["bf16"], "checkpoints", "step-%08d.h5" % 40), "r") as f:
            self.assertTrue(all(f["model"][n].dtype == np.float32 for n in f["model"]), "fp32 master weights")

    def test_gradient_accumulation(self):
        plain, accumulated = self.path("plain"), self.path("accumulated")
        self.train(2, self.config(plain), ["run.checkpoint_every=%d" % STEPS])
        r = self.train(2, self.config(accumulated), ["train.micro_batch=4", "run.checkpoint_every=%d" % STEPS])
        self.assertIn("micro batch 4 per rank", r.output)
        a, b = train_losses(plain), train_losses(accumulated)
        np.testing.assert_allclose([b[s] for s in sorted(a)], [a[s] for s in sorted(a)], rtol=RTOL)
        print("micro-batches of 4 vs 16 rows, 2 ranks, %d steps: max relative loss difference %.2g" % (
            len(a), max(abs(b[s] - a[s]) / a[s] for s in a)))
        pa, pb = checkpoint(plain, STEPS), checkpoint(accumulated, STEPS)
        for name in pa:
            np.testing.assert_allclose(pb[name], pa[name], rtol=1e-4, atol=1e-6, err_msg=name)

    def test_nan_guard(self):
        run = self.path("nan")
        r = self.train(2, self.config(run), ["train.max_steps=8", "run.checkpoint_every=1"],
                       env={"MEGABATCH_FAULT_NAN_STEP": "5", "MEGABATCH_FAULT_NAN_RANK": "1"})
        for rank in ("r0/2", "r1/2"):
            self.assertIn("[%s] [train] warning: step 5: non-finite gradient norm" % rank, r.output)
        p4, p5, p6 = (checkpoint(run, s) for s in (4, 5, 6))
        for name in p4:
            np.testing.assert_array_equal(p4[name], p5[name], err_msg="step 5 must not change " + name)
        self.assertTrue(any(not np.array_equal(p5[n], p6[n]) for n in p5), "step 6 trains again")

    def test_sigterm_checkpoint_and_resume_on_one_rank(self):
        """SIGTERM to both ranks mid-run: exit 75 after a checkpoint; resumed on ONE rank, every
        step's loss equals that of an uninterrupted 2-rank run (elastic resume 2 -> 1)."""
        run = self.path("sigterm")
        config = self.config(run, optim="adamw", steps=100000)
        cmd = [mbtest.MPIEXEC, "-np", "2", "--oversubscribe", mbtest.BIN] + mbtest.with_device(
            ["train", "--config", config], 2)
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
        metrics = os.path.join(run, "metrics.jsonl")
        deadline = time.time() + 120
        while time.time() < deadline and not (os.path.exists(metrics) and len(read_metrics(run)) >= 5):
            time.sleep(0.1)
        ranks = subprocess.run(["pgrep", "-f", "megabatch train --config " + config], stdout=subprocess.PIPE,
                               universal_newlines=True).stdout.split()
        ranks = [int(p) for p in ranks if int(p) != proc.pid]
        self.assertEqual(len(ranks), 2, ranks)
        for pid in ranks:
            os.kill(pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
        self.assertEqual(proc.returncode, 75, out)
        self.assertIn("SIGTERM received", out)
        stopped = latest_step(run)
        total = stopped + 10
        self.train(1, config, ["train.max_steps=%d" % total])
        reference = self.path("uninterrupted")
        self.train(2, self.config(reference, optim="adamw", steps=total))
        ours, ref = train_losses(run), train_losses(reference)
        self.assertEqual(sorted(ours), list(range(1, total + 1)))
        np.testing.assert_allclose([ours[s] for s in range(1, total + 1)], [ref[s] for s in range(1, total + 1)],
                                   rtol=mbtest.RUN_RTOL, err_msg="stopped on 2 ranks at %d, resumed on 1" % stopped)
        print("SIGTERM at step %d on 2 ranks, resumed on 1 to step %d: losses equal the uninterrupted run's" % (
            stopped, total))
        final, expected = checkpoint(run, total), checkpoint(reference, total)
        for name in expected:
            np.testing.assert_allclose(final[name], expected[name], rtol=1e-4, atol=1e-6, err_msg=name)

    def test_lstm_checkpoint_continues_in_the_built_in_lstm(self):
        """modules.TwoStreamLstm is the built-in lstm written in Python (same names and shapes):
        its checkpoint continues in the C++ model with the losses the TorchScript run had, so
        the two compute the same function (and the overhead benchmark compares equal models)."""
        run = self.path("ts-lstm")
        config = self.config(run, "lstm", optim="adamw", steps=STEPS)
        self.train(1, config, ["run.checkpoint_every=10"])
        continued = self.path("built-in-lstm")
        step10 = os.path.join(run, "checkpoints", "step-%08d.h5" % 10)
        self.train(1, config, ["model.kind=lstm", "model.hidden=16", "model.layers=1", "model.head_hidden=16",
                               "run.dir=" + continued, "run.resume=" + step10])
        ours, theirs = train_losses(run), train_losses(continued)
        self.assertEqual(sorted(theirs), list(range(11, STEPS + 1)))
        np.testing.assert_allclose([theirs[s] for s in sorted(theirs)], [ours[s] for s in sorted(theirs)],
                                   rtol=RTOL, err_msg="built-in lstm from the TorchScript lstm's step 10")
        self.assertGreater(abs(ours[11] - ours[20]), 1e-3, "the runs train")

    # --- acceptance: export ----------------------------------------------------------------

    def test_export_round_trip(self):
        """A module with dropout, tied weights and a frozen parameter: trained on 2 ranks,
        predicted by megabatch, exported, and run by torch.jit.load in Python."""
        run = self.path("export")
        self.train(2, self.config(run, "net_dropout_tied_frozen", optim="adamw", steps=10))
        saved = checkpoint(run, 10)
        np.testing.assert_array_equal(saved["mix.weight"], saved["mix2.weight"])  # tied: both names
        np.testing.assert_array_equal(saved["scale"], [0.5])  # frozen: never updated
        original = torch.jit.load(self.archives["net_dropout_tied_frozen"])
        self.assertFalse(np.allclose(saved["mix.weight"], original.mix.weight.detach().numpy()), "trained")
        # The checkpoint loads by name into the scripted module and into the eager one (strict).
        state = {n: torch.from_numpy(v) for n, v in saved.items()}
        original.load_state_dict(state, strict=True)
        modules.TwoStreamNet(dropout=0.3, tied=True, frozen=True).load_state_dict(state, strict=True)

        predictions = self.path("predictions.h5")
        r = mbtest.run(["predict", "--checkpoint", run, "--data", self.data, "--out", predictions, "--split", "test"])
        self.assertExit(r, 0)
        exported = self.path("trained.pt")
        r = mbtest.run(["export", "--checkpoint", run, "--to", exported])
        self.assertExit(r, 0, "wrote " + exported)
        self.assertFalse(os.path.exists(exported + ".tmp"))
        # Out of memory while exporting (issue 36 item 3): a message, no archive, no stack frame.
        short = self.path("short.pt")
        r = mbtest.run(["export", "--checkpoint", run, "--to", short], env={"MEGABATCH_FAULT_OOM": "0:exporting"})
        self.assertExit(r, 1, "rank 0 ran out of CPU memory while exporting the model", "remedies, in this order:")
        self.assertFalse(os.path.exists(short) or os.path.exists(short + ".tmp"))
        self.assertEqual(mbtest.crash_signs(r.output) + [line for line in r.output.splitlines() if "frame #" in line], [])

        trained = torch.jit.load(exported)
        self.assertTrue(trained.training, "the archive's own train/eval flag is kept")
        for name, value in trained.state_dict().items():
            np.testing.assert_array_equal(value.numpy(), saved[name], err_msg=name)
        self.assertIs(trained.mix.weight, trained.mix2.weight)
        with h5py.File(predictions, "r") as f:
            ours = torch.from_numpy(f["predictions"][()])
            samples = torch.from_numpy(f["sample_index"][()])
        inputs = self.windows(samples, {"m1": 16, "m5": 8})
        trained.eval()
        with torch.no_grad():
            theirs = trained(*inputs).squeeze(1)
        self.assertEqual(tuple(ours.shape), tuple(theirs.shape))
        difference = float((ours - theirs).abs().max())
        self.assertLessEqual(difference, 1e-6, "megabatch predict vs torch.jit.load of the export")
        print("export round trip: %d test samples, max |predict - exported| = %.2g" % (len(samples), difference))
        # The check has power: train mode (dropout) and the untrained weights both differ.
        trained.train()
        with torch.no_grad():
            self.assertGreater(float((trained(*inputs).squeeze(1) - ours).abs().max()), 1e-3)
        untrained = torch.jit.load(self.archives["net_dropout_tied_frozen"]).eval()
        with torch.no_grad():
            self.assertGreater(float((untrained(*inputs).squeeze(1) - ours).abs().max()), 1e-3)

        # Built-in models have no archive: export says where their weights are instead.
        lstm = self.path("lstm")
        self.train(1, self.config(lstm, steps=2), ["model.kind=lstm", "model.hidden=4", "model.layers=1"])
        r = mbtest.run(["export", "--checkpoint", lstm, "--to", self.path("lstm.pt")])
        self.assertExit(r, 2, "holds a lstm model; megabatch export writes the archives of model.kind = torchscript")


class TorchScriptInputsTest(TorchScriptCase):
    """Bad archives and modules: each a clear error naming the fix, with the contract's exit code,
    on every rank of `mpirun -np 2` (no crash, no hang); and the layouts besides series."""

    def assertFails(self, np_, overrides, code, *fragments, config=None):
        config = config or self.config(self.path("bad"))
        args = ["train", "--config", config] + list(overrides)
        r = mbtest.run(args, timeout=120) if np_ == 1 else mbtest.mpirun(np_, args, timeout=120)
        self.assertExit(r, code, *fragments)
        self.assertEqual(mbtest.crash_signs(r.output), [], repr(r))
        if np_ > 1:  # every rank reports the agreed error
            for rank in range(np_):
                self.assertIn("[r%d/%d] [app] error:" % (rank, np_), r.output, repr(r))
        return r

    def test_bad_archives_and_modules(self):
        text = self.write("notes.txt", "not an archive\n")
        state_dict = self.path("state_dict.pt")
        torch.save(modules.TwoStreamNet().state_dict(), state_dict)
        cases = [
            (self.path("missing.pt"), "does not exist or is not a file"),
            (text, "does not load as a TorchScript archive"),
            (state_dict, "does not load as a TorchScript archive"),
            (self.data, "does not load as a TorchScript archive"),
            ("no_forward", "has no forward method"),
            ("one_input", "forward takes 1 argument(s), but megabatch passes 2"),
            ("int_argument", "argument 'm5' is int, but megabatch passes a Tensor"),
            ("swapped", "name the data's inputs in another order than megabatch passes them (m1, m5"),
            ("tuple_output", "forward must return one Tensor"),
            ("extra_axis", "; the mse objective expects [B, 1] or [B] (B = "),
            ("wrong_features", "forward failed in train mode on a random batch of the data's shapes"),
            ("no_parameters", "has no trainable parameters"),
            ("detached", "does not depend on any trainable parameter"),
        ]
        for archive, message in cases:
            with self.subTest(archive=os.path.basename(archive)):
                r = self.assertFails(2, ["model.path=" + self.archives.get(archive, archive)], 2, message)
                self.assertIn("hint:", r.output)
                if "TorchScript archive" in message:  # the reason is LibTorch's; the hint names both fixes
                    self.assertIn("torch.save() files (pickled modules, state_dicts) cannot be trained", r.output)
                    self.assertRegex(r.output, r"a PyTorch no newer than this LibTorch \(\d+\.\d+\.\d+\)")
        # Each names what megabatch calls, with the data's real shapes.
        r = self.assertFails(1, ["model.path=" + self.archives["extra_axis"]], 2,
                             "megabatch calls forward(self, m1: Tensor[B, 16, 3], m5: Tensor[B, 8, 3]) -> "
                             "Tensor[B, 1] or [B]")
        self.assertFails(1, ["model.path="], 2, "model.kind = torchscript needs model.path")

    def test_checkpoint_of_another_module(self):
        run = self.path("mismatch")
        config = self.config(run, steps=2)
        self.train(2, config)
        r = self.assertFails(2, ["train.max_steps=4", "model.path=" + self.archives["renamed"]], 4,
                             "do not match the torchscript model: the checkpoint lacks 2 of the model's "
                             "(blend.weight, blend.bias); it has 2 the model does not (mix.bias, mix.weight)",
                             config=config)
        self.assertIn("the parameter names of the model.path archive", r.output)
        self.assertFails(2, ["train.max_steps=4", "model.path=" + self.archives["narrow"]], 4,
                         "mix.weight [16, 16] in the checkpoint but [12, 12] in the model", config=config)
        r = mbtest.run(["eval", "--checkpoint", run, "model.path=" + self.archives["renamed"]])
        self.assertExit(r, 4, "it has 2 the model does not (mix.bias, mix.weight)")
        # The right archive still resumes.
        self.train(2, config, ["train.max_steps=4"])
        self.assertEqual(sorted(train_losses(run)), [1, 2, 3, 4])

    def test_help_says_torchscript_code_runs(self):
        for args in (["--help"], ["train", "--help"], ["export", "--help"]):
            r = mbtest.run(args)
            self.assertExit(r, 0, "megabatch runs the TorchScript code of the archive")

    def test_samples_and_tokens_layouts(self):
        # samples: [N, F] features, [N, 2] targets; forward(features [B, F]) -> [B, 2].
        flat = self.path("flat.h5")
        rng = np.random.default_rng(0)
        x = rng.standard_normal((2000, 5)).astype("f4")
        with h5py.File(flat, "w") as f:
            f["features"] = x
            f["targets"] = np.stack([x[:, 0] - x[:, 1], x[:, 2] * 0.5], axis=1).astype("f4")
        archive = self.path("flat.pt")
        torch.jit.script(modules.FlatFeatures(5, 2)).save(archive)
        config = self.write("flat.yaml", "data: {path: %s, layout: samples, canonical_shards: 4}\n"
                            "model: {kind: torchscript, path: %s}\n"
                            "train: {global_batch: 64, max_steps: 60, eval_every: 60, threads: 1}\n"
                            "optim: {lr: 0.01}\nrun: {dir: %s, log_every: 10}\n" % (flat, archive, self.path("flat")))
        self.train(2, config)
        losses = train_losses(self.path("flat"))
        self.assertLess(losses[60], 0.5 * losses[10], losses)
        r = mbtest.run(["eval", "--checkpoint", self.path("flat"), "--split", "test"])
        self.assertExit(r, 0, "test_mse")

        # classification: [N] labels of 3 classes; forward returns [B, 3] logits.
        labels = self.path("labels.h5")
        with h5py.File(labels, "w") as f:
            f["features"] = x
            f["targets"] = (x[:, 0] > 0).astype("i8") + (x[:, 1] > 0.5).astype("i8")
        config = self.write("labels.yaml", "data: {path: %s, layout: samples, canonical_shards: 4}\n"
                            "model: {kind: torchscript, path: %s, task: classification}\n"
                            "train: {global_batch: 64, max_steps: 30, eval_every: 30, threads: 1}\n"
                            "optim: {lr: 0.01}\nrun: {dir: %s, log_every: 10}\n" % (labels, archive, self.path("labels")))
        self.assertFails(1, [], 2, "the classification (cross_entropy) objective expects [B, 3] logits", config=config)
        classifier = self.path("classifier.pt")
        torch.jit.script(modules.FlatFeatures(5, 3)).save(classifier)
        self.train(1, config, ["model.path=" + classifier])
        evals = [m for m in read_metrics(self.path("labels")) if m["event"] == "eval"]
        self.assertGreater(evals[-1]["accuracy"], 0.5)

        # tokens: forward(idx [B, T] int64) -> [B, T, V] logits; next-token cross-entropy.
        tokens = self.path("arith.h5")
        self.assertExit(mbtest.run(["data", "arith", "--out", tokens, "--problems", "3000", "--heldout", "10"]), 0)
        with h5py.File(tokens, "r") as f:
            vocab = int(f["tokens"].attrs["vocab_size"])
        archive = self.path("lm.pt")
        torch.jit.script(modules.TinyLm(vocab, 16)).save(archive)
        config = self.write("lm.yaml", "data: {path: %s, layout: tokens, context: 16, canonical_shards: 4}\n"
                            "model: {kind: torchscript, path: %s}\n"
                            "train: {global_batch: 32, max_steps: 40, eval_every: 40, threads: 1}\n"
                            "optim: {lr: 0.01}\nrun: {dir: %s, log_every: 10}\n" % (tokens, archive, self.path("lm")))
        r = self.train(2, config)
        self.assertIn("tokens/s", r.output)
        losses = train_losses(self.path("lm"))
        self.assertLess(losses[40], 0.85 * losses[10], losses)
        self.assertLess(losses[10], 1.2 * np.log(vocab))  # a mean per token, not a sum
        evals = [m for m in read_metrics(self.path("lm")) if m["event"] == "eval"]
        self.assertIn("accuracy", evals[-1])
        # A [B, T, V] output with too few logits is refused.
        small = self.path("lm-small.pt")
        torch.jit.script(modules.TinyLm(vocab, 16, logits=vocab - 1)).save(small)
        self.assertFails(1, ["model.path=" + small, "run.dir=" + self.path("lm-small")], 2,
                         "next-token cross-entropy expects [B, 16, V] logits with V >= vocab_size %d" % vocab,
                         config=config)

    def test_example_trains_exports_and_runs_in_python(self):
        """examples/torchscript as docs/models.md tells a user to run it, with fewer steps."""
        example = os.path.join(mbtest.SOURCE_DIR, "examples", "torchscript")
        archive, trained, data = self.path("tcn.pt"), self.path("tcn-trained.pt"), self.path("demo.h5")
        subprocess.run([mbtest.PYTHON, os.path.join(example, "tcn.py"), "--out", archive, "--channels", "8",
                        "--levels", "2"], check=True)
        self.assertExit(mbtest.run(["data", "synth-series", "--out", data, "--rows", "20000"]), 0)
        run = self.path("tcn")
        config = os.path.join(example, "tcn.yaml")
        self.train(2, config, ["data.path=" + data, "model.path=" + archive, "run.dir=" + run,
                               "train.max_steps=20", "train.eval_every=10", "run.log_every=10",
                               "train.threads=1"])
        evals = [m for m in read_metrics(run) if m["event"] == "eval"]
        self.assertEqual([m["step"] for m in evals], [10, 20])
        self.assertExit(mbtest.run(["export", "--checkpoint", run, "--to", trained]), 0)
        used = subprocess.run([mbtest.PYTHON, os.path.join(example, "use_trained.py"), trained, data],
                              stdout=subprocess.PIPE, universal_newlines=True, check=True)
        self.assertIn("MSE over these 8 samples", used.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
