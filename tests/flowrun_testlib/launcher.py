"""The plumbing of the tests that run `flowrun SPEC` on this host: a spec in a scratch directory,
flowrun run to its end (Run), started to be signalled, or on a terminal; which processes are
left; the worker helper (tests/e2e/helpers/worker.py) as a spec's `run:`."""
import json
import os
import pty
import re
import shutil
import subprocess
import sys
import time

from flowrun_testlib import clean_env
from flowrun_testlib.suite import E2E, path_of

WORKER = path_of("e2e", "helpers", "worker.py")
PY = sys.executable
SANITIZER_REPORT = re.compile(r"(WARNING|ERROR): (ThreadSanitizer|AddressSanitizer|LeakSanitizer)|runtime error: ")


def q(text):
    """A YAML double-quoted scalar (JSON's string syntax is valid YAML)."""
    return json.dumps(text)


def argv_yaml(*words):
    """A `run:` list that runs the worker helper with the test's python."""
    return "[" + ", ".join(q(w) for w in (PY, WORKER, *words)) + "]"


class Run:
    """One finished flowrun: exit code, console, run directory, wall time."""

    def __init__(self, rc, stdout, stderr, run_dir, elapsed):
        self.rc, self.stdout, self.stderr, self.run_dir, self.elapsed = rc, stdout, stderr, run_dir, elapsed

    def results(self, step):
        with open(os.path.join(self.run_dir, step, "results.json")) as f:
            return json.load(f)

    def read(self, *parts):
        with open(os.path.join(self.run_dir, *parts), errors="replace", newline="") as f:
            return f.read()

    def detail(self):
        return f"exit {self.rc} after {self.elapsed:.2f} s\n--- stdout\n{self.stdout[-3000:]}\n" \
               f"--- stderr\n{self.stderr[-5000:]}"


class NamedRun:
    """One finished flowrun (or flowrun resume) whose run directory its console names."""

    def __init__(self, rc, stdout, stderr):
        self.rc, self.stdout, self.stderr = rc, stdout, stderr
        m = re.search(r"^flowrun: run (\S+): \d+ steps?; logs and results in (.*)$", stderr, re.M)
        self.run_id, self.run_dir = (m.group(1), m.group(2)) if m else (None, None)

    def lines(self):
        """flowrun's own lines on stderr, durations written as <t>."""
        return [re.sub(r"\b\d+(\.\d+)? s\b", "<t>", line) for line in self.stderr.splitlines()
                if line.startswith("flowrun:")]

    def json(self, *parts):
        with open(os.path.join(self.run_dir, *parts)) as f:
            return json.load(f)

    def detail(self):
        return f"exit {self.rc}\n--- stdout\n{self.stdout[-3000:]}\n--- stderr\n{self.stderr[-5000:]}"


def run_named(suite, label, argv, cwd, env, timeout=60):
    """`flowrun ARGV` in `cwd` to its end, as a NamedRun; a check of `suite` that it printed no sanitizer report."""
    p = subprocess.run([suite.flowrun, *argv], cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=timeout * suite.slack)
    m = SANITIZER_REPORT.search(p.stderr)
    suite.check(m is None, f"{label}: no sanitizer report", p.stderr[max(0, m.start() - 200):][:4000] if m else "")
    return NamedRun(p.returncode, p.stdout, p.stderr)


def read_environ(pid):
    """`pid`'s environment as bytes, or None when it is gone, a zombie or a kernel thread. A process caught
    inside execve() reads as empty for an instant (its new memory has no environment yet): read it again."""
    for _ in range(20):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read()
            if env:
                return env
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            return None
        state, ppid, flags = fields[0], int(fields[1]), int(fields[6])
        if state in "ZX" or ppid == 2 or pid == 2 or flags & 0x00200000:  # PF_KTHREAD
            return None
        time.sleep(0.005)
    return b""


def processes_with(entry):
    """Pids (other than ours) whose environment holds `entry`, as flowrun's guardian looks for them."""
    found, needle = [], b"\0" + entry.encode() + b"\0"
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        env = read_environ(int(name))
        if env is not None and needle in b"\0" + env + (b"" if env.endswith(b"\0") else b"\0"):
            found.append(int(name))
    return found


def res_culprit(r, step="train"):
    try:
        return r.results(step)["culprit_rank"]
    except (OSError, ValueError, KeyError):
        return "no results.json"


def proc_name(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


def py_spy():
    """The py-spy that tests of real stacks give flowrun (FLOWRUN_PY_SPY): this environment's FLOWRUN_PY_SPY, else
    build/py-spy/bin/py-spy (scripts/test --phase deps installs it), else one on PATH; None without."""
    built = os.path.join(os.path.dirname(path_of()), "build", "py-spy", "bin", "py-spy")
    found = os.environ.get("FLOWRUN_PY_SPY") or (built if os.access(built, os.X_OK) else shutil.which("py-spy"))
    return os.path.abspath(found) if found else None


def wait_for(predicate, limit, step=0.02):
    deadline = time.monotonic() + limit
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(step)


class Launcher(E2E):
    """An E2E suite with flowrun SPEC's plumbing."""

    def workspace(self, name, spec_text):
        """A fresh directory holding spec.yaml; returns (dir, spec path, run dir)."""
        d = os.path.join(self.scratch, name)
        os.makedirs(d)
        spec = os.path.join(d, "spec.yaml")
        with open(spec, "w") as f:
            f.write(spec_text)
        return d, spec, os.path.join(d, "run")

    def argv(self, spec, run_dir, *options):
        return [self.flowrun, spec, "--run-dir", run_dir, *options]

    def sanitizer_check(self, label, stderr):
        m = SANITIZER_REPORT.search(stderr)
        self.check(m is None, f"{label}: no sanitizer report", stderr[max(0, m.start() - 200):][:4000] if m else "")

    def flowrun_run(self, label, spec, run_dir, *options, env=None, cwd=None, timeout=120, stdout=None):
        env = clean_env(**(env or {}))
        start = time.monotonic()
        p = subprocess.run(self.argv(spec, run_dir, *options), cwd=cwd or os.path.dirname(spec), env=env,
                           stdout=stdout if stdout is not None else subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=timeout)
        elapsed = time.monotonic() - start
        out = p.stdout.decode(errors="replace") if p.stdout is not None else ""
        err = p.stderr.decode(errors="replace")
        self.sanitizer_check(label, err)
        return Run(p.returncode, out, err, run_dir, elapsed)

    def start(self, spec, run_dir, *options, env=None, stdout=subprocess.PIPE):
        """flowrun in its own session (as a shell would start a foreground job
        in its own process group), for tests that signal it."""
        return subprocess.Popen(self.argv(spec, run_dir, *options), cwd=os.path.dirname(spec),
                                env=clean_env(**(env or {})), stdout=stdout, stderr=subprocess.PIPE,
                                start_new_session=True)

    def finish(self, label, p, run_dir, start, timeout=60):
        out, err = p.communicate(timeout=timeout)
        elapsed = time.monotonic() - start
        err = err.decode(errors="replace")
        self.sanitizer_check(label, err)
        return Run(p.returncode, (out or b"").decode(errors="replace"), err, run_dir, elapsed)

    def run_pty(self, spec, run_dir, *options, env=None, timeout=60):
        """flowrun with stdout and stderr on a terminal; returns (exit code, bytes shown)."""
        master, slave = pty.openpty()
        p = subprocess.Popen(self.argv(spec, run_dir, *options), cwd=os.path.dirname(spec),
                             env=clean_env(**(env or {})), stdin=subprocess.DEVNULL, stdout=slave, stderr=slave,
                             start_new_session=True)
        os.close(slave)
        chunks, deadline = [], time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every writer closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        os.close(master)
        rc = p.wait(timeout=10)
        return rc, b"".join(chunks)

    def tmpfs_run(self, label, spec, run_dir, size, *options):
        """flowrun SPEC with a tmpfs of `size` mounted over run_dir, in a private mount namespace that ends
        with it (nothing stays mounted). Returns (Run whose run_dir is a copy of the tmpfs taken at the end,
        or None when skipped, with the reason printed)."""
        if os.geteuid() != 0 or shutil.which("unshare") is None:
            print(f"{label}: skipped: a private tmpfs needs root and unshare")
            return None
        os.makedirs(run_dir)
        saved = run_dir + ".saved"
        os.makedirs(saved)
        script = ('mount -t tmpfs -o size="$3" flowrun-test "$1" || exit 97; shift 3; "$@"; rc=$?; '
                  'cp -a "$0/." "$OUT/"; exit $rc')
        argv = ["unshare", "-m", "--propagation", "private", "sh", "-c", script, run_dir, run_dir, "-", size,
                *self.argv(spec, run_dir, *options)]
        env = clean_env(OUT=saved)
        start = time.monotonic()
        p = subprocess.run(argv, cwd=os.path.dirname(spec), env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=120)
        elapsed = time.monotonic() - start
        err = p.stderr.decode(errors="replace")
        if p.returncode == 97 or (p.returncode != 0 and "unshare:" in err and "flowrun" not in err):
            print(f"{label}: skipped: cannot mount a tmpfs in a private mount namespace: {err.strip()}")
            return None
        self.sanitizer_check(label, err)
        return Run(p.returncode, p.stdout.decode(errors="replace"), err, saved, elapsed)
