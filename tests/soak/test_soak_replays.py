"""Replays of what the fault soak (tests/soak/soak.py) found, each alone and in seconds
(docs/reliability.md, "Bugs the suite found"):

- A stop in the first second of a job: mpirun forwarded it only to the ranks it had started, so
  the job trained to its end; or it reached ranks still loading LibTorch, whose default action
  ended them, and the elastic launcher restarted the stopped run. Now the launcher ends with 75
  and the same command resumes to the end.
- A start after a run killed before its first checkpoint: TensorBoard showed the steps the dead
  run had logged twice. Now each step shows once.
- A torn checkpoint written by a stop (at a step no schedule writes again): the resume fell back
  past it, but it stayed among the step files for good, and keep_last counted it. Now the resume
  sets it aside as `.corrupt`.
- A full disk for a moment mid-run: metrics.jsonl stopped for the rest of the run and the
  TensorBoard file was closed, while training went on. Now the records wait in memory and are
  written, in order, once the disk has room. Needs root (mount); fails, never skips, without.
"""
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "launch"))
sys.path.insert(0, os.path.join(HERE, "..", "train"))
import mbtest  # noqa: E402
from test_launch import DEMO, LAUNCH, synth_demo_data  # noqa: E402
from test_tensorboard import EventReader  # noqa: E402

STEPS = 20


def overrides(data, run_dir, steps=STEPS, checkpoint_every=10):
    return ["data.path=" + data, "run.dir=" + run_dir, "train.max_steps=%d" % steps, "run.log_every=1",
            "run.checkpoint_every=%d" % checkpoint_every, "train.eval_every=0", "train.precision=fp32",
            "run.progress=lines"]


def train_steps(run_dir):
    return [r["step"] for r in mbtest.read_metrics(run_dir) if r.get("event") == "train"]


def fill(directory):
    """Fills the file system of `directory` to its last byte; returns the filler's path."""
    path = os.path.join(directory, "filler")
    with open(path, "wb", buffering=0) as out:
        size = 1 << 20
        while size:
            try:
                out.write(b"\0" * size)
            except OSError:
                size //= 2
    return path


class SoakReplayTest(mbtest.TempDirTestCase):
    @classmethod
    def setUpClass(cls):
        cls.shared = tempfile.TemporaryDirectory(prefix="mb-soak-replays-")
        cls.data = os.path.join(cls.shared.name, "demo.h5")
        synth_demo_data(cls.data)

    @classmethod
    def tearDownClass(cls):
        cls.shared.cleanup()

    def launcher(self, run_dir):
        hostfile = self.write("hosts", "localhost slots=2\n")
        return [os.path.join(LAUNCH, "train-multinode.sh"), "--hostfile", hostfile, "--net", "tcp", "--cpu",
                "--max-restarts", "2", "--probe-timeout", "2", DEMO] + overrides(self.data, run_dir)

    def test_a_stop_while_the_job_starts_ends_it_with_75_and_the_same_command_resumes(self):
        env = dict(os.environ, MEGABATCH_FAULT_SLOW_STEP="*:50", OMP_NUM_THREADS="1")
        # 0.3 s: mpirun is starting its ranks; 1.2 s: the ranks are loading their libraries.
        for delay in (0.3, 1.2):
            run = self.path("stopped after %.1f s" % delay)
            with open(self.path("job.log"), "w+") as log:
                job = subprocess.Popen(self.launcher(run), stdout=log, stderr=subprocess.STDOUT, env=env,
                                       start_new_session=True)
                time.sleep(delay)
                job.send_signal(signal.SIGTERM)
                code = job.wait(timeout=60)
                log.seek(0)
                output = log.read()
            self.assertEqual(code, 75, "a stop %.1f s into the job:\n%s" % (delay, output[-3000:]))
            self.assertNotIn("restarting on", output)
            self.assertEqual(mbtest.crash_signs(output.replace("exited on signal 10", "")), [], output[-3000:])
            done = train_steps(run) if os.path.exists(os.path.join(run, "metrics.jsonl")) else []
            self.assertLess(max(done or [0]), STEPS, "the stop was lost: the job trained to its end")
            r = subprocess.run(self.launcher(run), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               universal_newlines=True, env=env, timeout=120)
            self.assertEqual(r.returncode, 0, r.stdout[-3000:])
            self.assertEqual(train_steps(run), list(range(1, STEPS + 1)))

    def test_a_start_after_a_run_killed_before_its_first_checkpoint_shows_each_step_once(self):
        run = self.path("run")
        args = ["train", "--config", DEMO, "train.device=cpu"] + overrides(self.data, run, checkpoint_every=0)
        died = mbtest.run(args, env={"MEGABATCH_FAULT_DIE_STEP": "0:6"}, timeout=120)
        self.assertEqual(died.returncode, -signal.SIGKILL, repr(died))
        self.assertExit(mbtest.run(args, timeout=120), 0)
        self.assertEqual(train_steps(run), list(range(1, STEPS + 1)))
        scalars, _ = EventReader(self.tmp).scalars(run)
        twice = sorted(key for key, values in scalars.items() if key[0].startswith("train/") and len(values) > 1)
        self.assertEqual(twice, [])
        self.assertEqual(sorted(step for tag, step in scalars if tag == "train/loss"), list(range(1, STEPS + 1)))

    def test_a_damaged_checkpoint_written_by_a_stop_is_set_aside_by_the_resume(self):
        run = self.path("run")
        args = ["train", "--config", DEMO, "train.device=cpu"] + overrides(self.data, run)
        stopped = mbtest.run(args, env={"MEGABATCH_FAULT_STOP_STEP": "12"}, timeout=120)
        self.assertExit(stopped, 75)
        ckpt = os.path.join(run, "checkpoints")
        damaged = os.path.join(ckpt, "step-00000012.h5")
        os.truncate(damaged, os.path.getsize(damaged) // 2)  # a stop's checkpoint, torn
        resumed = mbtest.run(args, timeout=120)
        self.assertExit(resumed, 0, "falling back to", "set the checkpoint that does not load aside as %s.corrupt"
                        % damaged)
        self.assertEqual(train_steps(run), list(range(1, STEPS + 1)))
        # Step 12 is on no schedule, so nothing would ever replace it; keep_last would count it.
        self.assertEqual(sorted(n for n in os.listdir(ckpt) if n.startswith("step-")),
                         ["step-00000010.h5", "step-00000012.h5.corrupt", "step-00000020.h5"])
        for name in ("step-00000010.h5", "step-00000020.h5"):
            self.assertExit(mbtest.run(["inspect", os.path.join(ckpt, name)]), 0)

    def test_a_full_disk_mid_run_holds_the_records_and_writes_them_when_it_has_room(self):
        disk = self.path("disk")
        os.makedirs(disk)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "mb-replay", disk], check=True)
        try:
            run = os.path.join(disk, "run")
            steps = 40
            # No checkpoint before the end: the full disk meets metrics.jsonl, TensorBoard and
            # train.log only.
            args = ["train", "--config", DEMO, "train.device=cpu"] + overrides(self.data, run, steps, 0)
            env = dict(os.environ, MEGABATCH_FAULT_SLOW_STEP="*:60")
            proc = subprocess.Popen([mbtest.BIN] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    universal_newlines=True, env=env)
            deadline = time.time() + 60
            while time.time() < deadline and (not os.path.exists(os.path.join(run, "metrics.jsonl"))
                                              or not train_steps(run) or train_steps(run)[-1] < 5):
                time.sleep(0.02)
            filler = fill(disk)
            time.sleep(1.0)  # about 15 steps' records
            held = train_steps(run)[-1]
            os.remove(filler)
            output, _ = proc.communicate(timeout=120)
            self.assertEqual(proc.returncode, 0, output[-3000:])
            self.assertLess(held, steps - 5, "the disk was full too late: %d" % held)
            self.assertIn("its records are held in memory and written once the disk has room", output)
            self.assertRegex(output, r"metrics.jsonl: the \d+ record\(s\) held while its disk was full are written")
            self.assertNotIn("LOG ERROR", output)
            # train.log says it once, where its writes met the full disk (its buffer may not have).
            self.assertLessEqual(output.count("megabatch: cannot write"), 1, output[-3000:])
            self.assertEqual(train_steps(run), list(range(1, steps + 1)))
            scalars, _ = EventReader(self.tmp).scalars(run)
            self.assertEqual(sorted(step for tag, step in scalars if tag == "train/loss"), list(range(1, steps + 1)))
            print("the disk was full from step %d for 1 s; every record was written once it had room" % held)
        finally:
            subprocess.run(["umount", "-l", disk], check=False)


if __name__ == "__main__":
    unittest.main(verbosity=2)
