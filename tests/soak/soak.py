#!/usr/bin/python3
"""A fault soak: one training run meets a random schedule of faults under the elastic launcher
(launch/train-multinode.sh --max-restarts) and must end as an uninterrupted run ends.

    /usr/bin/python3 tests/soak/soak.py --faults 100                # a new random seed, printed
    /usr/bin/python3 tests/soak/soak.py --faults 100 --seed 42      # replays seed 42's schedule
    /usr/bin/python3 tests/soak/soak.py --faults 5 --seed 7 --seed random   # two soaks, one reference
    /usr/bin/python3 tests/soak/soak.py --hosts --faults 100        # on two hosts (soakhosts.py)

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

With --hosts the run has one rank on each host of the two-namespace bed, and lost_host,
cut_link and slow_link join the faults (tests/soak/soakhosts.py).

At the end it checks, with a figure each: the run reached its last step; its parameters equal
the uninterrupted run's bit for bit (to the documented tolerance when part of it trained on
fewer ranks, after a lost host); metrics.jsonl's train and eval records equal the
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
from soakchecks import EndChecks  # noqa: E402
from soakkit import (RANKS, Reference, Run, SoakStuck, can_mount_tmpfs, descendants, kill, log,  # noqa: E402
                     mpirun_pids, rank_pids, ranks_and_world)
import mbtest  # noqa: E402
from test_launch import DEMO, synth_demo_data  # noqa: E402

HOST_KINDS = ("lost_host", "cut_link", "slow_link")  # with --hosts (soakhosts.py)
FAULT_KINDS = ("kill_rank", "kill_mpirun", "stop_term", "stop_usr1", "kill_tree", "disk_full",
               "kill_in_checkpoint", "corrupt_latest", "second_trainer", "fault_in_restart")
TMPFS_MB = 48
# Documented exits (docs/operations.md, "Exit codes"): what each fault may end the launcher with.
EXPECTED_EXITS = {"stop_term": {75}, "stop_usr1": {75}, "corrupt_latest": {75}, "kill_tree": {-9},
                  "disk_full": {2, 4}}  # 2: the run lock cannot be written at a start


class Soak(EndChecks):
    KINDS = FAULT_KINDS

    def __init__(self, args, root, data, reference, seed, use_tmpfs):
        self.args = args
        self.seed = seed
        self.rng = random.Random(seed)
        self.reference = reference
        self.use_tmpfs = use_tmpfs
        kinds = [k for k in (args.kinds.split(",") if args.kinds else self.KINDS) if use_tmpfs or k != "disk_full"]
        unknown = [k for k in kinds if not hasattr(self, "fault_" + k)]
        if unknown:
            raise SystemExit("soak.py: unknown fault kinds %s: choose from %s" % (unknown, ",".join(self.KINDS)))
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
        self.data = data
        self.run = None
        self.events = []  # one dict per fault: kind, time, step, what happened
        self.problems = []

    def new_run(self, name):
        return Run(self.root, self.data, self.args.steps, name, self.disk)

    def close(self):
        if self.use_tmpfs:
            subprocess.run(["umount", "-l", self.disk], check=False)

    # The launcher ended: a documented end of the fault that caused it is started again.
    def handle_end(self, blame):
        code = self.run.job.returncode
        finished = code == 0 and self.run.last_step() >= self.run.steps
        if not self.run.handled:
            expected = finished or (code in EXPECTED_EXITS.get(blame["kind"], set()) if blame else False) \
                or self.ended_by_full_disk(code)
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

    def ended_by_full_disk(self, code):
        """A full disk's documented end (exit 4 with "No space left on device" in this start's
        output), whichever fault came after it: a checkpoint that met the disk can end the job a
        moment after the disk has room again, as the next fault starts."""
        since_start = self.run.output().rsplit("=== soak: launcher started", 1)[-1]
        return code in EXPECTED_EXITS["disk_full"] and "No space left on device" in since_start

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
        """{rank: pid} once every rank of the running job has started (on fewer hosts after a
        lost one, fewer ranks)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            ranks, world = ranks_and_world(self.run.marker())
            if ranks and len(ranks) == world:
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
            self.run = self.new_run("run-%d" % totals["rounds"])
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
    p.add_argument("--hosts", action="store_true",
                   help="on the two-host bed (root), with the faults between hosts: %s (tests/soak/soakhosts.py)"
                   % ",".join(HOST_KINDS))
    args = p.parse_args(argv)
    seeds = [random.SystemRandom().randrange(1 << 31) if s == "random" else int(s) for s in (args.seed or ["random"])]
    root = args.workdir or tempfile.mkdtemp(prefix="megabatch-soak-")
    os.makedirs(root, exist_ok=True)
    use_tmpfs = can_mount_tmpfs(root)
    if not use_tmpfs:
        log("cannot mount a tmpfs here (not root?): the disk_full fault is left out")
    log("seeds %s; %d faults each; %d steps; work in %s" % (seeds, args.faults, args.steps, root))
    ok, hosts = True, None
    try:
        data = os.path.join(root, "demo.h5")
        synth_demo_data(data)
        if args.hosts:
            import soakhosts
            hosts = soakhosts.open_bed(root)
            reference = Reference(soakhosts.HostRun(hosts, root, data, args.steps, "uninterrupted"))
        else:
            reference = Reference(Run(root, data, args.steps, "uninterrupted"))
        summaries = []
        for seed in seeds:
            soak = soakhosts.HostSoak(hosts, args, root, data, reference, seed, use_tmpfs) if hosts else \
                Soak(args, root, data, reference, seed, use_tmpfs)
            try:
                ok = soak.soak() and ok
                summaries.append(soak.summary)
            finally:
                soak.close()
        for line in summaries:
            log(line)
    finally:
        if hosts:
            hosts.close()
            if hosts.leftovers():
                log("PROBLEM: the two-host bed left %s" % hosts.leftovers())
                ok = False
        if not args.workdir:
            shutil.rmtree(root, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
