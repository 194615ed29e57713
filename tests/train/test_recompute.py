"""Activation recomputation (issue 37, Note [Activation recomputation] in src/model/Recompute.h):
with train.recompute the gradients equal a run without it, bit for bit on the CPU in fp32 with
dropout on, on 2 ranks with small gradient buckets (the reducer's hooks fire inside the
recomputed backward) and with accumulation; a run resumes across the setting both ways; kinds
without segments say what happens.
Usage: test_recompute.py [RecomputeTest[.test_x]]
"""
import os
import re
import shutil
import sys
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import mbtest  # noqa: E402


class RecomputeTest(mbtest.TempDirTestCase):
    def arith(self):
        path = self.path("arith.h5")
        if not os.path.exists(path):
            r = mbtest.run(["data", "arith", "--out", path, "--problems", "2000", "--heldout", "50"], timeout=120)
            self.assertEqual(r.returncode, 0, repr(r))
        return path

    def gpt_args(self, run_dir, *extra):
        return ["train", "--config", mbtest.config_path("arith-gpt.yaml"), "data.path=" + self.arith(),
                "run.dir=" + run_dir, "train.max_steps=5", "train.eval_every=0", "run.checkpoint_every=5",
                "train.global_batch=32", "train.micro_batch=8", "model.dropout=0.1", "model.layers=3",
                "train.threads=1", "run.log_every=1", "run.progress=lines", "data.canonical_shards=4",
                "dist.first_bucket_mb=0.01", "dist.bucket_mb=0.02"] + list(extra)

    def assert_same_run(self, a, b, what, step=5):
        self.assertEqual(mbtest.train_losses(a), mbtest.train_losses(b), what)
        ckpt = os.path.join("checkpoints", "step-%08d.h5" % step)
        pa = mbtest.checkpoint_params(os.path.join(a, ckpt))
        pb = mbtest.checkpoint_params(os.path.join(b, ckpt))
        self.assertEqual(sorted(pa), sorted(pb))
        for key in pa:
            np.testing.assert_array_equal(pa[key], pb[key], err_msg="%s: %s" % (what, key))

    def test_gpt_blocks_give_the_same_gradients_bit_for_bit_on_two_ranks(self):
        plain = self.path("none")
        r = mbtest.mpirun(2, self.gpt_args(plain), timeout=300)
        self.assertEqual(r.returncode, 0, repr(r))
        for setting in (["train.recompute=blocks"], ["train.recompute=blocks", "train.recompute_every=2"],
                        ["train.recompute=full"]):
            run_dir = self.path("-".join(setting))
            r = mbtest.mpirun(2, self.gpt_args(run_dir, *setting), timeout=300)
            self.assertEqual(r.returncode, 0, repr(r))
            every = 2 if "train.recompute_every=2" in setting else 1
            self.assertIn("%s: %d of 3 transformer blocks run again in the backward pass"
                          % (setting[0].replace("=", " = "), 3 if every == 1 else 2), r.output)
            self.assert_same_run(plain, run_dir, " ".join(setting))
            print("%s: 5 steps on 2 ranks equal the run without, bit for bit" % " ".join(setting))

    def same_gradients_under(self, precision):
        """The GPT on 2 ranks, dropout on, under `precision`: blocks equal the run without, bit for
        bit (the recomputed forward runs under the first pass's autocast state; fp16's loss scale
        multiplies the same gradients)."""
        args = ["train.precision=" + precision, "train.max_steps=4", "run.checkpoint_every=4"]
        plain = self.path(precision + " none")
        r = mbtest.mpirun(2, self.gpt_args(plain, *args), timeout=300)
        self.assertEqual(r.returncode, 0, repr(r))
        recomputing = self.path(precision + " blocks")
        r = mbtest.mpirun(2, self.gpt_args(recomputing, "train.recompute=blocks", *args), timeout=300)
        self.assertEqual(r.returncode, 0, repr(r))
        self.assert_same_run(plain, recomputing, precision, step=4)
        print("%s: 4 steps with train.recompute=blocks equal the run without, bit for bit" % precision)

    def test_bf16_autocast_gives_the_same_gradients_bit_for_bit(self):
        self.same_gradients_under("bf16")

    def test_fp16_with_loss_scaling_gives_the_same_gradients_bit_for_bit(self):
        self.same_gradients_under("fp16")

    def test_graph_layers_give_the_same_gradients_bit_for_bit(self):
        """The GIN's message-passing layers and the panel GAT's graph-attention layers, dropout
        on, 1 rank: blocks and every 2 equal the run without, bit for bit."""
        graphs = self.path("graphs.h5")
        panel = self.path("panel.h5")
        for tool, path, extra in (("synth-graphs", graphs, []),
                                  ("synth-panel", panel, ["--dates", "1200", "--instruments", "20"])):
            r = mbtest.run(["data", tool, "--out", path] + extra, timeout=120)
            self.assertEqual(r.returncode, 0, repr(r))
        for name, config, data, layers in (("GIN", "graphs-gin.yaml", graphs, "message-passing layers"),
                                           ("panel GAT", "panel-gat.yaml", panel, "graph-attention layers")):
            args = ["train", "--config", mbtest.config_path(config), "data.path=" + data, "train.max_steps=5",
                    "train.eval_every=0", "run.checkpoint_every=5", "train.threads=1", "run.log_every=1",
                    "run.progress=lines", "model.dropout=0.2"]
            plain = self.path(name + " none")
            r = mbtest.run(args + ["run.dir=" + plain], timeout=300)
            self.assertEqual(r.returncode, 0, repr(r))
            for setting in (["train.recompute=blocks"], ["train.recompute=blocks", "train.recompute_every=2"]):
                run_dir = self.path(name + " " + " ".join(setting))
                r = mbtest.run(args + ["run.dir=" + run_dir] + setting, timeout=300)
                self.assertEqual(r.returncode, 0, repr(r))
                self.assertIn(layers + " run again in the backward pass", r.output)
                self.assert_same_run(plain, run_dir, "%s, %s" % (name, " ".join(setting)))
                print("%s, %s: 5 steps equal the run without, bit for bit" % (name, " ".join(setting)))

    def test_a_run_resumes_across_the_setting_both_ways(self):
        """3 steps under one setting, then 2 more resumed under the other, equal 2 more resumed
        under the same setting, bit for bit (dropout on: a resume restarts the RNG stream the
        same way in both, so the comparison is between resumes)."""
        for first, then in (("none", "blocks"), ("blocks", "none")):
            started = self.path("%s-3-steps" % first)
            r = mbtest.run(self.gpt_args(started, "train.max_steps=3", "run.checkpoint_every=3",
                                         "train.recompute=" + first), timeout=300)
            self.assertEqual(r.returncode, 0, repr(r))
            same, other = self.path("%s-then-%s" % (first, first)), self.path("%s-then-%s" % (first, then))
            shutil.copytree(started, same)
            shutil.copytree(started, other)
            for run_dir, setting in ((same, first), (other, then)):
                r = mbtest.run(self.gpt_args(run_dir, "train.recompute=" + setting), timeout=300)
                self.assertEqual(r.returncode, 0, repr(r))
                self.assertIn("from step 3", r.output)
            self.assert_same_run(same, other, "%s, resumed under %s" % (first, then))
            print("3 steps with train.recompute=%s, resumed with %s: equal to resuming with %s, bit for bit"
                  % (first, then, first))

    def test_a_micro_batch_that_fits_only_with_recomputation(self):
        """A budget between what one sample needs with and without recomputation (each measured
        by the memory plan, so the test holds whatever LibTorch's version allocates): without,
        train.micro_batch: auto finds no size (exit 1, the message names train.recompute); with
        train.recompute: blocks, the run trains."""
        args = ["train", "--config", mbtest.config_path("arith-gpt.yaml"), "data.path=" + self.arith(),
                "model.hidden=128", "model.layers=6", "model.heads=4", "data.context=256",
                "data.canonical_shards=4", "train.global_batch=8", "train.max_steps=1", "train.eval_every=0",
                "train.threads=1", "run.progress=lines"]
        variable = {}
        for setting in ("none", "blocks"):
            run_dir = self.path("one sample, " + setting)
            r = mbtest.run(args + ["run.dir=" + run_dir, "train.micro_batch=1", "train.recompute=" + setting],
                           timeout=300)
            self.assertEqual(r.returncode, 0, repr(r))
            plan = [m for m in mbtest.read_metrics(run_dir) if m["event"] == "memory_plan"][0]
            fixed = plan["total_bytes"] - plan["activations_bytes"] - plan["workspace_bytes"]
            variable[setting] = plan["activations_bytes"] + plan["workspace_bytes"]
        self.assertLess(variable["blocks"], variable["none"] / 2, variable)
        budget_mb = (fixed + 1.1 * (variable["none"] + variable["blocks"]) / 2) / (1 << 20)
        args += ["train.micro_batch=auto", "train.memory_budget_mb=%.3f" % budget_mb, "train.max_steps=2"]
        r = mbtest.run(args + ["run.dir=" + self.path("none")], timeout=300)
        self.assertEqual(r.returncode, 1, repr(r))
        self.assertIn("not even a micro-batch of 1 sample fits", r.output)
        self.assertIn("train.recompute: blocks", r.output)
        self.assertFalse(mbtest.crash_signs(r.output), repr(r))
        r = mbtest.run(args + ["run.dir=" + self.path("blocks"), "train.recompute=blocks"], timeout=300)
        self.assertEqual(r.returncode, 0, repr(r))
        found = re.search(r"every rank runs micro batch ([0-9]+)", r.output)
        self.assertIsNotNone(found, r.output)
        self.assertNotIn("exceeds its budget", r.output)
        print("%.1f MiB budget (one sample: %.1f MiB of activations without recomputation, %.1f with): no "
              "micro-batch without, micro batch %s with blocks"
              % (budget_mb, variable["none"] / 2**20, variable["blocks"] / 2**20, found.group(1)))

    def test_kinds_without_segments_say_what_happens(self):
        series = self.path("series.h5")
        r = mbtest.run(["data", "synth-series", "--out", series, "--rows", "5000", "--features", "3",
                        "--streams", "m1:1,m5:5", "--seed", "3"], timeout=120)
        self.assertEqual(r.returncode, 0, repr(r))
        common = ["train", "--config", mbtest.config_path("demo.yaml"), "data.path=" + series,
                  "data.streams=[{name: m1, window: 8}, {name: m5, window: 4}]", "train.max_steps=2",
                  "train.eval_every=0", "train.recompute=blocks", "train.threads=1",
                  "model.kind=mlp"]
        r = mbtest.run(common + ["run.dir=" + self.path("mlp")], timeout=120)
        self.assertEqual(r.returncode, 0, repr(r))
        self.assertIn("train.recompute = blocks: an mlp has no segments worth recomputing; nothing changes",
                      r.output)
        import torch  # Debian's python3-torch scripts a module for megabatch's model.kind = torchscript

        class TwoStreams(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.head = torch.nn.Linear(2, 1)

            def forward(self, m1: torch.Tensor, m5: torch.Tensor) -> torch.Tensor:
                return self.head(torch.stack([m1.mean((1, 2)), m5.mean((1, 2))], 1))

        archive = self.path("two-streams.pt")
        torch.jit.script(TwoStreams()).save(archive)
        r = mbtest.run(common + ["run.dir=" + self.path("torchscript"), "model.kind=torchscript",
                                 "model.path=" + archive], timeout=120)
        self.assertEqual(r.returncode, 2, repr(r))
        self.assertIn("train.recompute = blocks cannot apply to a TorchScript model", r.output)
        self.assertIn("torch.utils.checkpoint", r.output)
        self.assertFalse(mbtest.crash_signs(r.output), repr(r))

    def test_lstm_time_segments_train_like_the_run_without(self):
        """Note [LSTM time segments]: the demo's three streams, 2 layers with dropout 0.2 between
        them, stateful lanes, 2 ranks, accumulation: the losses and weights of 5 steps with time
        segments equal the run without within rounding (the weight gradients sum over time in
        another order, so not bit for bit)."""
        series = self.path("series.h5")
        r = mbtest.run(["data", "synth-series", "--out", series, "--rows", "20000", "--features", "4",
                        "--streams", "m1:1,m5:5,h1:60", "--seed", "3"], timeout=120)
        self.assertEqual(r.returncode, 0, repr(r))
        args = ["train", "--config", mbtest.config_path("demo.yaml"), "data.path=" + series,
                "model.layers=2", "model.dropout=0.2", "model.stateful=true", "data.shuffle=false",
                "data.canonical_shards=4", "model.lane_stride=50", "train.global_batch=16",
                "train.micro_batch=4", "train.max_steps=5", "train.eval_every=0", "run.checkpoint_every=5",
                "train.threads=1", "run.log_every=1", "run.progress=lines"]
        plain = self.path("lstm none")
        r = mbtest.mpirun(2, args + ["run.dir=" + plain], timeout=300)
        self.assertEqual(r.returncode, 0, repr(r))
        segmented = self.path("lstm blocks")
        r = mbtest.mpirun(2, args + ["run.dir=" + segmented, "train.recompute=blocks"], timeout=300)
        self.assertEqual(r.returncode, 0, repr(r))
        self.assertIn("train.recompute = blocks: 8 of 8 time segments of the longest window", r.output)
        want, got = mbtest.train_losses(plain), mbtest.train_losses(segmented)
        self.assertEqual(sorted(want), [1, 2, 3, 4, 5])
        np.testing.assert_allclose([got[s] for s in sorted(want)], [want[s] for s in sorted(want)], rtol=1e-5)
        ckpt = os.path.join("checkpoints", "step-%08d.h5" % 5)
        pa = mbtest.checkpoint_params(os.path.join(plain, ckpt))
        pb = mbtest.checkpoint_params(os.path.join(segmented, ckpt))
        for key in pa:
            np.testing.assert_allclose(pb[key], pa[key], rtol=0, atol=1e-5, err_msg=key)
        print("LSTM, stateful, 2 ranks: 5 steps with time segments, losses %s vs %s without"
              % ([got[s] for s in sorted(got)], [want[s] for s in sorted(want)]))


if __name__ == "__main__":
    unittest.main()
