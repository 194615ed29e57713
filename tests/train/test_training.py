"""End-to-end trainer tests under mpirun: elastic resume, preemption, NaN guard, BF16.

Every test drives the real `megabatch` binary the way a user does and reads what it leaves in
the run directory (metrics.jsonl, checkpoints) with h5py. The runs use the test device
(MEGABATCH_TEST_DEVICE, see tests/python/mbtest.py); comparisons between two runs use
mbtest.RUN_RTOL / RUN_ATOL, which are looser on CUDA (TF32, kernels chosen by shape).
"""
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import unittest

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import mbtest  # noqa: E402
from mbtest import checkpoint_params, read_metrics, train_losses  # noqa: E402

BASE_CONFIG = """
run:
  dir: {run_dir}
  log_every: 1
  keep_last: 10
data:
  path: {data}
  layout: series
  streams:
    - {{name: m1, window: 16}}
    - {{name: m5, window: 8}}
  canonical_shards: 10
  split: {{train_fraction: 0.8, val_fraction: 0.1, test_fraction: 0.1}}
model:
  kind: lstm
  hidden: 16
  layers: 1
  head_hidden: 16
  dropout: 0.0
train:
  global_batch: 32
  max_steps: 40
  eval_every: 0
  precision: fp32
  threads: 1
optim:
  name: adamw
  lr: 0.01
  schedule: cosine
  warmup_steps: 5
"""


def latest_checkpoint(run_dir):
    ckpt = os.path.join(run_dir, "checkpoints")
    with open(os.path.join(ckpt, "latest")) as f:
        return os.path.join(ckpt, f.read().strip())


class TrainingTest(mbtest.SeriesTrainingTestCase):
    def config(self, run_dir, extra=""):
        return self.write("config-%d.yaml" % len(os.listdir(self.tmp)),
                          BASE_CONFIG.format(run_dir=run_dir, data=self.data) + extra)

    def train(self, np_, config, overrides=(), env=None, expect=0):
        if np_ == 1:
            r = mbtest.run(["train", "--config", config] + list(overrides), env=env, timeout=600)
        else:
            r = mbtest.mpirun(np_, ["train", "--config", config] + list(overrides), env=env, timeout=600)
        self.assertEqual(r.returncode, expect, repr(r))
        return r

    def assertParamsClose(self, a, b, rtol=mbtest.RUN_RTOL, what=""):
        self.assertEqual(sorted(a), sorted(b))
        for name in a:
            np.testing.assert_allclose(b[name], a[name], rtol=rtol, atol=mbtest.RUN_ATOL,
                                       err_msg="%s %s" % (what, name))

    def test_elastic_resume_matches_uninterrupted_run(self):
        run_a = self.path("A")
        self.train(4, self.config(run_a))
        losses_a = train_losses(run_a)
        self.assertEqual(sorted(losses_a), list(range(1, 41)))
        params_a = checkpoint_params(os.path.join(run_a, "checkpoints", "step-00000040.h5"))

        run_b = self.path("B")
        config_b = self.config(run_b)
        r = self.train(4, config_b, env={"MEGABATCH_FAULT_STOP_STEP": "20"}, expect=75)
        self.assertIn("stopping at step 20", r.output)
        self.assertTrue(os.path.exists(os.path.join(run_b, "checkpoints", "step-00000020.h5")))
        for world in (2, 3, 1):
            resumed = self.path("B%d" % world)
            shutil.copytree(run_b, resumed)
            self.train(world, config_b, ["run.dir=" + resumed])
            losses = train_losses(resumed)
            self.assertEqual(sorted(losses), list(range(1, 41)), "W'=%d: steps must continue without gap or repeat" % world)
            for step in range(1, 41):
                np.testing.assert_allclose(losses[step], losses_a[step], rtol=mbtest.RUN_RTOL,
                                           err_msg="W'=%d step %d loss" % (world, step))
            params = checkpoint_params(os.path.join(resumed, "checkpoints", "step-00000040.h5"))
            self.assertParamsClose(params_a, params, what="W'=%d" % world)
        # The test can fail: a run with another seed differs.
        run_c = self.path("C")
        self.train(2, self.config(run_c), ["train.seed=5"])
        self.assertFalse(np.allclose(train_losses(run_c)[40], losses_a[40], rtol=mbtest.RUN_RTOL))

    def test_nan_step_is_skipped_on_every_rank(self):
        run = self.path("nan")
        config = self.config(run, "")
        r = self.train(2, config, ["train.max_steps=8", "run.checkpoint_every=1"],
                       env={"MEGABATCH_FAULT_NAN_STEP": "5", "MEGABATCH_FAULT_NAN_RANK": "1"})
        for rank in ("r0/2", "r1/2"):
            self.assertIn("[%s] [train] warning: step 5: non-finite gradient norm" % rank, r.output, repr(r))
        ckpt = os.path.join(run, "checkpoints")
        p4 = checkpoint_params(os.path.join(ckpt, "step-00000004.h5"))
        p5 = checkpoint_params(os.path.join(ckpt, "step-00000005.h5"))
        p6 = checkpoint_params(os.path.join(ckpt, "step-00000006.h5"))
        for name in p4:
            np.testing.assert_array_equal(p4[name], p5[name], err_msg="step 5 must not change " + name)
        self.assertTrue(any(not np.array_equal(p5[n], p6[n]) for n in p5), "step 6 trains again")
        skipped = {r["step"]: r["skipped_steps"] for r in read_metrics(run) if r["event"] == "train"}
        self.assertEqual(skipped[5], 1)
        self.assertEqual(skipped[6], 0)

    def test_too_many_bad_steps_stops_cleanly(self):
        run = self.path("bad")
        r = self.train(2, self.config(run), ["train.max_bad_steps=3"],
                       env={"MEGABATCH_FAULT_NAN_STEP": "4", "MEGABATCH_FAULT_NAN_COUNT": "100"}, expect=1)
        self.assertIn("3 consecutive steps had a non-finite loss or gradient", r.output)
        last = latest_checkpoint(run)
        with h5py.File(last, "r") as f:
            self.assertEqual(int(f["trainer"].attrs["step"]), 6)
        p3 = checkpoint_params(last)
        self.assertTrue(all(np.isfinite(v).all() for v in p3.values()))

    def test_bf16_trains_like_fp32(self):
        """BF16 autocast with fp32 master weights, on the test device (CPU or CUDA)."""
        run32, run16 = self.path("fp32"), self.path("bf16")
        self.train(1, self.config(run32), ["train.max_steps=60"])
        self.train(1, self.config(run16), ["train.max_steps=60", "train.precision=bf16"])
        def tail(run):
            losses = train_losses(run)
            return float(np.mean([losses[s] for s in range(51, 61)]))
        l32, l16 = tail(run32), tail(run16)
        self.assertLess(abs(l16 - l32) / l32, 0.05, "bf16 %g vs fp32 %g" % (l16, l32))

    def test_host_sync_log_masks_bad_steps_on_the_device(self):
        # train.host_sync=log (the CUDA default, forced here on CPU): the skip decision and the
        # clip stay on the device and the host reads them at log steps (Note [Step checks]).
        nan5 = {"MEGABATCH_FAULT_NAN_STEP": "5", "MEGABATCH_FAULT_NAN_RANK": "1"}
        common = ["train.max_steps=8", "run.log_every=4", "run.checkpoint_every=4", "train.grad_clip=0.05"]
        runs = {}
        for mode in ("step", "log"):
            runs[mode] = self.path("sync-" + mode)
            r = self.train(2, self.config(runs[mode]), common + ["train.host_sync=" + mode], env=nan5)
            for rank in ("r0/2", "r1/2"):
                self.assertIn("[%s] [train] warning: step 5: non-finite gradient norm" % rank, r.output, repr(r))
            skipped = {m["step"]: m["skipped_steps"] for m in read_metrics(runs[mode]) if m["event"] == "train"}
            self.assertEqual(skipped, {4: 0, 8: 1})
        # Same updates, same skipped step, same clipping (the clip binds at 0.05): the masked
        # update differs from the foreach one only in rounding.
        final = {m: checkpoint_params(os.path.join(runs[m], "checkpoints", "step-00000008.h5")) for m in runs}
        start = checkpoint_params(os.path.join(runs["log"], "checkpoints", "step-00000004.h5"))
        self.assertParamsClose(final["step"], final["log"], what="host_sync log vs step, step 8:")
        self.assertTrue(any(not np.allclose(start[n], final["log"][n]) for n in start), "steps 6-8 train")
        with h5py.File(os.path.join(runs["log"], "checkpoints", "step-00000008.h5"), "r") as f:
            self.assertEqual(int(f["trainer"].attrs["bad_steps"]), 0)

        # A run of bad steps is noticed at the next log step after train.max_bad_steps (3):
        # step 8 here instead of 6, with the parameters the host-synced run stopped with.
        stops = {}
        for mode in ("step", "log"):
            stops[mode] = self.path("stop-" + mode)
            r = self.train(2, self.config(stops[mode]),
                           ["train.max_bad_steps=3", "run.log_every=4", "train.host_sync=" + mode],
                           env={"MEGABATCH_FAULT_NAN_STEP": "4", "MEGABATCH_FAULT_NAN_COUNT": "100"}, expect=1)
            self.assertIn("consecutive steps had a non-finite loss or gradient", r.output)
        with h5py.File(latest_checkpoint(stops["log"]), "r") as f:
            self.assertEqual(int(f["trainer"].attrs["step"]), 8)
            self.assertEqual(int(f["trainer"].attrs["bad_steps"]), 5)
        last = {m: checkpoint_params(latest_checkpoint(stops[m])) for m in stops}
        self.assertParamsClose(last["step"], last["log"], what="host_sync log vs step, stopped:")

    def test_cuda_graphs_key_is_refused_as_removed(self):
        # megabatch never captured the step in a CUDA graph, so the key is gone (Note [Removed config keys]):
        # a config file or an override that still sets it stops with exit 2, the reason and the fix, before
        # anything runs. Checkpoints whose stored config holds it still load (LegacyCheckpointTest).
        run = self.path("graphs")
        r = self.train(1, self.config(run), ["train.max_steps=2", "train.cuda_graphs=true"], expect=2)
        self.assertIn("override: config key 'train.cuda_graphs' was removed: megabatch never implemented",
                      r.output, repr(r))
        self.assertIn("delete the override train.cuda_graphs=true", r.output, repr(r))
        text = BASE_CONFIG.format(run_dir=run, data=self.data).replace("  threads: 1\n",
                                                                         "  threads: 1\n  cuda_graphs: false\n")
        self.assertIn("cuda_graphs: false", text)
        config = self.write("graphs.yaml", text)
        r = self.train(1, config, ["train.max_steps=2"], expect=2)
        self.assertIn(config + ": config key 'train.cuda_graphs' was removed", r.output, repr(r))
        self.assertIn("delete train.cuda_graphs from the config file", r.output, repr(r))
        self.assertFalse(os.path.exists(os.path.join(run, "checkpoints")), "nothing may run")

    def test_keep_last_latest_and_best(self):
        run = self.path("keep")
        self.train(2, self.config(run), ["train.max_steps=12", "run.checkpoint_every=2", "run.keep_last=2",
                                         "train.eval_every=4"])
        files = sorted(os.path.basename(p) for p in glob.glob(os.path.join(run, "checkpoints", "step-*.h5")))
        self.assertEqual(files, ["step-00000010.h5", "step-00000012.h5"])
        self.assertEqual(os.path.basename(latest_checkpoint(run)), "step-00000012.h5")
        with h5py.File(os.path.join(run, "checkpoints", "best.h5"), "r") as f:
            best_step = int(f["trainer"].attrs["step"])
            self.assertIn(best_step, (4, 8, 12))
        evals = [r for r in read_metrics(run) if r["event"] == "eval"]
        self.assertEqual([r["step"] for r in evals], [4, 8, 12])
        self.assertEqual(min(evals, key=lambda r: r["loss"])["step"], best_step)
        self.assertFalse(glob.glob(os.path.join(run, "checkpoints", "*.tmp")))
        described = mbtest.run(["inspect", latest_checkpoint(run)])
        self.assertExit(described, 0, "step 12", "lstm")
        # The `latest` pointer and the run directory are accepted too (what eval would load).
        via_pointer = mbtest.run(["inspect", os.path.join(run, "checkpoints", "latest")])
        self.assertExit(via_pointer, 0, "step-00000012.h5: megabatch checkpoint", "step 12")
        via_run = mbtest.run(["inspect", run])
        self.assertExit(via_run, 0, "best.h5: megabatch checkpoint", "step %d" % best_step)

    def run_on_terminal(self, command):
        """Runs command with stdout and stderr on a pseudo-terminal, as a person at a shell would."""
        return mbtest.run_on_terminal(command)

    def test_progress_bar_on_a_terminal_and_lines_otherwise(self):
        overrides = ["train.max_steps=30", "run.log_every=10"]
        bar = "\r\x1b[K"
        for launcher in ([], [mbtest.MPIEXEC, "-np", "2", "--oversubscribe"]):
            run = self.path("tty%d" % len(launcher))
            np_ = 2 if launcher else 1
            args = mbtest.with_device(["train", "--config", self.config(run)] + overrides, np_)
            out = self.run_on_terminal(launcher + [mbtest.BIN] + args)
            self.assertIn(bar, out, "a bar on a terminal (launcher %s)" % launcher)
            self.assertRegex(out, r"step 30/30 .*100% \| loss [0-9.]+ \| lr ")
            plain = re.sub(r"\x1b\[[0-9;]*m", "", out)  # spdlog colours the level on a terminal
            self.assertIn("info: step 10/30", plain, "log lines go on above the bar")
            self.assertTrue(out.rstrip("\r\n").endswith(bar), "the bar is erased at the end: %r" % out[-200:])
        piped = self.train(1, self.config(self.path("pipe")), overrides)
        self.assertNotIn("\r", piped.output, "no bar when nobody watches")
        self.assertIn("info: step 30/30", piped.output)

    def test_sigterm_to_every_rank_checkpoints_and_resumes(self):
        run, reference = self.path("sig"), self.path("ref")
        config = self.config(run, "")
        overrides = ["train.max_steps=400", "run.log_every=1"]
        cmd = [mbtest.MPIEXEC, "-np", "2", "--oversubscribe", mbtest.BIN] + \
            mbtest.with_device(["train", "--config", config] + overrides, 2)
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
        deadline = time.time() + 120
        metrics = os.path.join(run, "metrics.jsonl")
        while time.time() < deadline:
            if os.path.exists(metrics) and len(read_metrics(run)) >= 5:
                break
            time.sleep(0.2)
        ranks = subprocess.run(["pgrep", "-f", "megabatch train --config " + config], stdout=subprocess.PIPE,
                               universal_newlines=True).stdout.split()
        ranks = [int(p) for p in ranks if int(p) != proc.pid]
        self.assertEqual(len(ranks), 2, ranks)
        for pid in ranks:
            os.kill(pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
        self.assertEqual(proc.returncode, 75, out)
        self.assertIn("SIGTERM received", out)
        stopped = int(h5py.File(latest_checkpoint(run), "r")["trainer"].attrs["step"])
        self.assertLess(stopped, 400)
        self.train(2, config, overrides)
        self.train(2, self.config(reference), overrides)
        losses, ref = train_losses(run), train_losses(reference)
        self.assertEqual(sorted(losses), list(range(1, 401)))
        steps = sorted(ref)
        np.testing.assert_allclose([losses[s] for s in steps], [ref[s] for s in steps], rtol=mbtest.RUN_RTOL,
                                   err_msg="the stopped and resumed run's loss per step vs the uninterrupted run's")
        self.assertParamsClose(checkpoint_params(latest_checkpoint(reference)), checkpoint_params(latest_checkpoint(run)))


    STATEFUL = ["model.stateful=true", "data.shuffle=false", "data.canonical_shards=4", "train.global_batch=16",
                "model.lane_stride=50", "dist.backend=mpi", "run.checkpoint_every=4"]

    @staticmethod
    def lane_pass_starts(output, shards=4, lanes=4, stride=50):
        """Batch indices where a pass of Note [Lane order] starts (the lanes restart there)."""
        begin, end = map(int, re.search(r"train \[(\d+), (\d+)\)", output).groups())
        shortest = (end - begin) // shards // lanes
        starts, batch = [], 0
        for p in range(min(stride, shortest)):
            starts.append(batch)
            batch += -(-(shortest - p) // stride)
        return starts

    def test_stateful_lanes_are_world_size_independent_and_resume(self):
        """Note [Lane order]: W=1 and W=2 take the same steps; 2 ranks resume on 1 with the lane states."""
        run_a, run_b = self.path("lanes1"), self.path("lanes2")
        r = self.train(1, self.config(run_a), self.STATEFUL)
        self.train(2, self.config(run_b), self.STATEFUL)
        losses_a, losses_b = train_losses(run_a), train_losses(run_b)
        self.assertEqual(sorted(losses_a), list(range(1, 41)))
        for step in range(1, 41):
            np.testing.assert_allclose(losses_b[step], losses_a[step], rtol=mbtest.RUN_RTOL,
                                       err_msg="W=2 step %d" % step)
        starts = self.lane_pass_starts(r.output)
        self.assertTrue(any(0 < b < 40 for b in starts), "the run must cross a pass start: %s" % starts[:8])
        stop = 20 if 20 not in starts else 21  # resume mid-pass, where the carried state matters

        # Lane states: [layers, V*L, hidden], every lane of both ranks carried, equal on W=1 and W=2.
        def extra(run, step):
            with h5py.File(os.path.join(run, "checkpoints", "step-%08d.h5" % step), "r") as f:
                return {name: f["extra"][name][()] for name in f["extra"]}
        states_a, states_b = extra(run_a, 20), extra(run_b, 20)
        self.assertEqual(sorted(states_b), ["lstm_state.m1.c", "lstm_state.m1.h", "lstm_state.m5.c", "lstm_state.m5.h"])
        for name, state in states_b.items():
            self.assertEqual(state.shape, (1, 16, 16), name)
            per_lane = np.abs(state).sum(axis=(0, 2))
            self.assertTrue((per_lane > 0).all(), "%s: lanes without state: %s" % (name, per_lane))
            np.testing.assert_allclose(state, states_a[name], rtol=max(1e-4, mbtest.RUN_RTOL),
                                       atol=max(1e-6, mbtest.RUN_ATOL), err_msg=name)

        # Stopped on 2 ranks mid-pass, resumed on 1: the same losses as the uninterrupted run.
        run_c = self.path("lanes-stop")
        config_c = self.config(run_c)
        self.train(2, config_c, self.STATEFUL, env={"MEGABATCH_FAULT_STOP_STEP": str(stop)}, expect=75)
        resumed = self.path("lanes-resumed")
        shutil.copytree(run_c, resumed)
        # (A changed lane stride is overruled: the run keeps the order it started with.)
        r = self.train(1, config_c, self.STATEFUL + ["run.dir=" + resumed, "model.lane_stride=7"])
        self.assertIn("model.lane_stride = 7 in the config, but the run was started with 50", r.output)
        losses_c = train_losses(resumed)
        self.assertEqual(sorted(losses_c), list(range(1, 41)))
        for step in range(1, 41):
            np.testing.assert_allclose(losses_c[step], losses_a[step], rtol=mbtest.RUN_RTOL,
                                       err_msg="resumed step %d" % step)

        # The carried state matters: the same checkpoint with zeroed lane states continues differently.
        zeroed = self.path("lanes-zeroed")
        shutil.copytree(run_c, zeroed)
        with h5py.File(latest_checkpoint(zeroed), "r+") as f:
            for name in f["extra"]:
                f["extra"][name][...] = 0
        self.train(1, config_c, self.STATEFUL + ["run.dir=" + zeroed])
        self.assertNotAlmostEqual(train_losses(zeroed)[stop + 1], losses_a[stop + 1], places=6)

        # Lanes restart at every pass start: resumed there from zeroed states, nothing changes.
        boundary = max(b for b in starts if 0 < b < 40 and b % 4 == 0)
        at_start = self.path("pass-start.h5")
        shutil.copy(os.path.join(run_a, "checkpoints", "step-%08d.h5" % boundary), at_start)
        with h5py.File(at_start, "r+") as f:
            self.assertGreater(np.abs(f["extra"]["lstm_state.m1.h"][()]).sum(), 0)
            for name in f["extra"]:
                f["extra"][name][...] = 0
        run_e = self.path("lanes-restart")
        self.train(2, self.config(run_e), self.STATEFUL + ["run.resume=" + at_start])
        losses_e = train_losses(run_e)
        self.assertEqual(sorted(losses_e), list(range(boundary + 1, 41)))
        for step in losses_e:
            np.testing.assert_allclose(losses_e[step], losses_a[step], rtol=mbtest.RUN_RTOL,
                                       err_msg="pass start %d" % step)

        # And stateful training is not stateless training.
        run_d = self.path("stateless")
        self.train(1, self.config(run_d), [o for o in self.STATEFUL if o != "model.stateful=true"])
        losses_d = train_losses(run_d)
        self.assertFalse(all(np.isclose(losses_d[s], losses_a[s], rtol=mbtest.RUN_RTOL) for s in range(1, 41)))

    def test_stateful_config_errors(self):
        run = self.path("lanes-bad")
        r = self.train(1, self.config(run), self.STATEFUL + ["train.global_batch=30"], expect=2)
        self.assertIn("train.global_batch = 30 is not a multiple of data.canonical_shards = 4", r.output)
        r = self.train(1, self.config(run), self.STATEFUL + ["data.residency=stream"], expect=2)
        self.assertIn("cannot use data.residency = stream", r.output)


if __name__ == "__main__":
    unittest.main(verbosity=2)
