"""Fault injection: each fault a launcher must survive, injected into a real
run of the flowrun binary, with what it cost measured.

  python3 -m pytest tests/e2e/test_faults.py [--flowrun PATH] [--sanitized] [-k NAME] [--fault-table FILE]

Every fault is a test. Besides its own checks (the report names the right
rank, the exit code, ...), each one measures and asserts the same four things:

  time to recover   from the fault to flowrun's verdict (its exit, or the
                    step going on), against a bound the test states
  processes left    every process that carries the run's id (workers, their
                    children, agents, flowrun itself) must be gone: 0
  results lost      results a rank finished before the fault that are missing
                    afterwards: 0
  falsely claimed   a failed rank or step recorded as succeeded, a join run on
                    a partial result, a file in outputs/ that no rank finished: 0

The session prints the measured table (Markdown) that docs/reliability.md
holds at its end, and --fault-table FILE writes it there;
test_reliability_doc_lists_every_fault checks that the document has a row
for every fault here, in their order. The faults on a real network (a node's link cut, a node's agent or the
head killed across hosts) are in tests/e2e/multinode/test_multinode.py,
which needs root and builds a cluster; here a "node" is an agent on this host.

--sanitized: the binary is built with a sanitizer: timing bounds are tripled.
"""
import datetime
import fcntl
import difflib
import json
import os
import re
import select
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import time

import pytest

from flowrun_testlib import AGENT_CLOSED, GAPS_RANK, clean_env, peak_rss_kib, tables, temp_dir, wire
from flowrun_testlib import run as run_to_end
from flowrun_testlib.launcher import SANITIZER_REPORT, Launcher, processes_with, wait_for
from flowrun_testlib.nodes import FAKE_AGENT, Nodes, sh_yaml, spec_text
from flowrun_testlib.suite import E2E, path_of

pytestmark = pytest.mark.faults

# The control plane's protocol version, as flowrun itself is built with it.
with open(path_of("..", "lib", "protocol", "include", "flowrun", "protocol.h"), encoding="utf-8") as _header:
    PROTOCOL = int(re.search(r"kProtocolVersion = (\d+);", _header.read()).group(1))

PY = sys.executable
WORKER = path_of("e2e", "helpers", "worker.py")
# A rank's finished result, as lost_results() looks for it: a file in its
# FLOWRUN_OUTPUT_DIR and a line in its stdout.log.
RESULT = 'echo "rank $RANK result" > "$FLOWRUN_OUTPUT_DIR/result.txt"; echo "rank $RANK wrote its result"; '

MARK = "FAULT_E2E_MARK"  # set for flowrun: every process it starts inherits it


def q(text):
    return json.dumps(text)


def read(path, default=None):
    try:
        with open(path, errors="replace", newline="") as f:
            return f.read()
    except OSError:
        if default is None:
            raise
        return default


def fault_cases(names, *cases):
    """The cases of a test that injects several faults alike, as pytest.mark.parametrize: each case
    is a fault of its own, a row of the table, whose name (its first value) is also its id."""
    return pytest.mark.parametrize(names, [pytest.param(*case, id=case[0]) for case in cases])


class Row:
    """One line of the table: what was injected, what flowrun did, what it cost."""

    def __init__(self, fault, did, reproduce):
        self.fault, self.did, self.reproduce = fault, did, reproduce
        self.recover = None  # seconds, or a text such as "n/a"
        self.left = None
        self.lost = None
        self.false = None
        self.extra = ""

    def cells(self):
        rec = f"{self.recover:.3f} s" if isinstance(self.recover, float) else str(self.recover)
        did = self.did + (f" ({self.extra})" if self.extra else "")
        return [self.fault, did, rec, str(self.left), f"{self.lost} / {self.false}", f"`{self.reproduce}`"]


class TestFaults(E2E):
    rows = []  # the table's rows, one per fault test that ran, in their order (row())

    # --- plumbing ---------------------------------------------------------------

    def sanitizer_check(self, label, text):
        m = SANITIZER_REPORT.search(text)
        self.check(m is None, f"{label}: no sanitizer report", text[max(0, m.start() - 200):][:4000] if m else "")

    def row(self, name, did):
        test = f"tests/e2e/test_faults.py::TestFaults::{self.test_name}"
        r = Row(name, did, f"python3 -m pytest {shlex.quote(test)}")
        self.rows.append(r)
        return r

    def workspace(self, name, spec):
        d = os.path.join(self.scratch, name)
        os.makedirs(d)
        with open(os.path.join(d, "spec.yaml"), "w") as f:
            f.write(spec)
        return d

    def start(self, d, run_id, *options, env=None, stdout=None, wrap=()):
        """flowrun on d/spec.yaml in its own session (a shell's foreground job has its own
        process group); stdout and stderr go to files in d unless `stdout` says otherwise.
        `wrap` goes before flowrun's argv (`timeout -s KILL 600`)."""
        out = stdout if stdout is not None else open(os.path.join(d, "flowrun.out"), "w")
        err = open(os.path.join(d, "flowrun.err"), "w")
        try:
            return subprocess.Popen([*wrap, self.flowrun, os.path.join(d, "spec.yaml"), "--run-dir",
                                     os.path.join(d, "run"), "--run-id", run_id, *options], cwd=d,
                                    env=clean_env(**{MARK: run_id, **(env or {})}), stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=err, start_new_session=True)
        finally:
            if stdout is None:
                out.close()
            err.close()

    def wait(self, p, limit):
        try:
            return p.wait(timeout=limit * self.slack)
        except subprocess.TimeoutExpired:
            return None

    def ended(self, label, p, d, limit):
        """Waits for flowrun (up to `limit` s, scaled); returns its exit code (None: still
        running), the moment it ended and its stderr, checked for a sanitizer report."""
        rc = self.wait(p, limit)
        end = time.monotonic()
        err = read(os.path.join(d, "flowrun.err"))
        self.sanitizer_check(label, err)
        return rc, end, err

    def leftovers(self, run_id):
        return sorted(set(processes_with(f"FLOWRUN_RUN_ID={run_id}")) | set(processes_with(f"{MARK}={run_id}")))

    def count_left(self, run_id, limit=5):
        """Processes of the run still alive `limit` s (at most) after flowrun ended; kills them."""
        wait_for(lambda: not self.leftovers(run_id), limit * self.slack)
        left = self.leftovers(run_id)
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return len(left)

    @staticmethod
    def start_detail(d, p):
        """What to show when the ranks did not all start: flowrun's state, its stderr and the ready files."""
        state = "still running" if p.poll() is None else f"exited {p.returncode}"
        return f"flowrun {state}; ready files: {sorted(n for n in os.listdir(d) if n.startswith('ready'))}\n" + \
            read(os.path.join(d, "flowrun.err"))

    @staticmethod
    def ready_pids(d, count):
        """{rank: pid} from the ready.R files the ranks write (their pid, once their traps are set).
        Only the final names count: a ready.R.tmp being renamed may be listed under neither name."""
        found = {}
        for n in os.listdir(d):
            m = re.fullmatch(r"ready\.(\d+)", n)
            if m:
                text = read(os.path.join(d, n), "").strip()
                if text.isdigit():
                    found[int(m.group(1))] = int(text)
        return found if len(found) >= count else None

    def wait_ready(self, d, count, p, limit=30):
        """{rank: pid} once `count` ranks are ready; None when flowrun ends first or the wait runs out."""
        ready = {}

        def probe():
            ready["pids"] = self.ready_pids(d, count)
            return ready["pids"] or p.poll() is not None
        wait_for(probe, limit * self.slack)
        return ready["pids"]

    @staticmethod
    def results(d, step="train"):
        try:
            with open(os.path.join(d, "run", step, "results.json")) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def finish_row(self, r, label, recover, bound, left, lost, false, detail):
        r.recover, r.left, r.lost, r.false = recover, left, lost, false
        if isinstance(recover, float):
            self.check(recover <= bound * self.slack, f"{label}: recovered within {bound * self.slack:g} s",
                       f"{recover:.2f} s\n{detail}")
        self.check(left == 0, f"{label}: no process is left", f"{left} left\n{detail}")
        self.check(lost == 0, f"{label}: no finished result is lost", f"{lost} lost\n{detail}")
        self.check(false == 0, f"{label}: nothing is falsely claimed", f"{false} falsely claimed\n{detail}")

    # A rank that records a result, says it is ready (its pid, once its traps are
    # set) and then waits to be stopped; the join marks that it ran.
    RANK_SCRIPT = (RESULT +
                   '{trap}echo $$ > "ready.$RANK.tmp" && mv "ready.$RANK.tmp" "ready.$RANK"; {rest}')

    def rank_flow(self, name, trap="", rest="exec sleep 60", extra="", ranks=4):
        script = self.RANK_SCRIPT.format(trap=trap, rest=rest)
        return self.workspace(name, f"""name: {name}
steps:
  - name: train
    run: {sh_yaml(script)}
    parallel:
      cpus: {ranks}
{extra}    collect: all
  - name: join
    join: train
    run: {sh_yaml('touch "$0/join.ran"', "@DIR@")}
""")

    def fix_dir(self, d):
        path = os.path.join(d, "spec.yaml")
        with open(path) as f:
            text = f.read()
        with open(path, "w") as f:
            f.write(text.replace("@DIR@", d))

    def lost_results(self, d, ranks, finished=None):
        """Ranks (of `finished`, default all) whose result file or console line is gone from the run directory."""
        lost = 0
        for rank in (finished if finished is not None else range(ranks)):
            rank_dir = os.path.join(d, "run", "train", f"rank{rank}")
            if read(os.path.join(rank_dir, "out", "result.txt"), "") != f"rank {rank} result\n" or \
                    f"rank {rank} wrote its result\n" not in read(os.path.join(rank_dir, "stdout.log"), ""):
                lost += 1
        return lost

    def false_claims(self, d, failed_ranks=()):
        """For a step that must not succeed: a join that ran, outputs gathered, a success recorded."""
        false = 0
        res = self.results(d)
        if os.path.exists(os.path.join(d, "join.ran")):
            false += 1
        if os.path.exists(os.path.join(d, "run", "train", "outputs")):
            false += 1
        if res is not None:
            if res.get("outcome") == "succeeded":
                false += 1
            for w in res.get("ranks", []):
                if w.get("rank") in failed_ranks and w.get("status") == "succeeded":
                    false += 1
        return false

    # --- a worker dies or hangs -------------------------------------------------------

    def test_worker_sigkill(self):
        """Rank 2 is killed with SIGKILL while every rank runs: the step fails at once, naming it."""
        r = self.row("worker_sigkill", "the step fails at once, rank 2 named as culprit (SIGKILL); the other 3 are "
                     "stopped; the join does not run")
        run_id = f"wkill-{os.getpid()}"
        d = self.rank_flow("worker_sigkill")
        self.fix_dir(d)
        p = self.start(d, run_id, "--grace", "2")
        pids = self.wait_ready(d, 4, p)
        if not self.check(bool(pids), "worker sigkill: every rank starts", self.start_detail(d, p)):
            p.kill()
            return
        t0 = time.monotonic()
        os.kill(pids[2], signal.SIGKILL)
        rc, end, err = self.ended("worker sigkill", p, d, 20)
        recover = end - t0
        res = self.results(d) or {}
        self.check(rc == 137 and res.get("culprit_rank") == 2, "worker sigkill: exit 137 (128 + 9), culprit rank 2",
                   f"exit {rc}\n{err}")
        self.check("rank 2" in err and "SIGKILL" in err, "worker sigkill: the report names rank 2 and SIGKILL", err)
        self.finish_row(r, "worker sigkill", recover, 2.0, self.count_left(run_id), self.lost_results(d, 4),
                        self.false_claims(d, failed_ranks=(2,)), err)

    def hang_flow(self, name, key, value):
        """4 ranks; rank 1 stops itself with SIGSTOP after a line, the others print every 0.1 s."""
        return self.workspace(name, f"""name: {name}
steps:
  - name: train
    run: {q([PY, WORKER, "hang", "--stop", "1", "--say"])}
    {key}: {value}
    parallel:
      cpus: 4
  - name: join
    join: train
    run: {sh_yaml('touch "$0/join.ran"', "@DIR@")}
""")

    @fault_cases("name, key, limit, did, want", (
        "worker_sigstop_timeout", "timeout", 3,
        "the step's `timeout` ends it: every rank's stack first (here the kernel's words, no py-spy), rank 1 "
        "apart in `do_signal_stop`, then SIGTERM and SIGCONT to every rank; the report names rank 1 as stopped "
        "and silent; exit 124; no join",
        r"^flowrun:   rank 1 \(stopped\) wrote nothing for the last [0-9.]+ s$"), (
        "worker_sigstop_stall", "stall_timeout", 2,
        "`stall_timeout` sees rank 1 silent, takes every rank's stack (here the kernel's words, no py-spy), rank 1 "
        "apart in `do_signal_stop`, stops the step and names rank 1 as stalled; exit 124; no join",
        r"^flowrun: step 'train' stalled: rank 1 \(stopped\) wrote nothing for [0-9.]+ s "
        r"\(stall_timeout: 2s\); stopping the step$"))
    def test_worker_sigstop(self, name, key, limit, did, want):
        """Rank 1 stops itself (SIGSTOP): a hang. The step's timeout ends it, or, as the others keep
        printing, its stall_timeout; the report names rank 1."""
        r = self.row(name, did)
        run_id = f"{name}-{os.getpid()}"
        d = self.hang_flow(name, key, limit)
        self.fix_dir(d)
        t0 = time.monotonic()
        env = dict(os.environ, FLOWRUN_PY_SPY=os.path.join(d, "no-py-spy"))  # the kernel's words: no py-spy needed
        p = self.start(d, run_id, "--grace", "30", env=env)
        # The moment rank 1 stops: its line reaches its log just before.
        log = os.path.join(d, "run", "train", "rank1", "stdout.log")
        wait_for(lambda: "stops itself" in read(log, "") or p.poll() is not None, 30 * self.slack)
        stopped = time.monotonic()
        rc, ended, err = self.ended(name, p, d, limit + 30)
        self.check(rc == 124, f"{name}: exit 124", f"exit {rc}\n{err}")
        self.check(re.search(want, err, re.M) is not None, f"{name}: the report names the stopped rank 1",
                   f"want /{want}/\n{err}")
        # Every rank's stack is taken while all four are alive: before the signals (a rank already stopped
        # would be missing, "it had ended"); rank 1 waits apart, in the stopped state.
        stacks = (self.results(d) or {}).get("stacks") or {}
        groups = stacks.get("groups", [])
        self.check(stacks.get("source") == "kernel" and sorted(r for g in groups for r in g["ranks"]) == [0, 1, 2, 3]
                   and not any(g["missing"] for g in groups)
                   and any(g["ranks"] == [1] and g["where"].startswith("do_signal_stop (state T") for g in groups)
                   and re.search(r"^flowrun:   .*rank 1 is in do_signal_stop \(state T", err, re.M) is not None
                   and all(os.path.exists(os.path.join(d, "run", "train", f"rank{k}", "stack.txt")) for k in range(4)),
                   f"{name}: every rank's stack taken before the signals, rank 1 apart in do_signal_stop",
                   f"{json.dumps(stacks)}\n{err}")
        # The timeout counts from the step's start, the stall from rank 1's last line.
        since = stopped if key == "stall_timeout" else t0
        self.check(ended - since < limit + 2 * self.slack, f"{name}: it ends right after {key} ({limit} s), not "
                   "after the 30 s grace: the stopped rank got its SIGTERM", f"{ended - since:.2f} s")
        r.extra = f"{key}: {limit} s"
        self.finish_row(r, name, ended - stopped, limit + 2.0, self.count_left(run_id), 0,
                        self.false_claims(d, failed_ranks=(0, 1, 2, 3)), err)

    # --- flowrun itself dies or is interrupted --------------------------------------

    def test_flowrun_sigkill(self):
        """flowrun is killed with SIGKILL: its guardian kills every worker and every descendant."""
        r = self.row("flowrun_sigkill", "the guardian kills every worker and each one's descendants, a `setsid` "
                     "grandchild included")
        run_id = f"fkill-{os.getpid()}"
        d = self.rank_flow("flowrun_sigkill", rest="setsid sleep 300 & sleep 300 & wait")
        self.fix_dir(d)
        p = self.start(d, run_id)
        pids = self.wait_ready(d, 4, p)
        if not self.check(bool(pids), "flowrun sigkill: every rank starts", self.start_detail(d, p)):
            p.kill()
            return
        wait_for(lambda: len(processes_with(f"FLOWRUN_RUN_ID={run_id}")) >= 12, 10 * self.slack)
        before = len(processes_with(f"FLOWRUN_RUN_ID={run_id}"))
        self.check(before >= 12, "flowrun sigkill: 4 ranks with 2 children each run before the kill", str(before))
        t0 = time.monotonic()
        p.kill()
        p.wait()
        gone = wait_for(lambda: not self.leftovers(run_id), 5 * self.slack, step=0.01)
        recover = time.monotonic() - t0
        r.extra = f"{before} processes before the kill"
        self.finish_row(r, "flowrun sigkill", recover if gone else float(recover), 2.0, self.count_left(run_id, 0),
                        self.lost_results(d, 4), self.false_claims(d), f"{before} before")

    def test_ctrl_c_once(self):
        """One Ctrl-C: every rank gets SIGTERM, runs its handler (its last words reach the log), exit 130."""
        r = self.row("ctrl_c_once", "SIGTERM to every rank, each one's handler runs and its last lines reach "
                     "its log; results.json says interrupted; exit 130")
        run_id = f"int1-{os.getpid()}"
        trap = 'trap \'echo "rank $RANK saved a checkpoint"; exit 143\' TERM; '
        d = self.rank_flow("ctrl_c_once", trap=trap, rest="sleep 60 & wait")
        self.fix_dir(d)
        p = self.start(d, run_id, "--grace", "10")
        pids = self.wait_ready(d, 4, p)
        if not self.check(bool(pids), "ctrl-c once: every rank starts", self.start_detail(d, p)):
            p.kill()
            return
        t0 = time.monotonic()
        os.killpg(p.pid, signal.SIGINT)  # what a terminal sends to its foreground process group
        rc, end, err = self.ended("ctrl-c once", p, d, 20)
        recover = end - t0
        res = self.results(d) or {}
        self.check(rc == 130 and res.get("outcome") == "interrupted",
                   "ctrl-c once: exit 130, results.json says interrupted", f"exit {rc}\n{err}\n{res}")
        saved = [k for k in range(4) if f"rank {k} saved a checkpoint\n" in
                 read(os.path.join(d, "run", "train", f"rank{k}", "stdout.log"), "")]
        self.check(saved == [0, 1, 2, 3], "ctrl-c once: every rank's handler ran and its line is in its log",
                   str(saved))
        self.finish_row(r, "ctrl-c once", recover, 2.0, self.count_left(run_id), self.lost_results(d, 4),
                        self.false_claims(d), err)

    def test_ctrl_c_twice(self):
        """Ranks that ignore SIGTERM under a 60 s grace: a second Ctrl-C kills them at once."""
        r = self.row("ctrl_c_twice", "the first Ctrl-C sends SIGTERM (ignored here, 60 s grace); the second "
                     "kills every rank at once; exit 130")
        run_id = f"int2-{os.getpid()}"
        d = self.rank_flow("ctrl_c_twice", trap="trap '' TERM; ", rest="sleep 60 & wait; sleep 60")
        self.fix_dir(d)
        p = self.start(d, run_id, "--grace", "60")
        pids = self.wait_ready(d, 4, p)
        if not self.check(bool(pids), "ctrl-c twice: every rank starts", self.start_detail(d, p)):
            p.kill()
            return
        os.killpg(p.pid, signal.SIGINT)
        time.sleep(0.5)
        still = p.poll() is None
        t0 = time.monotonic()
        os.killpg(p.pid, signal.SIGINT)
        rc, end, err = self.ended("ctrl-c twice", p, d, 20)
        recover = end - t0
        self.check(still and rc == 130, "ctrl-c twice: still stopping after one, exit 130 after two",
                   f"{still} exit {rc}\n{err}")
        self.check("SIGINT again" in err, "ctrl-c twice: flowrun says it kills now", err)
        self.finish_row(r, "ctrl-c twice", recover, 2.0, self.count_left(run_id), self.lost_results(d, 4),
                        self.false_claims(d), err)

    # --- what a worker does to its own output and processes ---------------------------

    def test_flood(self):
        """Two ranks write 512 MiB each to stdout as fast as they can; flowrun's memory stays flat."""
        mib = 512
        r = self.row("flood", "every byte reaches the ranks' logs; flowrun's memory stays bounded")
        run_id = f"flood-{os.getpid()}"
        code = ("import os, sys\n"
                "line = ('rank %s ' % os.environ['RANK'] + 'x' * 1016 + '\\n').encode()\n"
                f"block = line * 1024\nfor _ in range({mib}): sys.stdout.buffer.write(block)\n")
        d = self.workspace("flood", f"""name: flood
steps:
  - name: train
    run: {q([PY, "-c", code])}
    parallel:
      cpus: 2
""")
        sink = open(os.devnull, "w")
        t0 = time.monotonic()
        p = self.start(d, run_id, stdout=sink)
        peak = 0
        while p.poll() is None and time.monotonic() - t0 < 300 * self.slack:
            peak = max(peak, peak_rss_kib(p.pid) or 0)
            time.sleep(0.05)
        rc, end, err = self.ended("flood", p, d, 10)
        took = end - t0
        sink.close()
        sizes = [os.path.getsize(os.path.join(d, "run", "train", f"rank{k}", "stdout.log"))
                 if os.path.exists(os.path.join(d, "run", "train", f"rank{k}", "stdout.log")) else 0 for k in range(2)]
        want = mib * 1024 * 1024
        self.check(rc == 0, "flood: the step succeeds", f"exit {rc}\n{err}")
        # Under a sanitizer its run-time holds memory of its own: ASan's at -O0 about 243 MiB through a
        # flood of any size (64 MiB and 1 GiB alike), so the bound there is 5 times the plain one.
        bound = 64 * 1024 * (5 if self.sanitized else 1)
        self.check(0 < peak <= bound, f"flood: flowrun's peak RSS stays under {bound // 1024} MiB",
                   f"{peak} KiB")
        r.extra = f"{2 * mib} MiB in {took:.1f} s; flowrun's peak RSS {peak / 1024:.1f} MiB"
        lost = sum(1 for s in sizes if s != want)
        self.finish_row(r, "flood", "n/a (nothing fails)", 0, self.count_left(run_id), lost, 0,
                        f"sizes {sizes}, want {want}")

    def test_stdout_closed(self):
        """A rank closes its stdout (and later its stderr) and keeps running: it is not taken for dead."""
        r = self.row("stdout_closed", "the rank is still waited for; its stderr after the close and its exit "
                     "code are kept; the step succeeds when it does")
        run_id = f"close-{os.getpid()}"
        script = (RESULT + 'if [ "$RANK" = 0 ]; then exec 1>&-; sleep 1; echo "rank 0 after closing stdout" >&2; '
                  'exec 2>&-; sleep 1; fi; exit 0')
        d = self.workspace("stdout_closed", f"""name: closed
steps:
  - name: train
    run: {sh_yaml(script)}
    parallel:
      cpus: 2
    collect: all
""")
        t0 = time.monotonic()
        p = self.start(d, run_id)
        rc, end, err = self.ended("stdout closed", p, d, 30)
        took = end - t0
        res = self.results(d) or {}
        self.check(rc == 0 and res.get("outcome") == "succeeded", "stdout closed: the step succeeds",
                   f"exit {rc}\n{err}")
        self.check(took >= 2.0, "stdout closed: flowrun waited for the rank to exit, not for its output to end",
                   f"{took:.2f} s")
        self.check(read(os.path.join(d, "run", "train", "rank0", "stderr.log"), "") ==
                   "rank 0 after closing stdout\n", "stdout closed: what it wrote after closing stdout is kept")
        outputs = os.path.join(d, "run", "train", "outputs")
        false = 0 if os.path.isdir(outputs) else 1
        self.finish_row(r, "stdout closed", "n/a (nothing fails)", 0, self.count_left(run_id),
                        self.lost_results(d, 2), false, err)

    def test_grandchildren(self):
        """Each rank starts a grandchild in a new session and one that double-forks, then exits 0."""
        r = self.row("grandchildren", "the step succeeds with its ranks' results; the processes they left "
                     "behind are stopped and named in results.json's notes")
        run_id = f"grand-{os.getpid()}"
        script = (RESULT + 'setsid sleep 300 > /dev/null 2>&1 < /dev/null & (sleep 300 > /dev/null 2>&1 < /dev/null &); '
                  'exit 0')
        d = self.workspace("grandchildren", f"""name: grand
steps:
  - name: train
    run: {sh_yaml(script)}
    parallel:
      cpus: 2
    collect: all
""")
        t0 = time.monotonic()
        p = self.start(d, run_id)
        rc, end, err = self.ended("grandchildren", p, d, 30)
        took = end - t0
        res = self.results(d) or {}
        notes = " ".join(res.get("notes", []))
        self.check(rc == 0 and res.get("outcome") == "succeeded", "grandchildren: the step succeeds",
                   f"exit {rc}\n{err}")
        self.check("stopped 4 processes left behind" in notes, "grandchildren: all 4 are named as stopped", notes)
        self.finish_row(r, "grandchildren", took, 5.0, self.count_left(run_id, 1), self.lost_results(d, 2),
                        0 if os.path.isdir(os.path.join(d, "run", "train", "outputs")) else 1, err)

    def test_disk_full(self):
        """The run directory is a 4 MiB tmpfs; two ranks print until their logs fill it."""
        r = self.row("disk_full", "flowrun says which log it cannot write and why, stops the step (exit 1); "
                     "the console kept every line; results.json and run.json claim no success; no join")
        run_id = f"full-{os.getpid()}"
        d = self.workspace("disk_full", f"""name: full
steps:
  - name: train
    run: {q([PY, WORKER, "flood", "2000", "--forever"])}
    parallel:
      cpus: 2
  - name: join
    join: train
    run: {sh_yaml('touch "$0/join.ran"', "@DIR@")}
""")
        self.fix_dir(d)
        launcher = self.borrow(Launcher)
        run_dir = os.path.join(d, "run")
        run = launcher.tmpfs_run("disk full", os.path.join(d, "spec.yaml"), run_dir, "4m", "--run-id", run_id,
                                 "--grace", "5")
        if run is None:
            r.recover, r.left, r.lost, r.false = "skipped (needs root)", "-", "-", "-"
            return
        self.check(run.rc == 1, "disk full: exit 1", run.detail())
        said = re.search(rf"^flowrun: error: step 'train': cannot write rank [01]'s stdout\.log in "
                         rf"{re.escape(run_dir)}/train/rank[01]: No space left on device; stopping the step",
                         run.stderr, re.M)
        self.check(said is not None, "disk full: flowrun says which file it cannot write, and why", run.stderr)
        # Lost: a line a rank wrote that is in neither its log nor the console (the
        # console shows every line; only a rank's very last may be cut by SIGTERM,
        # maybe inside its number, so only whole lines count: a line cut anywhere
        # else leaves a gap, which counts as lost).
        lost = 0
        lines = run.stdout.split("\n")[:-1]
        for k in (0, 1):
            whole = (re.fullmatch(rf"\[train r{k}\] rank {k} line (\d+) (x*)", x) for x in lines)
            numbers = [int(m.group(1)) for m in whole if m and len(m.group(2)) == int(m.group(1)) % 173]
            lost += sum(1 for a, b in zip(numbers, numbers[1:]) if b != (a + 1) % 2000)
        res = None
        try:
            res = run.results("train")
        except (OSError, ValueError):
            pass
        false = (1 if res is not None and res.get("outcome") == "succeeded" else 0) + \
            (1 if os.path.exists(os.path.join(d, "join.ran")) else 0)
        try:
            recorded = json.loads(run.read("run.json"))
            false += 1 if recorded["steps"]["train"] == "succeeded" or recorded["exit_code"] == 0 else 0
        except (OSError, ValueError, KeyError):
            pass
        r.extra = f"{run.elapsed:.2f} s from start to exit"
        self.finish_row(r, "disk full", "n/a (the step fails at once)", 0, self.count_left(run_id), lost, false,
                        run.detail())

    def test_restart(self):
        """Rank 1 fails on the first attempt after writing a file; max_restarts: 1 runs every rank again."""
        r = self.row("restart", "every rank restarts (max_restarts: 1); the second attempt succeeds and the "
                     "join sees only its results, nothing from the failed attempt")
        run_id = f"restart-{os.getpid()}"
        script = ('if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then '
                  'echo partial > "$FLOWRUN_OUTPUT_DIR/partial.txt"; '
                  'if [ "$RANK" = 1 ]; then date +%s.%N > "$0/failed.at"; exit 3; fi; exec sleep 60; fi; '
                  '[ "$RANK" = 0 ] && date +%s.%N > "$0/restarted.at"; '
                  + RESULT)
        join = 'cd "$FLOWRUN_INPUTS" && find . -type f | sort > "$0/inputs.txt"'
        d = self.workspace("restart", "")
        with open(os.path.join(d, "spec.yaml"), "w") as f:
            f.write(f"""name: restart
steps:
  - name: train
    run: {sh_yaml(script, d)}
    parallel:
      cpus: 4
      max_restarts: 1
    collect: all
  - name: join
    join: train
    run: {sh_yaml(join, d)}
""")
        p = self.start(d, run_id, "--grace", "2")
        rc, _, err = self.ended("restart", p, d, 60)
        self.check(rc == 0, "restart: the flow succeeds on the second attempt", f"exit {rc}\n{err}")
        try:
            recover = float(read(os.path.join(d, "restarted.at"))) - float(read(os.path.join(d, "failed.at")))
        except (OSError, ValueError):
            recover = "not measured"
        inputs = read(os.path.join(d, "inputs.txt"), "").split()
        want = [f"./rank{k}/result.txt" for k in range(4)]
        kept = read(os.path.join(d, "run", "train", "rank1", "attempt0", "out", "partial.txt"), "")
        self.check(kept == "partial\n", "restart: the failed attempt's files are kept in rankR/attempt0/",
                   str(os.listdir(os.path.join(d, "run", "train", "rank1"))))
        self.finish_row(r, "restart", recover, 5.0, self.count_left(run_id), len(set(want) - set(inputs)),
                        len(set(inputs) - set(want)), f"inputs {inputs}\n{err}")

    def test_hostile_input(self):
        """Arguments and paths built to break out: ${args} holding shell syntax, a run directory
        whose path has quotes and $(...). (Links out of a rank's output directory: output_link_out.)"""
        r = self.row("hostile_input", "`${args}` and paths reach the program as plain words (a list `run` "
                     "starts no shell; under `shell: true` every value is quoted); a link inside "
                     "FLOWRUN_OUTPUT_DIR to one of its files is collected as that file")
        run_id = f"hostile-{os.getpid()}"
        d = os.path.join(self.scratch, "hostile $(touch INJ0) `touch INJ1` it's")
        os.makedirs(d)
        show = ('import json, os, sys; print(json.dumps(sys.argv[1:])); '
                'print("parent:", open("/proc/%d/comm" % os.getppid()).read().strip())')
        rank = ('import os; out = os.environ["FLOWRUN_OUTPUT_DIR"]; '
                'open(os.path.join(out, "result.txt"), "w").write("rank %s result\\n" % os.environ["RANK"]); '
                'print("rank %s wrote its result" % os.environ["RANK"]); '
                'os.symlink("result.txt", os.path.join(out, "hostname"))')
        with open(os.path.join(d, "spec.yaml"), "w") as f:
            f.write(f"""name: hostile
steps:
  - name: train
    run: {q([PY, "-c", rank])}
    parallel:
      cpus: 2
    collect: all
  - name: listed
    join: train
    run: {q([PY, "-c", show, "${args}", "${steps.train.outputs}"])}
  - name: script
    needs: [listed]
    shell: true
    run: {q(PY + " -c " + json.dumps(show) + " ${args} ${steps.train.outputs}")}
""")
        args = ["$(touch INJ2)", "; touch INJ3", "`touch INJ4`", "' ; touch INJ5 ; '", "a\nb"]
        p = self.start(d, run_id, "--", *args)
        rc, _, err = self.ended("hostile input", p, d, 30)
        out = read(os.path.join(d, "flowrun.out"))
        outputs = os.path.join(d, "run", "train", "outputs")
        want = json.dumps(args + [outputs])
        self.check(rc == 0, "hostile input: the flow succeeds", f"exit {rc}\n{err}\n{out}")
        self.check(f"[listed] {want}" in out.splitlines() and f"[script] {want}" in out.splitlines(),
                   "hostile input: both steps get every word unchanged", f"want {want}\n{out}")
        self.check("[listed] parent: flowrun" in out.splitlines(),
                   "hostile input: a list run is started by flowrun itself, not by a shell", out)
        injected = [n for n in os.listdir(d) + os.listdir(self.scratch) if n.startswith("INJ")]
        self.check(not injected, "hostile input: no injected command ran", str(injected))
        found = sorted(os.path.relpath(os.path.join(top, f), outputs)
                       for top, _, files in os.walk(outputs) for f in files)
        want_files = [f"rank{k}/{n}" for k in range(2) for n in ("hostname", "result.txt")]
        self.check(found == want_files, "hostile input: a link to a file inside FLOWRUN_OUTPUT_DIR is collected as "
                   "that file, as docs/spec.md says", f"{found}")
        self.finish_row(r, "hostile input", "n/a (nothing fails)", 0, self.count_left(run_id),
                        self.lost_results(d, 2), len(injected), err)

    # --- a node: the head or an agent dies, a node sends a bad upload ----------------

    def nodes(self, name, spec, **kw):
        n = Nodes(self, name, spec, **kw)
        self.open.append(n)
        return n

    NODE_RANK = (RESULT +
                 'echo $$ > "ready.$RANK.tmp" && mv "ready.$RANK.tmp" "ready.$RANK"; exec sleep 60')

    def test_head_sigkill(self):
        """The head of a 2-node step is killed with SIGKILL: both agents stop their ranks and exit."""
        r = self.row("head_sigkill", "each agent sees the connection close, stops its ranks and exits 1")
        n = self.nodes("head_sigkill", spec_text("headkill", sh_yaml(self.NODE_RANK)))
        if not n.begin("head sigkill"):
            return
        if not self.check(bool(self.wait_ready(n.dir, 4, n.head)), "head sigkill: every rank starts", n.detail()):
            return
        t0 = time.monotonic()
        os.kill(n.head.pid, signal.SIGKILL)
        codes = [n.wait(p, 10) for p in n.agents]
        gone = wait_for(lambda: not n.leftovers(), 10 * self.slack, step=0.01)
        recover = time.monotonic() - t0
        self.check(codes == [1, 1], "head sigkill: each agent exits 1", f"{codes}\n{n.detail()}")
        n.sanitizer_check("head sigkill")
        left = 0 if gone else len(n.leftovers())
        self.finish_row(r, "head sigkill", recover, 2.0 + 3.0, left, 0, 0, n.detail())

    def test_agent_sigkill(self):
        """One node's agent is killed with SIGKILL: the head names the node lost and stops the other."""
        r = self.row("agent_sigkill", "the head reports the node lost (its connection closed), stops the other "
                     "node's ranks, records the lost ranks as `lost`; exit 1; no join")
        join = '  - name: join\n    join: train\n    run: ' + sh_yaml('touch "$0/join.ran"', "@DIR@") + "\n"
        n = self.nodes("agent_sigkill", spec_text("agentkill", sh_yaml(self.NODE_RANK), collect="all",
                                                  more_steps=join))
        if not n.begin("agent sigkill"):
            return
        if not self.check(bool(self.wait_ready(n.dir, 4, n.head)), "agent sigkill: every rank starts",
                          n.detail()):
            return
        t0 = time.monotonic()
        os.kill(n.agents[0].pid, signal.SIGKILL)
        rc = n.wait(n.head, 20)
        recover = time.monotonic() - t0
        n.finish("agent sigkill", 10)
        err = n.head_err()
        self.check(rc == 1 and re.search(rf"node \S+ \(node rank [01] of 2\) lost: {AGENT_CLOSED}",
                                         err) is not None,
                   "agent sigkill: the head names the lost node and exits 1", n.detail())
        res = self.results(n.dir) or {}
        statuses = sorted(w.get("status", "?") for w in res.get("ranks", []))
        self.check(statuses.count("lost") == 2, "agent sigkill: results.json records the node's 2 ranks as lost",
                   str(statuses))
        n.check_nothing_left("agent sigkill")
        self.finish_row(r, "agent sigkill", recover, 3.0, len(n.leftovers()), 0, self.false_claims(n.dir),
                        n.detail())

    def test_agent_sigkill_spare(self):
        """With spare_nodes: 1 and a third agent waiting, node 1's agent is killed with SIGKILL: the spare
        takes node rank 1 and every rank runs again; the step succeeds with the second attempt's results."""
        r = self.row("agent_sigkill_spare", "the spare takes node rank 1 (spare_nodes: 1) and every rank "
                     "restarts (TORCHELASTIC_RESTART_COUNT 1); the step succeeds; the join gets the 4 results of "
                     "the second attempt; results.json names the lost node and the spare (time: to every rank "
                     "of the new attempt started)")
        join = '  - name: join\n    join: train\n    run: ' + sh_yaml('touch "$0/join.ran"', "@DIR@") + "\n"
        first = ('echo "$FLOWRUN_NODE_RANK $FLOWRUN_AGENT_ID" > "agent.$RANK"; ' + self.NODE_RANK)
        script = f'if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then {first}; fi; {RESULT}'
        n = self.nodes("agent_sigkill_spare", spec_text("agentspare", sh_yaml(script), collect="all",
                                                        extra="      spare_nodes: 1\n", more_steps=join))
        argv = n.command()
        if not self.check(argv is not None, "agent sigkill spare: the head prints the agent command", n.detail()):
            return
        n.start_agents(argv, count=3)
        joined = "spare node "
        wait_for(lambda: joined in n.head_err() or n.head.poll() is not None, 30 * self.slack)
        if not self.check(bool(self.wait_ready(n.dir, 4, n.head)) and joined in n.head_err(),
                          "agent sigkill spare: every rank starts and the spare joins", n.detail()):
            return
        agents = {int(read(os.path.join(n.dir, f"agent.{r}")).split()[0]):
                  int(read(os.path.join(n.dir, f"agent.{r}")).split()[1].rsplit("-", 2)[1]) for r in range(4)}
        killed_at = time.time()
        os.kill(agents[1], signal.SIGKILL)
        rc = n.wait(n.head, 30)
        n.finish("agent sigkill spare", 10)
        res = self.results(n.dir) or {}
        attempts = res.get("attempts", [])
        starts = [w["start"] for w in attempts[1]["workers"]] if len(attempts) == 2 else []
        recover = (max(datetime.datetime.strptime(t, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
            tzinfo=datetime.timezone.utc).timestamp() for t in starts) + 0.001 - killed_at) if len(starts) == 4 \
            else "n/a"
        self.check(rc == 0 and os.path.exists(os.path.join(n.dir, "join.ran")),
                   "agent sigkill spare: the step succeeds on the spare and the join runs", n.detail())
        self.check(len(attempts) == 2 and [len(a["replaced_nodes"]) for a in attempts] == [0, 1] and
                   attempts[1]["replaced_nodes"][0]["node_rank"] == 1,
                   "agent sigkill spare: results.json names the replacement of node rank 1",
                   json.dumps(attempts)[:3000])
        outputs = os.path.join(n.dir, "run", "train", "outputs")
        got = sorted(os.listdir(outputs)) if os.path.isdir(outputs) else []
        self.check(len(got) == 4, "agent sigkill spare: the join gets every rank's result", str(got))
        n.check_nothing_left("agent sigkill spare")
        self.finish_row(r, "agent sigkill spare", recover, 3.0, len(n.leftovers()), 4 - len(got), 0, n.detail())

    def test_stranger(self):
        """Connections that do not hold the token, while a 2-node step waits for its agents: one sends
        a 1 MiB frame, one sends garbage, one says nothing. The step still runs with its real agents."""
        r = self.row("stranger", "before a peer proves the token the head reads at most 16 KiB a frame and "
                     "waits heartbeat_timeout; each stranger is dropped with a line; the real agents join")
        n = self.nodes("stranger", spec_text("stranger", sh_yaml(RESULT), collect="all"))
        argv = n.command()
        if not self.check(argv is not None, "stranger: the head prints the agent command", n.detail()):
            return
        host, port = argv[argv.index("--rdzv-endpoint") + 1].rsplit(":", 1)
        import socket
        import struct
        big = socket.create_connection((host, int(port)))
        big.sendall(struct.pack(">IBB", 1 << 20, 1, 1) + b"x" * 65536)
        junk = socket.create_connection((host, int(port)))
        junk.sendall(b"GET / HTTP/1.0\r\n\r\n")
        silent = socket.create_connection((host, int(port)))
        t0 = time.monotonic()
        silent.settimeout(10 * self.slack)
        try:
            closed = silent.recv(65536) is not None  # the refusal, then EOF
            while silent.recv(65536):
                pass
        except OSError:
            closed = False
        waited = time.monotonic() - t0
        for sock in (big, junk, silent):
            sock.close()
        n.start_agents(argv)
        rc = n.finish("stranger", 30)
        err = n.head_err()
        self.check(rc == 0, "stranger: the step succeeds with its two real agents", n.detail())
        self.check(closed and 0.9 <= waited <= 1 + 2 * self.slack,
                   "stranger: a silent peer is dropped after heartbeat_timeout (1 s)", f"{waited:.2f} s")
        wants = [r"dropped a connection from 127\.0\.0\.1 before it authenticated: agent at 127\.0\.0\.1 sent "
                 r"a frame of 1048576 bytes, over the limit of 16384",
                 r"dropped a connection from 127\.0\.0\.1 before it authenticated: agent at 127\.0\.0\.1 "
                 r"(speaks protocol|sent a frame of)",
                 r"refused an agent from 127\.0\.0\.1: it did not authenticate within 1 s "
                 r"\(cluster\.heartbeat_timeout\)"]
        for want in wants:
            self.check(re.search(want, err) is not None, f"stranger: the head says /{want}/", err)
        n.check_nothing_left("stranger")
        self.finish_row(r, "stranger", waited, 1 + 2.0, len(n.leftovers()), 0, 0, n.detail())

    @fault_cases("name, mode, did, want", (
        "corrupt_upload", "crc", "the head checks the CRC-32C, refuses the file and fails the step naming the node; "
        "nothing is collected; no join", r"upload of rank 2's 'out/result\.txt' is corrupt"), (
        "truncated_upload", "truncate", "the node's connection drops mid-file: the head removes the partial file, "
        "reports the node lost; no join", r"node evil \(node rank \d of 2\) lost"))
    def test_upload(self, name, mode, did, want):
        """A node (a fake agent holding the run's token) sends its rank's result.txt with `mode` corruption."""
        r = self.row(name, did)
        join = '  - name: join\n    join: train\n    run: ' + sh_yaml('touch "$0/join.ran"', "@DIR@") + "\n"
        spec = spec_text(name, sh_yaml('echo "rank $RANK result" > "$FLOWRUN_OUTPUT_DIR/result.txt"'),
                         collect="all", more_steps=join)
        n = self.nodes(name, spec)
        argv = n.command()
        if not self.check(argv is not None, f"{name}: the head prints the agent command", n.detail()):
            return
        n.start_agents(argv, count=1)
        endpoint = argv[argv.index("--rdzv-endpoint") + 1]
        token_file = argv[argv.index("--token-file") + 1]
        version = subprocess.run([self.flowrun, "--version"], capture_output=True, text=True).stdout.split()[1]
        fake = n._start([PY, FAKE_AGENT, endpoint, token_file, "--upload", "out/result.txt", "--node", "evil",
                         "--content", "rank 2 result\n", "--corrupt", mode],
                        n.agent_env(FLOWRUN_VERSION=version), "fake")
        n.agents.append(fake)
        n.agent_names.append("fake")
        t0 = time.monotonic()
        rc = n.finish(name, 30)
        took = time.monotonic() - t0
        err = n.head_err()
        self.check(rc == 1, f"{name}: the step fails", n.detail())
        self.check(re.search(want, err, re.M) is not None, f"{name}: the head says why it refused the upload",
                   f"want /{want}/\n{n.detail()}")
        # What the fake node sent must not be anywhere: not in its rank's directory, not in outputs/.
        claimed = []
        for root, _, files in os.walk(os.path.join(n.run_dir, "train")):
            for f in files:
                path = os.path.join(root, f)
                if f.startswith("result.txt") and "rank 2" in read(path, "") or "rank 2 res" in read(path, ""):
                    claimed.append(os.path.relpath(path, n.run_dir))
        res = self.results(n.dir) or {}
        false = len(claimed) + self.false_claims(n.dir) + sum(
            1 for w in res.get("ranks", []) if w.get("node") == "evil" and w.get("status") == "succeeded"
            and res.get("outcome") == "succeeded")
        r.extra = "the file is in neither the rank's directory nor outputs/" if not claimed else str(claimed)
        n.check_nothing_left(name)
        self.finish_row(r, name, took, 10.0, len(n.leftovers()), 0, false, n.detail())

    # --- private scratch, and whatever kills flowrun -----------------------------------

    @staticmethod
    def children(pid):
        found = []
        try:
            for task in os.listdir(f"/proc/{pid}/task"):
                found += [int(c) for c in read(f"/proc/{pid}/task/{task}/children", "").split()]
        except OSError:
            pass
        return found

    def guardian_of(self, pid):
        """The pid of the guardian `pid` started (its child named flowrun-guard), or None."""
        found = [c for c in self.children(pid) if read(f"/proc/{c}/comm", "").strip() == "flowrun-guard"]
        return found[0] if found else None

    def wait_exit(self, pid, limit):
        """Waits for `pid` (no child of ours) to exit: its pidfd turns readable. True once it has."""
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            return True
        try:
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            return bool(poller.poll(int(limit * self.slack * 1000)))
        finally:
            os.close(fd)

    @staticmethod
    def tree(root):
        """Every path under `root` (links not followed) with its content, for a before/after comparison."""
        found = {}
        for top, dirs, files in os.walk(root):
            for name in dirs + files:
                path = os.path.join(top, name)
                found[os.path.relpath(path, root)] = os.readlink(path) if os.path.islink(path) else \
                    read(path, "") if os.path.isfile(path) else "<dir>"
        return found

    @staticmethod
    def as_stranger(action):
        """Runs `action` (returns a string) in a child as uid/gid 65534; returns what it returned."""
        rfd, wfd = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(rfd)
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
                os.write(wfd, action().encode())
            finally:
                os._exit(0)
        os.close(wfd)
        with os.fdopen(rfd) as f:
            text = f.read()
        os.waitpid(pid, 0)
        return text

    # A rank that says where its FLOWRUN_OUTPUT_DIR is and under which agent, in the shared workdir.
    OUTDIR = ('printf "%s\\n%s\\n" "$FLOWRUN_OUTPUT_DIR" "$FLOWRUN_AGENT_ID" > "outdir.$RANK.tmp" && '
              'mv "outdir.$RANK.tmp" "outdir.$RANK"; ')

    @staticmethod
    def outdirs(d, count=4):
        """{rank: (FLOWRUN_OUTPUT_DIR, FLOWRUN_AGENT_ID)} once `count` ranks have said; else None."""
        found = {}
        for n in os.listdir(d):
            m = re.fullmatch(r"outdir\.(\d+)", n)
            lines = read(os.path.join(d, n), "").split("\n") if m else []
            if len(lines) >= 2:
                found[int(m.group(1))] = (lines[0], lines[1])
        return found if len(found) >= count else None

    @staticmethod
    def scratch_of(outdir):
        """The agent's scratch directory: FLOWRUN_OUTPUT_DIR is <scratch>/<step>/rank<R>/out."""
        return os.path.dirname(os.path.dirname(os.path.dirname(outdir)))

    def test_scratch_planted(self):
        """(Root: another user's files.) Before the run another user made the agents' old scratch
        paths in TMPDIR (a 1777 directory, as /tmp is): node 0's as a directory of theirs with a file
        planted for every rank, node 1's as a link to their own directory. Each agent makes a new
        private directory, and the stranger gets nowhere."""
        r = self.row("scratch_planted", "each agent makes its ranks' scratch directory afresh (mkdtemp, mode 0700, "
                     "this user's) and never one made before; the other user can neither list it nor plant in "
                     "it; nothing planted is collected; the step succeeds; the directory is gone after")
        if os.geteuid() != 0:
            print("scratch planted: skipped: another user's files need root")
            r.recover, r.left, r.lost, r.false = "n/a (skipped: needs root)", 0, 0, 0
            return
        with temp_dir("flowrun-faults-tmp-", mode=0o1777) as tmp:
            self.scratch_planted(r, tmp)

    def scratch_planted(self, r, tmp):
        script = self.OUTDIR + 'while [ ! -e go ]; do sleep 0.02; done; ' + RESULT
        n = self.nodes("scratch_planted", spec_text("planted", sh_yaml(script), collect="all"))
        theirs, evil = os.path.join(tmp, f"flowrun-{n.run_id}-node0"), os.path.join(tmp, "evil")
        for root in (theirs, evil):
            for rank in range(4):
                out = os.path.join(root, "train", f"rank{rank}", "out")
                os.makedirs(out)
                with open(os.path.join(out, "planted.txt"), "w") as f:
                    f.write("planted\n")
            for top, dirs, files in os.walk(root):
                for name in [top] + [os.path.join(top, x) for x in dirs + files]:
                    os.chown(name, 65534, 65534)
                    os.chmod(name, 0o777 if os.path.isdir(name) else 0o666)
        link = os.path.join(tmp, f"flowrun-{n.run_id}-node1")
        os.symlink(evil, link)
        os.lchown(link, 65534, 65534)
        planted = {root: self.tree(root) for root in (theirs, evil)}
        argv = n.command()
        if not self.check(argv is not None, "scratch planted: the head prints the agent command", n.detail()):
            return
        n.start_agents(argv, TMPDIR=tmp)
        dirs = {}
        wait_for(lambda: dirs.update(self.outdirs(n.dir) or {}) or len(dirs) == 4 or n.head.poll() is not None,
                 30 * self.slack)
        if not self.check(len(dirs) == 4, "scratch planted: every rank starts", n.detail()):
            return
        scratches = sorted({self.scratch_of(out) for out, _ in dirs.values()})
        shapes = []
        for s in scratches:
            st = os.lstat(s)
            shapes.append((os.path.dirname(s) == tmp and os.path.basename(s).startswith(f"flowrun-{n.run_id}-node")
                           and s not in (theirs, link) and not os.path.islink(s) and st.st_uid == os.geteuid()
                           and (st.st_mode & 0o7777) == 0o700))
        self.check(len(scratches) == 2 and all(shapes), "scratch planted: each agent's ranks are in a new "
                   "directory of this user's, mode 0700, in TMPDIR", f"{scratches} {shapes}")

        def attack():
            got = []
            for s in scratches:
                for what, act in (("list", lambda: os.listdir(s)),
                                  ("plant", lambda: open(os.path.join(s, "train", "rank0", "out", "x"), "w"))):
                    try:
                        act()
                        got.append(f"{what} {s}: done")
                    except OSError as e:
                        got.append(f"{what} {s}: {e.strerror}")
            return "\n".join(got)
        attacked = self.as_stranger(attack)
        self.check(attacked.count("Permission denied") == 4 and "done" not in attacked,
                   "scratch planted: uid 65534 can neither list nor write the ranks' directories", attacked)
        with open(os.path.join(n.dir, "go"), "w"):
            pass
        rc = n.finish("scratch planted", 30)
        self.check(rc == 0, "scratch planted: the step succeeds", n.detail())
        claimed = [os.path.relpath(os.path.join(top, f), n.run_dir) for top, _, files in os.walk(n.run_dir)
                   for f in files if f == "planted.txt" or read(os.path.join(top, f), "") == "planted\n"]
        unchanged = all(self.tree(root) == before for root, before in planted.items())
        self.check(unchanged, "scratch planted: the stranger's directories are as they left them, nothing "
                   "of the run in them", str({root: self.tree(root) for root in planted}))
        gone = [s for s in scratches if os.path.lexists(s)]
        self.check(not gone, "scratch planted: each agent removed its directory when it exited", str(gone))
        n.check_nothing_left("scratch planted")
        r.extra = "a directory and a link planted at the old names" if not claimed else str(claimed)
        self.finish_row(r, "scratch planted", "n/a (nothing fails)", 0, len(n.leftovers()), self.lost_results(n.dir, 4),
                        len(claimed) + (0 if unchanged else 1), n.detail())

    def test_agent_sigkill_scratch(self):
        """One node's agent is killed with SIGKILL after its ranks wrote their results: its guardian kills
        them and removes the agent's scratch directory, results and all."""
        r = self.row("agent_sigkill_scratch", "the killed agent's guardian stops its ranks, then removes its "
                     "scratch directory (the ranks' finished outputs in it); the other agent removes its own "
                     "on its way out")
        n = self.nodes("agent_sigkill_scratch",
                       spec_text("scratchkill", sh_yaml(RESULT + self.OUTDIR + "exec sleep 60"), collect="all"))
        if not n.begin("agent sigkill scratch"):
            return
        dirs = {}
        wait_for(lambda: dirs.update(self.outdirs(n.dir) or {}) or len(dirs) == 4 or n.head.poll() is not None,
                 30 * self.slack)
        if not self.check(len(dirs) == 4, "agent sigkill scratch: every rank starts", n.detail()):
            return
        victim = n.agents[0]
        mine = {self.scratch_of(out) for out, agent in dirs.values() if int(agent.rsplit("-", 2)[1]) == victim.pid}
        other = {self.scratch_of(out) for out, _ in dirs.values()} - mine
        guardian = self.guardian_of(victim.pid)
        self.check(len(mine) == 1 and len(other) == 1 and all(os.path.isdir(s) for s in mine | other),
                   "agent sigkill scratch: each agent's ranks are in its own scratch directory", f"{mine} {other}")
        if not self.check(guardian is not None, "agent sigkill scratch: the agent has a guardian", n.detail()):
            return
        try:
            pidfd = os.pidfd_open(guardian)
        except ProcessLookupError:
            pidfd = None
        t0 = time.monotonic()
        os.kill(victim.pid, signal.SIGKILL)
        ended = pidfd is None or bool(select.select([pidfd], [], [], 10 * self.slack)[0])
        recover = time.monotonic() - t0
        if pidfd is not None:
            os.close(pidfd)
        self.check(ended, "agent sigkill scratch: the guardian exits once it has cleaned up", n.detail())
        left = [s for s in mine if os.path.lexists(s)]
        self.check(not left, "agent sigkill scratch: the killed agent's scratch directory is gone", str(left))
        n.finish("agent sigkill scratch", 20)
        left = [s for s in other if os.path.lexists(s)]
        self.check(not left, "agent sigkill scratch: the other agent's is gone after it exits", str(left))
        n.check_nothing_left("agent sigkill scratch")
        self.finish_row(r, "agent sigkill scratch", recover, 3.0, len(n.leftovers()), 0, self.false_claims(n.dir),
                        n.detail())

    # Ranks that leave two grandchildren each (one in a session of its own), on two nodes.
    GRAND_RANK = RESULT + 'setsid sleep 300 & sleep 300 & ' + \
        'echo "$FLOWRUN_NODE_RANK $FLOWRUN_AGENT_ID" > "ready.$RANK.tmp" && mv "ready.$RANK.tmp" "ready.$RANK"; wait'

    def kill_fault(self, name, label, start, kill):
        """flowrun SPEC, then one agent of a 2-node step, each with ranks that leave grandchildren:
        start(argv, starter) -> (Popen, pid of flowrun), then kill(Popen) once every rank runs.
        Returns (the longer time until nothing was left, processes left), or None."""
        recovers, left = [], 0
        run_id = f"{name}-{os.getpid()}"
        d = self.rank_flow(name, rest="setsid sleep 300 & sleep 300 & wait")
        self.fix_dir(d)
        p, pid = start(lambda wrap: self.start(d, run_id, wrap=wrap))
        if not self.check(bool(self.wait_ready(d, 4, p)), f"{label}: every rank starts", self.start_detail(d, p)):
            p.kill()
            return None
        wait_for(lambda: len(processes_with(f"FLOWRUN_RUN_ID={run_id}")) >= 12, 10 * self.slack)
        before = len(processes_with(f"FLOWRUN_RUN_ID={run_id}"))
        guardian = self.guardian_of(pid)
        self.check(before >= 12 and guardian is not None and os.getsid(guardian) == guardian,
                   f"{label}: flowrun SPEC: 4 ranks with 2 children each run; its guardian has a session of its own",
                   f"{before} processes, guardian {guardian}")
        t0 = time.monotonic()
        kill(p)
        p.wait()
        gone = wait_for(lambda: not self.leftovers(run_id), 5 * self.slack, step=0.01)
        recovers.append(time.monotonic() - t0)
        self.check(gone, f"{label}: flowrun SPEC: nothing of the run is left", str(self.leftovers(run_id)))
        left += self.count_left(run_id, 0)

        n = self.nodes(f"{name}_agent", spec_text(name, sh_yaml(self.GRAND_RANK)))
        argv = n.command()
        if not self.check(argv is not None, f"{label}: the head prints the agent command", n.detail()):
            return None
        a, agent_pid = start(lambda wrap: n._start([*wrap, *argv], n.agent_env(), "agent0"))
        n.agents.append(a)
        n.agent_names.append("agent0")
        n.start_agents(argv, count=1)
        said = {}  # rank: FLOWRUN_AGENT_ID, from the ready.R files written whole

        def all_ready():
            for name in os.listdir(n.dir):
                words = read(os.path.join(n.dir, name), "").split() if re.fullmatch(r"ready\.\d+", name) else []
                if len(words) == 2:
                    said[name] = words[1]
            return len(said) == 4 or n.head.poll() is not None
        wait_for(all_ready, 30 * self.slack)
        ids = {agent for agent in said.values() if int(agent.rsplit("-", 2)[1]) == agent_pid}
        if not self.check(len(said) == 4 and len(ids) == 1, f"{label}: flowrun agent: every rank starts",
                          f"{said} agent {agent_pid}\n{n.detail()}"):
            return None
        entry = f"FLOWRUN_AGENT_ID={ids.pop()}"
        wait_for(lambda: len(processes_with(entry)) >= 6, 10 * self.slack)
        before = len(processes_with(entry))
        guardian = self.guardian_of(agent_pid)
        self.check(before >= 6 and guardian is not None and os.getsid(guardian) == guardian,
                   f"{label}: flowrun agent: 2 ranks with 2 children each run; its guardian has a session of its own",
                   f"{before} processes, guardian {guardian}")
        t0 = time.monotonic()
        kill(a)
        gone = wait_for(lambda: not processes_with(entry), 5 * self.slack, step=0.01)
        recovers.append(time.monotonic() - t0)
        self.check(gone, f"{label}: flowrun agent: nothing of the killed agent is left", str(processes_with(entry)))
        rc = n.finish(label, 20)
        self.check(rc == 1, f"{label}: flowrun agent: the head names the node lost and exits 1", n.detail())
        n.check_nothing_left(label)
        left += len(n.leftovers())
        return max(recovers), left

    def test_group_sigkill(self):
        """`kill -9 -- -PGID` of flowrun's whole process group (started in a session of its own, as from a
        shell), for `flowrun SPEC` and for one node's `flowrun agent`."""
        r = self.row("group_sigkill", "the guardian, in a session of its own, outlives the group; it kills every "
                     "rank's children (a `setsid` one included), for `flowrun SPEC` and for `flowrun agent`")

        def start(starter):
            p = starter(())
            return p, p.pid
        got = self.kill_fault("group_sigkill", "group sigkill", start, lambda p: os.killpg(p.pid, signal.SIGKILL))
        if got:
            self.finish_row(r, "group sigkill", got[0], 2.0, got[1], 0, 0, "")

    def test_timeout_kill(self):
        """`timeout -s KILL 600` around `flowrun SPEC` and around one node's `flowrun agent`: timeout kills its
        child, then its whole process group, itself too. The timeout fires when SIGALRM comes (what
        timeout's own alarm delivers), once the ranks run."""
        r = self.row("timeout_kill", "as for a kill of the group: nothing of the job is left, for `flowrun SPEC` "
                     "and for `flowrun agent`")

        def start(starter):
            p = starter(("timeout", "-s", "KILL", "600"))
            found = []
            wait_for(lambda: found.extend(self.children(p.pid)) or found or p.poll() is not None, 10 * self.slack)
            return p, found[0] if found else -1
        got = self.kill_fault("timeout_kill", "timeout kill", start, lambda p: os.kill(p.pid, signal.SIGALRM))
        if got:
            self.finish_row(r, "timeout kill", got[0], 2.0, got[1], 0, 0, "")

    def test_stdfds_closed(self):
        """flowrun started with stdout and stderr closed (`flowrun x.yaml >&- 2>&-`), then killed with SIGKILL."""
        r = self.row("stdfds_closed", "fds 0-2 get /dev/null first thing: no console line lands in run.lock, "
                     "and the guardian starts armed: after the SIGKILL it kills every rank and its children")
        run_id = f"fds-{os.getpid()}"
        d = self.rank_flow("stdfds_closed", rest="setsid sleep 300 & sleep 300 & wait")
        self.fix_dir(d)
        p = self.start(d, run_id, wrap=("/bin/sh", "-c", 'exec "$@" >&- 2>&-', "sh"))
        if not self.check(bool(self.wait_ready(d, 4, p)), "stdfds closed: every rank starts", self.start_detail(d, p)):
            p.kill()
            return
        wait_for(lambda: len(processes_with(f"FLOWRUN_RUN_ID={run_id}")) >= 12, 10 * self.slack)
        lock = read(os.path.join(d, "run", "run.lock"), "<none>")
        # run.lock holds the holder's one line (PID HOST run RUN_ID), and nothing flowrun printed.
        self.check(re.fullmatch(rf"\d+ \S+ run {re.escape(run_id)}\n", lock) is not None,
                   "stdfds closed: run.lock holds no console line", repr(lock[:2000]))
        fds = {fd: os.readlink(f"/proc/{p.pid}/fd/{fd}") for fd in (0, 1, 2)
               if os.path.exists(f"/proc/{p.pid}/fd/{fd}")}
        self.check(fds.get(1) == fds.get(2) == "/dev/null", "stdfds closed: flowrun's fds 1 and 2 are /dev/null",
                   str(fds))
        t0 = time.monotonic()
        p.kill()
        p.wait()
        gone = wait_for(lambda: not self.leftovers(run_id), 5 * self.slack, step=0.01)
        recover = time.monotonic() - t0
        self.check(gone, "stdfds closed: the guardian kills everything after the SIGKILL", str(self.leftovers(run_id)))
        self.finish_row(r, "stdfds closed", recover, 2.0, self.count_left(run_id, 0), self.lost_results(d, 4),
                        self.false_claims(d), read(os.path.join(d, "flowrun.err"), ""))

    def test_same_run_id(self):
        """Two runs in different directories with the same --run-id; one is killed with SIGKILL. Its guardian
        kills only its own invocation's processes: the other run's ranks live on, and it succeeds."""
        r = self.row("same_run_id", "the killed run's guardian kills its own ranks only (its mark is a secret of "
                     "that invocation, not the run id); the other run's ranks live on and it succeeds")
        run_id = f"same-{os.getpid()}"
        da = self.rank_flow("same_run_id_a", rest="setsid sleep 300 & exec sleep 300")
        self.fix_dir(da)
        db = self.rank_flow("same_run_id_b", rest="while [ ! -e go ]; do sleep 0.02; done; exit 0")
        self.fix_dir(db)
        pa = self.start(da, run_id, env={MARK: run_id + "-a"})
        pb = self.start(db, run_id, env={MARK: run_id + "-b"})
        ranks_a, ranks_b = self.wait_ready(da, 4, pa), self.wait_ready(db, 4, pb)
        if not self.check(bool(ranks_a and ranks_b), "same run id: every rank of both runs starts",
                          self.start_detail(da, pa) + self.start_detail(db, pb)):
            pa.kill()
            pb.kill()
            return
        guardian = self.guardian_of(pa.pid)
        pidfd = os.pidfd_open(guardian) if guardian else None
        t0 = time.monotonic()
        pa.kill()
        pa.wait()
        ended = pidfd is not None and bool(select.select([pidfd], [], [], 10 * self.slack)[0])
        recover = time.monotonic() - t0
        if pidfd is not None:
            os.close(pidfd)
        self.check(ended, "same run id: the killed run's guardian cleans up and exits", str(guardian))
        a_left = processes_with(f"{MARK}={run_id}-a")
        self.check(not a_left, "same run id: nothing of the killed run is left", str(a_left))
        alive = [k for k, pid in sorted(ranks_b.items()) if read(f"/proc/{pid}/stat", "").rsplit(")", 1)[-1][:3].strip()
                 not in ("", "Z")]
        self.check(alive == [0, 1, 2, 3], "same run id: every rank of the other run still runs", str(alive))
        with open(os.path.join(db, "go"), "w"):
            pass
        rc, end, err = self.ended("same run id", pb, db, 30)
        res = self.results(db) or {}
        self.check(rc == 0 and res.get("outcome") == "succeeded" and os.path.exists(os.path.join(db, "join.ran")),
                   "same run id: the other run succeeds, its join too", f"exit {rc}\n{err}")
        self.check("out-of-memory" not in err, "same run id: no rank of the other run is reported killed", err)
        self.finish_row(r, "same run id", recover, 2.0, self.count_left(run_id, 0), self.lost_results(db, 4), 0,
                        err)
    # --- the control plane is not a door ----------------------------------------------

    def stranger_nodes(self, name):
        """A 2-node step whose ranks record a result and touch ran.RANK in its directory; (Nodes, agent argv,
        host, port) or None."""
        n = self.nodes(name, spec_text(name, sh_yaml(RESULT + 'touch "ran.$RANK"'), collect="all"))
        argv = n.command()
        if not self.check(argv is not None, f"{name}: the head prints the agent command", n.detail()):
            return None
        host, port = argv[argv.index("--rdzv-endpoint") + 1].rsplit(":", 1)
        return n, argv, host, int(port)

    def test_stranger_crowd(self):
        """Something without the token keeps 1100 idle connections open (a new one for each the head closes)
        while the 2 real agents join."""
        r = self.row("stranger_crowd", "the head drops the longest-silent connection that has not said hello for "
                     "each new one (at most 1024 from one address, 2048 in all); the agents join and the step "
                     "succeeds; no node is blamed")
        got = self.stranger_nodes("stranger_crowd")
        if not got:
            return
        n, argv, host, port = got
        # More than the head holds from one address (1024), so that it must drop some.
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(max(soft, 4096), hard), hard))
        crowd = wire.Crowd(host, port, 1100)
        t0 = time.monotonic()
        try:
            n.start_agents(argv)
            rc = n.finish("stranger_crowd", 60)
        finally:
            crowd.stop()
        took = time.monotonic() - t0
        err = n.head_err()
        res = self.results(n.dir) or {}
        self.check(crowd.opened >= 1100, "stranger_crowd: the stranger opened its connections", str(crowd.opened))
        self.check(rc == 0, "stranger_crowd: the step succeeds with its two real agents", n.detail())
        self.check("did not join" not in err and " lost" not in err and not res.get("errors"),
                   "stranger_crowd: the report blames no node", err[-3000:])
        self.check(re.search(r"connections from 127\.0\.0\.1 are waiting to authenticate; dropping the "
                             r"longest idle of them for each new one", err) is not None,
                   "stranger_crowd: the head says it drops the idlest", err[-3000:])
        self.check(len(err.splitlines()) < 40, "stranger_crowd: the strangers do not flood the console",
                   f"{len(err.splitlines())} lines")
        lost = 4 - sum(os.path.exists(os.path.join(n.run_dir, "train", f"rank{k}", "out", "result.txt"))
                       for k in range(4)) if rc == 0 else 0
        n.check_nothing_left("stranger_crowd")
        self.finish_row(r, "stranger_crowd", took, 30.0, len(n.leftovers()), lost, 0, n.detail())

    def test_stranger_name(self):
        """A stranger says hello with a node name holding newlines and escape sequences, then a wrong proof."""
        r = self.row("stranger_name", "the head prints the name escaped (\\n, \\x1b): no forged line, no "
                     "terminal title; the real agents join")
        got = self.stranger_nodes("stranger_name")
        if not got:
            return
        n, argv, host, port = got
        import socket
        import struct
        name = "evil\nflowrun: step 'train' succeeded in 0.1 s\x1b]0;owned\x07\x1b[2J\xff"
        version = subprocess.run([self.flowrun, "--version"], capture_output=True, text=True).stdout.split()[1]

        def frame(kind, pairs):
            payload = b"".join(struct.pack(">I", len(k)) + k + struct.pack(">I", len(v)) + v for k, v in pairs)
            return struct.pack(">IBB", len(payload) + 2, PROTOCOL, kind) + payload

        t0 = time.monotonic()
        s = socket.create_connection((host, port))
        s.sendall(frame(1, [(b"node", name.encode("latin-1")), (b"flowrun", version.encode()),
                            (b"nonce", b"0123456789abcdef0123456789abcdef"), (b"node_rank", b"-1"),
                            (b"pid", b"1"), (b"gpus", b"0"), (b"stays", b"0"), (b"address", b""),
                            (b"reach_port", b"0")]))
        s.recv(65536)  # the challenge
        s.sendall(frame(3, [(b"proof", b"00" * 32)]))
        while s.recv(65536):  # the refusal, then EOF
            pass
        s.close()
        n.start_agents(argv)
        rc = n.finish("stranger_name", 30)
        took = time.monotonic() - t0
        with open(os.path.join(n.dir, "head.err"), "rb") as f:
            raw = f.read()
        self.check(rc == 0, "stranger_name: the step succeeds with its two real agents", n.detail())
        shown = (r"refused an agent from 127.0.0.1 (evil\nflowrun: step 'train' succeeded in 0.1 s"
                 r"\x1b]0;owned\x07\x1b[2J\xff): wrong token")
        self.check(shown.encode() in raw, "stranger_name: the head prints the name escaped, on one line",
                   raw.decode("latin-1")[-2000:])
        self.check(b"\x1b" not in raw and b"\x07" not in raw and b"\xff" not in raw,
                   "stranger_name: no raw ESC, BEL or invalid byte reaches the console", repr(raw[-2000:]))
        self.check(sum(line.startswith(b"flowrun: step 'train' succeeded") for line in raw.split(b"\n")) == 1,
                   "stranger_name: no forged line", raw.decode("latin-1")[-2000:])
        n.check_nothing_left("stranger_name")
        self.finish_row(r, "stranger_name", took, 30.0, len(n.leftovers()), 0, 0, n.detail())

    def test_protocol_version(self):
        """An agent of the protocol before this one says hello."""
        r = self.row("protocol_version", "the head refuses the agent by name, in the agent's own protocol "
                     "version (so the old agent reads why), naming both versions; the real agents join")
        got = self.stranger_nodes("protocol_version")
        if not got:
            return
        n, argv, host, port = got
        import socket
        import struct
        old = PROTOCOL - 1
        payload = b"".join(struct.pack(">I", len(k)) + k + struct.pack(">I", len(v)) + v
                           for k, v in [(b"node", b"old"), (b"flowrun", b"0.1.0"),
                                        (b"nonce", b"0123456789abcdef0123456789abcdef"), (b"node_rank", b"-1")])
        t0 = time.monotonic()
        s = socket.create_connection((host, port))
        s.settimeout(30 * self.slack)
        s.sendall(struct.pack(">IBB", len(payload) + 2, old, 1) + payload)
        answer = b""
        try:
            while True:
                data = s.recv(65536)
                if not data:
                    break
                answer += data
        except OSError as e:
            answer += f" ({e})".encode()
        s.close()
        n.start_agents(argv)
        rc = n.finish("protocol_version", 30)
        took = time.monotonic() - t0
        err = n.head_err()
        self.check(rc == 0, "protocol_version: the step succeeds with its two real agents", n.detail())
        header = struct.unpack(">IBB", answer[:6]) if len(answer) >= 6 else None
        self.check(header is not None and header[1:] == (old, 5) and len(answer) == 4 + header[0],
                   f"protocol_version: the old agent gets one refused frame of its protocol {old}, then EOF",
                   repr(answer[:200]))
        reason = (rf"it speaks protocol {old} \(flowrun 0\.1\.0\), the head speaks protocol {PROTOCOL} "
                  r"\(flowrun [^)]+\): run the same flowrun version on every node")
        self.check(re.search(reason.encode(), answer) is not None, "protocol_version: the refusal says why",
                   repr(answer[:300]))
        want = rf"refused an agent from 127\.0\.0\.1 \(old\): {reason}"
        self.check(re.search(want, err) is not None, "protocol_version: the head names the agent and both versions",
                   err)
        n.check_nothing_left("protocol_version")
        self.finish_row(r, "protocol_version", took, 30.0, len(n.leftovers()), 0, 0, n.detail())

    @fault_cases("name, mode, did, agent_want, head_want", (
        "tampered_frame", "flip", "a proxy between agent and head flips a byte of each sealed start frame: each "
        "agent closes the connection saying the frame fails authentication; no rank runs, nothing is collected",
        r"lost the head at 127\.0\.0\.1:\d+ \(the head sent frame \d+ \(start, \d+ bytes\) that fails "
        r"authentication: it was altered, replayed, reordered or not sealed with this run's token", None), (
        "replayed_frame", "replay", "a proxy sends each agent's sealed ready frame twice: the head closes that "
        "node's connection saying the frame fails authentication and fails the step", None,
        r"lost: the head closed its connection: the agent of node \S+ sent frame \d+ \(ready, \d+ bytes\) that "
        r"fails authentication"))
    def test_frame(self, name, mode, did, agent_want, head_want):
        """Both agents reach the head through a proxy that changes sealed frames (wire.Proxy `mode`)."""
        r = self.row(name, did)
        got = self.stranger_nodes(name)
        if not got:
            return
        n, argv, host, port = got
        proxy = wire.Proxy(host, port, mode)
        via = list(argv)
        via[via.index("--rdzv-endpoint") + 1] = f"127.0.0.1:{proxy.port}"
        t0 = time.monotonic()
        try:
            n.start_agents(via)
            rc = n.finish(name, 30)
        finally:
            proxy.close()
        took = time.monotonic() - t0
        err = n.head_err()
        agents = "".join(n.out(f"{a}.err") for a in n.agent_names)
        self.check(proxy.touched >= 1, f"{name}: the proxy changed a sealed frame", str(proxy.touched))
        self.check(rc == 1, f"{name}: the step fails", n.detail())
        if agent_want:
            self.check(re.search(agent_want, agents) is not None, f"{name}: the agent says why it closed",
                       f"want /{agent_want}/\n{agents}")
        if head_want:
            self.check(re.search(head_want, err) is not None, f"{name}: the head says why it closed",
                       f"want /{head_want}/\n{err}")
        ran = [k for k in range(4) if os.path.exists(os.path.join(n.dir, f"ran.{k}"))]
        if mode == "flip":
            self.check(not ran, f"{name}: no rank ran on a start frame that failed", str(ran))
        false = self.false_claims(n.dir)
        n.check_nothing_left(name)
        self.finish_row(r, name, took, 15.0, len(n.leftovers()), 0, false, n.detail())

    # --- what torchrun's habits give a worker --------------------------------------------

    def test_print_gaps(self):
        """Ranks (Python, started by a shell) print a line every 0.2 s for longer than stall_timeout."""
        stall = 2 * self.slack
        gap, lines = 0.2, int(1.6 * stall / 0.2)
        r = self.row("print_gaps", f"each line of a `print()` loop reaches the log when it is printed "
                     f"(`PYTHONUNBUFFERED=1`, through the shell too), so `stall_timeout` ({stall:g} s) does not "
                     f"stop ranks that print every {gap} s for {lines * gap:.1f} s; the step succeeds")
        run_id = f"gaps-{os.getpid()}"
        d = self.workspace("print_gaps", f"""name: gaps
steps:
  - name: train
    run: {sh_yaml(f'exec {PY} "$0" {lines} {gap} result', "@DIR@/gaps.py")}
    stall_timeout: {stall:g}s
    parallel:
      cpus: 2
    collect: all
""")
        self.fix_dir(d)
        with open(os.path.join(d, "gaps.py"), "w") as f:
            f.write(GAPS_RANK)
        p = self.start(d, run_id)
        rc, end, err = self.ended("print gaps", p, d, 60)
        res = self.results(d) or {}
        self.check(rc == 0 and res.get("outcome") == "succeeded",
                   "print gaps: the step succeeds, no rank taken for stalled", f"exit {rc}\n{err}")
        for rank in range(2):
            want = "".join(f"line {i}\n" for i in range(lines)) + f"rank {rank} wrote its result\n"
            log = read(os.path.join(d, "run", "train", f"rank{rank}", "stdout.log"), "")
            self.check(log == want, f"print gaps: rank {rank}'s log has every line, in order", log)
        outputs = os.path.join(d, "run", "train", "outputs")
        self.finish_row(r, "print gaps", "n/a (nothing fails)", 0, self.count_left(run_id), self.lost_results(d, 2),
                        0 if os.path.isdir(outputs) else 1, err)

    # Rank 0 binds MASTER_PORT with a plain socket (no SO_REUSEADDR), on every address, and
    # waits for every other rank to connect and say its rank.
    BIND = """import os, socket, sys, time
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
if rank == 0:
    s = socket.socket()
    try:
        s.bind(("", port))
    except OSError as e:
        sys.exit(f"rank 0 cannot bind MASTER_PORT {port}: {e}")
    s.listen(world)
    heard = []
    for _ in range(world - 1):
        c, _ = s.accept()
        heard.append(int(c.makefile().readline()))
    print(f"rank 0 bound {port} and heard from ranks {sorted(heard)}")
else:
    deadline = time.monotonic() + 60
    while True:
        try:
            c = socket.create_connection((addr, port), timeout=10)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)
    c.sendall(f"{rank}\\n".encode())
    c.close()
"""

    def test_master_port_bind(self):
        """Rank 0 binds MASTER_PORT without SO_REUSEADDR; the other rank connects to it."""
        r = self.row("master_port_bind", "flowrun lets go of the port it held as the ranks start: rank 0 binds "
                     "it with a plain socket (no `SO_REUSEADDR`) and rank 1 connects; the step succeeds")
        run_id = f"bind-{os.getpid()}"
        d = self.workspace("master_port_bind", f"""name: bind
steps:
  - name: train
    run: [{q(PY)}, "@DIR@/bind.py"]
    parallel:
      cpus: 2
""")
        self.fix_dir(d)
        with open(os.path.join(d, "bind.py"), "w") as f:
            f.write(self.BIND)
        t0 = time.monotonic()
        p = self.start(d, run_id)
        rc, end, err = self.ended("master port bind", p, d, 30)
        log = read(os.path.join(d, "run", "train", "rank0", "stdout.log"), "")
        self.check(rc == 0 and re.fullmatch(r"rank 0 bound \d+ and heard from ranks \[1\]\n", log) is not None,
                   "master port bind: rank 0 binds MASTER_PORT plainly, rank 1 reaches it, the step succeeds",
                   f"exit {rc}\n{log}\n{err}")
        res = self.results(d) or {}
        false = 1 if rc != 0 and res.get("outcome") == "succeeded" else 0
        r.extra = f"{end - t0:.2f} s from start to exit"
        self.finish_row(r, "master port bind", "n/a (nothing fails)", 0, self.count_left(run_id), 0, false, err)

    def test_master_port_bind_nodes(self):
        """The same across 2 nodes: node 0's agent held the port, rank 0 binds it, ranks 1-3 connect."""
        r = self.row("master_port_bind_nodes", "node 0's agent lets go of the port it chose as its ranks "
                     "start: rank 0 binds it without `SO_REUSEADDR` and ranks 1-3, on both nodes, connect; "
                     "the step succeeds")
        # The head reads the spec as it starts: the script's path is in it from the first; the
        # script itself is written before any agent joins.
        script = os.path.join(self.scratch, "master_port_bind_nodes", "bind.py")
        n = self.nodes("master_port_bind_nodes", spec_text("bindnodes", f"[{q(PY)}, {q(script)}]"))
        with open(script, "w") as f:
            f.write(self.BIND)
        if not n.begin("master port bind nodes"):
            return
        t0 = time.monotonic()
        rc = n.finish("master port bind nodes", 30)
        took = time.monotonic() - t0
        log = read(os.path.join(n.run_dir, "train", "rank0", "stdout.log"), "")
        self.check(rc == 0 and re.fullmatch(r"rank 0 bound \d+ and heard from ranks \[1, 2, 3\]\n", log)
                   is not None, "master port bind nodes: rank 0 binds MASTER_PORT plainly, ranks 1-3 reach it",
                   f"exit {rc}\n{log}\n{n.detail()}")
        n.check_nothing_left("master port bind nodes")
        res = self.results(n.dir) or {}
        false = 1 if rc != 0 and res.get("outcome") == "succeeded" else 0
        r.extra = f"{took:.2f} s from the agents' start to the head's exit"
        self.finish_row(r, "master port bind nodes", "n/a (nothing fails)", 0, len(n.leftovers()), 0, false,
                        n.detail())
    # --- signals, limits and a console nobody reads -------------------------------------

    def record_closed(self, label, d, rc):
        """run.json after flowrun exited: never "running", and its exit code is flowrun's."""
        try:
            with open(os.path.join(d, "run", "run.json")) as f:
                record = json.load(f)
        except (OSError, ValueError) as e:
            return self.check(False, f"{label}: run.json is readable", str(e))
        return self.check(record.get("state") == "finished" and record.get("exit_code") == rc,
                          f"{label}: run.json says finished, with exit code {rc}", json.dumps(record, indent=1))

    # What a rank does until it is stopped: a loop of short sleeps, so that a SIGTERM that comes while the
    # shell forks can leave no long sleep behind.
    WAIT_LOOP = "while :; do sleep 0.1; done"

    def test_sigterm_twice(self):
        """SIGTERM to flowrun and then to its process group, as GNU timeout sends it: one stop, the whole grace."""
        r = self.row("sigterm_twice", "the second SIGTERM (timeout's to the group) does not cut the grace: every "
                     "rank's handler writes its checkpoint 1 s after the SIGTERM; exit 143")
        run_id = f"term2-{os.getpid()}"
        trap = ('trap \'echo $$ > "term.$RANK"; sleep 1; echo saved > "ckpt.$RANK"; '
                'echo "rank $RANK saved a checkpoint"; exit 143\' TERM; ')
        d = self.rank_flow("sigterm_twice", trap=trap, rest=self.WAIT_LOOP)
        self.fix_dir(d)
        p = self.start(d, run_id, "--grace", "30")
        pids = self.wait_ready(d, 4, p)
        if not self.check(bool(pids), "sigterm twice: every rank starts", self.start_detail(d, p)):
            p.kill()
            return
        t0 = time.monotonic()
        os.kill(p.pid, signal.SIGTERM)
        # The second copy once every rank is in its handler: the moment a second signal could cut it short.
        wait_for(lambda: all(os.path.exists(os.path.join(d, f"term.{k}")) for k in range(4)) or
                 p.poll() is not None, 20 * self.slack)
        os.killpg(p.pid, signal.SIGTERM)
        rc, end, err = self.ended("sigterm twice", p, d, 40)
        saved = [k for k in range(4) if os.path.exists(os.path.join(d, f"ckpt.{k}"))]
        self.check(rc == 143 and saved == [0, 1, 2, 3],
                   "sigterm twice: exit 143, and every rank wrote its checkpoint in its handler",
                   f"exit {rc}; saved {saved}\n{err}")
        self.check("killing step" not in err, "sigterm twice: flowrun kills nothing at once", err)
        res = self.results(d) or {}
        killed = [w.get("rank") for w in res.get("ranks", []) if w.get("signal") == "SIGKILL"]
        self.check(not killed, "sigterm twice: no rank is SIGKILLed", json.dumps(res, indent=1)[:3000])
        self.record_closed("sigterm twice", d, rc)
        self.finish_row(r, "sigterm twice", end - t0, 1.0 + 2.0, self.count_left(run_id), self.lost_results(d, 4),
                        self.false_claims(d), err)

    # A rank that traps SIGUSR1 and SIGUSR2 (each writes a file with its pid), says it is
    # ready and ends well once it has had both.
    USR_RANK = (RESULT + 'trap \'echo $$ > "usr1.$RANK"\' USR1; trap \'echo $$ > "usr2.$RANK"\' USR2; '
                'echo $$ > "ready.$RANK.tmp" && mv "ready.$RANK.tmp" "ready.$RANK"; '
                'while [ ! -e "usr1.$RANK" ] || [ ! -e "usr2.$RANK" ]; do sleep 0.05; done; '
                'echo "rank $RANK got SIGUSR1 and SIGUSR2"')

    def usr_delivered(self, d, pids):
        """Ranks whose usr1.R and usr2.R files both name their main process."""
        return [k for k, pid in sorted(pids.items())
                if all(read(os.path.join(d, f"{s}.{k}"), "").strip() == str(pid) for s in ("usr1", "usr2"))]

    def test_sigusr_forward(self):
        """SIGUSR1 to flowrun and SIGUSR2 to its group (as Slurm's --signal): every rank gets both; the step goes on."""
        r = self.row("sigusr_forward", "flowrun keeps running and forwards SIGUSR1 and SIGUSR2 to every rank's main "
                     "process; the step succeeds, the join runs")
        run_id = f"usr-{os.getpid()}"
        d = self.workspace("sigusr_forward", f"""name: sigusr
steps:
  - name: train
    run: {sh_yaml(self.USR_RANK)}
    parallel:
      cpus: 4
    collect: all
  - name: join
    join: train
    run: {sh_yaml('touch "$0/join.ran"', "@DIR@")}
""")
        self.fix_dir(d)
        p = self.start(d, run_id, "--grace", "2")
        pids = self.wait_ready(d, 4, p)
        if not self.check(bool(pids), "sigusr forward: every rank starts", self.start_detail(d, p)):
            p.kill()
            return
        t0 = time.monotonic()
        os.kill(p.pid, signal.SIGUSR1)
        os.killpg(p.pid, signal.SIGUSR2)  # flowrun and its guardian
        rc, end, err = self.ended("sigusr forward", p, d, 20)
        got = self.usr_delivered(d, pids)
        self.check(rc == 0 and got == [0, 1, 2, 3] and os.path.exists(os.path.join(d, "join.ran")),
                   "sigusr forward: every rank's main process got both, the step and the join succeed, exit 0",
                   f"exit {rc}; delivered to {got}\n{err}")
        self.record_closed("sigusr forward", d, rc)
        self.finish_row(r, "sigusr forward", end - t0, 2.0, self.count_left(run_id), self.lost_results(d, 4), 0, err)

    def test_sigusr_nodes(self):
        """2 agents: SIGUSR1 to the head reaches every rank over the control plane; SIGUSR2 to each agent
        (as srun and scancel --signal deliver it) reaches its own ranks."""
        r = self.row("sigusr_nodes", "the head sends SIGUSR1 to every agent, which gives it to its ranks; each "
                     "agent gives its own SIGUSR2 to its ranks; nothing stops, the step succeeds")
        n = self.nodes("sigusr_nodes", spec_text("usrnodes", sh_yaml(self.USR_RANK)))
        if not n.begin("sigusr nodes"):
            return
        pids = self.wait_ready(n.dir, 4, n.head)
        if not self.check(bool(pids), "sigusr nodes: every rank starts", n.detail()):
            return
        t0 = time.monotonic()
        os.kill(n.head.pid, signal.SIGUSR1)
        for agent in n.agents:
            os.kill(agent.pid, signal.SIGUSR2)
        rc = n.finish("sigusr nodes", 20)
        recover = time.monotonic() - t0
        got = self.usr_delivered(n.dir, pids)
        self.check(rc == 0 and got == [0, 1, 2, 3],
                   "sigusr nodes: every rank's main process got both signals and the step succeeds",
                   f"exit {rc}; delivered to {got}\n{n.detail()}")
        self.record_closed("sigusr nodes", n.dir, rc)
        n.sanitizer_check("sigusr nodes")
        n.check_nothing_left("sigusr nodes")
        self.finish_row(r, "sigusr nodes", recover, 3.0, len(n.leftovers()), 0, 0, n.detail())

    def test_slurm_requeue(self):
        """A node failure kills flowrun (SIGKILL) in train; Slurm requeues the job and its script runs the
        same `flowrun SPEC` again (the same SLURM_JOB_ID, SLURM_RESTART_COUNT=1): it resumes the killed run."""
        r = self.row("slurm_requeue", "the requeued job's flowrun (SLURM_RESTART_COUNT=1) resumes the killed run "
                     "and says so in one line: prepare is kept, not run again; every rank restarts with "
                     "TORCHELASTIC_RESTART_COUNT 1; the join gets the 4 results; run.json says resumed by requeue")
        run_id = f"requeue-{os.getpid()}"
        rank = ('echo "$TORCHELASTIC_RESTART_COUNT" > "count.$RANK"; '
                'echo $$ > "ready.$RANK.tmp" && mv "ready.$RANK.tmp" "ready.$RANK"; '
                'while ! test -f go; do sleep 0.05; done; ' + RESULT)
        d = self.workspace("slurm_requeue", f"""name: requeue
steps:
  - name: prepare
    run: {sh_yaml('echo prepared >> "$0/prepare.count"', "@DIR@")}
  - name: train
    run: {sh_yaml(rank)}
    parallel:
      cpus: 4
    collect: all
  - name: join
    join: train
    run: {sh_yaml('test "$(ls "$FLOWRUN_INPUTS" | wc -l)" = 4 && touch "$0/join.ran"', "@DIR@")}
""")
        self.fix_dir(d)
        job = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "host-a", "SLURM_JOB_NUM_NODES": "1"}
        p = self.start(d, run_id, "--grace", "2", env=job)
        pids = self.wait_ready(d, 4, p)
        if not self.check(bool(pids), "slurm requeue: every rank starts", self.start_detail(d, p)):
            p.kill()
            return
        p.kill()  # the node is gone: no word from flowrun, run.json left "running"
        p.wait()
        left = self.count_left(run_id)
        for n in os.listdir(d):
            if n.startswith("ready.") or n.startswith("count."):
                os.remove(os.path.join(d, n))
        open(os.path.join(d, "go"), "w").close()
        t0 = time.monotonic()
        p = self.start(d, run_id, "--grace", "2", env={**job, "SLURM_RESTART_COUNT": "1"})
        rc, end, err = self.ended("slurm requeue", p, d, 30)
        new = os.path.join(d, "run-requeue1")
        self.check(rc == 0 and f"flowrun: resuming run {run_id}: Slurm job 4242 was requeued (SLURM_RESTART_COUNT="
                   f"1); kept 'prepare'; 'train' restarts at TORCHELASTIC_RESTART_COUNT=1" in err.splitlines(),
                   "slurm requeue: the run resumes, saying which, why, what is kept and where train restarts",
                   f"exit {rc}\n{err}")
        counts = [read(os.path.join(d, f"count.{k}"), "").strip() for k in range(4)]
        self.check(read(os.path.join(d, "prepare.count"), "") == "prepared\n" and counts == ["1"] * 4,
                   "slurm requeue: prepare ran once; every rank restarted with TORCHELASTIC_RESTART_COUNT 1",
                   f"prepare.count: {read(os.path.join(d, 'prepare.count'), '')!r}; counts {counts}")
        record = json.loads(read(os.path.join(new, "run.json"), "{}") or "{}")
        self.check((record.get("resumed_from") or {}).get("by") == "requeue" and
                   record.get("steps", {}).get("prepare") == "reused",
                   "slurm requeue: run.json says resumed by a requeue, prepare reused", json.dumps(record)[:2000])
        # Lost: a rank's result, or prepare's record, missing from the new run; falsely claimed: the
        # killed run's train recorded as succeeded, a join run without the 4 results.
        lost = sum(read(os.path.join(new, "train", f"rank{k}", "out", "result.txt"), "") != f"rank {k} result\n"
                   for k in range(4))
        lost += '"outcome": "succeeded"' not in read(os.path.join(new, "prepare", "results.json"), "")
        false = int(os.path.exists(os.path.join(d, "run", "train", "results.json")))
        false += int(os.path.exists(os.path.join(d, "join.ran")) and
                     len(os.listdir(os.path.join(new, "train", "outputs"))) != 4)
        self.finish_row(r, "slurm requeue", end - t0, 10.0, left + self.count_left(run_id), lost, false, err)
        r.extra = "time: the requeued flowrun, from its start to its exit"

    def test_sigquit(self):
        """SIGQUIT (Ctrl-\\) takes every running rank's stack and stops nothing; flowrun stacks RUN does the
        same from another terminal; the step then stops as usual on SIGTERM."""
        r = self.row("sigquit", "not a stop: SIGQUIT (and flowrun stacks RUN) takes every running rank's stack, "
                     "on the console and in stacks.json, twice, and the step goes on; SIGTERM then stops it; "
                     "exit 143")
        run_id = f"quit-{os.getpid()}"
        trap = 'trap \'echo "rank $RANK saved a checkpoint"; exit 143\' TERM; '
        d = self.rank_flow("sigquit", trap=trap, rest=self.WAIT_LOOP)
        self.fix_dir(d)
        env = dict(os.environ, FLOWRUN_PY_SPY=os.path.join(d, "no-py-spy"))  # the kernel's words: no py-spy needed
        p = self.start(d, run_id, "--grace", "10", env=env)
        pids = self.wait_ready(d, 4, p)
        if not self.check(bool(pids), "sigquit: every rank starts", self.start_detail(d, p)):
            p.kill()
            return
        t0 = time.monotonic()
        stacks_json = os.path.join(d, "run", "train", "stacks.json")
        os.kill(p.pid, signal.SIGQUIT)  # what a terminal sends for Ctrl-\
        wait_for(lambda: os.path.exists(stacks_json) or p.poll() is not None, 20 * self.slack)
        first = json.loads(read(stacks_json, "{}"))
        self.check(p.poll() is None and first.get("ranks") == 4 and first.get("source") == "kernel"
                   and sorted(r for g in first.get("groups", []) for r in g["ranks"]) == [0, 1, 2, 3],
                   "sigquit: the four ranks' stacks (the kernel's words) in stacks.json, and the step goes on",
                   json.dumps(first) + "\n" + read(os.path.join(d, "flowrun.err"), ""))
        asked = subprocess.run([self.flowrun, "stacks", os.path.join(d, "run"), "--wait", str(20 * self.slack)],
                               capture_output=True, text=True, env=env, timeout=60 * self.slack)
        self.check(asked.returncode == 0 and asked.stdout.startswith(
                   "flowrun: stacks of step 'train' (4 ranks, by kernel); nothing was stopped\n")
                   and "whole stacks: " in asked.stdout and p.poll() is None,
                   "sigquit: flowrun stacks RUN prints the grouping, and the step still runs",
                   f"exit {asked.returncode}\n{asked.stdout}{asked.stderr}")
        os.kill(p.pid, signal.SIGTERM)
        rc, end, err = self.ended("sigquit", p, d, 20)
        res = self.results(d) or {}
        saved = [k for k in range(4) if f"rank {k} saved a checkpoint\n" in
                 read(os.path.join(d, "run", "train", f"rank{k}", "stdout.log"), "")]
        self.check(err.count("flowrun: stacks of step 'train' (4 ranks, by kernel); nothing was stopped") == 2,
                   "sigquit: the run's console says each of the two requests' stacks", err)
        self.check(rc == 143 and res.get("outcome") == "interrupted" and saved == [0, 1, 2, 3],
                   "sigquit: SIGTERM still stops it: exit 143, every rank's handler ran",
                   f"exit {rc}; saved {saved}\n{err}\n{res}")
        self.record_closed("sigquit", d, rc)
        self.finish_row(r, "sigquit", end - t0, 2.0, self.count_left(run_id), self.lost_results(d, 4),
                        self.false_claims(d), err)

    def test_console_unread(self):
        """`flowrun x.yaml | sleep`: stdout is a pipe nobody reads, filled by a rank; after --console-wait the
        rank goes on, the step's timeout still ends it on time, and the rank's log has every line."""
        r = self.row("console_unread", "a console nobody reads holds the ranks for `--console-wait 0.5` s only: "
                     "then lines past the backlog are dropped and counted (a note in results.json), the log keeps "
                     "all; `timeout: 2` ends it; exit 124")
        run_id = f"unread-{os.getpid()}"
        lines = 100000  # 7 MB: past the pipe (1 MiB) and flowrun's backlog (4 MiB)
        flood = (f"yes 'line of output {'x' * 50}' | head -n {lines}; touch written; exec sleep 60")
        d = self.workspace("console_unread", f"""name: unread
steps:
  - name: train
    run: {sh_yaml(flood)}
    timeout: 2
    parallel:
      cpus: 1
""")
        err_path = os.path.join(d, "flowrun.err")
        with open(err_path, "w") as err_file:
            p = subprocess.Popen([self.flowrun, os.path.join(d, "spec.yaml"), "--run-dir", os.path.join(d, "run"),
                                  "--run-id", run_id, "--grace", "2", "--console-wait", "0.5"], cwd=d,
                                 env=clean_env(**{MARK: run_id}), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=err_file,
                                 start_new_session=True)
        t0 = time.monotonic()
        try:
            rc = self.wait(p, 30)
            end = time.monotonic()
            if rc is None:
                p.kill()
                p.wait()
            shown = p.stdout.read().decode(errors="replace") if rc is not None else ""  # what the pipe holds
        finally:
            p.stdout.close()
        err = read(err_path)
        self.sanitizer_check("console unread", err)
        log = read(os.path.join(d, "run", "train", "rank0", "stdout.log"), "")
        self.check(rc == 124, "console unread: the step's timeout ends it although nobody reads stdout: exit 124",
                   f"exit {rc}\n{err}")
        self.check(os.path.exists(os.path.join(d, "written")) and log.count("\n") == lines,
                   f"console unread: the rank wrote {lines} lines and its log has them all",
                   f"{log.count(chr(10))} lines")
        res = self.results(d) or {}
        notes = " ".join(res.get("notes", []))
        self.check("the console did not keep up" in notes, "console unread: results.json notes the lines not shown",
                   json.dumps(res, indent=1)[:3000])
        # Every line is shown (what the pipe holds), or counted once: in the step's report (dropped during
        # the run), or after the run's last line (still waiting when the reader took none for a second).
        told = re.findall(r"^flowrun:   the console did not keep up: (\d+) lines? of the workers' output were not "
                          r"shown \(the log files have them\)$", err, re.M)
        after = re.findall(r"^flowrun: (\d+) lines? of the workers' output not shown here: the console did not "
                           r"take (?:it|them) in time \(the log files have every line\)$", err, re.M)
        summary = re.search(r"^flowrun: run \S+ failed after [0-9.]+ s \(exit code 124\): failed 'train'$", err, re.M)
        shown_lines = shown.count("\n")
        self.check(len(told) == 1 and len(after) <= 1 and summary is not None
                   and shown_lines + sum(int(x) for x in told + after) == lines
                   and (not after or err.index(after[0]) > summary.start()),
                   f"console unread: each of the {lines} lines is shown or counted once (the report, then what "
                   "was left at the end)", f"shown {shown_lines}, told {told}, after the end {after}\n{err[-1500:]}")
        self.record_closed("console unread", d, rc)
        self.finish_row(r, "console unread", end - t0, 2.0 + 3.0, self.count_left(run_id), 0, 0, err)

    def start_limited(self, d, run_id, soft, hard):
        """flowrun with RLIMIT_NOFILE soft/hard set in the child; returns (exit code, stderr)."""
        def limit():
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        with open(os.path.join(d, "flowrun.err"), "w") as err_file:
            p = subprocess.Popen([self.flowrun, os.path.join(d, "spec.yaml"), "--run-dir", os.path.join(d, "run"),
                                  "--run-id", run_id, "--grace", "2"], cwd=d, env=clean_env(**{MARK: run_id}),
                                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err_file,
                                 start_new_session=True, preexec_fn=limit)
        rc = self.wait(p, 60)
        if rc is None:
            p.kill()
            p.wait()
        err = read(os.path.join(d, "flowrun.err"))
        self.sanitizer_check("fd limit", err)
        return rc, err

    def test_fd_limit(self):
        """96 CPU workers under a soft limit of 128 open files (hard higher): flowrun raises its own soft
        limit, the workers keep 128; with the hard limit at 128 it fails with the reason, run.json closed."""
        r = self.row("fd_limit", "the soft RLIMIT_NOFILE is raised to the hard one, so 96 workers start (each "
                     "still sees 128); where the hard limit is that low, the step fails naming it; run.json "
                     "is closed either way")
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        if hard != resource.RLIM_INFINITY and hard < 4096:
            self.check(True, f"fd limit: skipped (the hard limit here is {hard})")
            return
        spec = f"""name: fds
steps:
  - name: train
    run: {sh_yaml('echo "soft $(ulimit -Sn)"')}
    parallel:
      cpus: 96
"""
        run_id = f"fds-{os.getpid()}"
        d = self.workspace("fd_limit", spec)
        t0 = time.monotonic()
        rc, err = self.start_limited(d, run_id, 128, hard)
        took = time.monotonic() - t0
        soft = read(os.path.join(d, "run", "train", "rank95", "stdout.log"), "")
        self.check(rc == 0 and soft == "soft 128\n", "fd limit: 96 workers run under a soft limit of 128; "
                   "each worker still sees 128", f"exit {rc}; rank 95: {soft!r}\n{err[-3000:]}")
        self.record_closed("fd limit", d, rc)
        left = self.count_left(run_id)
        run_id = f"fds-hard-{os.getpid()}"
        d = self.workspace("fd_limit_hard", spec)
        rc, err = self.start_limited(d, run_id, 128, 128)
        self.check(rc not in (0, None) and "Too many open files" in err,
                   "fd limit: under a hard limit of 128 the run fails, saying why", f"exit {rc}\n{err[-3000:]}")
        if self.record_closed("fd limit (hard)", d, rc):
            with open(os.path.join(d, "run", "run.json")) as f:
                record = json.load(f)
            self.check("Too many open files" in (record.get("error") or "") and
                       record.get("steps", {}).get("train") == "failed",
                       "fd limit: run.json records the error and the step as failed", json.dumps(record, indent=1))
        left += self.count_left(run_id)
        self.finish_row(r, "fd limit", took, 30.0, left, 0, 0, err)

    def test_error_exit(self):
        """An error flowrun cannot go on after (a step's directory that cannot be made): run.json is closed
        with the error, not left "running"."""
        r = self.row("error_exit", "flowrun stops with the error; run.json says finished, exit code 1, the error, "
                     "the step failed")
        run_id = f"errexit-{os.getpid()}"
        # The first step puts a file where the second step's directory goes.
        d = self.workspace("error_exit", f"""name: errexit
steps:
  - name: prepare
    run: {sh_yaml(': > "$0/run/train"', "@DIR@")}
  - name: train
    needs: [prepare]
    run: [true]
""")
        self.fix_dir(d)
        t0 = time.monotonic()
        p = self.start(d, run_id)
        rc, end, err = self.ended("error exit", p, d, 20)
        self.check(rc == 1 and "flowrun: error:" in err, "error exit: flowrun says the error and exits 1",
                   f"exit {rc}\n{err}")
        if self.record_closed("error exit", d, rc):
            with open(os.path.join(d, "run", "run.json")) as f:
                record = json.load(f)
            self.check(bool(record.get("error")) and record.get("steps", {}).get("train") == "failed" and
                       record.get("steps", {}).get("prepare") == "succeeded",
                       "error exit: run.json names the error; train failed, prepare succeeded",
                       json.dumps(record, indent=1))
        self.finish_row(r, "error exit", end - t0, 10.0, self.count_left(run_id), 0, 0, err)
    # --- one run, one directory; input refused before anything starts ---------------

    def test_same_run_dir(self):
        """Two flowruns given the same --run-id and --run-dir: the second, started once the
        first's rank is ready, is refused naming the first; a resume of the live run too."""
        r = self.row("same_run_dir", "the second flowrun is refused (exit 2) naming the first (its pid and "
                     "host from run.lock) before it writes anything; the first succeeds with its logs intact")
        run_id = f"same-{os.getpid()}"
        d = self.workspace("same_run_dir", f"""name: same
steps:
  - name: train
    run: {sh_yaml(RESULT + 'echo $$ > ready.0.tmp && mv ready.0.tmp ready.0; '
                  'while [ ! -e go ]; do sleep 0.05; done; echo "rank $RANK done"')}
    parallel:
      cpus: 1
""")
        first = self.start(d, run_id)
        ready = self.wait_ready(d, 1, first)
        self.check(ready is not None, "same run dir: the first run's rank is ready", self.start_detail(d, first))
        second = run_to_end([self.flowrun, os.path.join(d, "spec.yaml"), "--run-dir", os.path.join(d, "run"),
                      "--run-id", run_id], d, env=clean_env(**{MARK: run_id}))
        resumed = run_to_end([self.flowrun, "resume", os.path.join(d, "run")], d,
                             env=clean_env(**{MARK: run_id}))
        entries = sorted(os.listdir(os.path.join(d, "run")))
        with open(os.path.join(d, "go"), "w"):
            pass
        start = time.monotonic()
        rc, end, err = self.ended("same run dir", first, d, 30)
        self.sanitizer_check("same run dir (second)", second.stderr)
        want = (f"flowrun: error: the run directory {d}/run is in use (flowrun pid {first.pid} on host-a, "
                f"running run {run_id}); choose another --run-id or --run-dir\n")
        self.check(second.returncode == 2 and second.stderr == want,
                   "same run dir: the second run is refused with exit 2, naming the first",
                   f"exit {second.returncode}\nwant {want!r}\ngot  {second.stderr!r}")
        self.check(resumed.returncode == 2 and
                   f"is still in progress (flowrun pid {first.pid} on host-a); resume it once it has ended"
                   in resumed.stderr, "same run dir: a resume of the live run is refused, naming it",
                   f"exit {resumed.returncode}\n{resumed.stderr}")
        self.check(entries == ["plan.json", "run.json", "run.lock", "spec.yaml", "train"],
                   "same run dir: the refused flowruns left nothing in the run directory", str(entries))
        record = json.loads(read(os.path.join(d, "run", "run.json"), "{}"))
        self.check(rc == 0 and record.get("pid") == first.pid and record.get("state") == "finished" and
                   record.get("exit_code") == 0, "same run dir: the first run succeeds, its run.json its own",
                   f"exit {rc}\n{record}\n{err}")
        log = read(os.path.join(d, "run", "train", "rank0", "stdout.log"), "")
        self.check(log == "rank 0 wrote its result\nrank 0 done\n", "same run dir: the first run's log is intact",
                   log)
        res = self.results(d) or {}
        false = int(second.returncode == 0) + int(resumed.returncode == 0)
        self.finish_row(r, "same run dir", end - start, 5.0, self.count_left(run_id),
                        self.lost_results(d, 1) + int(res.get("outcome") != "succeeded"), false, err)

    def test_hostile_run_id(self):
        """--run-id values that would leave the runs directory, nest, hold a newline, be empty or
        overlong, given to flowrun SPEC, flowrun run, flowrun resume and flowrun plan."""
        r = self.row("hostile_run_id", "each is refused (exit 2) with the run-id rule before any directory "
                     "is made, inside or outside the workdir")
        run_id = f"hostile-id-{os.getpid()}"
        top = os.path.join(self.scratch, "hostile_run_id")
        d = os.path.join(top, "a", "b", "c")
        os.makedirs(d)
        with open(os.path.join(d, "spec.yaml"), "w") as f:
            f.write("steps:\n  - name: a\n    run: [true]\n")

        def tree():
            return sorted(os.path.relpath(os.path.join(t, n), top) for t, ds, fs in os.walk(top) for n in ds + fs)
        before = tree()
        ids = ["../../../x", "a/b", "a\nb", "", "x" * 300, "..", "-x"]
        bad, made = [], 0
        for rid in ids:
            # '-x' as a word of its own would be read as an option
            option = [f"--run-id={rid}"] if rid.startswith("-") else ["--run-id", rid]
            for argv in ([self.flowrun, "spec.yaml", *option],
                         [self.flowrun, "spec.yaml", *option, "--run-dir", "rundir"],
                         [self.flowrun, "run", "--cpus", "1", *option, "true"],
                         [self.flowrun, "resume", "nosuch", *option],
                         [self.flowrun, "plan", "spec.yaml", *option]):
                p = run_to_end(argv, d, env=clean_env(**{MARK: run_id}))
                self.sanitizer_check("hostile run id", p.stderr)
                if p.returncode != 2 or "--run-id: " not in p.stderr or "run id" not in p.stderr:
                    bad.append(f"{argv[1:]!r}: exit {p.returncode}: {p.stderr}")
                if tree() != before:
                    made += 1
                    bad.append(f"{argv[1:]!r} made {sorted(set(tree()) - set(before))}")
                    shutil.rmtree(os.path.join(top, "x"), ignore_errors=True)
                    shutil.rmtree(os.path.join(d, "rundir"), ignore_errors=True)
                    shutil.rmtree(os.path.join(d, ".flowrun"), ignore_errors=True)
        self.check(not bad, "hostile run id: every one is refused with exit 2 naming --run-id, nothing made",
                   "\n".join(bad))
        p = run_to_end([self.flowrun, "spec.yaml", "--run-id", "x" * 301], d, env=clean_env(**{MARK: run_id}))
        want = ("flowrun: error: --run-id: 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...': the run id is 301 "
                "characters long; expected at most 100\n")
        self.check(p.stderr.startswith(want), "hostile run id: an overlong one is told its length and the limit",
                   f"want {want!r}\ngot  {p.stderr!r}")
        p = run_to_end([self.flowrun, "spec.yaml", "--run-id", "x" * 100], d, env=clean_env(**{MARK: run_id}))
        self.check(p.returncode == 0 and os.path.isdir(os.path.join(d, ".flowrun", "runs", "x" * 100)),
                   "hostile run id: one of 100 characters runs", f"exit {p.returncode}\n{p.stderr}")
        self.finish_row(r, "hostile run id", "n/a (refused at start)", 0, self.count_left(run_id), 0, made,
                        "")

    def test_nul_in_env(self):
        """An env value (of the flow and of a step) holding a NUL byte, written as YAML's "\\0"."""
        r = self.row("nul_in_env", "refused by validate and at start (exit 2) with file:line:col; no "
                     "variable is cut short or split in two, no run directory is made")
        run_id = f"nul-env-{os.getpid()}"
        d = self.workspace("nul_in_env", 'env:\n  A: "x\\0B=y"\nsteps:\n  - name: a\n    run: [env]\n'
                           '    env: {C: "\\0"}\n')
        want = ("spec.yaml:2:6: env.A: the value of A holds a NUL byte (\\0), which no environment variable can "
                "hold; remove it\n"
                "spec.yaml:6:14: steps.a.env.C: the value of C holds a NUL byte (\\0), which no environment "
                "variable can hold; remove it\n")
        bad = []
        for argv in ([self.flowrun, "validate", "spec.yaml"], [self.flowrun, "spec.yaml", "--run-id", run_id]):
            p = run_to_end(argv, d, env=clean_env(**{MARK: run_id}))
            self.sanitizer_check("nul in env", p.stderr)
            if p.returncode != 2 or not p.stderr.startswith(want):
                bad.append(f"{argv[1:]}: exit {p.returncode}\nwant {want!r}\ngot  {p.stderr!r}")
        made = int(os.path.exists(os.path.join(d, ".flowrun")))
        self.check(not bad and not made, "nul in env: refused at validate with the place of each value",
                   "\n".join(bad))
        self.finish_row(r, "nul in env", "n/a (refused at validate)", 0, self.count_left(run_id), 0, made, "")

    def test_long_step_name(self):
        """A 300-character step name, which no file system takes as a directory name."""
        r = self.row("long_step_name", "refused by validate and at start (exit 2) with file:line:col; no run "
                     "directory is made, so no run.json is left \"running\"")
        run_id = f"long-name-{os.getpid()}"
        name = "s" * 300
        d = self.workspace("long_step_name", f"steps:\n  - name: {name}\n    run: [true]\n")
        want = ("spec.yaml:2:11: steps[0].name: step name 'ssssssssssssssssssssssssssssssssssssssss...' is 300 "
                "characters long; expected at most 100 (it becomes part of file names)\n")
        bad = []
        for argv in ([self.flowrun, "validate", "spec.yaml"], [self.flowrun, "spec.yaml", "--run-id", run_id],
                     [self.flowrun, "spec.yaml", "--run-dir", "run"]):
            p = run_to_end(argv, d, env=clean_env(**{MARK: run_id}))
            self.sanitizer_check("long step name", p.stderr)
            if p.returncode != 2 or not p.stderr.startswith(want):
                bad.append(f"{argv[1:]}: exit {p.returncode}\nwant {want!r}\ngot  {p.stderr!r}")
        made = int(os.path.exists(os.path.join(d, ".flowrun"))) + int(os.path.exists(os.path.join(d, "run")))
        self.check(not bad and not made, "long step name: refused at validate, no run directory made",
                   "\n".join(bad))
        self.finish_row(r, "long step name", "n/a (refused at validate)", 0, self.count_left(run_id), 0, made,
                        "")
    # --- outputs stay confined: links, FIFOs, replaced directories, escaped globs ----

    # Rank 3 (on node 1 across nodes) does `evil` after it wrote its result; every rank's
    # result is in its FLOWRUN_OUTPUT_DIR unless `evil` says otherwise.
    CONFINED_RANK = ('import os, shutil; out = os.environ["FLOWRUN_OUTPUT_DIR"]; rank = int(os.environ["RANK"]); '
                     'open(os.path.join(out, "result.txt"), "w").write("rank %d result\\n" % rank)\n'
                     'if rank == 3:\n{evil}')

    def confined_runs(self, name, evil, *, extra="", env=False, nodes_evil=None, limit=30):
        """The same 4-rank step on one node and on 2 nodes (agents on this host). Returns
        [(where, exit code, stderr, run dir, seconds to exit)], "one node" first. With `env`,
        the ranks have HEAD_RUN: the run directory of flowrun (of the head)."""
        runs = []
        one_script = self.CONFINED_RANK.format(evil=evil)

        def env_yaml(run):
            return f"env:\n  HEAD_RUN: {q(run)}\n" if env else ""
        d = self.workspace(name, f"name: {name}\n{env_yaml(os.path.join(self.scratch, name, 'run'))}"
                                 f"steps:\n  - name: train\n    run: {q([PY, '-c', one_script])}\n"
                                 f"    parallel:\n      cpus: 4\n{extra}    collect: all\n")
        t0 = time.monotonic()
        p = self.start(d, f"{name}-{os.getpid()}")
        rc, end, err = self.ended(f"{name} (one node)", p, d, limit)
        if rc is None:
            p.kill()
            p.wait()
        runs.append(("one node", rc, err, os.path.join(d, "run"), end - t0))
        self.count_left(f"{name}-{os.getpid()}")
        nodes_script = self.CONFINED_RANK.format(evil=nodes_evil or evil)
        n = self.nodes(f"{name}_nodes", spec_text(name, q([PY, "-c", nodes_script]), collect="all", extra=extra,
                                                  env=env_yaml(os.path.join(self.scratch, f"{name}_nodes", "run"))))
        t0 = time.monotonic()
        if not n.begin(f"{name} (2 nodes)"):
            return runs
        rc = n.finish(f"{name} (2 nodes)", limit)
        runs.append(("2 nodes", rc, n.head_err(), n.run_dir, time.monotonic() - t0))
        n.check_nothing_left(f"{name} (2 nodes)")
        return runs

    @staticmethod
    def flowrun_wrote(runs):
        """Where only flowrun writes: outputs/ on one node (the rank's own directory is in the run
        directory there), the whole run directory of the head across nodes."""
        return [os.path.join(run[3], "train", "outputs") if run[0] == "one node" else run[3] for run in runs]

    @staticmethod
    def copies_of(path, run_dir):
        """Files under run_dir that are `path`: a hard link to it, a copy of its bytes, or a link."""
        with open(path, "rb") as f:
            data = f.read()
        st = os.stat(path)
        found = []
        for top, dirs, files in os.walk(run_dir):
            for name in files + [x for x in dirs if os.path.islink(os.path.join(top, x))]:
                p = os.path.join(top, name)
                try:
                    if os.path.islink(p):
                        if os.path.realpath(p) == os.path.realpath(path):
                            found.append(p)
                        continue
                    s = os.stat(p)
                    if (s.st_dev, s.st_ino) == (st.st_dev, st.st_ino) or (s.st_size == len(data) and
                                                                          open(p, "rb").read() == data):
                        found.append(p)
                except OSError:
                    pass
        return found

    def same_refusal(self, label, runs, want):
        """Each run failed and its stderr has `want` (a regex) as a whole report line's end."""
        for where, rc, err, _, _ in runs:
            self.check(rc == 1, f"{label} ({where}): the step fails (exit 1)", f"exit {rc}\n{err}")
            self.check(re.search(r"^flowrun:   (step 'train'|node \S+): " + want + "$", err, re.M) is not None,
                       f"{label} ({where}): flowrun says /{want}/", err)
        self.check(len(runs) == 2, f"{label}: it ran on one node and across nodes", str([r[0] for r in runs]))

    def confined_false(self, runs):
        """A success recorded, or a join that ran: each is a false claim."""
        false = 0
        for _, _, _, run_dir, _ in runs:
            try:
                with open(os.path.join(run_dir, "train", "results.json")) as f:
                    false += json.load(f).get("outcome") == "succeeded"
            except (OSError, ValueError):
                pass
        return false

    def confined_lost(self, runs, ranks=(0, 1, 2)):
        """Ranks (of `ranks`) whose result.txt is not in the head's copy of their FLOWRUN_OUTPUT_DIR."""
        lost = 0
        for _, _, _, run_dir, _ in runs:
            for rank in ranks:
                lost += read(os.path.join(run_dir, "train", f"rank{rank}", "out", "result.txt"), "") != \
                    f"rank {rank} result\n"
        return lost

    def test_output_link_out(self):
        """Rank 3 leaves a link to /etc/passwd in FLOWRUN_OUTPUT_DIR, on one node and across nodes."""
        r = self.row("output_link_out", "every path is resolved beneath the rank's directory (openat2 "
                     "RESOLVE_BENEATH, or an O_NOFOLLOW walk): the link is refused in the same words on one node "
                     "and across nodes (`rank 3: FLOWRUN_OUTPUT_DIR/passwd is a symlink to /etc/passwd, outside "
                     "the output directory; refused`); the step fails; no link, hard link or copy of /etc/passwd "
                     "in the run directory")
        runs = self.confined_runs("output_link_out", '    os.symlink("/etc/passwd", os.path.join(out, "passwd"))\n')
        self.same_refusal("output link out", runs, r"rank 3: FLOWRUN_OUTPUT_DIR/passwd is a symlink to /etc/passwd, "
                          r"outside the output directory; refused")
        copies = [c for top in self.flowrun_wrote(runs) for c in self.copies_of("/etc/passwd", top)]
        self.check(not copies, "output link out: nothing of /etc/passwd is in either run directory", str(copies))
        self.finish_row(r, "output link out", "n/a (refused when gathered)", 0, 0, self.confined_lost(runs),
                        len(copies) + self.confined_false(runs), "\n".join(run[2] for run in runs))

    def test_output_dir_replaced(self):
        """Rank 3 replaces its FLOWRUN_OUTPUT_DIR by a link to a directory outside the run: on one node
        its own, across nodes the head's copy of it on the shared file system."""
        r = self.row("output_dir_replaced", "the rank's directory is opened from the run directory without "
                     "following a link: `rank 3: FLOWRUN_OUTPUT_DIR is a symlink to ..., not the directory flowrun "
                     "made; refused` on one node and across nodes (there from the head's copy); nothing of the "
                     "outside directory is collected or written to")
        outside = os.path.join(self.scratch, "output_dir_replaced-outside")
        os.makedirs(outside)
        with open(os.path.join(outside, "private.key"), "w") as f:
            f.write("private\n")
        evil = f'    shutil.rmtree(out); os.symlink({outside!r}, out)\n'
        # Across nodes rank 3 writes nothing of its own (so nothing is uploaded) and replaces the head's copy.
        nodes_evil = ('    os.remove(os.path.join(out, "result.txt")); '
                      'head = os.path.join(os.environ["HEAD_RUN"], "train", "rank3", "out"); '
                      f'shutil.rmtree(head); os.symlink({outside!r}, head)\n')
        runs = self.confined_runs("output_dir_replaced", evil, env=True, nodes_evil=nodes_evil)
        self.same_refusal("output dir replaced", runs, "rank 3: FLOWRUN_OUTPUT_DIR is a symlink to " +
                          re.escape(outside) + ", not the directory flowrun made; refused")
        copies = [c for top in self.flowrun_wrote(runs) for c in self.copies_of(os.path.join(outside, "private.key"),
                                                                                 top)]
        self.check(not copies, "output dir replaced: nothing of the outside directory is collected", str(copies))
        self.check(os.listdir(outside) == ["private.key"], "output dir replaced: nothing is written into it",
                   str(os.listdir(outside)))
        self.finish_row(r, "output dir replaced", "n/a (refused when gathered)", 0, 0, self.confined_lost(runs),
                        len(copies) + self.confined_false(runs), "\n".join(run[2] for run in runs))

    def test_output_fifo(self):
        """Rank 3 leaves a FIFO and a link to /proc/kmsg in FLOWRUN_OUTPUT_DIR (either one, opened
        for reading, blocks forever); the step has a 20 s timeout."""
        r = self.row("output_fifo", "neither is opened: the FIFO is refused as `a FIFO, not a regular file`, the "
                     "link as outside the output directory, in the same words on one node and across nodes; the "
                     "step fails at once instead of hanging past its timeout (20 s; slower of the two runs)")
        evil = ('    os.mkfifo(os.path.join(out, "fifo")); os.symlink("/proc/kmsg", os.path.join(out, "kmsg"))\n')
        runs = self.confined_runs("output_fifo", evil, extra="    timeout: 20s\n", limit=60)
        self.same_refusal("output fifo", runs, r"rank 3: FLOWRUN_OUTPUT_DIR/fifo is a FIFO, not a regular file; "
                          r"refused")
        self.same_refusal("output fifo", runs, r"rank 3: FLOWRUN_OUTPUT_DIR/kmsg is a symlink to /proc/kmsg, outside "
                          r"the output directory; refused")
        took = max(run[4] for run in runs)
        self.finish_row(r, "output fifo", took, 20.0, 0, self.confined_lost(runs), self.confined_false(runs),
                        "\n".join(run[2] for run in runs))

    def test_output_link_to_dir(self):
        """Rank 3 leaves a link to a directory inside its FLOWRUN_OUTPUT_DIR (latest -> ckpt)."""
        r = self.row("output_link_to_dir", "treated the same on one node and across nodes: `rank 3: "
                     "FLOWRUN_OUTPUT_DIR/latest is a symlink to ckpt, a directory (a link to a directory is not "
                     "followed); refused`; the step fails")
        evil = ('    os.makedirs(os.path.join(out, "ckpt")); '
                'open(os.path.join(out, "ckpt", "epoch3.pt"), "w").write("e3"); '
                'os.symlink("ckpt", os.path.join(out, "latest"))\n')
        runs = self.confined_runs("output_link_to_dir", evil)
        self.same_refusal("output link to dir", runs, r"rank 3: FLOWRUN_OUTPUT_DIR/latest is a symlink to ckpt, a "
                          r"directory \(a link to a directory is not followed\); refused")
        self.finish_row(r, "output link to dir", "n/a (refused when gathered)", 0, 0, self.confined_lost(runs),
                        self.confined_false(runs), "\n".join(run[2] for run in runs))

    def test_escaped_glob(self):
        """An output glob that leaves the workdir only once its escapes are read: '\\.\\./secret.txt'."""
        r = self.row("escaped_glob", "refused when the spec is read, by `flowrun validate` and by a run (exit 2), "
                     "since `\\.\\.` is `..`; nothing starts, nothing is written")
        d = self.workspace("escaped_glob", "name: escaped\nsteps:\n  - name: train\n    run: [/bin/true]\n"
                                           "    parallel:\n      cpus: 2\n    outputs: ['\\.\\./secret.txt']\n")
        with open(os.path.join(self.scratch, "secret.txt"), "w") as f:
            f.write("secret\n")
        want = ("steps.train.outputs: glob '\\.\\./secret.txt' leaves the workdir with '..'; expected a pattern "
                "inside it")
        v = subprocess.run([self.flowrun, "validate", os.path.join(d, "spec.yaml")], capture_output=True, text=True,
                           env=clean_env(), timeout=30 * self.slack)
        self.check(v.returncode == 2 and want in v.stderr, "escaped glob: flowrun validate refuses it",
                   f"exit {v.returncode}\n{v.stderr}")
        p = self.start(d, f"escaped-{os.getpid()}")
        rc, _, err = self.ended("escaped glob", p, d, 30)
        self.check(rc == 2 and want in err, "escaped glob: a run refuses it before anything starts",
                   f"exit {rc}\n{err}")
        self.check(not os.path.exists(os.path.join(d, "run")), "escaped glob: no run directory is made",
                   str(os.listdir(d)))
        self.finish_row(r, "escaped glob", "n/a (refused before the run)", 0, self.count_left(f"escaped-{os.getpid()}"),
                        0, int(os.path.exists(os.path.join(d, "run", "train", "outputs"))), err)

    # --- trust boundaries: another user's directories, what a rank plants, FIFOs -------

    def cmd(self, label, argv, cwd, limit=30, env=None):
        """A flowrun command run to its end (a hang is a failure, not a wait): (exit, stdout, stderr)."""
        try:
            p = subprocess.run([self.flowrun, *argv], cwd=cwd, env=clean_env(**(env or {})), capture_output=True,
                               text=True, errors="replace", stdin=subprocess.DEVNULL, timeout=limit * self.slack)
        except subprocess.TimeoutExpired as e:
            return None, str(e.stdout or ""), f"{label}: still running after {limit * self.slack:g} s"
        self.sanitizer_check(label, p.stderr)
        return p.returncode, p.stdout, p.stderr

    def test_foreign_dirs(self):
        """(Root: another user's files.) User nobody prepares, in a 1777 directory as /tmp is: (a) an
        empty directory of theirs passed as --run-dir; (b) `.flowrun/runs` of a spec kept there, made
        before the first run; (c) a link at `x.json.tmp`, the temporary name of --summary-json x.json,
        to a file of root's; (d) their own run directory whose run.lock is a link to /dev/null, which a
        process of root's holds open, for `flowrun stacks`."""
        r = self.row("foreign_dirs", "(a) and (b) refused before anything starts (exit 2: `refusing the run "
                     "directory ...: it belongs to another user`, `refusing the run directory's parent ...`, each "
                     "with the fix), nothing written in them; (c) the summary is written through a new file of an "
                     "unguessable name and renamed, the planted link is never followed; (d) `flowrun stacks` "
                     "refuses a run directory that is not the caller's (exit 2) and signals nothing")
        if os.geteuid() != 0:
            print("foreign dirs: skipped: another user's files need root")
            r.recover, r.left, r.lost, r.false = "n/a (skipped: needs root)", 0, 0, 0
            return
        with temp_dir("flowrun-faults-shared-", mode=0o1777) as tmp:
            self.foreign_dirs(r, tmp)

    def foreign_dirs(self, r, tmp):
        spec = "name: foreign\nsteps:\n  - name: train\n    run: [/bin/true]\n    parallel:\n      cpus: 2\n"
        theirs = os.path.join(tmp, "theirs")
        victim = os.path.join(self.scratch, "victim.txt")
        with open(victim, "w") as f:
            f.write("root's own\n")
        os.chmod(self.scratch, 0o755)
        with open(os.path.join(tmp, "spec.yaml"), "w") as f:
            f.write(spec)
        os.chmod(os.path.join(tmp, "spec.yaml"), 0o644)

        def prepare():
            os.mkdir(theirs, 0o777)
            os.chmod(theirs, 0o777)
            os.makedirs(os.path.join(tmp, ".flowrun", "runs"))
            for p in (os.path.join(tmp, ".flowrun"), os.path.join(tmp, ".flowrun", "runs")):
                os.chmod(p, 0o777)
            os.symlink(victim, os.path.join(tmp, "x.json.tmp"))
            return "done"
        self.check(self.as_stranger(prepare) == "done", "foreign dirs: the stranger prepares")
        false = 0
        # (a) an empty --run-dir of theirs.
        rc, _, err = self.cmd("foreign run dir", [os.path.join(tmp, "spec.yaml"), "--run-dir", theirs, "--run-id",
                                                  f"foreign-a-{os.getpid()}"], tmp)
        self.check(rc == 2 and f"refusing the run directory {theirs}: it belongs to another user (uid 65534)" in err
                   and "--run-dir" in err, "foreign dirs (a): another user's --run-dir is refused with the fix",
                   f"exit {rc}\n{err}")
        false += len(os.listdir(theirs))
        self.check(os.listdir(theirs) == [], "foreign dirs (a): nothing is written in it", str(os.listdir(theirs)))
        # (b) the spec's default run directory, under their .flowrun/runs.
        runs = os.path.join(tmp, ".flowrun", "runs")
        rc, _, err = self.cmd("foreign runs", [os.path.join(tmp, "spec.yaml"), "--run-id", f"foreign-b-{os.getpid()}"],
                              tmp)
        self.check(rc == 2 and f"refusing the run directory's parent {runs}: it belongs to another user" in err
                   and "--run-dir" in err, "foreign dirs (b): a run directory under another user's .flowrun/runs "
                   "is refused with the fix", f"exit {rc}\n{err}")
        false += len(os.listdir(runs))
        self.check(os.listdir(runs) == [], "foreign dirs (b): nothing is written under it", str(os.listdir(runs)))
        # (c) --summary-json in the shared directory, its old temporary name planted.
        summary = os.path.join(tmp, "x.json")
        rc, _, err = self.cmd("foreign summary", [os.path.join(tmp, "spec.yaml"), "--run-dir",
                                                  os.path.join(self.scratch, "run-c"), "--summary-json", summary],
                              self.scratch)
        self.check(read(victim) == "root's own\n", "foreign dirs (c): the planted link's target is untouched",
                   read(victim))
        false += read(victim) != "root's own\n"
        ok = rc == 0 and os.path.isfile(summary) and not os.path.islink(summary) and \
            json.loads(read(summary, "{}")).get("exit_code") == 0
        self.check(ok, "foreign dirs (c): the run succeeds and its summary is written", f"exit {rc}\n{err}")
        # (d) flowrun stacks on their run directory, run.lock -> /dev/null, held open by a process of root's.
        holder = subprocess.Popen(["sleep", "300"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        devnull = os.open("/dev/null", os.O_RDONLY)
        fcntl.flock(devnull, fcntl.LOCK_EX)  # so that a lock "is held" through run.lock -> /dev/null
        fake = os.path.join(tmp, "fake-run")
        # (c)'s record, made to name the holder as the run's flowrun, still running its step.
        record = json.loads(read(os.path.join(self.scratch, "run-c", "run.json")))
        record.update(pid=holder.pid, run_dir=fake, state="running", exit_code=None, end=None)
        record["steps"] = {name: "running" for name in record.get("steps", {"train": ""})}

        def plant():
            os.makedirs(os.path.join(fake, "train"))
            os.symlink("/dev/null", os.path.join(fake, "run.lock"))
            with open(os.path.join(fake, "run.json"), "w") as f:
                json.dump(record, f)
            return "done"
        self.as_stranger(plant)
        rc, out, err = self.cmd("foreign stacks", ["stacks", fake, "--wait", "2"], self.scratch)
        alive = holder.poll() is None
        os.close(devnull)
        holder.kill()
        holder.wait()
        self.check(alive, "foreign dirs (d): no process is signalled (the holder of /dev/null lives)",
                   f"exit {rc}\n{err}")
        self.check(rc == 2 and "belongs to another user" in err, "foreign dirs (d): flowrun stacks refuses "
                   "another user's run directory", f"exit {rc}\n{out}\n{err}")
        false += not alive
        self.finish_row(r, "foreign dirs", "n/a (refused before the run)", 0, 0, 0, false, err)

    def test_planted_records(self):
        """Each rank plants, under the temporary names flowrun's records had (`end.json.tmp` in its
        directory, `results.json.tmp` in the step's, `run.json.tmp` in the run's), a link to a file
        outside the run (first run) or a FIFO (second run), swaps its stdout.log for a link to that
        file, and exits 0."""
        r = self.row("planted_records", "every record is written through a new file of an unguessable name "
                     "(O_EXCL, O_NOFOLLOW) beneath the run directory's descriptor and renamed: the outside file is "
                     "untouched, no FIFO is opened, both runs succeed with whole records; `flowrun resume` refuses a "
                     "run.lock that is a link or a FIFO")
        outside = os.path.join(self.scratch, "outside.txt")
        plant = ('o="$FLOWRUN_OUTPUT_DIR"; rd="${o%/out}"; sd="${rd%/*}"; run="${sd%/*}"; '
                 'for f in "$rd/end.json.tmp" "$sd/results.json.tmp" "$run/run.json.tmp" "$rd/stack.txt.tmp"; do '
                 '  rm -f "$f"; if [ "$MODE" = fifo ]; then mkfifo "$f" 2>/dev/null || true; '
                 '  else ln -sf "$OUTSIDE" "$f"; fi; done; '
                 'echo "rank $RANK wrote its result" && echo "rank $RANK result" > "$o/result.txt"')
        took, false, detail = 0.0, 0, []
        for mode in ("link", "fifo"):
            with open(outside, "w") as f:
                f.write("outside\n")
            d = self.workspace(f"planted_records_{mode}", f"""name: planted
steps:
  - name: train
    run: {sh_yaml(plant)}
    parallel:
      cpus: 4
    collect: all
""")
            run_id = f"planted-{mode}-{os.getpid()}"
            t0 = time.monotonic()
            p = self.start(d, run_id, env={"OUTSIDE": outside, "MODE": mode})
            rc, end, err = self.ended(f"planted records ({mode})", p, d, 60)
            if rc is None:
                p.kill()
                p.wait()
            took = max(took, end - t0)
            detail.append(err)
            self.check(rc == 0, f"planted records ({mode}): the run succeeds", f"exit {rc}\n{err}")
            self.check(read(outside, "") == "outside\n", f"planted records ({mode}): the outside file is untouched",
                       read(outside, "")[:2000])
            false += read(outside, "") != "outside\n"
            records = [os.path.join(d, "run", "run.json"), os.path.join(d, "run", "train", "results.json")] + \
                [os.path.join(d, "run", "train", f"rank{k}", "end.json") for k in range(4)]
            whole = []
            for path in records:
                try:
                    whole.append(os.path.isfile(path) and not os.path.islink(path) and bool(json.loads(read(path))))
                except ValueError:
                    whole.append(False)
            self.check(all(whole), f"planted records ({mode}): every record is a whole JSON file",
                       str(list(zip(records, whole))))
            if rc != 0:
                false += 0 if self.results(d) is None or self.results(d).get("outcome") != "succeeded" else 1
            # The ended run's run.lock, which flowrun resume locks and writes its line into, replaced the
            # same way.
            lock = os.path.join(d, "run", "run.lock")
            os.remove(lock)
            if mode == "fifo":
                os.mkfifo(lock)
            else:
                os.symlink(outside, lock)
            rc, _, err = self.cmd(f"planted records ({mode}) resume", ["resume", os.path.join(d, "run")], d)
            detail.append(err)
            self.check(rc == 2 and "run.lock" in err, f"planted records ({mode}): flowrun resume refuses the "
                       "run.lock at once", f"exit {rc}\n{err}")
            self.check(read(outside, "") == "outside\n", f"planted records ({mode}): resume leaves the outside "
                       "file untouched", read(outside, "")[:2000])
            false += read(outside, "") != "outside\n"
        self.finish_row(r, "planted records", "n/a (nothing fails)", 0, 0, 0, false, "\n".join(detail))
        r.recover = f"n/a (nothing fails; {took:.2f} s a run)"

    def test_fifo_records(self):
        """What a rank or a later step can leave that a reader would block on: (a) rank 0 makes its
        TORCHELASTIC_ERROR_FILE a FIFO and exits 1; (b) a later step replaces train's results.json with a
        FIFO before --summary-json is written; (c) then run.json and a stdout.log are made FIFOs and
        `flowrun runs`, `status`, `resume` and `logs` read the run."""
        r = self.row("fifo_records", "no FIFO is ever opened: (a) the error file is not read (`not a regular "
                     "file`), rank 0 is the culprit with its exit 1, exit 1 at once; (b) the summary is written "
                     "without train's record; (c) each command ends at once and says the file is damaged in one "
                     "line")
        fifo = ('if [ "$RANK" = 0 ]; then while [ ! -e ready.1 ] || [ ! -e ready.2 ] || [ ! -e ready.3 ]; do '
                'sleep 0.02; done; rm -f "$TORCHELASTIC_ERROR_FILE"; mkfifo "$TORCHELASTIC_ERROR_FILE"; exit 1; fi; ')
        d = self.rank_flow("fifo_records_a", trap=fifo, rest="exec sleep 60")
        self.fix_dir(d)
        run_id = f"fifo-a-{os.getpid()}"
        t0 = time.monotonic()
        p = self.start(d, run_id)
        rc, end, err = self.ended("fifo records (a)", p, d, 60)
        if rc is None:
            p.kill()
            p.wait()
        recover = end - t0
        res = self.results(d) or {}
        self.check(rc == 1 and "rank 0" in err, "fifo records (a): the step fails at once, rank 0 named",
                   f"exit {rc}\n{err}")
        self.check('"state": "running"' not in read(os.path.join(d, "run", "run.json"), ""),
                   "fifo records (a): run.json is closed", read(os.path.join(d, "run", "run.json"), ""))
        culprit = [w for w in res.get("ranks", []) if w.get("role") == "culprit"]
        self.check([w.get("rank") for w in culprit] == [0], "fifo records (a): results.json names rank 0 as the "
                   "culprit", json.dumps(res)[:3000])
        left = self.count_left(run_id)
        false = self.false_claims(d, failed_ranks=(0,))
        # (b) and (c): a run in the default run directory, whose second step replaces train's record.
        run_b = f"fifo-b-{os.getpid()}"
        record = f".flowrun/runs/{run_b}/train/results.json"
        b = self.workspace("fifo_records_b", f"""name: fiforec
steps:
  - name: train
    run: [/bin/true]
    parallel:
      cpus: 2
  - name: after
    run: [sh, -c, {q(f'rm -f {record} && mkfifo {record}')}]
""")
        rc, _, err = self.cmd("fifo records (b)", [os.path.join(b, "spec.yaml"), "--run-id", run_b, "--summary-json",
                                                   os.path.join(b, "summary.json")], b, limit=60)
        summary = read(os.path.join(b, "summary.json"), "")
        self.check(rc == 0 and '"exit_code": 0' in summary.replace('"exit_code":0', '"exit_code": 0'),
                   "fifo records (b): the run ends and its summary is written", f"exit {rc}\n{err}\n{summary[:2000]}")
        run_dir = os.path.join(b, ".flowrun", "runs", run_b)
        kept = read(os.path.join(run_dir, "run.json"), "")
        os.remove(os.path.join(run_dir, "run.json"))
        os.mkfifo(os.path.join(run_dir, "run.json"))
        log = os.path.join(run_dir, "train", "rank1", "stdout.log")
        for label, argv, want in (("runs", ["runs"], "damaged"), ("status", ["status", run_dir], "not a regular file"),
                                  ("resume", ["resume", run_dir], "not a regular file"),
                                  ("logs", ["logs", run_b, "--step", "train"], "train/rank1/stdout.log is damaged")):
            if label == "logs":  # run.json back, the log a FIFO
                os.remove(os.path.join(run_dir, "run.json"))
                with open(os.path.join(run_dir, "run.json"), "w") as f:
                    f.write(kept)
                os.remove(log)
                os.mkfifo(log)
            rc, out, err = self.cmd(f"fifo records (c) {label}", argv, b)
            self.check(rc is not None and want in out + err, f"fifo records (c): flowrun {label} ends and says "
                       f"'{want}'", f"exit {rc}\n{out}\n{err}")
            self.check(rc is None or sum("damaged" in line or "not a regular file" in line
                                         for line in (out + err).splitlines()) >= 1,
                       f"fifo records (c): flowrun {label} says it in a line", out + err)
        self.finish_row(r, "fifo records", recover, 10.0, left, self.lost_results(d, 4, finished=(1, 2, 3)), false,
                        err)
    # --- what flowrun records and derives, removes, and reads as a number ------------------

    @staticmethod
    def run_bytes(argv, cwd, env, timeout=60):
        """argv to its end, its output read as bytes and decoded as Python decodes file names
        (surrogateescape: a byte that is not UTF-8 becomes \\udcNN): a path flowrun prints may hold any."""
        p = subprocess.run(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout)
        return p.returncode, p.stderr.decode("utf-8", "surrogateescape")

    # A rank that appends to `seen` its VERSION, its TORCHELASTIC_RESTART_COUNT and the bytes of each
    # of its arguments (hex), then fails until the file `ok` is there.
    ARGV_RANK = ("import os, sys\n"
                 "words = [os.environ['VERSION'], os.environ['TORCHELASTIC_RESTART_COUNT']]\n"
                 "words += [os.fsencode(a).hex() for a in sys.argv[1:]]\n"
                 "with open('seen', 'a') as f:\n"
                 "    f.write(' '.join(words) + '\\n')\n"
                 "sys.exit(0 if os.path.exists('ok') else 1)\n")

    def argv_flow(self, d, version, name="argv"):
        """A spec of one parallel step of one CPU rank running ARGV_RANK (written in `d`, whose path is
        UTF-8, as a spec's text is) with ${args}."""
        script = os.path.join(d, "argv.py")
        with open(script, "w") as f:
            f.write(self.ARGV_RANK)
        return (f"name: {name}\nsteps:\n  - name: train\n    run: [{q(PY)}, {q(script)}, \"${{args}}\"]\n"
                f"    env: {{VERSION: \"{version}\"}}\n    parallel:\n      cpus: 1\n")

    def test_record_bytes(self):
        """A spec path, a workdir, a run directory and `--` arguments holding bytes that are not UTF-8
        (0xff; 0xc3 without the byte that would complete it): flowrun resume, then a Slurm requeue,
        run the same spec file with the same bytes."""
        r = self.row("record_bytes", "run.json keeps every byte (one that is not UTF-8 as \\udcNN, as Python "
                     "writes it): flowrun resume runs the spec file as it is now with the same argument bytes; "
                     "a requeue finds the run and goes on at TORCHELASTIC_RESTART_COUNT 1")
        run_id = f"bytes-{os.getpid()}"
        top = os.path.join(self.scratch, "record_bytes")
        d = os.path.join(top, "work\udcffdir")
        os.makedirs(d)
        spec = os.path.join(d, "sp\udcffec.yaml")

        def write_spec(version):
            with open(spec, "w") as f:
                f.write(self.argv_flow(top, version))
        write_spec(1)
        args = ["--name=\udcff\udcc3(", "caf\u00e9", "\udc80", "\ufdd0"]
        want = " ".join(os.fsencode(a).hex() for a in args)
        env = clean_env(**{MARK: run_id})
        bad = []

        def seen():
            return read(os.path.join(d, "seen"), "").splitlines()
        run_dir = os.path.join(d, "run\udcff")
        rc, err = self.run_bytes([self.flowrun, spec, "--run-id", run_id, "--run-dir", run_dir, "--", *args], d, env)
        self.sanitizer_check("record bytes", err)
        record = json.loads(read(os.path.join(run_dir, "run.json"), "{}") or "{}")
        if rc != 1 or seen() != [f"1 0 {want}"]:
            bad.append(f"the first run: exit {rc} (want 1), seen {seen()}\n{err}")
        if [os.fsencode(record.get(k) or "") for k in ("spec", "spec_dir")] != [os.fsencode(spec), os.fsencode(d)] \
                or [os.fsencode(a) for a in record.get("args", [])] != [os.fsencode(a) for a in args] or \
                "\\udcff" not in read(os.path.join(run_dir, "run.json"), ""):
            bad.append(f"run.json does not give the bytes back to json.load and os.fsencode: {record}")
        # The spec is fixed (VERSION 2) and the rank will succeed: resume runs the file as it is now.
        write_spec(2)
        open(os.path.join(d, "ok"), "w").close()
        rc, err = self.run_bytes([self.flowrun, "resume", run_dir], d, env)
        self.sanitizer_check("record bytes", err)
        if rc != 0 or seen()[1:] != [f"2 0 {want}"] or f"flowrun: spec {spec} (the file as it is now)" not in err:
            bad.append(f"resume: exit {rc} (want 0), seen {seen()} (want 2 0 {want} last)\n{err}")
        # A Slurm job's run that fails, then the job requeued: the same file, the same arguments.
        os.remove(os.path.join(d, "ok"))
        job = {"SLURM_JOB_ID": "4343", "SLURM_JOB_NODELIST": "host-a", "SLURM_JOB_NUM_NODES": "1"}
        rq_dir = os.path.join(d, "rq\udcff")
        argv = [self.flowrun, spec, "--run-id", f"{run_id}-rq", "--run-dir", rq_dir, "--", *args]
        rc, err = self.run_bytes(argv, d, clean_env(**{MARK: run_id, **job}))
        if rc != 1 or seen()[2:] != [f"2 0 {want}"]:
            bad.append(f"the job's run: exit {rc} (want 1), seen {seen()}\n{err}")
        open(os.path.join(d, "ok"), "w").close()
        rc, err = self.run_bytes(argv, d, clean_env(**{MARK: run_id, **job, "SLURM_RESTART_COUNT": "1"}))
        self.sanitizer_check("record bytes", err)
        if rc != 0 or seen()[3:] != [f"2 1 {want}"] or f"flowrun: resuming run {run_id}-rq: " not in err or \
                not os.path.isfile(os.path.join(rq_dir + "-requeue1", "run.json")):
            bad.append(f"the requeue: exit {rc} (want 0), seen {seen()} (want 2 1 {want} last)\n{err}")
        self.check(not bad, "record bytes: resume and a requeue run the same file with the same bytes",
                   "\n".join(bad))
        # Lost: a run whose arguments are not the bytes given; falsely claimed: one that ran the stale copy
        # of the spec (or a run afresh) as the run it resumes.
        lines = [line.split(" ", 2) for line in seen()]
        lost = sum(line[2:] != [want] for line in lines)
        false = sum(line[:2] != expected for line, expected in zip(lines, [["1", "0"], ["2", "0"], ["2", "0"],
                                                                            ["2", "1"]]))
        self.finish_row(r, "record bytes", "n/a (nothing fails)", 0, self.count_left(run_id), lost, false, "")

    def test_derived_names(self):
        """A requeued job's flowrun derives its run's id and directory from the --run-id and --run-dir
        the batch script gives again: a run id of 92 to 100 characters, a directory given as DIR/, DIR//,
        DIR/., DIR/x/.. or with a last part of 250 bytes. Each resumes its run."""
        r = self.row("derived_names", "each requeue resumes its run at TORCHELASTIC_RESTART_COUNT 1 (exit 0): a "
                     "derived id or directory name too long for its limit is cut and gets a hash of the whole "
                     "(ID...-hash-requeue1); DIR/, DIR//, DIR/. and DIR/x/.. are DIR, the new run beside it")
        run_id = f"derived-{os.getpid()}"
        cases = [("id100", ["--run-id", "x" * 100]), ("id92", ["--run-id", "y" * 92]),
                 ("slash", ["--run-dir", "run/"]), ("slashes", ["--run-dir", "run//"]),
                 ("dot", ["--run-dir", "run/."]), ("dotdot", ["--run-dir", "run/x/.."]),
                 ("long_dir", ["--run-dir", "r" * 250]),
                 ("both", ["--run-id", "z" * 100, "--run-dir", "s" * 250 + "/"])]
        bad, lost = [], 0
        for n, (name, options) in enumerate(cases):
            d = os.path.join(self.scratch, "derived_names", name)
            os.makedirs(d)
            with open(os.path.join(d, "spec.yaml"), "w") as f:
                f.write(self.argv_flow(d, 1))
            job = {MARK: run_id, "SLURM_JOB_ID": str(5000 + n), "SLURM_JOB_NODELIST": "host-a",
                   "SLURM_JOB_NUM_NODES": "1"}
            rc, err = self.run_bytes([self.flowrun, "spec.yaml", *options], d, clean_env(**job))
            self.sanitizer_check("derived names", err)
            if rc != 1:
                bad.append(f"{name}: the job's run: exit {rc} (want 1)\n{err}")
                continue
            open(os.path.join(d, "ok"), "w").close()
            t0 = time.monotonic()
            rc, err = self.run_bytes([self.flowrun, "spec.yaml", *options], d,
                                     clean_env(**job, SLURM_RESTART_COUNT="1"))
            self.sanitizer_check("derived names", err)
            m = re.search(r"^flowrun: run (\S+): 1 step; logs and results in (.+)$", err, re.M)
            seen = read(os.path.join(d, "seen"), "").splitlines()
            if rc != 0 or seen != ["1 0", "1 1"] or "flowrun: resuming run " not in err or m is None:
                bad.append(f"{name}: the requeue: exit {rc} (want 0), seen {seen} (want 1 0, 1 1)\n{err}")
                lost += seen[1:] != ["1 1"]
                continue
            new_id, new_dir = m.group(1), m.group(2)
            if len(new_id) > 100 or len(os.path.basename(new_dir)) > 255 or not os.path.isfile(
                    os.path.join(new_dir, "run.json")) or ("--run-id" in options and not new_id.endswith("-requeue1")):
                bad.append(f"{name}: the new run {new_id} in {new_dir}: over a limit, or no run.json there")
            if "--run-dir" in options:
                old = os.path.normpath(os.path.join(d, options[options.index("--run-dir") + 1]))
                if os.path.dirname(new_dir) != os.path.dirname(old) or not new_dir.endswith("-requeue1") or \
                        not os.path.basename(new_dir).startswith(os.path.basename(old)[:200]):
                    bad.append(f"{name}: the new run's directory {new_dir} is not {old}-requeue1 beside it")
            print(f"derived names: {name}: {new_id} in {new_dir} ({time.monotonic() - t0:.2f} s)")
        self.check(not bad, "derived names: each requeue resumes its run under a name within its limits",
                   "\n".join(bad))
        self.finish_row(r, "derived names", "n/a (nothing fails)", 0, self.count_left(run_id), lost,
                        len(bad) - lost, "")

    # A rank that builds in its directory on the node (beside out/, which is uploaded: an upload stops
    # at a path it cannot name), each directory relative to the one above: a chain of 60 directories
    # of 100-byte names (6000 bytes of path) with a file at the bottom, one of 3000 levels, a
    # directory without permissions and a read-only one holding a file.
    DEEP_RANK = """import os
out = os.path.dirname(os.environ["FLOWRUN_OUTPUT_DIR"])
def chain(name, depth):
    fd = os.open(out, os.O_RDONLY)
    for _ in range(depth):
        os.mkdir(name, dir_fd=fd)
        below = os.open(name, os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = below
    return fd
fd = chain("d" * 100, 60)
os.close(os.open("result.txt", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd))
os.close(fd)
os.close(chain("e", 3000))
for name in ("locked", "readonly"):
    os.mkdir(os.path.join(out, name))
open(os.path.join(out, "readonly", "file"), "w").close()
os.chmod(os.path.join(out, "locked"), 0)
os.chmod(os.path.join(out, "readonly"), 0o500)
"""

    def test_deep_removal(self):
        """Each rank on an agent leaves in its directory there a tree deeper than PATH_MAX (60 levels
        of 100-byte names), one with 3000 levels (more than the descriptors a process may hold), a
        directory with no permissions and a read-only one with a file: the agents' TMPDIR is empty after."""
        r = self.row("deep_removal", "each agent removes its whole scratch directory, every rank's outputs in "
                     "it, relative to each directory it walks (no path that PATH_MAX limits): the agents' "
                     "TMPDIR is empty after the run; what could not be removed would be said in one line")
        n = self.nodes("deep_removal", spec_text("deep", sh_yaml('"$0" -c "$1" && ' + RESULT + self.OUTDIR, PY,
                                                                  self.DEEP_RANK)))
        if not n.begin("deep removal"):
            return
        rc = n.finish("deep removal", 120)
        self.check(all(n.wait(p, 60) is not None for p in n.agents), "deep removal: both agents exit", n.detail())
        dirs = self.outdirs(n.dir) or {}
        self.check(rc == 0 and len(dirs) == 4, "deep removal: the step succeeds on both nodes", n.detail())
        left = []
        for top, subdirs, files in os.walk(n.tmp):
            left += [os.path.join(top, x)[:200] for x in subdirs + files]
            break
        if not self.check(not left, "deep removal: nothing is left in the agents' TMPDIR", "\n".join(left[:20])):
            subprocess.run(["rm", "-rf", n.tmp], check=False)  # deeper than pytest's own clean-up recurses
        said = [line for name in n.agent_names for line in n.out(f"{name}.err").splitlines()
                if "could not remove" in line]
        self.check(not said, "deep removal: no agent says something could not be removed", "\n".join(said))
        n.check_nothing_left("deep removal")
        self.finish_row(r, "deep removal", "n/a (nothing fails)", 0, len(n.leftovers()), 0, len(left), n.detail())

    # Each value, for each option that takes seconds, and where a spec takes a duration.
    NONFINITE = ["nan", "NaN", "-nan", "inf", "-inf", "infinity", "1e999", "1" + "0" * 400]

    def test_nonfinite_numbers(self):
        """NaN, infinities and numbers too large for a double given where flowrun takes seconds: --grace
        (flowrun SPEC, flowrun resume, flowrun run), --connect-timeout (flowrun agent), --wait (flowrun
        stacks), TORCH_ELASTIC_SHUTDOWN_TIMEOUT, and a spec's durations (a step's, the cluster's)."""
        r = self.row("nonfinite_numbers", "each is refused (exit 2) naming the option or the spec's file:line:col "
                     "and what it takes, before anything starts; none is read as 0 or as forever")
        run_id = f"nonfinite-{os.getpid()}"
        d = self.workspace("nonfinite_numbers", "name: nonfinite\nsteps:\n  - name: a\n    run: [/bin/true]\n")
        env = clean_env(**{MARK: run_id})
        bad = []
        for value in self.NONFINITE:
            cases = [([self.flowrun, "spec.yaml", f"--grace={value}"], "--grace", "expected seconds from 0 to 3600"),
                     ([self.flowrun, "resume", "nosuch", f"--grace={value}"], "--grace",
                      "expected seconds from 0 to 3600"),
                     ([self.flowrun, "run", f"--grace={value}", "--cpus", "1", "--no-python", "/bin/true"], "--grace",
                      "expected seconds from 0 to 3600"),
                     ([self.flowrun, "agent", "--rdzv-endpoint", "127.0.0.1:1", f"--connect-timeout={value}"],
                      "--connect-timeout", "expected seconds from 0 to 86400"),
                     ([self.flowrun, "stacks", "nosuch", f"--wait={value}"], "--wait",
                      "expected seconds from 0.001 to 86400")]
            for argv, option, expected in cases:
                try:
                    rc, err = self.run_bytes(argv, d, env, timeout=30 * self.slack)
                except subprocess.TimeoutExpired:
                    rc, err = None, "(still running after 30 s: killed)"
                self.sanitizer_check("nonfinite numbers", err)
                if rc != 2 or "flowrun: error: " not in err or option not in err or expected not in err:
                    bad.append(f"{argv[1:]}: exit {rc}\n{err[:600]}")
            rc, err = self.run_bytes([self.flowrun, "run", "--cpus", "1", "--no-python", "/bin/true"], d,
                                     {**env, "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": value})
            if rc != 2 or f"TORCH_ELASTIC_SHUTDOWN_TIMEOUT={value}: expected a whole number" not in err:
                bad.append(f"TORCH_ELASTIC_SHUTDOWN_TIMEOUT={value}: exit {rc}\n{err[:600]}")
        spec = path_of("specs", "bad", "nonfinite_durations.yaml")
        p = subprocess.run([self.flowrun, "validate", spec], capture_output=True, text=True, env=env, cwd=d,
                           timeout=30 * self.slack)
        want = read(path_of("specs", "bad", "nonfinite_durations.err"))
        got = p.stderr.replace(os.path.dirname(spec) + "/", "")
        if p.returncode != 2 or got != want:
            bad.append(f"validate {spec}: exit {p.returncode}\nwant {want}\ngot  {got}")
        made = [x for x in os.listdir(d) if x != "spec.yaml"]
        self.check(not bad and not made, "nonfinite numbers: each is refused with exit 2, saying where and what "
                   "it takes; nothing is made", "\n".join(bad + [f"made: {made}"]))
        self.finish_row(r, "nonfinite numbers", "n/a (refused at start)", 0, self.count_left(run_id), 0,
                        len(bad) + len(made), "")
    # --- a command line turned into a spec ----------------------------------------------

    # Arguments YAML or flowrun's templates would read otherwise than as written (bytes: a
    # command line need not be UTF-8).
    HOSTILE_ARGS = [b"", b" ", b"  lead", b"trail  ", b"null", b"~", b"true", b"no", b"1e3", b"0o17", b"- x",
                    b"-", b":", b"a: b", b"#", b"x #y", b"'", b'"', b"\\", b"\\n", b"a\nb", b"\n", b"\t", b"\r\n",
                    b"[a, b]", b"{a: b}", b"&a", b"*a", b"!!binary", b"%YAML 1.2", b"---", b"|", b">", b"`",
                    b"${args}", b"y=${args}", b"lr=${args.lr}", b"sched.total=${steps.max}",
                    b"${steps.show.outputs}", b"${arg}", b"$${args}", b"$$${args}", b"${", b"$", b"${HOME}",
                    b"$HOME", b"\x01\x1b[31m\x7f", b"\xc2\x85", b"\xe2\x80\xa8", b"\xef\xbb\xbf",
                    "é漢字🙂".encode(), b"\xff", b"a\xff${args}\xfe", b"\xed\xa0\x80", b"--", b"-m",
                    b"--nproc-per-node=3"]
    # Script paths whose name is a YAML null, a number, a comment, a template; one in a
    # directory with a newline and a byte that is not UTF-8.
    HOSTILE_SCRIPTS = [b"null.py", b"1e3.py", b"#c a: b ${args} - x.py", b"dir\n${x} $${y}\xff/ lead\t~.py"]

    @staticmethod
    def is_utf8(word):
        try:
            word.decode("utf-8")
            return True
        except UnicodeDecodeError:
            return False

    def test_run_args_verbatim(self):
        """flowrun run SCRIPT ARGS, and flowrun init's spec run by flowrun SPEC: the script's sys.argv
        is the script and the arguments as given, byte for byte, whatever YAML or a template would read
        in them."""
        r = self.row("run_args_verbatim", "every argument and script name of `flowrun run`, and of the spec "
                     "`flowrun init` writes, reaches the script byte for byte: `${` is written `$${` (no "
                     "template), every scalar double-quoted, a word that is not UTF-8 as `!!binary`")
        d = os.path.join(self.scratch, "run_args")
        os.makedirs(d)
        show = ("import json, os, sys\n"
                "with open(os.environ['ARGV_OUT'], 'w') as f:\n"
                "    json.dump([os.fsencode(a).hex() for a in sys.argv], f)\n")
        for script in self.HOSTILE_SCRIPTS:
            path = os.path.join(os.fsencode(d), script)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(show)
        # In three sets, so that each part of the class shows on its own: words YAML or a template
        # would read otherwise, line breaks (also YAML 1.1's), bytes that are not UTF-8.
        breaks = [a for a in self.HOSTILE_ARGS if self.is_utf8(a) and re.search(rb"[\r\n]|\xc2\x85|\xe2\x80\xa8", a)]
        other = [a for a in self.HOSTILE_ARGS if not self.is_utf8(a)]
        plain = [a for a in self.HOSTILE_ARGS if a not in breaks and a not in other]
        cases = [(script, args) for script in self.HOSTILE_SCRIPTS for args in (plain, breaks, other)]
        ids, failed, wrong = [], [], 0
        for i, (script, args) in enumerate(cases):
            want = [script] + args
            for how in ("run", "init"):
                run_id = f"args-{os.getpid()}-{how}{i}"
                ids.append(run_id)
                out = os.path.join(d, f"argv.{how}{i}.json")
                env = clean_env(ARGV_OUT=out, **{MARK: run_id})
                common = ["--run-dir", os.path.join(d, f"run.{how}{i}"), "--run-id", run_id]
                if how == "run":
                    steps = [[self.flowrun, "run", "--cpus", "1", "--python", PY, *common, *want]]
                else:
                    spec = os.path.join(d, f"spec{i}.yaml")
                    steps = [[self.flowrun, "init", "--cpus", "1", "--python", PY, "-o", spec, *want],
                             [self.flowrun, spec, *common]]
                errors = b""
                for argv in steps:
                    p = subprocess.run(argv, cwd=d, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                                       timeout=60 * self.slack)
                    errors += p.stdout + p.stderr
                    self.sanitizer_check(f"run args {how} {script!r}", errors.decode(errors="replace"))
                    if p.returncode != 0:
                        break
                try:
                    with open(out) as f:
                        got = [bytes.fromhex(a) for a in json.load(f)]
                except (OSError, ValueError):
                    got = None
                if got != want:
                    wrong += 1
                    failed.append(f"flowrun {how} {script!r}: exit {p.returncode}\n"
                                  f"{errors.decode(errors='replace')[-1500:]}\n" +
                                  (f"got {got}\nwant {want}" if got else "the script did not run"))
        self.check(not failed, "run args: the script gets its path and every argument byte for byte, through "
                   "flowrun run and through flowrun init's spec", "\n\n".join(failed))
        self.finish_row(r, "run args", "n/a (nothing fails)", 0, sum(self.count_left(i) for i in ids), 0, wrong,
                        "\n".join(failed))
    SHOW = 'import json, sys; print(json.dumps(sys.argv[1:]))'

    def test_shell_template_contexts(self):
        """${args} and ${steps.NAME.outputs} in every quoting context of shell text (a `shell: true` script,
        the -c script of bash in a list run, of sh in a string run), with hostile arguments and a run
        directory whose path has a space, quotes and $(...): each program gets exactly the value. The
        contexts no quoting makes safe are refused before the run, each at its line and column."""
        r = self.row("shell_template_contexts", "each template is quoted for where it stands (unquoted, `'...'`, "
                     "`\"...\"`, `$(...)`, backquotes, an assignment, a `bash -c` script in a list or a string "
                     "`run`): every argument and a path with a space reach the program unchanged and nothing "
                     "injected runs; the contexts no quoting makes safe are refused by validate and at start, "
                     "each at its file:line:col with the fix, and nothing starts")
        run_id = f"shellctx-{os.getpid()}"
        d = os.path.join(self.scratch, "shell ctx $(touch INJ0) `touch INJ1` it's")
        os.makedirs(d)
        with open(os.path.join(d, "env.sh"), "w") as f:
            f.write("export FROM_ENV_SH=sourced\n")
        show = f"{PY} -c {shlex.quote(self.SHOW)}"
        script = (f"""v=`printf '%s' "bq ${{args}}"`; w=${{args}}\n"""
                  f"""{show} ${{args}} "dq ${{args}}" 'sq ${{args}}' "$(printf '%s' "in ${{args}}")" """
                  f"""$(printf '%s' 'cmd ${{args}}' | {PY} -c 'import sys; print(len(sys.stdin.buffer.read()))') """
                  f""""$v" "$w" ${{steps.train.outputs}}/rank0/result.txt "${{steps.train.outputs}}/rank1"\n"""
                  f"""cat "${{steps.train.outputs}}/rank1/result.txt" ${{steps.train.outputs}}/rank0/result.txt\n""")
        string_run = "sh -ec " + shlex.quote(show + " ${args} 'sq ${args}' \"dq ${args}\"")
        listed = f"""source env.sh && {show} "$FROM_ENV_SH" ${{args}} "dq ${{args}}" 'sq ${{args}}'"""
        with open(os.path.join(d, "spec.yaml"), "w") as f:
            f.write(f"""name: shellctx
steps:
  - name: train
    run: {sh_yaml(RESULT)}
    parallel:
      cpus: 2
    collect: all
  - name: script
    join: train
    shell: true
    run: {q(script)}
  - name: listed
    needs: [script]
    run: {q(["bash", "-euo", "pipefail", "-c", listed])}
  - name: string
    needs: [listed]
    run: {q(string_run)}
""")
        args = ["$(touch INJ2)", "`touch INJ3`", "'", '"', "\\", "a\nb", "$HOME", "*", " x  y ", "it's \"$(touch INJ4)\"",
                "\udcff\udcfe", ""]
        p = self.start(d, run_id, "--", *args)
        rc, _, err = self.ended("shell template contexts", p, d, 60)
        out = read(os.path.join(d, "flowrun.out"))
        outputs = os.path.join(d, "run", "train", "outputs")
        joined = " ".join(args)
        want = {
            "script": args + ["dq " + joined, "sq " + joined, "in " + joined,
                              str(len(("cmd " + joined).encode("utf-8", "surrogateescape"))), "bq " + joined, joined,
                              outputs + "/rank0/result.txt", outputs + "/rank1"],
            "listed": ["sourced"] + args + ["dq " + joined, "sq " + joined],
            "string": args + ["sq " + joined, "dq " + joined],
        }
        self.check(rc == 0, "shell template contexts: the flow succeeds", f"exit {rc}\n{err}\n{out}")
        lines = out.splitlines()
        for step, words in want.items():
            self.check(f"[{step}] {json.dumps(words)}" in lines, f"shell template contexts: step {step} gets every "
                       "value unchanged in every context", f"want [{step}] {json.dumps(words)}\n{out}")
        self.check("[script] rank 1 result" in lines and "[script] rank 0 result" in lines,
                   "shell template contexts: cat reads both files under a path with a space", out)
        injected = [n for n in os.listdir(d) + os.listdir(self.scratch) if n.startswith("INJ")]
        self.check(not injected, "shell template contexts: no injected command ran", str(injected))

        # The contexts no quoting makes safe: refused with file:line:col, by validate and at start.
        bad = self.workspace("shell_ctx_refused", f"""name: refused
steps:
  - name: train
    run: {sh_yaml(RESULT)}
    parallel:
      cpus: 2
  - name: arith
    join: train
    shell: true
    run: |
      echo ok
      echo $(( ${{args}} + 1 ))
  - name: nested
    needs: [arith]
    shell: true
    run: echo "`ls ${{steps.train.outputs}}`" ${{X:-${{args}}}}
  - name: heredoc
    needs: [nested]
    run: [bash, -c, "cat <<EOF\\n${{args}}\\nEOF"]
  - name: reread
    needs: [heredoc]
    run: bash -c 'srun bash -c "python train.py ${{args}}"'
  - name: escaped
    needs: [reread]
    shell: true
    run: echo \\${{args}} $'${{args}}'
""")
        want_lines = [
            "spec.yaml:12:16: steps.arith.run: template '${args}' stands in arithmetic ($((...)), ((...)) or "
            "$[...]), where bash runs a value's $(...) as a command; assign it to a variable first, outside any "
            "quotes (V=${args}), check that it is a number, and use $V there",
            "spec.yaml:16:20: steps.nested.run: template '${steps.train.outputs}' stands inside backquotes within "
            "double quotes; write $(...) instead of the backquotes",
            "spec.yaml:19:33: steps.heredoc.run: template '${args}' stands in a here-document, whose body has no "
            "quoting; assign it to a variable first, outside any quotes (V=${args}), and use $V in the body",
            "spec.yaml:22:49: steps.reread.run: template '${args}' stands in the script of a shell that this script "
            "starts (sh -c), which reads it once more; pass it to that shell after its script, outside any quotes, "
            "and use \"$1\" or \"$@\" in the script (bash -c '... \"$@\"' bash ${args})",
            "spec.yaml:26:16: steps.escaped.run: template '${args}' stands right after a backslash, which makes the "
            "shell read its '$' as a plain character; remove the backslash: flowrun quotes the value",
        ]
        v = subprocess.run([self.flowrun, "validate", "spec.yaml"], cwd=bad, capture_output=True, text=True,
                           env=clean_env(), timeout=30 * self.slack)
        got = [line.replace(os.path.join(bad, ""), "") for line in v.stderr.splitlines()]
        self.check(v.returncode == 2 and got == want_lines, "shell template contexts: flowrun validate refuses "
                   "each unsafe context at its line and column, with the fix",
                   f"exit {v.returncode}\n" + "\n".join(difflib.unified_diff(want_lines, got, lineterm="")))
        p2 = self.start(bad, f"{run_id}-refused")
        rc2, _, err2 = self.ended("shell template contexts refused", p2, bad, 30)
        self.check(rc2 == 2 and all(line.split(": ", 1)[1] in err2 for line in want_lines),
                   "shell template contexts: a run refuses the spec before anything starts", f"exit {rc2}\n{err2}")
        self.check(not os.path.exists(os.path.join(bad, "run")), "shell template contexts: no run directory is made",
                   str(os.listdir(bad)))
        self.finish_row(r, "shell template contexts", "n/a (nothing fails; unsafe contexts refused at validate)", 0,
                        self.count_left(run_id) + self.count_left(f"{run_id}-refused"), self.lost_results(d, 2),
                        len(injected), err + err2)
    # A rank of test_failed_after, by its RANK and the case (argv[1]): it says it is ready (ready.R: its pid),
    # then waits for the test's go.R, or for another rank's end, as the case has it.
    FAILED_AFTER_RANK = r"""
import json, os, select, signal, sys, time, traceback
rank, case = int(os.environ["RANK"]), sys.argv[1]
here = os.path.dirname(os.path.abspath(__file__))

def path(name):
    return os.path.join(here, name)

def ready():
    with open(path(f"ready.{rank}.tmp"), "w") as f:
        f.write(f"{os.getpid()}\n")
    os.rename(path(f"ready.{rank}.tmp"), path(f"ready.{rank}"))

def wait_file(name):
    while not os.path.exists(path(name)):
        time.sleep(0.01)

def fail():
    # An ImportError, with the error file written as torch's @record writes it.
    try:
        import nonexistent_mod  # noqa: F401
    except ImportError as e:
        with open(os.environ["TORCHELASTIC_ERROR_FILE"], "w") as f:
            json.dump({"message": {"message": f"{type(e).__name__}: {e}", "extraInfo": {
                "py_callstack": traceback.format_exc(), "timestamp": str(int(time.time()))}}}, f)
        raise

print(f"rank {rank} runs", flush=True)
failing = [int(k) for k in sys.argv[2].split(",")] if len(sys.argv) > 2 else [1, 2]
if case == "before" and rank in failing or case == "after" and rank == 1:
    ready()
    wait_file(f"go.{rank}")
    fail()
elif case == "first" and rank in failing:
    # failing[0] records its failure (its error file) and is still ending when failing[1], whose collective
    # that failure broke, fails too and ends first: then failing[0] exits 1 ("exit"), or goes on ending
    # until flowrun's stop kills it ("linger"), as a rank does that is slow to tear down.
    first, second = failing
    ready()
    if rank == first:
        wait_file(f"go.{rank}")
        try:
            fail()
        except ImportError:
            traceback.print_exc()
        open(path("failed.first"), "w").close()
        other = os.pidfd_open(int(open(path(f"ready.{second}")).read()))
        select.select([other], [], [])
        while sys.argv[3] == "linger":
            signal.pause()
        sys.exit(1)
    wait_file("failed.first")
    fail()
elif case == "after" and rank == 0:
    # SIGTERM ignored: flowrun's cannot end it. It ends with its own code once rank 3, which flowrun
    # signals after it, has died of its SIGTERM: after flowrun's signal, by nothing of flowrun's.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    wait_file("ready.3")
    last = os.pidfd_open(int(open(path("ready.3")).read()))
    ready()
    select.select([last], [], [])
    print("rank 0 saw rank 3 end", flush=True)
    sys.exit(3)
elif case == "after" and rank == 2:
    # Its handler ends it with code 3: flowrun's SIGTERM did, whatever the code says.
    signal.signal(signal.SIGTERM, lambda *_: os._exit(3))
    ready()
    time.sleep(60)
else:
    ready()
    time.sleep(60)
"""

    def failed_after_run(self, label, case, ranks, forensics="", args=()):
        """A flow of `ranks` FAILED_AFTER_RANKs (the `case`, then `args`); returns (dir, run id, flowrun,
        {rank: pid})."""
        name = label.replace(" ", "_")
        d = self.workspace(name, f"""name: {name}
steps:
  - name: train
    run: {q([PY, "@DIR@/rank.py", case, *args])}
{forensics}    parallel:
      cpus: {ranks}
  - name: join
    join: train
    run: {sh_yaml('touch "$0/join.ran"', "@DIR@")}
""")
        self.fix_dir(d)
        with open(os.path.join(d, "rank.py"), "w") as f:
            f.write(self.FAILED_AFTER_RANK)
        run_id = f"{name}-{os.getpid()}"
        # The kernel's words for the stacks, so that they show a rank that had already ended (state Z).
        p = self.start(d, run_id, "--grace", "10", env={"FLOWRUN_PY_SPY": os.path.join(d, "no-py-spy")})
        pids = self.wait_ready(d, ranks, p)
        self.check(bool(pids), f"{label}: every rank starts", self.start_detail(d, p))
        return d, run_id, p, pids

    @staticmethod
    def zombie(pid):
        """Whether `pid` has ended and waits for its parent to reap it."""
        stat = read(f"/proc/{pid}/stat", "")
        return stat[stat.rfind(")") + 2:][:1] == "Z"

    def failed_before_signal(self, label, forensics):
        """Ranks 1 and 2 fail (an ImportError) while flowrun is held (SIGSTOP), rank 1 first: when flowrun
        goes on, rank 2 has already ended, before any signal of flowrun's could have reached it."""
        d, run_id, p, pids = self.failed_after_run(label, "before", 3, forensics)
        if not pids:
            p.kill()
            return None
        os.kill(p.pid, signal.SIGSTOP)
        for k in (1, 2):
            open(os.path.join(d, f"go.{k}"), "w").close()
            self.check(wait_for(lambda: self.zombie(pids[k]), 30 * self.slack), f"{label}: rank {k} fails")
        t0 = time.monotonic()
        os.kill(p.pid, signal.SIGCONT)
        rc, end, err = self.ended(label, p, d, 20)
        res = self.results(d) or {}
        roles = {w["rank"]: (w["role"], w["exit_code"], w["signal"]) for w in res.get("ranks", [])}
        self.check(rc == 1 and res.get("culprit_rank") == 1 and roles == {
            1: ("culprit", 1, None), 2: ("failed_after", 1, None), 0: ("victim", None, "SIGTERM")},
            f"{label}: rank 1 is the culprit, rank 2 failed after it with its own code 1, rank 0 is the victim",
            f"exit {rc}, roles {roles}\n{err}")
        error_file = os.path.join(d, "run", "train", "rank2", "error.json")
        want = [r"^flowrun:   stopped by flowrun: rank 0$", r"^flowrun:   failed after it: rank 2 \(exit code 1\)$",
                rf"^flowrun:   rank 2 exited with code 1 after [0-9.]+ s \(pid {pids[2]}\); traceback from its "
                rf"error file \({re.escape(error_file)}\):\n    Traceback \(most recent call last\):\n(    .*\n)*"
                r"    ModuleNotFoundError: No module named 'nonexistent_mod'$"]
        for pattern in want:
            self.check(re.search(pattern, err, re.M) is not None, f"{label}: the report says /{pattern[:60]}.../", err)
        self.check("stopped by flowrun: ranks" not in err and "state Z" not in err,
                   f"{label}: rank 2 is neither stopped by flowrun nor sampled for a stack", err)
        # What rank 2 wrote before it ended is on the console before the report.
        self.check(-1 < err.find("No module named 'nonexistent_mod'") < err.find("flowrun: step 'train' failed"),
                   f"{label}: rank 2's own lines come before the report", err)
        return end - t0, run_id, d, err

    def held_node_failures(self, label, name, args, goes):
        """A 2-node step of FAILED_AFTER_RANKs (`args`); once every rank is ready, node 1's agent is held
        (SIGSTOP), go.K is made for each K of `goes` in turn, each once the rank before has ended, and ranks 2 and
        3 have ended. Returns (Nodes, {rank: pid}),
        the agent still held (None when the ranks did not start)."""
        n = self.nodes(name, spec_text(name.replace("_", ""), q([PY, os.path.join(
            self.scratch, name, "rank.py"), *args])).replace("heartbeat_timeout: 1", "heartbeat_timeout: 60"))
        with open(os.path.join(n.dir, "rank.py"), "w") as f:
            f.write(self.FAILED_AFTER_RANK)
        if not n.begin(label):
            return None
        pids = self.wait_ready(n.dir, 4, n.head)
        if not self.check(bool(pids), f"{label}: every rank starts", n.detail()):
            return None
        os.kill(self.agent_of(pids[2]), signal.SIGSTOP)
        for k in (*goes, *(k for k in (2, 3) if k not in goes)):  # each go in turn, once the one before ended
            if k in goes:
                open(os.path.join(n.dir, f"go.{k}"), "w").close()
            self.check(wait_for(lambda: self.zombie(pids[k]), 30 * self.slack), f"{label}: rank {k} fails")
        return n, pids

    @staticmethod
    def agent_of(pid):
        """A rank's parent: its node's agent."""
        stat = read(f"/proc/{pid}/stat", "")
        return int(stat[stat.rfind(")") + 2:].split()[1])

    def failed_before_signal_on_node(self):
        """failed_before_signal on an agent: ranks 2 and 3 of node 1 fail, rank 2 first, while their agent is
        held; the agent tells the head that rank 3's end was its own. Returns the time from the agent's SIGCONT
        to the head's exit (None when the ranks did not start)."""
        label = "failed after node"
        got = self.held_node_failures(label, "failed_after_node", ("before", "2,3"), (2, 3))
        if got is None:
            return None
        n, pids = got
        t0 = time.monotonic()
        os.kill(self.agent_of(pids[2]), signal.SIGCONT)
        rc = n.finish(label)
        took = time.monotonic() - t0
        err = n.head_err()
        res = n.results()
        roles = {w["rank"]: (w["role"], w["exit_code"]) for w in res.get("ranks", [])}
        self.check(rc == 1 and roles[2] == ("culprit", 1) and roles[3] == ("failed_after", 1)
                   and roles[0][0] == roles[1][0] == "victim",
                   f"{label}: rank 2 is the culprit, rank 3 on the same node failed after it, ranks 0 and 1 are "
                   "victims", f"exit {rc}, roles {roles}\n{n.detail()}")
        self.check(re.search(r"^flowrun:   stopped by flowrun: ranks 0, 1\nflowrun:   failed after it: rank 3 "
                             r"\(exit code 1\)\nflowrun:   rank 3 on \S+ exited with code 1 after [0-9.]+ s \(pid "
                             rf"{pids[3]}\); traceback from its error file \(.*\):\n", err, re.M) is not None
                   and err.rstrip().endswith("failed 'train'"),
                   f"{label}: the head's report names rank 3 as failed after rank 2, with its error file", err)
        n.check_nothing_left(label)
        return took

    def failed_first_run(self, label, how, hold):
        """Rank 1 records its failure (an ImportError, in its error file), then rank 0 fails because of it and ends
        first; rank 1 exits 1 once rank 0 has ended (`how` "exit") or lingers until flowrun stops it ("linger").
        `hold`: flowrun is held (SIGSTOP) until both have ended, so that it hears of rank 0's end first.
        Returns (the time from the go to flowrun's exit, run id, dir, stderr), None when the ranks did not start."""
        d, run_id, p, pids = self.failed_after_run(label, "first", 3, args=("1,0", how))
        if not pids:
            p.kill()
            return None
        t0 = time.monotonic()
        if hold:
            os.kill(p.pid, signal.SIGSTOP)
        open(os.path.join(d, "go.1"), "w").close()
        if hold:
            for k in (0, 1):
                self.check(wait_for(lambda: self.zombie(pids[k]), 30 * self.slack), f"{label}: rank {k} fails")
            os.kill(p.pid, signal.SIGCONT)
        rc, end, err = self.ended(label, p, d, 20)
        res = self.results(d) or {}
        roles = {w["rank"]: (w["role"], w["exit_code"], w["signal"]) for w in res.get("ranks", [])}
        first = ("culprit", None, "SIGTERM") if how == "linger" else ("culprit", 1, None)
        self.check(rc == 1 and res.get("culprit_rank") == 1 and roles == {
            1: first, 0: ("failed_after", 1, None), 2: ("victim", None, "SIGTERM")},
            f"{label}: rank 1, whose error file came first, is the culprit; rank 0 failed after it; rank 2 is the "
            "victim", f"exit {rc}, roles {roles}\n{err}")
        attempt = (res.get("attempts") or [{}])[-1]
        self.check(attempt.get("cause") == "exception" and
                   (attempt.get("exception") or {}).get("type") == "ModuleNotFoundError",
                   f"{label}: the cause is rank 1's exception, from its error file", json.dumps(attempt))
        error_file = os.path.join(d, "run", "train", "rank1", "error.json")
        stopped = r", stopped while it ended: it had failed first, as its error file says" if how == "linger" else ""
        want = [rf"^flowrun: step 'train' failed: rank 1 (exited with code 1|was killed by signal 15 \(SIGTERM\)) "
                rf"after [0-9.]+ s \(pid {pids[1]}\){stopped}$",
                rf"^flowrun:   traceback from its error file \({re.escape(error_file)}\):$",
                r"^flowrun:   stopped by flowrun: rank 2$", r"^flowrun:   failed after it: rank 0 \(exit code 1\)$"]
        for pattern in want:
            self.check(re.search(pattern, err, re.M) is not None, f"{label}: the report says /{pattern[:70]}.../", err)
        return end - t0, run_id, d, err

    def failed_first_on_node(self):
        """failed_first_run's "exit" on an agent: rank 3 of node 1 records its failure, rank 2 fails after it and
        ends first, while their agent is held; the agent reports both error files' times, and the head names
        rank 3. Returns the time from the agent's SIGCONT to the head's exit (None when the ranks did not start)."""
        label = "failed first node"
        got = self.held_node_failures(label, "failed_first_node", ("first", "3,2", "exit"), (3,))
        if got is None:
            return None
        n, pids = got
        t0 = time.monotonic()
        os.kill(self.agent_of(pids[2]), signal.SIGCONT)
        rc = n.finish(label)
        took = time.monotonic() - t0
        err = n.head_err()
        res = n.results()
        roles = {w["rank"]: (w["role"], w["exit_code"]) for w in res.get("ranks", [])}
        self.check(rc == 1 and roles.get(3) == ("culprit", 1) and roles.get(2) == ("failed_after", 1)
                   and all(roles.get(k, ("",))[0] == "victim" for k in (0, 1)),
                   f"{label}: rank 3, whose error file came first, is the culprit; rank 2 failed after it",
                   f"exit {rc}, roles {roles}\n{n.detail()}")
        self.check(re.search(r"^flowrun: step 'train' failed: rank 3 on \S+ exited with code 1 after [0-9.]+ s \(pid "
                             rf"{pids[3]}\)$", err, re.M) is not None and
                   re.search(r"^flowrun:   failed after it: rank 2 \(exit code 1\)$", err, re.M) is not None,
                   f"{label}: the head's report names rank 3, and rank 2 as failed after it", err)
        n.check_nothing_left(label)
        return took

    def test_failed_first(self):
        """The culprit is the rank that failed first, as its error file says, not the one whose end came first: a
        rank that raised may take longer to end than a peer that its failure broke (the peer's collective fails
        as soon as the raiser's sockets close, while the raiser still tears down)."""
        r = self.row("failed_first", "a rank that wrote its error file first is the culprit though a peer its "
                     "failure broke ended first: heard of in either order, stopped while it ended, and on an agent; "
                     "the peer is `failed_after`")
        left = false = 0
        recover = 0.0
        for label, how, hold in (("failed first held", "exit", True), ("failed first linger", "linger", False)):
            got = self.failed_first_run(label, how, hold)
            if got is None:
                return
            took, run_id, d, err = got
            recover = max(recover, took)
            left += self.count_left(run_id)
            false += self.false_claims(d, failed_ranks=(0, 1))
        took = self.failed_first_on_node()
        if took is None:
            return
        recover = max(recover, took)
        self.finish_row(r, "failed first", recover, 2.0, left, 0, false, err)

    def test_failed_after(self):
        """Ranks that fail on their own after the culprit are failures, never victims: one that ended before
        flowrun's signal (flowrun, or the node's agent, held so that both are dead when it looks), one whose end
        flowrun's SIGTERM could not cause (it ignores SIGTERM, exits 3 once a rank signalled after it died)."""
        r = self.row("failed_after", "a rank that ended before flowrun's signal (on one node, and on an agent), or "
                     "ignores SIGTERM and exits 3 after it, is `failed_after` with its code and its error file's "
                     "traceback, never a victim; one whose SIGTERM handler exits 3 is a victim; a rank that ended is "
                     "not sampled for a stack")
        lost = false = left = 0
        recover = 0.0
        for label, forensics in (("failed after stacks", ""), ("failed after off", "    forensics: off\n")):
            got = self.failed_before_signal(label, forensics)
            if got is None:
                return
            took, run_id, d, err = got
            recover = max(recover, took)
            left += self.count_left(run_id)
            false += self.false_claims(d, failed_ranks=(1, 2))
            if label == "failed after stacks":
                groups = ((self.results(d) or {}).get("stacks") or {}).get("groups", [])
                self.check(sorted(k for g in groups for k in g["ranks"]) == [0] and
                           re.search(r"^flowrun:   rank 0 is in ", err, re.M) is not None,
                           "failed after: only the live rank 0's stack is taken", f"{groups}\n{err}")
        got = self.failed_before_signal_on_node()
        if got is None:
            return
        recover = max(recover, got)
        label = "failed after ignored"
        d, run_id, p, pids = self.failed_after_run(label, "after", 4)
        if not pids:
            p.kill()
            return
        t0 = time.monotonic()
        open(os.path.join(d, "go.1"), "w").close()
        rc, end, err = self.ended(label, p, d, 20)
        res = self.results(d) or {}
        roles = {w["rank"]: (w["role"], w["exit_code"], w["signal"]) for w in res.get("ranks", [])}
        self.check(rc == 1 and roles == {1: ("culprit", 1, None), 0: ("failed_after", 3, None),
                                         2: ("victim", 3, None), 3: ("victim", None, "SIGTERM")},
                   f"{label}: rank 0 (SIGTERM ignored, exit 3) failed after rank 1; rank 2 (its handler exits 3) and "
                   "rank 3 are victims", f"exit {rc}, roles {roles}\n{err}")
        self.check(re.search(r"^flowrun:   stopped by flowrun: ranks 2, 3\nflowrun:   failed after it: rank 0 "
                             r"\(exit code 3\)$", err, re.M) is not None and
                   "rank 0 saw rank 3 end" in read(os.path.join(d, "flowrun.out"), ""),
                   f"{label}: the report names rank 0 as failed after rank 1, and ranks 2, 3 as stopped", err)
        recover = max(recover, end - t0)
        left += self.count_left(run_id)
        false += self.false_claims(d, failed_ranks=(0, 1))
        self.finish_row(r, "failed after", recover, 2.0, left, lost, false, err)

    # A rank that writes its open descriptors (fds.R: {fd: what it is}) and ends.
    FDS_RANK = r"""
import json, os
fds = {}
for fd in os.listdir("/proc/self/fd"):
    try:
        fds[int(fd)] = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        pass  # the listing's own, closed by now
rank = os.environ["RANK"]
with open(f"fds.{rank}.tmp", "w") as f:
    json.dump(fds, f)
os.rename(f"fds.{rank}.tmp", f"fds.{rank}")
"""

    def rank_fds(self, label, d, ranks):
        """The ranks' fds.R files: {rank: {fd: target}}; checks each holds only 0-2."""
        found = {}
        for k in range(ranks):
            try:
                with open(os.path.join(d, f"fds.{k}")) as f:
                    found[k] = {int(fd): target for fd, target in json.load(f).items()}
            except (OSError, ValueError):
                found[k] = None
        self.check(all(f is not None and sorted(f) == [0, 1, 2] for f in found.values()),
                   f"{label}: every rank has fds 0-2 open and nothing else of flowrun's", json.dumps(found))
        return found

    def test_rank_fds(self):
        """Ranks inherit fds 0-2 only: flowrun's console (pipes, as in `$(flowrun ...)` or `| tee`, which flowrun
        copies for its writer) and a descriptor its caller gave it reach no rank, on one node or on an agent whose
        console is a pipe too."""
        r = self.row("rank_fds", "each rank's only open descriptors are 0-2, on one node and on each agent, "
                     "with flowrun's and the agents' consoles pipes and a descriptor of flowrun's caller above 2; the "
                     "caller's pipes reach EOF when flowrun ends")
        run_id = f"rankfds-{os.getpid()}"
        d = self.workspace("rank_fds", f"""name: rankfds
steps:
  - name: train
    run: {q([PY, "@DIR@/fds.py"])}
    parallel:
      cpus: 2
""")
        self.fix_dir(d)
        with open(os.path.join(d, "fds.py"), "w") as f:
            f.write(self.FDS_RANK)
        t0 = time.monotonic()
        # flowrun also gets a descriptor of its caller's above 2 (`flowrun ... 3>caller.txt`): not for the ranks.
        caller = os.open(os.path.join(d, "caller.txt"), os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            p = subprocess.Popen([self.flowrun, os.path.join(d, "spec.yaml"), "--run-dir", os.path.join(d, "run"),
                                  "--run-id", run_id], cwd=d, env=clean_env(**{MARK: run_id}),
                                 stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 start_new_session=True, pass_fds=(caller,))
        finally:
            os.close(caller)
        try:
            out, err = p.communicate(timeout=30 * self.slack)  # both pipes to their end, as $(...) reads
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        took = time.monotonic() - t0
        self.sanitizer_check("rank fds", err)
        self.check(p.returncode == 0, "rank fds: the step succeeds", f"exit {p.returncode}\n{out}\n{err}")
        self.rank_fds("rank fds", d, 2)
        left = self.count_left(run_id)

        n = self.nodes("rank_fds_nodes", spec_text("rankfdsnodes", q([PY, os.path.join(self.scratch, "rank_fds_nodes",
                                                                                       "fds.py")])))
        with open(os.path.join(n.dir, "fds.py"), "w") as f:
            f.write(self.FDS_RANK)
        argv = n.command()
        if not self.check(argv is not None, "rank fds nodes: the head prints the agent command", n.detail()):
            return
        agents = [subprocess.Popen(argv, cwd=n.dir, env=n.agent_env(), stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
                  for _ in range(2)]
        n.agents.extend(agents)  # stopped by the suite if the test fails half way
        said = []
        for a in agents:
            try:
                said.append(a.communicate(timeout=60 * self.slack)[0].decode(errors="replace"))
            except subprocess.TimeoutExpired:
                a.kill()
                said.append(a.communicate()[0].decode(errors="replace"))
        rc = n.finish("rank fds nodes")
        self.check(rc == 0 and [a.returncode for a in agents] == [0, 0],
                   "rank fds nodes: the step succeeds, each agent exits 0", f"head {rc}\n{n.detail()}\n" +
                   "\n".join(said))
        self.rank_fds("rank fds nodes", n.dir, 4)
        n.check_nothing_left("rank fds nodes")
        r.extra = f"the one-node run took {took:.2f} s"
        self.finish_row(r, "rank fds", "n/a (nothing fails)", 0, left, 0, 0, err)
    # --- a run's outputs are its own; worker-named text; sparse outputs ---------------

    # Rank 0 writes model.pt in the workdir in place (torch.save opens it with O_TRUNC, keeping
    # the inode), tagged with the run's mark, and links it into its FLOWRUN_OUTPUT_DIR as well;
    # with WAIT_GO set it then waits for the file `go`.
    OWN_RANK = ('import os, time\n'
                'if os.environ["RANK"] == "0":\n'
                '    tag = os.environ["FAULT_E2E_MARK"]\n'
                '    with open("model.pt", "r+b" if os.path.exists("model.pt") else "wb") as f:\n'
                '        f.truncate(0); f.write(("weights of " + tag).encode())\n'
                '    with open("ckpt.pt", "r+b" if os.path.exists("ckpt.pt") else "wb") as f:\n'
                '        f.write(("ckpt of " + tag).encode())\n'
                '    os.link("model.pt", os.path.join(os.environ["FLOWRUN_OUTPUT_DIR"], "linked.pt"))\n'
                '    open("ready.0.tmp", "w").write(str(os.getpid())); os.rename("ready.0.tmp", "ready.0")\n'
                '    while os.environ.get("WAIT_GO") and not os.path.exists("go"):\n'
                '        time.sleep(0.02)\n')

    def own_flow(self, name, flow_name=None):
        return self.workspace(name, f"name: {flow_name or name}\nsteps:\n  - name: train\n"
                                    f"    run: {q([PY, '-c', self.OWN_RANK])}\n    parallel:\n      cpus: 2\n"
                                    f"    outputs: [model.pt, ckpt.pt]\n")

    def start_in(self, d, run_id, tag, env=None):
        """flowrun on d/spec.yaml with its own run directory d/run-TAG, output in d/TAG.out and d/TAG.err."""
        with open(os.path.join(d, f"{tag}.out"), "w") as out, open(os.path.join(d, f"{tag}.err"), "w") as err:
            return subprocess.Popen([self.flowrun, os.path.join(d, "spec.yaml"), "--run-dir",
                                     os.path.join(d, f"run-{tag}"), "--run-id", run_id], cwd=d,
                                    env=clean_env(**{MARK: run_id, **(env or {})}), stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=err, start_new_session=True)

    def kept(self, d, tag, rel):
        return read(os.path.join(d, f"run-{tag}", "train", "outputs", rel), "")

    def test_outputs_own_run(self):
        """Two runs of one flow, one after the other, in one workdir: the second rewrites model.pt in
        place (truncated, and ckpt.pt overwritten without truncation); rank 0 also hard-links
        model.pt into its FLOWRUN_OUTPUT_DIR. The first run's kept outputs stay its own bytes."""
        r = self.row("outputs_own_run", "a glob's match is reflinked (FICLONE) or copied into outputs/, never "
                     "hard-linked, and a rank's file with another name is copied too: the second run's rewrites "
                     "in place leave every file the first run kept as it was")
        d = self.own_flow("outputs_own_run")
        ids = [f"own-{os.getpid()}-{k}" for k in (1, 2)]
        t0 = time.monotonic()
        rcs = []
        for k, run_id in enumerate(ids, 1):
            p = self.start_in(d, run_id, str(k))
            rcs.append(self.wait(p, 30))
            self.sanitizer_check(f"outputs own run {k}", read(os.path.join(d, f"{k}.err")))
            os.remove(os.path.join(d, "ready.0"))
        took = time.monotonic() - t0
        self.check(rcs == [0, 0], "outputs own run: both runs succeed", f"{rcs}\n" + read(os.path.join(d, "1.err")) +
                   read(os.path.join(d, "2.err")))
        want = {rel: f"{what} of {ids[0]}" for rel, what in
                (("model.pt", "weights"), ("ckpt.pt", "ckpt"), ("linked.pt", "weights"))}
        got = {rel: self.kept(d, "1", rel) for rel in want}
        self.check(got == want, "outputs own run: the first run's outputs are still its own bytes", f"{got}")
        second = {rel: self.kept(d, "2", rel) for rel in want}
        self.check(second == {rel: text.replace(ids[0], ids[1]) for rel, text in want.items()},
                   "outputs own run: the second run's outputs are its bytes", f"{second}")
        shared = [rel for rel in want for k in ("1", "2")
                  if os.stat(os.path.join(d, f"run-{k}", "train", "outputs", rel)).st_ino ==
                  os.stat(os.path.join(d, "model.pt" if rel == "linked.pt" else rel)).st_ino]
        self.check(not shared, "outputs own run: no kept output is the workdir's file", str(shared))
        self.finish_row(r, "outputs own run", "n/a (nothing fails)", 0, self.count_left(ids[0]) +
                        self.count_left(ids[1]), 0, sum(got[rel] != want[rel] for rel in want), "")
        r.extra = f"two runs in {took:.1f} s"

    def test_second_live_run(self):
        """Run A of a flow waits in its step; run B of the same flow, and C, a copy of it under another
        name, start in the same workdir meanwhile. Both are refused; A then gathers its own model.pt;
        once A has ended, B's flow runs there again."""
        r = self.row("second_live_run", "the first run holds WORKDIR/.flowrun/outputs.lock (flock) while it "
                     "runs; a second run of the flow, or of a copy under another name, gathering outputs from the "
                     "same workdir is refused at once (exit 2) naming the first run and the fix; the first keeps "
                     "its own outputs; the lock goes with the run")
        d = self.own_flow("second_live_run")
        copy = os.path.join(d, "copy")
        os.makedirs(copy)
        with open(os.path.join(d, "spec.yaml")) as f:
            spec = f.read()
        with open(os.path.join(copy, "spec.yaml"), "w") as f:
            f.write(spec.replace("name: second_live_run", f"name: other\nworkdir: {d}"))
        ids = {tag: f"live-{os.getpid()}-{tag}" for tag in ("a", "b", "c", "d")}
        a = self.start_in(d, ids["a"], "a", env={"WAIT_GO": "1"})
        if not self.check(self.wait_ready(d, 1, a) is not None, "second live run: run A's rank is ready",
                          read(os.path.join(d, "a.err"))):
            a.kill()
            return
        t0 = time.monotonic()
        b = self.start_in(d, ids["b"], "b")
        c = self.start_in(copy, ids["c"], "c")
        rc_b, rc_c = self.wait(b, 30), self.wait(c, 30)
        refused_in = time.monotonic() - t0
        err_b, err_c = read(os.path.join(d, "b.err")), read(os.path.join(copy, "c.err"))
        holder = re.escape(f"run {ids['a']} of flow second_live_run (flowrun pid {a.pid} on ")
        want = (r"^flowrun: error: the workdir " + re.escape(d) + r" is in use by " + holder +
                r"\S+\), which gathers its outputs from there too; each run would take the other's files for its "
                r"own\. Wait until it ends, or give this run a workdir of its own \(the spec's workdir:\), or have "
                r"the ranks write into \$FLOWRUN_OUTPUT_DIR, which is each run's own$")
        for tag, rc, err in (("b", rc_b, err_b), ("c", rc_c, err_c)):
            self.check(rc == 2 and re.search(want, err, re.M) is not None,
                       f"second live run: run {tag.upper()} is refused (exit 2), naming run A and the fix",
                       f"exit {rc}\n{err}")
            self.check(not os.path.exists(os.path.join(d if tag == "b" else copy, f"run-{tag}")),
                       f"second live run: run {tag.upper()} makes no run directory")
        open(os.path.join(d, "go"), "w").close()
        rc_a = self.wait(a, 30)
        self.sanitizer_check("second live run", read(os.path.join(d, "a.err")))
        self.check(rc_a == 0, "second live run: run A succeeds", f"exit {rc_a}\n" + read(os.path.join(d, "a.err")))
        kept = self.kept(d, "a", "model.pt")
        self.check(kept == f"weights of {ids['a']}", "second live run: run A's model.pt is its own", kept)
        os.remove(os.path.join(d, "ready.0"))
        rc_d = self.wait(self.start_in(d, ids["d"], "d"), 30)
        self.check(rc_d == 0, "second live run: once A ended, the flow runs there again",
                   f"exit {rc_d}\n" + read(os.path.join(d, "d.err")))
        self.finish_row(r, "second live run", refused_in, 10.0, sum(self.count_left(i) for i in ids.values()), 0,
                        int(kept != f"weights of {ids['a']}") + int(rc_b == 0) + int(rc_c == 0),
                        err_b + err_c)

    def test_worker_names_escaped(self):
        """Rank 3 names a FIFO and a link out of FLOWRUN_OUTPUT_DIR with a newline, a forged flowrun line,
        a terminal title and a screen clear (the link's text too), on one node and across nodes; on one
        node a glob also matches a link out of the workdir named so."""
        r = self.row("worker_names_escaped", "every name and link text a rank made is printed through the one "
                     "escaping function (printable: `\\n`, `\\x1b`): the refusal is one line, in the same words "
                     "on one node and across nodes; no forged line, no escape byte reaches the console")
        forged = "flowrun: step 'train' succeeded"
        name = "x\n" + forged + "\x1b]0;owned\x07\x1b[2J"
        shown = r"x\\n" + re.escape(forged) + r"\\x1b\]0;owned\\x07\\x1b\[2J"
        evil = (f'    os.mkfifo(os.path.join(out, {name!r})); '
                f'os.symlink("/etc/\\x1b[31m\\npasswd", os.path.join(out, "link\\r" + {forged!r}))\n')
        runs = self.confined_runs("worker_names_escaped", evil)
        self.same_refusal("worker names escaped", runs, r"rank 3: FLOWRUN_OUTPUT_DIR/" + shown +
                          r" is a FIFO, not a regular file; refused")
        self.same_refusal("worker names escaped", runs, r"rank 3: FLOWRUN_OUTPUT_DIR/link\\r" + re.escape(forged) +
                          r" is a symlink to /etc/\\x1b\[31m\\npasswd, outside the output directory; refused")
        # One node, a glob: the same escaping for a match refused in the workdir.
        link = "import os; os.symlink('/etc/passwd', " + repr(name + ".pt") + ")"
        d = self.workspace("worker_names_escaped_glob", f"name: names\nsteps:\n  - name: train\n"
                                                        f"    run: {q([PY, '-c', link])}\n"
                                                        f"    parallel:\n      cpus: 1\n    outputs: '*.pt'\n")
        p = self.start(d, f"names-{os.getpid()}")
        rc, _, err = self.ended("worker names escaped (glob)", p, d, 30)
        runs.append(("one node, a glob", rc, err, os.path.join(d, "run"), 0))
        self.check(rc == 1 and re.search(r"^flowrun:   step 'train': output '\*\.pt': " + re.escape(d) + "/" + shown +
                                         r"\.pt is a symlink to /etc/passwd, outside the workdir; refused$", err,
                                         re.M) is not None, "worker names escaped: the glob's refusal is escaped",
                   f"exit {rc}\n{err}")
        raw = [(where, line) for where, _, text, _, _ in runs for line in text.splitlines()
               if line == forged or "\x1b" in line or "\x07" in line or "\r" in line]
        self.check(not raw, "worker names escaped: no forged line, no escape byte on the console", repr(raw))
        self.count_left(f"names-{os.getpid()}")
        self.finish_row(r, "worker names escaped", "n/a (refused when gathered)", 0, 0, self.confined_lost(runs[:2]),
                        len(raw) + self.confined_false(runs[:2]), "\n".join(run[2] for run in runs))

    # Each rank leaves out/sparse.bin: SPARSE_MIB MiB long, its own words at 0 and at 200 MiB, ranks 2
    # and 3 a word at the very end, ranks 0 and 1 a hole there.
    SPARSE_RANK = ('import os; out = os.environ["FLOWRUN_OUTPUT_DIR"]; rank = int(os.environ["RANK"]); '
                   'size = int(os.environ["SPARSE_MIB"]) << 20\n'
                   'fd = os.open(os.path.join(out, "sparse.bin"), os.O_WRONLY | os.O_CREAT, 0o644)\n'
                   'os.pwrite(fd, b"head of %d" % rank, 0); os.pwrite(fd, b"middle of %d" % rank, 200 << 20)\n'
                   'os.ftruncate(fd, size)\n'
                   'if rank >= 2: os.pwrite(fd, b"end%d" % rank, size - 4)\n'
                   'os.close(fd)\n'
                   'open(os.path.join(out, "result.txt"), "w").write("rank %d result\\n" % rank)\n')

    @staticmethod
    def sparse_ok(path, rank, size):
        """Whether `path` is rank's sparse.bin (its size and words) and the bytes it takes on disk."""
        try:
            st = os.stat(path)
            with open(path, "rb") as f:
                words = f.read(9), f.seek(200 << 20), f.read(11), f.seek(size - 4), f.read(4)
        except OSError:
            return False, 0
        tail = b"end%d" % rank if rank >= 2 else b"\0" * 4
        return (st.st_size == size and words[0] == b"head of %d" % rank and words[2] == b"middle of %d" % rank
                and words[4] == tail), st.st_blocks * 512

    def test_sparse_outputs(self):
        """4 ranks on 2 nodes (agents on this host) each leave a 512 MiB sparse file in FLOWRUN_OUTPUT_DIR,
        ranks 0 and 1 ending in a hole; on one node the same flow, and a glob matching a 64 GiB sparse
        file in the workdir."""
        r = self.row("sparse_outputs", "the agents send each file's holes as their lengths (SEEK_DATA, SEEK_HOLE; "
                     "upload_hole, protocol 8), the head leaves holes where they were and gathering copies data "
                     "only: each rank's file is whole, bit for bit where written, and the run directories hold its "
                     "data, not its length")
        mib = 512
        size = mib << 20
        env = f"env:\n  SPARSE_MIB: '{mib}'\n"
        n = self.nodes("sparse_outputs_nodes", spec_text("sparse", q([PY, "-c", self.SPARSE_RANK]), collect="all",
                                                         env=env))
        t0 = time.monotonic()
        if not n.begin("sparse outputs (2 nodes)"):
            return
        rc = n.finish("sparse outputs (2 nodes)", 120)
        took = time.monotonic() - t0
        n.check_nothing_left("sparse outputs (2 nodes)")
        self.check(rc == 0, "sparse outputs: the step succeeds across nodes", f"exit {rc}\n{n.detail()}")
        big_file = "if rank == 0: os.truncate(os.open('big.bin', os.O_WRONLY | os.O_CREAT), 64 << 30)\n"
        d = self.workspace("sparse_outputs", f"name: sparse\n{env}steps:\n  - name: train\n"
                                             f"    run: {q([PY, '-c', self.SPARSE_RANK + big_file])}\n"
                                             f"    parallel:\n      cpus: 4\n    collect: all\n"
                                             f"    outputs: 'big*.bin'\n")
        p = self.start(d, f"sparse-{os.getpid()}")
        rc_one, _, err = self.ended("sparse outputs (one node)", p, d, 60)
        self.check(rc_one == 0, "sparse outputs: the step succeeds on one node", f"exit {rc_one}\n{err}")
        bad, used = [], 0
        for where, run_dir in (("2 nodes", n.run_dir), ("one node", os.path.join(d, "run"))):
            for rank in range(4):
                for rel in (f"rank{rank}/out/sparse.bin", f"outputs/rank{rank}/sparse.bin"):
                    ok, disk = self.sparse_ok(os.path.join(run_dir, "train", rel), rank, size)
                    used += disk
                    if not ok:
                        bad.append(f"{where}: {rel}")
        big = os.path.join(d, "run", "train", "outputs", "big.bin")
        big_st = os.stat(big) if os.path.exists(big) else None
        self.check(not bad, "sparse outputs: every rank's file is whole where it was written", str(bad))
        self.check(big_st is not None and big_st.st_size == 64 << 30 and big_st.st_blocks * 512 <= 1 << 20,
                   "sparse outputs: the 64 GiB glob match is kept sparse", str(big_st))
        self.check(used <= 16 << 20, "sparse outputs: the run directories hold the data, not the holes",
                   f"{used} bytes on disk for 16 files of {mib} MiB")
        lost = sum(read(os.path.join(run_dir, "train", f"rank{rank}", "out", "result.txt"), "") !=
                   f"rank {rank} result\n" for run_dir in (n.run_dir, os.path.join(d, "run")) for rank in range(4))
        self.finish_row(r, "sparse outputs", took, 30.0, self.count_left(f"sparse-{os.getpid()}"), lost, len(bad),
                        n.detail() + err)
        r.extra = f"{used >> 10} KiB on disk for 16 files of {mib} MiB"

    # --- the table -------------------------------------------------------------------

    @classmethod
    def table(cls):
        head = ["fault", "what flowrun did", "time to recover", "processes left", "results lost / falsely claimed",
                "reproduce"]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in cls.rows:
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in r.cells()) + " |")
        return "\n".join(lines) + "\n"


@pytest.fixture(autouse=True, scope="module")
def fault_table(request):
    """After the faults, the table they measured: printed at the end, and written to
    --fault-table FILE (for docs/reliability.md)."""
    yield
    if not TestFaults.rows:
        return
    tables.TABLES["faults table"] = TestFaults.table()
    path = request.config.getoption("fault_table")
    if path:
        with open(path, "w") as f:
            f.write(TestFaults.table())


def test_reliability_doc_lists_every_fault(repo_root, check):
    """docs/reliability.md's faults table has one row per fault test here, in their order."""
    doc = os.path.join(repo_root, "docs", "reliability.md")
    text = read(doc, "")
    table = text.split("<!-- faults table")[1].split("<!-- end of faults table")[0] if \
        "<!-- faults table" in text else ""
    rows = [row for row in re.findall(r"^\| (\w+) \|", table, re.M) if row != "fault"]
    names = TestFaults.names_of_tests()
    check(rows == names, f"{doc}: its faults table has one row per fault, in order",
          f"table: {rows}\nfaults: {names}")
