"""What every case uses: the paths, running one command under bench/timeit, a head and its console."""

import datetime
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH_SRC = ROOT / "bench"
BIN = ROOT / "build" / "bench"
RELEASE = ROOT / "build" / "release"
TORCH_PYTHON = "/usr/bin/python3"
HELPERS = ["timeit", "spawn", "failer", "producer", "forward", "reader", "tcpcopy"]
WORKERS = 8
TORCHRUN_FLAGS = ["--standalone", "--no_python", "--monitor_interval", "0.1", "--nproc_per_node", str(WORKERS)]


class Where:
    """Where this run's programs and scratch directories are: set once by the build and the command line."""

    flowrun = RELEASE / "flowrun"
    rdzv_clients = RELEASE / "bench" / "rdzv_clients"
    work = None  # the scratch directory ($TMP in the report)
    shm = None  # case (e)'s scratch directory on tmpfs ($SHM)


W = Where


def log(msg):
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def die(msg):
    print(f"bench: error: {msg}", file=sys.stderr)
    sys.exit(1)


def run_quiet(cmd, **kw):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def short(path):
    """A path as the report shows it: relative to the repository, or under $TMP for scratch files."""
    text = str(path)
    if W.work and text.startswith(str(W.work)):
        return "$TMP" + text[len(str(W.work)) :]
    if W.shm and text.startswith(str(W.shm)):
        return "$SHM" + text[len(str(W.shm)) :]
    if text.startswith(str(ROOT) + "/"):
        return text[len(str(ROOT)) + 1 :]
    return text


def show(cmd):
    words = [short(c) for c in cmd]
    return " ".join(c if re.fullmatch(r"[\w@%+=:,./$-]+", c) else shlex.quote(c) for c in words)



# --- running one command ------------------------------------------------------


def parse_kv(text):
    out = {}
    for field in text.split():
        key, _, value = field.partition("=")
        out[key] = int(value)
    return out


class Launcher:
    """One way of running a case: a name, how to build its command, and its measurements."""

    def __init__(self, name, available=True, why_not=""):
        self.name = name
        self.available = available
        self.why_not = why_not
        self.samples = []  # dicts from timeit (plus case-specific keys)
        self.command = ""
        self.failures = []  # text of runs that did not behave as expected


def timeit(cmd, work, tag, timeout, memory=False, stdout=None, stdin=None, env=None):
    """Runs cmd under bench/timeit; returns (timeit's figures, Popen for stdout piping or None)."""
    res = work / f"{tag}.timeit"
    full = [str(BIN / "timeit"), "-o", str(res), "-t", str(timeout)] + (["-m"] if memory else []) + ["--"] + cmd
    err = open(work / f"{tag}.stderr", "w")
    out = stdout if stdout is not None else open(work / f"{tag}.stdout", "w")
    proc = subprocess.Popen(full, stdout=out, stderr=err, stdin=subprocess.DEVNULL, cwd=work, env=env)
    return proc, res


def finish(proc, res):
    proc.wait()
    if proc.returncode != 0 or not res.exists():
        return None
    return parse_kv(res.read_text())


def tail(path, lines=6):
    try:
        text = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(text[-lines:])


def fresh(path):
    shutil.rmtree(path, ignore_errors=True)
    return path


def made(path):
    path.mkdir(parents=True)
    return path


def made_ok(path):
    path.mkdir(parents=True, exist_ok=True)
    return path


def spec_from(template, dest, **subst):
    text = (BENCH_SRC / template).read_text()
    for key, value in subst.items():
        text = text.replace(f"@{key}@", str(value))
    dest.write_text(text)
    return dest


def torchrun_cmd(extra):
    return [TORCH_PYTHON, str(BENCH_SRC / "torchrun_py311.py")] + TORCHRUN_FLAGS + extra


def rotate(items, i):
    """The order of iteration i: rotated by i, and reversed in every other pair of iterations, so that
    each launcher follows a different one across iterations, not always the same (a launcher right after
    one that wrote 2 GB of files pays for their writeback, whatever os.sync() did)."""
    k = i % len(items)
    order = items[k:] + items[:k]
    return order[::-1] if (i // 2) % 2 else order



# --- a head and the agents on this host --------------------------------------


class Console:
    """A process's stderr, read line by line in a thread; each line is stamped with time.monotonic() when it
    arrives, so a case can time what the head prints."""

    def __init__(self, stream):
        self.lines = []
        self.closed = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream):
        for line in stream:
            now = time.monotonic()
            with self._cond:
                self.lines.append((now, line.rstrip("\n")))
                self._cond.notify_all()
        with self._cond:
            self.closed = True
            self._cond.notify_all()

    def wait_for(self, pattern, timeout):
        """(arrival time, match) of the first line matching pattern, or (None, None) at the end or timeout."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        seen = 0
        with self._cond:
            while True:
                for stamp, line in self.lines[seen:]:
                    m = rx.search(line)
                    if m:
                        return stamp, m
                seen = len(self.lines)
                left = deadline - time.monotonic()
                if self.closed or left <= 0:
                    return None, None
                self._cond.wait(left)

    def join(self):
        self._thread.join(30)

    def tail(self, lines=6):
        return "\n".join(line[:300] for _, line in self.lines[-lines:])


def children_of(pid):
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


class Head:
    """`flowrun --run-dir RUN_DIR SPEC` on a manual-engine spec, under bench/timeit, its stderr read as it
    comes; `agent` is the agent command it prints (None if it printed none)."""

    def __init__(self, spec, run_dir, work, tag, env=None):
        self.res = work / f"{tag}.timeit"
        self.res.unlink(missing_ok=True)
        self.cmd = [str(W.flowrun), "--run-dir", str(run_dir), str(spec)]
        full = [str(BIN / "timeit"), "-o", str(self.res), "-t", "300", "--"] + self.cmd
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(full, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL, cwd=work, text=True, errors="replace", env=env)
        self.console = Console(self.proc.stderr)
        _, m = self.console.wait_for(r"^flowrun:   (\S.* agent --rdzv-endpoint .*)$", 60)
        self.agent = shlex.split(m.group(1)) if m else None

    def option(self, name):
        return self.agent[self.agent.index(name) + 1]

    def without_agent(self):
        """Why the case cannot go on when the head printed no agent command (the head is then stopped and
        waited for); None when it printed one."""
        if self.agent is not None:
            return None
        self.stop()
        self.finish()
        return "the head printed no agent command: " + self.console.tail()

    @staticmethod
    def agent_argv(run_dir):
        """The agent's command as the report shows it: the head's port left as PORT."""
        return [str(W.flowrun), "agent", "--rdzv-endpoint", "127.0.0.1:PORT", "--token-file",
                str(run_dir / "work" / "agent.token")]

    def stop(self):
        """SIGTERM to the head (timeit's child) if it still runs: a case that went wrong ends it."""
        for pid in children_of(self.proc.pid):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def finish(self, timeout=300):
        """timeit's figures for the head once it ended (None when timeit could not run it)."""
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            self.proc.wait()
        self.console.join()
        return parse_kv(self.res.read_text()) if self.res.exists() else None


def tmpfs_scratch():
    """A new scratch directory on tmpfs (/dev/shm), or None when there is none."""
    for line in Path("/proc/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) > 2 and fields[1] == "/dev/shm" and fields[2] == "tmpfs":
            return Path(tempfile.mkdtemp(prefix="flowrun-bench-", dir="/dev/shm"))
    return None


def kv_line(text, first_key):
    line = next((l for l in text.splitlines() if l.startswith(first_key + "=")), None)
    return parse_kv(line) if line else None


def agent_env(work):
    """The agents' environment: their node-local scratch (TMPDIR) inside the bench's scratch directory."""
    env = dict(os.environ)
    env["TMPDIR"] = str(made_ok(work / "agents-tmp"))
    return env


def mn_launcher(launchers, key, like):
    """A new row for a multi-node case, available when the launcher it runs (flowrun, torchrun) is."""
    base = launchers[like]
    launchers[key] = Launcher(key, base.available, base.why_not)
    return launchers[key]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_head(cmd, work, env, row, agents=0):
    """A head `cmd` in `work` whose stderr a Console reads, and, for a multi-node spec, `agents` agents started
    with the command it prints. The row's command gains theirs, the head's port as PORT. Returns (head,
    console, the agents' processes)."""
    head = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            cwd=work, text=True, errors="replace", env=env)
    console = Console(head.stderr)
    procs = []
    if agents:
        _, m = console.wait_for(r"^flowrun:   (\S.* agent --rdzv-endpoint .*)$", 60)
        if m:
            argv = shlex.split(m.group(1))
            row.command += f" & {agents} x " + re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", show(argv))
            procs = [subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                      stdin=subprocess.DEVNULL, cwd=work, env=env) for _ in range(agents)]
    return head, console, procs


def wait_or_kill(proc, timeout):
    """proc's exit code once it ends, waiting at most `timeout` seconds before it is killed."""
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def kill_tree(pids):
    """SIGKILL to each pid and every process under it."""
    def tree(pid):
        return [pid] + [p for c in children_of(pid) for p in tree(c)]

    for pid in pids:
        for child in tree(pid):
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                pass


def iso_ns(text):
    """Nanoseconds since the epoch of a results.json time ("2026-11-29T20:55:05.713Z", millisecond precision)."""
    when = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return int(round(when.timestamp() * 1000)) * 1_000_000

