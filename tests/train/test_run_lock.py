"""One run directory, one writer (Note [One writer per run directory] in src/train/checkpoints/RunLock.cpp):
a second trainer on a run.dir in use is refused before it writes anything, on every rank; the
lock dies with its holder (kill -9); a holder that is ending is waited for (run.lock_wait_s); and
readers (eval, inspect) need no lock. MEGABATCH_FAULT_SLOW_STEP (src/dist/FaultInjection.h)
keeps the first trainer busy long enough.
"""
import fcntl
import os
import re
import socket
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import mbtest  # noqa: E402
from mbtest import checkpoint_params, train_losses  # noqa: E402

CONFIG = """
run:
  dir: {run_dir}
  log_every: 1
  checkpoint_every: 5
  keep_last: 2
data:
  path: {data}
  layout: series
  streams:
    - {{name: m1, window: 16}}
    - {{name: m5, window: 8}}
  canonical_shards: 8
  split: {{train_fraction: 0.7, val_fraction: 0.2, test_fraction: 0.1}}
model:
  kind: lstm
  hidden: 16
  layers: 1
  head_hidden: 16
  dropout: 0.0
train:
  global_batch: 32
  max_steps: {steps}
  eval_every: 0
  precision: fp32
  threads: 1
optim:
  name: adamw
  lr: 0.01
"""

SLOW = {"MEGABATCH_FAULT_SLOW_STEP": "*:60"}  # 60 ms more per micro-batch: 20 steps take 1.2 s


def read_lock(run_dir):
    """run.lock's `key: value` lines, {} while it is missing or being written."""
    try:
        with open(os.path.join(run_dir, "run.lock")) as f:
            fields = dict(line.rstrip("\n").split(": ", 1) for line in f if ": " in line)
    except FileNotFoundError:
        return {}
    return fields if "token" in fields else {}


class RunLockTest(mbtest.SeriesTrainingTestCase):

    def config(self, name, steps):
        run_dir = self.path(name)
        text = CONFIG.format(run_dir=run_dir, data=self.data, steps=steps)
        return self.write(name + ".yaml", text), run_dir

    def start(self, config, overrides=(), env=SLOW, np_=1):
        args = mbtest.with_device(["train", "--config", config] + list(overrides), np_)
        cmd = [mbtest.BIN] + args if np_ == 1 else \
            [mbtest.MPIEXEC, "-np", str(np_), "--oversubscribe", mbtest.BIN] + args
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                                env=dict(os.environ, **env))

    def wait_until(self, proc, ready, what, timeout=120):
        deadline = time.time() + timeout
        while time.time() < deadline and proc.poll() is None:
            if ready():
                return
            time.sleep(0.05)
        proc.kill()
        self.fail("%s did not happen within %d s:\n%s" % (what, timeout, proc.communicate()[0][-3000:]))

    def finish(self, proc, code=0):
        out, _ = proc.communicate(timeout=300)
        self.assertEqual(proc.returncode, code, out[-3000:])
        return out

    def test_a_second_trainer_is_refused_and_the_first_trains_as_if_alone(self):
        config, run_dir = self.config("shared", 40)
        first = self.start(config)
        started = time.monotonic()
        self.wait_until(first, lambda: read_lock(run_dir).get("pid") == str(first.pid), "the lock")
        time.sleep(max(0.0, 1.0 - (time.monotonic() - started)))  # 1 s apart
        second = mbtest.run(["train", "--config", config], timeout=60)
        print("second trainer: exit %d after %.2f s" % (second.returncode, second.seconds), flush=True)
        self.assertExit(second, 2, "run.dir '%s' is in use" % run_dir,
                        "pid %d on host %s" % (first.pid, socket.gethostname()), "kill -USR1 %d" % first.pid)
        self.assertLess(second.seconds, 5, repr(second))
        self.assertIsNone(first.poll(), "the first trainer must still be training")
        self.finish(first)
        with open(os.path.join(run_dir, "train.log")) as log:
            self.assertNotIn("is in use", log.read())
        lock = read_lock(run_dir)
        self.assertEqual((lock["pid"], lock["state"]), (str(first.pid), "ended"), lock)

        alone_config, alone_dir = self.config("alone", 40)
        self.finish(self.start(alone_config))
        self.assertEqual(train_losses(run_dir), train_losses(alone_dir))
        names = sorted(os.listdir(os.path.join(run_dir, "checkpoints")))
        self.assertEqual(names, sorted(os.listdir(os.path.join(alone_dir, "checkpoints"))))
        for name in names:
            if name.endswith(".h5"):
                ours = checkpoint_params(os.path.join(run_dir, "checkpoints", name))
                alone = checkpoint_params(os.path.join(alone_dir, "checkpoints", name))
                for key in alone:
                    self.assertTrue((ours[key] == alone[key]).all(), "%s %s" % (name, key))

    def kill_and_resume_at_once(self, overrides):
        config, run_dir = self.config("killed", 200)
        first = self.start(config, overrides)
        latest = os.path.join(run_dir, "checkpoints", "latest")
        self.wait_until(first, lambda: os.path.exists(latest), "a first checkpoint")
        first.kill()  # SIGKILL: nothing of the trainer runs after it
        first.communicate()
        resumed = mbtest.run(["train", "--config", config, "train.max_steps=12"] + overrides, timeout=120)
        print("resumed after kill -9: exit %d after %.2f s" % (resumed.returncode, resumed.seconds), flush=True)
        self.assertExit(resumed, 0, "resuming from")
        self.assertNotIn("waiting up to", resumed.output)
        self.assertNotIn("is in use", resumed.output)
        return resumed

    def test_kill_9_then_the_same_command_resumes_at_once(self):
        self.kill_and_resume_at_once([])

    def test_kill_9_with_a_lock_file_resumes_at_once_on_the_same_host(self):
        resumed = self.kill_and_resume_at_once(["run.lock=file"])
        self.assertIn("removed the stale", resumed.output)

    def test_on_two_ranks_every_rank_of_the_second_job_ends(self):
        config, run_dir = self.config("ranks", 60)
        first = self.start(config, np_=2)
        self.wait_until(first, lambda: "pid" in read_lock(run_dir), "the lock")
        second = mbtest.mpirun(2, ["train", "--config", config], timeout=60)
        print("second job on 2 ranks: exit %d after %.2f s" % (second.returncode, second.seconds), flush=True)
        self.assertExit(second, 2, "rank 0: run.dir '%s' is in use" % run_dir)
        self.assertEqual(mbtest.crash_signs(second.output), [])
        ranks = subprocess.run(["pgrep", "-f", "-x", ".*megabatch train --config %s.*" % config],
                               stdout=subprocess.PIPE, universal_newlines=True).stdout.split()
        ranks = [p for p in ranks if int(p) != first.pid]
        self.assertEqual(len(ranks), 2, "only the first job's two ranks are left: %s" % ranks)
        self.finish(first)

    def hold_as_ending(self, run_dir, seconds):
        """Another process holds run.dir's kernel lock for `seconds`, saying it is stopping."""
        os.makedirs(run_dir, exist_ok=True)
        holder = ("import fcntl, os, time\n"
                  "f = open(%r, 'a+')\n"
                  "fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
                  "f.truncate(0); f.write('host: %s\\npid: %%d\\nstarted_unix: %%d\\ncommand: held by the test\\n"
                  "state: stopping\\nkind: kernel\\ntoken: t\\n' %% (os.getpid(), time.time())); f.flush()\n"
                  "print('held', flush=True)\n"
                  "time.sleep(%g)\n") % (os.path.join(run_dir, "run.lock"), socket.gethostname(), seconds)
        proc = subprocess.Popen(["/usr/bin/python3", "-c", holder], stdout=subprocess.PIPE, universal_newlines=True)
        self.assertEqual(proc.stdout.readline().strip(), "held")
        self.addCleanup(lambda: (proc.kill(), proc.communicate()))
        return proc

    def test_a_trainer_that_is_ending_is_waited_for_a_bounded_time(self):
        config, run_dir = self.config("overlap", 5)
        self.hold_as_ending(run_dir, 3)
        waited = mbtest.run(["train", "--config", config], timeout=60)
        print("waited for an ending holder: exit %d after %.2f s" % (waited.returncode, waited.seconds), flush=True)
        self.assertExit(waited, 0, "stopping: held by the test; waiting up to 60 s", "took over after waiting")
        self.assertGreater(waited.seconds, 2.5)

        holder = self.hold_as_ending(run_dir, 60)
        refused = mbtest.run(["train", "--config", config, "train.max_steps=10", "run.lock_wait_s=1"], timeout=60)
        self.assertExit(refused, 2, "pid %d on host" % holder.pid, "still held after waiting 1 s (run.lock_wait_s)")
        self.assertLess(refused.seconds, 5, repr(refused))

    def test_eval_and_inspect_read_a_run_being_trained(self):
        config, run_dir = self.config("read", 150)
        # A checkpoint every step and only the newest kept: the file `latest` names is removed
        # soon after (Note [One writer per run directory]).
        trainer = self.start(config, ["run.checkpoint_every=1", "run.keep_last=1"],
                             env={"MEGABATCH_FAULT_SLOW_STEP": "*:40"})
        latest = os.path.join(run_dir, "checkpoints", "latest")
        self.wait_until(trainer, lambda: os.path.exists(latest), "a first checkpoint")
        steps = []
        while trainer.poll() is None:
            target = latest if len(steps) % 2 == 0 else run_dir
            r = mbtest.run(["eval", "--checkpoint", target, "--max-samples", "200"], timeout=60)
            self.assertExit(r, 0, "checkpoint ")
            steps.append(int(re.search(r"\(step (\d+)\)", r.output).group(1)))
            self.assertExit(mbtest.run(["inspect", run_dir], timeout=60), 0, "step")
        self.finish(trainer)
        print("evaluated while training at steps %s" % steps, flush=True)
        self.assertGreaterEqual(len([s for s in steps if s < 150]), 3, steps)
        self.assertEqual(steps, sorted(steps), "each evaluation reads the newest checkpoint")


if __name__ == "__main__":
    unittest.main()
