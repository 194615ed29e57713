"""Helpers for megabatch's Python test drivers (run by CTest with /usr/bin/python3).

The environment comes from tests/CMakeLists.txt: MEGABATCH_BIN (the binary under test),
MEGABATCH_SOURCE_DIR, MEGABATCH_MPIEXEC, and the OMPI_* variables that let mpirun run as root.

MEGABATCH_TEST_DEVICE=cpu (the default) or cuda picks the device of every run (Note [Test device]
in tests/support/Device.h): run() and mpirun() add train.device=<device> to each `train` and
`data check` given a --config, and under cuda, for more than one rank, dist.backend=mpi (every
rank shares the one GPU, and NCCL refuses two ranks on one GPU); `walk` too. A command line built by hand
adds with_device(args, np). An override the test gives itself (train.device=..., dist.backend=...)
is left alone. With cuda and no usable GPU, `megabatch train` exits 2 with "train.device = cuda,
but ..." and the reason (no GPU visible, a CPU build): the test fails, it never runs on the CPU.
"""
import json
import os
import subprocess
import tempfile
import time
import unittest

BIN = os.environ.get("MEGABATCH_BIN", "megabatch")
SOURCE_DIR = os.environ.get("MEGABATCH_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
MPIEXEC = os.environ.get("MEGABATCH_MPIEXEC", "mpirun")
PYTHON = os.environ.get("MB_PYTHON", "/usr/bin/python3")

DEVICE = os.environ.get("MEGABATCH_TEST_DEVICE", "") or "cpu"
if DEVICE not in ("cpu", "cuda"):
    raise SystemExit("MEGABATCH_TEST_DEVICE=%s: expected cpu or cuda" % DEVICE)
ON_CUDA = DEVICE == "cuda"

# Tolerance of comparisons between two training runs that must agree (W ranks against W' ranks,
# a resumed run against an uninterrupted one). On the CPU they agree to float32 rounding. On CUDA
# the trainer enables TF32 matmuls and cuDNN autotuning (src/train/precision/Precision.cpp), and cuBLAS and
# cuDNN pick kernels by shape (the per-rank batch differs with W) and may accumulate in another
# order, so after tens of AdamW steps two runs agree less closely than float32 rounding.
# rtol 1e-3 keeps the tests' power: a skipped or repeated batch changes that step's loss by several
# percent, and the weights after it by ~lr.
RUN_RTOL = 1e-3 if ON_CUDA else 1e-5
RUN_ATOL = 1e-5 if ON_CUDA else 1e-7


def device_overrides(np_=1, given=()):
    """Overrides that put a run of `np_` ranks on the test device, minus those `given` sets."""
    out = []
    if not any(a.startswith("train.device=") for a in given):
        out.append("train.device=" + DEVICE)
    if ON_CUDA and np_ > 1 and not any(a.startswith("dist.backend=") for a in given):
        out.append("dist.backend=mpi")
    return out


def with_device(args, np_=1):
    """`args` (a megabatch command line after the binary) plus device_overrides when it runs
    `train`, `walk` or `data check` with a --config; any other command is returned unchanged."""
    args = list(args)
    runs = args[:1] in (["train"], ["walk"]) or args[:2] == ["data", "check"]
    if not runs or "--config" not in args:
        return args
    return args + device_overrides(np_, args)


class Result:
    def __init__(self, args, returncode, stdout, stderr, seconds=0.0):
        self.args = args
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        self.seconds = seconds  # wall time of the command

    @property
    def output(self):
        return self.stdout + self.stderr

    def __repr__(self):
        return "command: %s\nexit code: %s after %.1f s\n--- stdout ---\n%s\n--- stderr ---\n%s" % (
            " ".join(self.args), self.returncode, self.seconds, self.stdout[-4000:], self.stderr[-4000:])


def run(args, timeout=120, env=None, cwd=None):
    """Runs megabatch with `args` (a list) as a plain process, on the test device."""
    cmd = [BIN] + with_device(args)
    return _run(cmd, timeout, env, cwd)


def mpirun(np, args, timeout=300, env=None, cwd=None, extra=()):
    """Runs `mpirun -np NP megabatch ARGS`, on the test device."""
    cmd = [MPIEXEC, "-np", str(np), "--oversubscribe"] + list(extra) + [BIN] + with_device(args, np)
    return _run(cmd, timeout, env, cwd)


# train.precision: auto measures bf16 against fp32 on a CPU with bf16 units (Note [CPU auto
# precision]), so two runs of one config could differ in precision, and a run compared bit for bit
# with another would depend on a timing. Tests therefore see bf16 measure as slow as fp32 (auto
# keeps fp32) unless they set MEGABATCH_FAULT_CPU_BF16_RATIO themselves
# (tests/train/test_precision_fit.py does).
AUTO_IS_FP32 = {"MEGABATCH_FAULT_CPU_BF16_RATIO": "1"}


def _run(cmd, timeout, env, cwd):
    full_env = dict(AUTO_IS_FP32, **os.environ)
    if env:
        full_env.update(env)
    start = time.monotonic()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout,
                          env=full_env, cwd=cwd, universal_newlines=True)
    return Result(cmd, proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start)


def run_on_terminal(command, timeout=300, env=None, expect=0):
    """Runs `command` (a full argv) with stdout and stderr on a pseudo-terminal, as a person at a
    shell would see it; returns what the terminal received (str). Fails (AssertionError) unless
    the exit code is `expect`."""
    import pty
    master, slave = pty.openpty()
    full_env = dict(os.environ, OMP_NUM_THREADS="1", TERM="xterm")
    if env:
        full_env.update(env)
    proc = subprocess.Popen(command, stdout=slave, stderr=slave, stdin=subprocess.DEVNULL, env=full_env)
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: every writer closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    code = proc.wait(timeout=timeout)
    out = b"".join(chunks).decode(errors="replace")
    if code != expect:
        raise AssertionError("%s exited %d (expected %d):\n%s" % (" ".join(command), code, expect, out[-4000:]))
    return out


def crash_signs(output):
    """Lines showing that a process crashed (a signal, a core dump, an uncaught exception, a
    logger that failed) rather than exiting with an error of its own."""
    patterns = ("core dumped", "Segmentation fault", "exited on signal", "terminate called",
                "Aborted", "*** Process received signal", "LOG ERROR")
    return [line for line in output.splitlines() if any(p in line for p in patterns)]


def config_path(name):
    return os.path.join(SOURCE_DIR, "configs", name)


# --- reading a run directory -----------------------------------------------------------------

def read_metrics(run_dir):
    """Every record of RUN_DIR/metrics.jsonl, in order."""
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def train_losses(run_dir):
    """{step: loss} of the train records."""
    return {r["step"]: r["loss"] for r in read_metrics(run_dir) if r["event"] == "train"}


def checkpoint_params(path):
    """{name: array} of a checkpoint's /model group."""
    import h5py  # only the tests that read checkpoints need it
    with h5py.File(path, "r") as f:
        return {name: f["model"][name][()] for name in f["model"]}


class TempDirTestCase(unittest.TestCase):
    """A test case with a fresh temporary directory in self.tmp."""

    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="mbtest-")
        self.tmp = self._tmp.name

    def tearDown(self):
        self._tmp.cleanup()

    def path(self, *parts):
        return os.path.join(self.tmp, *parts)

    def write(self, name, text):
        p = self.path(name)
        with open(p, "w") as f:
            f.write(text)
        return p

    def assertExit(self, result, code, *fragments):
        self.assertEqual(result.returncode, code, repr(result))
        for fragment in fragments:
            self.assertIn(fragment, result.output, repr(result))


class SeriesTrainingTestCase(TempDirTestCase):
    """TempDirTestCase plus one series file, made once per class in self.data, for end-to-end
    training tests: by default small and two-stream (m1, m5; 8000 rows, 3 features); a subclass
    sets SERIES_ARGS for another."""
    SERIES_ARGS = ["--rows", "8000", "--features", "3", "--streams", "m1:1,m5:5", "--seed", "7"]

    @classmethod
    def setUpClass(cls):
        cls._shared = tempfile.TemporaryDirectory(prefix="mbtrain-")
        cls.data = os.path.join(cls._shared.name, "series.h5")
        r = run(["data", "synth-series", "--out", cls.data] + cls.SERIES_ARGS)
        if r.returncode != 0:
            raise RuntimeError("could not make test data:\n%r" % r)

    @classmethod
    def tearDownClass(cls):
        cls._shared.cleanup()
