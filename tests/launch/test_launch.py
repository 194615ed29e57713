"""launch/ scripts as docs/operations.md documents them: one process (train-single.sh), mpirun -np 2
on one node (train-node.sh), and a hostfile naming localhost twice (train-multinode.sh), each
training the demo config; a SIGUSR1 to mpirun checkpoints, exits 75, and the rerun resumes.
The 2-rank runs must reach the same parameters as the 1-process run (same global batches).
Deliberately on the CPU (--cpu) whatever MEGABATCH_TEST_DEVICE says: these test the launchers'
binding, hostfile and signal handling; on GPUs the scripts run one rank per GPU over NCCL, which
one GPU cannot host for 2 ranks."""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import mbtest  # noqa: E402

LAUNCH = os.path.join(mbtest.SOURCE_DIR, "launch")
DEMO = mbtest.config_path("demo.yaml")
STEPS = 20


def synth_demo_data(path):
    """Demo-shaped series (the streams of configs/demo.yaml), small enough for tests."""
    r = mbtest.run(["data", "synth-series", "--out", path, "--rows", "20000", "--streams", "m1:1,m5:5,h1:60"],
                   timeout=300)
    if r.returncode != 0:
        raise RuntimeError("could not make the demo data:\n%r" % r)


def overrides(data, run_dir, steps=STEPS):
    return ["data.path=" + data, "run.dir=" + run_dir, "train.max_steps=%d" % steps, "run.log_every=1",
            "train.eval_every=1000", "run.checkpoint_every=0"]


def train_steps(run_dir):
    steps = []
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                if r.get("event") == "train":
                    steps.append(r["step"])
    return steps


def final_params(run_dir):
    ckpt = os.path.join(run_dir, "checkpoints")
    with open(os.path.join(ckpt, "latest")) as f:
        path = os.path.join(ckpt, f.read().strip())
    with h5py.File(path, "r") as f:
        return {name: f["model"][name][()] for name in f["model"]}


def script(name, args, timeout=600, env=None):
    full_env = dict(os.environ)
    full_env.update(env or {})
    cmd = [os.path.join(LAUNCH, name)] + list(args)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                       timeout=timeout, env=full_env)
    return mbtest.Result(cmd, p.returncode, p.stdout, "")


class LaunchTest(mbtest.TempDirTestCase):
    @classmethod
    def setUpClass(cls):
        cls._shared = tempfile.TemporaryDirectory(prefix="mblaunch-")
        cls.data = os.path.join(cls._shared.name, "demo.h5")
        synth_demo_data(cls.data)
        # The reference every launcher must reproduce: one plain process.
        cls.reference = os.path.join(cls._shared.name, "single")
        r = script("train-single.sh", ["--cpu", DEMO] + overrides(cls.data, cls.reference))
        if r.returncode != 0:
            raise RuntimeError("launch/train-single.sh failed:\n%r" % r)
        cls.single_output = r.output

    @classmethod
    def tearDownClass(cls):
        cls._shared.cleanup()

    def assertSameTraining(self, run_dir, output):
        self.assertEqual(train_steps(run_dir), list(range(1, STEPS + 1)), output[-3000:])
        ref, got = final_params(self.reference), final_params(run_dir)
        self.assertEqual(sorted(ref), sorted(got))
        for name in ref:
            np.testing.assert_allclose(got[name], ref[name], rtol=1e-4, atol=1e-6, err_msg=name)

    def test_help_and_usage_errors(self):
        for name in ("train-single.sh", "train-node.sh", "train-multinode.sh"):
            r = script(name, ["--help"])
            self.assertExit(r, 0, "Usage: launch/" + name, "key=value", "MEGABATCH_BIN")
            self.assertExit(script(name, ["--no-such-option", DEMO]), 2, "unknown option --no-such-option")
            self.assertExit(script(name, []), 2, "no CONFIG given")
        r = script("train-single.sh", [DEMO], env={"MEGABATCH_BIN": "/nonexistent/megabatch"})
        self.assertExit(r, 2, "MEGABATCH_BIN=/nonexistent/megabatch is not an executable file")
        self.assertExit(script("train-multinode.sh", [DEMO]), 2, "--hostfile is required")
        hosts = self.write("hosts", "localhost slots=2\n")
        self.assertExit(script("train-multinode.sh", ["--hostfile", hosts, "--max-restarts", "two", DEMO]), 2,
                        "--max-restarts two: expected a whole number of at least 0")
        self.assertExit(script("train-multinode.sh", ["--hostfile", hosts, "--min-hosts", "0", DEMO]), 2,
                        "--min-hosts 0: expected a whole number of at least 1")
        r = script("train-multinode.sh", ["--dry-run", "--hostfile", hosts, "--max-restarts", "3", "--scale-up", DEMO])
        self.assertExit(r, 0, "# restarts: up to 3 on the hosts that answer (at least 1), probes of 10 s every 10 s, "
                        "scale-up on")

    def test_dry_run_shows_binding_and_passes_overrides(self):
        r = script("train-node.sh", ["--dry-run", "-n", "2", "--cpus-per-rank", "1", "--cpu", DEMO, "optim.lr=0.5"])
        self.assertExit(r, 0, "OMP_NUM_THREADS=1", "-np 2", "train.device=cpu optim.lr=0.5")
        cores = int(subprocess.run(["bash", "-c", "source %s/common.sh; mb_count_cores" % LAUNCH],
                                   stdout=subprocess.PIPE, universal_newlines=True).stdout)
        if cores >= 2:
            self.assertIn("--map-by ppr:2:node:PE=1 --bind-to core", r.output)
        self.assertEqual("--allow-run-as-root" in r.output, os.getuid() == 0, r.output)
        hosts = self.write("hosts", "# two slots on this machine\nlocalhost\nlocalhost slots=1\n")
        r = script("train-multinode.sh", ["--dry-run", "--hostfile", hosts, "--net", "tcp", "--ifname", "lo", DEMO])
        self.assertExit(r, 0, "1 host(s), 2 slot(s), 2 rank(s)", "NCCL_IB_DISABLE", "--mca pml ob1",
                        "--mca btl_tcp_if_include lo", "-x NCCL_SOCKET_IFNAME")
        r = script("train-multinode.sh", ["--dry-run", "--hostfile", hosts, "--ib-hca", "mlx5_0,mlx5_1", DEMO])
        self.assertExit(r, 0, "NCCL_IB_HCA=mlx5_0,mlx5_1", "UCX_NET_DEVICES=mlx5_0:1,mlx5_1:1", "--mca pml ucx")
        # Open MPI's daemon keepalive from dist.timeout_s (issue 39): the default 300 s (which
        # --print-config writes as 3e+02) gives probes every 37 s; an override is read too; a
        # setting of the user's own in MB_MPIRUN_ARGS replaces it (Open MPI refuses one given twice).
        keepalive = "--mca oob_tcp_keepalive_time %d --mca oob_tcp_keepalive_intvl %d --mca oob_tcp_keepalive_probes 4"
        self.assertIn(keepalive % (37, 37), r.output)
        r = script("train-multinode.sh", ["--dry-run", "--hostfile", hosts, DEMO, "dist.timeout_s=80"])
        self.assertExit(r, 0, keepalive % (10, 10))
        r = script("train-multinode.sh", ["--dry-run", "--hostfile", hosts, DEMO],
                   env={"MB_MPIRUN_ARGS": "--mca oob_tcp_keepalive_time 60"})
        self.assertExit(r, 0, "--mca oob_tcp_keepalive_time 60")
        self.assertEqual(r.output.count("oob_tcp_keepalive"), 1, r.output)

    def test_single_process_runs_without_mpi(self):
        self.assertEqual(train_steps(self.reference), list(range(1, STEPS + 1)), self.single_output[-3000:])
        self.assertIn("[r0/1]", self.single_output)

    def test_node_two_ranks_match_single_process(self):
        run = self.path("node")
        r = script("train-node.sh", ["-n", "2", "--cpu", DEMO] + overrides(self.data, run))
        self.assertExit(r, 0, "[r0/2]")
        self.assertSameTraining(run, r.output)

    def test_hostfile_naming_localhost_twice(self):
        hosts = self.write("hosts", "localhost\nlocalhost\n")
        run = self.path("hostfile")
        r = script("train-multinode.sh", ["--hostfile", hosts, "--net", "tcp", "--cpu", DEMO] + overrides(self.data, run))
        self.assertExit(r, 0, "[r0/2]")
        self.assertSameTraining(run, r.output)

    def test_sigusr1_to_mpirun_checkpoints_and_rerun_resumes(self):
        run = self.path("stop")
        steps = 120
        args = [os.path.join(LAUNCH, "train-node.sh"), "-n", "2", "--cpu", DEMO] + overrides(self.data, run, steps)
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
        deadline = time.time() + 300
        while time.time() < deadline and proc.poll() is None:
            if os.path.exists(os.path.join(run, "metrics.jsonl")) and len(train_steps(run)) >= 3:
                break
            time.sleep(0.2)
        os.kill(proc.pid, signal.SIGUSR1)  # the script forwards it to mpirun
        out, _ = proc.communicate(timeout=300)
        self.assertEqual(proc.returncode, 75, out[-3000:])
        stopped = train_steps(run)[-1]
        self.assertLess(stopped, steps, out[-3000:])
        r = script("train-node.sh", args[1:])  # the same command again
        self.assertExit(r, 0, "resuming from")
        self.assertEqual(train_steps(run), list(range(1, steps + 1)))

    def start_node_launcher(self, run, steps, env=None):
        args = [os.path.join(LAUNCH, "train-node.sh"), "-n", "2", "--cpu", DEMO] + overrides(self.data, run, steps)
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                                env=dict(os.environ, **(env or {})))
        return args, proc

    def wait_until(self, proc, run, ready, what, timeout=300):
        deadline = time.time() + timeout
        while time.time() < deadline and proc.poll() is None:
            if ready():
                return
            time.sleep(0.2)
        proc.kill()
        subprocess.run(["pkill", "-KILL", "-f", "run.dir=" + run])  # mpirun runs in its own session
        self.fail("%s not within %d s:\n%s" % (what, timeout, proc.communicate()[0][-3000:]))

    def ranks_of(self, run):
        """The megabatch processes of `run` (not the launcher or mpirun, whose command lines name it too)."""
        found = subprocess.run(["ps", "-eo", "pid=,comm=,args="], stdout=subprocess.PIPE, universal_newlines=True)
        return [line.split()[0] for line in found.stdout.splitlines()
                if len(line.split()) > 2 and line.split()[1] == "megabatch" and "run.dir=" + run in line]

    def test_sigterm_to_the_node_launcher_checkpoints_and_exits_75(self):
        """Note [Stop signals in the launchers]: mpirun never sees the SIGTERM (it would kill its
        ranks and exit 1); the script turns it into SIGUSR1 and exits with the job's 75."""
        run = self.path("term")
        args, proc = self.start_node_launcher(run, 100000)
        metrics = os.path.join(run, "metrics.jsonl")
        self.wait_until(proc, run, lambda: os.path.exists(metrics) and len(train_steps(run)) >= 3, "3 steps")
        sent = time.monotonic()
        os.kill(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
        print("SIGTERM to train-node.sh: exit %d after %.2f s" % (proc.returncode, time.monotonic() - sent), flush=True)
        self.assertEqual(proc.returncode, 75, out[-3000:])
        self.assertIn("train-node.sh: SIGTERM", out)
        stopped = train_steps(run)[-1]
        with open(os.path.join(run, "checkpoints", "latest")) as f:
            self.assertEqual(f.read().strip(), "step-%08d.h5" % stopped, "the checkpoint is the last step's")
        self.assertEqual(self.ranks_of(run), [], "no rank outlives the job")
        r = script("train-node.sh", args[1:] + ["train.max_steps=%d" % (stopped + 2)])
        self.assertExit(r, 0, "resuming from")
        self.assertEqual(train_steps(run), list(range(1, stopped + 3)))

    def test_a_second_sigint_ends_the_job_at_once(self):
        """The first Ctrl-C asks for a checkpoint; one micro-batch takes 30 s here, so the second
        Ctrl-C is what ends the job, within seconds and without a checkpoint."""
        run = self.path("int")
        # The demo's step is one micro-batch per rank, slowed to 30 s: the first Ctrl-C is seen
        # only when it ends.
        _, proc = self.start_node_launcher(run, 100, env={"MEGABATCH_FAULT_SLOW_STEP": "*:30000"})
        self.wait_until(proc, run, lambda: len(self.ranks_of(run)) >= 2, "2 ranks")
        time.sleep(3)  # in the first step's micro-batch
        os.kill(proc.pid, signal.SIGINT)
        time.sleep(1)
        sent = time.monotonic()
        os.kill(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
        seconds = time.monotonic() - sent
        print("second SIGINT to train-node.sh: exit %d after %.2f s" % (proc.returncode, seconds), flush=True)
        self.assertEqual(proc.returncode, 130, out[-3000:])
        self.assertLess(seconds, 5, out[-3000:])
        self.assertIn("second SIGINT", out)
        deadline = time.time() + 5
        while time.time() < deadline and self.ranks_of(run):
            time.sleep(0.2)
        self.assertEqual(self.ranks_of(run), [], "no rank outlives the job")


class ContainerLauncherTest(mbtest.TempDirTestCase):
    """launch/container/megabatch-launch's Vertex AI mapping (the image's test stage runs it for
    real, docker/test-image.sh): AIP_CHECKPOINT_DIR=gs://B/P becomes run.dir=/gcs/B/P. A new job's
    prefix does not exist yet under the bucket's mount, so only the bucket must be mounted; the
    folders are made. MEGABATCH_BIN=/bin/echo prints what megabatch would be given."""

    def launch(self, uri, *args):
        env = {"AIP_CHECKPOINT_DIR": uri, "MEGABATCH_GCS_ROOT": self.path("gcs"), "MEGABATCH_BIN": "/bin/echo"}
        return script(os.path.join("container", "megabatch-launch"), ["-n", "1", "train"] + list(args), env=env)

    def test_checkpoint_prefix_of_a_new_job_is_made_under_the_mounted_bucket(self):
        os.makedirs(self.path("gcs", "bucket"))
        run_dir = self.path("gcs", "bucket", "job-1", "checkpoints")
        r = self.launch("gs://bucket/job-1/checkpoints/", "--config", DEMO)
        self.assertExit(r, 0, "-> run.dir=" + run_dir, "train --config %s run.dir=%s" % (DEMO, run_dir))
        self.assertTrue(os.path.isdir(run_dir), r.output)

    def test_unmounted_bucket_names_the_mount(self):
        r = self.launch("gs://no-such-bucket/job-1/checkpoints", "--config", DEMO)
        self.assertExit(r, 2, "bucket no-such-bucket, which is not mounted at " + self.path("gcs", "no-such-bucket"),
                        "MEGABATCH_GCS_ROOT")

    def test_run_dir_given_wins(self):
        os.makedirs(self.path("gcs", "bucket"))
        r = self.launch("gs://bucket/job-1/checkpoints", "run.dir=" + self.path("mine"))
        self.assertExit(r, 0, "train run.dir=" + self.path("mine"))
        self.assertNotIn("-> run.dir", r.output)


if __name__ == "__main__":
    unittest.main(verbosity=2)
