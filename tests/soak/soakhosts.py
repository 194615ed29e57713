"""The fault soak between hosts (soak.py --hosts): the run on the two-host bed of
tests/launch/test_multihost.py (two network namespaces joined by a veth pair, one rank on each,
a stand-in sshd on the second), under the elastic launcher with --scale-up, and three more
faults on top of soak.py's:

  lost_host  every process of the second host killed, its sshd too (a crashed host); it
             answers again after the outage, as a rebooted one does
  cut_link   the link down for the outage, then up again: shorter than about dist.timeout_s / 2,
             TCP rides it out; longer, the job ends and the launcher restarts without the host
  slow_link  the link limited to 2 Mbit/s for the outage (the gradients then take about 0.3 s
             a step), then back to full speed

The outage is 1-15 s, drawn from the seed. A host that goes away makes the launcher restart on
the host left, 1 rank, and take the host back (2 ranks) once it answers: that part of the run
trains on fewer ranks, so its end is compared to the uninterrupted run's to the documented
tolerance, not bitwise.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "launch"))
from soak import FAULT_KINDS, HOST_KINDS, Soak  # noqa: E402
from soakkit import Run  # noqa: E402
from test_launch import DEMO  # noqa: E402
from test_multihost import TwoHosts, kill_everything_in  # noqa: E402

SLOW_LINK_KBIT = 2000
SLOW_LINK_BURST = 3028  # two frames (test_host_faults.py)
LAUNCHER_OPTIONS = ["--cpu", "--max-restarts", "1000", "--probe-timeout", "2", "--probe-every", "1", "--scale-up"]


def open_bed(root):
    """The two hosts, the second one answering."""
    hosts = TwoHosts(root, sshd=True)
    try:
        hosts.start_sshd()
    except BaseException:
        hosts.close()
        raise
    return hosts


class HostRun(Run):
    """A Run whose launcher starts on the first host and puts one rank on each."""

    def __init__(self, hosts, root, data, steps, name, disk=None):
        super().__init__(root, data, steps, name, disk)
        self.hosts = hosts
        self.hostfile = hosts.hostfile(root)

    def command(self):
        return self.hosts.on_first(self.hosts.launcher(self.root, DEMO, self.overrides(), LAUNCHER_OPTIONS))

    def environment(self):
        env = super().environment()
        env["MB_MPIRUN_ARGS"] = self.hosts.environment()["MB_MPIRUN_ARGS"]
        return env


class HostSoak(Soak):
    KINDS = FAULT_KINDS + HOST_KINDS

    def __init__(self, hosts, *args):
        self.hosts = hosts
        super().__init__(*args)

    def new_run(self, name):
        return HostRun(self.hosts, self.root, self.data, self.args.steps, name, self.disk)

    @staticmethod
    def outage(f):
        # Drawn from `spot` (corrupt_latest's draw), so that adding these kinds left the
        # schedules of soak.py's seeds as they were.
        return round(1 + 14 * f["spot"], 1)

    def fault_lost_host(self, f):
        self.wait_for_ranks()
        kill_everything_in(self.hosts.ns[1])
        self.keep_running(self.outage(f), f)
        self.hosts.start_sshd()
        return "every process of host 2 killed (its sshd too); it answers again after %.1f s" % self.outage(f)

    def fault_cut_link(self, f):
        self.wait_for_ranks()
        self.hosts.link(1, "down")
        try:
            self.keep_running(self.outage(f), f)
        finally:
            self.hosts.link(1, "up")
        return "the link to host 2 cut for %.1f s" % self.outage(f)

    def fault_slow_link(self, f):
        self.wait_for_ranks()
        self.hosts.limit(SLOW_LINK_KBIT, SLOW_LINK_BURST)
        try:
            self.keep_running(self.outage(f), f)
        finally:
            self.hosts.unlimit()
        return "the link limited to %d kbit/s for %.1f s" % (SLOW_LINK_KBIT, self.outage(f))
