#!/usr/bin/python3
"""A fault soak: one training run meets a random schedule of faults under the elastic launcher
(launch/train-multinode.sh --max-restarts) and must end as an uninterrupted run ends.

    /usr/bin/python3 tests/soak/soak.py --faults 100                # a new random seed, printed
    /usr/bin/python3 tests/soak/soak.py --faults 100 --seed 42      # replays seed 42's schedule
    /usr/bin/python3 tests/soak/soak.py --faults 5 --seed 7 --seed random   # two soaks, one reference

The run: the demo LSTM on 2 ranks of this machine (a hostfile naming localhost twice, plain
mpirun over TCP), steps slowed by MEGABATCH_FAULT_SLOW_STEP so that faults land mid-run, a
checkpoint every 10 steps, a log line every 3 (so resumes land inside log windows), an
evaluation every 40; run.dir on a small tmpfs where this user may mount one (for the full disk).

The faults (docs/reliability.md, "The fault soak"), drawn with their waits from the seed:
  kill_rank           SIGKILL to a random rank: the launcher restarts the job
  kill_mpirun         SIGKILL to mpirun: the same
  stop_term/usr1      SIGTERM or SIGUSR1 to the launcher: checkpoint, exit 75; started again
                      as a requeue would
  kill_tree           SIGKILL to the launcher and everything under it (a lost node, an
                      scancel --signal=KILL): started again
  disk_full           the run's disk filled for 1-5 s (checkpoints, TensorBoard, metrics and the
                      run lock meet it): a failed checkpoint ends with exit 4, started again
                      once the disk has room
  kill_in_checkpoint  SIGKILL to rank 0 while its checkpoint's temporary file is on disk
  corrupt_latest      a stop, then the latest checkpoint torn (cut in half) or one bit flipped,
                      then a requeue: the run must resume from the checkpoint before it
  second_trainer      `megabatch train` on the same run.dir while the job runs: exit 2
  fault_in_restart    a rank killed, then another kill while the launcher restarts the job

At the end it checks, with a figure each: the run reached its last step; its parameters equal
the uninterrupted run's bit for bit; metrics.jsonl's train and eval records equal the
uninterrupted run's, each step once, in order, and the TensorBoard files show each step once
(TensorBoard's purge rule) with the same losses; every checkpoint left loads (megabatch
inspect); no process of the run is left; the steps redone are at most the checkpoint interval
per fault (two intervals for a corrupt latest or a fault during a restart); every exit was a
documented one. Exit status 0 when every check holds.
"""
import argparse
import glob
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "launch"))
sys.path.insert(0, os.path.join(HERE, "..", "train"))
sys.path.insert(0, HERE)
from soakkit import (CHECKPOINT_EVERY, RANKS, Reference, Run, SoakStuck, can_mount_tmpfs, descendants,  # noqa: E402
                     kill, log, mpirun_pids, of_run, rank_pids)
import mbtest  # noqa: E402
from test_launch import DEMO, synth_demo_data  # noqa: E402

import numpy as np  # noqa: E402

FAULT_KINDS = ("kill_rank", "kill_mpirun", "stop_term", "stop_usr1", "kill_tree", "disk_full",
               "kill_in_checkpoint", "corrupt_latest", "second_trainer", "fault_in_restart")
TMPFS_MB = 48
PER_START = ("memory_plan/", "restart/", "baseline_")
# Documented exits (docs/operations.md, "Exit codes"): what each fault may end the launcher with.
EXPECTED_EXITS = {"stop_term": {75}, "stop_usr1": {75}, "corrupt_latest": {75}, "kill_tree": {-9},
                  "disk_full": {2, 4}}  # 2: the run lock cannot be written at a start


class Soak:
    def __init__(self, args, root, data, reference, seed, use_tmpfs):
        self.args = args
        self.seed = seed
        self.rng = random.Random(seed)
        self.reference = reference
        self.use_tmpfs = use_tmpfs
        kinds = [k for k in (args.kinds.split(",") if args.kinds else FAULT_KINDS) if use_tmpfs or k != "disk_full"]
        # The whole schedule is drawn first, so a seed replays it whatever the run does.
        self.schedule = [{"kind": self.rng.choice(kinds), "wait": round(self.rng.uniform(args.min_wait, args.max_wait), 2),
                          "rank": self.rng.randrange(RANKS), "hold": round(self.rng.uniform(1, 5), 2),
                          "torn": self.rng.random() < 0.5, "spot": self.rng.random(),
                          "delay": round(self.rng.uniform(0, 2), 2)} for _ in range(args.faults)]
        self.root = os.path.join(root, "seed-%d" % seed)
        self.disk = os.path.join(self.root, "disk")  # the run's disk: a small tmpfs where one can be mounted
        os.makedirs(self.disk)
        if use_tmpfs:
            subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%dm" % TMPFS_MB, "soak", self.disk], check=True)
        self.run = Run(self.root, data, args.steps, "run", self.disk)
        self.events = []  # one dict per fault: kind, time, step, what happened
        self.problems = []

    def close(self):
        if self.use_tmpfs:
            subprocess.run(["umount", "-l", self.disk], check=False)

    # The launcher ended: a documented end of the fault that caused it is started again.
    def handle_end(self, blame):
        code = self.run.job.returncode
        finished = code == 0 and self.run.last_step() >= self.run.steps
        if not self.run.handled:
            expected = finished or (code in EXPECTED_EXITS.get(blame["kind"], set()) if blame else False)
            self.run.exits.append((code, blame["kind"] if blame else "none", expected))
            self.run.handled = True
        if finished:
            return False
        expected = self.run.exits[-1][2]
        step = self.run.last_step()
        self.run.fruitless = self.run.fruitless + 1 if step == self.run.step_at_last_start else 0
        if self.run.fruitless >= 8:
            raise SoakStuck("8 starts in a row took no step (the last exited %d): see %s" % (code, self.run.log_path))
        self.run.step_at_last_start = step
        if not expected:
            self.problems.append("fault %s: the launcher exited %d, not a documented end of it"
                                 % (blame["index"] if blame else "-", code))
            if blame:
                blame["survived"] = False
        log("launcher exited %d (%s): starting it again, as a requeue would" % (code, "expected" if expected else "NOT expected"))
        self.run.start("after exit %d" % code)
        return True

    def keep_running(self, seconds, blame):
        """Sleeps `seconds` while the job runs; starts it again when it ends (handle_end). False
        when the run has finished."""
        end = time.time() + seconds
        while time.time() < end:
            if not self.run.running():
                if not self.handle_end(blame):
                    return False
            time.sleep(0.05)
        return True

    def wait_for_ranks(self, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            ranks = rank_pids(self.run.marker())
            if len(ranks) == RANKS:
                return ranks
            if not self.run.running():
                return {}
            time.sleep(0.02)
        return {}

    def wait_for_exit(self, timeout=90):
        code = self.run.wait(timeout)
        if code is None:
            self.problems.append("the launcher did not end within %d s of a stop" % timeout)
        return code

    # --- faults ------------------------------------------------------------------------------
    def fault_kill_rank(self, f):
        ranks = self.wait_for_ranks()
        if not ranks:
            return "no rank to kill (the job was not running)"
        rank = f["rank"] % len(ranks)
        kill(ranks[rank])
        return "SIGKILL to rank %d (pid %d)" % (rank, ranks[rank])

    def fault_kill_mpirun(self, f):
        self.wait_for_ranks()
        pids = mpirun_pids(self.run.marker())
        for pid in pids:
            kill(pid)
        return "SIGKILL to mpirun (pid %s)" % pids

    def stop(self, sig):
        self.run.job.send_signal(sig)
        return self.wait_for_exit()

    def fault_stop_term(self, f):
        self.wait_for_ranks()
        code = self.stop(signal.SIGTERM)
        return "SIGTERM to the launcher: exit %s" % code

    def fault_stop_usr1(self, f):
        self.wait_for_ranks()
        code = self.stop(signal.SIGUSR1)
        return "SIGUSR1 to the launcher: exit %s" % code

    def fault_kill_tree(self, f):
        self.wait_for_ranks()
        tree = [self.run.job.pid] + descendants(self.run.job.pid)
        for pid in tree:
            kill(pid)
        self.run.wait(30)
        return "SIGKILL to the launcher and its %d descendants" % (len(tree) - 1)

    def fault_disk_full(self, f):
        filler = os.path.join(self.disk, "filler")
        free = os.statvfs(self.disk).f_bavail * os.statvfs(self.disk).f_frsize
        with open(filler, "wb", buffering=0) as out:
            size = 1 << 20
            while size:  # to the last byte: then no write finds room in a page left over
                try:
                    out.write(b"\0" * size)
                except OSError:
                    size //= 2
        ended = self.run.wait(f["hold"])
        os.remove(filler)
        return "disk filled (%.1f MB) for %.1f s: %s" % (free / 1e6, f["hold"], "the job ended with %d" % ended
                                                         if ended is not None else "the job went on")

    def fault_kill_in_checkpoint(self, f):
        self.wait_for_ranks()
        ckpt = os.path.join(self.run.dir, "checkpoints")
        deadline = time.time() + 60
        while time.time() < deadline and self.run.running():
            try:
                tmp = [n for n in os.listdir(ckpt) if n.endswith(".h5.tmp")]
            except OSError:
                tmp = []
            if tmp:
                ranks = rank_pids(self.run.marker())
                if 0 in ranks:
                    kill(ranks[0])
                    return "SIGKILL to rank 0 (pid %d) while it wrote %s" % (ranks[0], tmp[0])
            time.sleep(0.002)
        return "no checkpoint write seen"

    def fault_corrupt_latest(self, f):
        self.wait_for_ranks()
        code = self.stop(signal.SIGUSR1)
        ckpt = os.path.join(self.run.dir, "checkpoints")
        try:
            with open(os.path.join(ckpt, "latest")) as fl:
                name = fl.read().strip()
        except OSError:
            return "stopped (exit %s); no latest checkpoint to damage" % code
        path = os.path.join(ckpt, name)
        if len(glob.glob(os.path.join(ckpt, "step-*.h5"))) < 2:
            # The only checkpoint damaged ends every start with exit 4 until someone moves it
            # away (documented): not a fault a run can survive by itself.
            return "stopped (exit %s); %s is the only checkpoint: left whole" % (code, name)
        size = os.path.getsize(path)
        if f["torn"]:
            os.truncate(path, size // 2)
            what = "torn to %d of %d bytes" % (size // 2, size)
        else:
            at = int(size * (0.1 + 0.8 * f["spot"]))
            with open(path, "r+b") as fb:
                fb.seek(at)
                byte = fb.read(1)[0]
                fb.seek(at)
                fb.write(bytes([byte ^ 0x10]))
            what = "bit 4 of byte %d of %d flipped" % (at, size)
        return "stopped (exit %s); %s %s" % (code, name, what)

    def fault_second_trainer(self, f):
        # Only once the job's trainer holds the run directory (it has logged a step since it
        # started): before that the second trainer would be the first.
        before = self.run.last_step()
        deadline = time.time() + 60
        while self.run.last_step() <= before and self.run.running() and time.time() < deadline:
            time.sleep(0.02)
        if not self.wait_for_ranks():
            return "no job running: skipped"
        cmd = [mbtest.BIN, "train", "--config", DEMO, "train.device=cpu"] + self.run.overrides()
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                           env=self.run.environment(), timeout=120)
        f["second_exit"] = r.returncode
        if r.returncode != 2 or "another trainer holds it" not in r.stdout:
            self.problems.append("fault %d: a second trainer exited %d:\n%s" % (f["index"], r.returncode, r.stdout[-2000:]))
            f["survived"] = False
        return "a second trainer on the run directory: exit %d" % r.returncode

    def fault_fault_in_restart(self, f):
        first = self.fault_kill_rank(f)
        seen = self.run.output().count("restarting on")
        deadline = time.time() + 60
        while self.run.output().count("restarting on") == seen and time.time() < deadline and self.run.running():
            time.sleep(0.02)
        time.sleep(f["delay"])
        ranks = rank_pids(self.run.marker())
        if ranks:
            pid = ranks[min(ranks)]
            kill(pid)
            second = "SIGKILL to a rank (pid %d) %.1f s into the restart" % (pid, f["delay"])
        else:
            pids = mpirun_pids(self.run.marker())
            for pid in pids:
                kill(pid)
            second = "SIGKILL to mpirun %s %.1f s into the restart (no rank yet)" % (pids, f["delay"])
        return first + "; " + second

    # --- the soak ---------------------------------------------------------------------------
    def soak(self):
        """Rounds of the same run, each from a fresh run directory to its last step, until every
        fault of the schedule has been injected: a run no longer than the reference, however
        many faults."""
        log("seed %d: %d faults, waits %.1f-%.1f s: %s" % (self.seed, len(self.schedule), self.args.min_wait,
                                                           self.args.max_wait, " ".join(f["kind"] for f in self.schedule)))
        todo = list(enumerate(self.schedule, 1))
        totals = {"survived": 0, "faults": 0, "redone": 0, "allowed": 0, "wall": 0.0, "rounds": 0}
        while todo:
            totals["rounds"] += 1
            self.run = Run(self.root, self.run.data, self.args.steps, "run-%d" % totals["rounds"], self.disk)
            self.events = []
            before = len(todo)
            try:
                todo = self.soak_round(todo)
            except SoakStuck as stuck:
                self.problems.append(str(stuck))
                for pid in [self.run.job.pid] + descendants(self.run.job.pid):
                    kill(pid)
                break
            if len(todo) == before:
                self.problems.append("a round took no fault: the run is too short for the waits (--steps)")
                break
            round_totals = self.check()
            for key, value in round_totals.items():
                totals[key] += value
            if self.use_tmpfs:  # off the small disk, kept for a look
                shutil.copytree(self.run.dir, os.path.join(self.root, os.path.basename(self.run.dir)), symlinks=True)
                shutil.rmtree(self.run.dir)
        overhead = 100.0 * (totals["wall"] - totals["rounds"] * self.reference.wall) / (totals["rounds"] * self.reference.wall)
        self.summary = ("faults survived %d/%d, steps redone %d (allowed %d), wall overhead %.0f%% (seed %d, %d round%s)"
                        % (totals["survived"], totals["faults"], totals["redone"], totals["allowed"], overhead,
                           self.seed, totals["rounds"], "" if totals["rounds"] == 1 else "s"))
        log(self.summary)
        for problem in self.problems:
            log("PROBLEM: " + problem)
        return not self.problems

    def soak_round(self, todo):
        """Injects faults of `todo` until the run finishes; returns those left."""
        started = time.time()
        self.run.start("first start")
        while todo:
            index, f = todo[0]
            f["index"] = index
            blame = self.events[-1] if self.events else None
            if not self.keep_running(f["wait"], blame):
                break
            if not self.run.running() and not self.handle_end(blame):
                break
            todo = todo[1:]
            f["step"] = self.run.last_step()
            f["time"] = time.time() - started
            f["survived"] = True
            f["what"] = getattr(self, "fault_" + f["kind"])(f)
            self.events.append(f)
            log("fault %d/%d at %.1f s, step %d: %s: %s" % (index, len(self.schedule), f["time"], f["step"], f["kind"],
                                                            f["what"]))
        # The last faults' ends, then the run to its end.
        deadline = time.time() + self.args.finish_timeout
        while time.time() < deadline:
            code = self.run.wait(max(1, deadline - time.time()))
            if code is None:
                break
            if not self.handle_end(self.events[-1] if self.events else None):
                break
        if self.run.running():
            self.problems.append("the run had not finished %d s after the last fault" % self.args.finish_timeout)
            for pid in [self.run.job.pid] + descendants(self.run.job.pid):
                kill(pid)
        self.wall = time.time() - started
        return todo

    # --- the end checks ---------------------------------------------------------------------
    def check(self):
        during = len(self.problems)
        figures = self.end_checks()
        end_problems = self.problems[during:]
        redone, allowed = self.redone_steps()
        for line in figures:
            log("check: " + line)
        # A fault is survived when nothing went wrong at it; a failed end check fails every fault
        # of the round, since the end state no longer shows which one did it.
        survived = sum(1 for f in self.events if f["survived"]) if not end_problems else 0
        log("round: faults survived %d/%d, steps redone %d (allowed %d), wall %.1f s (uninterrupted %.1f s)"
            % (survived, len(self.events), redone, allowed, self.wall, self.reference.wall))
        return {"survived": survived, "faults": len(self.events), "redone": redone, "allowed": allowed,
                "wall": self.wall}

    def end_checks(self):
        figures = []
        run, ref = self.run.dir, self.reference.dir
        last = self.run.last_step()
        figures.append("last step %d of %d" % (last, self.run.steps))
        if last != self.run.steps:
            self.problems.append("the run ended at step %d, not %d" % (last, self.run.steps))
        figures.append(self.check_parameters(run, ref))
        figures.append(self.check_metrics(run, ref))
        figures.append(self.check_tensorboard(run))
        figures.append(self.check_checkpoints(run))
        figures.append(self.check_leftovers())
        figures.append(self.check_output())
        redone, allowed = self.redone_steps()
        exits = ", ".join("%s%s" % (code, "" if ok else "(!)") for code, _, ok in self.run.exits)
        figures.append("launcher exits: %s" % (exits or "0 only"))
        if redone > allowed:
            self.problems.append("steps redone %d > allowed %d" % (redone, allowed))
        return figures

    def check_output(self):
        """No crash in the job's output: the kills the soak made are the only deaths by signal."""
        ours = ("exited on signal 9", "exited on signal 10")
        signs = [line for line in mbtest.crash_signs(self.run.output()) if not any(o in line for o in ours)]
        if signs:
            self.problems.append("crash signs in the job's output: %s" % signs[:5])
        return "crash signs in the output (besides the soak's own kills): %d" % len(signs)

    def check_parameters(self, run, ref):
        name = "step-%08d.h5" % self.run.steps
        try:
            got = mbtest.checkpoint_params(os.path.join(run, "checkpoints", name))
        except OSError as e:
            self.problems.append("no final checkpoint: %s" % e)
            return "parameters: no final checkpoint"
        want = mbtest.checkpoint_params(os.path.join(ref, "checkpoints", name))
        differ = [k for k in want if not np.array_equal(got.get(k), want[k])]
        if differ or set(got) != set(want):
            worst = max(float(np.max(np.abs(got[k] - want[k]))) for k in differ if k in got) if differ else 0
            self.problems.append("parameters differ from the uninterrupted run: %s (max |diff| %g)" % (differ, worst))
        return "parameters: %d of %d tensors bitwise equal to the uninterrupted run's" % (len(want) - len(differ), len(want))

    def check_metrics(self, run, ref):
        def records(d, kind):
            return [(r["step"], r["loss"]) for r in mbtest.read_metrics(d) if r.get("event") == kind]
        notes = []
        for kind in ("train", "eval"):
            got, want = records(run, kind), records(ref, kind)
            if got != want:
                steps = [s for s, _ in got]
                dup = sorted({s for s in steps if steps.count(s) > 1})
                wrong = [(s, l, dict(want).get(s)) for s, l in got if dict(want).get(s) != l][:3]
                self.problems.append("metrics.jsonl %s records differ from the uninterrupted run's: %d against %d, "
                                     "repeated steps %s, first differing (step, loss, want) %s"
                                     % (kind, len(got), len(want), dup[:10], wrong))
            notes.append("%d %s records" % (len(got), kind))
        return "metrics.jsonl: %s, equal to the uninterrupted run's (steps once, in order, same losses)" % \
            " and ".join(notes)

    def check_tensorboard(self, run):
        from test_tensorboard import EventReader
        reader = EventReader(tempfile.mkdtemp(prefix="soak-proto-"))
        scalars, _ = reader.scalars(run)
        # A start's own records (its memory plan, a restart) come once per start: two starts from
        # one checkpoint record them at the same step.
        repeated = sorted((tag, step) for (tag, step), values in scalars.items()
                          if len(values) > 1 and not tag.startswith(PER_START))
        losses = {step: v[0] for (tag, step), v in scalars.items() if tag == "train/loss"}
        want = {s: np.float32(l) for s, l in ((r["step"], r["loss"]) for r in mbtest.read_metrics(run)
                                              if r.get("event") == "train")}
        wrong = [s for s in want if s not in losses or np.float32(losses[s]) != want[s]]
        extra = sorted(set(losses) - set(want))
        if repeated or wrong or extra:
            self.problems.append("TensorBoard: %d (tag, step) shown more than once %s, %d train/loss steps missing or "
                                 "different %s, %d extra %s" % (len(repeated), repeated[:5], len(wrong), wrong[:5],
                                                                len(extra), extra[:5]))
        return "TensorBoard: %d train/loss steps, each once, as in metrics.jsonl; %d (tag, step) repeated" % (
            len(losses), len(repeated))

    def check_checkpoints(self, run):
        files = sorted(glob.glob(os.path.join(run, "checkpoints", "*")))
        loaded, bad, aside = 0, [], 0
        for path in files:
            name = os.path.basename(path)
            if name == "latest" or name.endswith(".lock"):
                continue
            if ".h5.corrupt" in name:  # set aside by a resume (Note [Damaged checkpoints are set aside])
                aside += 1
                continue
            r = mbtest.run(["inspect", path], timeout=120)
            if r.returncode == 0:
                loaded += 1
            else:
                bad.append(name)
        if bad:
            self.problems.append("checkpoints that do not load and were not set aside: %s" % bad)
        return "checkpoints: %d of %d load (megabatch inspect); %d set aside" % (loaded, loaded + len(bad), aside)

    def check_leftovers(self):
        deadline = time.time() + 15
        while of_run(self.run.marker()) and time.time() < deadline:
            time.sleep(0.2)
        left = of_run(self.run.marker())
        if left:
            self.problems.append("processes of the run left behind: %s" % left)
        return "processes left: %d" % len(left)

    def redone_steps(self):
        """Steps trained again after each restart or requeue: the last step logged before it
        less the step it resumed from (read from rank 0's lines in the job's output, so up to
        LOG_EVERY - 1 steps per fault are not seen); and what the faults allow."""
        redone, last = 0, 0
        for line in self.run.output().splitlines():
            m = re.search(r"\[r0/\d+\] \[train\] info: step (\d+)/\d+ ", line)
            if m:
                last = int(m.group(1))
                continue
            m = re.search(r"\[r0/\d+\] \[train\] info: training \d+ steps \(\d+ per epoch\) from step (\d+)", line)
            if m:
                start = int(m.group(1))
                redone += max(0, last - start)
                last = start
        double = ("corrupt_latest", "fault_in_restart")
        allowed = sum(CHECKPOINT_EVERY * (2 if f["kind"] in double else 1) for f in self.events)
        return redone, allowed


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--faults", type=int, default=10)
    p.add_argument("--seed", action="append", default=[],
                   help="a seed to replay, or 'random' (default: one random seed); may be repeated")
    p.add_argument("--kinds", help="the faults to draw from, comma-separated (default: all): %s" % ",".join(FAULT_KINDS))
    p.add_argument("--steps", type=int, default=400, help="training steps of a round (default 400)")
    p.add_argument("--min-wait", type=float, default=0.5)
    p.add_argument("--max-wait", type=float, default=20)
    p.add_argument("--finish-timeout", type=float, default=600)
    p.add_argument("--workdir", help="keep everything here (default: a temporary directory, removed)")
    args = p.parse_args(argv)
    seeds = [random.SystemRandom().randrange(1 << 31) if s == "random" else int(s) for s in (args.seed or ["random"])]
    root = args.workdir or tempfile.mkdtemp(prefix="megabatch-soak-")
    os.makedirs(root, exist_ok=True)
    use_tmpfs = can_mount_tmpfs(root)
    if not use_tmpfs:
        log("cannot mount a tmpfs here (not root?): the disk_full fault is left out")
    log("seeds %s; %d faults each; %d steps; work in %s" % (seeds, args.faults, args.steps, root))
    ok = True
    try:
        data = os.path.join(root, "demo.h5")
        synth_demo_data(data)
        reference = Reference(root, data, args.steps)
        summaries = []
        for seed in seeds:
            soak = Soak(args, root, data, reference, seed, use_tmpfs)
            try:
                ok = soak.soak() and ok
                summaries.append(soak.summary)
            finally:
                soak.close()
        for line in summaries:
            log(line)
    finally:
        if not args.workdir:
            shutil.rmtree(root, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
