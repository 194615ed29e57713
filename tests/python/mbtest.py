"""Helpers for megabatch's Python test drivers (run by CTest with /usr/bin/python3).

The environment comes from tests/CMakeLists.txt: MEGABATCH_BIN (the binary under test),
MEGABATCH_SOURCE_DIR, MEGABATCH_MPIEXEC, and the OMPI_* variables that let mpirun run as root.
"""
import os
import subprocess
import tempfile
import time
import unittest

BIN = os.environ.get("MEGABATCH_BIN", "megabatch")
SOURCE_DIR = os.environ.get("MEGABATCH_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
MPIEXEC = os.environ.get("MEGABATCH_MPIEXEC", "mpirun")
PYTHON = os.environ.get("MB_PYTHON", "/usr/bin/python3")


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
    """Runs megabatch with `args` (a list) as a plain process."""
    cmd = [BIN] + list(args)
    return _run(cmd, timeout, env, cwd)


def mpirun(np, args, timeout=300, env=None, cwd=None, extra=()):
    """Runs `mpirun -np NP megabatch ARGS`."""
    cmd = [MPIEXEC, "-np", str(np), "--oversubscribe"] + list(extra) + [BIN] + list(args)
    return _run(cmd, timeout, env, cwd)


def _run(cmd, timeout, env, cwd):
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    start = time.monotonic()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout,
                          env=full_env, cwd=cwd, universal_newlines=True)
    return Result(cmd, proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start)


def crash_signs(output):
    """Lines showing that a process crashed (a signal, a core dump, an uncaught exception, a
    logger that failed) rather than exiting with an error of its own."""
    patterns = ("core dumped", "Segmentation fault", "exited on signal", "terminate called",
                "Aborted", "*** Process received signal", "LOG ERROR")
    return [line for line in output.splitlines() if any(p in line for p in patterns)]


def config_path(name):
    return os.path.join(SOURCE_DIR, "configs", name)


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
