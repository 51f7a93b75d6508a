"""Multi-node steps on one host: the head (`flowrun SPEC` with `cluster: {engine: manual, address:
127.0.0.1}`) and the agents it asks for, started here (Nodes), with their output in files; specs of
one 4-rank step on 2 nodes; the head's console lines as templates."""
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import time

from flowrun_testlib import clean_env
from flowrun_testlib.launcher import SANITIZER_REPORT, processes_with, wait_for
from flowrun_testlib.suite import path_of

HOST = socket.gethostname()  # what each agent reports as its node's name
GRACE = 2  # --grace of every head
MARK = "NODES_E2E_MARK"  # set for the head and the agents: everything they start inherits it


def q(text):
    """A YAML double-quoted scalar (JSON's string syntax is valid YAML)."""
    return json.dumps(text)


def sh_yaml(script, *args):
    """A `run:` list running `script` with /bin/sh; args are $0, $1, ..."""
    return "[" + ", ".join(q(w) for w in ("/bin/sh", "-c", script, *args)) + "]"


def spec_text(name, run, *, collect=None, extra="", more_steps="", env="", forensics="off"):
    """A flow with one parallel step `train` of 4 CPU workers on 2 nodes. The ranks' stacks before a
    stop (`forensics`) are off unless a test is about them: each would add its line to the report."""
    return (f"name: {name}\n{env}cluster:\n  engine: manual\n  address: 127.0.0.1\n  heartbeat_timeout: 1\n"
            f"steps:\n  - name: train\n    run: {run}\n    forensics: {forensics}\n    parallel:\n      cpus: 4\n"
            f"      nodes: 2\n{extra}" + (f"    collect: {collect}\n" if collect else "") + more_steps)


def read(path):
    with open(path, errors="replace") as f:
        return f.read()


# A stand-in agent that speaks the control plane's protocol as a test tells it to.
FAKE_AGENT = path_of("e2e", "helpers", "fake_agent.py")
class Nodes:
    """One head and the agents a test starts for it, with their output in files."""

    def __init__(self, suite, name, spec, *options, head_env=None, head_stdout=None):
        self.suite, self.name = suite, name
        self.dir = os.path.join(suite.scratch, name)
        os.makedirs(self.dir)
        self.spec = os.path.join(self.dir, "spec.yaml")
        # @DIR@ in the spec is this directory, written before the head starts (a spec rewritten
        # after it may be read as it was).
        with open(self.spec, "w") as f:
            f.write(spec.replace("@DIR@", self.dir))
        self.run_dir = os.path.join(self.dir, "run")
        self.tmp = os.path.join(self.dir, "tmp")  # the agents' TMPDIR (their node-local scratch)
        os.makedirs(self.tmp)
        self.run_id = f"{name}-{os.getpid()}-1"
        self.agents, self.agent_names = [], []
        env = clean_env(**{MARK: self.run_id, **(head_env or {})})
        env = {k: v for k, v in env.items() if v is not None}  # head_env's None: not in the head's environment
        self.head = self._start([suite.flowrun, self.spec, "--run-dir", self.run_dir, "--run-id", self.run_id,
                                 "--grace", str(GRACE), *options], env, "head", stdout=head_stdout)
        self.started = time.monotonic()

    def _start(self, argv, env, name, stdout=None):
        """`argv` in its own session, its output in NAME.out (or `stdout`) and NAME.err."""
        with open(stdout or os.path.join(self.dir, f"{name}.out"), "w") as out, \
                open(os.path.join(self.dir, f"{name}.err"), "w") as err:
            return subprocess.Popen(argv, cwd=self.dir, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                    start_new_session=True)

    def out(self, name):
        return read(os.path.join(self.dir, name))

    def head_err(self):
        return self.out("head.err")

    def agent_env(self, **extra):
        env = clean_env(**{MARK: self.run_id, "TMPDIR": self.tmp, **extra})
        if "FLOWRUN_HOSTNAME" not in extra:
            del env["FLOWRUN_HOSTNAME"]  # each agent names its node by this host's name, unless a test names it
        return {k: v for k, v in env.items() if v is not None}  # extra's None: not set

    def command(self, timeout=30):
        """The agent command the head prints, as argv; None when it never does."""
        pattern = re.compile(r"^flowrun:   (.* agent --rdzv-endpoint .*)$", re.M)
        found = wait_for(lambda: pattern.search(self.head_err()) or self.head.poll() is not None,
                         timeout * self.suite.slack)
        m = pattern.search(self.head_err())
        return shlex.split(m.group(1)) if found and m else None

    def start_agents(self, argv, count=2, **env):
        """`count` agents at once, each in its own session; returns their Popen objects."""
        started = []
        for _ in range(count):
            name = f"agent{len(self.agents)}"
            p = self._start(argv, self.agent_env(**env), name)
            self.agents.append(p)
            self.agent_names.append(name)
            started.append(p)
        return started

    def begin(self, label):
        """Waits for the head's command and starts both agents; False (and a failed check) if it never comes."""
        argv = self.command()
        if not self.suite.check(argv is not None, f"{label}: the head prints the agent command", self.detail()):
            return False
        self.start_agents(argv)
        return True

    def ready_ranks(self):
        """{rank: (node rank, agent pid)} from the ready.R files written in full so far."""
        found = {}
        for n in os.listdir(self.dir):
            if n.startswith("ready."):
                # The shell creates the file before it writes the line: a short one is still being written.
                words = read(os.path.join(self.dir, n)).split()
                if len(words) == 2:
                    # FLOWRUN_AGENT_ID is <node>-<agent pid>-<nonce>.
                    found[int(n.split(".")[1])] = (int(words[0]), int(words[1].rsplit("-", 2)[1]))
        return found

    def wait_ready(self, count=4, timeout=30):
        """Waits until `count` ranks have said they are ready; returns ready_ranks()."""
        wait_for(lambda: len(self.ready_ranks()) >= count or self.head.poll() is not None,
                 timeout * self.suite.slack)
        return self.ready_ranks()

    def wait(self, p, timeout):
        try:
            return p.wait(timeout=timeout * self.suite.slack)
        except subprocess.TimeoutExpired:
            return None

    def finish(self, label, timeout=60):
        """Waits for the head and the agents; returns the head's exit code (None: still running)."""
        rc = self.wait(self.head, timeout)
        for p in self.agents:
            self.wait(p, 15)
        self.sanitizer_check(label)
        return rc

    def sanitizer_check(self, label):
        for name in ["head"] + self.agent_names:
            text = self.out(f"{name}.err")
            m = SANITIZER_REPORT.search(text)
            self.suite.check(m is None, f"{label}: no sanitizer report from the {name}",
                             text[max(0, m.start() - 200):][:6000] if m else "")

    def leftovers(self):
        return sorted(set(processes_with(f"FLOWRUN_RUN_ID={self.run_id}")) |
                      set(processes_with(f"{MARK}={self.run_id}")))

    def check_nothing_left(self, label, limit=5):
        wait_for(lambda: not self.leftovers(), limit * self.suite.slack)
        left = self.leftovers()
        self.suite.check(not left, f"{label}: nothing is left running",
                         "\n".join(f"{pid} {read(f'/proc/{pid}/cmdline')}" for pid in left if
                                   os.path.exists(f"/proc/{pid}")))

    def results(self, step="train"):
        with open(os.path.join(self.run_dir, step, "results.json")) as f:
            return json.load(f)

    def detail(self):
        parts = [f"head exit {self.head.poll()} after {time.monotonic() - self.started:.2f} s"]
        for name in ["head"] + self.agent_names:
            for stream in ("out", "err"):
                if not os.path.exists(os.path.join(self.dir, f"{name}.{stream}")):
                    continue  # the head's stdout went elsewhere
                text = self.out(f"{name}.{stream}")
                if text:
                    parts.append(f"--- {name} std{stream}\n{text[-4000:]}")
        return "\n".join(parts)

    def close(self):
        """Whatever is still running (a failed test) is stopped: nothing outlives the suite."""
        for p in [self.head] + self.agents:
            if p.poll() is None:
                try:
                    os.kill(p.pid, signal.SIGCONT)
                    os.kill(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()
        for pid in self.leftovers():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def header(self, steps=1):
        """The head's first lines, up to the agent command."""
        return [f"flowrun: run {self.run_id}: {steps} step{'s' if steps > 1 else ''}; logs and results in "
                f"{self.run_dir}",
                "flowrun: step 'train': 4 workers on 2 nodes (engine: manual); the head listens on "
                "127.0.0.1:<port> (cluster.address)",
                "flowrun: waiting for 2 agents; on each node run (add --node-rank N to choose its rank):",
                f"flowrun:   {shlex.quote(self.suite.flowrun)} agent --rdzv-endpoint 127.0.0.1:<port> --token-file "
                f"{shlex.quote(os.path.join(self.run_dir, 'train', 'agent.token'))}"]

    def joined(self):
        return f"flowrun: step 'train': 2 nodes joined ({HOST}, {HOST}); MASTER_ADDR 127.0.0.1, MASTER_PORT <port>"
