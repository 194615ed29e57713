"""Out of memory is an expected error (issue 36 item 3, Note [Out of memory is an expected
error]). In each phase a run allocates in, running out ends the run with exit 1 and a message
that names the rank, the phase and the bytes, lists remedies in megabatch's keys, and prints no
stack frame; under mpirun with only rank 1 short, every rank ends well within dist.timeout_s and
the last checkpoint stays intact.

The failures are real allocator failures: MEGABATCH_FAULT_OOM=RANK:PHASE[:SKIP] makes the chosen
phase start with a 1 PiB request that the CPU allocator refuses, so the error travels LibTorch's
own path (c10::Error from DefaultCPUAllocator). export's case is in tests/torchscript (only
TorchScript runs export). One case needs no hook: a model too big for an
address-space limit (prlimit --as), as a user meets it.
Usage: test_out_of_memory.py [OneRankTest|TwoRanksTest[.test_x]]
"""
import os
import shutil
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import mbtest  # noqa: E402

TIMEOUT_S = 20  # dist.timeout_s of the two-rank runs: every rank must end well before it
TRAIN_REMEDY = "train.micro_batch"


class OomCase(mbtest.SeriesTrainingTestCase):
    SERIES_ARGS = ["--rows", "20000", "--features", "3", "--streams", "m1:1,m5:5,h1:60", "--seed", "3"]

    def train_args(self, run_dir, *extra):
        return ["train", "--config", mbtest.config_path("demo.yaml"), "data.path=" + self.data,
                "run.dir=" + run_dir, "train.max_steps=6", "train.eval_every=3", "run.checkpoint_every=3",
                "train.global_batch=16", "model.hidden=16", "model.head_hidden=16", "data.canonical_shards=4",
                "train.threads=1", "dist.timeout_s=%d" % TIMEOUT_S, "run.progress=lines"] + list(extra)

    def check_oom(self, r, rank, phase, remedy, code=1):
        """Exit CODE, the message naming RANK, PHASE and REMEDY, no stack frame, no crash."""
        report = repr(r)
        self.assertEqual(r.returncode, code, report)
        self.assertIn("rank %d ran out of CPU memory while %s" % (rank, phase), r.output, report)
        self.assertIn("remedies, in this order:", r.output, report)
        self.assertIn(remedy, r.output, report)
        for frame in ("frame #", "Exception raised from", "unexpected error"):
            self.assertNotIn(frame, r.output, report)
        self.assertFalse(mbtest.crash_signs(r.output), report)


class OneRankTest(OomCase):
    def oom(self, phase_hook, args, timeout=120):
        return mbtest.run(args, timeout=timeout, env={"MEGABATCH_FAULT_OOM": "0:" + phase_hook})

    def test_every_training_phase_ends_with_a_message(self):
        cases = [("building the model", "building the model", "model.hidden"),
                 ("loading the data", "loading the data", "data.residency: stream"),
                 ("trial step", "the memory plan's trial step", TRAIN_REMEDY),
                 ("training step:2", "training step 3", TRAIN_REMEDY),
                 ("evaluating", "evaluating the val split", TRAIN_REMEDY),
                 ("checkpoint", "assembling a checkpoint", "data.residency: stream")]
        for hook, phase, remedy in cases:
            r = self.oom(hook, self.train_args(self.path("run-" + hook.split()[0])))
            print("1 rank, %s: exit %d in %.1f s" % (phase, r.returncode, r.seconds))
            self.check_oom(r, 0, phase, remedy)

    def test_a_failed_final_evaluation_loses_no_training(self):
        """Note [Checkpoint before evaluation]: the step's checkpoint comes first, so `latest` names
        the last step; a run resumed from it evaluates that step before anything else."""
        run_dir = self.path("run")
        r = self.oom("evaluating:1", self.train_args(run_dir))  # the second: the final one, step 6
        self.check_oom(r, 0, "evaluating the val split", TRAIN_REMEDY)
        self.assertIn("checkpoint (end of training) at step 6", r.output, repr(r))
        checkpoints = os.path.join(run_dir, "checkpoints")
        with open(os.path.join(checkpoints, "latest")) as f:
            self.assertEqual(f.read().strip(), "step-00000006.h5")
        # Step 3's evaluation was the best so far: best.h5 is step 3's file, linked.
        self.assertEqual(os.stat(os.path.join(checkpoints, "best.h5")).st_ino,
                         os.stat(os.path.join(checkpoints, "step-00000003.h5")).st_ino)
        evals = [m["step"] for m in mbtest.read_metrics(run_dir) if m["event"] == "eval"]
        self.assertEqual(evals, [3])
        trained = [m["step"] for m in mbtest.read_metrics(run_dir) if m["event"] == "train"]
        r = mbtest.run(self.train_args(run_dir), timeout=120)
        self.assertEqual(r.returncode, 0, repr(r))
        self.assertIn("step 6's checkpoint was written before its evaluation", r.output, repr(r))
        records = mbtest.read_metrics(run_dir)
        self.assertEqual([m["step"] for m in records if m["event"] == "train"], trained)  # none again
        self.assertEqual([m["step"] for m in records if m["event"] == "eval"], [3, 6])

    def test_commands_on_a_checkpoint_end_with_a_message(self):
        run_dir = self.path("run")
        r = mbtest.run(self.train_args(run_dir), timeout=300)
        self.assertEqual(r.returncode, 0, repr(r))
        cases = [("eval", ["eval", "--checkpoint", run_dir, "data.path=" + self.data],
                  "building the model", "building the model from the checkpoint", "model.hidden"),
                 ("eval", ["eval", "--checkpoint", run_dir, "data.path=" + self.data],
                  "evaluating", "evaluating the val split", TRAIN_REMEDY),
                 ("predict", ["predict", "--checkpoint", run_dir, "--data", self.data, "--out",
                              self.path("p.h5")], "predicting", "predicting", TRAIN_REMEDY)]
        for what, args, hook, phase, remedy in cases:
            r = self.oom(hook, args)
            print("1 rank, %s, %s: exit %d in %.1f s" % (what, phase, r.returncode, r.seconds))
            self.check_oom(r, 0, phase, remedy)
        self.assertFalse(os.path.exists(self.path("p.h5")))

    def test_sample_ends_with_a_message(self):
        data = self.path("arith.h5")
        r = mbtest.run(["data", "arith", "--out", data, "--problems", "2000", "--heldout", "50"])
        self.assertEqual(r.returncode, 0, repr(r))
        run_dir = self.path("gpt")
        r = mbtest.run(["train", "--config", mbtest.config_path("arith-gpt.yaml"), "data.path=" + data,
                        "run.dir=" + run_dir, "train.max_steps=2", "train.eval_every=0", "run.checkpoint_every=2",
                        "train.threads=1"], timeout=300)
        self.assertEqual(r.returncode, 0, repr(r))
        r = self.oom("sampling", ["sample", "--checkpoint", run_dir, "--prompt", "1+2="])
        self.check_oom(r, 0, "sampling", "where the model fits")

    def test_a_model_too_big_for_the_address_space_as_a_user_meets_it(self):
        """No hook: model.hidden=20000 asks for 6.4 GB of LSTM weights under a 3 GiB limit."""
        prlimit = shutil.which("prlimit")
        if prlimit is None:
            self.fail("prlimit (util-linux) is missing: scripts/setup.sh installs it")
        cmd = [prlimit, "--as=%d" % (3 << 30), mbtest.BIN] + mbtest.with_device(
            self.train_args(self.path("big"), "model.hidden=20000"))
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                              timeout=120)
        r = mbtest.Result(cmd, proc.returncode, proc.stdout, proc.stderr)
        self.check_oom(r, 0, "building the model", "model.hidden")
        self.assertRegex(r.output, r"an allocation of [0-9.]+ (MiB|GiB) failed")


class TwoRanksTest(OomCase):
    """mpirun -np 2, only one rank short: both ranks end, fast, with its message."""

    def oom(self, phase_hook, run_dir, rank=1):
        return mbtest.mpirun(2, self.train_args(run_dir), timeout=120,
                             env={"MEGABATCH_FAULT_OOM": "%d:%s" % (rank, phase_hook)},
                             extra=["-x", "MEGABATCH_FAULT_OOM"])

    def test_every_phase_ends_every_rank_well_within_the_timeout(self):
        cases = [("building the model", "building the model", "model.hidden"),
                 ("loading the data", "loading the data", "data.residency: stream"),
                 ("trial step", "the memory plan's trial step", TRAIN_REMEDY),
                 ("training step:1", "training step 2", TRAIN_REMEDY),
                 ("evaluating", "evaluating the val split", TRAIN_REMEDY)]
        for hook, phase, remedy in cases:
            r = self.oom(hook, self.path("run-" + hook.split()[0]))
            print("2 ranks, rank 1 short, %s: exit %d in %.1f s" % (phase, r.returncode, r.seconds))
            self.check_oom(r, 1, phase, remedy)
            self.assertLess(r.seconds, TIMEOUT_S, repr(r))

    def test_checkpoint_assembly_keeps_the_last_checkpoint(self):
        """Rank 0 assembles checkpoints: its second one (step 6) fails, and the step-3 one stays
        whole; rank 1 ends too."""
        run_dir = self.path("run")
        r = self.oom("checkpoint:1", run_dir, rank=0)
        print("2 ranks, rank 0 short, checkpoint at step 6: exit %d in %.1f s" % (r.returncode, r.seconds))
        self.check_oom(r, 0, "assembling a checkpoint", "data.residency: stream")
        self.assertLess(r.seconds, TIMEOUT_S, repr(r))
        checkpoints = os.path.join(run_dir, "checkpoints")
        self.assertEqual(sorted(f for f in os.listdir(checkpoints) if f.startswith("step-")), ["step-00000003.h5"])
        with open(os.path.join(checkpoints, "latest")) as f:
            self.assertEqual(f.read().strip(), "step-00000003.h5")
        r = mbtest.run(["inspect", os.path.join(checkpoints, "step-00000003.h5")])
        self.assertEqual(r.returncode, 0, repr(r))
        self.assertIn("all checksums verified", r.output)


class AutoRedoTest(OomCase):
    """Note [A step that runs out of memory is redone]: under train.micro_batch: auto, rank 1 runs
    out in step 2, in a forward or in a backward with a gradient bucket in flight. Every rank runs
    step 2 again at half the micro-batch, once, and the run equals one at that size throughout
    (within float summation: step 1 ran at the larger size). The budget is ample: auto keeps the
    whole share of 32 (no accumulation), whatever LibTorch's version allocates."""

    def redo_args(self, run_dir, micro_batch):
        return ["train", "--config", mbtest.config_path("demo.yaml"), "data.path=" + self.data,
                "run.dir=" + run_dir, "train.max_steps=5", "train.eval_every=0", "run.checkpoint_every=5",
                "train.global_batch=64", "model.dropout=0", "data.canonical_shards=4", "train.threads=1",
                "train.memory_budget_mb=256", "train.micro_batch=" + micro_batch, "run.log_every=1",
                "dist.first_bucket_mb=0.01", "dist.bucket_mb=0.02", "dist.timeout_s=%d" % TIMEOUT_S,
                "run.progress=lines"]

    def run_with_fault(self, run_dir, micro_batch, hook):
        return mbtest.mpirun(2, self.redo_args(run_dir, micro_batch), timeout=120,
                             env={"MEGABATCH_FAULT_OOM": "1:" + hook}, extra=["-x", "MEGABATCH_FAULT_OOM"])

    def check_redo(self, run_dir, r, phase):
        report = repr(r)
        self.assertEqual(r.returncode, 0, report)
        self.assertIn("every rank runs micro batch 32", r.output, report)  # the search's choice
        self.assertIn("rank 1 ran out of CPU memory in %s" % phase, r.output, report)
        self.assertIn("rank 1 ran out of memory in training step 2 at micro batch 32: every rank runs the step "
                      "again at micro batch 16", r.output, report)
        self.assertFalse(mbtest.crash_signs(r.output), report)
        records = mbtest.read_metrics(run_dir)
        redos = [m for m in records if m["event"] == "oom_redo"]
        self.assertEqual([(m["step"], m["rank"], m["micro_batch_before"], m["micro_batch"]) for m in redos],
                         [(2, 1, 32, 16)])
        steps = [m["step"] for m in records if m["event"] == "train"]
        self.assertEqual(steps, [1, 2, 3, 4, 5])  # step 2 applied once

    def test_a_step_that_runs_out_in_the_forward_or_the_backward_is_redone_at_half(self):
        reference = self.path("at 16")
        r = mbtest.mpirun(2, self.redo_args(reference, "16"), timeout=120)
        self.assertEqual(r.returncode, 0, repr(r))
        expected = mbtest.train_losses(reference)
        # Step 2 is rank 1's second forward (one micro-batch of 32 per step); its backward launches
        # grad bucket 2 only once bucket 1 is on its way.
        for what, hook, phase in [("forward", "running the forward:1",
                                   "running the forward of micro-batch 1/1 in step 2"),
                                  ("backward", "sending grad bucket 2/:1", "sending grad bucket 2/")]:
            run_dir = self.path(what)
            r = self.run_with_fault(run_dir, "auto", hook)
            print("2 ranks, rank 1 out of memory in the %s of step 2: exit %d in %.1f s"
                  % (what, r.returncode, r.seconds))
            self.check_redo(run_dir, r, phase)
            self.assertLess(r.seconds, TIMEOUT_S, repr(r))
            losses = mbtest.train_losses(run_dir)
            self.assertEqual(sorted(losses), sorted(expected))
            for step in expected:
                self.assertAlmostEqual(losses[step], expected[step], delta=1e-5 * max(1.0, abs(expected[step])),
                                       msg="%s, step %d" % (what, step))

    def test_without_auto_the_same_fault_ends_every_rank(self):
        r = self.run_with_fault(self.path("hand-set"), "32", "running the forward:1")
        self.check_oom(r, 1, "running the forward of micro-batch 1/1 in step 2", TRAIN_REMEDY)
        self.assertLess(r.seconds, TIMEOUT_S, repr(r))


if __name__ == "__main__":
    unittest.main()
