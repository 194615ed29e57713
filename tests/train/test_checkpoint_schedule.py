"""Checkpoints by time (run.checkpoint_every_s; Note [Checkpoints by time] in
src/train/loop/Schedule.cpp): with slow steps and a checkpoint every 2 s, checkpoints come about
every 2 s, and every rank writes its part of each at the same step: rank 0's clock decides, and
the step vote carries its answer to the others. metrics.jsonl records each checkpoint's reason
and write time.
"""
import os
import re
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "launch"))
import mbtest  # noqa: E402
from test_launch import DEMO, synth_demo_data  # noqa: E402

EVERY_S = 2.0
SLOW_STEP_MS = 250
STEPS = 28  # 7 s of steps: three checkpoints by time


class TimeCheckpointTest(mbtest.TempDirTestCase):
    def test_checkpoints_come_every_2_s_at_the_same_step_on_every_rank(self):
        data, run = self.path("demo.h5"), self.path("run")
        synth_demo_data(data)
        args = ["train", "--config", DEMO, "train.device=cpu", "data.path=" + data, "run.dir=" + run,
                "train.max_steps=%d" % STEPS, "run.log_every=1", "train.eval_every=1000", "run.checkpoint_every=0",
                "run.checkpoint_every_s=%g" % EVERY_S, "run.keep_last=20", "run.progress=lines",
                "dist.timeout_s=5"]
        # Only rank 1 is slow: the ranks reach each step's vote at moments a quarter second apart.
        # A rank that checkpoints alone leaves the other in a different collective: the watchdog
        # then ends the job after dist.timeout_s.
        r = mbtest.mpirun(2, args, timeout=120, env={"MEGABATCH_FAULT_SLOW_STEP": "1:%d" % SLOW_STEP_MS,
                                                     "MEGABATCH_LOG_ALL_RANKS": "1"})
        self.assertExit(r, 0)
        records = [x for x in mbtest.read_metrics(run) if x.get("event") == "checkpoint"]
        timed = [x for x in records if x["reason"] == "run.checkpoint_every_s"]
        self.assertGreaterEqual(len(timed), 3, records)
        self.assertEqual(records[-1]["reason"], "end of training")
        # About every 2 s: never sooner, and later by at most a step and a write.
        for before, after in zip(timed, timed[1:]):
            gap = after["time"] - before["time"]
            self.assertGreaterEqual(gap, EVERY_S - 0.01, timed)
            self.assertLess(gap, EVERY_S + 2 * SLOW_STEP_MS / 1000.0 + 0.5, timed)
            self.assertGreater(after["step"], before["step"])
        for x in records:
            self.assertGreater(x["write_s"], 0)
            self.assertTrue(os.path.exists(os.path.join(run, "checkpoints", "step-%08d.h5" % x["step"])), x)
        # Every rank took part in each checkpoint, at the same steps.
        steps = [x["step"] for x in timed]
        for rank in (0, 1):
            said = [int(s) for s in re.findall(r"\[r%d/2\] \[train\] info: checkpoint \(run\.checkpoint_every_s\) "
                                               r"at step (\d+)" % rank, r.output)]
            self.assertEqual(said, steps, "rank %d" % rank)
        print("checkpoints by time at steps %s, %s s apart" % (
            steps, ", ".join("%.2f" % (b["time"] - a["time"]) for a, b in zip(timed, timed[1:]))))


if __name__ == "__main__":
    unittest.main(verbosity=2)
