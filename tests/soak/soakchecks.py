"""The fault soak's end checks (tests/soak/soak.py): what must hold when a round of faults has
ended, each with a figure, against the uninterrupted run (docs/reliability.md, "The fault
soak")."""
import glob
import os
import re
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "train"))
from soakkit import CHECKPOINT_EVERY, RANKS, log, of_run  # noqa: E402
import mbtest  # noqa: E402

import numpy as np  # noqa: E402

PER_START = ("memory_plan/", "restart/", "baseline_")
PARAMS_RTOL, PARAMS_ATOL = 1e-4, 1e-6  # after part of a run on fewer ranks (docs/reliability.md)


class EndChecks:
    """Mixed into Soak: self.run (soakkit.Run), self.reference, self.events, self.problems,
    self.wall."""

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

    def fewer_ranks(self):
        """Whether part of the round trained on fewer ranks (a restart after a lost host): then
        reductions ran in another order, and the results are compared to the documented
        tolerance (losses to RUN_RTOL, parameters to 1e-4; docs/reliability.md), not bitwise."""
        return any(r.get("ranks_after", RANKS) < RANKS for r in mbtest.read_metrics(self.run.dir)
                   if r.get("event") == "restart")

    def check_parameters(self, run, ref):
        name = "step-%08d.h5" % self.run.steps
        try:
            got = mbtest.checkpoint_params(os.path.join(run, "checkpoints", name))
        except OSError as e:
            self.problems.append("no final checkpoint: %s" % e)
            return "parameters: no final checkpoint"
        want = mbtest.checkpoint_params(os.path.join(ref, "checkpoints", name))
        tolerant = self.fewer_ranks()

        def same(k):
            if k not in got or got[k].shape != want[k].shape:
                return False
            if tolerant:
                return np.allclose(got[k], want[k], rtol=PARAMS_RTOL, atol=PARAMS_ATOL)
            return np.array_equal(got[k], want[k])
        differ = [k for k in want if not same(k)]
        worst = max((float(np.max(np.abs(got[k] - want[k]))) for k in want
                     if k in got and got[k].shape == want[k].shape), default=0.0)
        how = "within rtol %g, atol %g (part of it trained on fewer ranks)" % (PARAMS_RTOL, PARAMS_ATOL) \
            if tolerant else "bitwise"
        if differ or set(got) != set(want):
            self.problems.append("parameters differ from the uninterrupted run's (%s): %s (max |diff| %g)"
                                 % (how, differ, worst))
        return "parameters: %d of %d tensors equal to the uninterrupted run's, %s; max |diff| %g" % (
            len(want) - len(differ), len(want), how, worst)

    def check_metrics(self, run, ref):
        def records(d, kind):
            return [(r["step"], r["loss"]) for r in mbtest.read_metrics(d) if r.get("event") == kind]
        tolerant = self.fewer_ranks()

        def same(got, want):
            if [s for s, _ in got] != [s for s, _ in want]:
                return False
            if tolerant:
                return np.allclose([l for _, l in got], [l for _, l in want], rtol=mbtest.RUN_RTOL, atol=0)
            return got == want
        notes = []
        for kind in ("train", "eval"):
            got, want = records(run, kind), records(ref, kind)
            if not same(got, want):
                steps = [s for s, _ in got]
                dup = sorted({s for s in steps if steps.count(s) > 1})
                wrong = [(s, l, dict(want).get(s)) for s, l in got if dict(want).get(s) != l][:3]
                self.problems.append("metrics.jsonl %s records differ from the uninterrupted run's: %d against %d, "
                                     "repeated steps %s, first differing (step, loss, want) %s"
                                     % (kind, len(got), len(want), dup[:10], wrong))
            notes.append("%d %s records" % (len(got), kind))
        how = "losses within rtol %g" % mbtest.RUN_RTOL if tolerant else "same losses"
        return "metrics.jsonl: %s, equal to the uninterrupted run's (steps once, in order, %s)" % (
            " and ".join(notes), how)

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

