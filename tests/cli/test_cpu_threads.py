"""CPU threads on a busy machine (Note [CPU threads on a busy machine] in src/dist/CpuThreads.h),
on the real system: the OpenMP runtime gets megabatch's short spin (libgomp's own OMP_DISPLAY_ENV
report shows it) unless the user chose a wait policy or one thread is expected; the thread count follows the affinity mask
(taskset), a cgroup CPU quota (where this machine lets the test make a cgroup), and the cores
other processes keep busy at start; eval and predict choose as train does; and a run whose cores
are taken mid-run says so once. The rules themselves are unit-tested in
tests/unit/CpuThreadsTest.cpp.

CTest runs every test with OMP_NUM_THREADS=1, which would win over the choice; this file removes it.
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import mbtest  # noqa: E402

os.environ.pop("OMP_NUM_THREADS", None)
for _name in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME", "MEGABATCH_OMP_WAIT"):
    os.environ.pop(_name, None)

CPUS = len(os.sched_getaffinity(0))
QUICK = ["run.resume=never", "train.eval_every=0", "run.checkpoint_every=0", "train.precision=fp32",
         "model.hidden=8", "model.head_hidden=8", "run.progress=lines"]
STEP_LINE = re.compile(r"info: step \d+/\d+ ")
BURNER = [sys.executable, "-c", "while True: pass"]


def burners(count, cpu=None):
    pin = ["taskset", "-c", str(cpu)] if cpu is not None else []
    return [subprocess.Popen(pin + BURNER) for _ in range(count)]


def stop(processes):
    for p in processes:
        p.kill()
    for p in processes:
        p.wait()


def thread_line(output):
    lines = [line for line in output.splitlines() if "CPU thread(s) per rank, from " in line]
    if len(lines) != 1:
        raise AssertionError("expected one thread-choice line, got %r in:\n%s" % (lines, output))
    return lines[0]


class CpuThreadsTest(mbtest.SeriesTrainingTestCase):
    SERIES_ARGS = ["--rows", "12000", "--features", "2", "--streams", "m1:1,m5:5,h1:60", "--seed", "3"]

    def train(self, run_dir, *overrides, prefix=(), env=None, steps=4):
        args = ["train", "--config", mbtest.config_path("demo.yaml"), "data.path=" + self.data,
                "run.dir=" + run_dir, "train.max_steps=%d" % steps, "run.log_every=2"] + QUICK
        cmd = list(prefix) + [mbtest.BIN] + mbtest.with_device(args + list(overrides))
        r = mbtest._run(cmd, 120, env, None)
        self.assertEqual(r.returncode, 0, repr(r))
        return r

    def test_openmp_gets_a_short_spin_unless_the_user_chose_a_policy(self):
        r = self.train(self.path("spin"), "train.threads=2", env={"OMP_DISPLAY_ENV": "verbose"})
        self.assertIn("GOMP_SPINCOUNT = '10000'", r.output, "libgomp's own report of its settings")
        self.assertIn("idle threads wait with a short spin (GOMP_SPINCOUNT=10000, KMP_BLOCKTIME=1",
                      thread_line(r.output))
        r = self.train(self.path("passive"), "train.threads=2",
                       env={"OMP_DISPLAY_ENV": "verbose", "OMP_WAIT_POLICY": "passive"})
        self.assertIn("OMP_WAIT_POLICY = 'PASSIVE'", r.output)
        self.assertNotIn("GOMP_SPINCOUNT = '10000'", r.output, "the user's policy is left alone")
        self.assertIn("idle threads wait with yours: OMP_WAIT_POLICY=passive", thread_line(r.output))
        r = self.train(self.path("count"), "train.threads=2", env={"GOMP_SPINCOUNT": "777"})
        self.assertIn("yours: GOMP_SPINCOUNT=777", thread_line(r.output))
        # One thread expected: no re-execution (it costs a start-up), and the line says why.
        r = self.train(self.path("one"), "train.threads=2",
                       env={"OMP_DISPLAY_ENV": "verbose", "OMP_NUM_THREADS": "1"})
        self.assertIn("GOMP_SPINCOUNT = '300000'", r.output)
        self.assertIn("sets a short spin only when it expects more than one thread, and started "
                      "with OMP_NUM_THREADS=1", thread_line(r.output))

    @unittest.skipIf(CPUS < 2 or not shutil.which("taskset"), "needs taskset and 2 or more CPUs")
    def test_train_eval_and_predict_use_the_cpus_of_their_affinity_mask(self):
        run = self.path("bound")
        r = self.train(run, prefix=["taskset", "-c", "0"])
        self.assertRegex(thread_line(r.output),
                         r"1 CPU thread\(s\) per rank, from the CPUs this rank is bound to "
                         r"\(affinity 1 of \d+ CPUs")
        for command in (["eval", "--checkpoint", run, "--split", "val"],
                        ["predict", "--checkpoint", run, "--data", self.data, "--split", "test",
                         "--out", self.path("p.h5")]):
            r = mbtest._run(["taskset", "-c", "0", mbtest.BIN] + command, 120, None, None)
            self.assertEqual(r.returncode, 0, repr(r))
            self.assertIn("1 CPU thread(s) per rank, from the CPUs this rank is bound to",
                          thread_line(r.output), command[0])

    @unittest.skipIf(CPUS < 2, "needs 2 or more CPUs")
    def test_cores_other_processes_keep_busy_at_start_are_left_to_them(self):
        busy = burners(CPUS)
        try:
            time.sleep(0.5)
            r = self.train(self.path("busy"))
        finally:
            stop(busy)
        line = thread_line(r.output)
        self.assertIn("1 CPU thread(s) per rank", line)
        self.assertRegex(line, r"less \d+ that other processes keep busy right now")

    @unittest.skipIf(CPUS < 2, "needs 2 or more CPUs")
    def test_a_cgroup_cpu_quota_caps_the_threads(self):
        group = make_cgroup_with_one_cpu()
        if group is None:
            self.skipTest("this machine lets the test make no cgroup with a CPU quota "
                          "(needs root and a writable cpu controller)")
        procs, directory = group
        try:
            shell = 'echo $$ > "%s" && exec "$@"' % procs
            r = self.train(self.path("quota"), prefix=["sh", "-c", shell, "sh"])
        finally:
            remove_cgroup(directory)
        line = thread_line(r.output)
        self.assertIn("1 CPU thread(s) per rank", line)
        self.assertIn("a cgroup CPU quota of 1 (%s" % directory, line)

    @unittest.skipIf(CPUS < 2 or not shutil.which("taskset"), "needs taskset and 2 or more CPUs")
    def test_a_run_whose_cores_are_taken_mid_run_says_so_once(self):
        run = self.path("contended")
        args = ["train", "--config", mbtest.config_path("demo.yaml"), "data.path=" + self.data,
                "run.dir=" + run, "train.max_steps=100000", "run.log_every=5",
                "train.threads=1"] + QUICK
        proc = subprocess.Popen(["taskset", "-c", "0", mbtest.BIN] + mbtest.with_device(args),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                universal_newlines=True, env=dict(mbtest.AUTO_IS_FP32, **os.environ))
        lines, busy, windows_after = [], [], None
        deadline = time.monotonic() + 90
        try:
            for line in proc.stdout:
                lines.append(line)
                if time.monotonic() > deadline:
                    break
                if not STEP_LINE.search(line):
                    continue
                windows = sum(bool(STEP_LINE.search(x)) for x in lines)
                if windows == 6 and not busy:
                    busy = burners(8, cpu=0)  # 9 threads on the run's one core
                if any("busy CPU: " in x for x in lines):
                    windows_after = (windows_after or 0) + 1
                    if windows_after > 4:
                        break
        finally:
            stop(busy)
            proc.send_signal(signal.SIGTERM)
            rest, _ = proc.communicate(timeout=60)
            lines.append(rest)
        output = "".join(lines)
        warnings = [x for x in output.splitlines() if "busy CPU: " in x]
        self.assertEqual(len(warnings), 1, output[-4000:])
        self.assertIn("other processes want these cores", warnings[0])
        self.assertIn("train.threads=1", warnings[0])
        self.assertRegex(warnings[0], r"steps take \d+\.\dx longer than this run's median")


def make_cgroup_with_one_cpu():
    """(the cgroup.procs file, the directory) of a new cgroup limited to one CPU, or None."""
    name = "megabatch-test-%d" % os.getpid()
    v1 = "/sys/fs/cgroup/cpu"
    candidates = []
    if os.path.exists(os.path.join(v1, "cpu.cfs_quota_us")):
        candidates.append(("v1", v1))
    if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
        candidates.append(("v2", "/sys/fs/cgroup"))
    for kind, top in candidates:
        directory = os.path.join(top, name)
        try:
            os.mkdir(directory)
            if kind == "v1":
                with open(os.path.join(directory, "cpu.cfs_period_us"), "w") as f:
                    f.write("100000")
                with open(os.path.join(directory, "cpu.cfs_quota_us"), "w") as f:
                    f.write("100000")
            else:
                with open(os.path.join(directory, "cpu.max"), "w") as f:
                    f.write("100000 100000")
            return os.path.join(directory, "cgroup.procs"), directory
        except OSError:
            remove_cgroup(directory)
    return None


def remove_cgroup(directory):
    for _ in range(50):  # the process may take a moment to leave it
        try:
            os.rmdir(directory)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.1)


if __name__ == "__main__":
    unittest.main()
