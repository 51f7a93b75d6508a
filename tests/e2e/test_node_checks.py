"""End-to-end tests of the node checks (parallel.node_checks) on one host: no cluster needed.

As tests/e2e/test_nodes_local.py: the head is `flowrun SPEC` with engine: manual, and the test starts
the agents itself. Each agent finds its GPUs through the stand-in NVML (tests/fixtures/gpu/fake_nvml.cpp,
as libnvidia-ml.so.1 on LD_LIBRARY_PATH, 4 GPUs), and the one of node rank 1 gets faults
(FAKE_NVML_FAULTS): an uncorrectable ECC error, a busy GPU, a missing GPU, a GPU that cannot be opened.
A full scratch is simulated by a free-space threshold above what the disk has
(FLOWRUN_NODE_CHECK_MIN_FREE_MB). The tests check the console's exact lines, results.json, the run's
excluded_nodes file, which agents ran ranks, and that nothing is left running.

  python3 -m pytest tests/e2e/test_node_checks.py [--flowrun PATH] [--fake-gpu-libs DIR] [-k NAME]
"""
import os
import subprocess
import sys

import pytest

from flowrun_testlib.launcher import wait_for
from flowrun_testlib.node_faults import node_faults
from flowrun_testlib.nodes import HOST, Nodes, read, sh_yaml
from flowrun_testlib.suite import E2E

pytestmark = pytest.mark.node_checks

# Each rank says which agent ran it, in Python (a step whose run starts with python3 is a torch step).
TORCH_RUN = ('["python3", "-c", "import os; e = os.environ; '
             'open(\'ran.\' + e[\'RANK\'], \'w\').write(e[\'FLOWRUN_NODE_RANK\'] + \' \' + e[\'FLOWRUN_AGENT_ID\'] + \' \' + e[\'WORLD_SIZE\'])"]')
# Each rank says which agent ran it.
RAN = sh_yaml('echo "$FLOWRUN_NODE_RANK $FLOWRUN_AGENT_ID $WORLD_SIZE" > "ran.$RANK"')


def gpu_spec(name, extra="", nodes="2", run=RAN):
    """A step `train` of 4 GPU workers on each of `nodes` (a count, or a range "MIN:MAX") nodes of 4 GPUs."""
    gpus = 4 * int(nodes.strip('"').split(":")[-1])
    return (f"name: {name}\ncluster:\n  engine: manual\n  address: 127.0.0.1\n  heartbeat_timeout: 1\n"
            f"  gpus_per_node: 4\nsteps:\n  - name: train\n    run: {run}\n    forensics: off\n"
            f"    parallel:\n      gpus: {gpus}\n      nodes: {nodes}\n{extra}")


def cpu_spec(name, extra=""):
    """A step `train` of 4 CPU workers on 2 nodes."""
    return (f"name: {name}\ncluster:\n  engine: manual\n  address: 127.0.0.1\n  heartbeat_timeout: 1\n"
            f"steps:\n  - name: train\n    run: {RAN}\n    forensics: off\n    parallel:\n      cpus: 4\n"
            f"      nodes: 2\n{extra}")


FAULTS = node_faults(4)


class TestNodeChecks(E2E):
    def set_up(self):
        lib = os.path.join(os.path.abspath(self.config.getoption("fake_gpu_libs")), "libflowrun_fake_nvml.so")
        if not os.path.exists(lib):
            pytest.skip(f"no stand-in NVML at {lib} (--fake-gpu-libs)")
        self.nvml_dir = os.path.join(self.scratch, "nvml")
        os.makedirs(self.nvml_dir)
        os.symlink(lib, os.path.join(self.nvml_dir, "libnvidia-ml.so.1"))

    def nodes(self, name, spec, **kw):
        n = Nodes(self, name, spec, **kw)
        self.open.append(n)
        return n

    def start(self, n, label, claims, faults="", env=None):
        """One agent per node rank in `claims` (2 and up: a spare), with the stand-in NVML; node rank 1's
        gets `faults`, and each the variables `env` gives its rank. Returns {node rank claimed: agent pid}; None when the head never printed the command."""
        argv = n.command()
        if not self.check(argv is not None, f"{label}: the head prints the agent command", n.detail()):
            return None
        pids = {}
        for rank in claims:
            extra = dict((env or {}).get(rank, {}))
            (p,) = n.start_agents(argv + ["--node-rank", str(rank)], count=1, LD_LIBRARY_PATH=self.nvml_dir,
                                  FAKE_NVML_SCENARIO="bridges", FAKE_NVML_FAULTS=faults if rank == 1 else None,
                                  **extra)
            pids[rank] = p.pid
        return pids

    def ran(self, n, ranks):
        """{rank: (node rank, agent pid, WORLD_SIZE)} from the ran.R files."""
        out = {}
        for r in range(ranks):
            path = os.path.join(n.dir, f"ran.{r}")
            if os.path.exists(path):
                node, agent, world = read(path).split()
                out[r] = (int(node), int(agent.rsplit("-", 2)[1]), int(world))
        return out

    def excluded_file(self, n):
        path = os.path.join(n.run_dir, "excluded_nodes")
        return read(path) if os.path.exists(path) else None

    @pytest.mark.parametrize("fault", sorted(FAULTS))
    def test_spare_takes_the_seat_of_a_faulty_node(self, fault):
        faults, why = FAULTS[fault]
        n = self.nodes(f"spare-{fault}", gpu_spec(f"spare-{fault}", "      spare_nodes: 1\n"))
        pids = self.start(n, fault, [0, 1, 2], faults)
        if pids is None:
            return
        rc = n.finish(fault)
        err = n.head_err()
        self.check(rc == 0, f"{fault}: the step succeeds on the spare", n.detail())
        for line in [f"flowrun: step 'train': node {HOST} (node rank 1 of 2) failed its check, so it is left out: "
                     f"{why}",
                     f"flowrun: step 'train': spare node {HOST} takes node rank 1 of node {HOST}, which failed its "
                     "check (0 spares left)"]:
            self.check(line in err.splitlines(), f"{fault}: the head says: {line}", err)
        ran = self.ran(n, 8)
        self.check(len(ran) == 8 and {a for _, a, _ in ran.values()} == {pids[0], pids[2]} and
                   all(node == (0 if a == pids[0] else 1) and w == 8 for node, a, w in ran.values()),
                   f"{fault}: every rank ran once, on node 0 and on the spare as node rank 1; none on the faulty "
                   "node", f"ran={ran} pids={pids}")
        res = n.results()
        verdicts = res["node_checks"]
        failed = [v for v in verdicts if not v["ok"]]
        self.check(len(verdicts) == 3 and len(failed) == 1 and failed[0]["node_rank"] == 1 and
                   any(f"{c['name']}: {c['detail']}" == why for c in failed[0]["checks"] if not c["ok"]) and
                   all(v["node"] == HOST and 0 <= v["check_s"] < 30 for v in verdicts) and
                   sorted(v["node_rank"] for v in verdicts if v["ok"]) == [0, 1] and
                   res["excluded_nodes"] == [HOST] and
                   res["attempts"][0]["replaced_nodes"] == [{"node_rank": 1, "lost": HOST, "spare": HOST}],
                   f"{fault}: results.json has every node's verdict, the spare's place and the node left out",
                   str(res)[:3000])
        self.check(self.excluded_file(n) == HOST + "\n",
                   f"{fault}: the run's excluded_nodes names the faulty node, for sbatch --exclude",
                   str(self.excluded_file(n)))
        n.check_nothing_left(fault)

    def test_a_spare_that_joins_later_takes_the_seat(self):
        # The faulty node is left out before the spare's agent even starts: the head waits for it
        # (within cluster.join_timeout).
        n = self.nodes("late", gpu_spec("late", "      spare_nodes: 1\n"))
        pids = self.start(n, "late", [0, 1], "ecc:2")
        if pids is None:
            return
        left_out = f"flowrun: step 'train': node {HOST} (node rank 1 of 2) failed its check, so it is left out: "
        wait_for(lambda: left_out in n.head_err() or n.head.poll() is not None, 30 * self.slack)
        self.check(left_out in n.head_err() and n.head.poll() is None, "late: node 1 is left out, the head waits",
                   n.detail())
        (spare,) = n.start_agents(n.command() + ["--node-rank", "2"], count=1, LD_LIBRARY_PATH=self.nvml_dir,
                                  FAKE_NVML_SCENARIO="bridges")
        rc = n.finish("late")
        self.check(rc == 0, "late: the step succeeds on the spare", n.detail())
        self.check({a for _, a, _ in self.ran(n, 8).values()} == {pids[0], spare.pid},
                   "late: the ranks ran on node 0 and the spare", str(self.ran(n, 8)))
        n.check_nothing_left("late")

    def torch_stub(self):
        """The spec's python: a stand-in that says torch is missing where FAKE_NO_TORCH is set, and runs
        the Python of these tests otherwise (each node's check imports torch for real); skips the test
        when that Python has no torch."""
        stub = os.path.join(self.scratch, "python3")
        with open(stub, "w") as f:
            f.write('#!/bin/sh\nif [ -n "$FAKE_NO_TORCH" ] && [ "${2%%;*}" = "import torch" ]; then\n'
                    '  echo "ModuleNotFoundError: No module named \'torch\'" >&2; exit 1\nfi\n'
                    f'exec {sys.executable} "$@"\n')
        os.chmod(stub, 0o755)
        if subprocess.run([stub, "-c", "import torch"], capture_output=True).returncode != 0:
            pytest.skip(f"{sys.executable} has no torch")
        return stub

    def test_a_python_without_torch_is_left_out_and_the_check_time_is_measured(self):
        # Node 1's Python lacks torch, node 0's and the spare's have it.
        stub = self.torch_stub()
        run = TORCH_RUN
        n = self.nodes("torch", f"python: {stub}\n" + gpu_spec("torch", "      spare_nodes: 1\n", run=run))
        pids = self.start(n, "torch", [0, 1, 2], env={1: {"FAKE_NO_TORCH": "1"}})
        if pids is None:
            return
        rc = n.finish("torch", timeout=180)
        self.check(rc == 0, "torch: the step succeeds on the spare", n.detail())
        line = (f"flowrun: step 'train': node {HOST} (node rank 1 of 2) failed its check, so it is left out: "
                f"torch_import: {stub} -c 'import torch' failed: ModuleNotFoundError: No module named 'torch'; "
                "install torch for that Python on the node, or give the spec's python: one that has it")
        self.check(line in n.head_err().splitlines(), f"torch: the head says: {line}", n.head_err())
        verdicts = n.results()["node_checks"]
        passed = [v for v in verdicts if v["ok"]]
        self.check(len(verdicts) == 3 and len(passed) == 2 and
                   all(c["name"] != "torch_import" or c["ok"] for v in passed for c in v["checks"]),
                   "torch: the two good nodes import torch", str(verdicts))
        # The measure: each node's check time, torch's import included.
        print("node check times (s):", [(v["node_rank"], v["ok"], v["check_s"]) for v in verdicts])
        self.check(all(v["check_s"] < 120 for v in verdicts), "torch: each check ends within its deadline",
                   str(verdicts))
        n.check_nothing_left("torch")

    def test_where_no_node_imports_torch_none_is_left_out_for_it(self):
        # A step of Python GPU workers that does not use torch: no node's Python imports it.
        stub = self.torch_stub()
        n = self.nodes("notorch", f"python: {stub}\n" + gpu_spec("notorch", run=TORCH_RUN))
        pids = self.start(n, "notorch", [0, 1], env={0: {"FAKE_NO_TORCH": "1"}, 1: {"FAKE_NO_TORCH": "1"}})
        if pids is None:
            return
        rc = n.finish("notorch", timeout=180)
        self.check(rc == 0, "notorch: the step runs on both nodes", n.detail())
        torch = [c for v in n.results()["node_checks"] for c in v["checks"] if c["name"] == "torch_import"]
        self.check(len(torch) == 2 and all(c["ok"] and c["detail"].startswith(
            "not held against the node, as no node's Python imports torch: ") for c in torch),
                   "notorch: each node's torch_import is recorded, not held against it", str(torch))
        n.check_nothing_left("notorch")

    def test_a_node_whose_check_hangs_is_left_out_at_the_join_timeout(self):
        # Node 1's NVML never answers for GPU 0's ECC errors: after cluster.join_timeout (2 s) the head
        # leaves it out, the spare takes the seat, and the hung agent still ends at its bye.
        spec = gpu_spec("hang", "      spare_nodes: 1\n").replace("  gpus_per_node: 4\n",
                                                                  "  gpus_per_node: 4\n  join_timeout: 2\n")
        n = self.nodes("hang", spec)
        pids = self.start(n, "hang", [0, 1, 2], "hang:0")
        if pids is None:
            return
        rc = n.finish("hang")
        self.check(rc == 0, "hang: the step succeeds on the spare", n.detail())
        line = (f"flowrun: step 'train': node {HOST} (node rank 1 of 2) failed its check, so it is left out: "
                "node_check: no verdict within cluster.join_timeout (2 s): something on the node hangs (an NVML "
                "call on a GPU that fell off the bus, a filesystem that does not answer); look there (nvidia-smi, "
                "df), or leave it out")
        self.check(line in n.head_err().splitlines(), f"hang: the head says: {line}", n.head_err())
        self.check({a for _, a, _ in self.ran(n, 8).values()} == {pids[0], pids[2]},
                   "hang: the ranks ran on node 0 and the spare", str(self.ran(n, 8)))
        n.check_nothing_left("hang")

    def test_no_spare_fails_before_any_rank_starts(self):
        n = self.nodes("nospare", gpu_spec("nospare"))
        pids = self.start(n, "nospare", [0, 1], "noopen:3,ecc:0")
        if pids is None:
            return
        rc = n.finish("nospare")
        err = n.head_err()
        self.check(rc == 1, "nospare: the step fails", n.detail())
        why = ("gpu_count: no GPUs (nvmlDeviceGetHandleByIndex failed for GPU 3: fake NVML error) where the plan "
               "expects 4; check the node's NVIDIA driver (nvidia-smi), or leave the node out; gpu_health: GPU 3 "
               "cannot be opened (fake NVML error): reset it (nvidia-smi -r) or drain the node")
        for line in [f"flowrun: step 'train': node {HOST} (node rank 1 of 2) failed its check, so it is left out: "
                     f"{why}",
                     "flowrun: step 'train' failed:",
                     f"flowrun:   node {HOST} (node rank 1 of 2) failed its check, and no spare node waits to take its place (parallel.spare_nodes), so no rank "
                     "starts; fix what the check names, or leave the node out (sbatch --exclude with the run "
                     "directory's excluded_nodes file), add parallel.spare_nodes, or set parallel.node_checks: "
                     "false to start on it anyway"]:
            self.check(line in err.splitlines(), f"nospare: the head says: {line}", err)
        self.check(self.ran(n, 8) == {}, "nospare: no rank started", str(self.ran(n, 8)))
        res = n.results()
        self.check([v["ok"] for v in sorted(res["node_checks"], key=lambda v: v["node_rank"])] == [True, False] and
                   res["excluded_nodes"] == [HOST] and self.excluded_file(n) == HOST + "\n",
                   "nospare: results.json has both verdicts; excluded_nodes names the node", str(res)[:3000])
        n.check_nothing_left("nospare")

    def test_elastic_starts_without_a_faulty_node(self):
        n = self.nodes("elastic", gpu_spec("elastic", nodes='"1:2"'))
        pids = self.start(n, "elastic", [0, 1], "ecc:0")
        if pids is None:
            return
        rc = n.finish("elastic")
        err = n.head_err()
        self.check(rc == 0, "elastic: the step succeeds on one node", n.detail())
        line = (f"flowrun: step 'train': 1 node failed its check: the step starts on 1 node ({HOST}), "
                'WORLD_SIZE 4 (nodes: "1:2")')
        self.check(line in err.splitlines(), f"elastic: the head says: {line}", err)
        ran = self.ran(n, 8)
        self.check(len(ran) == 4 and {(node, a, w) for node, a, w in ran.values()} == {(0, pids[0], 4)},
                   "elastic: 4 ranks ran, all on node 0's agent", f"ran={ran} pids={pids}")
        self.check(n.results()["excluded_nodes"] == [HOST], "elastic: results.json names the node left out",
                   str(n.results())[:2000])
        n.check_nothing_left("elastic")

    def test_scratch_under_the_free_space_threshold_is_left_out(self):
        # A full scratch, simulated: node 1's agent asks for more free space than any disk here has.
        n = self.nodes("scratch", cpu_spec("scratch", "      spare_nodes: 1\n"))
        pids = self.start(n, "scratch", [0, 1, 2], env={1: {"FLOWRUN_NODE_CHECK_MIN_FREE_MB": str(1 << 30)}})
        if pids is None:
            return
        rc = n.finish("scratch")
        self.check(rc == 0, "scratch: the step succeeds on the spare", n.detail())
        failed = [v for v in n.results()["node_checks"] if not v["ok"]]
        names = [c["name"] for c in failed[0]["checks"] if not c["ok"]] if len(failed) == 1 else []
        self.check(names[:1] == ["scratch_space"] and failed[0]["node_rank"] == 1,
                   "scratch: node 1 fails scratch_space and is left out", str(failed))
        self.check("under the 1048576.0 GiB a node needs (FLOWRUN_NODE_CHECK_MIN_FREE_MB): free space there, "
                   "or point TMPDIR elsewhere" in n.head_err(), "scratch: the head says what to do", n.head_err())
        self.check({a for _, a, _ in self.ran(n, 4).values()} == {pids[0], pids[2]},
                   "scratch: the ranks ran on node 0 and the spare", str(self.ran(n, 4)))
        n.check_nothing_left("scratch")

    def test_node_checks_false_starts_on_a_faulty_node(self):
        n = self.nodes("off", gpu_spec("off", "      node_checks: false\n"))
        pids = self.start(n, "off", [0, 1], "ecc:1")
        if pids is None:
            return
        rc = n.finish("off")
        self.check(rc == 0, "off: the step succeeds", n.detail())
        self.check({a for _, a, _ in self.ran(n, 8).values()} == {pids[0], pids[1]},
                   "off: the ranks ran on both nodes", str(self.ran(n, 8)))
        res = n.results()
        self.check(res["node_checks"] == [] and res["excluded_nodes"] == [] and self.excluded_file(n) is None,
                   "off: no verdict, nothing left out", str(res)[:2000])
        n.check_nothing_left("off")
