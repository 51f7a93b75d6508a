"""End-to-end tests of finding runs again: `flowrun runs`, `flowrun logs`,
`flowrun status` and .flowrun/runs/latest, on flows of small shell steps run by
the real binary (two ranks on simulated GPUs), one of them watched while it runs.

  python3 -m pytest tests/e2e/test_runs.py [--flowrun PATH] [--sanitized] [-k NAME]
"""
import os
import re
import subprocess
import time

import pytest

from flowrun_testlib import clean_env
from flowrun_testlib.launcher import SANITIZER_REPORT
from flowrun_testlib.suite import E2E

pytestmark = pytest.mark.runs

# prepare -> train (2 ranks; rank 1 exits 3 when fail.flag exists). Each rank
# says which it is on stdout and on stderr.
FLOW = """name: runs-demo
steps:
  - name: prepare
    shell: true
    run: echo prepared
  - name: train
    shell: true
    run: |
      echo "out of rank $RANK"
      echo "err of rank $RANK" >&2
      test "$RANK" != 1 || test ! -f fail.flag || exit 3
    parallel: {}
"""

# One 2-rank step that waits: each rank writes, marks that it started, and
# waits for go.flag, or go.RANK for it alone (at most a minute), before it
# writes once more.
LIVE = """name: live
steps:
  - name: train
    shell: true
    run: |
      echo "hello from rank $RANK"
      touch "started-$RANK"
      for i in $(seq 3000); do test -f go.flag -o -f "go.$RANK" && break; sleep 0.02; done
      echo "bye from rank $RANK"
    parallel: {}
"""

RUN_LINE = re.compile(r"^flowrun: run (\S+): \d+ steps?; logs and results in (.*)$", re.M)


class TestRuns(E2E):
    def equal(self, expected, actual, label):
        return self.check(expected == actual, label, f"expected: {expected!r}\nactual:   {actual!r}")

    def workspace(self, name, spec):
        d = os.path.join(self.scratch, name)
        os.makedirs(d)
        with open(os.path.join(d, "flow.yaml"), "w") as f:
            f.write(spec)
        return d

    def call(self, label, cwd, *argv, timeout=60):
        # No .flowrun/runs above the test's own directory counts (/tmp may have one).
        p = subprocess.run([self.flowrun, *argv], cwd=cwd, env=clean_env(FLOWRUN_CEILING_DIRS=self.scratch),
                           capture_output=True, text=True,
                           timeout=timeout * self.slack)
        m = SANITIZER_REPORT.search(p.stderr)
        self.check(m is None, f"{label}: no sanitizer report", p.stderr[max(0, m.start() - 200):][:4000] if m else "")
        return p

    def run_flowrun_in(self, cwd, **env):
        """`flowrun runs` in `cwd` with `env` on top of the clean environment."""
        return subprocess.run([self.flowrun, "runs"], cwd=cwd, env=clean_env(**env), capture_output=True, text=True,
                              timeout=60 * self.slack)

    def run_flow(self, label, d, rc):
        p = self.call(label, d, "flow.yaml", "--fake-gpus", "2")
        m = RUN_LINE.search(p.stderr)
        self.check(p.returncode == rc and m is not None, f"{label}: exits {rc}", f"rc={p.returncode}\n{p.stderr}")
        return m.group(1) if m else None

    def wait_for(self, what, paths, proc=None, timeout=30):
        """Waits until every path in `paths` exists (the workers made them)."""
        deadline = time.monotonic() + timeout * self.slack
        while time.monotonic() < deadline and not all(os.path.exists(p) for p in paths):
            if proc is not None and proc.poll() is not None:
                break
            time.sleep(0.02)
        return self.check(all(os.path.exists(p) for p in paths), what, str(paths))

    # --- help that teaches, and a directory without runs ----------------------

    @pytest.mark.parametrize("command, words", [
        pytest.param("runs", ["DIR", "killed", "damaged", "ls -tr", "Exit codes"], id="runs"),
        pytest.param("logs", ["--step", "--rank", "-f", "latest", "Examples:", "Exit codes"], id="logs"),
        pytest.param("status", ["latest", "last output", "Example:", "Exit codes"], id="status"),
    ])
    def test_help(self, command, words):
        p = self.call(f"{command} --help", self.scratch, command, "--help")
        self.check(p.returncode == 0 and all(w in p.stdout for w in words),
                   f"{command} --help: {', '.join(words)}", p.stdout)

    def test_help_and_no_runs(self):
        p = self.call("--help", self.scratch, "--help")
        self.check(all(f"flowrun {c} " in p.stdout for c in ("runs", "logs latest", "status latest")),
                   "--help lists the three and shows them in its examples", p.stdout)
        empty = os.path.join(self.scratch, "empty")
        os.makedirs(empty)
        p = self.call("runs without runs", empty, "runs")
        self.equal((0, "", f"flowrun: no runs: no .flowrun/runs in {empty} or above it (flowrun SPEC starts one; "
                           "give DIR for runs elsewhere)\n"), (p.returncode, p.stdout, p.stderr),
                   "runs where there are none: said, not an error")
        p = self.call("latest without runs", empty, "status", "latest")
        self.equal((2, f"flowrun: error: no run 'latest': no .flowrun/runs/latest in {empty}/.flowrun/runs nor in a "
                       "directory above it (flowrun makes it when a run starts in the default run directory)\n"),
                   (p.returncode, p.stderr), "status latest without runs says where it looked")
        # Runs above that are not this user's, or above FLOWRUN_CEILING_DIRS, are not looked at.
        above = os.path.join(self.scratch, "above")
        inner = os.path.join(above, "inner")
        os.makedirs(os.path.join(above, ".flowrun", "runs", "x-20261202-112028-287555"))
        os.makedirs(inner)
        p = self.run_flowrun_in(inner, FLOWRUN_CEILING_DIRS=inner)
        self.check(p.returncode == 0 and p.stdout == "" and "no runs" in p.stderr,
                   "runs: not above a directory of FLOWRUN_CEILING_DIRS", p.stdout + p.stderr)
        p = self.run_flowrun_in(inner, FLOWRUN_CEILING_DIRS=self.scratch)
        self.check(p.returncode == 0 and "x-20261202-112028-287555" in p.stdout,
                   "runs: the nearest .flowrun/runs above, below the ceiling", p.stdout + p.stderr)
        if os.geteuid() == 0:  # only root may give a directory to another user
            os.chown(os.path.join(above, ".flowrun"), 65534, 65534)
            p = self.run_flowrun_in(inner, FLOWRUN_CEILING_DIRS=self.scratch)
            self.check(p.returncode == 0 and p.stdout == "" and "no runs" in p.stderr,
                       "runs: another user's .flowrun above is passed over", p.stdout + p.stderr)
        p = self.call("run id latest", empty, "plan", "--run-id", "latest", os.path.join(self.root, "specs", "examples",
                                                                                         "cpu.yaml"))
        self.check(p.returncode == 2 and "'latest': names the link to the newest run" in p.stderr,
                   "--run-id latest is refused: it names the link", p.stderr)

    # --- two runs, one failing: the table, latest, a rank's logs, prefixes ---

    def test_runs_logs_and_prefixes(self):
        d = self.workspace("two", FLOW)
        first = self.run_flow("first run", d, 0)
        open(os.path.join(d, "fail.flag"), "w").close()
        second = self.run_flow("second run", d, 3)
        if first is None or second is None:
            return
        runs = os.path.join(d, ".flowrun", "runs")
        self.equal(second, os.readlink(os.path.join(runs, "latest")),
                   "latest is a relative link to the newest run")
        # A run.json cut short as it was written, and a directory that is no run.
        broken = os.path.join(runs, "runs-demo-20000101-000000-0000ff")
        os.makedirs(broken)
        with open(os.path.join(broken, "run.json"), "w") as f:
            f.write('{"format": 1, "run_id": "runs-demo-2000')
        os.utime(broken, (1e9, 1e9))

        sub = os.path.join(d, "sub")
        os.makedirs(sub)
        p = self.call("runs", sub, "runs")
        lines = p.stdout.splitlines()
        if not self.check(p.returncode == 0 and len(lines) == 4, "runs: a header and three runs", p.stdout + p.stderr):
            return
        self.equal(["id", "flow", "state", "exit", "start", "duration", "step"], lines[0].split(),
                   "runs: the columns")
        self.check(lines[1].startswith(broken.rsplit("/", 1)[1]) and "damaged   run.json is not JSON" in lines[1],
                   "runs: the damaged run (no start: its directory's time, the oldest) is listed as such", lines[1])
        row1, row2 = lines[2].split(), lines[3].split()
        self.equal([first, "runs-demo", "succeeded", "0", "-"], row1[:4] + row1[-1:], "runs: the first run")
        self.equal([second, "runs-demo", "failed", "3", "train"], row2[:4] + row2[-1:],
                   "runs: the second run, newest last, with the step that failed")
        self.check(all(len(line) <= 100 for line in lines), "runs: within 100 columns", p.stdout)
        self.equal(p.stdout, self.call("runs DIR", self.scratch, "runs", d).stdout, "runs DIR: the same table")

        p = self.call("logs rank", sub, "logs", "latest", "--rank", "1")
        self.equal((0, "==> train/rank1/stdout.log <==\nout of rank 1\n\n==> train/rank1/stderr.log <==\nerr of rank 1\n"),
                   (p.returncode, p.stdout), "logs latest --rank 1: the failed step's rank 1, stdout then stderr")
        p = self.call("logs prefix", sub, "logs", second[:-3], "--step", "prepare")
        self.equal((0, "==> prepare/stdout.log <==\nprepared\n\n==> prepare/stderr.log <==\n"), (p.returncode, p.stdout),
                   "logs PREFIX --step prepare: a plain step's two files, by a unique prefix of the id")
        p = self.call("logs rank of plain", sub, "logs", first, "--step", "prepare", "--rank", "0")
        self.equal((2, "flowrun: error: --rank 0: step 'prepare' is not a parallel step, so it has no ranks; "
                       "drop --rank\n"), (p.returncode, p.stderr), "logs: --rank of a plain step is refused")

        p = self.call("ambiguous", sub, "status", "runs-demo")
        ids = sorted([first, second, broken.rsplit("/", 1)[1]])
        self.equal((2, f"flowrun: error: 'runs-demo' names 3 runs in {runs}:\n" + "".join(f"  {i}\n" for i in ids)
                    + "Give more of the id.\n"), (p.returncode, p.stderr), "status: an ambiguous prefix lists them")
        p = self.call("not found", sub, "logs", "nope")
        self.equal((2, f"flowrun: error: no run 'nope' in {runs}\n'flowrun runs' lists the runs; a run directory "
                       "may be given as a path.\n"), (p.returncode, p.stderr), "logs: not found says where it looked")
        p = self.call("status damaged", sub, "status", broken)
        self.equal((2, f"flowrun: error: {broken}: run.json is not JSON (cut short or damaged); 'flowrun runs' lists "
                       "it as damaged\n"), (p.returncode, p.stderr), "status of a damaged run: said, no crash")

        p = self.call("status finished", sub, "status", first[:-2])
        out = p.stdout
        self.check(p.returncode == 0 and out.startswith(f"run {first} (flow runs-demo): succeeded, exit 0, ")
                   and re.search(r"^  step\s+rank\s+state\s+node\s+last output$", out, re.M)
                   and re.search(r"^  prepare\s+-\s+succeeded\s+host-a\s+\S+ ago$", out, re.M)
                   and all(re.search(rf"^  train\s+{r}\s+exited 0\s+host-a\s+\S+ ago$", out, re.M) for r in (0, 1)),
                   "status PREFIX of a finished run: the final states of each step and rank", out)
        p = self.call("status failed", sub, "status", "latest")
        self.check(p.returncode == 0 and re.search(r"^  train\s+1\s+exited 3\s+host-a\s", p.stdout, re.M),
                   "status latest: the failed rank and its exit code", p.stdout)

        # resume latest: the run latest points at, not the link (which moves to the new run).
        os.remove(os.path.join(d, "fail.flag"))
        p = self.call("resume latest", sub, "resume", "latest")
        self.check(p.returncode == 0 and f"resuming run {second} ({runs}/{second})" in p.stderr,
                   "resume latest resumes the newest run by its own directory", p.stderr)
        m = RUN_LINE.search(p.stderr)
        self.check(m is not None and os.readlink(os.path.join(runs, "latest")) == m.group(1),
                   "latest then points at the resume's run", p.stderr)

    # --- logs --rank without --step, after the quickstart's shape; runs with a long id ---

    def test_logs_rank_without_step(self):
        """`flowrun logs latest --rank 1` (the example of flowrun --help) after a flow whose last
        step is a join: the run's parallel step, said on stderr; with two parallel steps, the last
        that ran; a run without one is refused."""
        d = self.workspace("rank_step", FLOW + """  - name: evaluate
    join: train
    shell: true
    run: echo evaluated
""")
        run_id = self.run_flow("quickstart's shape", d, 0)
        p = self.call("logs --rank, no step", d, "logs", "latest", "--rank", "1")
        self.equal((0, "==> train/rank1/stdout.log <==\nout of rank 1\n\n==> train/rank1/stderr.log <==\nerr of rank 1\n",
                    "flowrun logs: --rank 1 of step 'train', its parallel step\n"), (p.returncode, p.stdout, p.stderr),
                   "logs latest --rank 1: the run's parallel step, not the join that came last")
        p = self.call("logs --rank -f, no step", d, "logs", run_id, "--rank", "0", "-f")
        self.equal((0, "==> train/rank0/stdout.log <==\nout of rank 0\n\n==> train/rank0/stderr.log <==\nerr of rank 0\n"),
                   (p.returncode, p.stdout), "logs RUN --rank 0 -f: the same step")

        two = self.workspace("two_parallel", FLOW.replace("name: train", "name: first") + """  - name: second
    shell: true
    run: |
      echo "second's rank $RANK"
      test ! -f fail2.flag
    parallel: {}
  - name: evaluate
    join: second
    shell: true
    run: echo evaluated
""")
        self.run_flow("two parallel steps", two, 0)
        p = self.call("logs --rank, two parallel", two, "logs", "latest", "--rank", "1")
        self.equal((0, "==> second/rank1/stdout.log <==\nsecond's rank 1\n\n==> second/rank1/stderr.log <==\n",
                    "flowrun logs: --rank 1 of step 'second', the last of its parallel steps that ran\n"),
                   (p.returncode, p.stdout, p.stderr), "logs --rank with two parallel steps: the last")
        open(os.path.join(two, "fail.flag"), "w").close()
        self.run_flow("the first fails", two, 3)
        p = self.call("logs --rank, second never ran", two, "logs", "latest", "--rank", "1")
        self.equal((0, "==> first/rank1/stdout.log <==\nout of rank 1\n\n==> first/rank1/stderr.log <==\nerr of rank 1\n",
                    "flowrun logs: --rank 1 of step 'first', the last of its parallel steps that ran\n"),
                   (p.returncode, p.stdout, p.stderr), "logs --rank: the parallel step that ran, not one that did not")

        plain = self.workspace("no_parallel", "name: plain\nsteps:\n  - name: only\n    run: [/bin/true]\n")
        plain_id = self.run_flow("no parallel step", plain, 0)
        p = self.call("logs --rank, no parallel step", plain, "logs", "latest", "--rank", "0")
        self.equal((2, f"flowrun: error: --rank 0: run {plain_id} has no parallel step, so no ranks; drop --rank\n"),
                   (p.returncode, p.stderr), "logs --rank of a run without a parallel step is refused")

    def test_runs_long_ids(self):
        """`flowrun runs` keeps its columns aligned within 100 columns whatever the ids' lengths: an id
        too long for its column stands on a line of its own, its row below it."""
        d = self.workspace("long_ids", FLOW)
        ids = ["s", "x" * 44, "a-flow-name-that-makes-long-ids-" + "l" * 40]
        for run_id in ids:
            p = self.call(f"run {run_id}", d, "flow.yaml", "--fake-gpus", "2", "--run-id", run_id)
            self.check(p.returncode == 0, f"run with id {run_id}: exit 0", p.stderr)
        p = self.call("runs", d, "runs")
        lines = p.stdout.splitlines()
        flow, state = (lines[0].find("flow"), lines[0].find("state")) if lines else (-1, -1)
        rows = [line for line in lines[1:] if line not in ids]
        alone = [line for line in lines[1:] if line in ids]
        self.check(p.returncode == 0 and len(rows) == 3 and alone == [ids[2]], "runs: three rows, the longest id "
                   "on a line of its own", p.stdout + p.stderr)
        self.check(all(len(line) <= 100 for line in lines), "runs: every line within 100 columns", p.stdout)
        self.check(all(line[flow - 1] == " " and line[flow:].startswith("runs-")
                       and line[state:].startswith("succeeded") for line in rows),
                   "runs: the flow and state columns start where the header's do on every row", p.stdout)
        self.check(lines.index(ids[2]) + 1 < len(lines) and lines[lines.index(ids[2]) + 1].startswith(" " * flow),
                   "runs: the long id's row follows it, its id cell empty", p.stdout)

    # --- a live 2-rank step: status from outside, then logs -f to its end ---

    def test_status_live(self):
        d = self.workspace("live", LIVE)
        env = clean_env()
        flow = subprocess.Popen([self.flowrun, "flow.yaml", "--fake-gpus", "2"], cwd=d, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        follower = None
        try:
            runs = os.path.join(d, ".flowrun", "runs")
            logs = [os.path.join(runs, "latest", "train", f"rank{r}", "stdout.log") for r in (0, 1)]
            if not self.wait_for("live: both ranks started", [os.path.join(d, f"started-{r}") for r in (0, 1)]
                                 + logs, flow):
                return
            # A rank's first line reaches its log once flowrun has read it.
            deadline = time.monotonic() + 30 * self.slack
            while time.monotonic() < deadline and not all("hello" in open(p).read() for p in logs):
                time.sleep(0.02)
            p = self.call("status live", d, "status", "latest")
            lines = p.stdout.splitlines()
            self.check(p.returncode == 0 and re.match(r"run live-\S+ \(flow live\): running, flowrun pid "
                                                      rf"{flow.pid} on host-a, ", lines[0] if lines else ""),
                       "status live: the run is running, and where", p.stdout)
            for r in (0, 1):
                self.check(re.search(rf"^  train\s+{r}\s+running\s+host-a\s+\d+(\.\d)?s ago$", p.stdout, re.M),
                           f"status live: rank {r} running on host-a, with its last output", p.stdout)
            # Rank 1 ends first: status says so while rank 0 still runs.
            open(os.path.join(d, "go.1"), "w").close()
            if not self.wait_for("live: rank 1's end recorded", [os.path.join(runs, "latest", "train", "rank1",
                                                                              "end.json")], flow):
                return
            p = self.call("status one ended", d, "status", "latest")
            self.check(re.search(r"^  train\s+1\s+exited 0\s+host-a\s", p.stdout, re.M)
                       and re.search(r"^  train\s+0\s+running\s+host-a\s", p.stdout, re.M),
                       "status live: rank 1 exited 0 while rank 0 still runs", p.stdout)
            follower = subprocess.Popen([self.flowrun, "logs", "latest", "--rank", "1", "-f"], cwd=d, env=env,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            open(os.path.join(d, "go.flag"), "w").close()
            out, err = flow.communicate(timeout=60 * self.slack)
            self.check(flow.returncode == 0, "live: the run succeeds", err)
            fout, ferr = follower.communicate(timeout=30 * self.slack)
            self.equal((0, "==> train/rank1/stdout.log <==\nhello from rank 1\nbye from rank 1\n"),
                       (follower.returncode, fout), "logs -f: rank 1's lines until the run ended, then it returns")
            p = self.call("status after", d, "status", "latest")
            self.check(re.search(r"^  train\s+1\s+exited 0\s+host-a\s", p.stdout, re.M) and "succeeded, exit 0" in p.stdout,
                       "status after the run: the final states", p.stdout)
        finally:
            for proc in (flow, follower):
                if proc is not None and proc.poll() is None:
                    proc.kill()
                    proc.communicate()

    # --- a live step on 2 nodes (engine: manual, both agents on 127.0.0.1) ---

    def test_status_two_nodes(self):
        from flowrun_testlib.nodes import HOST, Nodes, sh_yaml, spec_text
        spec = spec_text("status-nodes", sh_yaml(
            'echo "hello from rank $RANK"; touch "started.$RANK"; '
            'for i in $(seq 3000); do test -f go.flag -o -f "go.$RANK" && break; sleep 0.02; done'))
        n = Nodes(self, "nodes", spec)
        self.open.append(n)
        if not n.begin("two nodes"):
            return
        logs = [os.path.join(n.run_dir, "train", f"rank{r}", "stdout.log") for r in range(4)]
        if not self.wait_for("two nodes: every rank started", [os.path.join(n.dir, f"started.{r}") for r in range(4)]
                             + logs, n.head):
            return
        deadline = time.monotonic() + 30 * self.slack
        while time.monotonic() < deadline and not all("hello" in open(p).read() for p in logs):
            time.sleep(0.02)
        p = self.call("status two nodes", n.dir, "status", n.run_dir)
        self.check(p.returncode == 0 and p.stdout.startswith(f"run {n.run_id} (flow status-nodes): running, "),
                   "two nodes: the run is running", p.stdout + p.stderr)
        for r in range(4):
            self.check(re.search(rf"^  train\s+{r}\s+running\s+node{r // 2}\s+\d+(\.\d)?s ago$", p.stdout, re.M),
                       f"two nodes: rank {r} running on node {r // 2} (as planned), with its last output", p.stdout)
        # Rank 3 (node 1) ends first: its end shows while the others run.
        open(os.path.join(n.dir, "go.3"), "w").close()
        if not self.wait_for("two nodes: rank 3's end recorded by the head",
                             [os.path.join(n.run_dir, "train", "rank3", "end.json")], n.head):
            return
        p = self.call("status two nodes, rank 3 ended", n.dir, "status", n.run_dir)
        self.check(re.search(rf"^  train\s+3\s+exited 0\s+{re.escape(HOST)}\s", p.stdout, re.M)
                   and re.search(r"^  train\s+0\s+running\s+node0\s", p.stdout, re.M),
                   "two nodes: rank 3's exit shows as soon as the head learns it, rank 0 still runs", p.stdout)
        open(os.path.join(n.dir, "go.flag"), "w").close()
        rc = n.finish("two nodes")
        self.check(rc == 0, "two nodes: the flow succeeds", n.detail())
        p = self.call("status two nodes after", n.dir, "status", n.run_dir)
        for r in range(4):
            self.check(re.search(rf"^  train\s+{r}\s+exited 0\s+{re.escape(HOST)}\s", p.stdout, re.M),
                       f"two nodes: after the step, rank {r} exited 0 on the host it ran on", p.stdout)
