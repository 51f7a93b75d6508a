"""The test cluster (tests/cluster/cluster.sh): network namespaces as hosts, real Slurm and sshd,
brought up and down here. Needs root."""
import os
import shlex
import signal
import subprocess


def cluster_unavailable():
    """'' when this process may make the test cluster's namespaces, else why not."""
    if os.geteuid() != 0:
        return "the test cluster needs root (network namespaces, mounts, Slurm and sshd daemons)"
    try:
        p = subprocess.run(["unshare", "--net", "--uts", "--mount", "true"], capture_output=True, text=True,
                           timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"network namespaces are not available here (unshare: {e})"
    if p.returncode != 0:
        return ("network namespaces are not available here "
                f"(unshare --net --uts --mount: {p.stderr.strip() or f'exit {p.returncode}'})")
    name = f"flowrun-probe-{os.getpid()}"
    p = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if p.returncode != 0:
        return f"network namespaces are not available here (ip netns add: {p.stderr.strip()})"
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return ""


def end_on_sigterm():
    """SIGTERM (a CI timeout) ends the run as Ctrl-C does, through the fixtures' teardown, which
    brings the cluster down."""
    def interrupted(signum, frame):
        raise KeyboardInterrupt(signal.Signals(signum).name)
    signal.signal(signal.SIGTERM, interrupted)


class Cluster:
    def __init__(self, root, nodes, *up_options):
        self.script = os.path.join(root, "tests", "cluster", "cluster.sh")
        self.nodes, self.up_options = nodes, up_options
        self.env, self.is_up = {}, False

    def up(self):
        """True once the cluster is up. A failed `up` removes what it made itself,
        and one refused because a cluster is up already leaves that one alone."""
        argv = [self.script, "up", str(self.nodes), *self.up_options]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=180)
        print(p.stdout + p.stderr, end="", flush=True)
        if p.returncode != 0:
            return False
        self.is_up = True
        out = subprocess.run([self.script, "env"], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            k, _, v = line.removeprefix("export ").partition("=")
            self.env[k] = shlex.split(v)[0] if v else ""
        self.addrs = dict(item.split("=") for item in self.env["FLOWRUN_CLUSTER_ADDRS"].split())
        self.addrs["head"] = self.env["FLOWRUN_CLUSTER_HEAD_ADDR"]
        self.netns = self.env["FLOWRUN_CLUSTER_NETNS"].split()
        self.ssh_config = self.env["FLOWRUN_CLUSTER_SSH_CONFIG"]
        return True

    def down(self):
        p = subprocess.run([self.script, "down"], capture_output=True, text=True, timeout=120)
        print(p.stdout + p.stderr, end="", flush=True)
        self.is_up = False
        return p.returncode

    def on(self, where, argv):
        """argv run on the head ('head': host name head, the cluster's hosts
        file), on node I (an int), or as it is here (None)."""
        if where is None:
            return list(argv)
        return [self.script, "exec", str(where), *argv]

    def pids_on(self, node):
        out = subprocess.run(["ip", "netns", "pids", self.netns[node - 1]], capture_output=True, text=True).stdout
        return [int(p) for p in out.split()]

    def address_list(self):
        return ",".join(f"{h}={a}" for h, a in sorted(self.addrs.items()))
