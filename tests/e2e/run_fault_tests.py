#!/usr/bin/env python3
"""Fault injection: each fault a launcher must survive, injected into a real
run of the flowrun binary, with what it cost measured.

  run_fault_tests.py FLOWRUN ROOT [--sanitized] [--only NAME[,NAME...]] [--list] [--table FILE]
                     [--doc docs/reliability.md]

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

--table FILE writes the measured table (Markdown) that docs/reliability.md
holds; --doc checks that the document has a row for every fault here. The faults on a real network (a node's link cut, a node's agent or the
head killed across hosts) are in tests/e2e/multinode/run_multinode_tests.py,
which needs root and builds a cluster; here a "node" is an agent on this host.

--sanitized: the binary is built with a sanitizer: timing bounds are tripled.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))
from testlib import AGENT_CLOSED, Tally, clean_env, peak_rss_kib, run_suite  # noqa: E402
from run_launcher_tests import SANITIZER_REPORT, processes_with, wait_for  # noqa: E402
from run_launcher_tests import Suite as LauncherSuite  # noqa: E402
from run_nodes_local_tests import FAKE_AGENT, Nodes, sh_yaml, spec_text  # noqa: E402

sys.path.insert(0, os.path.join(HERE, "helpers"))
import wire  # noqa: E402

PY = sys.executable
WORKER = os.path.join(HERE, "helpers", "worker.py")
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


class Suite:
    def __init__(self, flowrun, root, sanitized):
        self.flowrun, self.root, self.sanitized = flowrun, root, sanitized
        self.slack = 3.0 if sanitized else 1.0
        self.t = Tally("faults")
        self.scratch = tempfile.mkdtemp(prefix="flowrun-faults-")
        self.rows = []
        self.open = []  # Nodes still to close

    # --- plumbing ---------------------------------------------------------------

    def check(self, ok, label, detail=""):
        return self.t.check(ok, label, detail)

    def sanitizer_check(self, label, text):
        m = SANITIZER_REPORT.search(text)
        self.check(m is None, f"{label}: no sanitizer report", text[max(0, m.start() - 200):][:4000] if m else "")

    def row(self, name, did):
        r = Row(name, did, f"tests/e2e/run_fault_tests.py build/dev/flowrun . --only {name}")
        self.rows.append(r)
        return r

    def workspace(self, name, spec):
        d = os.path.join(self.scratch, name)
        os.makedirs(d)
        with open(os.path.join(d, "spec.yaml"), "w") as f:
            f.write(spec)
        return d

    def start(self, d, run_id, *options, env=None, stdout=None):
        """flowrun on d/spec.yaml in its own session (a shell's foreground job has its own
        process group); stdout and stderr go to files in d unless `stdout` says otherwise."""
        out = stdout if stdout is not None else open(os.path.join(d, "flowrun.out"), "w")
        err = open(os.path.join(d, "flowrun.err"), "w")
        try:
            return subprocess.Popen([self.flowrun, os.path.join(d, "spec.yaml"), "--run-dir", os.path.join(d, "run"),
                                     "--run-id", run_id, *options], cwd=d,
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

    def hang_fault(self, name, key, limit, did, want):
        r = self.row(name, did)
        run_id = f"{name}-{os.getpid()}"
        d = self.hang_flow(name, key, limit)
        self.fix_dir(d)
        t0 = time.monotonic()
        p = self.start(d, run_id, "--grace", "30")
        # The moment rank 1 stops: its line reaches its log just before.
        log = os.path.join(d, "run", "train", "rank1", "stdout.log")
        wait_for(lambda: "stops itself" in read(log, "") or p.poll() is not None, 30 * self.slack)
        stopped = time.monotonic()
        rc, ended, err = self.ended(name, p, d, limit + 30)
        self.check(rc == 124, f"{name}: exit 124", f"exit {rc}\n{err}")
        self.check(re.search(want, err, re.M) is not None, f"{name}: the report names the stopped rank 1",
                   f"want /{want}/\n{err}")
        # The timeout counts from the step's start, the stall from rank 1's last line.
        since = stopped if key == "stall_timeout" else t0
        self.check(ended - since < limit + 2 * self.slack, f"{name}: it ends right after {key} ({limit} s), not "
                   "after the 30 s grace: the stopped rank got its SIGTERM", f"{ended - since:.2f} s")
        r.extra = f"{key}: {limit} s"
        self.finish_row(r, name, ended - stopped, limit + 2.0, self.count_left(run_id), 0,
                        self.false_claims(d, failed_ranks=(0, 1, 2, 3)), err)

    def test_worker_sigstop_timeout(self):
        """Rank 1 stops itself (SIGSTOP): a hang. The step's timeout ends it, naming rank 1."""
        self.hang_fault("worker_sigstop_timeout", "timeout", 3,
                        "the step's `timeout` ends it: SIGTERM then SIGCONT to every rank; the report names "
                        "rank 1 as stopped and silent; exit 124; no join",
                        r"^flowrun:   rank 1 \(stopped\) wrote nothing for the last [0-9.]+ s$")

    def test_worker_sigstop_stall(self):
        """Rank 1 stops itself (SIGSTOP); the others keep printing: stall_timeout ends the step."""
        self.hang_fault("worker_sigstop_stall", "stall_timeout", 2,
                        "`stall_timeout` sees rank 1 silent, stops the step and names it as stalled; exit 124; "
                        "no join",
                        r"^flowrun: step 'train' stalled: rank 1 \(stopped\) wrote nothing for [0-9.]+ s "
                        r"\(stall_timeout: 2s\); stopping the step$")

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
        bound = 64 * 1024 * (3 if self.sanitized else 1)
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
        launcher = LauncherSuite(self.flowrun, self.root, self.sanitized)
        shutil.rmtree(launcher.scratch, ignore_errors=True)
        launcher.scratch, launcher.t = self.scratch, self.t
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
        whose path has quotes and $(...), a rank's output directory holding links out of it."""
        r = self.row("hostile_input", "`${args}` and paths reach the program as plain words (a list `run` "
                     "starts no shell; under `shell: true` every value is quoted); links out of "
                     "FLOWRUN_OUTPUT_DIR are not walked")
        run_id = f"hostile-{os.getpid()}"
        d = os.path.join(self.scratch, "hostile $(touch INJ0) `touch INJ1` it's")
        os.makedirs(d)
        show = ('import json, os, sys; print(json.dumps(sys.argv[1:])); '
                'print("parent:", open("/proc/%d/comm" % os.getppid()).read().strip())')
        rank = ('import os; out = os.environ["FLOWRUN_OUTPUT_DIR"]; '
                'open(os.path.join(out, "result.txt"), "w").write("rank %s result\\n" % os.environ["RANK"]); '
                'print("rank %s wrote its result" % os.environ["RANK"]); '
                'os.symlink("/etc", os.path.join(out, "etc")); '
                'os.symlink("/etc/hostname", os.path.join(out, "hostname"))')
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
        self.check(found == want_files, "hostile input: the link to /etc is not walked (a link to one file is "
                   "collected as that file, as docs/spec.md says)", f"{found}")
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
        with open(n.spec) as f:
            text = f.read().replace("@DIR@", n.dir)
        with open(n.spec, "w") as f:
            f.write(text)
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

    def upload_fault(self, name, mode, did, want):
        """A node (a fake agent holding the run's token) sends its rank's result.txt with `mode` corruption."""
        r = self.row(name, did)
        join = '  - name: join\n    join: train\n    run: ' + sh_yaml('touch "$0/join.ran"', "@DIR@") + "\n"
        spec = spec_text(name, sh_yaml('echo "rank $RANK result" > "$FLOWRUN_OUTPUT_DIR/result.txt"'),
                         collect="all", more_steps=join)
        n = self.nodes(name, spec)
        with open(n.spec) as f:
            text = f.read().replace("@DIR@", n.dir)
        with open(n.spec, "w") as f:
            f.write(text)
        argv = n.command()
        if not self.check(argv is not None, f"{name}: the head prints the agent command", n.detail()):
            return
        n.start_agents(argv, count=1)
        endpoint = argv[argv.index("--rdzv-endpoint") + 1]
        token_file = argv[argv.index("--token-file") + 1]
        version = subprocess.run([self.flowrun, "--version"], capture_output=True, text=True).stdout.split()[-1]
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

    def test_corrupt_upload(self):
        self.upload_fault("corrupt_upload", "crc", "the head checks the CRC-32C, refuses the file and fails the "
                          "step naming the node; nothing is collected; no join",
                          r"upload of rank 2's 'out/result\.txt' is corrupt")

    def test_truncated_upload(self):
        self.upload_fault("truncated_upload", "truncate", "the node's connection drops mid-file: the head "
                          "removes the partial file, reports the node lost; no join",
                          r"node evil \(node rank \d of 2\) lost")

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
        version = subprocess.run([self.flowrun, "--version"], capture_output=True, text=True).stdout.split()[-1]

        def frame(kind, pairs):
            payload = b"".join(struct.pack(">I", len(k)) + k + struct.pack(">I", len(v)) + v for k, v in pairs)
            return struct.pack(">IBB", len(payload) + 2, 3, kind) + payload

        t0 = time.monotonic()
        s = socket.create_connection((host, port))
        s.sendall(frame(1, [(b"node", name.encode("latin-1")), (b"flowrun", version.encode()),
                            (b"nonce", b"0123456789abcdef0123456789abcdef"), (b"node_rank", b"-1")]))
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

    def tamper_fault(self, name, mode, did, agent_want, head_want):
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

    def test_tampered_frame(self):
        failed = (r"that fails authentication: it was altered, replayed, reordered or not sealed with "
                  r"this run's token")
        self.tamper_fault("tampered_frame", "flip", "a proxy between agent and head flips a byte of each sealed "
                          "start frame: each agent closes the connection saying the frame fails "
                          "authentication; no rank runs, nothing is collected",
                          r"lost the head at 127\.0\.0\.1:\d+ \(the head sent frame \d+ \(start, \d+ bytes\) "
                          + failed, None)

    def test_replayed_frame(self):
        self.tamper_fault("replayed_frame", "replay", "a proxy sends each agent's sealed ready frame twice: the "
                          "head closes that node's connection saying the frame fails authentication and fails "
                          "the step", None,
                          r"lost: the head closed its connection: the agent of node \S+ sent frame \d+ "
                          r"\(ready, \d+ bytes\) that fails authentication")

    # --- driver -----------------------------------------------------------------------

    def close_all(self):
        for n in self.open:
            n.close()
        self.open = []

    def tests(self):
        return [(name[len("test_"):], getattr(self, name)) for name in Suite.__dict__ if name.startswith("test_")]

    def table(self):
        head = ["fault", "what flowrun did", "time to recover", "processes left", "results lost / falsely claimed",
                "reproduce"]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in self.rows:
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in r.cells()) + " |")
        return "\n".join(lines) + "\n"


def make_suite(a):
    suite = Suite(a.flowrun, a.root, a.sanitized)
    if a.doc:
        text = read(a.doc, "")
        table = text.split("<!-- faults table")[1].split("<!-- end of faults table")[0] if \
            "<!-- faults table" in text else ""
        rows = [row for row in re.findall(r"^\| (\w+) \|", table, re.M) if row != "fault"]
        names = [name for name, _ in suite.tests()]
        suite.check(rows == names, f"{a.doc}: its faults table has one row per fault, in order",
                    f"table: {rows}\nfaults: {names}")
    return suite


def write_table(suite, a):
    print(suite.table(), end="")
    if a.table:
        with open(a.table, "w") as f:
            f.write(suite.table())


def main():
    def options(parser):
        parser.add_argument("--table", help="write the measured table (Markdown) here")
        parser.add_argument("--doc", help="check that this document's faults table has a row for every fault")
    return run_suite(make_suite, options, write_table)


if __name__ == "__main__":
    sys.exit(main())
