"""The fault soak's toolkit (tests/soak/soak.py): the processes of a run, a run directory trained
by the launcher and started again when it ends, and the uninterrupted run it is compared with."""
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "launch"))
_BUILT = os.path.join(HERE, "..", "..", "build", "megabatch")
if "MEGABATCH_BIN" not in os.environ and os.path.exists(_BUILT):
    os.environ["MEGABATCH_BIN"] = os.path.abspath(_BUILT)  # by hand, from a checkout with a build
import mbtest  # noqa: E402
from test_launch import DEMO, LAUNCH  # noqa: E402

RANKS = 2
CHECKPOINT_EVERY = 10
LOG_EVERY = 3
EVAL_EVERY = 40
SLOW_STEP_MS = 40
CHECKPOINT_WRITE_MS = 60  # the window kill_in_checkpoint aims at


def log(text):
    print("[soak %s] %s" % (time.strftime("%H:%M:%S"), text), flush=True)


# --- processes ------------------------------------------------------------------------------

def process_table():
    """{pid: (ppid, argv)} of every process now."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as f:
                stat = f.read()
            with open("/proc/%s/cmdline" % name, "rb") as f:
                argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
        except OSError:
            continue
        ppid = int(stat[stat.rfind(")") + 2:].split()[1])
        table[int(name)] = (ppid, argv)
    return table


def of_run(marker, table=None):
    """{pid: argv} of the processes whose command line names the run (its run.dir)."""
    table = table if table is not None else process_table()
    return {pid: argv for pid, (_, argv) in table.items() if any(marker in a for a in argv)}


def rank_pids(marker):
    """{rank: pid} of the run's megabatch trainer processes (their OMPI_COMM_WORLD_RANK)."""
    return ranks_and_world(marker)[0]


def ranks_and_world(marker):
    """({rank: pid}, the largest OMPI_COMM_WORLD_SIZE among them) of the run's trainers."""
    ranks, world = {}, 0
    for pid, argv in of_run(marker).items():
        if not argv or os.path.basename(argv[0]) != "megabatch" or "train" not in argv:
            continue
        try:
            with open("/proc/%d/environ" % pid, "rb") as f:
                env = dict(e.split(b"=", 1) for e in f.read().split(b"\0") if b"=" in e)
        except OSError:
            continue
        rank = env.get(b"OMPI_COMM_WORLD_RANK")
        if rank is not None:
            ranks[int(rank)] = pid
            world = max(world, int(env.get(b"OMPI_COMM_WORLD_SIZE", b"0")))
    return ranks, world


def mpirun_pids(marker):
    return [pid for pid, argv in of_run(marker).items()
            if argv and os.path.basename(argv[0]) in ("mpirun", "orterun", "mpiexec")]


def descendants(root):
    table = process_table()
    children = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        for child in children.get(pid, []):
            out.append(child)
            todo.append(child)
    return out


def kill(pid, sig=signal.SIGKILL):
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False


# --- the run ----------------------------------------------------------------------------------

class SoakStuck(Exception):
    pass


class Run:
    """A run directory trained by the launcher, started again (as a requeue would) when it ends."""

    def __init__(self, root, data, steps, name, disk=None):
        self.root = root
        self.data = data
        self.steps = steps
        self.dir = os.path.join(disk or root, name)
        self.log_path = os.path.join(root, name + ".log")  # off the run's disk: kept
        self.hostfile = os.path.join(root, "hosts")
        with open(self.hostfile, "w") as f:
            f.write("localhost slots=%d\n" % RANKS)
        self.job = None
        self.exits = []
        self.fruitless = 0  # starts in a row that took no step
        self.step_at_last_start = -1  # (exit code, what the driver blamed it on)

    def overrides(self):
        return ["data.path=" + self.data, "run.dir=" + self.dir, "train.max_steps=%d" % self.steps,
                "run.log_every=%d" % LOG_EVERY, "run.checkpoint_every=%d" % CHECKPOINT_EVERY,
                "train.eval_every=%d" % EVAL_EVERY, "train.precision=fp32", "dist.timeout_s=5",
                "run.progress=lines", "run.keep_last=3"]

    def environment(self):
        env = dict(os.environ, MEGABATCH_FAULT_SLOW_STEP="*:%d" % SLOW_STEP_MS,
                   MEGABATCH_FAULT_CHECKPOINT_WRITE_MS=str(CHECKPOINT_WRITE_MS), OMP_NUM_THREADS="1")
        env.pop("MEGABATCH_RESTART", None)
        return env

    def command(self):
        return [os.path.join(LAUNCH, "train-multinode.sh"), "--hostfile", self.hostfile, "--net", "tcp", "--cpu",
                "--max-restarts", "1000", "--probe-timeout", "2", DEMO] + self.overrides()

    def start(self, why):
        with open(self.log_path, "a") as f:
            f.write("\n=== soak: launcher started (%s) ===\n" % why)
            f.flush()
            self.job = subprocess.Popen(self.command(), stdout=f, stderr=subprocess.STDOUT, env=self.environment(),
                                        start_new_session=True)
        self.handled = False

    def running(self):
        return self.job is not None and self.job.poll() is None

    def wait(self, timeout):
        try:
            return self.job.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def output(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def last_step(self):
        try:
            steps = [r["step"] for r in mbtest.read_metrics(self.dir) if r.get("event") == "train"]
        except (OSError, ValueError):
            return 0
        return max(steps) if steps else 0

    def marker(self):
        return "run.dir=" + self.dir


class Reference:
    """The uninterrupted run, under the same launcher with the same slow steps: its results and
    its wall time."""

    def __init__(self, run):
        self.run = run
        self.dir = self.run.dir
        steps = run.steps
        started = time.time()
        self.run.start("the uninterrupted run")
        code = self.run.wait(3600)
        self.wall = time.time() - started
        if code != 0:
            raise RuntimeError("the uninterrupted run failed (exit %s):\n%s" % (code, self.run.output()[-4000:]))
        log("the uninterrupted run: %d steps in %.1f s" % (steps, self.wall))


def can_mount_tmpfs(root):
    probe = tempfile.mkdtemp(dir=root)
    ok = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "probe", probe], stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL).returncode == 0
    if ok:
        subprocess.run(["umount", probe], check=False)
    os.rmdir(probe)
    return ok
