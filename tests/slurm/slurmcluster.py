"""A real one-node SLURM cluster on localhost, for tests: munged, slurmctld and slurmd run as
plain child processes (no systemd) with every file in a private directory.

    with SlurmCluster(tmpdir, cpus=2) as cluster:
        job = cluster.sbatch(["slurm/train-cpu.sbatch", "configs/demo.yaml"], cwd=...)
        cluster.wait_for(job, "COMPLETED")

Container notes (docs/operations.md "Testing SLURM in a container"): proctrack/linuxproc and
task/none need no cgroups; SlurmdParameters=config_overrides lets the node declare the CPUs
the test needs whatever the hardware says; AuthInfo=cred_expire sets the delay before a
requeued job may start again (cred_expire + 1 s; 120 s by default).
"""
import os
import socket
import subprocess
import time

SETUP = ["bash", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "setup.sh"), "--tests"]
DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "scontrol", "scancel", "sinfo", "srun")


class ClusterError(RuntimeError):
    """The cluster could not be installed or started; the message says why."""


def _find(name):
    for d in (os.environ.get("PATH", "").split(os.pathsep) + ["/usr/sbin", "/sbin", "/usr/bin"]):
        path = os.path.join(d, name)
        if d and os.access(path, os.X_OK):
            return path
    return None


def ensure_installed():
    """Installs Debian's slurmctld, slurmd, slurm-client and munge (scripts/setup.sh --tests)
    when one of their programs is missing."""
    missing = [n for n in DAEMONS + CLIENTS if _find(n) is None]
    if not missing:
        return
    proc = subprocess.run(SETUP, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    still = [n for n in DAEMONS + CLIENTS if _find(n) is None]
    if proc.returncode != 0 or still:
        raise ClusterError("SLURM is not installed (missing %s) and %s failed (exit %d):\n%s"
                           % (", ".join(still or missing), " ".join(SETUP), proc.returncode, proc.stdout[-3000:]))


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SlurmCluster:
    def __init__(self, root, cpus=2, cred_expire=10, kill_wait=30):
        self.root = root
        self.cpus = cpus
        self.cred_expire = cred_expire
        self.kill_wait = kill_wait
        self.conf = os.path.join(root, "etc", "slurm.conf")
        self.env = dict(os.environ, SLURM_CONF=self.conf)
        self.procs = {}

    # -- lifecycle --------------------------------------------------------------------------
    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()

    def start(self):
        ensure_installed()
        for d in ("etc", "log", "state", "spool", "munge-key", "run"):
            os.makedirs(os.path.join(self.root, d), exist_ok=True)
        # munged insists: key readable by its owner only; socket directory searchable by all.
        os.chmod(os.path.join(self.root, "munge-key"), 0o700)
        os.chmod(os.path.join(self.root, "run"), 0o755)
        os.chmod(self.root, 0o755)
        path = self.root
        while path != "/":
            path = os.path.dirname(path)
            if not os.stat(path).st_mode & 0o001:
                raise ClusterError("munged needs every directory above its socket searchable by all, "
                                   "and %s is not (chmod o+x it, or put the cluster elsewhere)" % path)
        key = os.path.join(self.root, "munge-key", "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)
        self.munge_socket = os.path.join(self.root, "run", "munge.socket")
        self._spawn("munged", [_find("munged"), "--foreground", "--socket=" + self.munge_socket,
                               "--key-file=" + key, "--log-file=" + self._log("munged"),
                               "--pid-file=" + os.path.join(self.root, "run", "munged.pid"),
                               "--seed-file=" + os.path.join(self.root, "munge-key", "munged.seed")])
        self._wait(lambda: os.path.exists(self.munge_socket), 20, "munged did not create its socket")
        self.node = "mbnode"
        os.makedirs(os.path.join(self.root, "spool", self.node), exist_ok=True)
        with open(self.conf, "w") as f:
            f.write(self._slurm_conf())
        self._spawn("slurmctld", [_find("slurmctld"), "-D", "-f", self.conf])
        self._wait(lambda: self._run(["scontrol", "ping"]).returncode == 0, 30, "slurmctld does not answer scontrol ping")
        self._spawn("slurmd", [_find("slurmd"), "-D", "-f", self.conf, "-N", self.node])
        self._wait(lambda: self._run(["sinfo", "-h", "-n", self.node, "-o", "%T"]).stdout.strip() == "idle", 60,
                   "node %s did not become idle" % self.node)

    def stop(self):
        """Cancels every job, then ends the daemons this object started (SIGTERM, then SIGKILL)."""
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            self._run(["scancel", "--full", "--signal=KILL", "--user=" + str(os.getuid())])
            self._run(["scancel", "--user=" + str(os.getuid())])
            deadline = time.time() + 20
            while time.time() < deadline and self._run(["squeue", "-h"]).stdout.strip():
                time.sleep(0.5)
        for name in reversed(DAEMONS):
            proc = self.procs.pop(name, None)
            if proc is None or proc.poll() is not None:
                continue
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)

    # -- jobs -------------------------------------------------------------------------------
    def sbatch(self, args, cwd, env=None):
        full_env = dict(self.env)
        full_env.update(env or {})
        r = subprocess.run(["sbatch", "--parsable"] + list(args), cwd=cwd, env=full_env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, universal_newlines=True, timeout=60)
        if r.returncode != 0:
            raise AssertionError("sbatch %s failed (exit %d): %s" % (" ".join(args), r.returncode, r.stdout))
        return r.stdout.strip().split(";")[0]

    def job(self, job_id):
        """`scontrol show job` as a dict (JobState, Restarts, ExitCode, ...); {} once forgotten."""
        r = self._run(["scontrol", "-o", "show", "job", job_id])
        fields = {}
        for word in r.stdout.split():
            if "=" in word:
                k, v = word.split("=", 1)
                fields.setdefault(k, v)
        return fields

    def wait_for(self, job_id, states, timeout, poll=0.5):
        """Waits until the job is in one of `states`; returns its fields."""
        states = (states,) if isinstance(states, str) else tuple(states)
        deadline = time.time() + timeout
        last = {}
        while time.time() < deadline:
            last = self.job(job_id)
            if last.get("JobState") in states:
                return last
            time.sleep(poll)
        raise AssertionError("job %s not %s within %d s; last: %s\n%s" % (job_id, "/".join(states), timeout,
                                                                         last, self.logs()))

    def scancel(self, *args):
        r = self._run(["scancel"] + list(args))
        if r.returncode != 0:
            raise AssertionError("scancel %s failed: %s" % (" ".join(args), r.stdout + r.stderr))

    def logs(self, lines=25):
        out = []
        for name in DAEMONS:
            path = self._log(name)
            if os.path.exists(path):
                with open(path, errors="replace") as f:
                    tail = f.readlines()[-lines:]
                out.append("--- %s (last %d lines) ---\n%s" % (path, len(tail), "".join(tail)))
        return "\n".join(out)

    # -- internals --------------------------------------------------------------------------
    def _slurm_conf(self):
        r = self.root
        return "\n".join([
            "ClusterName=mbtest",
            "SlurmctldHost=localhost(127.0.0.1)",
            "SlurmctldPort=%d" % _free_port(),
            "SlurmdPort=%d" % _free_port(),
            "SlurmUser=%s" % _user(),
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            "AuthInfo=socket=%s,cred_expire=%d" % (self.munge_socket, self.cred_expire),
            "StateSaveLocation=%s/state" % r,
            "SlurmdSpoolDir=%s/spool/%%n" % r,
            "SlurmctldPidFile=%s/run/slurmctld.pid" % r,
            "SlurmdPidFile=%s/run/slurmd.pid" % r,
            "SlurmctldLogFile=%s" % self._log("slurmctld"),
            "SlurmdLogFile=%s" % self._log("slurmd"),
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            # No cgroups in a container: track processes by parent pid, bind nothing.
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "SchedulerType=sched/builtin",
            # Start a requeued job as soon as it is eligible, not at the next 60 s pass.
            "SchedulerParameters=sched_interval=1",
            "MpiDefault=none",
            "ReturnToService=2",
            "SlurmdParameters=config_overrides",
            "KillWait=%d" % self.kill_wait,
            "MinJobAge=600",
            "NodeName=%s NodeHostname=%s NodeAddr=127.0.0.1 CPUs=%d RealMemory=1000 State=UNKNOWN"
            % (self.node, socket.gethostname(), self.cpus),
            "PartitionName=debug Nodes=%s Default=YES MaxTime=INFINITE State=UP" % self.node,
            ""])

    def _log(self, name):
        return os.path.join(self.root, "log", name + ".log")

    def _spawn(self, name, cmd):
        if cmd[0] is None:
            raise ClusterError("%s is not installed" % name)
        with open(self._log(name + "-stdout"), "w") as out:
            self.procs[name] = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=self.env,
                                                stdin=subprocess.DEVNULL)

    def _wait(self, ready, timeout, what):
        deadline = time.time() + timeout
        while time.time() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise ClusterError("%s exited with %s while starting the cluster: %s\n%s"
                                       % (name, proc.returncode, what, self._startup_logs()))
            if ready():
                return
            time.sleep(0.3)
        raise ClusterError("%s within %d s\n%s" % (what, timeout, self._startup_logs()))

    def _startup_logs(self):
        extra = []
        for name in DAEMONS:
            path = self._log(name + "-stdout")
            if os.path.exists(path):
                with open(path, errors="replace") as f:
                    extra.append("--- %s ---\n%s" % (path, f.read()[-2000:]))
        return self.logs() + "\n" + "\n".join(extra)

    def _run(self, cmd, timeout=30):
        return subprocess.run(cmd, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, timeout=timeout)


def _user():
    import pwd
    return pwd.getpwuid(os.getuid()).pw_name


def kill_leftovers(conf):
    """SIGKILLs any process still carrying SLURM_CONF=conf in its environment: slurmstepd and
    job processes of this cluster (and only of it) that outlived the daemons."""
    marker = ("SLURM_CONF=" + conf).encode() + b"\0"
    me = os.getpid()
    killed = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == me:
            continue
        try:
            with open("/proc/%s/environ" % pid, "rb") as f:
                if marker in f.read() + b"\0":
                    os.kill(int(pid), 9)
                    killed.append(int(pid))
        except (OSError, ProcessLookupError):
            pass
    return killed
