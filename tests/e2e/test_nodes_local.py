"""End-to-end tests of multi-node steps on one host: no cluster needed.

The head is `flowrun SPEC` with `cluster: {engine: manual, address: 127.0.0.1}`;
the test starts the two agents itself with the command the head prints
(`flowrun agent --rdzv-endpoint HOST:PORT --token-file FILE`), both at once, each
in its own session as on a node of its own. Both agents report this host's
name, so every node is called by it. The tests check what the workers saw (their
environment, files), what flowrun reported (exit codes, the console's exact
lines, results.json, the run directory) and that nothing is left running.

  python3 -m pytest tests/e2e/test_nodes_local.py [--flowrun PATH] [--sanitized] [-k NAME]

--sanitized: the binary is built with a sanitizer: timing margins are tripled;
everything else is checked the same way.
"""
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from flowrun_testlib import AGENT_CLOSED, BLOB_RANK, CONNECTION_CLOSED, FLOOD_RANK, PeakMemory, file_crc
from flowrun_testlib.launcher import PY, SANITIZER_REPORT, WORKER, processes_with, py_spy, wait_for
from flowrun_testlib.nodes import FAKE_AGENT, GRACE, HOST, MARK, Nodes, q, read, sh_yaml, spec_text
from flowrun_testlib.suite import E2E

pytestmark = pytest.mark.nodes_local

# Placeholders in expected console lines, for the parts that change from run to run.
TOKENS = {"<why>": r".+", "<port>": r"[0-9]+", "<pid>": r"[0-9]+", "<secs>": r"[0-9]+(?:\.[0-9]+)? s", "<x>": r"[0-9]+\.[0-9]",
          "<closed>": CONNECTION_CLOSED, "<agent closed>": AGENT_CLOSED}


def line_pattern(template):
    """A regex for one expected line: the template's text exactly, TOKENS as patterns."""
    out = re.escape(template)
    for token, pattern in TOKENS.items():
        out = out.replace(re.escape(token), pattern)
    return re.compile(out)


def lines_match(expected, text):
    """Whether `text` is exactly the `expected` lines (templates, see line_pattern)."""
    actual = text.split("\n")
    if actual and actual[-1] == "":
        actual.pop()
    return len(actual) == len(expected) and all(line_pattern(e).fullmatch(a) for e, a in zip(expected, actual))


def show_lines(expected, text):
    return "--- expected\n" + "\n".join(expected) + "\n--- actual\n" + text


def unix_time(iso):
    """results.json's "start"/"end" (UTC, millisecond resolution) as a Unix time."""
    return datetime.datetime.strptime(iso, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def agents_quiet(n):
    """Every agent of `n` exited 0 without a word."""
    return all(p.returncode == 0 and n.out(f"{name}.out") == n.out(f"{name}.err") == ""
               for p, name in zip(n.agents, n.agent_names))


# A worker line that says which node and agent a rank runs under, in the shared
# workdir, once its signal dispositions are in place.
READY = 'echo "$FLOWRUN_NODE_RANK $FLOWRUN_AGENT_ID" > "ready.$RANK"; '
WAIT_ALL = 'while [ "$(ls ready.* | wc -l)" -lt 4 ]; do sleep 0.02; done; '

# A Python rank for the stacks: rank 3 spins in spin(), the others wait in wait_here(); each says where it
# goes first, so that the step's stall_timeout counts from there.
STUCK_PY = """import os
import threading


def spin():
    while True:
        pass


def wait_here():
    threading.Event().wait()


print(f"rank {os.environ['RANK']} goes", flush=True)
if os.environ["RANK"] == "3":
    spin()
wait_here()
"""
STUCK_SPIN = r"spin \(stuck\.py:[67]\)"  # py-spy names the line of the `while` or of the `pass`
STUCK_WAIT = r"wait \(stuck\.py:11\)"

# The bound on each process's peak memory while gigabytes flow through it.
PEAK_LIMIT_MIB = 64


def freeze(p, seconds):
    """SIGSTOP, then SIGCONT `seconds` later: a head that takes nothing for a while."""
    os.kill(p.pid, signal.SIGSTOP)
    try:
        time.sleep(seconds)
    finally:
        os.kill(p.pid, signal.SIGCONT)


class TestNodesLocal(E2E):
    def nodes(self, name, spec, *options, **kw):
        n = Nodes(self, name, spec, *options, **kw)
        self.open.append(n)
        return n

    def test_success(self):
        show = sh_yaml('cd "$FLOWRUN_INPUTS" && find . -type f | sort')
        spec = spec_text(
            "nodes", sh_yaml('"$0" "$1" env && echo "rank $RANK to stderr" >&2', PY, WORKER), collect="all",
            env="env:\n  SPEC_VAR: from-spec\n",
            more_steps="  - name: show\n    join: train\n"
                       f"    run: {show}\n")
        n = self.nodes("success", spec, head_env={"HEAD_ONLY_VAR": "head"})
        if not n.begin("success"):
            return
        rc = n.finish("success")
        if not self.check(rc == 0, "success: the flow succeeds", n.detail()):
            return
        err = n.head_err()
        rank_err = sorted(line for line in err.splitlines() if line.startswith("["))
        expected_rank_err = [f"[{HOST} train r{r}] rank {r} to stderr" for r in range(4)]
        self.check(rank_err == expected_rank_err, "success: every rank's stderr line is on the head's stderr",
                   show_lines(expected_rank_err, "\n".join(rank_err)))
        expected = n.header(steps=2) + [
            n.joined(),
            "flowrun: step 'train' succeeded in <secs>",
            "flowrun: step 'show' succeeded in <secs>",
            f"flowrun: run {n.run_id} succeeded: 2 steps in <secs>"]
        rest = "\n".join(line for line in err.splitlines() if not line.startswith("["))
        self.check(lines_match(expected, rest), "success: the head's messages", show_lines(expected, rest))
        out = n.out("head.out")
        rank_out = sorted(line for line in out.splitlines() if line.startswith(f"[{HOST} "))
        expected_rank_out = [f"[{HOST} train r{r}] rank {r} wrote env.json" for r in range(4)]
        self.check(rank_out == expected_rank_out, "success: remote ranks' lines carry the node's name",
                   show_lines(expected_rank_out, out))
        show = [line for line in out.splitlines() if not line.startswith(f"[{HOST} ")]
        expected_show = [f"[show] ./rank{r}/env.json" for r in range(4)]
        self.check(show == expected_show, "success: the join finds every rank's collected file in outputs/rankR/",
                   show_lines(expected_show, out))
        for r in range(4):
            rank_dir = os.path.join(n.run_dir, "train", f"rank{r}")
            self.check(read(os.path.join(rank_dir, "stdout.log")) == f"rank {r} wrote env.json\n"
                       and read(os.path.join(rank_dir, "stderr.log")) == f"rank {r} to stderr\n",
                       f"success: rank {r}'s stdout.log and stderr.log on the head")
        self.check(agents_quiet(n), "success: both agents exit 0 and say nothing", n.detail())
        ports = re.findall(r"127\.0\.0\.1:([0-9]+)", "\n".join(err.splitlines()[1:4]))
        self.check(len(ports) == 2 and ports[0] == ports[1],
                   "success: the agent command dials the port the head listens on", err)

        envs = {}
        for r in range(4):
            path = os.path.join(n.run_dir, "train", "outputs", f"rank{r}", "env.json")
            if self.check(os.path.isfile(path), f"success: rank {r}'s env.json is uploaded to outputs/rank{r}/",
                          path):
                with open(path) as f:
                    envs[r] = json.load(f)["env"]
        if len(envs) != 4:
            return
        self.check(sorted(int(e["RANK"]) for e in envs.values()) == [0, 1, 2, 3] and
                   all(int(e["RANK"]) == r for r, e in envs.items()), "success: RANK 0-3, each once")
        table = [(e["RANK"], e["GROUP_RANK"], e["FLOWRUN_NODE_RANK"], e["LOCAL_RANK"], e["ROLE_RANK"],
                  e["WORLD_SIZE"], e["LOCAL_WORLD_SIZE"], e["GROUP_WORLD_SIZE"], e["ROLE_WORLD_SIZE"],
                  e["FLOWRUN_NODES"]) for _, e in sorted(envs.items())]
        want = [(str(r), str(r // 2), str(r // 2), str(r % 2), str(r), "4", "2", "2", "4", "2") for r in range(4)]
        self.check(table == want, "success: GROUP_RANK = FLOWRUN_NODE_RANK 0,0,1,1, LOCAL_RANK 0,1,0,1, sizes 4/2/2",
                   f"{table}\nvs\n{want}")
        ports = {e["MASTER_PORT"] for e in envs.values()}
        joined = re.search(r"MASTER_ADDR 127\.0\.0\.1, MASTER_PORT ([0-9]+)$", n.head_err(), re.M)
        results = n.results()
        self.check(len(ports) == 1 and joined is not None and ports == {joined.group(1)} ==
                   {str(results["attempts"][0]["master_port"])},
                   "success: one MASTER_PORT on every node, the one the head announced and results.json records",
                   f"{ports} {joined and joined.group(1)} {results['attempts'][0]['master_port']}")
        self.check(all(e["MASTER_ADDR"] == "127.0.0.1" for e in envs.values()),
                   "success: MASTER_ADDR is node 0's address (127.0.0.1 on one host)")
        self.check({e["TORCHELASTIC_RUN_ID"] for e in envs.values()} == {n.run_id} and
                   {e["FLOWRUN_RUN_ID"] for e in envs.values()} == {n.run_id},
                   "success: TORCHELASTIC_RUN_ID = FLOWRUN_RUN_ID = the run id everywhere")
        self.check(all(e["FLOWRUN_STEP"] == "train" and e["FLOWRUN_RUN_DIR"] == n.run_dir and
                       e["TORCHELASTIC_RESTART_COUNT"] == "0" and e["TORCHELASTIC_MAX_RESTARTS"] == "0"
                       for e in envs.values()), "success: FLOWRUN_STEP, FLOWRUN_RUN_DIR, no restarts")
        # Output and error files are node-local, in each agent's private directory (mkdtemp) in its TMPDIR:
        # <TMPDIR>/flowrun-<run id>-node<N>-XXXXXX/<step>/rank<R>/{out,error.json}.
        def scratch(r, e):
            m = re.fullmatch(re.escape(f"{n.tmp}/flowrun-{n.run_id}-node{r // 2}-") + r"[A-Za-z0-9]{6}" +
                             re.escape(f"/train/rank{r}/out"), e["FLOWRUN_OUTPUT_DIR"])
            return e["FLOWRUN_OUTPUT_DIR"][:-len(f"/train/rank{r}/out")] if m else None
        dirs = {r: scratch(r, e) for r, e in envs.items()}
        self.check(all(d is not None and envs[r]["TORCHELASTIC_ERROR_FILE"] == f"{d}/train/rank{r}/error.json"
                       for r, d in dirs.items()) and len(set(dirs.values())) == 2,
                   "success: FLOWRUN_OUTPUT_DIR and TORCHELASTIC_ERROR_FILE are node-local",
                   str([(e["FLOWRUN_OUTPUT_DIR"], e["TORCHELASTIC_ERROR_FILE"]) for e in envs.values()]))
        self.check(os.listdir(n.tmp) == [], "success: each agent removes its node-local scratch directory",
                   str(os.listdir(n.tmp)))
        # The agent's own environment, the spec's env; not the head's environment.
        self.check(all(e.get("SPEC_VAR") == "from-spec" and e.get(MARK) == n.run_id and "HEAD_ONLY_VAR" not in e
                       for e in envs.values()),
                   "success: workers get the spec's env and their agent's environment, not the head's")
        agents = {r: e["FLOWRUN_AGENT_ID"] for r, e in envs.items()}
        pids = {int(a.rsplit("-", 2)[1]) for a in agents.values()}
        self.check(agents[0] == agents[1] and agents[2] == agents[3] and agents[0] != agents[2]
                   and pids == {p.pid for p in n.agents} and all(a.startswith(HOST + "-") for a in agents.values()),
                   "success: each node's ranks run under one agent, one agent per node", str(agents))
        self.check([r["node"] for r in results["ranks"]] == [HOST] * 4 and results["outcome"] == "succeeded",
                   "success: results.json gives every rank its node", json.dumps(results["ranks"])[:1500])
        self.check(not os.path.exists(os.path.join(n.run_dir, "train", "agent.token")) and
                   not [f for f in os.listdir(os.path.join(n.dir, ".flowrun")) if f.startswith("node-check-")],
                   "success: the token file and the workdir marker are removed",
                   str(os.listdir(os.path.join(n.dir, ".flowrun"))))
        n.check_nothing_left("success")

    def test_fold_across_nodes(self):
        """The head folds a line that ranks on both nodes print alike ([train r0-3]); a rank's own line keeps its
        node's name. A wait of 60s: the lines wait for the ranks, never for a time."""
        spec = spec_text("fold", sh_yaml('echo "every rank says this"; echo "rank $RANK alone"'),
                         extra="    logs: {fold: 60s}\n")
        n = self.nodes("fold", spec)
        if not n.begin("fold"):
            return
        rc = n.finish("fold")
        out = n.out("head.out").splitlines()
        self.check(rc == 0 and out.count("[train r0-3] every rank says this") == 1
                   and sorted(line for line in out if "alone" in line) == [f"[{HOST} train r{r}] rank {r} alone"
                                                                           for r in range(4)]
                   and len(out) == 5,
                   "fold: the line every rank of both nodes prints is shown once, the others with their node",
                   n.detail())

    def test_ship_inputs(self):
        # cluster.shared_workdir: false: the head ships the step's inputs to node 1 (node 0 runs on the
        # head's own host and reads the workdir), whose ranks run in the agent's scratch copy of them.
        rank = sh_yaml('cat data/x.txt > "$FLOWRUN_OUTPUT_DIR/seen.txt" && pwd > "$FLOWRUN_OUTPUT_DIR/cwd.txt"')
        show = sh_yaml('cd "$FLOWRUN_INPUTS" && cat rank0/seen.txt rank1/seen.txt rank2/seen.txt rank3/seen.txt')
        spec = ("name: ship\ncluster:\n  engine: manual\n  address: 127.0.0.1\n  heartbeat_timeout: 1\n"
                "  shared_workdir: false\nsteps:\n"
                f"  - name: prepare\n    run: {sh_yaml('mkdir -p data && echo payload > data/x.txt')}\n"
                f"  - name: train\n    run: {rank}\n    forensics: off\n    inputs: [data/*]\n"
                "    parallel:\n      cpus: 4\n      nodes: 2\n    collect: all\n"
                f"  - name: show\n    join: train\n    run: {show}\n")
        n = self.nodes("ship", spec, head_env={"FLOWRUN_HOSTNAME": None})  # the head's host is its agents'
        if not n.begin("ship"):
            return
        rc = n.finish("ship")
        if not self.check(rc == 0, "ship: the flow succeeds", n.detail()):
            return
        shipping = (f"flowrun: step 'train': node1 ({HOST}) does not share the workdir {n.dir}: shipping 1 file "
                    "(8 B) to it")  # data/x.txt: "payload\n"
        err = n.head_err()
        self.check(err.splitlines().count(shipping) == 1, "ship: the head says once what it ships to node 1", err)
        self.check(n.out("head.out").splitlines() == ["[show] payload"] * 4,
                   "ship: every rank read the prepared file, and the join sees each rank's output",
                   n.out("head.out"))
        cwd = {r: read(os.path.join(n.run_dir, "train", "outputs", f"rank{r}", "cwd.txt")).strip()
               for r in range(4)}
        scratch = re.compile(re.escape(f"{n.tmp}/flowrun-{n.run_id}-node1-") + r"[A-Za-z0-9]{6}/work")
        self.check(cwd[0] == cwd[1] == n.dir and all(scratch.fullmatch(cwd[r]) for r in (2, 3)),
                   "ship: node 0's ranks run in the workdir, node 1's in its agent's scratch copy", str(cwd))
        self.check(os.listdir(n.tmp) == [], "ship: the agents remove their scratch directories and the copy",
                   str(os.listdir(n.tmp)))
        self.check(agents_quiet(n), "ship: both agents exit 0 and say nothing", n.detail())
        n.check_nothing_left("ship")

    def test_node_environment(self):
        # Two set_default variables exported only where the agents start, not
        # to the head: each node's ranks keep the agent's values (with two
        # ranks a node, flowrun's own default would be 1 for both).
        script = 'echo "$OMP_NUM_THREADS $TORCH_NCCL_ASYNC_ERROR_HANDLING $PYTHONUNBUFFERED" > "defaults.$RANK"'
        n = self.nodes("node_env", spec_text("node_env", sh_yaml(script)),
                       head_env={"OMP_NUM_THREADS": None, "TORCH_NCCL_ASYNC_ERROR_HANDLING": None,
                                 "PYTHONUNBUFFERED": None})
        argv = n.command()
        if not self.check(argv is not None, "node environment: the head prints the agent command", n.detail()):
            return
        n.start_agents(argv, OMP_NUM_THREADS="3", TORCH_NCCL_ASYNC_ERROR_HANDLING="0", PYTHONUNBUFFERED=None)
        rc = n.finish("node environment")
        if not self.check(rc == 0, "node environment: the flow succeeds", n.detail()):
            return
        seen = {r: read(os.path.join(n.dir, f"defaults.{r}")).strip() for r in range(4)
                if os.path.exists(os.path.join(n.dir, f"defaults.{r}"))}
        self.check(seen == {r: "3 0 1" for r in range(4)},
                   "node environment: OMP_NUM_THREADS and TORCH_NCCL_ASYNC_ERROR_HANDLING are the agent's, "
                   "PYTHONUNBUFFERED flowrun's default where neither side sets it", str(seen))
        n.check_nothing_left("node environment")

    # --- (b) a worker fails on node 1 -----------------------------------------

    def test_stacks(self):
        # Rank 3 (node 1) fails once all are ready; ranks 0-2 wait in `sleep` on both nodes. Each agent
        # takes its own live ranks' stacks before it signals them (no py-spy there: FLOWRUN_PY_SPY names a
        # file that is not there, so the kernel's words), and the head groups the three together, as one
        # host would. Each agent says on its own console that py-spy is missing; the head says it once on
        # its console, naming a node.
        script = (READY + 'if [ "$RANK" = 3 ]; then ' + WAIT_ALL + 'echo "rank 3 fails" >&2; exit 3; fi; '
                  'exec sleep 30')
        n = self.nodes("stacks", spec_text("stacks", sh_yaml(script), forensics="{timeout: 5s}"))
        argv = n.command()
        if not self.check(argv is not None, "stacks: the head prints the agent command", n.detail()):
            return
        missing = os.path.join(n.dir, "no-py-spy")
        n.start_agents(argv, FLOWRUN_PY_SPY=missing)
        rc = n.finish("stacks")
        err = n.head_err()
        res = n.results()
        stacks = res.get("stacks") or {}
        groups = [g["ranks"] for g in stacks.get("groups", [])]
        self.check(rc == 3 and stacks.get("source") == "kernel" and groups == [[0, 1, 2]]
                   and stacks["groups"][0]["where"].startswith("hrtimer_nanosleep (state S"),
                   "stacks: results.json groups ranks 0-2 of both nodes together", json.dumps(stacks))
        said = re.findall(r"^flowrun: cannot take the ranks' Python stacks: .*$", err, re.M)
        report = re.search(r"^flowrun:   ranks 0-2 are in hrtimer_nanosleep \(state S", err, re.M)
        self.check(said == [f"flowrun: cannot take the ranks' Python stacks: no py-spy on node {HOST} (install it: "
                            "pip install py-spy); saying what the kernel tells instead"]
                   and report is not None and err.index(said[0]) < report.start(),
                   "stacks: the head says once that py-spy is missing on a node, with the command that installs "
                   "it, before its report names where ranks 0-2 were", err)
        for name in n.agent_names:
            self.check(n.out(f"{name}.err") == f"flowrun: cannot take the ranks' Python stacks: FLOWRUN_PY_SPY="
                       f"{missing} is not an executable file (install it: pip install py-spy); saying what the "
                       "kernel tells instead\n", f"stacks: {name} says why on its own console, once", n.detail())
        texts = [read(os.path.join(n.run_dir, "train", f"rank{r}", "stack.txt")) if os.path.exists(
            os.path.join(n.run_dir, "train", f"rank{r}", "stack.txt")) else "" for r in range(3)]
        self.check(all(t.startswith("(py-spy missing: no py-spy on node ") and "kernel: hrtimer_nanosleep" in t
                       for t in texts), "stacks: each rank's stack.txt at the head, from its node", "\n".join(texts))
        n.check_nothing_left("stacks")

    def test_stacks_py_spy(self):
        # Python ranks: rank 3 spins in a loop, ranks 0-2 wait on an event, and the step's stall_timeout
        # stops them. Each agent runs py-spy (FLOWRUN_PY_SPY) on its own ranks; the head writes every rank's
        # stack.txt with py-spy's dump and names rank 3 apart at its line.
        found = py_spy()
        if found is None:
            pytest.skip("no py-spy (FLOWRUN_PY_SPY, build/py-spy from scripts/test --phase deps, or PATH)")
        script = os.path.join(self.scratch, "stuck.py")
        with open(script, "w") as f:
            f.write(STUCK_PY)
        spec = spec_text("pyspy", "[" + ", ".join(q(w) for w in (PY, script)) + "]",
                         forensics="{timeout: 10s}", extra="    stall_timeout: 2\n")
        n = self.nodes("stacks_py_spy", spec)
        argv = n.command()
        if not self.check(argv is not None, "py-spy stacks: the head prints the agent command", n.detail()):
            return
        n.start_agents(argv, FLOWRUN_PY_SPY=found)
        rc = n.finish("py-spy stacks")
        err = n.head_err()
        stacks = n.results().get("stacks") or {}
        groups = [(g["ranks"], g["missing"]) for g in stacks.get("groups", [])]
        wheres = [g["where"] or "" for g in stacks.get("groups", [])]
        self.check(rc == 124 and stacks.get("source") == "py-spy" and groups == [([0, 1, 2], None), ([3], None)]
                   and re.fullmatch(STUCK_WAIT, wheres[0]) and re.fullmatch(STUCK_SPIN, wheres[1]),
                   "py-spy stacks: results.json: ranks 0-2 of both nodes wait, rank 3 spins, all by py-spy",
                   f"{json.dumps(stacks)}\n{n.detail()}")
        self.check(re.search(rf"^flowrun:   ranks 0-2 \(3 of 4\) are in {STUCK_WAIT}; rank 3 is in {STUCK_SPIN}$",
                             err, re.M) is not None and "cannot take" not in err,
                   "py-spy stacks: the head's report names rank 3 apart", err)
        texts = [read(os.path.join(n.run_dir, "train", f"rank{r}", "stack.txt")) for r in range(4)]
        self.check(all(t.startswith("Process ") and '"MainThread"' in t for t in texts)
                   and all("wait_here (" in t for t in texts[:3]) and "spin (" in texts[3],
                   "py-spy stacks: each rank's stack.txt at the head holds py-spy's dump", "\n".join(texts))
        n.check_nothing_left("py-spy stacks")

    def test_worker_fails(self):
        # Every rank ignores SIGTERM, so the others are stopped only by the
        # SIGKILL that follows the grace; rank 3 fails once all are ready.
        script = ('trap "" TERM; ' + READY + 'if [ "$RANK" = 3 ]; then ' + WAIT_ALL +
                  'echo "rank 3 fails" >&2; exit 3; fi; exec sleep 30')
        n = self.nodes("fails", spec_text("fails", sh_yaml(script)))
        if not n.begin("worker fails"):
            return
        rc = n.finish("worker fails")
        err = n.head_err()
        expected = n.header() + [
            n.joined(),
            f"[{HOST} train r3] rank 3 fails",
            f"flowrun: step 'train' failed: rank 3 on {HOST} exited with code 3 after <secs> (pid <pid>)",
            f"flowrun:   last line of its stderr ({n.run_dir}/train/rank3/stderr.log):",
            "    rank 3 fails",
            "flowrun:   stopped by flowrun: ranks 0-2",
            "flowrun:   killed, SIGTERM did not end them in time: ranks 0-2",
            f"flowrun:   logs: {n.run_dir}/train",
            "flowrun: a retry may help (failure): <why>",
            f"flowrun: the run as one page: {n.run_dir}/report.html",
            f"flowrun: run {n.run_id} failed after <secs> (exit code 3): failed 'train'"]
        self.check(rc == 3, "worker fails: flowrun exits with the failed rank's code 3", n.detail())
        self.check(lines_match(expected, err), "worker fails: the report names the rank and its node",
                   show_lines(expected, err))
        res = n.results()
        ranks = res["ranks"]
        pid = re.search(r"\(pid ([0-9]+)\)$", err, re.M)
        self.check(res["culprit_rank"] == 3 and ranks[3]["exit_code"] == 3 and pid is not None
                   and ranks[3]["pid"] == int(pid.group(1)) and [r["node"] for r in ranks] == [HOST] * 4,
                   "worker fails: results.json names the culprit, its pid and every rank's node",
                   json.dumps(ranks)[:2000])
        self.check([(r["status"], r["signal"], r["role"]) for r in ranks[:3]] ==
                   [("signaled", "SIGKILL", "victim")] * 3,
                   "worker fails: ranks 0-2 (which ignore SIGTERM) are killed after the grace",
                   json.dumps(ranks)[:2000])
        # The other ranks, on both nodes, end after the grace and within 1 s of it.
        failed_at = unix_time(ranks[3]["end"])
        after = [round(unix_time(r["end"]) - failed_at, 3) for r in ranks[:3]]
        self.check(all(GRACE - 0.002 <= a <= GRACE + 1 * self.slack for a in after),
                   f"worker fails: ranks 0-2 are stopped {GRACE} s (--grace) after rank 3 failed, within 1 s more",
                   str(after))
        self.check(agents_quiet(n), "worker fails: both agents end in order", n.detail())
        n.check_nothing_left("worker fails")

    # --- (c) an agent is killed ---------------------------------------------------

    def test_agent_killed(self):
        n = self.nodes("killed", spec_text("killed", sh_yaml(READY + "exec sleep 30")))
        if not n.begin("agent killed"):
            return
        ready = n.wait_ready()
        if not self.check(len(ready) == 4, "agent killed: every rank starts", n.detail()):
            return
        victim = next(pid for node, pid in ready.values() if node == 1)
        # time.time() is read before the kill, so kill -> report measures at
        # least the true delay; flowrun reads the same clock (CLOCK_REALTIME).
        killed_at = time.time()
        os.kill(victim, signal.SIGKILL)
        rc = n.finish("agent killed")
        err = n.head_err()
        lost = f"node {HOST} (node rank 1 of 2) lost: <agent closed>"
        expected = n.header() + [
            n.joined(),
            f"flowrun: step 'train': {lost}",
            f"flowrun: step 'train' failed: rank 2 on {HOST} was lost with its node: <agent closed>",
            "flowrun:   stopped by flowrun: ranks 0, 1",
            "flowrun:   failed after it: rank 3 (node lost)",
            f"flowrun:   {lost}",
            f"flowrun:   logs: {n.run_dir}/train",
            "flowrun: a retry may help (infrastructure): <why>",
            f"flowrun: the run as one page: {n.run_dir}/report.html",
            f"flowrun: run {n.run_id} failed after <secs> (exit code 1): failed 'train'"]
        self.check(rc == 1, "agent killed: flowrun exits 1", n.detail())
        self.check(lines_match(expected, err), "agent killed: the report says the node's agent was lost",
                   show_lines(expected, err))
        ranks = n.results()["ranks"]
        self.check(all(r["status"] == "lost" and re.fullmatch(AGENT_CLOSED, r["spawn_error"])
                       for r in ranks[2:]) and len(ranks) == 4 and
                   [(r["status"], r["signal"]) for r in ranks[:2]] == [("signaled", "SIGTERM")] * 2,
                   "agent killed: ranks 2 and 3 are lost, ranks 0 and 1 stopped", json.dumps(ranks)[:2000])
        # results.json keeps milliseconds, truncated: the true time is up to 1 ms later.
        delays = [unix_time(r["end"]) + 0.001 - killed_at for r in ranks[2:]]
        self.check(all(0 <= d < 0.1 * self.slack for d in delays),
                   "agent killed: the head notices within 100 ms (no heartbeat wait)",
                   str([f"{d * 1000:.1f} ms" for d in delays]))
        survivor = next(p for p in n.agents if p.pid != victim)
        self.check(survivor.returncode == 0 and n.out(f"agent{n.agents.index(survivor)}.err") == "",
                   "agent killed: the other agent stops its ranks and ends in order", n.detail())
        # The killed agent's workers are stopped by its guardian.
        n.check_nothing_left("agent killed")

    def test_spare_takes_over(self):
        # spare_nodes: 1 with three agents: the third to join waits with no rank. Attempt 0's ranks wait
        # to be stopped; the agent of node 1 is SIGKILLed; the spare takes node rank 1 and attempt 1 runs
        # every rank again, counted by TORCHELASTIC_RESTART_COUNT though max_restarts is 0.
        script = ('echo "$TORCHELASTIC_RESTART_COUNT" >> "runs.$RANK"; '
                  'if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then ' + READY + 'exec sleep 30; fi; '
                  'echo "$FLOWRUN_NODE_RANK $FLOWRUN_AGENT_ID $WORLD_SIZE" > "again.$RANK"')
        n = self.nodes("spare", spec_text("spare", sh_yaml(script), extra="      spare_nodes: 1\n"))
        argv = n.command()
        if not self.check(argv is not None, "spare: the head prints the agent command", n.detail()):
            return
        self.check("flowrun: step 'train': 4 workers on 2 nodes, 1 spare waiting (engine: manual)" in n.head_err()
                   and "flowrun: waiting for 2 agents and 1 spare; on each node run (add --node-rank N to choose "
                   "its rank, 2 and up for a spare):" in n.head_err(),
                   "spare: the head says it waits for a spare too", n.head_err())
        n.start_agents(argv, count=3)
        joined = f"flowrun: step 'train': spare node {HOST} joined; it waits with no rank"
        wait_for(lambda: joined in n.head_err() or n.head.poll() is not None, 30 * self.slack)
        ready = n.wait_ready()
        if not self.check(len(ready) == 4 and joined in n.head_err(), "spare: every rank starts and the spare joins",
                          n.detail()):
            return
        victim = next(pid for node, pid in ready.values() if node == 1)
        used = {pid for _, pid in ready.values()}
        os.kill(victim, signal.SIGKILL)
        rc = n.finish("spare")
        err = n.head_err()
        self.check(rc == 0, "spare: the step succeeds on the spare", n.detail())
        for line in [f"flowrun: step 'train': node {HOST} (node rank 1 of 2) lost: <agent closed>",
                     f"flowrun: step 'train': spare node {HOST} takes node rank 1 of lost node {HOST} (0 spares left)",
                     f"flowrun: step 'train' failed (rank <x> on {HOST} <any>); restarting all 4 workers on 2 nodes "
                     "(restart 1, not counted to max_restarts): a spare node takes the lost node's place",
                     "flowrun: step 'train' succeeded in <secs>"]:
            pattern = line_pattern(line.replace("<x>", "<pid>")).pattern.replace(re.escape("<any>"), ".*")
            self.check(re.search("^" + pattern + "$", err, re.M) is not None, f"spare: the head says: {line}", err)
        again = {}
        for r in range(4):
            path = os.path.join(n.dir, f"again.{r}")
            if os.path.exists(path):
                node, agent, world = read(path).split()
                again[r] = (int(node), int(agent.rsplit("-", 2)[1]), int(world))
        spare_pid = next((p.pid for p in n.agents if p.pid not in used), None)
        self.check(len(again) == 4 and again[2][:2] == again[3][:2] == (1, spare_pid) and
                   all(w == 4 for _, _, w in again.values()) and
                   {again[0][1], again[1][1]} == {pid for node, pid in ready.values() if node == 0},
                   "spare: attempt 1 runs ranks 2 and 3 under the spare's agent as node rank 1, WORLD_SIZE 4",
                   f"again={again} ready={ready} spare={spare_pid}")
        runs = [read(os.path.join(n.dir, f"runs.{r}")) for r in range(4)]
        self.check(runs == ["0\n1\n"] * 4, "spare: every rank ran twice, TORCHELASTIC_RESTART_COUNT 0 then 1",
                   str(runs))
        res = n.results()
        attempts = res["attempts"]
        self.check(res["outcome"] == "succeeded" and len(attempts) == 2 and attempts[0]["restarted"] and
                   attempts[0]["restart_reason"] == "a spare node takes the lost node's place" and
                   attempts[0]["replaced_nodes"] == [] and
                   attempts[1]["replaced_nodes"] == [{"node_rank": 1, "lost": HOST, "spare": HOST}] and
                   any(note.startswith(f"node {HOST} (node rank 1 of 2) lost") for note in res["notes"]),
                   "spare: results.json names the lost node, the spare and both attempts", json.dumps(res)[:3000])
        n.check_nothing_left("spare")

    def test_spare_lost_then_none(self):
        # The spare's agent is killed while it waits: the step goes on; then node 1's agent is killed and
        # no spare is left, so the step fails and says why.
        n = self.nodes("nospare", spec_text("nospare", sh_yaml(READY + "exec sleep 30"),
                                            extra="      spare_nodes: 1\n"))
        argv = n.command()
        if not self.check(argv is not None, "no spare: the head prints the agent command", n.detail()):
            return
        n.start_agents(argv, count=3)
        joined = f"flowrun: step 'train': spare node {HOST} joined; it waits with no rank"
        wait_for(lambda: joined in n.head_err() or n.head.poll() is not None, 30 * self.slack)
        ready = n.wait_ready()
        if not self.check(len(ready) == 4 and joined in n.head_err(), "no spare: every rank starts, the spare joins",
                          n.detail()):
            return
        used = {pid for _, pid in ready.values()}
        spare = next(p for p in n.agents if p.pid not in used)
        spare.kill()
        spare_lost = f"flowrun: step 'train': spare node {HOST} lost: "
        wait_for(lambda: spare_lost in n.head_err() or n.head.poll() is not None, 30 * self.slack)
        self.check(spare_lost in n.head_err() and n.head.poll() is None,
                   "no spare: a lost spare is said, and the step goes on", n.detail())
        os.kill(next(pid for node, pid in ready.values() if node == 1), signal.SIGKILL)
        rc = n.finish("no spare")
        err = n.head_err()
        self.check(rc == 1 and re.search(r"not restarting: rank [23]'s node, .*, was lost, and no spare node is "
                                         r"left to take its place$", err, re.M) is not None,
                   "no spare: the step fails, and the report says no spare is left", err)
        n.check_nothing_left("no spare")

    def test_elastic_goes_on(self):
        # nodes: "1:2", no spare: node 1's agent is SIGKILLed while attempt 0's ranks wait; the step goes on
        # with node 0 alone, its two ranks renumbered 0 and 1, WORLD_SIZE 2, though max_restarts is 0.
        script = ('echo "$TORCHELASTIC_RESTART_COUNT" >> "runs.$RANK"; '
                  'if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then ' + READY + 'exec sleep 30; fi; '
                  'echo "$FLOWRUN_NODE_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE" > "again.$RANK"')
        spec = spec_text("elastic", sh_yaml(script)).replace("      nodes: 2\n", '      nodes: "1:2"\n')
        n = self.nodes("elastic", spec)
        if not n.begin("elastic"):
            return
        ready = n.wait_ready()
        if not self.check(len(ready) == 4, "elastic: every rank of attempt 0 starts", n.detail()):
            return
        os.kill(next(pid for node, pid in ready.values() if node == 1), signal.SIGKILL)
        rc = n.finish("elastic")
        err = n.head_err()
        self.check(rc == 0, "elastic: the step succeeds on the node left", n.detail())
        for line in [f"flowrun: step 'train': node {HOST} (node rank 1 of 2) lost: <agent closed>",
                     f"flowrun: step 'train' failed (rank <x> on {HOST} <any>); restarting all 2 workers on 1 node "
                     '(restart 1, not counted to max_restarts): the step goes on with the node left (nodes: "1:2")',
                     f"flowrun: step 'train': the step goes on on 1 node ({HOST}), without {HOST}: WORLD_SIZE 2 "
                     '(nodes: "1:2")',
                     "flowrun: step 'train' succeeded in <secs>"]:
            pattern = line_pattern(line.replace("<x>", "<pid>")).pattern.replace(re.escape("<any>"), ".*")
            self.check(re.search("^" + pattern + "$", err, re.M) is not None, f"elastic: the head says: {line}", err)
        again = {r: read(os.path.join(n.dir, f"again.{r}")).split()
                 for r in range(4) if os.path.exists(os.path.join(n.dir, f"again.{r}"))}
        self.check(again == {0: ["0", "2", "2"], 1: ["0", "2", "2"]},
                   "elastic: attempt 1 runs ranks 0 and 1 on node rank 0, WORLD_SIZE 2, and no rank 2 or 3",
                   str(again))
        runs = [read(os.path.join(n.dir, f"runs.{r}")) for r in range(4)]
        self.check(runs == ["0\n1\n", "0\n1\n", "0\n", "0\n"],
                   "elastic: ranks 0 and 1 ran twice, TORCHELASTIC_RESTART_COUNT 0 then 1; ranks 2 and 3 once",
                   str(runs))
        res = n.results()
        attempts = res["attempts"]
        self.check(res["outcome"] == "succeeded" and len(attempts) == 2 and attempts[0]["restarted"] and
                   attempts[0]["restart_reason"] == 'the step goes on with the node left (nodes: "1:2")' and
                   attempts[0]["world_size"] == 4 and attempts[1]["world_size"] == 2 and
                   attempts[1]["dropped_nodes"] == [HOST] and attempts[1]["added_nodes"] == [] and
                   [w["rank"] for w in res["ranks"]] == [0, 1],
                   "elastic: results.json: attempt 1 on 2 ranks without the lost node", json.dumps(res)[:3000])
        n.check_nothing_left("elastic")

    def test_elastic_starts_fewer_then_grows(self):
        # nodes: "1:2" with one agent: once cluster.last_call_timeout passes, the step starts on that node,
        # WORLD_SIZE 2. A second agent joins while it runs and waits; rank 0 fails, and the restart
        # (max_restarts: 1) takes the waiting node in: WORLD_SIZE 4 on 2 nodes.
        script = ('if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then ' + READY +
                  'if [ "$RANK" = 0 ]; then while ! test -f go; do sleep 0.05; done; exit 3; fi; exec sleep 30; fi; '
                  'echo "$FLOWRUN_NODE_RANK $WORLD_SIZE" > "again.$RANK"')
        spec = (spec_text("grow", sh_yaml(script), extra="      max_restarts: 1\n")
                .replace("      nodes: 2\n", '      nodes: "1:2"\n')
                .replace("  heartbeat_timeout: 1\n", "  heartbeat_timeout: 1\n  last_call_timeout: 1\n"))
        n = self.nodes("grow", spec)
        argv = n.command()
        if not self.check(argv is not None, "grow: the head prints the agent command", n.detail()):
            return
        n.start_agents(argv, count=1)
        ready = n.wait_ready(count=2)
        started = ("flowrun: step 'train': 1 of 2 nodes joined, and no more within cluster.last_call_timeout (1 s): "
                   f'the step starts on 1 node ({HOST}), WORLD_SIZE 2 (nodes: "1:2")')
        if not self.check(len(ready) == 2 and started in n.head_err(),
                          "grow: the step starts on the one node there, 2 ranks", n.detail()):
            return
        n.start_agents(argv, count=1)
        waits = (f"flowrun: step 'train': another node {HOST} joined; it waits with no rank until the next restart "
                 '(nodes: "1:2")')
        wait_for(lambda: waits in n.head_err() or n.head.poll() is not None, 30 * self.slack)
        self.check(waits in n.head_err(), "grow: a node that joins late waits", n.head_err())
        open(os.path.join(n.dir, "go"), "w").close()
        rc = n.finish("grow")
        err = n.head_err()
        self.check(rc == 0, "grow: the step succeeds after the restart", n.detail())
        grown = (f"flowrun: step 'train': the step goes on on 2 nodes ({HOST}, {HOST}), with {HOST}, which joined "
                 'since: WORLD_SIZE 4 (nodes: "1:2")')
        self.check(grown in err and "restarting all 4 workers on 2 nodes (restart 1 of 1)" in err,
                   "grow: the restart takes the waiting node in", err)
        again = {r: read(os.path.join(n.dir, f"again.{r}")).split()
                 for r in range(4) if os.path.exists(os.path.join(n.dir, f"again.{r}"))}
        self.check(again == {0: ["0", "4"], 1: ["0", "4"], 2: ["1", "4"], 3: ["1", "4"]},
                   "grow: attempt 1 runs 4 ranks on 2 nodes, WORLD_SIZE 4", str(again))
        res = n.results()
        attempts = res["attempts"]
        self.check(len(attempts) == 2 and attempts[0]["world_size"] == 2 and attempts[1]["world_size"] == 4 and
                   attempts[1]["added_nodes"] == [HOST] and attempts[1]["dropped_nodes"] == [],
                   "grow: results.json: 2 ranks, then 4 with the node that joined", json.dumps(attempts)[:3000])
        n.check_nothing_left("grow")

    # --- (d) a silent node ----------------------------------------------------------

    def test_agent_silent(self):
        n = self.nodes("silent", spec_text("silent", sh_yaml(READY + "exec sleep 30")))
        if not n.begin("silent node"):
            return
        ready = n.wait_ready()
        if not self.check(len(ready) == 4, "silent node: every rank starts", n.detail()):
            return
        frozen = next(pid for node, pid in ready.values() if node == 1)
        other = next(pid for node, pid in ready.values() if node == 0)
        stopped_at = time.time()
        os.kill(frozen, signal.SIGSTOP)
        try:
            rc = n.wait(n.head, 30)
            err = n.head_err()
            lost = (f"node {HOST} (node rank 1 of 2) lost: no heartbeat for <x> s "
                    "(cluster.heartbeat_timeout: 1 s)")
            expected = n.header() + [
                n.joined(),
                f"flowrun: step 'train': {lost}",
                f"flowrun: step 'train' failed: rank 2 on {HOST} was lost with its node: no heartbeat for <x> s "
                "(cluster.heartbeat_timeout: 1 s)",
                "flowrun:   stopped by flowrun: ranks 0, 1",
                "flowrun:   failed after it: rank 3 (node lost)",
                f"flowrun:   {lost}",
                f"flowrun:   logs: {n.run_dir}/train",
                "flowrun: a retry may help (infrastructure): <why>",
                f"flowrun: the run as one page: {n.run_dir}/report.html",
                f"flowrun: run {n.run_id} failed after <secs> (exit code 1): failed 'train'"]
            self.check(rc == 1, "silent node: flowrun exits 1", n.detail())
            self.check(lines_match(expected, err), "silent node: the report says no heartbeat came",
                       show_lines(expected, err))
            silent = [float(x) for x in re.findall(r"no heartbeat for ([0-9.]+) s", err)]
            self.check(silent and all(1.0 <= x <= 1 + 1 * self.slack for x in silent),
                       "silent node: the silence reported is over the timeout, by less than 1 s", str(silent))
            ranks = n.results()["ranks"]
            delays = [unix_time(r["end"]) + 0.001 - stopped_at for r in ranks[2:]]
            self.check([r["status"] for r in ranks[2:]] == ["lost", "lost"] and
                       all(0 <= d <= 1 + 1 * self.slack for d in delays),
                       "silent node: its ranks are lost within heartbeat_timeout (1 s) + 1 s",
                       str([f"{d:.3f} s" for d in delays]))
            node0 = n.agents[[p.pid for p in n.agents].index(other)]
            self.check(n.wait(node0, 10) == 0, "silent node: the other node's agent ends", n.detail())
            # Everything of this run but the frozen agent and what it started ends.
            def others():
                tree = self.agent_tree(frozen)
                return [p for p in processes_with(f"{MARK}={n.run_id}") if p not in tree]
            wait_for(lambda: not others(), 5 * self.slack)
            self.check(not others(), "silent node: the other node's workers are gone", str(others()))
            workers = [p for p in self.agent_tree(frozen) if p in processes_with(f"FLOWRUN_RUN_ID={n.run_id}")]
            self.check(len(workers) == 2, "silent node: the frozen node's two ranks still run while it is frozen",
                       str(workers))
        finally:
            os.kill(frozen, signal.SIGCONT)
        # Woken, the agent finds the head gone, stops its workers and exits 1.
        node1 = n.agents[[p.pid for p in n.agents].index(frozen)]
        rc1 = n.wait(node1, 15)
        text = n.out(f"agent{n.agents.index(node1)}.err")
        self.check(rc1 == 1 and re.fullmatch(
            rf"flowrun agent: {re.escape(HOST)}: lost the head at 127\.0\.0\.1:[0-9]+ "
            r"\((the connection closed|the connection failed: .*|no heartbeat from it for [0-9.]+ s)\); "
            r"stopping this node's workers\n", text) is not None,
            "silent node: woken up, its agent stops its workers and exits 1", n.detail())
        n.sanitizer_check("silent node")
        n.check_nothing_left("silent node")

    def agent_tree(self, pid):
        """`pid` and its descendants."""
        children = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    with open(f"/proc/{name}/stat") as f:
                        ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                except (OSError, ValueError, IndexError):
                    continue
                children.setdefault(ppid, []).append(int(name))
        tree, todo = set(), [pid]
        while todo:
            p = todo.pop()
            tree.add(p)
            todo.extend(children.get(p, []))
        return tree

    # --- (e) an agent with the wrong token, or a readable token file -----------------

    def test_wrong_token(self):
        n = self.nodes("token", spec_text("token", sh_yaml('echo "rank $RANK ran"')))
        argv = n.command()
        if not self.check(argv is not None, "wrong token: the head prints the agent command", n.detail()):
            return
        token_file = argv[argv.index("--token-file") + 1]
        wrong = os.path.join(n.dir, "wrong.token")
        fd = os.open(wrong, os.O_WRONLY | os.O_CREAT, 0o600)
        os.write(fd, b"0123456789abcdef0123456789abcdef\n")
        os.close(fd)
        refused = []
        a = subprocess.run([*argv[:argv.index("--token-file")], "--token-file", wrong], cwd=n.dir,
                           env=n.agent_env(), stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=30 * self.slack)
        self.check(a.returncode == 1 and a.stdout == "" and
                   a.stderr == "flowrun agent: the head refused this agent: wrong token\n",
                   "wrong token: the agent is refused and exits 1", f"exit {a.returncode}\n{a.stdout}{a.stderr}")
        refused.append(a.stderr)
        for mode in (0o644, 0o640):
            readable = os.path.join(n.dir, f"readable-{mode:o}.token")
            shutil.copyfile(token_file, readable)
            os.chmod(readable, mode)
            a = subprocess.run([*argv[:argv.index("--token-file")], "--token-file", readable], cwd=n.dir,
                               env=n.agent_env(), stdin=subprocess.DEVNULL, capture_output=True, text=True,
                               timeout=30 * self.slack)
            self.check(a.returncode == 1 and a.stdout == "" and
                       a.stderr == f"flowrun: error: the token file {readable} can be read by other users; "
                                   "it must be private (chmod 600)\n",
                       f"wrong token: a token file with mode {mode:o} is refused by the agent",
                       f"exit {a.returncode}\n{a.stdout}{a.stderr}")
            refused.append(a.stderr)
        # The refused agent took no node: two good agents still run the step.
        n.start_agents(argv)
        rc = n.finish("wrong token")
        expected = n.header() + [
            f"flowrun: step 'train': refused an agent from 127.0.0.1 ({HOST}): wrong token",
            n.joined(),
            "flowrun: step 'train' succeeded in <secs>",
            f"flowrun: run {n.run_id} succeeded: 1 step in <secs>"]
        err = n.head_err()
        self.check(rc == 0, "wrong token: the step runs with the right agents", n.detail())
        self.check(lines_match(expected, err),
                   "wrong token: the head says it refused one agent (the readable files never reached it)",
                   show_lines(expected, err))
        self.check(all(SANITIZER_REPORT.search(text) is None for text in refused),
                   "wrong token: no sanitizer report from the refused agents", "\n".join(refused)[:6000])
        n.check_nothing_left("wrong token")

    # --- (f) Ctrl-C of the head ----------------------------------------------------

    def test_ctrl_c(self):
        n = self.nodes("ctrlc", spec_text("ctrlc", sh_yaml(READY + "exec sleep 30")))
        if not n.begin("ctrl-c"):
            return
        if not self.check(len(n.wait_ready()) == 4, "ctrl-c: every rank starts", n.detail()):
            return
        # The leftover check sees the ranks while they run (so its "nothing left" means something). A rank
        # writes its ready file just before it execs sleep, so give the exec a moment.
        wait_for(lambda: len(processes_with(f"FLOWRUN_RUN_ID={n.run_id}")) == 4, 5 * self.slack)
        running = processes_with(f"FLOWRUN_RUN_ID={n.run_id}")
        self.check(len(running) == 4, "ctrl-c: the leftover check finds the 4 running ranks", str(running))
        os.killpg(n.head.pid, signal.SIGINT)  # the terminal's Ctrl-C: the head's process group
        rc = n.finish("ctrl-c", timeout=GRACE + 10)
        err = n.head_err()
        expected = n.header() + [
            n.joined(),
            f"flowrun: SIGINT received: stopping step 'train' (SIGTERM, then SIGKILL after {GRACE} s; "
            "press Ctrl-C again to kill at once)",
            "flowrun: step 'train' was interrupted; flowrun stopped ranks 0-3",
            f"flowrun:   logs: {n.run_dir}/train",
            "flowrun: a retry will not help (interrupted): flowrun was stopped by SIGINT: someone meant to stop it",
            f"flowrun: the run as one page: {n.run_dir}/report.html",
            f"flowrun: run {n.run_id} was interrupted after <secs> (exit code 130): failed 'train'"]
        self.check(rc == 130, "ctrl-c: flowrun exits 130", n.detail())
        self.check(lines_match(expected, err), "ctrl-c: the head's messages", show_lines(expected, err))
        self.check(agents_quiet(n), "ctrl-c: both agents stop their ranks and end in order", n.detail())
        ranks = n.results()["ranks"]
        self.check([(r["status"], r["signal"]) for r in ranks] == [("signaled", "SIGTERM")] * 4,
                   "ctrl-c: every rank on both nodes got SIGTERM", json.dumps(ranks)[:2000])
        n.check_nothing_left("ctrl-c")

    def test_ctrl_c_before_join(self):
        # Ctrl-C while the head still waits for its agents: nothing has started, and the step ends as
        # interrupted with 128+SIGINT, as a Ctrl-C on one node does.
        n = self.nodes("ctrlc-join", spec_text("ctrlc-join", sh_yaml("exec sleep 30")))
        if not self.check(n.command() is not None, "ctrl-c before join: the head prints the agent command",
                          n.detail()):
            return
        os.killpg(n.head.pid, signal.SIGINT)
        rc = n.finish("ctrl-c before join", timeout=GRACE + 10)
        err = n.head_err()
        self.check(rc == 130, "ctrl-c before join: flowrun exits 130", n.detail())
        last = err.rstrip("\n").rsplit("\n", 1)[-1]
        self.check(re.fullmatch(rf"flowrun: run {re.escape(n.run_id)} was interrupted after [0-9.]+ s \(exit code 130\): "
                                r"failed 'train'", last) is not None,
                   "ctrl-c before join: the last line says the run was interrupted", err)
        with open(os.path.join(n.run_dir, "run.json")) as f:
            run = json.load(f)
        self.check((run.get("state"), run.get("exit_code"), run.get("steps")) == ("finished", 130, {"train": "failed"}),
                   "ctrl-c before join: run.json has exit code 130 and the step failed", json.dumps(run)[:2000])
        n.check_nothing_left("ctrl-c before join")

    # --- (g) a symlink out of FLOWRUN_OUTPUT_DIR ------------------------------------

    def test_symlink_upload(self):
        script = ('echo "rank $RANK" > "$FLOWRUN_OUTPUT_DIR/r$RANK.txt"; '
                  'if [ "$RANK" = 2 ]; then ln -s /etc/passwd "$FLOWRUN_OUTPUT_DIR/passwd"; fi')
        n = self.nodes("symlink", spec_text("symlink", sh_yaml(script), collect="all"))
        if not n.begin("symlink"):
            return
        rc = n.finish("symlink")
        err = n.head_err()
        expected = n.header() + [
            n.joined(),
            "flowrun: step 'train' failed:",
            f"flowrun:   node {HOST}: rank 2: FLOWRUN_OUTPUT_DIR/passwd is a symlink to /etc/passwd, outside the "
            "output directory; refused",
            "flowrun: a retry will not help (repeats): <why>",
            f"flowrun: the run as one page: {n.run_dir}/report.html",
            f"flowrun: run {n.run_id} failed after <secs> (exit code 1): failed 'train'"]
        self.check(rc == 1, "symlink: the step fails", n.detail())
        self.check(lines_match(expected, err), "symlink: the head names the rank, the link and its target",
                   show_lines(expected, err))
        found = []
        for root, dirs, files in os.walk(os.path.join(n.run_dir, "train")):
            found += [os.path.relpath(os.path.join(root, f), n.run_dir) for f in files + dirs
                      if f == "passwd" or os.path.islink(os.path.join(root, f))]
        self.check(found == [], "symlink: /etc/passwd is nowhere in the run directory", str(found))
        self.check(not os.path.exists(os.path.join(n.run_dir, "train", "outputs")),
                   "symlink: nothing is gathered into outputs/ for a failed step")
        n.check_nothing_left("symlink")

    def test_upload_escape(self):
        """A node (a fake agent with the run's token) announces an upload of ../../x: refused, nothing written."""
        n = self.nodes("escape", spec_text("escape", sh_yaml("true"), collect="all"))
        argv = n.command()
        if not self.check(argv is not None, "escape: the head prints the agent command", n.detail()):
            return
        n.start_agents(argv, count=1)
        endpoint = argv[argv.index("--rdzv-endpoint") + 1]
        token_file = argv[argv.index("--token-file") + 1]
        version = subprocess.run([self.flowrun, "--version"], capture_output=True, text=True).stdout.split()[1]
        fake = n._start([sys.executable, FAKE_AGENT, endpoint, token_file, "--upload", "../../x", "--node", "evil"],
                        n.agent_env(FLOWRUN_VERSION=version), "fake")
        n.agents.append(fake)
        n.agent_names.append("fake")
        rc = n.finish("escape")
        err = n.head_err()
        want = ("flowrun:   node evil: upload of '../../x' refused: upload path '../../x' has a '..' component")
        self.check(rc == 1, "escape: the step fails", n.detail())
        self.check(want in err.splitlines(), "escape: the head refuses the path and names the node", n.detail())
        escaped = [p for p in (os.path.join(n.run_dir, "x"), os.path.join(n.run_dir, "train", "x"),
                               os.path.join(n.dir, "x")) if os.path.exists(p)]
        self.check(escaped == [], "escape: no file x outside the rank's directory", str(escaped))
        n.check_nothing_left("escape")

    # --- (h) max_restarts across both nodes ----------------------------------------

    def test_restart(self):
        # Attempt 0: rank 3 fails once every rank is ready, the others wait to
        # be stopped; attempt 1: every rank succeeds.
        script = ('echo "$TORCHELASTIC_RESTART_COUNT" >> "runs.$RANK"; '
                  'if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then ' + READY +
                  'if [ "$RANK" = 3 ]; then ' + WAIT_ALL + 'echo "rank 3 fails once" >&2; exit 3; fi; '
                  'exec sleep 30; fi; echo "rank $RANK attempt $TORCHELASTIC_RESTART_COUNT"')
        n = self.nodes("restart", spec_text("restart", sh_yaml(script), extra="      max_restarts: 1\n"))
        if not n.begin("restart"):
            return
        rc = n.finish("restart")
        err = n.head_err()
        expected = n.header() + [
            n.joined(),
            f"[{HOST} train r3] rank 3 fails once",
            f"flowrun: step 'train' failed (rank 3 on {HOST} exited with code 3); restarting all 4 "
            "workers on 2 nodes (restart 1 of 1): every failure restarts",
            "flowrun: step 'train' succeeded in <secs>",
            f"flowrun: run {n.run_id} succeeded: 1 step in <secs>"]
        self.check(rc == 0, "restart: the step succeeds after one restart", n.detail())
        self.check(lines_match(expected, err), "restart: the head says which rank failed and restarts every node",
                   show_lines(expected, err))
        runs = [read(os.path.join(n.dir, f"runs.{r}")) if os.path.exists(os.path.join(n.dir, f"runs.{r}")) else ""
                for r in range(4)]
        self.check(runs == ["0\n1\n"] * 4, "restart: every rank on both nodes ran twice (attempts 0 and 1)",
                   str(runs))
        out = sorted(line for line in n.out("head.out").splitlines())
        self.check(out == [f"[{HOST} train r{r}] rank {r} attempt 1" for r in range(4)],
                   "restart: the second attempt's lines", "\n".join(out))
        self.check([read(os.path.join(n.run_dir, "train", f"rank{r}", "stdout.log")) for r in range(4)] ==
                   [f"rank {r} attempt 1\n" for r in range(4)],
                   "restart: stdout.log holds the last attempt")
        res = n.results()
        self.check(res["outcome"] == "succeeded" and res["restarts"] == 1 and len(res["attempts"]) == 2
                   and res["attempts"][0]["outcome"] == "failed" and res["attempts"][1]["outcome"] == "succeeded"
                   and res["attempts"][0]["cause"] == "exit_code" and res["attempts"][0]["restarted"]
                   and res["attempts"][0]["restart_reason"] == "every failure restarts",
                   "restart: results.json records both attempts, the first one's cause and the decision",
                   json.dumps(res)[:3000])
        self.check(agents_quiet(n), "restart: both agents end in order", n.detail())
        n.check_nothing_left("restart")

    def test_nccl_dumps(self):
        # forensics: nccl: each rank "dumps" into its agent's scratch directory, as
        # ProcessGroupNCCL's watchdog does on a timeout; rank 3 fails once all have.
        script = ('echo "$TORCH_NCCL_DEBUG_INFO_TEMP_FILE" > "$TORCH_NCCL_DEBUG_INFO_TEMP_FILE$RANK"; ' + READY +
                  'if [ "$RANK" = 3 ]; then ' + WAIT_ALL + 'exit 3; fi; exec sleep 30')
        n = self.nodes("nccl", spec_text("nccl", sh_yaml(script), forensics="{stacks: false, nccl: true}"))
        if not n.begin("nccl"):
            return
        rc = n.finish("nccl")
        err = n.head_err()
        train = os.path.join(n.run_dir, "train")
        self.check(rc == 3, "nccl: the step fails with rank 3's code", n.detail())
        dumps = [os.path.join(train, f"rank{r}", f"nccl_trace_rank_{r}") for r in range(4)]
        got = [read(p).strip() if os.path.exists(p) else None for p in dumps]
        tmp = os.path.realpath(n.tmp)
        self.check(all(g and os.path.realpath(g).startswith(tmp + "/") and g.endswith(f"/train/rank{r}/nccl_trace_rank_")
                       for r, g in enumerate(got)),
                   "nccl: every rank's dump, written in its agent's scratch directory, was uploaded to the head",
                   str(got))
        self.check([w["nccl_trace"] for w in n.results()["ranks"]] == dumps,
                   "nccl: results.json names each rank's dump at the head", json.dumps(n.results()["ranks"])[:2000])
        line = (f"flowrun:   NCCL flight recorder dumps of ranks 0-3: {train}/rank*/nccl_trace_rank_*; read them "
                f"with: python -m torch.distributed.flight_recorder.fr_trace -p nccl_trace_rank_ {train}")
        self.check(line in err.splitlines(), "nccl: the head's report names the dumps and fr_trace's command", err)
        self.check(agents_quiet(n), "nccl: both agents end in order", n.detail())
        n.check_nothing_left("nccl")

    # --- more: the head killed or frozen, joining, the step's timeout ------------------

    def test_head_killed(self):
        n = self.nodes("headkill", spec_text("headkill", sh_yaml(READY + "exec sleep 30")))
        if not n.begin("head killed"):
            return
        if not self.check(len(n.wait_ready()) == 4, "head killed: every rank starts", n.detail()):
            return
        os.kill(n.head.pid, signal.SIGKILL)
        codes = [n.wait(p, GRACE + 5) for p in n.agents]
        port = n.command()[3].rsplit(":", 1)[1]
        want = line_pattern(f"flowrun agent: {HOST}: lost the head at 127.0.0.1:{port} (<closed>); "
                            "stopping this node's workers\n")
        self.check(codes == [1, 1] and all(want.fullmatch(n.out(f"agent{i}.err")) for i in (0, 1)),
                   "head killed: each agent stops its ranks and exits 1", n.detail())
        n.sanitizer_check("head killed")
        n.check_nothing_left("head killed")

    def test_head_frozen(self):
        n = self.nodes("headstop", spec_text("headstop", sh_yaml(READY + "exec sleep 30")))
        if not n.begin("head frozen"):
            return
        if not self.check(len(n.wait_ready()) == 4, "head frozen: every rank starts", n.detail()):
            return
        stopped_at = time.monotonic()
        os.kill(n.head.pid, signal.SIGSTOP)
        try:
            gone = wait_for(lambda: all(p.poll() is not None for p in n.agents), 10 * self.slack, step=0.01)
            took = time.monotonic() - stopped_at
            self.check(gone and took <= 1 + 1 * self.slack,
                       "head frozen: both agents give up within heartbeat_timeout (1 s) + 1 s",
                       f"{took:.2f} s\n{n.detail()}")
            port = n.command()[3].rsplit(":", 1)[1]
            pattern = (rf"flowrun agent: {re.escape(HOST)}: lost the head at 127\.0\.0\.1:{port} "
                       r"\(no heartbeat from it for ([0-9.]+) s\); stopping this node's workers\n")
            found = [re.fullmatch(pattern, n.out(f"agent{i}.err")) for i in range(2)]
            self.check([p.returncode for p in n.agents] == [1, 1] and all(found) and
                       all(1.0 <= float(m.group(1)) <= 1 + 1 * self.slack for m in found),
                       "head frozen: each agent says it heard nothing for over 1 s and exits 1", n.detail())
            left = wait_for(lambda: not processes_with(f"FLOWRUN_RUN_ID={n.run_id}"), 5 * self.slack)
            self.check(left, "head frozen: the agents stop every rank",
                       str(processes_with(f"FLOWRUN_RUN_ID={n.run_id}")))
        finally:
            os.kill(n.head.pid, signal.SIGCONT)
        rc = n.wait(n.head, 15)
        err = n.head_err()
        self.check(rc == 1 and re.search(rf"^flowrun: step 'train': node {re.escape(HOST)} \(node rank [01] of 2\) "
                                         rf"lost: {AGENT_CLOSED}$", err, re.M) is not None,
                   "head frozen: woken up, the head finds its nodes gone and exits 1", n.detail())
        n.sanitizer_check("head frozen")
        n.check_nothing_left("head frozen")

    def test_join(self):
        # Long enough for the agents below to join or be refused before it runs out, under a sanitizer too.
        join_timeout = f"{2 * self.slack:g}"
        spec = spec_text("join", sh_yaml('echo "rank $RANK ran"')).replace(
            "  heartbeat_timeout: 1\n", f"  heartbeat_timeout: 1\n  join_timeout: {join_timeout}\n")
        n = self.nodes("join", spec)
        argv = n.command()
        if not self.check(argv is not None, "join: the head prints the agent command", n.detail()):
            return
        # Two agents claim node rank 0: whichever comes second is refused.
        claims = n.start_agents(argv + ["--node-rank", "0"], count=2)
        wait_for(lambda: any(p.poll() is not None for p in claims), 10 * self.slack)
        a = subprocess.run(argv + ["--node-rank", "5"], cwd=n.dir, env=n.agent_env(), stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=30 * self.slack)
        self.check((a.returncode, a.stdout, a.stderr) == (
            1, "", "flowrun agent: the head refused this agent: it asks for node rank 5, but the step has 2 nodes\n"),
            "join: an agent asking for a node rank the step does not have is refused",
            f"exit {a.returncode}\n{a.stdout}{a.stderr}")
        rc = n.finish("join")
        err = n.head_err()
        port = argv[3].rsplit(":", 1)[1]
        expected = n.header() + [
            f"flowrun: step 'train': refused an agent from 127.0.0.1 ({HOST}): node rank 0 has already joined "
            f"(from {HOST})",
            f"flowrun: step 'train': refused an agent from 127.0.0.1 ({HOST}): it asks for node rank 5, but the "
            "step has 2 nodes",
            "flowrun: step 'train' failed:",
            f"flowrun:   1 of 2 nodes did not join within {join_timeout} s: node 1; check that 'flowrun agent' can "
            f"start there and reach 127.0.0.1:{port} (cluster.join_timeout)",
            "flowrun: a retry may help (infrastructure): <why>",
            f"flowrun: the run as one page: {n.run_dir}/report.html",
            f"flowrun: run {n.run_id} failed after <secs> (exit code 1): failed 'train'"]
        self.check(rc == 1, "join: a node that never joins fails the step", n.detail())
        self.check(lines_match(expected, err), "join: the head names the node that did not join",
                   show_lines(expected, err))
        outcome = sorted((p.returncode, n.out(f"{name}.out"), n.out(f"{name}.err"))
                         for p, name in zip(n.agents, n.agent_names))
        self.check(outcome == [(0, "", ""), (1, "", "flowrun agent: the head refused this agent: node rank 0 has "
                                                     f"already joined (from {HOST})\n")],
                   "join: of two agents claiming node rank 0 one is refused, the other is sent away in order",
                   str(outcome))
        n.check_nothing_left("join")

    def test_timeout(self):
        # The step's timeout counts from the step's start, the agents' joining included: a sanitizer gets longer.
        timeout = f"{1 * self.slack:g}"
        spec = spec_text("timeout", sh_yaml(READY + "exec sleep 30")).replace(
            "    parallel:\n", f"    timeout: {timeout}\n    parallel:\n")
        n = self.nodes("timeout", spec)
        if not n.begin("timeout"):
            return
        rc = n.finish("timeout")
        err = n.head_err()
        expected = n.header() + [
            n.joined(),
            f"flowrun: step 'train' timed out after {timeout}s; flowrun stopped ranks 0-3",
            f"flowrun:   logs: {n.run_dir}/train",
            "flowrun: a retry will not help (timeout): <why>",
            f"flowrun: the run as one page: {n.run_dir}/report.html",
            f"flowrun: run {n.run_id} failed after <secs> (exit code 124): failed 'train'"]
        self.check(rc == 124, "timeout: the step's timeout holds across nodes (exit 124)", n.detail())
        # No rank wrote anything: every one looks hung, named with its node
        # (each node's ranks silent as long as each other; the nodes may differ).
        h = re.escape(HOST)
        last = r"for the last [0-9]\.[0-9] s"
        hung = re.compile(rf"^flowrun:   (ranks 0-3 on {h} wrote nothing {last}|ranks 0, 1 on {h} "
                          rf"wrote nothing {last}, ranks 2, 3 on {h} {last})\n",
                          re.M)
        self.check(hung.search(err) is not None, "timeout: the report names the silent ranks and their nodes", err)
        err = hung.sub("", err, count=1)
        self.check(lines_match(expected, err), "timeout: the head's messages", show_lines(expected, err))
        ranks = n.results()["ranks"]
        self.check([(r["status"], r["signal"], r["node"]) for r in ranks] == [("signaled", "SIGTERM", HOST)] * 4,
                   "timeout: every rank on both nodes got SIGTERM", json.dumps(ranks)[:2000])
        self.check(agents_quiet(n), "timeout: both agents end in order", n.detail())
        n.check_nothing_left("timeout")

    # --- flow control: gigabytes through the agents and the head -------------------------

    def flood_sizes(self, full):
        """`full` bytes, or a sixteenth of it for a sanitized build (several times slower); and whether
        peak memory is checked (not under a sanitizer, whose allocator keeps freed memory in quarantine)."""
        return (full // 16, False) if self.sanitized else (full, True)

    def check_peaks(self, label, memory, peak, bounded):
        ok = all(mib > 0 for mib in peak.values()) and (
            not bounded or all(mib < PEAK_LIMIT_MIB for mib in peak.values()))
        self.check(ok, f"{label}: the head's and each agent's peak memory (VmHWM) stays below {PEAK_LIMIT_MIB} MiB"
                   + ("" if bounded else " (not checked under a sanitizer)"), memory.describe())

    def test_output_flood(self):
        # 4 ranks, 2 on each node, write 256 MiB each: 512 MiB through each agent, 1 GiB through the
        # head, whose console is /dev/null. The head is frozen for 1.5 s on the way, so however fast
        # it is, the agents must hold their ranks back instead of queueing what they write.
        per_rank, bounded = self.flood_sizes(256 << 20)
        run = "[" + ", ".join(q(w) for w in (PY, "-c", FLOOD_RANK, str(per_rank))) + "]"
        spec = spec_text("flood", run).replace("  heartbeat_timeout: 1\n", "  heartbeat_timeout: 4\n")
        n = self.nodes("flood", spec, head_stdout=os.devnull)
        if not n.begin("flood"):
            return
        memory = PeakMemory({"head": n.head, "agent0": n.agents[0], "agent1": n.agents[1]})
        log0 = os.path.join(n.run_dir, "train", "rank0", "stdout.log")
        flowing = wait_for(lambda: n.head.poll() is not None or
                           (os.path.exists(log0) and os.path.getsize(log0) >= per_rank // 8), 60 * self.slack)
        frozen = flowing and n.head.poll() is None
        if frozen:
            freeze(n.head, 1.5)
        rc = n.finish("flood", timeout=120)
        peak = memory.stop()
        self.check(frozen, "flood: the head is frozen while the ranks write", n.detail())
        self.check(rc == 0, "flood: the step succeeds", n.detail())
        expected = n.header() + [
            n.joined(),
            "flowrun: step 'train' succeeded in <secs>",
            f"flowrun: run {n.run_id} succeeded: 1 step in <secs>"]
        err = n.head_err()
        self.check(lines_match(expected, err), "flood: the head's messages (no heartbeat lost on the busy link)",
                   show_lines(expected, err))
        for r in range(4):
            sent = read(os.path.join(n.dir, f"sent.{r}")).split() if os.path.exists(
                os.path.join(n.dir, f"sent.{r}")) else []
            got = file_crc(os.path.join(n.run_dir, "train", f"rank{r}", "stdout.log"))
            self.check(len(sent) == 2 and (int(sent[0]), sent[1]) == got and got[0] == per_rank,
                       f"flood: rank {r}'s stdout.log on the head holds every byte it wrote, in order "
                       "(size and CRC-32)", f"wrote {sent}, the head has {got}")
        self.check_peaks("flood", memory, peak, bounded)
        self.check(agents_quiet(n), "flood: both agents exit 0 and say nothing", n.detail())
        n.check_nothing_left("flood")

    def test_upload_large(self):
        # Rank 0 leaves a 200 MiB file of random bytes in its output directory; its agent uploads it to
        # the head, which is frozen for 1.5 s on the way: the agent reads the file as the head takes it.
        size, bounded = self.flood_sizes(200 << 20)
        run = "[" + ", ".join(q(w) for w in (PY, "-c", BLOB_RANK, str(size), "0")) + "]"
        spec = spec_text("upload", run, collect="all").replace("  heartbeat_timeout: 1\n", "  heartbeat_timeout: 4\n")
        n = self.nodes("upload", spec)
        if not n.begin("upload"):
            return
        memory = PeakMemory({"head": n.head, "agent0": n.agents[0], "agent1": n.agents[1]})
        blob = os.path.join(n.run_dir, "train", "rank0", "out", "blob")
        arriving = wait_for(lambda: n.head.poll() is not None or
                            (os.path.exists(blob) and os.path.getsize(blob) >= size // 8), 60 * self.slack,
                            step=0.005)
        frozen = arriving and n.head.poll() is None
        if frozen:
            freeze(n.head, 1.5)
        rc = n.finish("upload", timeout=120)
        peak = memory.stop()
        self.check(frozen, "upload: the head is frozen while the file arrives", n.detail())
        self.check(rc == 0, "upload: the step succeeds", n.detail())
        sent = read(os.path.join(n.dir, "sent.0")).split() if os.path.exists(os.path.join(n.dir, "sent.0")) else []
        gathered = os.path.join(n.run_dir, "train", "outputs", "rank0", "blob")
        got = file_crc(gathered) if os.path.exists(gathered) else None
        self.check(len(sent) == 2 and got == (int(sent[0]), sent[1]) and got[0] == size,
                   "upload: the head has rank 0's file whole (size and CRC-32)", f"wrote {sent}, the head has {got}")
        self.check_peaks("upload", memory, peak, bounded)
        self.check(agents_quiet(n), "upload: both agents exit 0 and say nothing", n.detail())
        n.check_nothing_left("upload")

    def test_stall(self):
        # Rank 3 (on node 1) says a line and stops itself (SIGSTOP); the others
        # write a line every 0.1 s, shown only for rank 3 (logs: console).
        script = ('if [ "$RANK" = 3 ]; then echo "rank 3 stops itself"; kill -STOP $$; fi; '
                  'while :; do echo "rank $RANK beat"; sleep 0.1; done')
        spec = spec_text("stall", sh_yaml(script), extra="    stall_timeout: 2\n    logs:\n      console: 3\n")
        n = self.nodes("stall", spec)
        if not n.begin("stall"):
            return
        rc = n.finish("stall")
        err = n.head_err()
        expected = n.header() + [
            n.joined(),
            f"flowrun: step 'train' stalled: rank 3 on {HOST} (stopped) wrote nothing for <x> s (stall_timeout: 2s); "
            "stopping the step",
            f"flowrun: step 'train' stalled: rank 3 on {HOST} (stopped) wrote nothing for <x> s (stall_timeout: 2s); "
            "flowrun stopped ranks 0-3",
            f"flowrun:   logs: {n.run_dir}/train",
            "flowrun: a retry may help (timeout): <why>",
            f"flowrun: the run as one page: {n.run_dir}/report.html",
            f"flowrun: run {n.run_id} failed after <secs> (exit code 124): failed 'train'"]
        self.check(rc == 124, "stall: a stall on a node ends the step as a timeout does (exit 124)", n.detail())
        self.check(lines_match(expected, err), "stall: the head names the stalled rank, its node and state",
                   show_lines(expected, err))
        self.check(n.out("head.out") == f"[{HOST} train r3] rank 3 stops itself\n",
                   "stall: rank 3's line reached the head's console", n.out("head.out"))
        res = n.results()
        ranks = res["ranks"]
        self.check(res["outcome"] == "stalled" and res["exit_code"] == 124 and res["stall_timeout_ms"] == 2000,
                   "stall: results.json: outcome stalled, exit code 124", json.dumps(res)[:1500])
        self.check([(r["stalled"], r["suspended"], r["node"]) for r in ranks] ==
                   [(False, False, HOST)] * 3 + [(True, True, HOST)]
                   and 2000 <= ranks[3]["silent_ms"] < 2000 + 600 * self.slack
                   and all(r["silent_ms"] < 1000 for r in ranks[:3]),
                   "stall: results.json marks rank 3 stalled and stopped, with its silence", json.dumps(ranks)[:3000])
        took = unix_time(res["end"]) - unix_time(res["start"])
        self.check(all((r["signal"], r["role"]) == ("SIGTERM", "victim") for r in ranks)
                   and 2.0 <= took < 2 + 1.5 * self.slack,
                   f"stall: every rank on both nodes got SIGTERM, the stopped one too, well before the {GRACE} s grace "
                   "ran out", f"{took:.2f} s\n" + json.dumps(ranks)[:3000])
        self.check(agents_quiet(n), "stall: both agents end in order", n.detail())
        n.check_nothing_left("stall")

    # --- an agent given several endpoints ------------------------------

    def test_endpoint_list(self):
        """--rdzv-endpoint with several HOST:PORT, as the head gives them when it has several addresses: the agent
        tries each in turn (a port nobody listens on, a name that does not resolve, then the head's) and joins;
        when none answers it names each one and why."""
        n = self.nodes("endpoints", spec_text("endpoints", sh_yaml('echo "rank $RANK ran"')))
        argv = n.command()
        if not self.check(argv is not None, "endpoint list: the head prints the agent command", n.detail()):
            return
        at = argv.index("--rdzv-endpoint") + 1
        dead = "127.0.0.1:1,no-such-host.invalid:1"
        n.start_agents(argv[:at] + [f"{dead},{argv[at]}"] + argv[at + 1:])
        rc = n.finish("endpoint list")
        self.check(rc == 0 and agents_quiet(n),
                   "endpoint list: both agents reach the head at its address, the third of the list, and the "
                   "step succeeds; the agents say nothing", n.detail())
        token = os.path.join(n.dir, "token")
        with open(os.open(token, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write("not-the-run's\n")
        a = subprocess.run([self.flowrun, "agent", "--rdzv-endpoint", dead, "--token-file", token,
                            "--connect-timeout", "0.3"], env=n.agent_env(), stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=30 * self.slack)
        want = (r"flowrun: error: cannot reach the head at any of its addresses \(127\.0\.0\.1:1: Connection "
                r"refused; no-such-host\.invalid:1: [^;()]+\)\n")
        self.check(a.returncode == 1 and re.fullmatch(want, a.stderr) is not None,
                   "endpoint list: an agent that reaches none names each address and why",
                   f"want exit 1 and {want}\ngot exit {a.returncode}: {a.stderr}")
        n.check_nothing_left("endpoint list")
