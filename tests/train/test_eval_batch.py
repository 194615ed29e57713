"""The evaluation batch fits the memory budget (Note [Evaluation batch]), on a GPT reduced from
gpt2-small for time, with its memory where gpt2-small's is (attention and the chunked logits):
vocabulary of 8192 (chunked all the same), 16 heads at 512 tokens, 2 layers of width 64: an
evaluation batch of 256 would take about 9 GB, one sample about 35 MB.

- Training measures the batch in its memory plan (the log line and the memory_plan event).
- `megabatch eval --memory-budget-mb` picks a batch under 256 and its peak RSS stays within the
  budget plus the process's floor, measured as the peak of the same command evaluating one
  sample; the metrics equal those of a hand-set small batch.
- `--batch 256` under the same budget ends with the out-of-memory message (exit 1), not a kill.
Usage: test_eval_batch.py [EvalBatchTest[.test_x]]
"""
import json
import os
import random
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import mbtest  # noqa: E402

BUDGET_MB = 700
VAL_SAMPLES = 64  # evaluated per command: enough for batches to grow, few for time
# What measuring a peak by the process's RSS adds to a budget that counts LibTorch's
# allocations: glibc's heap and oneDNN's buffers (docs/operations.md, "Memory plan").
SLACK_MB = 64


def peak_rss_mb(args, timeout=180):
    """Runs megabatch ARGS in a child of a fresh Python, and returns (Result, its peak RSS)."""
    probe = ("import resource, subprocess, sys\n"
             "p = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE,\n"
             "                   universal_newlines=True)\n"
             "sys.stdout.write(p.stdout); sys.stderr.write(p.stderr)\n"
             "sys.stderr.write('\\nPEAK_KB %d\\n' % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
             "sys.exit(p.returncode)\n")
    cmd = [sys.executable, "-c", probe, mbtest.BIN] + mbtest.with_device(args)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                          timeout=timeout, env=dict(os.environ, OMP_NUM_THREADS="2"))
    r = mbtest.Result(cmd, proc.returncode, proc.stdout, proc.stderr)
    peak = [line for line in proc.stderr.splitlines() if line.startswith("PEAK_KB ")]
    return r, (int(peak[-1].split()[1]) / 1024.0 if peak else float("nan"))


class EvalBatchTest(mbtest.TempDirTestCase):
    @classmethod
    def setUpClass(cls):
        cls._shared = __import__("tempfile").TemporaryDirectory(prefix="mbevalbatch-")
        root = cls._shared.name
        rng = random.Random(5)
        words = ["alpha", "beta", "gamma", "delta", "step", "loss", "batch", "token", "eval", "rank"]
        text = " ".join(rng.choice(words) for _ in range(60000))
        with open(os.path.join(root, "corpus.txt"), "w") as f:
            f.write(text)
        cls.tokens = os.path.join(root, "tokens.h5")
        r = mbtest.run(["data", "text", "--in", os.path.join(root, "corpus.txt"), "--out", cls.tokens])
        if r.returncode != 0:
            raise RuntimeError(repr(r))
        cls.run_dir = os.path.join(root, "run")
        cls.train = mbtest.run(["train", "--config", mbtest.config_path("gpt2-small.yaml"),
                                "data.path=" + cls.tokens, "run.dir=" + cls.run_dir, "data.context=512",
                                "data.canonical_shards=4", "data.split.train_fraction=0.5",
                                "data.split.val_fraction=0.4", "data.split.test_fraction=0.1",
                                "model.hidden=64", "model.layers=2", "model.heads=16", "model.vocab_size=8192", "train.global_batch=2",
                                "train.micro_batch=2", "train.max_steps=1", "train.eval_every=0",
                                "train.eval_batches=32", "train.threads=2", "run.checkpoint_every=0",
                                "train.memory_budget_mb=%d" % BUDGET_MB, "run.progress=lines"], timeout=300)

    @classmethod
    def tearDownClass(cls):
        cls._shared.cleanup()

    def test_training_plans_the_evaluation_batch(self):
        r = self.train
        self.assertEqual(r.returncode, 0, repr(r))
        plan = [m for m in mbtest.read_metrics(self.run_dir) if m["event"] == "memory_plan"][0]
        self.assertGreater(plan["eval_batch"], 0, plan)
        self.assertLess(plan["eval_batch"], 256, plan)  # 256 samples would not fit
        self.assertGreater(plan["eval_bytes"], 0, plan)
        self.assertLessEqual(plan["parameters_bytes"] + plan["gradients_bytes"] + plan["optimizer_bytes"] +
                             plan["data_bytes"] + plan["eval_bytes"], plan["budget_bytes"], plan)
        self.assertRegex(r.output, r"memory plan .*; evaluation [0-9.]+ [KMG]iB at batch %d" % plan["eval_batch"])
        self.assertIn("eval val at step 1: ", r.output)
        with open(os.path.join(self.run_dir, "checkpoints", "latest")) as f:
            self.assertEqual(f.read().strip(), "step-00000001.h5")

    def eval_args(self, out, *extra):
        return ["eval", "--checkpoint", self.run_dir, "--memory-budget-mb", str(BUDGET_MB),
                "--max-samples", str(VAL_SAMPLES), "--out", self.path(out)] + list(extra)

    def metrics(self, out):
        with open(self.path(out)) as f:
            return json.load(f)

    def test_eval_stays_within_its_budget(self):
        self.assertEqual(self.train.returncode, 0, repr(self.train))
        r, floor = peak_rss_mb(["eval", "--checkpoint", self.run_dir, "--batch", "1", "--max-samples", "1"])
        self.assertEqual(r.returncode, 0, repr(r))
        r, peak = peak_rss_mb(self.eval_args("chosen.json"))
        self.assertEqual(r.returncode, 0, repr(r))
        print("peak RSS %.0f MiB; evaluating one sample: %.0f MiB; budget %d MiB" % (peak, floor, BUDGET_MB))
        self.assertRegex(r.output, r"eval batch [0-9]+ of at most 256 .*--memory-budget-mb")
        self.assertLessEqual(peak, floor + BUDGET_MB + SLACK_MB, repr(r))
        # The batch changes the order of the sums only.
        r = mbtest.run(self.eval_args("small.json", "--batch", "3"), timeout=180)
        self.assertEqual(r.returncode, 0, repr(r))
        chosen, small = self.metrics("chosen.json"), self.metrics("small.json")
        self.assertEqual(chosen["val_samples"], small["val_samples"])
        self.assertAlmostEqual(chosen["val_loss"], small["val_loss"], delta=1e-6 * small["val_loss"])

    def test_a_batch_given_by_hand_that_does_not_fit_is_an_out_of_memory_error(self):
        self.assertEqual(self.train.returncode, 0, repr(self.train))
        r, peak = peak_rss_mb(self.eval_args("big.json", "--batch", "256"))
        self.assertEqual(r.returncode, 1, repr(r))
        self.assertIn("ran out of CPU memory while evaluating the val split", r.output, repr(r))
        self.assertFalse(mbtest.crash_signs(r.output), repr(r))
        self.assertLess(peak, BUDGET_MB + 1024, repr(r))


if __name__ == "__main__":
    unittest.main()
