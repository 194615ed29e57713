"""A real multi-host mpirun: two network namespaces joined by a veth pair play two hosts, each
with its own address and hostname. launch/train-multinode.sh runs in the first; Open MPI starts
its daemon on the second through plm_rsh_agent (`ip netns exec`, where a cluster has ssh), and
the ranks talk over TCP on the veth link only. The 2-host, 2-rank run must finish and match
the 1-process run on one host. TwoHosts also cuts the link (link()) and slows it (limit(), tc
tbf) for test_host_faults.py. Needs root and `ip` (iproute2); fails, never skips, without.
Deliberately on the CPU (train.device=cpu, --cpu) whatever MEGABATCH_TEST_DEVICE says: it tests
mpirun across hosts, not the device.
"""
import os
import shutil
import stat
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mbtest  # noqa: E402
from test_launch import DEMO, LAUNCH, STEPS, final_params, overrides, synth_demo_data, train_steps  # noqa: E402

import numpy as np  # noqa: E402

SUBNET = "10.213.%d.0/24"
IFNAME = "mbnet0"  # the same name in both namespaces, so --ifname fits both hosts
SSHD_PORT = 2222  # the stand-in sshd of TwoHosts(sshd=True)
# A stand-in for a host's sshd: it accepts and closes connections, nothing more.
SSHD = ("import socket\ns = socket.socket()\ns.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        "s.bind(('0.0.0.0', %d))\ns.listen(64)\nwhile True:\n    s.accept()[0].close()\n" % SSHD_PORT)


def sh(cmd, check=True):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    if check and r.returncode != 0:
        raise RuntimeError("%s failed (exit %d): %s" % (" ".join(cmd), r.returncode, r.stdout))
    return r


def pids_in(ns):
    return sh(["ip", "netns", "pids", ns], check=False).stdout.split()


def kill_everything_in(ns):
    for pid in pids_in(ns):
        try:
            os.kill(int(pid), 9)
        except (OSError, ValueError):
            pass


class TwoHosts:
    """Two namespaces mbA<pid>, mbB<pid> with addresses .1 and .2 of a private /24 on a veth
    pair; removed (with everything in them) by close().

    With sshd=True the second host is up only while a stand-in sshd runs in it (start_sshd()):
    the agent, like ssh, first connects to it over the link and fails (exit 255) when it cannot.
    So killing every process of the host, or cutting the link, makes it one that does not
    answer, as a crashed host does, and start_sshd() brings it back, as a reboot does."""

    def __init__(self, root, sshd=False):
        if os.getuid() != 0:
            raise RuntimeError("network namespaces need root (this runs as uid %d)" % os.getuid())
        if shutil.which("ip") is None:
            raise RuntimeError("`ip` is missing: apt-get install iproute2 (scripts/setup.sh --tests)")
        pid = os.getpid()
        self.ns = ["mbA%d" % pid, "mbB%d" % pid]
        net = 100 + pid % 100
        self.addr = ["10.213.%d.1" % net, "10.213.%d.2" % net]
        self.names = ["mbhost1", "mbhost2"]
        self.created = []
        self.sshds = []
        try:
            for ns in self.ns:
                sh(["ip", "netns", "add", ns])
                self.created.append(ns)
            va, vb = self.veth = "mbva%d" % (pid % 100000), "mbvb%d" % (pid % 100000)
            sh(["ip", "link", "add", va, "type", "veth", "peer", "name", vb])
            for ns, dev, addr in zip(self.ns, (va, vb), self.addr):
                sh(["ip", "link", "set", dev, "netns", ns])
                sh(["ip", "-n", ns, "link", "set", dev, "name", IFNAME])
                sh(["ip", "-n", ns, "addr", "add", addr + "/24", "dev", IFNAME])
                sh(["ip", "-n", ns, "link", "set", IFNAME, "up"])
                sh(["ip", "-n", ns, "link", "set", "lo", "up"])
        except BaseException:
            self.close()
            raise
        # The "ssh" Open MPI uses to start its daemon on the other host.
        self.agent = os.path.join(root, "netns-rsh")
        cases = "\n".join('  %s) ns=%s name=%s gate=%s ;;' % (a, ns, n, 1 if sshd and i == 1 else "")
                          for i, (a, ns, n) in enumerate(zip(self.addr, self.ns, self.names)))
        gate = ('if [ -n "$gate" ] && ! timeout 2 bash -c ": <>/dev/tcp/$host/%d" 2>/dev/null; then\n'
                '  echo "netns-rsh: ssh: connect to host $host port 22: no answer" >&2; exit 255\nfi\n' % SSHD_PORT)
        with open(self.agent, "w") as f:
            f.write("#!/bin/bash\n# plm_rsh_agent: HOST COMMAND... -> run COMMAND in HOST's namespace\n"
                    "host=$1; shift\ncase $host in\n%s\n  *) echo \"netns-rsh: unknown host $host\" >&2; exit 255 ;;\nesac\n"
                    "%s"
                    "echo \"$host $ns $*\" >> \"$0.log\"\n"
                    "exec ip netns exec $ns unshare --uts /bin/sh -c \"hostname $name; $*\"\n" % (cases, gate))
        os.chmod(self.agent, os.stat(self.agent).st_mode | stat.S_IXUSR)

    def start_sshd(self, host=1):
        """Starts the stand-in sshd in host's namespace (kill_everything_in ends it) and waits
        until it listens."""
        self.sshds.append(subprocess.Popen(["ip", "netns", "exec", self.ns[host], mbtest.PYTHON, "-c", SSHD],
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                           start_new_session=True))
        for _ in range(100):
            probe = "ss -ltn | grep -q ':%d '" % SSHD_PORT
            if sh(["ip", "netns", "exec", self.ns[host], "sh", "-c", probe], check=False).returncode == 0:
                return
            time.sleep(0.05)
        raise RuntimeError("the stand-in sshd did not start in %s" % self.ns[host])

    def on_first(self, cmd):
        """The command line that runs cmd (a list) in host 1's namespace under its own hostname."""
        inner = "hostname %s; exec %s" % (self.names[0], " ".join("'%s'" % c.replace("'", "'\\''") for c in cmd))
        return ["ip", "netns", "exec", self.ns[0], "unshare", "--uts", "/bin/sh", "-c", inner]

    def run_on_first(self, cmd, env, timeout):
        full = self.on_first(cmd)
        p = subprocess.run(full, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                           timeout=timeout, env=env)
        return mbtest.Result(full, p.returncode, p.stdout, "")

    def hostfile(self, root):
        """Writes an Open MPI hostfile of one slot on each host into root; returns its path."""
        path = os.path.join(root, "hosts")
        with open(path, "w") as f:
            f.write("".join("%s slots=1\n" % a for a in self.addr))
        return path

    def launcher(self, root, config, args, options=("--cpu",)):
        """launch/train-multinode.sh over both hosts, TCP on the veth only, one rank each."""
        return ([os.path.join(LAUNCH, "train-multinode.sh"), "--hostfile", self.hostfile(root), "--net", "tcp",
                 "--ifname", IFNAME] + list(options) + [config] + list(args))

    def environment(self, mpirun_args="", **more):
        """os.environ plus the agent that starts Open MPI's daemon on host 2, and more."""
        return dict(os.environ, MB_MPIRUN_ARGS=("--mca plm_rsh_agent %s %s" % (self.agent, mpirun_args)).strip(),
                    **more)

    def link(self, host, state):
        """Takes host's end of the veth pair "down" or "up" (a cut link, from both ends)."""
        sh(["ip", "-n", self.ns[host], "link", "set", IFNAME, state])

    def limit(self, rate_kbit, burst_bytes, delay_ms=0):
        """Limits both directions of the link to rate_kbit with a token bucket (tc tbf on each
        end's egress; its queue holds 2 s of traffic, so a burst of gradients waits, not drops).
        delay_ms > 0 adds netem's delay in front of it where the kernel has netem; returns
        whether it was added (this kernel has tbf and no netem)."""
        delayed = delay_ms > 0
        for ns in self.ns:
            tbf = ["tbf", "rate", "%dkbit" % rate_kbit, "burst", str(burst_bytes), "latency", "2s"]
            if delayed:
                netem = sh(["tc", "-n", ns, "qdisc", "replace", "dev", IFNAME, "root", "handle", "1:", "netem",
                            "delay", "%gms" % delay_ms], check=False)
                delayed = netem.returncode == 0
            if delayed:
                sh(["tc", "-n", ns, "qdisc", "replace", "dev", IFNAME, "parent", "1:1", "handle", "10:"] + tbf)
            else:
                sh(["tc", "-n", ns, "qdisc", "replace", "dev", IFNAME, "root"] + tbf)
        return delayed

    @staticmethod
    def has_netem():
        """(whether tc can make a netem qdisc here, tc's answer), tried on a veth pair in a
        namespace of its own."""
        ns = "mbnetem%d" % os.getpid()
        sh(["ip", "netns", "add", ns])
        try:
            sh(["ip", "-n", ns, "link", "add", "probe0", "type", "veth", "peer", "name", "probe1"])
            r = sh(["tc", "-n", ns, "qdisc", "add", "dev", "probe0", "root", "netem", "delay", "1ms"], check=False)
            return r.returncode == 0, r.stdout.strip()
        finally:
            sh(["ip", "netns", "del", ns], check=False)

    def unlimit(self):
        for ns in self.ns:
            sh(["tc", "-n", ns, "qdisc", "del", "dev", IFNAME, "root"], check=False)

    def close(self):
        """Kills whatever runs in the namespaces and removes them, and with them the veth pair and
        its qdiscs; a veth left in this namespace by a failed set-up goes too."""
        for ns in self.created:
            kill_everything_in(ns)  # a stray orted or rank goes with the namespace
            sh(["tc", "-n", ns, "qdisc", "del", "dev", IFNAME, "root"], check=False)
            sh(["ip", "netns", "del", ns], check=False)
        self.created = []
        for sshd in self.sshds:
            sshd.kill()
            sshd.wait()
        for dev in getattr(self, "veth", ()):
            sh(["ip", "link", "del", dev], check=False)

    def leftovers(self):
        """The namespaces and veth ends of this bed that still exist (after close(): none)."""
        names = sh(["ip", "netns", "list"], check=False).stdout.split()
        links = sh(["ip", "-o", "link", "show"], check=False).stdout
        return [ns for ns in self.ns if ns in names] + [dev for dev in getattr(self, "veth", ()) if dev + "@" in links]


class MultiHostTest(mbtest.TempDirTestCase):
    def test_two_hosts_two_ranks_match_one_host(self):
        data = self.path("demo.h5")
        synth_demo_data(data)
        single = self.path("single")
        r = mbtest.run(["train", "--config", DEMO, "train.device=cpu"] + overrides(data, single), timeout=600)
        self.assertExit(r, 0)

        hosts = TwoHosts(self.tmp)
        try:
            run = self.path("two-hosts")
            r = hosts.run_on_first(hosts.launcher(self.tmp, DEMO, overrides(data, run)),
                                   hosts.environment("--display-map"), timeout=600)
        finally:
            hosts.close()
        self.assertEqual(hosts.leftovers(), [])
        self.assertExit(r, 0, "[r0/2]")
        # Open MPI's map puts rank 0 on the first host and rank 1 on the second, whose daemon
        # the agent started inside the second namespace.
        self.assertRegex(r.output, r"Data for node: %s\s[^\n]*\n\s*Process OMPI jobid: \S+ App: 0 Process rank: 0"
                         % hosts.names[0])
        self.assertRegex(r.output, r"Data for node: %s\s[^\n]*\n\s*Process OMPI jobid: \S+ App: 0 Process rank: 1"
                         % hosts.addr[1].replace(".", r"\."))
        with open(hosts.agent + ".log") as f:
            started = f.read()
        self.assertRegex(started, r"%s %s\s+orted " % (hosts.addr[1].replace(".", r"\."), hosts.ns[1]))
        # ... and told it to call back over the veth link, not loopback.
        self.assertIn("tcp://%s:" % hosts.addr[0], started)
        self.assertEqual(train_steps(run), list(range(1, STEPS + 1)), r.output[-3000:])
        ref, got = final_params(single), final_params(run)
        self.assertEqual(sorted(ref), sorted(got))
        for name in ref:
            np.testing.assert_allclose(got[name], ref[name], rtol=1e-4, atol=1e-6, err_msg=name)


if __name__ == "__main__":
    unittest.main(verbosity=2)
