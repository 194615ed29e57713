"""Shared helpers for the reliability suite (issue 9): a small series data set, a training
config, process discovery for a running mpirun job, and checks that nothing crashed.

The trainer config and the checkpoint readers come from tests/train/test_training.py, so the
fault tests train exactly the model the trainer tests train.
"""
import glob
import os
import re
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "train"))
import mbtest  # noqa: E402
from mbtest import crash_signs  # noqa: E402,F401
from test_training import (BASE_CONFIG, checkpoint_params, latest_checkpoint, read_metrics,  # noqa: E402,F401
                           train_losses)

# Child processes: one thread each, so 4 ranks on 2 cores stay fast.
CHILD_ENV = {"OMP_NUM_THREADS": "1"}


def make_series(path, rows=8000):
    r = mbtest.run(["data", "synth-series", "--out", path, "--rows", str(rows), "--features", "3",
                    "--streams", "m1:1,m5:5", "--seed", "7"])
    if r.returncode != 0:
        raise RuntimeError("could not make test data:\n%r" % r)


def train_command(np_, config, overrides=()):
    """The command line a user runs: mpirun -np N megabatch train --config F overrides, on the
    test device (mbtest.with_device)."""
    return [mbtest.MPIEXEC, "-np", str(np_), "--oversubscribe", mbtest.BIN] + \
        mbtest.with_device(["train", "--config", config] + list(overrides), np_)


def rank_pids(config):
    """{rank: pid} of the megabatch ranks of the job training `config` (not mpirun itself)."""
    found = subprocess.run(["pgrep", "-f", "^" + re.escape(mbtest.BIN) + " train --config " + re.escape(config)],
                           stdout=subprocess.PIPE, universal_newlines=True).stdout.split()
    ranks = {}
    for pid in map(int, found):
        try:
            with open("/proc/%d/environ" % pid, "rb") as f:
                env = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
        except OSError:
            continue  # it ended meanwhile
        rank = env.get(b"OMPI_COMM_WORLD_RANK")
        if rank is not None:
            ranks[int(rank)] = pid
    return ranks


def survivors(config):
    return subprocess.run(["pgrep", "-f", "^" + re.escape(mbtest.BIN) + " train --config " + re.escape(config)],
                          stdout=subprocess.PIPE, universal_newlines=True).stdout.split()


def wait_for_step(run_dir, step, proc, timeout=120):
    """Waits until metrics.jsonl records training step `step` (or the job ends)."""
    metrics = os.path.join(run_dir, "metrics.jsonl")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if os.path.exists(metrics):
            steps = [r["step"] for r in read_metrics(run_dir) if r.get("event") == "train"]
            if steps and max(steps) >= step:
                return max(steps)
        time.sleep(0.02)
    raise AssertionError("run never reached step %d (exit %s)" % (step, proc.poll()))


def step_files(run_dir):
    return sorted(os.path.basename(p) for p in glob.glob(os.path.join(run_dir, "checkpoints", "step-*.h5")))


def tmp_files(run_dir):
    return glob.glob(os.path.join(run_dir, "checkpoints", "*.tmp"))


def kill_job(proc, config):
    """Ends a Popen'd mpirun job that a failed test left running: mpirun, then its ranks."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    for pid in survivors(config):
        try:
            os.kill(int(pid), signal.SIGKILL)
        except OSError:
            pass
