"""The memory plan (issue 36 item 1, Note [Memory plan]): before step 1 the run logs what the
neediest rank holds (parameters, gradients, optimizer state, resident data, and the activations
and workspace a trial forward + backward measures) against its budget, and metrics.jsonl
records it. The trial changes nothing: a run with the plan equals one without, bit for bit, with
dropout on, for the LSTM, the tiny GPT, the GIN and the panel GAT.
Usage: test_memory_plan.py [MemoryPlanTest[.test_x]]
"""
import os
import re
import sys
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import mbtest  # noqa: E402

PARTS = ["parameters", "gradients", "optimizer", "data", "activations", "workspace"]


class MemoryPlanTest(mbtest.TempDirTestCase):
    def make(self, tool, name, *args):
        path = self.path(name)
        r = mbtest.run(["data", tool, "--out", path] + list(args), timeout=300)
        self.assertEqual(r.returncode, 0, repr(r))
        return path

    def models(self):
        """(name, config, data, overrides): each with dropout on."""
        series = self.make("synth-series", "series.h5", "--rows", "20000", "--features", "3",
                           "--streams", "m1:1,m5:5,h1:60", "--seed", "3")
        arith = self.make("arith", "arith.h5", "--problems", "2000", "--heldout", "50")
        graphs = self.make("synth-graphs", "graphs.h5")
        panel = self.make("synth-panel", "panel.h5", "--dates", "1200", "--instruments", "20")
        return [("demo LSTM", "demo.yaml", series, ["model.dropout=0.2", "model.hidden=16", "model.head_hidden=16",
                                                    "train.global_batch=32"]),
                ("tiny GPT", "arith-gpt.yaml", arith, ["model.dropout=0.1", "train.global_batch=32"]),
                ("GIN", "graphs-gin.yaml", graphs, ["model.dropout=0.2"]),
                ("panel GAT", "panel-gat.yaml", panel, ["model.dropout=0.2"])]

    def train(self, config, data, run_dir, overrides, np_=1):
        args = ["train", "--config", mbtest.config_path(config), "data.path=" + data, "run.dir=" + run_dir,
                "train.max_steps=5", "train.eval_every=0", "run.checkpoint_every=5", "train.threads=1",
                "run.progress=lines", "run.log_every=1"] + overrides
        r = mbtest.run(args, timeout=300) if np_ == 1 else mbtest.mpirun(np_, args, timeout=300)
        self.assertEqual(r.returncode, 0, repr(r))
        return r

    def test_a_run_with_the_plan_equals_one_without_bit_for_bit(self):
        for name, config, data, overrides in self.models():
            with_plan, without = self.path(name + " plan"), self.path(name + " none")
            r = self.train(config, data, with_plan, overrides)
            self.assertIn("memory plan (rank 0", r.output)
            r = self.train(config, data, without, overrides + ["train.memory_plan=false"])
            self.assertNotIn("memory plan", r.output)
            losses = mbtest.train_losses(with_plan)
            self.assertEqual(len(losses), 5, name)
            self.assertEqual(losses, mbtest.train_losses(without), name)
            # The model's own counters too (the GAT's graph cache: the trial must leave no trace).
            counters = [{k: v for k, v in m.items() if k.startswith("graphs_")}
                        for m in mbtest.read_metrics(with_plan) if m["event"] == "train"]
            self.assertEqual(counters, [{k: v for k, v in m.items() if k.startswith("graphs_")}
                                        for m in mbtest.read_metrics(without) if m["event"] == "train"], name)
            ckpt = os.path.join("checkpoints", "step-00000005.h5")
            a = mbtest.checkpoint_params(os.path.join(with_plan, ckpt))
            b = mbtest.checkpoint_params(os.path.join(without, ckpt))
            self.assertEqual(sorted(a), sorted(b))
            for key in a:
                np.testing.assert_array_equal(a[key], b[key], err_msg="%s: %s" % (name, key))
            print("%s: 5 steps with and without the plan: losses and %d tensors equal bit for bit"
                  % (name, len(a)))

    def test_the_plan_is_logged_and_recorded_by_the_neediest_of_two_ranks(self):
        series = self.make("synth-series", "series.h5", "--rows", "20000", "--features", "3",
                           "--streams", "m1:1,m5:5,h1:60", "--seed", "3")
        run_dir = self.path("run")
        r = self.train("demo.yaml", series, run_dir, ["data.canonical_shards=4", "train.memory_budget_mb=1"], np_=2)
        self.assertRegex(r.output, r"memory plan \(rank [01], the most of 2\): [0-9.]+ [KMG]iB of CPU memory "
                                   r"of a 1.00 MiB budget \(train.memory_budget_mb\)")
        self.assertIn("exceeds its budget", r.output)
        self.assertIn("train.micro_batch", r.output)
        plans = [m for m in mbtest.read_metrics(run_dir) if m["event"] == "memory_plan"]
        self.assertEqual(len(plans), 1, plans)
        plan = plans[0]
        self.assertEqual(plan["total_bytes"], sum(plan[p + "_bytes"] for p in PARTS))
        self.assertEqual(plan["budget_bytes"], 1 << 20)
        self.assertEqual(plan["gradients_bytes"], plan["parameters_bytes"])
        self.assertEqual(plan["optimizer_bytes"], 2 * plan["parameters_bytes"])  # AdamW: two moments
        self.assertGreater(plan["activations_bytes"], 0)
        print("2 ranks: %r" % plan)

    def test_micro_batch_auto_fits_a_budget_the_hand_set_size_does_not_on_two_ranks(self):
        """Note [Automatic micro-batch]: under a budget too small for the whole share (32 per rank),
        auto searches, every rank runs the agreed size, and the run equals one with that size set
        by hand; against no accumulation, equal within float summation."""
        series = self.make("synth-series", "series.h5", "--rows", "20000", "--features", "3",
                           "--streams", "m1:1,m5:5,h1:60", "--seed", "3")
        common = ["data.canonical_shards=4", "train.global_batch=64", "model.dropout=0",
                  "train.memory_budget_mb=1.5"]
        auto = self.path("auto")
        r = self.train("demo.yaml", series, auto, common + ["train.micro_batch=auto"], np_=2)
        self.assertIn("micro batch auto per rank", r.output)
        found = re.search(r"train.micro_batch = auto: rank 0 tried 32: stopped at the budget \(does not fit\), "
                          r"[^;]*\(fits\)[^;]* in [0-9.]+ s; every rank runs micro batch ([0-9]+), ([0-9]+) per step", r.output)
        self.assertIsNotNone(found, r.output)
        chosen, per_step = int(found.group(1)), int(found.group(2))
        self.assertLess(chosen, 32)
        self.assertEqual(per_step, -(-32 // chosen))
        self.assertNotIn("exceeds its budget", r.output)
        plan = [m for m in mbtest.read_metrics(auto) if m["event"] == "memory_plan"][0]
        self.assertEqual(plan["micro_batch"], chosen)
        self.assertLessEqual(plan["total_bytes"], plan["budget_bytes"])
        with open(os.path.join(auto, "config.yaml")) as f:
            self.assertIn("micro_batch: auto", f.read())  # a resume searches again

        by_hand = self.path("by hand")
        r = self.train("demo.yaml", series, by_hand, common + ["train.micro_batch=%d" % chosen], np_=2)
        self.assertEqual(mbtest.train_losses(auto), mbtest.train_losses(by_hand))
        whole = self.path("whole share")
        r = self.train("demo.yaml", series, whole, common + ["train.micro_batch=32"], np_=2)
        self.assertIn("exceeds its budget", r.output)  # the hand-set share does not fit
        a, b = mbtest.train_losses(auto), mbtest.train_losses(whole)
        self.assertEqual(sorted(a), sorted(b))
        for step in a:
            self.assertAlmostEqual(a[step], b[step], delta=1e-5 * max(1.0, abs(b[step])))
        print("2 ranks, budget 1.5 MiB: auto chose %d (%d per step of 32), losses equal to the "
              "hand-set run: %r" % (chosen, per_step, sorted(a.items())))


if __name__ == "__main__":
    unittest.main()
