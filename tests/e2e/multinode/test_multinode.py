"""End-to-end tests of flowrun across nodes: a 4-node test cluster on this
machine (tests/cluster/cluster.sh: network namespaces, real Slurm, sshd), the
real binary as head and agents, helper ranks (node_worker.py) and a join that
checks what the ranks saw (check_env.py).

  python3 -m pytest tests/e2e/multinode/test_multinode.py [--flowrun PATH] [-k NAME] [--keep]

Brings the cluster up (node1's /etc/hosts maps its own name to 127.0.1.1, as
Debian does), runs the tests, and always brings it down, also on Ctrl-C.
After every test, nothing of flowrun may be left on any node. Skipped only
when not root or when network namespaces are not available here.
--keep: keep the scratch directory (in /var/tmp; the nodes share it) to look at.
"""
import collections
import datetime
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import threading
import time

import pytest

from flowrun_testlib import AGENT_CLOSED, temp_dir
from flowrun_testlib.browser import Browser, chromium
from flowrun_testlib.node_faults import node_faults
from flowrun_testlib.cluster import Cluster, cluster_unavailable, end_on_sigterm
from flowrun_testlib.launcher import py_spy

pytestmark = [pytest.mark.multinode, pytest.mark.cluster, pytest.mark.root]

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "node_worker.py")
CHECK = os.path.join(HERE, "check_env.py")
TORCH = os.path.join(HERE, "..", "torch")
PY = "/usr/bin/python3"  # the same on every node, with Debian's torch
NODES = 4
DEBIAN_NODE = "node1"
GRACE = 2.0
# Variables that steer flowrun or Slurm; the tests start without them.
INFLUENTIAL = re.compile(r"^(CUDA_|SLURM_|SBATCH_|SALLOC_|SRUN_|FLOWRUN_|OMP_NUM_THREADS$|TORCH_NCCL_|NCCL_|NO_COLOR$|"
                         r"PYTHONPATH$|PYTHONHOME$)")


def q(text):
    """A YAML double-quoted scalar (JSON's string syntax is valid YAML)."""
    return json.dumps(str(text))


def to_yaml(value, indent=0):
    """A small YAML writer for specs: mappings, lists, scalars (all quoted)."""
    pad = " " * indent
    if value == {}:
        return "{}"
    if isinstance(value, dict):
        lines = []
        for k, v in value.items():
            if isinstance(v, dict) and v:
                lines.append(f"{pad}{k}:\n{to_yaml(v, indent + 2)}")
            elif isinstance(v, list) and v and isinstance(v[0], dict):
                lines.append(f"{pad}{k}:\n{to_yaml(v, indent + 2)}")
            else:
                lines.append(f"{pad}{k}: {to_yaml(v)}")
        return "\n".join(lines)
    if isinstance(value, list):
        if value and isinstance(value[0], dict):
            return "\n".join(pad + "- " + to_yaml(item, indent + 2).lstrip() for item in value)
        return "[" + ", ".join(to_yaml(v) for v in value) + "]"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return q(value)


def iso(text):
    """results.json's "2026-11-29T17:10:53.123Z" as seconds since the epoch."""
    if not text:
        return None
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


# --- processes -----------------------------------------------------------------

LIVE = set()


class Live:
    """A running command whose output lines are read as they come, each with
    the time.monotonic() at which it arrived."""

    def __init__(self, argv, cwd, env):
        self.argv, self.start = argv, time.monotonic()
        self.p = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, start_new_session=True)
        self.lines = {"out": [], "err": []}
        self.cond = threading.Condition()
        self.readers = [threading.Thread(target=self._read, args=(s, n), daemon=True)
                        for s, n in ((self.p.stdout, "out"), (self.p.stderr, "err"))]
        for t in self.readers:
            t.start()
        self.rc = None
        LIVE.add(self)

    def _read(self, stream, name):
        for raw in iter(stream.readline, b""):
            now = time.monotonic()
            with self.cond:
                self.lines[name].append((now, raw.decode(errors="replace")))
                self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    def wait_line(self, pattern, limit, streams=("out", "err")):
        """(arrival time, match) of the first line matching pattern, or (None, None)."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + limit
        with self.cond:
            while True:
                for name in streams:
                    for t, line in self.lines[name]:
                        m = regex.search(line)
                        if m:
                            return t, m
                left = deadline - time.monotonic()
                if left <= 0 or (self.p.poll() is not None and not any(r.is_alive() for r in self.readers)):
                    return None, None
                self.cond.wait(min(left, 0.5))

    def text(self, name):
        with self.cond:
            return "".join(line for _, line in self.lines[name])

    def kill(self):
        if self.p.poll() is None:
            try:
                os.killpg(self.p.pid, signal.SIGKILL)
            except OSError:
                pass
        self.p.wait()

    def finish(self, limit):
        """Waits for the exit; after `limit` seconds, SIGKILL to its process group (rc 'timeout')."""
        try:
            self.rc = self.p.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            self.kill()
            self.rc = "timeout"
        for t in self.readers:
            t.join(5)
        self.elapsed = time.monotonic() - self.start
        LIVE.discard(self)
        return self.rc

    def detail(self):
        return (f"$ {shlex.join(self.argv)}\nexit {self.rc} after {time.monotonic() - self.start:.2f} s\n"
                f"--- stdout\n{self.text('out')[-4000:]}\n--- stderr\n{self.text('err')[-6000:]}")


class Run:
    """A finished flowrun head: exit code, console, run directory."""

    def __init__(self, live, run_dir):
        self.rc, self.stdout, self.stderr, self.run_dir = live.rc, live.text("out"), live.text("err"), run_dir
        self.elapsed, self._detail = live.elapsed, live.detail()

    def results(self, step="train"):
        try:
            with open(os.path.join(self.run_dir, step, "results.json")) as f:
                return json.load(f)
        except (OSError, ValueError) as e:
            return {"error": f"{type(e).__name__}: {e}"}

    def detail(self):
        return self._detail


def read_text(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def proc_read(pid, name, binary=False):
    try:
        with open(f"/proc/{pid}/{name}", "rb") as f:
            data = f.read()
    except OSError:
        return b"" if binary else ""
    return data if binary else data.decode(errors="replace")


def proc_state(pid):
    stat = proc_read(pid, "stat")
    return stat[stat.rfind(")") + 2:][:1] if stat else ""


# --- the tests -------------------------------------------------------------------

class Multinode:
    """What the tests share: the cluster, a scratch directory in /var/tmp with copies of the binary and
    the ranks' scripts; self.soft is the check of the test that runs now."""

    def __init__(self, flowrun, root, cluster, scratch):
        self.root, self.c, self.scratch = root, cluster, scratch
        # The tests run a copy of the binary, at a path of their own, and flows named
        # after this process: what is left of them is told apart from anything else
        # flowrun that runs on this machine (its exe, its command line, its run id).
        self.flowrun = os.path.join(scratch, "bin", "flowrun")
        os.makedirs(os.path.dirname(self.flowrun))
        shutil.copy2(flowrun, self.flowrun)
        self.real_flowrun = os.path.realpath(self.flowrun)
        # The stand-in NVIDIA libraries, built next to the unit tests (copied by the test that uses them).
        self.fakes = os.path.join(os.path.dirname(os.path.abspath(flowrun)), "tests")
        # Screenshots of the run pages (flowrun report) go where the browser tests' go, for CI to keep.
        self.screenshots = os.path.join(os.path.dirname(os.path.abspath(flowrun)), "report-screenshots")
        # The ranks' scripts too: the repository may sit under /tmp, which every
        # node has its own of (a CI clone in /tmp/x), while /var/tmp is shared.
        global WORKER, CHECK, TORCH
        scripts = os.path.join(scratch, "scripts")
        shutil.copytree(HERE, scripts, ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copytree(TORCH, os.path.join(scratch, "torch"), ignore=shutil.ignore_patterns("__pycache__"))
        WORKER, CHECK = os.path.join(scripts, "node_worker.py"), os.path.join(scripts, "check_env.py")
        TORCH = os.path.join(scratch, "torch")
        self.name = f"mn{os.getpid()}"
        # The py-spies the stacks tests run (a copy in the shared scratch directory; one in node1's /tmp): none
        # may be left running.
        self.py_spy = os.path.join(scratch, "py-spy", "py-spy")
        self.py_spies = [self.py_spy]
        self.soft = None

    def check(self, ok, label, expected, got, detail=""):
        """A check that says what it expected and what it got when it fails."""
        return self.soft(ok, label, f"  expected: {expected}\n  got:      {got}\n{detail}".rstrip())

    def env(self):
        env = {k: v for k, v in os.environ.items() if not INFLUENTIAL.match(k)}
        env["PATH"] = "/usr/bin:/bin:" + env.get("PATH", "")
        env["SLURM_CONF"] = self.c.env["SLURM_CONF"]
        return env

    def workspace(self, name, base=None):
        """A new directory (name, name.2, ...: a name asked for twice gets one of its own)."""
        d, n = os.path.join(base or self.scratch, name), 1
        while os.path.exists(d):
            n += 1
            d = os.path.join(base or self.scratch, f"{name}.{n}")
        os.makedirs(d)
        return d

    def write_spec(self, d, cluster, steps, **top):
        """d/spec.yaml: the name, `top`'s keys (python: ...), the cluster and the steps."""
        path = os.path.join(d, "spec.yaml")
        with open(path, "w") as f:
            f.write(to_yaml({"name": self.name, **top, "cluster": cluster, "steps": steps}) + "\n")
        return path

    def ssh_cluster(self, hosts=None, **extra):
        c = {"engine": "ssh"}
        if hosts:
            c["hosts"] = hosts
        c["ssh_command"] = f"ssh -F {self.c.ssh_config}"
        c.update(extra)
        return c

    def start(self, argv, where, cwd, **extra_env):
        return Live(self.c.on(where, argv), cwd, {**self.env(), **extra_env})

    def head(self, spec, where, *options, prefix=(), limit=60, **extra_env):
        """Runs `flowrun SPEC --run-dir DIR OPTIONS` to the end."""
        run_dir = os.path.join(os.path.dirname(spec), "run")
        live = self.start([*prefix, self.flowrun, spec, "--run-dir", run_dir, *options], where, os.path.dirname(spec),
                          **extra_env)
        live.finish(limit)
        return Run(live, run_dir)

    def ready_dir(self, d):
        r = os.path.join(d, "ready")
        os.makedirs(r)
        return r

    def wait_ready(self, directory, count, live, limit=60):
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if len(os.listdir(directory)) >= count:
                return True
            if live.p.poll() is not None:
                return False
            time.sleep(0.02)
        return False

    # --- the environment every rank gets ---------------------------------------

    def env_steps(self, nodes, hosts, slurm):
        world = nodes * 2
        return [
            {"name": "train", "run": [PY, WORKER, "env"], "parallel": {"nodes": nodes}, "collect": "all"},
            {"name": "check", "join": "train",
             "run": [PY, CHECK, "--nodes", str(nodes), "--per-node", "2", "--hosts", hosts, "--address",
                     self.c.address_list(), "--slurm" if slurm else "--no-slurm"]},
        ], world

    def check_env_run(self, label, run, nodes, head_host=None, console=None):
        """What a successful env run shows: exit 0, the join's verdict, every rank's
        line with its node's name, results.json's node = the rank's host name."""
        world = nodes * 2
        out = console if console is not None else run.stdout
        if not self.check(run.rc == 0, f"{label}: flowrun exits 0", 0, run.rc, run.detail()):
            return
        verdict = re.search(rf"^\[check\] env check: {world} ranks on {nodes} nodes \((.*)\) agree; "
                            rf"MASTER_ADDR=(\S+), reached from rank {world - 1}$", out, re.M)
        problems = "".join(re.findall(r"^\[check\] .*\n", run.stderr + out, re.M))
        behind = [line for line in (run.stderr + out).splitlines() if "left behind" in line]
        self.check(not behind, f"{label}: nothing is reported left behind (srun and ssh end with their agents)",
                   "no 'left behind' note", "\n".join(behind))
        self.check(verdict is not None, f"{label}: the join finds every rank's environment right",
                   f"[check] env check: {world} ranks on {nodes} nodes (...) agree; ...",
                   problems or "no verdict", "" if problems else run.detail())
        hosts = {}
        for r in range(world):
            try:
                with open(os.path.join(run.run_dir, "train", "outputs", f"rank{r}", "env.json")) as f:
                    hosts[r] = json.load(f)["hostname"]
            except (OSError, ValueError, KeyError) as e:
                hosts[r] = f"<{type(e).__name__}: {e}>"
        res = run.results()
        nodes_in_results = {w.get("rank"): w.get("node") for w in res.get("ranks", [])}
        self.check(nodes_in_results == hosts, f"{label}: results.json names each rank's node (its host name)",
                   hosts, nodes_in_results if "ranks" in res else res)
        missing = []
        for r, host in hosts.items():
            line = f"rank {r} on {host} wrote env.json"
            want = f"[{host} train r{r}] {line}\n"
            if want in out or (host == head_host and f"[train r{r}] {line}\n" in out):
                continue
            missing.append(want.strip())
        self.check(not missing, f"{label}: every rank's console line carries its node's name",
                   "lines like " + (missing[0] if missing else ""), "missing: " + "; ".join(missing), out[-3000:])

    def test_salloc(self):
        """salloc -N2 --gpus-per-node=2 flowrun SPEC: slurm inside an allocation, head on the login node."""
        d = self.workspace("salloc")
        steps, _ = self.env_steps(2, "slurm", slurm=True)
        spec = self.write_spec(d, {"engine": "slurm", "gpus_per_node": 2}, steps)
        run = self.head(spec, "head", "--fake-gpus", "2", prefix=["salloc", "-N2", "--gpus-per-node=2"])
        self.check_env_run("salloc -N2 (2 nodes x 2 GPUs)", run, 2)

    def test_sbatch(self):
        """An sbatch script that runs flowrun: the head is the batch shell on node1."""
        d = self.workspace("sbatch")
        steps, _ = self.env_steps(4, "slurm", slurm=True)
        spec = self.write_spec(d, {"engine": "slurm", "gpus_per_node": 2}, steps)
        run_dir, out = os.path.join(d, "run"), os.path.join(d, "job.out")
        with open(os.path.join(d, "job.sh"), "w") as f:
            f.write(f"#!/bin/bash\nexec {shlex.quote(self.flowrun)} {shlex.quote(spec)} --run-dir "
                    f"{shlex.quote(run_dir)} --fake-gpus 2\n")
        live = self.start(["sbatch", "--wait", "-N4", "--gpus-per-node=2", "-o", out, "-D", d, os.path.join(d, "job.sh")], "head", d)
        live.finish(120)
        run = Run(live, run_dir)
        try:
            with open(out) as f:
                console = f.read()
        except OSError as e:
            console = f"<no {out}: {e}>"
        run.stdout, run._detail = console, f"{live.detail()}\n--- {out}\n{console[-6000:]}"
        self.check_env_run("sbatch -N4 (4 nodes x 2 GPUs, head on node1)", run, 4, head_host="node1",
                           console=console)

    def test_srun(self):
        """No allocation: srun makes one of 4 nodes; the head (this namespace) listens on cluster.address."""
        d = self.workspace("srun")
        steps, _ = self.env_steps(4, "slurm", slurm=True)
        spec = self.write_spec(d, {"engine": "slurm", "gpus_per_node": 2, "address": self.c.addrs["head"]}, steps)
        run = self.head(spec, None, "--fake-gpus", "2")
        self.check_env_run("srun makes an allocation of 4 nodes, cluster.address", run, 4)

    def test_srun_node1(self):
        """No allocation, head on node1 (its name maps to 127.0.1.1 there), address chosen by flowrun."""
        d = self.workspace("srun_node1")
        steps, _ = self.env_steps(2, "slurm", slurm=True)
        spec = self.write_spec(d, {"engine": "slurm", "gpus_per_node": 2}, steps)
        run = self.head(spec, 1, "--fake-gpus", "2")
        self.check_env_run("srun makes the allocation, head on node1 (127.0.1.1)", run, 2, head_host="node1")

    def test_login_node_loopback(self):
        """No allocation, no cluster.address, the head in this namespace (the login node) whose host name maps to
        127.0.1.1 (a private /etc/hosts, as Debian writes it), with an interface no node reaches ordered before
        the cluster's where it can be: the head puts the route to slurmctld first, names it, and the step runs."""
        d = self.workspace("login_node_loopback")
        host, head = socket.gethostname(), self.c.addrs["head"]
        hosts = os.path.join(d, "hosts")
        with open(hosts, "w") as f:
            f.write(f"127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n127.0.1.1 {host}\n")
        # A mount namespace of its own: this machine's /etc/hosts is never touched.
        private = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                   'mount --bind "$0" /etc/hosts && exec "$@"', hosts]
        seen = subprocess.run([*private, "getent", "hosts", host], capture_output=True, text=True)
        if not self.check(seen.stdout.split()[:1] == ["127.0.1.1"], "login node: its host name resolves to 127.0.1.1",
                          f"127.0.1.1 {host}", seen.stdout + seen.stderr):
            return
        dummy, unreachable = "frc-unreach", "198.51.100.1"
        used = {int(line.split(":")[0]) for line in subprocess.run(["ip", "-o", "link"], capture_output=True,
                                                                   text=True).stdout.splitlines()}
        with open("/sys/class/net/frc-br/ifindex") as f:
            bridge = int(f.read())
        free = next((i for i in range(2, bridge) if i not in used), None)
        # A bridge without ports (the dummy driver may be missing): an up interface no node has a route to.
        subprocess.run(["ip", "link", "add", dummy, *(["index", str(free)] if free else []), "type", "bridge"],
                       check=True)
        try:
            subprocess.run(["ip", "addr", "add", f"{unreachable}/32", "dev", dummy], check=True)
            subprocess.run(["ip", "link", "set", dummy, "up"], check=True)
            steps, _ = self.env_steps(2, "slurm", slurm=True)
            # join_timeout: agents that cannot reach the head fail the step soon, not after the test's limit.
            spec = self.write_spec(d, {"engine": "slurm", "gpus_per_node": 2, "join_timeout": 20}, steps)
            run = self.head(spec, None, "--fake-gpus", "2", prefix=private)
        finally:
            subprocess.run(["ip", "link", "del", dummy])
        self.check_env_run("login node (127.0.1.1), srun makes the allocation, no cluster.address", run, 2)
        want = (rf"^flowrun: step 'train': 4 workers on 2 nodes \(engine: slurm\); the head listens on "
                rf"{re.escape(head)}:\d+ \(the address this host uses to reach slurmctld at head "
                rf"\({re.escape(head)}\), on frc-br; agents that cannot reach it try (.*)\)$")
        m = re.search(want, run.stderr, re.M)
        self.check(m is not None and f"{unreachable} ({dummy})" in m.group(1),
                   "login node: the console names the address (the route to slurmctld) and the others agents may try",
                   want, "\n".join(l for l in run.stderr.splitlines() if "listens on" in l), run.detail())
        print("login node: " + (m.group(0) if m else "no line saying where the head listens"), flush=True)
        fallback = [l for l in run.stderr.splitlines() if "reached the head at" in l]
        self.check(not fallback, "login node: every agent reached the head at the first address", "no line", fallback)

    def test_ssh_hosts(self):
        """ssh to hosts [node2, node1] from node1: node 0 is not the head's host; the ssh
        command comes from FLOWRUN_SSH."""
        d = self.workspace("ssh_hosts")
        steps, _ = self.env_steps(2, "node2,node1", slurm=False)
        spec = self.write_spec(d, {"engine": "ssh", "hosts": ["node2", "node1"], "gpus_per_node": 2}, steps)
        run = self.head(spec, 1, "--fake-gpus", "2", FLOWRUN_SSH=f"ssh -F {self.c.ssh_config}")
        self.check_env_run("ssh hosts [node2, node1], FLOWRUN_SSH, head on node1", run, 2, head_host="node1")

    def test_ssh_hostfile(self):
        """ssh to the 4 nodes of a hostfile from this namespace, with cluster.address."""
        d = self.workspace("ssh_hostfile")
        with open(os.path.join(d, "hosts.txt"), "w") as f:
            f.write("# the nodes, in node-rank order\nnode1 slots=2\n\nnode2\n  node3 slots=2\nnode4\n")
        steps, _ = self.env_steps(4, "node1,node2,node3,node4", slurm=False)
        spec = self.write_spec(d, self.ssh_cluster(None, hostfile="hosts.txt", gpus_per_node=2,
                                                   address=self.c.addrs["head"]), steps)
        run = self.head(spec, None, "--fake-gpus", "2")
        self.check_env_run("ssh hostfile (4 nodes x 2 GPUs), cluster.address", run, 4)

    # --- real PyTorch ---------------------------------------------------------------

    def test_torch(self):
        """A gloo DDP job over 2 nodes x 2 CPU workers, node 0 being node1, whose name maps to 127.0.1.1
        (flowrun points gloo at the interface the node reaches the head by); the join replays it."""
        d = self.workspace("torch")
        steps = [
            {"name": "train", "run": [PY, os.path.join(TORCH, "ddp_train.py"), "--steps", "5"],
             "parallel": {"cpus": 4, "nodes": 2}, "outputs": "model.pt"},
            {"name": "check", "join": "train",
             "run": [PY, os.path.join(TORCH, "check_model.py"), "${steps.train.outputs}/model.pt", "4"]},
        ]
        spec = self.write_spec(d, self.ssh_cluster(["node1", "node2"]), steps)
        run = self.head(spec, "head", limit=240)
        self.check(run.rc == 0, "torch: a gloo DDP job trains on 2 nodes x 2 CPU workers", 0, run.rc, run.detail())
        want = "[check] model.pt: 4 workers, 5 steps of SGD, matches the replay\n"
        self.check(want in run.stdout, "torch: the join loads rank 0's model.pt and it matches a replay of 4 ranks",
                   want.strip(), "\n".join(run.stdout.splitlines()[-5:]), run.detail())
        missing = [f"[{host} train r{r}] rank {r}/4 step 4 loss" for r, host in enumerate(["node1"] * 2 + ["node2"] * 2)
                   if f"[{host} train r{r}] rank {r}/4 step 4 loss " not in run.stdout]
        self.check(not missing, "torch: every rank trained, on its node", "every rank's last step",
                   "missing: " + "; ".join(missing))

    # --- flowrun run: torchrun's command line across nodes ----------------------------

    def check_run_cli(self, label, run, nodes, hosts, slurm, step="node_worker"):
        """check_env.py over the rank directories of a `flowrun run` (it has no join)."""
        if not self.check(run.rc == 0, f"{label}: flowrun run exits 0", 0, run.rc, run.detail()):
            return
        inputs = os.path.join(os.path.dirname(run.run_dir), "inputs")
        os.makedirs(inputs)
        for r in range(nodes * 2):
            os.symlink(os.path.join(run.run_dir, step, f"rank{r}", "out"), os.path.join(inputs, f"rank{r}"))
        p = subprocess.run([PY, CHECK, "--nodes", str(nodes), "--per-node", "2", "--hosts", hosts, "--address",
                            self.c.address_list(), "--slurm" if slurm else "--no-slurm"],
                           env={**self.env(), "FLOWRUN_INPUTS": inputs}, capture_output=True, text=True)
        verdict = f"env check: {nodes * 2} ranks on {nodes} nodes"
        self.check(p.returncode == 0 and p.stdout.startswith(verdict),
                   f"{label}: every rank's environment is right (check_env.py)", verdict + " ... agree",
                   (p.stdout + p.stderr).strip(), run.detail())

    def test_run_cli_salloc(self):
        """salloc -N2 flowrun run --nnodes 2 SCRIPT: torchrun's command line inside an allocation; flowrun
        starts node 2's agent with srun."""
        d = self.workspace("run_cli_salloc")
        run_dir = os.path.join(d, "run")
        live = self.start(["salloc", "-N2", "--gpus-per-node=2", self.flowrun, "run", "--nnodes", "2",
                           "--nproc_per_node=2", "--fake-gpus", "2", "--run-dir", run_dir, "--python", PY, WORKER,
                           "env"], "head", d)
        live.finish(90)
        self.check_run_cli("salloc -N2 flowrun run --nnodes 2", Run(live, run_dir), 2, "slurm", slurm=True)

    def test_run_cli_rendezvous(self):
        """The same `flowrun run --nnodes 2 --rdzv-endpoint node1:PORT` typed on node1 and node2, node2 first:
        node1 (whose name maps to 127.0.1.1 there) owns the endpoint and is node 0."""
        d = self.workspace("run_cli_rdzv")
        run_dir = os.path.join(d, "run")
        port = str(29400 + os.getpid() % 500)
        argv = [self.flowrun, "run", "--nnodes=2", "--nproc-per-node", "2", "--rdzv-backend", "c10d",
                "--rdzv_endpoint", f"node1:{port}", "--rdzv-id", "job7", "--run-dir", run_dir, "--python", PY,
                WORKER, "env"]
        # No Slurm here: not even SLURM_CONF, which check_env.py --no-slurm would count.
        env = {k: v for k, v in self.env().items() if not k.startswith("SLURM_")}
        other = Live(self.c.on(2, argv), d, env)
        head = Live(self.c.on(1, argv), d, env)
        head.finish(90)
        other.finish(30)
        self.check(other.rc == 0, "rendezvous: node2's flowrun run exits 0", 0, other.rc, other.detail())
        self.check("flowrun run: joining node 0 at node1:" + port in other.text("err"),
                   "rendezvous: node2 says it joins node 0", "flowrun run: joining node 0 at node1:" + port,
                   other.text("err")[-500:])
        self.check_run_cli("flowrun run --rdzv-endpoint node1 on node1 and node2", Run(head, run_dir), 2,
                           "node1,node2", slurm=False)
        token = os.path.join(d, ".flowrun", "rendezvous", f"node1_{port}.token")
        self.check(not os.path.exists(token), "rendezvous: the token file is gone after the run", "no file", token)

    # --- Lightning -------------------------------------------------------------------

    def test_lightning(self):
        """specs/examples/lightning/train.py, unchanged, on 2 nodes x 2 CPU workers inside `salloc -N2`, with
        the venv scripts/venv makes: Lightning 1.9 looks for Slurm's variables before torchelastic's, and
        must still pick TorchElasticEnvironment (the agents drop the step's SLURM_NTASKS...); the join loads
        rank 0's checkpoint with LightningModule.load_from_checkpoint."""
        venv = os.path.join(self.root, "build", "venv")
        if not os.path.exists(os.path.join(venv, "flowrun-constraints.sha256")):
            print(f"lightning: SKIP: no frameworks venv at {venv} (make it with scripts/venv)", flush=True)
            return
        if os.path.realpath(venv).startswith("/tmp/"):  # each node has its own /tmp: copy it to /var/tmp
            shutil.copytree(venv, os.path.join(self.scratch, "venv"), symlinks=True)
            venv = os.path.join(self.scratch, "venv")
        py = os.path.join(venv, "bin", "python3")
        d = self.workspace("lightning")
        for f in ("train.py", "evaluate.py"):
            shutil.copy(os.path.join(self.root, "specs", "examples", "lightning", f), d)
        steps = [
            {"name": "train", "run": [py, "train.py", "--devices", "2", "--num-nodes", "2", "--epochs", "20"],
             "parallel": {"cpus": 4, "nodes": 2}, "outputs": "checkpoints/model.ckpt"},
            {"name": "evaluate", "join": "train",
             "run": [py, "evaluate.py", "${steps.train.outputs}/checkpoints/model.ckpt"]},
        ]
        spec = self.write_spec(d, {"engine": "slurm"}, steps)
        run = self.head(spec, "head", prefix=["salloc", "-N2"], limit=300)
        self.check(run.rc == 0, "lightning: Lightning DDP trains on 2 nodes x 2 CPU workers in salloc -N2", 0,
                   run.rc, run.detail())
        # Slurm may give the allocation any 2 of the cluster's nodes; ranks 0-1 share one, ranks 2-3 the other.
        hosts = {}
        for r in range(4):
            want = (rf"^\[(node\d+) train r{r}\] rank {r}/4: TorchElasticEnvironment, "
                    rf"creates_processes_externally=True, child processes=0, loss ")
            m = re.search(want, run.stdout, re.M)
            hosts[r] = m.group(1) if m else None
            self.check(m is not None, f"lightning: rank {r} uses TorchElasticEnvironment, not SLURMEnvironment, and "
                       "starts no process", want, "\n".join(
                           line for line in run.stdout.splitlines() if f"train r{r}]" in line)[-2000:], run.detail())
        self.check(hosts[0] == hosts[1] != hosts[2] == hosts[3], "lightning: 2 ranks on each of the 2 nodes",
                   "ranks 0, 1 on one node, ranks 2, 3 on the other", hosts)
        m = re.search(r"^\[evaluate\] model: y = (-?[0-9.]+) x \+ (-?[0-9.]+) \(target: y = 3x - 1\)", run.stdout,
                      re.M)
        self.check(m is not None and abs(float(m.group(1)) - 3) < 0.15 and abs(float(m.group(2)) + 1) < 0.15,
                   "lightning: the join loads rank 0's checkpoint, which learned y = 3x - 1",
                   "[evaluate] model: y = 3.00 x + -1.00", m.group(0) if m else None, run.detail())

    # --- failures --------------------------------------------------------------------

    def test_culprit(self):
        """Rank 3 fails on node2; ranks that ignore SIGTERM on both nodes are killed within the grace."""
        d = self.workspace("culprit")
        ready = self.ready_dir(d)
        steps = [{"name": "train", "parallel": {"nodes": 2},
                  "run": [PY, WORKER, "fail", "--rank", "3", "--code", "3", "--ready", ready, "--ignore-term"]}]
        spec = self.write_spec(d, {"engine": "slurm", "gpus_per_node": 2}, steps)
        run = self.head(spec, "head", "--fake-gpus", "2", "--grace", str(GRACE),
                       prefix=["salloc", "-N2", "--gpus-per-node=2"])
        self.check(run.rc == 3, "culprit: flowrun exits with the culprit's code", 3, run.rc, run.detail())
        res = run.results()
        ranks = {w.get("rank"): w for w in res.get("ranks", [])}
        # Slurm may give the allocation any 2 nodes: rank 3 runs on the second one, not rank 0's.
        node = ranks.get(3, {}).get("node")
        want = f"rank 3 on {node} exited with code 3"
        self.check(want in run.stderr, "culprit: the report names the rank and its node", want,
                   "\n".join(l for l in run.stderr.splitlines() if "flowrun" in l), run.detail())
        self.check(res.get("culprit_rank") == 3 and str(node).startswith("node") and
                   node == ranks.get(2, {}).get("node") != ranks.get(0, {}).get("node"),
                   "culprit: results.json: culprit rank 3, on rank 2's node, not rank 0's",
                   "culprit_rank 3, node of rank 2 != node of rank 0",
                   f"culprit_rank {res.get('culprit_rank')}, nodes {[ranks.get(r, {}).get('node') for r in range(4)]}",
                   json.dumps(res, indent=1)[:3000])
        culprit_end = iso(ranks.get(3, {}).get("end"))
        after = {}
        for r in (0, 1, 2):
            end = iso(ranks.get(r, {}).get("end"))
            after[r] = None if end is None or culprit_end is None else round(end - culprit_end, 3)
        # They ignore SIGTERM, so only the grace's SIGKILL ends them: the teardown says "killed" for each, on
        # both nodes, and each ends after the culprit. How long after is a figure, printed, not asserted.
        teardown = {r: (ranks.get(r, {}).get("teardown"), ranks.get(r, {}).get("signal")) for r in (0, 1, 2)}
        self.check(all(t == ("killed", "SIGKILL") for t in teardown.values()) and
                   all(a is not None and a >= 0 for a in after.values()),
                   "culprit: the other ranks (SIGTERM ignored) are killed after the grace, on both nodes",
                   "teardown killed, signal SIGKILL, end after rank 3's for ranks 0, 1, 2", {"teardown": teardown,
                   "seconds after rank 3": after}, json.dumps(res.get("ranks"), indent=1)[:3000])
        print(f"culprit: the other ranks ended {after} s after rank 3", flush=True)

    # --- hang forensics: every rank's stack, across nodes ------------------------------

    # rank_stuck.py's loop: py-spy gives its `while` or its `pass` line.
    LOAD_BATCH = r"load_batch \(rank_stuck\.py:1[78]\)"

    def noting_py_spy(self, d, path=None):
        """The py-spy of the stacks tests, at `path` (default d/py-spy, for FLOWRUN_PY_SPY at the head), on the
        shared file system: it notes the node it runs on (a file used.NODE in d), then becomes the real one (exec).
        The agents find no other (the nodes' PATH has none, nor has /usr/bin beside /usr/bin/python3), and the
        notes say which nodes ran it. None without a py-spy here."""
        found = py_spy()
        if found is None:
            return None
        if not os.path.exists(self.py_spy):
            os.makedirs(os.path.dirname(self.py_spy), exist_ok=True)
            shutil.copy2(found, self.py_spy)
        path = path or os.path.join(d, "py-spy")
        with open(path, "w") as f:
            f.write(f'#!/bin/sh\ntouch {shlex.quote(d)}/used."$(uname -n)"\nexec {shlex.quote(self.py_spy)} "$@"\n')
        os.chmod(path, 0o755)
        return path

    def stuck_run(self, label, cluster, prefix=()):
        """Real PyTorch (gloo), 4 ranks on 2 nodes (rank_stuck.py): rank 2 spins in a Python loop before the
        all_reduce ranks 0, 1 and 3 wait in, and the step's stall_timeout: 3s stops them; the head has
        FLOWRUN_PY_SPY. Each agent takes its own ranks' stacks before it signals them; the head groups all four,
        names rank 2 at its file:line, writes four stack.txt and the grouping into results.json."""
        d = self.workspace(label)
        py_spy_path = self.noting_py_spy(d)
        if py_spy_path is None:
            print(f"{label}: SKIP: no py-spy (FLOWRUN_PY_SPY, build/py-spy from scripts/test --phase deps, or PATH)",
                  flush=True)
            return
        steps = [{"name": "train", "run": [PY, os.path.join(TORCH, "rank_stuck.py")], "stall_timeout": "3s",
                  "parallel": {"cpus": 4, "nodes": 2}}]
        spec = self.write_spec(d, cluster, steps)
        live = self.start([*prefix, self.flowrun, spec, "--run-dir", os.path.join(d, "run"), "--grace", str(GRACE)],
                          "head", d, FLOWRUN_PY_SPY=py_spy_path)
        live.finish(240)
        run = Run(live, os.path.join(d, "run"))
        # From the stall's first line to the report's groups (the stacks, the stop, the ranks' exits): a figure.
        stalled, _ = live.wait_line(r"^flowrun: step 'train' stalled: .*; stopping the step$", 0, streams=("err",))
        grouped, _ = live.wait_line(r"^flowrun:   ranks 0, 1, 3 \(3 of 4\) are in ", 0, streams=("err",))
        after = None if stalled is None or grouped is None else round(grouped - stalled, 2)
        print(f"{label}: flowrun ended after {run.elapsed:.1f} s; the stacks' report {after} s after the stall line",
              flush=True)
        res = run.results()
        self.check(run.rc == 124 and res.get("outcome") == "stalled", f"{label}: the step stalls, flowrun exits 124",
                   "exit 124, outcome stalled", f"exit {run.rc}, outcome {res.get('outcome')}", run.detail())
        # Slurm may give the allocation any 2 of the cluster's nodes; ranks 0-1 share one, ranks 2-3 the other.
        nodes = {w.get("rank"): w.get("node") for w in res.get("ranks", [])}
        self.check(nodes.get(0) == nodes.get(1) != nodes.get(2) == nodes.get(3) and str(nodes.get(0)).startswith(
            "node"), f"{label}: 2 ranks on each of 2 nodes", "ranks 0, 1 on one node, ranks 2, 3 on the other",
            nodes, json.dumps(res, indent=1)[:3000])
        stacks = res.get("stacks") or {}
        groups = [(g.get("ranks"), g.get("where") or "", g.get("missing")) for g in stacks.get("groups", [])]
        self.check(stacks.get("source") == "py-spy" and len(groups) == 2 and groups[0][0] == [0, 1, 3]
                   and groups[0][1].startswith("all_reduce (rank_stuck.py:") and groups[1][0] == [2]
                   and re.fullmatch(self.LOAD_BATCH, groups[1][1]) is not None and groups[0][2] is None
                   and groups[1][2] is None,
                   f"{label}: results.json's stacks, by py-spy on both nodes: ranks 0, 1, 3 in all_reduce, rank 2 "
                   "in load_batch", "source py-spy; [0, 1, 3] all_reduce (rank_stuck.py:N); [2] load_batch "
                   "(rank_stuck.py:17 or 18)", json.dumps(stacks), run.detail())
        report = (r"^flowrun:   ranks 0, 1, 3 \(3 of 4\) are in all_reduce \(rank_stuck\.py:\d+\); "
                  rf"rank 2 is in {self.LOAD_BATCH}$")
        said = [line for line in run.stderr.splitlines() if line.startswith("flowrun:")]
        named = re.search(report, run.stderr, re.M)
        self.check(named is not None and "cannot take" not in run.stderr,
                   f"{label}: the report names rank 2 at its file:line and the other three in all_reduce",
                   report, "\n".join(said), run.detail())
        print(f"{label}: {named.group(0) if named else 'no report of the stacks'}", flush=True)
        texts = {}
        for r in range(4):
            path = os.path.join(run.run_dir, "train", f"rank{r}", "stack.txt")
            texts[r] = read_text(path) if os.path.exists(path) else f"<no {path}>"
        self.check(all(t.startswith("Process ") and '"MainThread"' in t for t in texts.values())
                   and "load_batch (" in texts[2] and all("all_reduce (" in texts[r] for r in (0, 1, 3)),
                   f"{label}: four stack.txt at the head, each py-spy's dump from the rank's node",
                   "rank0..rank3/stack.txt: py-spy's dump; rank 2's in load_batch, the others' in all_reduce",
                   "\n".join(f"--- rank {r}\n{t[:1500]}" for r, t in texts.items()))
        used = sorted(n[len("used."):] for n in os.listdir(d) if n.startswith("used."))
        self.check(used == sorted({nodes.get(0), nodes.get(2)}),
                   f"{label}: each node's agent ran the py-spy FLOWRUN_PY_SPY names at the head",
                   sorted({str(nodes.get(0)), str(nodes.get(2))}), used)

    def test_stacks_srun(self):
        """salloc -N2: srun passes the head's environment, FLOWRUN_PY_SPY with it, on to the agents."""
        self.stuck_run("stacks_srun", {"engine": "slurm"}, prefix=["salloc", "-N2"])

    def test_stacks_ssh(self):
        """ssh to node1 and node2: the login's environment is not the head's; the head hands the agents its
        FLOWRUN_PY_SPY on their command line."""
        self.stuck_run("stacks_ssh", self.ssh_cluster(["node1", "node2"]))

    def test_stacks_venv(self):
        """py-spy installed into the step's virtual environment (its bin/, where `pip install py-spy` puts it), the
        spec's python: naming that venv's python3, and no FLOWRUN_PY_SPY: no ssh login activates the venv, and each
        agent finds py-spy beside the Python its ranks run. Rank 3 fails on node2; the stacks of ranks 0-2, on both
        nodes, are py-spy's."""
        d = self.workspace("stacks_venv")
        venv = os.path.join(d, ".venv")
        subprocess.run([PY, "-m", "venv", "--without-pip", venv], check=True)
        if self.noting_py_spy(d, os.path.join(venv, "bin", "py-spy")) is None:
            print("stacks_venv: SKIP: no py-spy (FLOWRUN_PY_SPY, build/py-spy from scripts/test --phase deps, or PATH)",
                  flush=True)
            return
        ready = self.ready_dir(d)
        steps = [{"name": "train", "parallel": {"nodes": 2},
                  "run": ["python3", WORKER, "fail", "--rank", "3", "--code", "3", "--ready", ready]}]
        spec = self.write_spec(d, self.ssh_cluster(["node1", "node2"], gpus_per_node=2), steps,
                               python=".venv/bin/python3")
        run = self.head(spec, "head", "--fake-gpus", "2", "--grace", str(GRACE))
        print(f"stacks_venv: flowrun ended after {run.elapsed:.1f} s", flush=True)
        self.check(run.rc == 3, "stacks_venv: flowrun exits with rank 3's code", 3, run.rc, run.detail())
        stacks = run.results().get("stacks") or {}
        groups = [(g.get("ranks"), g.get("where") or "") for g in stacks.get("groups", [])]
        self.check(stacks.get("source") == "py-spy" and len(groups) == 1 and groups[0][0] == [0, 1, 2]
                   and groups[0][1].startswith("cmd_fail (node_worker.py:") and "cannot take" not in run.stderr,
                   "stacks_venv: results.json: ranks 0-2 of both nodes by py-spy, found beside the venv's python3",
                   "source py-spy; [0, 1, 2] cmd_fail (node_worker.py:N); no 'cannot take' line",
                   json.dumps(stacks), run.detail())
        used = sorted(n[len("used."):] for n in os.listdir(d) if n.startswith("used."))
        self.check(used == ["node1", "node2"], "stacks_venv: each node's agent ran the venv's py-spy",
                   ["node1", "node2"], used)

    def test_stacks_missing(self):
        """py-spy on node1 only: FLOWRUN_PY_SPY at the head names a file in node1's own /tmp (each node has its own),
        which node2 lacks. Rank 3 fails on node2 while the others sleep: each agent takes its live ranks' stacks
        before the stop's signals, node1's with py-spy, node2's from the kernel. The head says once that node2
        has no py-spy; node2's agent says why on its console, which ssh brings to the head's; node1's says
        nothing."""
        found = py_spy()
        if found is None:
            print("stacks_missing: SKIP: no py-spy (FLOWRUN_PY_SPY, build/py-spy from scripts/test --phase deps, "
                  "or PATH)", flush=True)
            return
        d = self.workspace("stacks_missing")
        ready = self.ready_dir(d)
        private = f"/tmp/{self.name}-py-spy/py-spy"
        self.py_spies.append(private)
        p = subprocess.run(self.c.on(1, ["install", "-D", "-m", "0755", found, private]), capture_output=True,
                           text=True)
        if not self.check(p.returncode == 0, "stacks_missing: py-spy copied into node1's /tmp", 0, p.returncode,
                          p.stderr):
            return
        try:
            steps = [{"name": "train", "parallel": {"nodes": 2},
                      "run": [PY, WORKER, "fail", "--rank", "3", "--code", "3", "--ready", ready]}]
            spec = self.write_spec(d, self.ssh_cluster(["node1", "node2"], gpus_per_node=2), steps)
            run = self.head(spec, "head", "--fake-gpus", "2", "--grace", str(GRACE), FLOWRUN_PY_SPY=private)
        finally:
            subprocess.run(self.c.on(1, ["rm", "-rf", os.path.dirname(private)]))
        print(f"stacks_missing: flowrun ended after {run.elapsed:.1f} s", flush=True)
        self.check(run.rc == 3, "stacks_missing: flowrun exits with rank 3's code", 3, run.rc, run.detail())
        stacks = run.results().get("stacks") or {}
        groups = [(g.get("ranks"), g.get("where") or "") for g in stacks.get("groups", [])]
        self.check(set(str(stacks.get("source")).split(" and ")) == {"py-spy", "kernel"} and len(groups) == 2
                   and groups[0][0] == [0, 1] and groups[0][1].startswith("cmd_fail (node_worker.py:")
                   and groups[1][0] == [2] and "(state " in groups[1][1],
                   "stacks_missing: results.json: node1's ranks by py-spy, node2's live rank by the kernel",
                   "source py-spy and kernel; [0, 1] cmd_fail (node_worker.py:N); [2] KERNEL (state S...)",
                   json.dumps(stacks), run.detail())
        head_line = ("flowrun: cannot take the ranks' Python stacks: no py-spy on node node2 (install it: pip install "
                     "py-spy); saying what the kernel tells instead")
        agent_line = (f"[node2 ssh] flowrun: cannot take the ranks' Python stacks: FLOWRUN_PY_SPY={private} is not an "
                      "executable file (install it: pip install py-spy); saying what the kernel tells instead")
        said = [line for line in run.stderr.splitlines() if "cannot take the ranks' Python stacks" in line]
        self.check(sorted(said) == sorted([head_line, agent_line]),
                   "stacks_missing: the head says once that node2 has no py-spy; node2's agent says why, node1's "
                   "nothing", [head_line, agent_line], said, run.detail())
        texts = {r: read_text(os.path.join(run.run_dir, "train", f"rank{r}", "stack.txt")) for r in range(3)}
        self.check(texts[0].startswith("Process ") and texts[1].startswith("Process ")
                   and texts[2].startswith("(py-spy missing: no py-spy on node node2)\nkernel: "),
                   "stacks_missing: stack.txt: py-spy's dump for ranks 0 and 1, the kernel's words for rank 2",
                   "Process ... ; Process ... ; (py-spy missing: no py-spy on node node2)",
                   "\n".join(f"--- rank {r}\n{t[:800]}" for r, t in texts.items()))

    def find_agent(self, node):
        for pid in self.c.pids_on(node):
            argv = proc_read(pid, "cmdline").split("\0")
            if len(argv) > 1 and os.path.basename(argv[0]) == "flowrun" and argv[1] == "agent" \
                    and proc_state(pid) not in ("Z", ""):
                return pid
        return None

    def sleeping_job(self, name, cluster, where, *options, nodes=2):
        d = self.workspace(name)
        ready = self.ready_dir(d)
        steps = [{"name": "train", "parallel": {"nodes": nodes},
                  "run": [PY, WORKER, "sleep", "60", "--ready", ready]}]
        spec = self.write_spec(d, cluster, steps)
        run_dir = os.path.join(d, "run")
        live = self.start([self.flowrun, spec, "--run-dir", run_dir, "--fake-gpus", "2", "--grace", str(GRACE),
                           *options], where, d)
        started = self.wait_ready(ready, nodes * 2, live)
        self.check(started, f"{name}: every rank starts", f"{nodes * 2} ready files",
                   sorted(os.listdir(ready)), "" if started else live.detail())
        return live, run_dir, started

    def test_agent_kill(self):
        """kill -9 of node2's agent: the head reports it at once (< 100 ms)."""
        want = re.compile(r"flowrun: step 'train': node node2 \(node rank 1 of 2\) lost: " + AGENT_CLOSED)
        delays, details = [], []
        for attempt in range(3):  # a busy 2-core machine can stall one attempt
            live, run_dir, started = self.sleeping_job(f"agent_kill{attempt}", self.ssh_cluster(
                ["node1", "node2"], gpus_per_node=2), "head")
            if not started:
                return
            pid = self.find_agent(2)
            if not self.check(pid is not None, "agent kill: the agent on node2 is running", "a `flowrun agent`",
                              [proc_read(p, "cmdline").replace("\0", " ") for p in self.c.pids_on(2)]):
                return
            killed = time.monotonic()
            os.kill(pid, signal.SIGKILL)
            # The time comes from the first line that says so, whatever its wording.
            seen, _ = live.wait_line(r"node node2\b.*lost: " + AGENT_CLOSED, 20, streams=("err",))
            rc = live.finish(30)
            delays.append(None if seen is None else round(seen - killed, 3))
            details.append(live.detail())
            if attempt == 0:
                lines = [line for line in live.text("err").splitlines() if "lost" in line]
                self.check(any(want.fullmatch(line) for line in lines), "agent kill: the report names the lost node",
                           want.pattern, "\n".join(lines) or "no line saying 'lost'", live.detail())
                self.check(rc == 1, "agent kill: flowrun exits 1 (a lost node)", 1, rc)
            if seen is None or seen - killed <= 0.1:
                break
            self.assert_nothing_left(f"agent kill (attempt {attempt + 1})")
        measured = [x for x in delays if x is not None]
        self.check(measured and min(measured) <= 0.1,
                   "agent kill: noticed within 100 ms of the kill (best of up to 3 attempts)",
                   "<= 0.1 s", f"{delays} s", details[-1] if details else "")
        print(f"agent kill: noticed after {delays} s", flush=True)

    def test_link_down(self):
        """node2's network cable out: the head reports it within the heartbeat timeout (1 s) + slack."""
        cluster = self.ssh_cluster(["node1", "node2"], gpus_per_node=2, heartbeat_timeout=1)
        live, run_dir, started = self.sleeping_job("link_down", cluster, "head")
        if not started:
            live.kill()
            live.finish(5)
            return
        # The silence as the head measured it: at least the timeout.
        want = (r"^flowrun: step 'train': node node2 \(node rank 1 of 2\) lost: no heartbeat for (\d+\.\d) s "
                r"\(cluster\.heartbeat_timeout: 1 s\)$")
        cut = time.monotonic()
        subprocess.run([self.c.script, "link", "2", "down"], check=True)
        try:
            seen, _ = live.wait_line(r"node node2\b.*lost: no heartbeat", 15, streams=("err",))
            # Cut off, node2 must clean up by itself: its agent hears no heartbeat
            # either, stops its ranks and exits, all before the link is back.
            # A deadline for something that must not happen (node2 waiting for the link forever), far
            # above the expected 1 s + the grace: the figure is printed, and scripts/bench measures it.
            limit = 10 * (1 + GRACE)
            while self.node_processes(2) and time.monotonic() - cut < limit:
                time.sleep(0.05)
            alone = self.node_processes(2)
            cleaned = round(time.monotonic() - cut, 3)
            self.check(not alone, "link down: cut off, node2's agent stops its ranks and exits by itself",
                       f"nothing of flowrun on node2 within {limit:g} s of the cut", alone)
        finally:
            subprocess.run([self.c.script, "link", "2", "up"], check=True)
        rc = live.finish(30)
        delay = None if seen is None else round(seen - cut, 3)
        res = json.load(open(os.path.join(run_dir, "train", "results.json")))
        statuses = {w.get("node"): [] for w in res.get("ranks", [])}
        for w in res.get("ranks", []):
            statuses[w.get("node")].append(w.get("status"))
        self.check(res.get("outcome") == "failed" and statuses.get("node2") == ["lost", "lost"]
                   and "succeeded" not in statuses.get("node1", []),
                   "link down: results.json: the step failed, node2's ranks lost, none claimed to succeed",
                   "outcome failed, node2 [lost, lost]", f"{res.get('outcome')} {statuses}")
        lines = [line for line in live.text("err").splitlines() if "lost" in line]
        said = [m for m in map(re.compile(want).match, lines) if m]
        self.check(said and 1.0 <= float(said[0].group(1)) <= 2.5, "link down: the report names the silent node",
                   want.replace("(\\d+\\.\\d)", "<1.0 to 2.5>"), "\n".join(lines) or "no line saying 'lost'",
                   live.detail())
        if seen is not None:
            self.check(0.9 <= delay <= 2.5, "link down: noticed after the heartbeat timeout (1 s), within 2.5 s",
                       "0.9 s <= delay <= 2.5 s", f"{delay} s", live.detail())
        self.check(rc == 1, "link down: flowrun exits 1 (a lost node)", 1, rc, live.detail())
        print(f"link down: noticed after {delay} s; node2 had stopped everything {cleaned} s after the cut",
              flush=True)

    # --- a lost node replaced by a spare (parallel.spare_nodes) ------------------------

    def spare_run(self, label, cluster, fault, parallel=None, check=("2",)):
        """A 2-node DDP step of resume_train.py (a checkpoint every 2 of 10 steps in the shared workdir) with
        spare_nodes: 1, and its join's replay. fault: None (an uninterrupted run), "kill" (SIGKILL to the
        agent of node rank 1 once step 4's checkpoint is saved) or "link" (that node's link cut then, and
        restored once the run ended). Returns (Run, the lost node's name or None)."""
        d = self.workspace(label)
        steps = [
            {"name": "train", "forensics": "off",
             "run": [PY, os.path.join(TORCH, "resume_train.py"), "--steps", "10", "--every", "2", "--checkpoint",
                     "ckpt.pt", "--hold-at", "4" if fault else "-1"],
             "parallel": parallel or {"cpus": 2, "nodes": 2, "spare_nodes": 1}, "outputs": "model.pt"},
            {"name": "check", "join": "train",
             "run": [PY, os.path.join(TORCH, "check_model.py"), "${steps.train.outputs}/model.pt", *check]},
        ]
        spec = self.write_spec(d, cluster, steps)
        run_dir = os.path.join(d, "run")
        live = self.start([self.flowrun, spec, "--run-dir", run_dir, "--grace", str(GRACE)], "head", d)
        lost, cut = None, None
        try:
            if fault:
                held = [os.path.join(d, f"held.{r}") for r in (0, 1)]
                deadline = time.monotonic() + 240
                while not all(map(os.path.exists, held)) and live.p.poll() is None and time.monotonic() < deadline:
                    time.sleep(0.05)
                if not self.check(all(map(os.path.exists, held)), f"{label}: both ranks save step 4's checkpoint",
                                  "held.0 and held.1", sorted(os.listdir(d)), live.detail()):
                    live.kill()
                    live.finish(5)
                    return Run(live, run_dir), None
                agent = open(held[1]).read().split()[1]  # FLOWRUN_AGENT_ID: <node>-<pid>-<nonce>
                lost, pid = agent.rsplit("-", 2)[0], int(agent.rsplit("-", 2)[1])
                if fault == "kill":
                    os.kill(pid, signal.SIGKILL)
                else:
                    cut = int(lost[len("node"):])
                    subprocess.run([self.c.script, "link", str(cut), "down"], check=True)
            live.finish(300)
        finally:
            if cut is not None:
                subprocess.run([self.c.script, "link", str(cut), "up"], check=True)
        return Run(live, run_dir), lost

    def check_spare_run(self, label, run, lost, reference):
        self.check(run.rc == 0, f"{label}: the step finishes on the spare and the join passes", 0, run.rc,
                   run.detail())
        want = "[check] model.pt: 2 workers, 10 steps of SGD, matches the replay"
        self.check(want in run.stdout, f"{label}: the join loads the final model, which matches a replay", want,
                   run.stdout[-2000:])
        resumed = [r for r in (0, 1) if f"rank {r}: attempt 1 resumes at step 4" in run.stdout]
        self.check(resumed == [0, 1], f"{label}: every rank of attempt 1 resumes from step 4's checkpoint",
                   [0, 1], resumed, run.stdout[-3000:])
        attempts = run.results().get("attempts", [])
        replaced = [a.get("replaced_nodes") for a in attempts]
        spare = replaced[1][0].get("spare") if len(replaced) == 2 and replaced[1] else None
        self.check(len(replaced) == 2 and replaced[0] == [] and replaced[1] == [
            {"node_rank": 1, "lost": lost, "spare": spare}] and spare not in (None, lost),
            f"{label}: results.json names the lost node and the spare that took its place, attempt by attempt",
            f"[[], [{{node_rank: 1, lost: {lost}, spare: <another node>}}]]", replaced)
        same = subprocess.run(
            [PY, "-c", "import sys, torch; a, b = (torch.load(p)['model'] for p in sys.argv[1:]); "
             "sys.exit(0 if a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a) else 1)",
             os.path.join(run.run_dir, "train", "outputs", "model.pt"),
             os.path.join(reference.run_dir, "train", "outputs", "model.pt")],
            env=self.env(), capture_output=True, text=True)
        self.check(same.returncode == 0, f"{label}: the final weights equal the uninterrupted run's",
                   "torch.equal for every tensor", same.returncode, same.stderr[-2000:])

    def check_spare_page(self, label, run, lost):
        """The run's page (flowrun report), opened in chromium: one row per rank, node rank 1's ranks lost
        with the lost node in attempt 0, the spare seated in its place, and no error in the browser."""
        binary = chromium()
        if not self.check(binary is not None, f"{label}: chromium is installed for the run's page",
                          "chromium on PATH", None):
            return
        made = subprocess.run([self.flowrun, "report", run.run_dir], capture_output=True, text=True, timeout=60)
        page = made.stdout.strip()
        if not self.check(made.returncode == 0 and os.path.isfile(page), f"{label}: flowrun report writes the page",
                          "rc 0 and the page's path", made.returncode, made.stderr):
            return
        browser = Browser(binary, self.workspace(f"{label}_browser"), timeout=60)
        dom, console, rc = browser.open(page)
        self.check(rc == 0 and console == [], f"{label}: chromium opens the page with nothing on its console",
                   "rc 0, no console line", rc, "\n".join(console))
        res = run.results()
        rows = dom.find_all("details", cls="rank")
        first = {int(r.attrs["data-rank"]): r.find_all("rect", cls="bar")[0].attrs["class"] for r in rows}
        workers = res["attempts"][0]["workers"]
        want = {w["rank"]: "bar k-lost" if w["node"] == lost else "bar k-stopped" for w in workers}
        got = {r: c.replace(" culprit", "") for r, c in first.items()}
        self.check(len(rows) == len(workers) and got == want and "bar k-lost" in want.values(),
                   f"{label}: the page's attempt 0: node rank 1's ranks lost, "
                   "the others stopped", want, got)
        spare = res["attempts"][1]["replaced_nodes"][0]["spare"]
        seated = [s_.all_text() for s_ in dom.find_all("span", cls="spare")]
        self.check(seated == [f"node 1: {lost} lost, spare {spare} seated in its place"],
                   f"{label}: the page names the lost node and the spare seated in its place",
                   f"node 1: {lost} lost, spare {spare} seated", seated)
        nodes = {n_.attrs["data-node"] for n_ in dom.find_all("div", cls="node")}
        self.check(spare in nodes and lost not in nodes, f"{label}: the ranks are grouped by the node they last ran on",
                   f"the spare {spare}, not {lost}", sorted(nodes))
        os.makedirs(self.screenshots, exist_ok=True)
        png = os.path.join(self.screenshots, f"{label}.png")
        self.check(browser.screenshot(page, png), f"{label}: chromium takes a screenshot of the page", png, None)

    def test_spare(self):
        """spare_nodes: 1 over ssh (node1, node2, spare node3) and under srun (3 nodes of the 4): node rank 1's
        agent SIGKILLed, and over ssh its link cut, once step 4's checkpoint is saved: the spare takes its node
        rank, every rank resumes from the checkpoint and the final weights equal an uninterrupted run's."""
        ssh = self.ssh_cluster(["node1", "node2", "node3"], heartbeat_timeout=1)
        reference, _ = self.spare_run("spare_reference", ssh, None)
        if not self.check(reference.rc == 0, "spare: the uninterrupted run succeeds", 0, reference.rc,
                          reference.detail()):
            return
        for label, cluster, fault in (
                ("spare_ssh_kill", ssh, "kill"),
                ("spare_ssh_link", ssh, "link"),
                ("spare_srun_kill", {"engine": "slurm", "address": self.c.addrs["head"], "heartbeat_timeout": 1},
                 "kill")):
            run, lost = self.spare_run(label, cluster, fault)
            if lost is None:
                continue
            self.check_spare_run(label, run, lost, reference)
            if cluster["engine"] == "slurm":
                self.check_spare_page(label, run, lost)
            self.assert_nothing_left(label)

    def test_elastic(self):
        """nodes: "1:2" and no spare, over ssh (node1, node2) and under srun: node rank 1's agent SIGKILLed, and
        over ssh its link cut, once step 4's checkpoint is saved: the step goes on on node rank 0 alone,
        WORLD_SIZE halved, every rank resuming from the checkpoint; the final weights are those of a replay
        with 2 workers for steps 0-3 and 1 after."""
        parallel = {"cpus": 2, "nodes": "1:2"}
        for label, cluster, fault in (
                ("elastic_ssh_kill", self.ssh_cluster(["node1", "node2"], heartbeat_timeout=1), "kill"),
                ("elastic_ssh_link", self.ssh_cluster(["node1", "node2"], heartbeat_timeout=1), "link"),
                ("elastic_srun_kill", {"engine": "slurm", "address": self.c.addrs["head"], "heartbeat_timeout": 1},
                 "kill")):
            run, lost = self.spare_run(label, cluster, fault, parallel, ("1", "4:2"))
            if lost is None:
                continue
            self.check(run.rc == 0, f"{label}: the step goes on with the node left and the join passes", 0, run.rc,
                       run.detail())
            want = "[check] model.pt: 2 workers for steps 0-3, then 1 workers, 10 steps of SGD, matches the replay"
            self.check(want in run.stdout, f"{label}: the join loads the final model: 2 workers to step 4's "
                       "checkpoint, 1 after", want, run.stdout[-2000:])
            self.check("rank 0: attempt 1 resumes at step 4" in run.stdout and
                       "rank 1: attempt 1" not in run.stdout,
                       f"{label}: attempt 1 has rank 0 alone, and it resumes from step 4's checkpoint",
                       "rank 0: attempt 1 resumes at step 4", run.stdout[-3000:])
            gone_on = re.search(r"^flowrun: step 'train': the step goes on on 1 node \((node\d)\), without "
                                rf"{lost}: WORLD_SIZE 1 \(nodes: \"1:2\"\)$", run.stderr, re.M)
            self.check(gone_on is not None and gone_on.group(1) != lost,
                       f"{label}: the head says it goes on without the lost node, WORLD_SIZE halved",
                       f"... goes on on 1 node (<the other>), without {lost}: WORLD_SIZE 1 ...",
                       "\n".join(l for l in run.stderr.splitlines() if l.startswith("flowrun")))
            attempts = run.results().get("attempts", [])
            got = [(a.get("world_size"), a.get("dropped_nodes"), a.get("restart_reason")) for a in attempts]
            self.check(got == [(2, [], 'the step goes on with the node left (nodes: "1:2")'), (1, [lost], None)],
                       f"{label}: results.json: attempt 0 on 2 ranks, attempt 1 on 1 without the lost node",
                       f"[(2, [], ...goes on...), (1, [{lost}], None)]", got)
            self.assert_nothing_left(label)

    def test_head_kill(self):
        """kill -9 of the head: every agent notices its connection closed and stops its ranks;
        nothing is left on any node (over ssh and under srun)."""
        for engine, cluster, where in (
                ("ssh", self.ssh_cluster(["node1", "node2"], gpus_per_node=2), "head"),
                ("slurm", {"engine": "slurm", "gpus_per_node": 2, "address": self.c.addrs["head"]}, None)):
            live, run_dir, started = self.sleeping_job(f"head_kill_{engine}", cluster, where)
            if not started:
                continue
            killed = time.monotonic()
            os.kill(live.p.pid, signal.SIGKILL)  # the exec chain of `cluster.sh exec` keeps the pid
            live.finish(5)
            limit = 10 * GRACE  # a generous deadline for "never": the figure is printed below
            while True:
                left = self.flowrun_processes()
                took = time.monotonic() - killed
                if not left or took > limit:
                    break
                time.sleep(0.05)
            self.check(not left, f"head kill ({engine}): every agent and rank ends without the head",
                       f"nothing of flowrun left within {limit:g} s", left)
            print(f"head kill ({engine}): everything gone {took:.2f} s after the head", flush=True)

    def test_scancel(self):
        """scancel of the job srun made: the agents get SIGTERM from Slurm; one report, everything stops."""
        live, run_dir, started = self.sleeping_job(
            "scancel", {"engine": "slurm", "gpus_per_node": 2, "address": self.c.addrs["head"]}, None)
        if not started:
            live.kill()
            live.finish(5)
            return
        # Running jobs: one of an earlier test may still be completing (CG).
        jobs = subprocess.run(["squeue", "-h", "-t", "R", "-o", "%i"], capture_output=True, text=True,
                              env=self.env()).stdout.split()
        if not self.check(len(jobs) == 1, "scancel: the step runs as one Slurm job", "one running job", jobs):
            live.kill()
            live.finish(5)
            return
        cancelled = time.monotonic()
        subprocess.run(["scancel", jobs[0]], check=True, env=self.env())
        rc = live.finish(30)
        took = time.monotonic() - cancelled
        want = (r"^flowrun: .*node node[0-9]+: its agent received SIGTERM from Slurm \(scancel, preemption or the "
                r"job's time limit\)$")
        self.check(re.search(want, live.text("err"), re.M) is not None, "scancel: the report says Slurm stopped a node",
                   want, "\n".join(l for l in live.text("err").splitlines() if l.startswith("flowrun")),
                   live.detail())
        res = Run(live, run_dir).results()
        self.check(res.get("outcome") == "interrupted", "scancel: results.json: the step was interrupted",
                   "interrupted", res.get("outcome", res),
                   f"{json.dumps(res, indent=1)[:3000]}\n{live.detail()}")
        self.check(rc not in (0, "timeout"), "scancel: flowrun fails", "a non-zero exit", rc)
        print(f"scancel: flowrun ended {took:.2f} s after scancel (KillWait 5 s, grace {GRACE:g} s)", flush=True)

    def slurm(self, *argv):
        """A Slurm command on the head; its stdout."""
        return subprocess.run(self.c.on("head", list(argv)), capture_output=True, text=True, env=self.env()).stdout

    def wait_files(self, d, names, job, limit=60):
        """Whether every file of `names` is in d within `limit` s (False at once once the job is gone)."""
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if all(os.path.exists(os.path.join(d, n)) for n in names):
                return True
            if not self.slurm("squeue", "-h", "-j", job, "-o", "%T").strip():
                return False
            time.sleep(0.1)
        return False

    def test_requeue(self):
        """sbatch --requeue, then scontrol requeue while train runs on both nodes: the batch script's
        `flowrun SPEC` runs again (SLURM_RESTART_COUNT=1) and resumes the run: prepare is kept, train
        restarts on both nodes with TORCHELASTIC_RESTART_COUNT 1, and the join gets every rank's output."""
        d = self.workspace("requeue")
        rank = ('echo "$(hostname)" > "$0/count.$RANK.$TORCHELASTIC_RESTART_COUNT"; '
                'while ! test -f "$0/go"; do sleep 0.1; done; echo "rank $RANK" > "$FLOWRUN_OUTPUT_DIR/w.txt"')
        steps = [{"name": "prepare", "run": ["/bin/sh", "-c", 'echo prepared >> "$0/prepare.count"', d]},
                 {"name": "train", "run": ["/bin/sh", "-c", rank, d], "parallel": {"nodes": 2}, "collect": "all"},
                 {"name": "evaluate", "join": "train", "run": ["/bin/sh", "-c", 'echo inputs: $(ls "$FLOWRUN_INPUTS")']}]
        spec = self.write_spec(d, {"engine": "slurm", "gpus_per_node": 2}, steps)
        out = os.path.join(d, "job.out")
        with open(os.path.join(d, "job.sh"), "w") as f:
            f.write(f"#!/bin/bash\nexec {shlex.quote(self.flowrun)} {shlex.quote(spec)} --fake-gpus 2 --grace {GRACE}\n")
        submitted = self.slurm("sbatch", "--requeue", "-N2", "--gpus-per-node=2", "-o", out, "--open-mode=append",
                               "-D", d, os.path.join(d, "job.sh"))
        m = re.search(r"Submitted batch job (\d+)", submitted)
        if not self.check(m is not None, "requeue: sbatch takes the job", "Submitted batch job N", submitted):
            return
        job = m.group(1)
        console = lambda: open(out).read() if os.path.exists(out) else f"<no {out}>"  # noqa: E731
        try:
            first = [f"count.{r}.0" for r in range(4)]
            if not self.check(self.wait_files(d, first, job), "requeue: train's 4 ranks run", first,
                              sorted(os.listdir(d)), console()):
                return
            self.slurm("scontrol", "requeue", job)
            # Slurm holds a requeued job back for 2 minutes (its BeginTime); start it as soon as it is pending.
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and self.slurm("squeue", "-h", "-j", job, "-o", "%T").strip() != "PENDING":
                time.sleep(0.1)
            # slurmd refuses to launch a job whose credential dates from the second in which its last one
            # was revoked ("Job credential revoked": the job then fails at once), which is why Slurm holds
            # a requeued job back. Start it once its nodes have finished completing and that second is over.
            while time.monotonic() < deadline and self.slurm("sinfo", "-h", "-t", "completing", "-o", "%N").strip():
                time.sleep(0.05)
            completed = int(time.time())
            while int(time.time()) <= completed:
                time.sleep(0.05)
            self.slurm("scontrol", "update", f"JobId={job}", "StartTime=now")
            again = [f"count.{r}.1" for r in range(4)]
            if not self.check(self.wait_files(d, again, job), "requeue: train's 4 ranks run again, with "
                              "TORCHELASTIC_RESTART_COUNT 1", again, sorted(os.listdir(d)), console()):
                return
            open(os.path.join(d, "go"), "w").close()
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and self.slurm("squeue", "-h", "-j", job, "-o", "%T").strip():
                time.sleep(0.2)
        finally:
            if self.slurm("squeue", "-h", "-j", job, "-o", "%T").strip():
                self.slurm("scancel", job)
        text = console()
        shown = re.search(r"JobState=(\S+)", self.slurm("scontrol", "show", "job", job))
        state = shown.group(1) if shown else "not shown"
        self.check(state.startswith("COMPLETED"), "requeue: the job completes", "COMPLETED", state, text[-6000:])
        want = (rf"^flowrun: resuming run (\S+): Slurm job {job} was requeued \(SLURM_RESTART_COUNT=1\); kept "
                r"'prepare'; 'train' restarts at TORCHELASTIC_RESTART_COUNT=1$")
        said = re.search(want, text, re.M)
        self.check(said is not None, "requeue: the restarted job's flowrun says which run it resumes and why", want,
                   "\n".join(line for line in text.splitlines() if line.startswith("flowrun:")), text[-6000:])
        prepared = read_text(os.path.join(d, "prepare.count"))
        self.check(prepared == "prepared\n", "requeue: prepare ran once", "prepared", prepared)
        # Slurm may place the requeued job on any 2 of the cluster's nodes: 2 ranks on each of 2 nodes.
        hosts = sorted(read_text(os.path.join(d, f"count.{r}.1")).strip() for r in range(4))
        per_node = sorted(collections.Counter(hosts).values())
        self.check(per_node == [2, 2] and all(h.startswith("node") for h in hosts) and
                   not any(os.path.exists(os.path.join(d, f"count.{r}.2")) for r in range(4)),
                   "requeue: train restarted once, 2 ranks on each of 2 nodes", "two nodes, 2 ranks each", hosts)
        self.check("[evaluate] inputs: rank0 rank1 rank2 rank3\n" in text, "requeue: the join gets every rank's output",
                   "[evaluate] inputs: rank0 rank1 rank2 rank3", [l for l in text.splitlines() if "evaluate" in l])
        if said is None:
            return
        runs = os.path.join(d, ".flowrun", "runs")
        new = [r for r in os.listdir(runs) if r not in ("latest", said.group(1))]
        record = json.loads(read_text(os.path.join(runs, new[0], "run.json")) or "{}") if len(new) == 1 else {}
        self.check((record.get("resumed_from") or {}).get("by") == "requeue" and record.get("exit_code") == 0 and
                   record.get("slurm") == {"job_id": job, "restart_count": 1},
                   "requeue: the new run.json: resumed after a requeue, in the job's restart 1, succeeded",
                   f"resumed_from by requeue, exit 0, slurm {{job_id: {job}, restart_count: 1}}",
                   json.dumps(record)[:2000] or new)

    def test_wrong_token(self):
        """Manual engine: an agent with a wrong token is refused, both sides say so; the right ones join."""
        d = self.workspace("wrong_token")
        steps, _ = self.env_steps(2, "any", slurm=False)
        spec = self.write_spec(d, {"engine": "manual", "gpus_per_node": 2, "join_timeout": 60}, steps)
        run_dir = os.path.join(d, "run")
        head = self.start([self.flowrun, spec, "--run-dir", run_dir, "--fake-gpus", "2"], "head", d)
        _, m = head.wait_line(r"^flowrun:   (\S+ agent .*)$", 30)
        header = "flowrun: waiting for 2 agents; on each node run (add --node-rank N to choose its rank):\n"
        self.check(header in head.text("err") + head.text("out"), "wrong token: the manual engine says what to do",
                   header.strip(), "\n".join(l for l in head.text("err").splitlines() if l.startswith("flowrun")))
        if not self.check(m is not None, "wrong token: the manual engine prints the agent's command",
                          "flowrun:   FLOWRUN agent --rdzv-endpoint ADDR:PORT --token-file FILE", "no such line",
                          head.detail()):
            return
        command = shlex.split(m.group(1))
        options = dict(zip(command[2::2], command[3::2]))
        binary, endpoint, token_file = command[0], options.get("--rdzv-endpoint"), options.get("--token-file")
        self.check(binary == self.real_flowrun or binary == self.flowrun, "wrong token: the command names this binary",
                   self.real_flowrun, binary)
        self.check(endpoint is not None and options.get("--fake-gpus") == "2",
                   "wrong token: the command has the endpoint and passes --fake-gpus on",
                   "--rdzv-endpoint ADDR:PORT --fake-gpus 2", m.group(1))
        self.check(token_file == os.path.join(run_dir, "train", "agent.token"),
                   "wrong token: the token file is in the run directory", os.path.join(run_dir, "train", "agent.token"),
                   token_file)
        if endpoint is None or token_file is None:
            return
        mode = oct(os.stat(token_file).st_mode & 0o777) if os.path.exists(token_file) else "missing"
        self.check(mode == "0o600", "wrong token: the token file is private", "0o600", mode)
        wrong = os.path.join(d, "wrong.token")
        with open(os.open(wrong, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write("0123456789abcdef0123456789abcdef\n")
        wrong_command = [wrong if word == token_file else word for word in command]
        plain = {k: v for k, v in self.env().items() if not k.startswith("SLURM_")}
        p = subprocess.run(self.c.on(2, wrong_command), capture_output=True, text=True, timeout=30, env=plain)
        want_agent = "flowrun agent: the head refused this agent: wrong token"
        self.check(p.returncode == 1 and want_agent in p.stderr, "wrong token: the agent exits 1 and says why",
                   f"exit 1, {want_agent!r}", f"exit {p.returncode}, {p.stderr.strip()!r}")
        want_head = f"flowrun: step 'train': refused an agent from {self.c.addrs['node2']} (node2): wrong token"
        seen, _ = head.wait_line("^" + re.escape(want_head) + "$", 10, streams=("err",))
        self.check(seen is not None, "wrong token: the head logs the refusal with the agent's address", want_head,
                   "\n".join(l for l in head.text("err").splitlines() if l.startswith("flowrun")))
        agents = []
        for node in (1, 2):
            agents.append(Live(self.c.on(node, command), d, plain))
        head.finish(60)
        run = Run(head, run_dir)
        self.check_env_run("wrong token: then the right agents join and the step runs", run, 2)
        for node, agent in zip((1, 2), agents):
            arc = agent.finish(15)
            self.check(arc == 0, f"wrong token: the agent on node{node} exits 0 after an orderly end", 0, arc,
                       agent.detail())

    def test_symlink(self):
        """A rank on node2 leaves a symbolic link to /etc/passwd in FLOWRUN_OUTPUT_DIR: the upload is refused."""
        d = self.workspace("symlink")
        steps = [{"name": "train", "parallel": {"nodes": 2}, "collect": "all",
                  "run": [PY, WORKER, "symlink", "--rank", "2"]}]
        spec = self.write_spec(d, self.ssh_cluster(["node1", "node2"], gpus_per_node=2), steps)
        run = self.head(spec, "head", "--fake-gpus", "2")
        self.check(run.rc == 1, "symlink: the step fails", 1, run.rc, run.detail())
        want = ("flowrun: step 'train' failed:\nflowrun:   node node2: rank 2: FLOWRUN_OUTPUT_DIR/passwd is a symlink to "
                "/etc/passwd, outside the output directory; refused\n")
        self.check(want in run.stderr, "symlink: the report names the node, the rank and the refused link",
                   want.strip(), "\n".join(l for l in run.stderr.splitlines() if l.startswith("flowrun")),
                   run.detail())
        with open("/etc/passwd", "rb") as f:
            secret = f.read()
        copies = []
        for top, _, files in os.walk(run.run_dir):
            for name in files:
                path = os.path.join(top, name)
                try:
                    if os.path.islink(path) or open(path, "rb").read() == secret:
                        copies.append(path)
                except OSError:
                    pass
        self.check(not copies, "symlink: nothing of /etc/passwd reaches the head's run directory", "no copy, no link",
                   copies)

    def test_private_workdir(self):
        """A workdir under /tmp, which every node has its own of: refused before any worker starts."""
        with temp_dir("flowrun-mn-", parent="/tmp") as tmp:
            started = self.workspace("private_workdir")
            steps = [{"name": "train", "parallel": {"nodes": 2}, "run": [PY, WORKER, "started", started]}]
            spec = self.write_spec(tmp, self.ssh_cluster(["node1", "node2"], gpus_per_node=2), steps)
            run = self.head(spec, "head", "--fake-gpus", "2")
            self.check(run.rc == 1, "private workdir: flowrun exits 1", 1, run.rc, run.detail())
            want = (rf"node (node1|node2) does not see the step's workdir {re.escape(tmp)} as "
                    rf"this host does \({re.escape(tmp)}/\.flowrun/node-check-\S+-train: No such file or directory\); "
                    r"ranks on every node run in the same workdir, so it must be a directory every node shares "
                    r"\(NFS, Lustre, \.\.\.\) at the same path, or set cluster.shared_workdir: false and list the "
                    r"files the ranks read in the step's inputs: \(the head then ships them to each node\)")
            # A line of the step's failure report.
            in_report = "\nflowrun: step 'train' failed:\n" in run.stderr and re.search(rf"^flowrun:   {want}$",
                                                                                       run.stderr, re.M)
            self.check(bool(in_report), "private workdir: the report says which node and why",
                       want, "\n".join(l for l in run.stderr.splitlines() if l.startswith("flowrun")), run.detail())
            self.check(os.listdir(started) == [], "private workdir: no worker started", "no started.RANK file",
                       os.listdir(started))
            logs = {}
            for top, _, files in os.walk(run.run_dir):
                for name in files:
                    if name in ("stdout.log", "stderr.log") and os.path.getsize(os.path.join(top, name)):
                        logs[os.path.join(top, name)] = open(os.path.join(top, name), errors="replace").read()[:200]
            self.check(not logs, "private workdir: no rank log has output", "empty or no rank logs", logs)

    # --- preflight: true across nodes ----------------------------------------------

    def test_preflight(self):
        """preflight: true on a step srun puts on 2 nodes: node 0's NCCL id crosses the control plane to the other
        node, whose check child joins the same communicator. The stand-in NVIDIA libraries (built next to the unit
        tests, copied to the shared workdir) exchange the ranks' buffers through the workdir, where TMPDIR points."""
        probe = subprocess.run([self.flowrun, "doctor", "--fake-gpus", "1"], capture_output=True, text=True)
        if "built without GPU support" in probe.stdout or not os.path.exists(
                os.path.join(self.fakes, "libflowrun_fake_nccl.so")):
            print("preflight: skipped (a flowrun built without GPU support, or no stand-in libraries)")
            return
        d = self.workspace("preflight")
        lib = os.path.join(d, "lib")
        os.makedirs(lib)
        for fake in ("nvml", "cudart", "nccl"):
            shutil.copy2(os.path.join(self.fakes, f"libflowrun_fake_{fake}.so"), lib)
        os.symlink("libflowrun_fake_nvml.so", os.path.join(lib, "libnvidia-ml.so.1"))
        steps = [{"name": "train", "parallel": {"nodes": 2, "preflight": True},
                  "run": ["/bin/sh", "-c", "touch ran.$RANK"]}]
        spec = self.write_spec(d, {"engine": "slurm", "gpus_per_node": 2, "address": self.c.addrs["head"]}, steps)
        run = self.head(spec, None, LD_LIBRARY_PATH=lib, FAKE_NVML_SCENARIO="hgx", CUDA_VISIBLE_DEVICES="0,1",
                        FLOWRUN_CUDART_LIBRARY=os.path.join(lib, "libflowrun_fake_cudart.so"),
                        FLOWRUN_NCCL_LIBRARY=os.path.join(lib, "libflowrun_fake_nccl.so"), FAKE_CUDA_DEVICES="2",
                        FAKE_CUDA_FREE_MIB="1032", TMPDIR=d)
        self.check(run.rc == 0, "preflight: flowrun exits 0", 0, run.rc, run.detail())
        checking = re.search(r"^flowrun: step 'train': preflight: checking NCCL across 2 nodes, 4 GPUs "
                             r"\((node\d) GPUs 0,1; (node\d) GPUs 0,1\)$", run.stderr, re.M)
        self.check(bool(checking) and checking.group(1) != checking.group(2),
                   "preflight: one check across two hosts", "node0 GPUs 0,1; node1 GPUs 0,1 (two names)",
                   checking.group(0) if checking else None, run.detail())
        passed = ("flowrun: step 'train': preflight passed: 2 sizes from 1 MiB to 4 MiB on 4 GPUs across 2 nodes, "
                  "every sum correct; sizes above 4 MiB left out: GPU 0 has 1032 MiB free (report: "
                  f"{run.run_dir}/train/preflight.txt)")
        self.check(passed in run.stderr.splitlines(), "preflight: one communicator of 4 ranks, every sum exact",
                   passed, [line for line in run.stderr.splitlines() if "preflight" in line], run.detail())
        ran = sorted(n for n in os.listdir(d) if n.startswith("ran."))
        self.check(ran == ["ran.0", "ran.1", "ran.2", "ran.3"], "preflight: then every rank runs",
                   "ran.0 .. ran.3", ran)

    # The test cluster's nodes have 2 GPUs each (Gres=gpu:2): the stand-in NVML's 4 of "bridges", 0 and 1 visible.
    NODE_FAULTS = node_faults(2)

    def test_node_checks(self):
        """node_checks (on by default) under srun, 3 nodes of the cluster (2 GPUs each) for nodes: 2 and
        spare_nodes: 1, with
        the stand-in NVML: node2 reports an uncorrectable ECC error, a busy GPU or a missing GPU (its faults kept
        to that host, FAKE_NVML_FAULTS_ON). Its agent's check leaves it out before any rank starts, the spare
        takes its seat, every rank runs on the other two hosts, and excluded_nodes names it for sbatch."""
        if not self.nvml_built("node checks"):
            return
        faulty = "node2"
        for fault, (faults, why) in self.NODE_FAULTS.items():
            label = f"node_checks_{fault}"
            d = self.workspace(label)
            run = self.run_checked_step(d, FAKE_NVML_FAULTS=faults, FAKE_NVML_FAULTS_ON=faulty)
            self.check_left_out(label, d, run, faulty, why)

    def test_node_checks_full_scratch(self):
        """As test_node_checks, with node2's scratch full: TMPDIR names a directory of each node's private
        /tmp, and on node2 a 1 MiB tmpfs filled to the last block is mounted there (in its mount namespace
        alone). Its agent starts and checks its node all the same, is left out for scratch_space, and the
        spare takes its seat."""
        if not self.nvml_built("full scratch"):
            return
        label, faulty = "node_checks_full_scratch", "node2"
        d = self.workspace(label)
        tmp = f"/tmp/{self.name}-full-scratch"
        fill = (f"mkdir -p {tmp} && mount -t tmpfs -o size=1m,mode=1777 flowrun-full {tmp} && "
                f"{{ dd if=/dev/zero of={tmp}/fill bs=4k count=512 2>/dev/null; true; }} && "
                f"dd if=/dev/zero of={tmp}/more bs=1 count=1 2>/dev/null; test $? -ne 0")
        try:
            made = [subprocess.run(self.c.on(i, ["sh", "-c", fill if i == 2 else f"mkdir -p {tmp}"]),
                                   capture_output=True, text=True, env=self.env()) for i in range(1, NODES + 1)]
            os.makedirs(tmp, exist_ok=True)
            if not self.check(all(m.returncode == 0 for m in made), f"{label}: node2's scratch is mounted and full",
                              "mkdir, mount and fill on node2, mkdir on the others", [m.stderr for m in made]):
                return
            run = self.run_checked_step(d, TMPDIR=tmp)
            why = (f"scratch_space: 0 MiB free in {tmp} (the ranks' scratch), under the 1024 MiB a node needs "
                   "(FLOWRUN_NODE_CHECK_MIN_FREE_MB): free space there, or point TMPDIR elsewhere")
            self.check_left_out(label, d, run, faulty, why)
        finally:
            subprocess.run(self.c.on(2, ["umount", tmp]), capture_output=True, env=self.env())
            for i in range(1, NODES + 1):
                subprocess.run(self.c.on(i, ["rm", "-rf", tmp]), capture_output=True, env=self.env())
            shutil.rmtree(tmp, ignore_errors=True)

    def test_node_checks_unreachable_node0(self):
        """As test_node_checks, with node2 unable to reach node 0 (node1): a route `unreachable` to node1's
        address in node2's network namespace alone (the head and node3 it still reaches). Its agent's
        reach_node0 check, a connection to the port node 0's agent listens on, fails with "No route to
        host"; node2 is left out and the spare takes its seat."""
        if not self.nvml_built("unreachable node 0"):
            return
        label, faulty = "node_checks_unreachable_node0", "node2"
        d = self.workspace(label)
        node0 = self.c.addrs["node1"]
        route = ["ip", "route", "add", "unreachable", f"{node0}/32"]
        made = subprocess.run(self.c.on(2, route), capture_output=True, text=True, env=self.env())
        try:
            if not self.check(made.returncode == 0, f"{label}: node2 has no route to node1", " ".join(route),
                              made.stderr):
                return
            run = self.run_checked_step(d)
            verdicts = run.results().get("node_checks") or []
            zero = [v["node"] for v in verdicts if v["node_rank"] == 0 and v["ok"]]
            reach = [c["detail"] for v in verdicts if v["node"] == faulty for c in v["checks"]
                     if c["name"] == "reach_node0"]
            at = re.escape(node0)
            pattern = (rf"cannot reach node 0 \(node1\) at {at}:\d+: No route to host; its ranks could not reach "
                       rf"MASTER_ADDR there either: check the route and the firewall from this node to {at} \(ip "
                       rf"route get {at}\), or leave the node out")
            self.check(zero == ["node1"] and len(reach) == 1 and re.fullmatch(pattern, reach[0]) is not None,
                       f"{label}: node2's reach_node0 says it cannot reach node1, node 0, and what to check",
                       pattern, verdicts)
            passed = [c for v in verdicts if v["node"] != faulty for c in v["checks"] if c["name"] == "reach_node0"]
            self.check(len(passed) == 1 and passed[0]["ok"], f"{label}: the spare reaches node 0 (node 0 checks "
                       "nothing of itself)", "one reach_node0 passed", verdicts)
            self.check_left_out(label, d, run, faulty, "reach_node0: " + (reach[0] if reach else ""))
        finally:
            subprocess.run(self.c.on(2, ["ip", "route", "del", "unreachable", f"{node0}/32"]), capture_output=True,
                           env=self.env())

    def test_node_checks_new_node(self):
        """nodes: 2 and no spare under srun, with no allocation: srun makes flowrun's own. node2 reports an
        uncorrectable ECC error; with no spare to take its seat, the head asks Slurm for a new node in its place
        (one more srun of one node, excluding the step's hosts), which joins, passes its check and takes node2's
        seat. Both jobs end with the step. Then with every node of the cluster in the step: Slurm has no node
        to give, and the step fails with its words."""
        if not self.nvml_built("a new node"):
            return
        label, faulty = "node_checks_new_node", "node2"
        d = self.workspace(label)
        faults, why = self.NODE_FAULTS["ecc"]
        run = self.run_checked_step(d, parallel={"nodes": 2}, FAKE_NVML_FAULTS=faults, FAKE_NVML_FAULTS_ON=faulty)
        self.check(run.rc == 0, f"{label}: the step succeeds on the new node", 0, run.rc, run.detail())
        asked = re.search(r"^flowrun: step 'train': no spare waits for node rank 1 of 2 \(node2\): asking for a "
                          r"new node in its place: (srun .*)$", run.stderr, re.M)
        words = asked.group(1).split() if asked else []
        self.check(words[:4] == ["srun", "--nodes=1", "--ntasks=1", "--ntasks-per-node=1"] and
                   "--exclude=node[1-2]" in words and "--gpus-per-node=2" in words,
                   f"{label}: the head asks Slurm for one node, excluding both of the step's hosts",
                   "srun --nodes=1 ... --exclude=node[1-2] --gpus-per-node=2", asked.group(0) if asked else
                   run.stderr[-3000:])
        seated = re.search(r"^flowrun: step 'train': spare node (node\d) takes node rank 1 of node node2, which "
                           r"failed its check", run.stderr, re.M)
        new = seated.group(1) if seated else None
        self.check(new in ("node3", "node4"), f"{label}: a node the step had not used takes node2's seat",
                   "node3 or node4", new, run.stderr[-3000:])
        verdicts = run.results().get("node_checks") or []
        self.check(sorted((v["node"], v["ok"]) for v in verdicts) == sorted([("node1", True), ("node2", False),
                                                                              (new, True)]),
                   f"{label}: results.json has the verdicts of node1, node2 (failed) and the new node",
                   "3 verdicts", verdicts)
        ran = self.ranks_ran(d, 4)
        self.check(sorted(ran.values()) == [(0, "node1", 4), (0, "node1", 4), (1, new, 4), (1, new, 4)],
                   f"{label}: all 4 ranks ran, node rank 1 on the new node, none on {faulty}",
                   f"node1 x2, {new} x2", ran)
        srun_lines = [line for line in run.stderr.splitlines() if line.startswith("[srun")]
        self.check(srun_lines == [], f"{label}: neither srun says a word (node2's agent, told bye, ends by itself; "
                   "the new node's ends with the step)", [], srun_lines)
        excluded = os.path.join(run.run_dir, "excluded_nodes")
        got = open(excluded).read() if os.path.exists(excluded) else None
        self.check(got == faulty + "\n", f"{label}: excluded_nodes names {faulty}", faulty, got)
        self.assert_nothing_left(label)

        label = "node_checks_no_new_node"
        d = self.workspace(label)
        run = self.run_checked_step(d, parallel={"nodes": NODES}, FAKE_NVML_FAULTS=faults,
                                    FAKE_NVML_FAULTS_ON=faulty)
        self.check(run.rc != 0, f"{label}: the step fails before any rank starts", "not 0", run.rc, run.detail())
        said = re.search(rf"node {faulty} \(node rank \d of {NODES}\) failed its check, and no node came in its "
                         r"place, so no rank starts; fix what the check names.*srun for a node in place of one left "
                         r"out \(seat \d\) exited with code 1 before its agent joined; its last output:\n.*"
                         r"Requested node configuration is not available", run.stderr, re.S)
        self.check(said is not None, f"{label}: the head says why, with Slurm's own words",
                   "... no node came in its place ... Requested node configuration is not available",
                   run.stderr[-3000:])
        self.check(not any(os.path.exists(os.path.join(d, f"ran.{r}")) for r in range(2 * NODES)),
                   f"{label}: no rank ran", "no ran.N", sorted(os.listdir(d)))

    @staticmethod
    def ranks_ran(d, count):
        """{rank: (node rank, host, WORLD_SIZE)} of the ranks of run_checked_step's step that ran in `d`."""
        ran = {}
        for r in range(count):
            path = os.path.join(d, f"ran.{r}")
            if os.path.exists(path):
                node_rank, host, world = open(path).read().split()
                ran[r] = (int(node_rank), host, int(world))
        return ran

    def nvml_built(self, what):
        """Whether the stand-in NVML the node-check tests run on is built (a failed check if not)."""
        lib = os.path.join(self.fakes, "libflowrun_fake_nvml.so")
        return self.check(os.path.exists(lib), f"{what}: the stand-in NVML is built", lib, None)

    def run_checked_step(self, d, parallel=None, **extra_env):
        """Runs the node-check tests' step in workspace `d` to its end: 2 nodes and a spare under srun (or
        `parallel`), 2 stand-in GPUs each (the stand-in NVML as libnvidia-ml.so.1 in d/lib), node checks on;
        `extra_env` goes to the head's environment, and srun takes it to every agent."""
        lib = os.path.join(d, "lib")
        os.makedirs(lib)
        shutil.copy2(os.path.join(self.fakes, "libflowrun_fake_nvml.so"), os.path.join(lib, "libnvidia-ml.so.1"))
        steps = [{"name": "train", "forensics": "off", "parallel": parallel or {"nodes": 2, "spare_nodes": 1},
                  "run": ["/bin/sh", "-c", 'echo "$FLOWRUN_NODE_RANK $(hostname) $WORLD_SIZE" > ran.$RANK']}]
        spec = self.write_spec(d, {"engine": "slurm", "gpus_per_node": 2, "address": self.c.addrs["head"],
                                   "heartbeat_timeout": 1}, steps)
        return self.head(spec, None, LD_LIBRARY_PATH=lib, FAKE_NVML_SCENARIO="bridges", CUDA_VISIBLE_DEVICES="0,1",
                         **extra_env)

    def check_left_out(self, label, d, run, faulty, why):
        """The checks of a run of test_node_checks' step in which `faulty` failed its check for `why`
        ("NAME: DETAIL"): the step succeeds on the spare, every verdict is in results.json, the head names
        the node, the check and the fix, the 4 ranks ran on the other two hosts, srun says nothing, and
        excluded_nodes names it."""
        self.check(run.rc == 0, f"{label}: the step succeeds on the spare", 0, run.rc, run.detail())
        res = run.results()
        verdicts = res.get("node_checks") or []
        failed = [v for v in verdicts if not v["ok"]]
        seated = {v["node"] for v in verdicts if v["ok"]}
        self.check(len(verdicts) == 3 and [v["node"] for v in failed] == [faulty] and len(seated) == 2 and
                   any(f"{c['name']}: {c['detail']}" == why for c in failed[0]["checks"] if not c["ok"]),
                   f"{label}: results.json has the 3 nodes' verdicts, {faulty} failed by its check",
                   f"{faulty}: {why}", verdicts)
        rank = failed[0]["node_rank"] if failed else None
        left = (f"flowrun: step 'train': node {faulty} (node rank {rank} of 2) failed its check, so it is left "
                f"out: {why}")
        self.check(left in run.stderr.splitlines(), f"{label}: the head names the node, its check and the fix",
                   left, run.stderr[-3000:])
        spare = re.search(rf"^flowrun: step 'train': spare node (node\d) takes node rank {rank} of node "
                          rf"{faulty}, which failed its check \(0 spares left\)$", run.stderr, re.M)
        self.check(spare is not None and spare.group(1) in seated, f"{label}: a spare takes the faulty node's seat",
                   "spare node nodeN takes node rank ...", run.stderr[-3000:])
        ran = self.ranks_ran(d, 4)
        self.check(len(ran) == 4 and {h for _, h, _ in ran.values()} == seated and
                   all(w == 4 for _, _, w in ran.values()),
                   f"{label}: all 4 ranks ran, on the two hosts that passed, none on {faulty}", sorted(seated), ran)
        srun_lines = [line for line in run.stderr.splitlines() if line.startswith("[srun]")]
        self.check(srun_lines == [], f"{label}: srun is not cut short for the node left out (told bye, its agent "
                   "ended by itself): not a word from srun", [], srun_lines)
        excluded = os.path.join(run.run_dir, "excluded_nodes")
        got = open(excluded).read() if os.path.exists(excluded) else None
        self.check(got == faulty + "\n", f"{label}: excluded_nodes names {faulty} for sbatch --exclude",
                   faulty, got)
        self.assert_nothing_left(label)

    # --- what is left --------------------------------------------------------------

    def flowrun_processes(self):
        """Processes of these tests' flowrun anywhere: its binary (head, agent), a
        command line naming it (srun, ssh), a worker (FLOWRUN_RUN_ID of one of
        its runs in its environment), or the py-spy it ran: in each node's
        namespace (`ip netns pids`) and in this one."""
        where = {}
        for i in range(1, NODES + 1):
            for pid in self.c.pids_on(i):
                where[pid] = f"node{i}"
        found = []
        mine = os.getpid()
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == mine:
                continue
            pid = int(name)
            if proc_state(pid) in ("Z", "X", ""):
                continue
            cmdline = proc_read(pid, "cmdline")
            try:
                exe = os.readlink(f"/proc/{pid}/exe")
            except OSError:
                exe = ""
            environ = b"\0" + proc_read(pid, "environ", binary=True)
            if exe == self.real_flowrun or self.real_flowrun in cmdline or self.flowrun in cmdline \
                    or exe in self.py_spies or cmdline.split("\0")[0] in self.py_spies \
                    or f"\0FLOWRUN_RUN_ID={self.name}-".encode() in environ:
                found.append(f"{where.get(pid, 'this namespace')}: pid {pid}: {cmdline.replace(chr(0), ' ')[:160]}")
        return found

    def slurm_jobs(self):
        """Slurm jobs that hold or wait for nodes (not those completing)."""
        out = subprocess.run(["squeue", "-h", "-t", "PD,CF,R,S", "-o", "%i %j %T"], capture_output=True, text=True,
                             env=self.env()).stdout
        return out.split("\n")[:-1] if out else []

    def node_processes(self, node):
        """flowrun's processes (agent, workers) in one node's namespace."""
        return [entry for entry in self.flowrun_processes() if entry.startswith(f"node{node}: ")]

    def assert_nothing_left(self, label, limit=10):
        """Nothing of flowrun runs anywhere, and no Slurm job is left: a test's job ends
        with its head (salloc, sbatch --wait) or its srun. Ends what it finds."""
        deadline = time.monotonic() + limit
        while True:
            left, jobs = self.flowrun_processes(), self.slurm_jobs()
            if not (left or jobs) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        self.check(not left, f"{label}: nothing of flowrun is left on any node",
                   f"no flowrun head, agent, srun/ssh of an agent or worker {limit} s after the test", left)
        self.check(not jobs, f"{label}: no Slurm job is left", f"no job pending or running {limit} s after the test",
                   jobs)
        for entry in left:
            try:
                os.kill(int(entry.split("pid ")[1].split(":")[0]), signal.SIGKILL)
            except (OSError, ValueError, IndexError):
                pass
        if jobs:
            subprocess.run(["scancel", *[j.split()[0] for j in jobs]], env=self.env())


TESTS = ["salloc", "sbatch", "srun", "srun_node1", "login_node_loopback", "ssh_hosts", "ssh_hostfile", "run_cli_salloc",
         "run_cli_rendezvous",
         "torch", "lightning", "culprit", "stacks_srun", "stacks_ssh", "stacks_venv", "stacks_missing",
         "agent_kill", "link_down", "spare", "elastic", "head_kill", "scancel", "requeue", "wrong_token", "symlink", "private_workdir",
         "preflight", "node_checks", "node_checks_full_scratch",
         "node_checks_unreachable_node0", "node_checks_new_node"]


@pytest.fixture(scope="module")
def multinode(request, flowrun, repo_root):
    """The cluster, up for the module's tests and always brought down after them, also on Ctrl-C
    or SIGTERM; skips them without root or network namespaces."""
    why = cluster_unavailable()
    if why:
        pytest.skip(why)
    end_on_sigterm()
    cluster = Cluster(repo_root, NODES, "--debian-hostname", DEBIAN_NODE)
    keep = request.config.getoption("keep")
    with temp_dir("flowrun-multinode-", parent="/var/tmp", keep=keep) as scratch:
        try:
            suite = Multinode(flowrun, repo_root, cluster, scratch)
            if not cluster.up():
                pytest.fail(f"the test cluster comes up: {cluster.script} up {NODES} failed (above)", pytrace=False)
            yield suite
        finally:
            for live in list(LIVE):
                live.kill()
            down_rc = cluster.down() if cluster.is_up else 0
            if keep:
                print(f"scratch directory kept: {scratch}")
    assert down_rc == 0, f"the cluster comes down with nothing left: cluster.sh down: exit {down_rc}"


@pytest.mark.parametrize("name", TESTS)
def test_multinode(name, multinode, check):
    multinode.soft = check
    try:
        getattr(multinode, "test_" + name)()
    finally:
        for live in list(LIVE):
            live.kill()
            live.finish(5)
        multinode.assert_nothing_left(name)
