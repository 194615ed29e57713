"""`megabatch plot` on what real runs write, and the step lines' account of their time.

metrics.jsonl holds records of several kinds (train, eval, memory_plan, oom_redo, and kinds added
later), may end in a torn line (a run killed mid-write), and grows while a run trains: plot must
draw every one of these. The step line's parts add up to its step time, and evaluations between
steps are reported beside it, not inside it (Note [Step phases]).
"""
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import mbtest  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
STEP_LINE = re.compile(r"step (\d+)/\d+ .*\| (\d+) samples/s \| step [0-9.]+ ms \(data (\d+)% fwd-bwd (\d+)% "
                       r"comm (\d+)% opt (\d+)% other (\d+)%\)(.*)")


class PlotTest(mbtest.SeriesTrainingTestCase):
    SERIES_ARGS = ["--rows", "20000", "--features", "3", "--streams", "m1:1,m5:5,h1:60", "--seed", "3"]

    def train(self, run_dir, *extra, env=None, timeout=300, expect=0):
        args = ["train", "--config", mbtest.config_path("demo.yaml"), "data.path=" + self.data,
                "run.dir=" + run_dir, "train.max_steps=40", "run.log_every=10", "train.eval_every=20",
                "train.global_batch=32", "run.progress=lines"] + list(extra)
        r = mbtest.mpirun(2, args, env=env, timeout=timeout)
        self.assertEqual(r.returncode, expect, repr(r))
        return r

    def plot(self, run_dir):
        r = mbtest.run(["plot", run_dir], timeout=120)
        self.assertEqual(r.returncode, 0, repr(r))
        with open(os.path.join(run_dir, "curves.png"), "rb") as f:
            self.assertEqual(f.read(8), PNG_MAGIC, "curves.png is not a PNG")
        return r

    def test_every_kind_of_record_and_a_torn_last_line(self):
        run_dir = self.path("run")
        self.train(run_dir)
        kinds = {r["event"] for r in mbtest.read_metrics(run_dir)}
        self.assertTrue({"memory_plan", "train", "eval"} <= kinds, kinds)
        with open(os.path.join(run_dir, "metrics.jsonl"), "a") as f:
            f.write('{"event":"oom_redo","step":30,"rank":1,"micro_batch_before":16,"micro_batch":8}\n')
            f.write('{"event":"restart","step":20,"restart":1,"reason":"host lost","ranks_before":2,'
                    '"ranks_after":1,"lost_hosts":"node02","resume_step":20,"steps_redone":3}\n')
            f.write('{"event":"checkpoint","step":20,"reason":"scheduled","write_s":0.02}\n')
            f.write('{"event":"a_kind_from_a_later_version","step":40,"value":1}\n')
            f.write('{"event":"train","step":41,"epoch":0,"split":"tr')
        r = self.plot(run_dir)
        self.assertIn("a_kind_from_a_later_version (1)", r.output)
        self.assertNotIn("restart (1)", r.output)  # drawn: a line at its step, labelled with its ranks
        self.assertNotIn("checkpoint (", r.output)
        self.assertIn("metrics.jsonl:%d is not a whole JSON record" % self.lines(run_dir), r.output)

    def lines(self, run_dir):
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            return len(f.read().split("\n"))

    def test_a_run_that_is_still_training(self):
        run_dir = self.path("live")
        cmd = [mbtest.MPIEXEC, "-np", "2", "--oversubscribe", mbtest.BIN] + mbtest.with_device(
            ["train", "--config", mbtest.config_path("demo.yaml"), "data.path=" + self.data,
             "run.dir=" + run_dir, "train.max_steps=1000000", "run.log_every=5", "train.global_batch=32"], 2)
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                if os.path.exists(os.path.join(run_dir, "metrics.jsonl")) and \
                        sum(r["event"] == "train" for r in self.records(run_dir)) >= 2:
                    break
                self.assertIsNone(proc.poll(), "the run ended before it was plotted")
                time.sleep(0.2)
            else:
                self.fail("the run wrote no 2 train records in 120 s")
            self.plot(run_dir)
            self.assertIsNone(proc.poll(), "the run must still be training while it is plotted")
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=60)

    def records(self, run_dir):
        """The whole records of a file another process is writing (its last line may be torn)."""
        out = []
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
        return out

    def test_a_sweep_of_three_runs_plots_in_one_picture(self):
        """A folder of runs, as slurm/sweep.sh --dir leaves one: one PNG, a line per run, each
        named; the run resumed after a stop is still one line."""
        sweep = self.path("sweep")
        for lr in ("1e-3", "3e-3", "1e-2"):
            self.train(os.path.join(sweep, "optim.lr=" + lr), "optim.lr=" + lr, "run.checkpoint_every=10",
                       env={"MEGABATCH_FAULT_STOP_STEP": "20"} if lr == "3e-3" else None,
                       expect=75 if lr == "3e-3" else 0)
        self.train(os.path.join(sweep, "optim.lr=3e-3"), "optim.lr=3e-3", "run.checkpoint_every=10")  # resumed
        os.makedirs(os.path.join(sweep, "not-a-run"))
        r = mbtest.run(["plot", sweep], timeout=120)
        self.assertEqual(r.returncode, 0, repr(r))
        with open(os.path.join(sweep, "runs.png"), "rb") as f:
            self.assertEqual(f.read(8), PNG_MAGIC)
        self.assertIn("sweep/runs.png", r.output)
        # The same runs named one by one, to a file of one's choosing.
        out = self.path("three.png")
        runs = [os.path.join(sweep, name) for name in ("optim.lr=1e-3", "optim.lr=3e-3", "optim.lr=1e-2")]
        r = mbtest.run(["plot"] + runs + ["--out", out], timeout=120)
        self.assertEqual(r.returncode, 0, repr(r))
        self.assertTrue(os.path.getsize(out) > 0)
        r = mbtest.run(["plot", os.path.join(sweep, "not-a-run")], timeout=60)
        self.assertEqual(r.returncode, 2, repr(r))
        self.assertIn("holds no run directory", r.output)

    def test_a_resume_after_a_torn_last_line_keeps_every_line_whole(self):
        run_dir = self.path("torn")
        self.train(run_dir, "train.max_steps=20", "run.checkpoint_every=10")
        with open(os.path.join(run_dir, "metrics.jsonl"), "a") as f:
            f.write('{"event":"train","step":2')  # killed mid-write: no closing brace, no newline
        self.train(run_dir)
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            records = [json.loads(line) for line in f if line.strip()]  # every line parses
        steps = [r["step"] for r in records if r["event"] == "train"]
        self.assertEqual(steps, [10, 20, 30, 40])
        self.plot(run_dir)

    def test_step_lines_account_for_their_time(self):
        # Evaluations made slow (40 ms a batch): were they counted in the step time, the line after
        # one would show a fraction of the others' samples/s.
        run_dir = self.path("parts")
        r = self.train(run_dir, "train.max_steps=60", "train.eval_every=30",
                       env={"MEGABATCH_FAULT_EVAL_BATCH_MS": "40", "OMP_NUM_THREADS": "1"})
        lines = [m for m in map(STEP_LINE.search, r.output.splitlines()) if m]
        self.assertEqual([int(m.group(1)) for m in lines], [10, 20, 30, 40, 50, 60], r.output)
        for m in lines:
            parts = sum(int(m.group(i)) for i in range(3, 8))
            self.assertLessEqual(abs(parts - 100), 2, m.group(0))
        after_eval = lines[3]
        self.assertIn("besides: eval", after_eval.group(8))
        others = [int(m.group(2)) for m in lines[1:] if m is not after_eval]
        self.assertGreater(int(after_eval.group(2)), 0.6 * statistics.median(others),
                           "samples/s after an evaluation:\n" + "\n".join(m.group(0) for m in lines))
        train = [x for x in mbtest.read_metrics(run_dir) if x["event"] == "train"]
        for x in train:
            parts = sum(x[k] for k in ("data_time_s", "fwd_bwd_time_s", "comm_time_s", "optimizer_time_s",
                                       "other_time_s"))
            self.assertAlmostEqual(parts, x["step_time_s"], delta=0.02 * x["step_time_s"] + 1e-6)
        evals = [x for x in mbtest.read_metrics(run_dir) if x["event"] == "eval"]
        self.assertGreater(train[3]["between_steps_eval_s"], 0.5 * evals[0]["eval_time_s"])
        self.assertEqual(train[2]["between_steps_eval_s"], 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
