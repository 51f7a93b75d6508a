"""End-to-end tests of a gang on one host: no pods, no root.

Every node of a gang runs the same `flowrun SPEC` (or `flowrun run`) with its platform's variables;
here each node is a process of this host, in a session of its own, with a PyTorchJob's,
TrainJob's, AWS Batch's or SkyPilot's variables (the platform's port is a free one, so that tests
can run side by side). Node 0 is the head; the others join it as agents that stay for the whole
flow and exit with its exit code. The emulated pods of tests/e2e/pods/ run the same across
network and mount namespaces; these tests cover what needs neither, in the build phase.

  python3 -m pytest tests/e2e/test_gang_local.py [--flowrun PATH]
"""
import json
import os
import signal
import socket
import subprocess
import sys

import pytest

from flowrun_testlib import clean_env
from flowrun_testlib.launcher import wait_for

pytestmark = pytest.mark.gang_local

TOKEN = "0123456789abcdef0123456789abcdef"
REAPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "helpers", "reaper.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pytorchjob(port, nodes):
    """A Kubeflow PyTorchJob's variables for pod i: RANK and WORLD_SIZE counted in pods."""
    return lambda i: {"RANK": str(i), "WORLD_SIZE": str(nodes), "MASTER_ADDR": "127.0.0.1",
                      "MASTER_PORT": str(port)}


def trainjob(port, nodes):
    """A Kubeflow TrainJob's: torchrun's PET_ variables."""
    return lambda i: {"PET_NODE_RANK": str(i), "PET_NNODES": str(nodes), "PET_MASTER_ADDR": "127.0.0.1",
                      "PET_MASTER_PORT": str(port), "PET_NPROC_PER_NODE": "1"}


def skypilot(port, nodes):
    """SkyPilot's: the node IPs a line each, the head's first. Its port: MASTER_PORT is not SkyPilot's,
    so these nodes use the gang's default port unless the head's is free; a test that uses it runs alone."""
    return lambda i: {"SKYPILOT_NODE_RANK": str(i), "SKYPILOT_NUM_NODES": str(nodes),
                      "SKYPILOT_NODE_IPS": "\n".join(["127.0.0.1"] * nodes)}


class Gang:
    """The nodes of one gang, each `flowrun ARGV` with its platform's variables."""

    def __init__(self, flowrun, workdir, variables, token=TOKEN, extra=None, reaped=False):
        self.flowrun, self.workdir, self.variables = flowrun, workdir, variables
        self.token, self.extra, self.reaped = token, extra or {}, reaped
        self.procs, self.logs = {}, {}

    def start(self, i, *argv):
        env = clean_env(FLOWRUN_FAKE_GPUS="1", **self.variables(i), **self.extra)
        env["FLOWRUN_HOSTNAME"] = f"pod-{i}"
        if self.token is not None:
            env["FLOWRUN_TOKEN"] = self.token
        self.logs[i] = os.path.join(self.workdir, f"pod-{i}.log")
        # reaped: under tests/e2e/helpers/reaper.py, which lists what the node's flowrun left (left(i)).
        reaper = [sys.executable, REAPER, self.report(i), "--"] if self.reaped else []
        with open(self.logs[i], "w") as log:
            self.procs[i] = subprocess.Popen([*reaper, self.flowrun, *argv], cwd=self.workdir, env=env, stdout=log,
                                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                             start_new_session=True)
        return self.procs[i]

    def wait(self, i, timeout=60):
        return self.procs[i].wait(timeout=timeout)

    def log(self, i):
        with open(self.logs[i]) as f:
            return f.read()

    def report(self, i):
        return os.path.join(self.workdir, f"pod-{i}.left.json")

    def left(self, i):
        """The processes node i's flowrun left when it exited (a reaped gang's): [pid, name, state] each."""
        with open(self.report(i)) as f:
            return json.load(f)

    def kill(self, i, sig=signal.SIGKILL):
        os.killpg(self.procs[i].pid, sig)

    def close(self):
        for p in self.procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


@pytest.fixture
def gang(flowrun, scratch):
    made = []

    def make(variables, **kw):
        g = Gang(flowrun, str(scratch), variables, **kw)
        made.append(g)
        return g

    yield make
    for g in made:
        g.close()


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


RANK_LINE = "import os; print('step', os.environ['FLOWRUN_STEP'], 'rank', os.environ['RANK'], 'of', " \
            "os.environ['WORLD_SIZE'], 'node', os.environ['GROUP_RANK'])"


def flow(scratch, fail_rank=None, more=""):
    """Two parallel steps around a plain one, and a join: every parallel step spans the gang."""
    fail = f"; import sys; sys.exit(3 if os.environ['RANK'] == '{fail_rank}' else 0)" if fail_rank is not None else ""
    write(os.path.join(scratch, "flow.yaml"), f"""name: g
{more}steps:
  - name: first
    run: [python3, -c, "{RANK_LINE}"]
    parallel: {{gpus: all}}
  - name: between
    run: echo between
  - name: second
    run: [python3, -c, "{RANK_LINE}{fail}"]
    parallel: {{gpus: all}}
  - name: after
    join: second
    run: echo joined
""")
    return "flow.yaml"


def no_processes_left(workdir):
    """The processes still running in `workdir` (none once a gang ended)."""
    left = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{pid}/cwd").startswith(workdir):
                left.append(pid)
        except OSError:
            pass
    return left


def test_a_flow_runs_across_the_gang_and_every_node_exits_with_its_code(gang, scratch):
    g = gang(pytorchjob(free_port(), 2), reaped=True)
    spec = flow(str(scratch))
    g.start(1, spec)  # an agent first: it dials until the head listens
    wait_for(lambda: "joining the head" in g.log(1), 30)
    g.start(0, spec)
    assert g.wait(0) == 0, g.log(0)
    assert g.wait(1) == 0, g.log(1)
    head = g.log(0)
    for step in ("first", "second"):
        assert f"flowrun: step '{step}': 2 workers on 2 nodes (engine: gang)" in head
        for rank in (0, 1):
            assert f"step {step} rank {rank} of 2 node {rank}" in head  # every node's lines on the head
    assert "flowrun: step 'after' succeeded" in head
    agent = g.log(1)
    assert "flowrun: node 1 of 2 of the Kubeflow PyTorchJob: joining the head at 127.0.0.1:" in agent
    assert "the flow ended successfully" in agent
    assert "step first rank" not in agent  # the ranks' lines are the head's to show
    assert g.left(0) == [] and g.left(1) == []  # nothing either node started outlives it, guardians included
    assert no_processes_left(str(scratch)) == []


def test_a_failed_rank_fails_every_node_with_the_flows_code(gang, scratch):
    g = gang(pytorchjob(free_port(), 2))
    spec = flow(str(scratch), fail_rank=1)
    g.start(0, spec)
    g.start(1, spec)
    assert g.wait(0) == 3, g.log(0)
    assert g.wait(1) == 3, g.log(1)
    assert "flowrun: step 'second' failed: rank 1 on pod-1 exited with code 3" in g.log(0)
    assert "the flow ended with exit code 3" in g.log(1)


def test_an_agent_ends_when_its_head_dies(gang, scratch):
    g = gang(pytorchjob(free_port(), 2))
    write(os.path.join(scratch, "flow.yaml"), """name: g
cluster:
  engine: gang
  heartbeat_timeout: 2
steps:
  - name: train
    run: [python3, -c, "import os, time; print('rank', os.environ['RANK'], 'runs', flush=True); time.sleep(600)"]
    parallel: {gpus: all}
""")
    g.start(0, "flow.yaml")
    g.start(1, "flow.yaml")
    wait_for(lambda: "rank 1 runs" in g.log(0), 30)
    g.kill(0)
    assert g.wait(1) == 1, g.log(1)
    assert "flowrun agent: pod-1: lost the head at 127.0.0.1:" in g.log(1)
    wait_for(lambda: no_processes_left(str(scratch)) == [], 10)


def prepare_and_train(scratch, train, cluster=""):
    """flow.yaml: `prepare` notes each run of it in prepared.txt, then `train` runs Python code `train` on every
    GPU of the gang (`cluster`: the spec's cluster section, if any)."""
    write(os.path.join(scratch, "flow.yaml"), f"""name: g
{cluster}steps:
  - name: prepare
    run: [sh, -c, "echo prepared >> prepared.txt"]
  - name: train
    run: [python3, -c, "{train}"]
    parallel: {{gpus: all}}
""")


def test_a_restarted_head_resumes_its_gangs_run(gang, scratch):
    """The head's pod replaced by the platform, the workdir on a volume: the new head finds the run of the
    same gang (FLOWRUN_GANG_ID) and resumes it as a requeued Slurm job does."""
    g = gang(pytorchjob(free_port(), 2), extra={"FLOWRUN_GANG_ID": "3f0c1a2e-uid"})
    fail_once = ("import os, sys; print('rank', os.environ['RANK'], 'trains', flush=True); "
                 "first = os.environ['RANK'] == '1' and not os.path.exists('failed-once'); "
                 "first and open('failed-once', 'a').close(); sys.exit(3 if first else 0)")
    prepare_and_train(scratch, fail_once)
    g.start(0, "flow.yaml")
    g.start(1, "flow.yaml")
    assert g.wait(0) == 3, g.log(0)
    assert g.wait(1) == 3, g.log(1)
    runs = os.path.join(scratch, ".flowrun", "runs")
    (first,) = [r for r in os.listdir(runs) if r != "latest"]
    with open(os.path.join(runs, first, "run.json")) as f:
        assert json.load(f)["gang"] == {"id": "3f0c1a2e-uid", "attempt": None}

    g.start(0, "flow.yaml")  # the head's new pod, and a new agent, in the same workdir
    g.start(1, "flow.yaml")
    assert g.wait(0) == 0, g.log(0)
    assert g.wait(1) == 0, g.log(1)
    head = g.log(0)
    assert (f"flowrun: resuming run {first}: the gang's head started again (FLOWRUN_GANG_ID=3f0c1a2e-uid); "
            "kept 'prepare'; 'train' restarts at TORCHELASTIC_RESTART_COUNT=1") in head
    assert "rank 1 trains" in head
    with open(os.path.join(scratch, "prepared.txt")) as f:
        assert f.read() == "prepared\n"  # prepare ran once, in the first head
    (second,) = [r for r in os.listdir(runs) if r not in ("latest", first)]
    with open(os.path.join(runs, second, "run.json")) as f:
        record = json.load(f)
    assert record["resumed_from"]["run_id"] == first and record["resumed_from"]["by"] == "requeue"
    assert record["exit_code"] == 0 and record["steps"] == {"prepare": "reused", "train": "succeeded"}
    assert no_processes_left(str(scratch)) == []


def test_a_head_killed_mid_step_is_resumed_by_its_next_pod(gang, scratch):
    """The head's pod killed while a parallel step runs: its agent ends, and the head's next pod resumes the
    run, keeping what succeeded and running the interrupted step again."""
    g = gang(pytorchjob(free_port(), 2), extra={"FLOWRUN_GANG_ID": "9d2e-uid"})
    hang_once = ("import os, time; print('rank', os.environ['RANK'], 'trains', flush=True); "
                 "first = not os.path.exists('ran-once'); open('ran-once', 'a').close(); "
                 "time.sleep(600 if first else 0)")
    prepare_and_train(scratch, hang_once, cluster="cluster:\n  engine: gang\n  heartbeat_timeout: 2\n")
    g.start(0, "flow.yaml")
    g.start(1, "flow.yaml")
    wait_for(lambda: "rank 1 trains" in g.log(0), 30)
    g.kill(0)
    g.wait(0)
    assert g.wait(1) == 1, g.log(1)
    runs = os.path.join(scratch, ".flowrun", "runs")
    (first,) = [r for r in os.listdir(runs) if r != "latest"]

    g.start(0, "flow.yaml")
    g.start(1, "flow.yaml")
    assert g.wait(0) == 0, g.log(0)
    assert g.wait(1) == 0, g.log(1)
    assert (f"flowrun: resuming run {first}: the gang's head started again (FLOWRUN_GANG_ID=9d2e-uid); "
            "kept 'prepare'; 'train' restarts at TORCHELASTIC_RESTART_COUNT=1") in g.log(0)
    with open(os.path.join(scratch, "prepared.txt")) as f:
        assert f.read() == "prepared\n"
    wait_for(lambda: no_processes_left(str(scratch)) == [], 10)


def test_a_gang_without_a_token_is_refused_with_the_fix(gang, scratch):
    g = gang(pytorchjob(free_port(), 2), token=None)
    spec = flow(str(scratch))
    for i in (0, 1):
        g.start(i, spec)
        assert g.wait(i) == 2
        assert "this node is in a gang, but the run has no token" in g.log(i)
        assert "FLOWRUN_TOKEN_FILE" in g.log(i)


def test_a_short_token_and_a_world_readable_token_file_are_refused(gang, scratch):
    g = gang(pytorchjob(free_port(), 2), token="short")
    g.start(0, flow(str(scratch)))
    assert g.wait(0) == 2
    assert "the run's token (FLOWRUN_TOKEN) has 5 characters; use at least 16" in g.log(0)
    token_file = os.path.join(scratch, "token")
    write(token_file, TOKEN + "\n")
    os.chmod(token_file, 0o644)
    g2 = gang(pytorchjob(free_port(), 2), token=None, extra={"FLOWRUN_TOKEN_FILE": token_file})
    g2.start(0, "flow.yaml")
    assert g2.wait(0) == 2  # a Job's podFailurePolicy fails at once on 2: a retry would not fix it
    assert "the token file can be read by every user of the node (mode 644)" in g2.log(0)


def test_flowrun_run_in_a_trainjob_is_torchrun_there(gang, scratch):
    g = gang(trainjob(free_port(), 2))
    write(os.path.join(scratch, "train.py"), RANK_LINE.replace("; ", "\n") + "\n")
    g.start(1, "run", "train.py")
    g.start(0, "run", "train.py")
    assert g.wait(0) == 0, g.log(0)
    assert g.wait(1) == 0, g.log(1)
    for rank in (0, 1):
        assert f"rank {rank} of 2 node {rank}" in g.log(0)
    assert "node 1 of 2 of a Kubeflow TrainJob: --nnodes 2, --node-rank 1 and --rdzv-endpoint 127.0.0.1:" in g.log(1)


def test_the_plan_names_the_platform_and_an_explicit_engine_wins(flowrun, scratch):
    spec = flow(str(scratch))
    env = clean_env(FLOWRUN_FAKE_GPUS="1", **skypilot(0, 3)(0))
    out = subprocess.run([flowrun, "plan", spec], cwd=scratch, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert ("Gang: node 0 of 3 of a SkyPilot (read from SKYPILOT_NODE_RANK=0, SKYPILOT_NUM_NODES=3, "
            "SKYPILOT_NODE_IPS=127.0.0.1\\n127.0.0.1\\n127.0.0.1); this node is the head") in out.stdout
    assert "Step first asks for all GPUs of 3 nodes (every node of the SkyPilot but its spares)" in out.stdout
    flow(str(scratch), more="cluster:\n  engine: ssh\n  hosts: [a, b, c]\n")
    out = subprocess.run([flowrun, "plan", spec], cwd=scratch, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert ("Gang: the variables of a SkyPilot are set (node 0 of 3), but the spec's cluster.engine is ssh, "
            "which wins; write engine: gang to run on the SkyPilot's nodes") in out.stdout


def test_a_contradiction_names_the_variable(flowrun, scratch):
    spec = flow(str(scratch))
    env = clean_env(RANK="2", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", FLOWRUN_TOKEN=TOKEN)
    out = subprocess.run([flowrun, spec], cwd=scratch, env=env, capture_output=True, text=True)
    assert out.returncode == 2
    assert "RANK" in out.stderr and "WORLD_SIZE" in out.stderr


def test_a_node_that_does_not_share_the_workdir_gets_the_steps_inputs(gang, scratch):
    # On one host every node sees the workdir: shared_workdir: false ships to every node but the
    # head's, as to a pod of its own.
    g = gang(pytorchjob(free_port(), 2))
    write(os.path.join(scratch, "train.py"), """import os
with open("data/x.txt") as f:
    seen = f.read().strip()
print("rank", os.environ["RANK"], "read", seen, "in", "workdir" if os.getcwd() == os.environ["WORKDIR"] else "a copy")
with open(os.path.join(os.environ["FLOWRUN_OUTPUT_DIR"], "seen.txt"), "w") as f:
    f.write(seen + " by rank " + os.environ["RANK"])
""")
    write(os.path.join(scratch, "flow.yaml"), f"""name: g
cluster:
  engine: gang
  shared_workdir: false
env:
  WORKDIR: {scratch}
steps:
  - name: prepare
    run: [sh, -c, "mkdir -p data && echo hello > data/x.txt"]
  - name: train
    run: python3 train.py
    inputs: [data/*]
    collect: all
    parallel: {{gpus: all}}
  - name: check
    join: train
    run: [cat, "${{steps.train.outputs}}/rank0/seen.txt", "${{steps.train.outputs}}/rank1/seen.txt"]
""")
    g.start(0, "flow.yaml")
    g.start(1, "flow.yaml")
    assert g.wait(0) == 0, g.log(0)
    assert g.wait(1) == 0, g.log(1)
    head = g.log(0)
    assert "rank 0 read hello in workdir" in head
    assert "rank 1 read hello in a copy" in head
    assert f"flowrun: step 'train': node1 (pod-1) does not share the workdir {scratch}: shipping 2 files" in head
    assert "[check] hello by rank 0hello by rank 1" in head  # rank 1's output came back from its copy
