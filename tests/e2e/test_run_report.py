"""End-to-end tests of flowrun report: the page of a real run, opened in a real browser.

Each test runs a flow with the real binary (a success, a failure with a culprit and a rank that failed
after it, a restart, a stall with its stacks, a run still going, and on the multi-node harness of
test_nodes_local.py a lost node whose place a spare takes), writes its page with `flowrun report`, and
opens it in headless chromium. The checks read the DOM chromium built (one row per rank, each row's end
as results.json has it, the culprit marked, the time axis covering the run as run.json has it) and the
browser's console (nothing written to it: no script error). A screenshot of each page is kept in
report-screenshots/ beside the flowrun binary, for CI to keep as an artifact.

  python3 -m pytest tests/e2e/test_run_report.py [--flowrun PATH]
"""
import datetime
import json
import os
import signal
import subprocess

import pytest

from flowrun_testlib.browser import Browser, chromium
from flowrun_testlib.launcher import wait_for
from flowrun_testlib.nodes import Nodes, read, sh_yaml, spec_text
from flowrun_testlib.suite import E2E

pytestmark = pytest.mark.run_report

# How each worker's role and status in results.json shows on its row.
ENDS = {"culprit": "culprit", "failed_after": "failed", "victim": "stopped", "ok": "ok"}


def unix_ms(iso):
    """results.json's and run.json's times ("2026-12-05T11:49:23.585Z") in unix milliseconds."""
    t = datetime.datetime.strptime(iso, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc)
    return round(t.timestamp() * 1000)


@pytest.fixture(scope="module")
def shots(request, flowrun):
    """The folder the screenshots go to, named at the end of the module's run."""
    folder = os.path.join(os.path.dirname(os.path.abspath(flowrun)), "report-screenshots")
    os.makedirs(folder, exist_ok=True)
    yield folder
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"flowrun report: screenshots of the pages in {folder}")


class TestRunReport(E2E):
    @pytest.fixture(autouse=True)
    def _shots(self, shots):
        self.shots = shots

    def set_up(self):
        binary = chromium()
        if binary is None:
            pytest.skip("no chromium on PATH (apt-get install chromium)")
        self.browser = Browser(binary, self.scratch, timeout=60 * self.slack)

    # --- running flows ---------------------------------------------------------------------------

    def flow(self, name, spec):
        """A directory with the spec `spec` (@DIR@ is the directory)."""
        d = os.path.join(self.scratch, name)
        os.makedirs(d)
        with open(os.path.join(d, "spec.yaml"), "w") as f:
            f.write(spec.replace("@DIR@", d))
        return d

    def start(self, d, *options):
        return subprocess.Popen([self.flowrun, "spec.yaml", "--run-dir", "run", "--grace", "5", *options], cwd=d,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "FLOWRUN_PY_SPY": os.path.join(d, "no-py-spy")})

    def run_flow(self, d, label, expect_rc):
        p = self.start(d)
        out, err = p.communicate(timeout=120 * self.slack)
        self.check(p.returncode == expect_rc, f"{label}: flowrun exits {expect_rc}", f"rc {p.returncode}\n{err}")
        return os.path.join(d, "run")

    def report(self, label, run, cwd):
        """`flowrun report RUN` in `cwd`: the path it printed."""
        p = subprocess.run([self.flowrun, "report", run], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=60)
        path = p.stdout.strip()
        self.check(p.returncode == 0 and p.stderr == "" and os.path.isfile(path),
                   f"{label}: flowrun report writes the page and prints its path", f"rc {p.returncode}\n{p.stderr}")
        return path

    # --- reading the page ------------------------------------------------------------------------

    def view(self, label, page, fragment=""):
        dom, console, rc = self.browser.open(page, fragment)
        self.check(rc == 0 and dom.find_all("body"), f"{label}: chromium opens the page", f"rc {rc}")
        self.check(console == [], f"{label}: the browser's console shows nothing (no script error)",
                   "\n".join(console))
        return dom

    def keep_screenshot(self, label, page, name):
        png = os.path.join(self.shots, f"{name}.png")
        self.check(self.browser.screenshot(page, png), f"{label}: chromium takes a screenshot", png)
        return png

    def check_rows(self, label, dom, run_dir, step="train"):
        """One row per rank of the step's last attempt, each ending as results.json says; the culprit
        marked; the axis covering the run as run.json has it, every bar on it."""
        res = json.loads(read(os.path.join(run_dir, step, "results.json")))
        ranks = dom.find_all("div", cls="ranks", data_step=step)
        self.check(len(ranks) == 1 and ranks[0].attrs.get("data-folded") == "no", f"{label}: the step's rank rows")
        rows = dom.find_all("details", cls="rank")
        bars = {int(r.attrs["data-rank"]): r.find_all("rect", cls="bar") for r in rows}
        got = {rank: b[-1].attrs["class"] for rank, b in bars.items()}
        want = {w["rank"]: "bar k-" + ("lost" if w["status"] == "lost" else ENDS[w["role"]]) for w in res["ranks"]}
        self.check(len(rows) == len(res["ranks"]) and got == want,
                   f"{label}: one row per rank, its last bar ending as results.json says", f"page {got}\nresults {want}")
        for i, attempt in enumerate(res["attempts"]):
            culprit = [rank for rank, b in bars.items() if len(b) > i and "culprit" in b[i].attrs["class"]]
            want_culprit = [attempt["culprit_rank"]] if attempt["culprit_rank"] is not None else []
            self.check(culprit == want_culprit, f"{label}: attempt {i}'s culprit is marked",
                       f"{culprit} vs {want_culprit}")
        marked = [int(r.attrs["data-rank"]) for r in rows if r.attrs.get("data-culprit") == "yes"]
        self.check(marked == sorted({a["culprit_rank"] for a in res["attempts"]} - {None}),
                   f"{label}: a culprit's row is marked as one", str(marked))
        run = json.loads(read(os.path.join(run_dir, "run.json")))
        axes = dom.find_all("div", cls="axis")
        spans = {(int(a.attrs["data-t0-ms"]), int(a.attrs["data-t1-ms"])) for a in axes}
        self.check(spans == {(unix_ms(run["start"]), unix_ms(run["end"]))},
                   f"{label}: every time axis runs from the run's start to its end", f"{spans} vs {run['start']}")
        bars = dom.find_all("rect", cls="bar")
        t0, t1 = unix_ms(run["start"]), unix_ms(run["end"])
        self.check(bars and all(t0 <= int(b.attrs["data-start-ms"]) <= int(b.attrs["data-end-ms"]) <= t1 for b in bars),
                   f"{label}: every bar lies on the axis", str([b.attrs for b in bars][:5]))
        worker_spans = {(w["rank"], unix_ms(w["start"]), unix_ms(w["end"])) for w in res["ranks"]}
        row_spans = set()
        for r in rows:
            last = r.find_all("rect", cls="bar")[-1]
            row_spans.add((int(r.attrs["data-rank"]), int(last.attrs["data-start-ms"]), int(last.attrs["data-end-ms"])))
        self.check(row_spans == worker_spans, f"{label}: each rank's last bar spans its start and end",
                   f"{sorted(row_spans)}\n{sorted(worker_spans)}")
        return res, rows

    # --- the cases -------------------------------------------------------------------------------

    def test_success(self):
        d = self.flow("ok", "name: ok\nsteps:\n  - name: prepare\n    run: echo ready\n"
                            "  - name: train\n    run: " + sh_yaml('if [ "$RANK" = 0 ]; then echo weights > r.txt; fi; echo done') +
                      "\n    parallel:\n      cpus: 2\n    outputs: [r.txt]\n")
        p = subprocess.run([self.flowrun, "spec.yaml"], cwd=d, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=120)
        self.check(p.returncode == 0, "success: flowrun exits 0", p.stderr)
        self.check("one page" not in p.stderr and not os.path.exists(os.path.join(d, ".flowrun", "runs", "latest",
                                                                                  "report.html")),
                   "success: a run that succeeded writes no page unless asked", p.stderr)
        page = self.report("success", "latest", d)
        run_dir = os.path.realpath(os.path.join(d, ".flowrun", "runs", "latest"))
        self.check(page == os.path.join(run_dir, "report.html"), "success: `latest` names the newest run's page",
                   page)
        dom = self.view("success", page)
        self.check_rows("success", dom, run_dir)
        self.check(dom.by_id("run-state").all_text() == "succeeded, exit 0" and dom.by_id("still-running") is None,
                   "success: the header says the run succeeded", dom.by_id("run-state").all_text())
        steps = [(s.attrs["data-step"], s.attrs["data-state"]) for s in dom.find_all("div", cls="steprow")]
        self.check(steps == [("prepare", "succeeded"), ("train", "succeeded")], "success: the flow's steps", str(steps))
        outputs = dom.find_all("li", cls="outputs")
        self.check(len(outputs) == 1 and "collected r.txt" in outputs[0].all_text(),
                   "success: the outputs collected", outputs[0].all_text() if outputs else "none")
        self.keep_screenshot("success", page, "success")

    FAIL_RANK = ('echo $$ > ready.$RANK.tmp && mv ready.$RANK.tmp ready.$RANK; '
                 'case $RANK in 1|3) while [ ! -e go.$RANK ]; do sleep 0.01; done; '
                 'echo "rank $RANK: </script><img src=x onerror=alert(1)>" >&2; exit $((4 - RANK));; '
                 '*) exec sleep 60;; esac')

    @staticmethod
    def zombie(pid):
        stat = read(f"/proc/{pid}/stat") if os.path.exists(f"/proc/{pid}/stat") else ""
        return stat[stat.rfind(")") + 2:][:1] == "Z"

    def test_failure(self):
        # Rank 1 fails (exit 3), then rank 3 (exit 1), both while flowrun is held (SIGSTOP), so that
        # rank 3 fails by itself, after the culprit; ranks 0 and 2 are stopped.
        d = self.flow("fail", "name: fail\nsteps:\n  - name: train\n    run: " + sh_yaml(self.FAIL_RANK) +
                      "\n    parallel:\n      cpus: 4\n  - name: evaluate\n    run: echo never\n")
        p = self.start(d)
        pids = {}
        ready = wait_for(lambda: all(os.path.exists(os.path.join(d, f"ready.{r}")) for r in range(4))
                         or p.poll() is not None, 30 * self.slack)
        if not self.check(ready and p.poll() is None, "failure: every rank starts"):
            p.kill()
            return
        pids = {r: int(read(os.path.join(d, f"ready.{r}"))) for r in range(4)}
        os.kill(p.pid, signal.SIGSTOP)
        for r in (1, 3):
            open(os.path.join(d, f"go.{r}"), "w").close()
            self.check(wait_for(lambda: self.zombie(pids[r]), 30 * self.slack), f"failure: rank {r} fails")
        os.kill(p.pid, signal.SIGCONT)
        _, err = p.communicate(timeout=60 * self.slack)
        self.check(p.returncode == 3, "failure: flowrun exits with the culprit's code", str(p.returncode))
        run_dir = os.path.join(d, "run")
        # The failed run wrote its page as it ended and named it just before its last line.
        own = os.path.join(run_dir, "report.html")
        tail = err.rstrip("\n").split("\n")[-2:]
        self.check(tail[:1] == [f"flowrun: the run as one page: {own}"] and tail[-1].startswith("flowrun: run ")
                   and os.path.isfile(own) and 'id="train-r1"' in read(own),
                   "failure: the run writes its page as it ends and names it before its last line", err[-1500:])
        page = self.report("failure", run_dir, d)
        dom = self.view("failure", page)
        res, rows = self.check_rows("failure", dom, run_dir)
        self.check(res["culprit_rank"] == 1 and [w["role"] for w in res["ranks"]] ==
                   ["victim", "culprit", "victim", "failed_after"],
                   "failure: rank 1 the culprit, rank 3 failed after it", json.dumps(res["ranks"])[:1500])
        culprit = dom.by_id("train-r1")
        text = culprit.all_text() if culprit is not None else ""
        self.check("exited 3" in text and "rank 1: </script><img src=x onerror=alert(1)>" in text and
                   os.path.join(run_dir, "train", "rank1", "stderr.log") in text,
                   "failure: the culprit's row holds its exit, its last stderr line as text and its log's path", text)
        self.check(dom.find_all("img") == [] and len(dom.find_all("script")) == 1,
                   "failure: a rank's output never becomes markup")
        # A link to a rank opens its row (the page's script).
        linked = self.view("failure (link to rank 3)", page, "train-r3").by_id("train-r3")
        self.check(linked is not None and "open" in linked.attrs, "failure: #train-r3 opens rank 3's row")
        states = {s.attrs["data-step"]: s.attrs["data-state"] for s in dom.find_all("section", cls="step")}
        self.check(states == {"train": "failed", "evaluate": "skipped"}, "failure: each step's state", str(states))
        png = self.keep_screenshot("failure", page, "failure")
        # docs/cli.md shows this page (docs/images/report-failure.png is a copy of this screenshot).
        self.check(os.path.getsize(png) < 400_000, "failure: the screenshot stays small", str(os.path.getsize(png)))

    def test_fifo_in_a_log_s_place(self):
        # Rank 1 puts a FIFO where its stderr.log was, then fails: the page its run writes as it ends reads
        # every rank's last lines, and a FIFO there must neither block flowrun nor reach the page.
        log = "@DIR@/run/train/rank1/stderr.log"
        d = self.flow("fifo", "name: fifo\nsteps:\n  - name: train\n    run: " + sh_yaml(
            f'if [ "$RANK" = 1 ]; then rm -f {log} && mkfifo {log} && exit 3; fi; exec sleep 60') +
            "\n    parallel:\n      cpus: 2\n")
        p = self.start(d)
        try:
            _, err = p.communicate(timeout=60 * self.slack)
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
        page = os.path.join(d, "run", "report.html")
        self.check(p.returncode == 3 and f"flowrun: the run as one page: {page}" in err.splitlines()
                   and os.path.isfile(page),
                   "fifo: the failed run ends and writes its page; the FIFO blocks nothing", err[-1500:])
        dom = self.view("fifo", page) if os.path.isfile(page) else None
        row = dom.by_id("train-r1") if dom is not None else None
        self.check(row is not None and "exited 3" in row.all_text(),
                   "fifo: rank 1's row has its exit, no lines from the FIFO", row.all_text() if row else "")

    def test_restart(self):
        script = ('if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && [ "$RANK" = 1 ]; then '
                  'echo "first try fails" >&2; exit 75; fi; echo "attempt $TORCHELASTIC_RESTART_COUNT"')
        d = self.flow("restart", "name: restart\nsteps:\n  - name: train\n    run: " + sh_yaml(script) +
                      "\n    parallel:\n      cpus: 3\n      max_restarts: 2\n")
        run_dir = self.run_flow(d, "restart", 0)
        page = self.report("restart", run_dir, d)
        dom = self.view("restart", page)
        res, rows = self.check_rows("restart", dom, run_dir)
        attempts = dom.find_all("li", data_attempt=True)
        self.check([a.attrs["data-attempt"] for a in attempts] == ["0", "1"] and
                   "restarted" in attempts[0].all_text() and "culprit rank 1" in attempts[0].all_text(),
                   "restart: both attempts, the first restarted with its culprit",
                   "\n".join(a.all_text() for a in attempts))
        self.check(all(len(r.find_all("rect", cls="bar")) == 2 for r in rows),
                   "restart: every rank's row has a bar per attempt")
        first = dom.by_id("train-r1")
        text = first.all_text() if first is not None else ""
        self.check(first is not None and first.attrs["data-end"] == "culprit" and "first try fails" in text and
                   os.path.join(run_dir, "train", "rank1", "attempt0", "stderr.log") in text,
                   "restart: rank 1's row keeps the first attempt's failure and its kept log", text)
        self.keep_screenshot("restart", page, "restart")

    def test_stall_and_snapshot(self):
        # Every rank writes a line every 50 ms until the test's go; then ranks 0, 1 and 3 sleep and rank 2
        # spins: all go silent, the stall stops them, and the kernel's stacks set rank 2 apart.
        script = ('echo $$ > ready.$RANK; while [ ! -e go ]; do echo tick; sleep 0.05; done; '
                  'if [ "$RANK" = 2 ]; then while :; do :; done; fi; exec sleep 60')
        d = self.flow("stall", "name: stall\nsteps:\n  - name: train\n    run: " + sh_yaml(script) +
                      "\n    stall_timeout: 1\n    parallel:\n      cpus: 4\n")
        p = self.start(d)
        run_dir = os.path.join(d, "run")
        ready = wait_for(lambda: all(os.path.exists(os.path.join(d, f"ready.{r}")) for r in range(4))
                         or p.poll() is not None, 30 * self.slack)
        if not self.check(ready and p.poll() is None, "stall: every rank starts"):
            p.kill()
            return
        # While it runs: a snapshot that says so, every rank running.
        page = self.report("snapshot", run_dir, d)
        live = self.view("snapshot", page)
        self.check(live.by_id("still-running") is not None, "snapshot: the page says the run is still running")
        rows = live.find_all("details", cls="rank")
        self.check(sorted(int(r.attrs["data-rank"]) for r in rows) == [0, 1, 2, 3] and
                   all(r.attrs["data-end"] == "running" for r in rows), "snapshot: every rank's row, running",
                   str([r.attrs for r in rows]))
        self.keep_screenshot("snapshot", page, "snapshot")
        open(os.path.join(d, "go"), "w").close()
        p.communicate(timeout=60 * self.slack)
        self.check(p.returncode != 0, "stall: flowrun stops the stalled step", str(p.returncode))
        page = self.report("stall", run_dir, d)
        dom = self.view("stall", page)
        res, rows = self.check_rows("stall", dom, run_dir)
        self.check(res["outcome"] == "stalled", "stall: results.json says stalled", res["outcome"])
        odd = dom.find_all("li", cls="stackodd")
        self.check(len(odd) == 1 and odd[0].attrs.get("data-odd-rank") == "2" and "the odd one" in odd[0].all_text(),
                   "stall: the stacks name rank 2 as the odd one", "\n".join(o.all_text() for o in odd))
        groups = dom.find_all("div", cls="stacks")
        self.check(groups and "ranks 0, 1, 3 (3 of 4)" in groups[0].all_text(), "stall: the grouped stacks",
                   groups[0].all_text() if groups else "none")
        self.keep_screenshot("stall", page, "stall")

    def test_lost_node_spare(self):
        # As test_nodes_local.py's spare test: two nodes and a spare; node 1's agent is killed; the spare
        # takes its place and attempt 1 succeeds.
        ready_line = 'echo "$FLOWRUN_NODE_RANK $FLOWRUN_AGENT_ID" > "ready.$RANK"; '
        script = ('if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then ' + ready_line + 'exec sleep 30; fi; echo again')
        n = Nodes(self, "spare", spec_text("spare", sh_yaml(script), extra="      spare_nodes: 1\n"))
        self.open.append(n)
        argv = n.command()
        if not self.check(argv is not None, "spare: the head prints the agent command", n.detail()):
            return
        # Each agent goes by a name of its own (FLOWRUN_HOSTNAME), as on nodes of their own: node-2 the spare.
        for rank in range(3):
            n.start_agents(argv + ["--node-rank", str(rank)], count=1, FLOWRUN_HOSTNAME=f"node-{rank}")
        joined = "flowrun: step 'train': spare node node-2 joined; it waits with no rank"
        wait_for(lambda: joined in n.head_err() or n.head.poll() is not None, 30 * self.slack)
        ready = n.wait_ready()
        if not self.check(len(ready) == 4, "spare: every rank starts", n.detail()):
            return
        victim = next(pid for node, pid in ready.values() if node == 1)
        os.kill(victim, signal.SIGKILL)
        self.check(n.finish("spare") == 0, "spare: the step succeeds on the spare", n.detail())
        page = self.report("spare", n.run_dir, n.dir)
        dom = self.view("spare", page)
        self.check_rows("spare", dom, n.run_dir)
        rows = dom.find_all("details", cls="rank")
        first_ends = {int(r.attrs["data-rank"]): r.find_all("rect", cls="bar")[0].attrs["class"] for r in rows}
        self.check(first_ends == {0: "bar k-stopped", 1: "bar k-stopped", 2: "bar k-lost culprit", 3: "bar k-lost"},
                   "spare: in attempt 0 ranks 2 (the culprit) and 3 were lost with their node, 0 and 1 stopped", str(first_ends))
        attempts = dom.find_all("li", data_attempt=True)
        spares = dom.find_all("span", cls="spare")
        self.check(len(attempts) == 2 and [a.attrs["data-world-size"] for a in attempts] == ["4", "4"] and
                   len(spares) == 1 and spares[0].all_text() == "node 1: node-1 lost, spare node-2 seated in its place",
                   "spare: both attempts with their world size, the spare seated in the lost node's place",
                   "\n".join(a.all_text() for a in attempts))
        nodes = {n_.attrs["data-node"]: sorted(int(r.attrs["data-rank"]) for r in n_.find_all("details", cls="rank"))
                 for n_ in dom.find_all("div", cls="node")}
        self.check(nodes == {"node-0": [0, 1], "node-2": [2, 3]},
                   "spare: the ranks grouped by the node they last ran on, the spare's under it", str(nodes))
        lost = dom.by_id("train-r2")
        self.check(lost is not None and "attempt 0 on node-1: lost with its node" in lost.all_text(),
                   "spare: rank 2's row says it was lost with node-1", lost.all_text() if lost is not None else "")
        self.keep_screenshot("spare", page, "lost-node-spare")
