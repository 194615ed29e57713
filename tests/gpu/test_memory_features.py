"""The memory features on CUDA (label gpu-features, CUDA builds only, tests/gpu/Tests.cmake). The CPU
suite checks them against LibTorch's CPU allocations; here the caching allocator counts, and an
allocation failure is a real cudaMalloc failure. One rank on cuda:0, through the CLI:

- the memory plan (Note [Memory plan]) against the caching allocator's peak over the steps after
  it (gpu_mem_peak_mb of metrics.jsonl), for the demo LSTM, the tiny GPT and a 2-layer
  gpt2-small (its 50304-token embedding and logits);
- train.micro_batch: auto under a train.memory_budget_mb that the whole share does not fit: the
  search picks a smaller size, the steps' measured peak stays within the budget, and the run
  trains as one with that size set by hand;
- a step whose forward meets a real cudaMalloc failure (MEGABATCH_FAULT_OOM=0:PHASE:1:cuda asks
  CUDA's caching allocator for 1 PiB) is redone at half the micro-batch, and the run trains as
  one at that size.
Comparisons between runs use rtol 1e-3: TF32 and cuDNN's autotuning are on in training, so two
runs agree less closely than float32 rounding (tests/python/mbtest.py, RUN_RTOL), and a skipped
or repeated batch still moves a loss by percents.
Usage: test_memory_features.py [GpuMemoryFeaturesTest[.test_x]]
"""
import os
import random
import re
import shutil
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import mbtest  # noqa: E402

MIB = 1 << 20
GPU_RUN_RTOL = 1e-3
# The plan against the measured peak: the plan counts tensors (parameters, gradients, optimizer
# state, data) and one trial step; the allocator's peak also holds the optimizer's temporaries
# and rounds every block up (512 B, 2 MiB segments for large ones). Outside this band the plan
# misleads a user choosing a micro-batch, or micro_batch: auto.
PLAN_BAND = (0.75, 1.3)
# Every run: on cuda:0, one rank, no evaluation, a line and a record every step.
CUDA_RUN = ["train.device=cuda", "train.eval_every=0", "run.log_every=1", "run.progress=lines",
            "train.threads=1"]
# A 2-layer gpt2-small at context 512: its embedding (50304 x 768), logits and attention.
GPT2_SMALL_2 = ["model.layers=2", "data.context=512", "data.canonical_shards=8", "train.global_batch=16",
                "train.micro_batch=16"]


class GpuMemoryFeaturesTest(mbtest.TempDirTestCase):
    @classmethod
    def setUpClass(cls):
        cls._shared = tempfile.mkdtemp(prefix="mbgpumem-")
        root = cls._shared

        def make(tool, name, *args):
            path = os.path.join(root, name)
            r = mbtest.run(["data", tool, "--out", path] + list(args), timeout=300)
            if r.returncode != 0:
                raise RuntimeError(repr(r))
            return path

        cls.series = make("synth-series", "series.h5", "--rows", "20000", "--features", "3",
                          "--streams", "m1:1,m5:5,h1:60", "--seed", "3")
        cls.arith = make("arith", "arith.h5", "--problems", "2000", "--heldout", "50")
        rng = random.Random(5)
        words = ["alpha", "beta", "gamma", "delta", "step", "loss", "batch", "token", "eval", "rank"]
        with open(os.path.join(root, "corpus.txt"), "w") as f:
            f.write(" ".join(rng.choice(words) for _ in range(120000)))
        cls.tokens = make("text", "tokens.h5", "--in", os.path.join(root, "corpus.txt"))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls._shared, ignore_errors=True)

    def train(self, config, data, run_dir, overrides, steps=6, env=None):
        args = ["train", "--config", mbtest.config_path(config), "data.path=" + data, "run.dir=" + run_dir,
                "train.max_steps=%d" % steps, "run.checkpoint_every=%d" % steps] + CUDA_RUN + list(overrides)
        r = mbtest.run(args, timeout=300, env=env)
        self.assertEqual(r.returncode, 0, repr(r))
        self.assertEqual(mbtest.crash_signs(r.output), [], repr(r))
        self.assertIn("device cuda:0", r.output)
        return r

    def plan_and_peak(self, run_dir):
        """(the memory_plan record, the steps' peak bytes as the caching allocator counts)."""
        records = mbtest.read_metrics(run_dir)
        plan = [m for m in records if m["event"] == "memory_plan"][0]
        peaks = [m["gpu_mem_peak_mb"] for m in records if m["event"] == "train"]
        self.assertTrue(peaks, "train records carry gpu_mem_peak_mb on CUDA")
        return plan, max(peaks) * MIB

    def assertLossesClose(self, got, want, what):
        self.assertEqual(sorted(got), sorted(want), what)
        for step in want:
            self.assertAlmostEqual(got[step], want[step], delta=GPU_RUN_RTOL * max(1.0, abs(want[step])),
                                   msg="%s, step %d" % (what, step))

    def test_the_plan_against_the_caching_allocators_peak(self):
        models = [("demo LSTM", "demo.yaml", self.series, ["model.hidden=64", "train.global_batch=128"]),
                  ("tiny GPT", "arith-gpt.yaml", self.arith, ["train.global_batch=64"]),
                  ("gpt2-small, 2 layers, context 512", "gpt2-small.yaml", self.tokens, GPT2_SMALL_2)]
        for name, config, data, overrides in models:
            with self.subTest(model=name):
                run_dir = self.path(name)
                r = self.train(config, data, run_dir, overrides)
                self.assertIn("memory plan (rank 0", r.output)
                plan, peak = self.plan_and_peak(run_dir)
                ratio = peak / plan["total_bytes"]
                print("%s: planned %.1f MiB (activations %.1f, workspace %.1f at micro batch %d), caching "
                      "allocator's peak %.1f MiB: measured / planned = %.3f"
                      % (name, plan["total_bytes"] / MIB, plan["activations_bytes"] / MIB,
                         plan["workspace_bytes"] / MIB, plan["micro_batch"], peak / MIB, ratio))
                self.assertGreater(plan["activations_bytes"], 0, "the trial measured on CUDA")
                self.assertTrue(PLAN_BAND[0] <= ratio <= PLAN_BAND[1],
                                "%s: measured / planned = %.3f, outside %r" % (name, ratio, PLAN_BAND))

    def test_micro_batch_auto_fits_a_budget_the_whole_share_does_not(self):
        whole = self.path("whole share")
        self.train("gpt2-small.yaml", self.tokens, whole, GPT2_SMALL_2)
        plan, _ = self.plan_and_peak(whole)
        fixed = sum(plan[k] for k in ("parameters_bytes", "gradients_bytes", "optimizer_bytes", "data_bytes"))
        variable = plan["activations_bytes"] + plan["workspace_bytes"]
        # Room for about 40% of the share's activations, with the search's 10% margin.
        budget = fixed + 1.1 * 0.4 * variable
        budget_mb = "%.1f" % (budget / MIB)
        auto = self.path("auto")
        r = self.train("gpt2-small.yaml", self.tokens, auto,
                       GPT2_SMALL_2 + ["train.micro_batch=auto", "train.memory_budget_mb=" + budget_mb])
        found = re.search(r"train.micro_batch = auto: rank 0 tried 16: [^;]*\(does not fit\)[^;]*; every rank "
                          r"runs micro batch ([0-9]+), ([0-9]+) per step", r.output)
        self.assertIsNotNone(found, r.output)
        chosen = int(found.group(1))
        self.assertLess(chosen, 16)
        self.assertNotIn("exceeds its budget", r.output)
        plan_auto, peak = self.plan_and_peak(auto)
        self.assertEqual(plan_auto["micro_batch"], chosen)
        self.assertLessEqual(plan_auto["total_bytes"], plan_auto["budget_bytes"])
        print("budget %s MiB (fixed %.1f MiB + 44%% of the share's %.1f MiB): auto chose %d (%s per step); "
              "the steps' peak %.1f MiB" % (budget_mb, fixed / MIB, variable / MIB, chosen, found.group(2),
                                            peak / MIB))
        self.assertLessEqual(peak, budget, "the caching allocator's peak is within the budget")
        by_hand = self.path("by hand")
        self.train("gpt2-small.yaml", self.tokens, by_hand,
                   [o for o in GPT2_SMALL_2 if not o.startswith("train.micro_batch")]
                   + ["train.micro_batch=%d" % chosen])
        self.assertLossesClose(mbtest.train_losses(auto), mbtest.train_losses(by_hand), "auto against by hand")

    def test_a_step_that_meets_a_cuda_malloc_failure_is_redone_at_half(self):
        common = ["train.global_batch=32", "model.dropout=0", "data.canonical_shards=4",
                  "train.memory_budget_mb=4096"]
        reference = self.path("at 16")
        self.train("demo.yaml", self.series, reference, common + ["train.micro_batch=16"], steps=5)
        run_dir = self.path("redo")
        # The second forward is step 2's only micro-batch (auto keeps the share of 32).
        r = self.train("demo.yaml", self.series, run_dir, common + ["train.micro_batch=auto"], steps=5,
                       env={"MEGABATCH_FAULT_OOM": "0:running the forward:1:cuda"})
        self.assertIn("MEGABATCH_FAULT_OOM: an allocation of 1 PiB on the GPU", r.output)
        self.assertIn("every rank runs micro batch 32", r.output)
        self.assertIn("rank 0 ran out of GPU memory in running the forward of micro-batch 1/1 in step 2",
                      r.output)
        self.assertIn("every rank runs the step again at micro batch 16", r.output)
        records = mbtest.read_metrics(run_dir)
        redos = [(m["step"], m["rank"], m["micro_batch_before"], m["micro_batch"])
                 for m in records if m["event"] == "oom_redo"]
        self.assertEqual(redos, [(2, 0, 32, 16)])
        self.assertEqual([m["step"] for m in records if m["event"] == "train"], [1, 2, 3, 4, 5])
        self.assertLossesClose(mbtest.train_losses(run_dir), mbtest.train_losses(reference),
                               "redone at 16 against 16 throughout")


if __name__ == "__main__":
    unittest.main()
