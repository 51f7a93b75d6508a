"""flowrun on gangs of pods that a scheduler started (tests/pods/podsim.py): every pod runs the
container command of `flowrun manifest`'s Indexed Job or JobSet verbatim (`flowrun flow.yaml`), or
the command a platform's nodes run (Kubeflow TrainJob, PyTorchJob, AWS Batch, SkyPilot), started in
a shuffled order with delays. Node 0 runs the flow; every other pod becomes its agent and exits
with the flow's exit code.

  - real gloo DDP across 2 pods (torch's all_reduce), from an Indexed Job and from a JobSet, with a
    prepare step before and a join after: no file system is shared, so the head ships the step's
    inputs (the prepare step's file) and its script to node 1, whose rank reads them there;
  - a pod deleted while its ranks run: the spare pod takes its node rank; an elastic range shrinks;
  - the head's pod killed, or cut off the network: every agent ends with a line naming the head;
  - a failing rank: every pod exits with the flow's exit code, so the Job fails as one;
  - each platform's variables with its secret as FLOWRUN_TOKEN, and a gang with no token refused.

Each test waits for events (a pod's exit, a line in its log) and ends with nothing left running in
any pod. A few seconds each, as root (skipped without):

  python3 -m pytest tests/e2e/pods/test_gangs.py [--flowrun build/dev/flowrun] [-k NAME]
"""
import os
import re
import shutil
import subprocess

import pytest

import podsim

pytestmark = [pytest.mark.pods, pytest.mark.root]

LIMIT = 60  # seconds for any one event; the cases take a few
TOKEN = "9c1e4f0a7b2d83e65f4a1c0d9e8b7a6f5e4d3c2b1a09f8e7d6c5b4a3f2e1d0c9"  # a platform's secret

# The ranks' programs, in the image every pod gets a copy of at its workingDir.
DDP = """\
import os
import torch
import torch.distributed as dist

dist.init_process_group("gloo")  # MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE from flowrun
rank, world = dist.get_rank(), dist.get_world_size()
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
model(torch.full((2, 4), float(rank + 1))).sum().backward()  # one step: DDP all-reduces the grads
total = torch.tensor([float(rank + 1)])
dist.all_reduce(total)
with open("data.txt") as f:  # what the prepare step wrote
    data = f.read().strip()
print(f"rank {rank} of {world} on {os.uname().nodename}: all_reduce {int(total.item())}, data {data}", flush=True)
if rank == 0:
    with open("sum.txt", "w") as f:
        f.write(f"{int(total.item())}\\n")
dist.destroy_process_group()
"""

# A rank that says it runs, then holds (HOLD set, first attempt only) until its step stops it, or
# exits FAIL_CODE when it is rank FAIL_RANK.
RANK = """\
import os
import signal
import sys

rank, attempt = os.environ["RANK"], os.environ["TORCHELASTIC_RESTART_COUNT"]
print(f"rank {rank} of {os.environ['WORLD_SIZE']} on {os.uname().nodename}, attempt {attempt}: running", flush=True)
if os.environ.get("HOLD") and attempt == "0":
    signal.pause()
if os.environ.get("FAIL_RANK") == rank:
    sys.exit(int(os.environ["FAIL_CODE"]))
if rank == "0":
    with open("sum.txt", "w") as f:
        f.write(f"world {os.environ['WORLD_SIZE']}, attempt {attempt}\\n")
"""


def flow_text(name, train, cluster=None):
    """A flow: prepare writes data.txt, train is the parallel step (its YAML lines), report joins it."""
    lines = [f"name: {name}"]
    if cluster:
        lines.append("cluster:")
        lines += [f"  {k}: {v}" for k, v in cluster.items()]
    lines += ["steps:",
              "  - name: prepare",
              "    run: [python3, -c, \"open('data.txt', 'w').write('41')\"]",
              "  - name: train",
              *[f"    {line}" for line in train],
              "  - name: report",
              "    join: train",
              "    run: [sh, -c, 'echo \"report: sum $(cat ${steps.train.outputs}/sum.txt)\"']",
              ""]
    return "\n".join(lines)


def image(scratch, flow):
    """The image's directory (what each pod gets a copy of at /workspace): flow.yaml and the ranks'
    programs."""
    root = os.path.join(scratch, "image")
    os.makedirs(root, exist_ok=True)
    for name, text in (("flow.yaml", flow), ("ddp.py", DDP), ("rank.py", RANK)):
        with open(os.path.join(root, name), "w") as f:
            f.write(text)
    return root


def manifest(flowrun, root, *options):
    """flowrun manifest's objects for the image's flow.yaml, as a user writes them."""
    p = subprocess.run([flowrun, "manifest", "flow.yaml", "--image", "flowrun:test", "--workdir", "/workspace",
                        *options], cwd=root, capture_output=True, text=True, timeout=LIMIT)
    assert p.returncode == 0, p.stderr
    assert "- flow.yaml" in p.stdout, p.stdout
    return p.stdout


def exits(pods, keys):
    return {key: pods.wait(key, LIMIT) for key in keys}


def rank_lines(log):
    """The ranks' lines in a console: (pod, rank) -> the rank's text."""
    return {(m.group(1), int(m.group(2))): m.group(3)
            for m in re.finditer(r"^\[(\S+) train r(\d+)\] (.*)$", log, re.M)}


# --- real DDP across pods -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def torch_here():
    """The ranks' python3 (the host's, which every pod sees) imports torch, or the test is skipped."""
    p = subprocess.run(["/usr/bin/python3", "-c", "import torch.distributed"], capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip(f"/usr/bin/python3 cannot import torch (apt-get install python3-torch): {p.stderr.strip()}")


@pytest.mark.parametrize("kind", ["job", "jobset"])
def test_ddp_across_pods(run_manifest, flowrun, scratch, check, torch_here, kind):
    train = ["needs: prepare", "run: [python3, ddp.py]", "parallel: {nodes: 2, cpus: 2}", "inputs: [data.txt]",
             "outputs: [sum.txt]"]
    root = image(scratch, flow_text("ddp", train))
    pods = run_manifest(manifest(flowrun, root, *(["--jobset"] if kind == "jobset" else [])), root)
    keys = ["ddp-0", "ddp-1"] if kind == "job" else ["ddp-node-0-0", "ddp-node-0-1"]
    check(pods.keys == keys, "the manifest's two pods", pods.keys)
    codes = exits(pods, keys)
    head = pods.log(keys[0])
    check(codes == {k: 0 for k in keys}, "every pod exits 0", codes)
    got = rank_lines(head)
    want = {(keys[r], r): f"rank {r} of 2 on {keys[r]}: all_reduce 3, data 41" for r in range(2)}
    check(got == want, "the head pod's log shows both pods' ranks: gloo's all_reduce across pods (1 + 2), "
          "the prepare step's data", got)
    check(re.search(rf"^flowrun: step 'train': node1 \({keys[1]}\) does not share the workdir /workspace: "
                    r"shipping 2 files", head, re.M), "the head ships the step's inputs and script to node 1", head)
    check(os.path.exists(pods.path(keys[0], "work", "data.txt"))
          and not os.path.exists(pods.path(keys[1], "work", "data.txt")),
          "the prepare step's file is in the head pod's workdir alone; rank 1 read the copy shipped to its node",
          os.listdir(pods.path(keys[1], "work")))
    check(re.search(r"^\[report\] report: sum 3$", head, re.M), "the join got rank 0's result", head)
    check(re.search(r"^flowrun: run ddp-\S+ succeeded", head, re.M), "the head's run succeeded", head)
    agent = pods.log(keys[1])
    check(re.search(rf"^flowrun: node 1 of 2 of the Kubernetes {'JobSet' if kind == 'jobset' else 'Indexed Job'}: "
                    rf"joining the head at {keys[0]}\.ddp:29400", agent, re.M),
          "the agent's pod says which node it is and where it joins", agent)
    check(re.search(rf"^flowrun agent: {keys[1]}: the flow ended successfully$", agent, re.M),
          "the agent's pod says how the flow ended", agent)
    check(pods.leftovers() == [], "nothing left running in any pod", pods.leftovers())


# --- a pod lost while its ranks run -------------------------------------------------------------


def held_flow(name, parallel, env=None, cluster=None):
    """A flow whose train ranks run rank.py with HOLD (and env); report joins them."""
    env = {"HOLD": "1", **(env or {})}
    train = ["needs: prepare", "run: [python3, rank.py]", f"parallel: {parallel}", "outputs: [sum.txt]",
             "env: {" + ", ".join(f'{k}: "{v}"' for k, v in env.items()) + "}"]
    return flow_text(name, train, cluster)


def wait_running(pods, head, ranks, attempt=0):
    """Waits until the head's console shows each of ranks running in attempt."""
    for r in ranks:
        pods.wait_line(head, rf"^\[\S+ train r{r}\] rank {r} of \d+ on \S+, attempt {attempt}: running$", LIMIT)


@pytest.mark.parametrize("kind", ["spare", "elastic"])
def test_a_pod_deleted_mid_run(run_manifest, flowrun, scratch, check, kind):
    if kind == "spare":
        parallel, options, env = "{nodes: 2, cpus: 2, spare_nodes: 1}", [], None
    else:  # a GPU a pod, faked: what nvidia.com/gpu: 1 gives each
        parallel, options, env = '{nodes: "1:2", gpus: 2}', ["--gpus-per-node", "1"], {"FLOWRUN_FAKE_GPUS": "1"}
    root = image(scratch, held_flow("lose", parallel))
    text = manifest(flowrun, root, *options)
    check(kind == "spare" or "nvidia.com/gpu: 1" in text, "a GPU a pod", text)
    pods = run_manifest(text, root, env=env)
    keys = ["lose-0", "lose-1", "lose-2"] if kind == "spare" else ["lose-0", "lose-1"]
    check(pods.keys == keys, "the manifest's pods: the nodes and the spare", pods.keys)
    head = keys[0]
    wait_running(pods, head, [0, 1])
    if kind == "spare":  # a spare covers a loss once it has joined
        pods.wait_line(head, r"^flowrun: step 'train': spare node lose-2 joined; it waits with no rank$", LIMIT)
    check(re.search(r"^\[lose-1 train r1\]", pods.log(head), re.M), "node 1 is pod lose-1", pods.log(head))
    lost = pods.kill("lose-1", grace=10)
    check(lost in (137, 143), "the deleted pod's exit code as Kubernetes shows it (SIGTERM, or SIGKILL after "
          "the grace)", lost)
    if kind == "spare":
        pods.wait_line(head, r"^flowrun: step 'train': spare node lose-2 takes node rank 1 of lost node lose-1",
                       LIMIT)
        wait_running(pods, head, [0, 1], attempt=1)
    else:
        pods.wait_line(head, r"^\[lose-0 train r0\] rank 0 of 1 on lose-0, attempt 1: running$", LIMIT)
    # The Job controller makes a new pod for the index (the old one failed): its flowrun joins the
    # head and ends with the flow, so that every index of the Job succeeds.
    pods.recreate("lose-1")
    codes = exits(pods, keys)
    log = pods.log(head)
    check(codes == {k: 0 for k in keys}, "every pod exits 0, the deleted one's replacement too: the flow "
          "succeeded", codes)
    check(re.search(r"^flowrun agent: lose-1: SIGTERM received: this node leaves the flow, the head takes it as "
                    r"lost(; stopping this node's workers)?$", pods.log("lose-1#1"), re.M),
          "the deleted pod's log says it left on SIGTERM", pods.log("lose-1#1"))
    check(re.search(r"^flowrun agent: lose-1: the flow ended successfully$", pods.log("lose-1"), re.M),
          "its replacement hears the flow's end", pods.log("lose-1"))
    check(re.search(r"^flowrun: step 'train': node lose-1 \(node rank 1 of 2\) lost: its agent received "
                    r"SIGTERM$", log, re.M), "the head took the deleted pod as a lost node", log)
    if kind == "spare":
        check(re.search(r"^\[lose-2 train r1\] rank 1 of 2 on lose-2, attempt 1: running$", log, re.M),
              "the spare pod took node rank 1; every rank restarted", log)
    check(re.search(rf"^\[report\] report: sum world {2 if kind == 'spare' else 1}, attempt 1$", log, re.M),
          "the join got the last attempt's result", log)
    check(re.search(r"^flowrun: run lose-\S+ succeeded", log, re.M), "the run succeeded", log)
    check(pods.leftovers() == [], "nothing left running in any pod", pods.leftovers())


# --- the head's pod lost ------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["killed", "cut_off"])
def test_the_head_pod_lost(run_manifest, flowrun, scratch, check, how):
    root = image(scratch, held_flow("lead", "{nodes: 3, cpus: 3}",
                                            cluster={"engine": "gang", "heartbeat_timeout": "3s"}))
    pods = run_manifest(manifest(flowrun, root), root)
    head, agents = "lead-0", ["lead-1", "lead-2"]
    wait_running(pods, head, [0, 1, 2])
    if how == "killed":
        # The node's kernel ends the pod at once (an OOM kill, a node lost): nothing of flowrun runs on.
        podsim.kill_all(pods.pids(head))
    else:
        # Its address gone, with nothing closed: the agents hear nothing until heartbeat_timeout.
        podsim.sh("ip", "link", "del", pods.rec[head]["veth"])
    codes = exits(pods, agents)
    check(all(c not in (0, 2, None) for c in codes.values()), "every agent's pod failed (not 0, not 2)", codes)
    why = "connection" if how == "killed" else r"no heartbeat from it for 3\.\d s"
    for key in agents:
        log = pods.log(key)
        check(re.search(rf"^flowrun agent: {key}: lost the head at lead-0\.lead:29400 \(.*{why}.*\); stopping this "
                        "node's workers$", log, re.M), f"{key}: a line naming the lost head and why", log)
    if how == "cut_off":
        pods.kill(head, grace=1)
    check(pods.leftovers() == [], "nothing left running in any pod", pods.leftovers())


# --- a failing rank -----------------------------------------------------------------------------


def test_a_failing_rank_fails_every_pod(run_manifest, flowrun, scratch, check):
    flow = held_flow("fail", "{nodes: 2, cpus: 2}", env={"HOLD": "", "FAIL_RANK": "1", "FAIL_CODE": "3"})
    root = image(scratch, flow)
    pods = run_manifest(manifest(flowrun, root), root)
    codes = exits(pods, ["fail-0", "fail-1"])
    log = pods.log("fail-0")
    check(codes["fail-0"] not in (0, 2) and codes["fail-1"] == codes["fail-0"],
          "the agent's pod exits with the flow's exit code: the Job fails as one", codes)
    check(re.search(r"^flowrun: step 'train' failed.*rank 1", log, re.M), "the head names rank 1", log)
    check(re.search(rf"^flowrun agent: fail-1: the flow ended with exit code {codes['fail-0']}$", pods.log("fail-1"),
                    re.M), "the agent's pod says the flow's exit code", pods.log("fail-1"))
    check(pods.leftovers() == [], "nothing left running in any pod", pods.leftovers())


# --- the other platforms ------------------------------------------------------------------------

HEADS = {"trainjob": "train-node-0-0", "pytorchjob": "train-master-0", "aws_batch": "train-node-0",
         "skypilot": "train-0"}
NAMES = {"trainjob": "Kubeflow TrainJob", "pytorchjob": "Kubeflow PyTorchJob", "aws_batch": "AWS Batch",
         "skypilot": "SkyPilot"}


@pytest.mark.parametrize("platform", ["pytorchjob", "aws_batch", "skypilot"])
def test_platform_gang_runs_the_flow(pods, flowrun, scratch, check, platform):
    root = image(scratch, held_flow("train", "{nodes: 2, cpus: 2}", env={"HOLD": ""}))
    keys = pods.add_gang(platform, 2, ["flowrun", "flow.yaml"], root, env={"FLOWRUN_TOKEN": TOKEN})
    check(keys[0] == HEADS[platform], "node 0 is the platform's head", keys)
    pods.start()
    codes = exits(pods, keys)
    log = pods.log(keys[0])
    check(codes == {k: 0 for k in keys}, "every node exits 0", codes)
    got = sorted(rank_lines(log).values())
    check(len(got) == 2 and all(re.fullmatch(r"rank \d of 2 on \S+, attempt 0: running", g) for g in got),
          "the head's console shows both nodes' ranks", log)
    check(re.search(r"^flowrun: run train-\S+ succeeded", log, re.M), "the run succeeded", log)
    check(NAMES[platform] in pods.log(keys[1]), "the agent names the platform it found", pods.log(keys[1]))
    check(pods.leftovers() == [], "nothing left running in any pod", pods.leftovers())


def test_trainjob_runs_flowrun_run(pods, flowrun, scratch, check):
    root = image(scratch, "")
    shutil.copy(os.path.join(root, "rank.py"), os.path.join(root, "train.py"))
    keys = pods.add_gang("trainjob", 2, ["flowrun", "run", "--nproc-per-node", "1", "train.py"], root, nproc=1,
                         env={"FLOWRUN_TOKEN": TOKEN})
    pods.start()
    # Node 1 first: an agent that cannot join ends at once, where the head would wait for it.
    assert pods.wait(keys[1], LIMIT) == 0, pods.log(keys[1])
    codes = exits(pods, keys)
    log = pods.log(keys[0])
    check(codes == {k: 0 for k in keys}, "every node exits 0", codes)
    check(len(re.findall(r"rank \d of 2 on \S+, attempt 0: running$", log, re.M)) == 2,
          "the head's console shows both nodes' ranks", log)
    for i, key in enumerate(keys):
        check(re.search(rf"^flowrun run: node {i} of 2 of a Kubeflow TrainJob: --nnodes 2, --node-rank {i} and "
                        r"--rdzv-endpoint train-node-0-0\.train:29500 from PET_", pods.log(key), re.M),
              f"{key}: torchrun's options from the TrainJob's PET_*", pods.log(key))
    check(re.search(r"^flowrun agent: train-node-0-1: the flow ended successfully$", pods.log(keys[1]), re.M),
          "node 1's pod ends with the flow", pods.log(keys[1]))
    check(pods.leftovers() == [], "nothing left running in any pod", pods.leftovers())


@pytest.mark.parametrize("platform", ["job", "pytorchjob", "aws_batch", "skypilot"])
def test_a_gang_without_a_token_is_refused(pods, flowrun, scratch, check, platform):
    root = image(scratch, held_flow("train", "{nodes: 2, cpus: 2}", env={"HOLD": ""}))
    if platform == "job":
        text = manifest(flowrun, root)
        text = re.sub(r"^ *- name: FLOWRUN_TOKEN_FILE\n *value: /etc/flowrun/token\n", "", text, flags=re.M)
        check("FLOWRUN_TOKEN_FILE" not in text, "the manifest without its token's variable", text)
        keys = pods.add_manifest(text, root)
    else:
        keys = pods.add_gang(platform, 2, ["flowrun", "flow.yaml"], root)
    pods.start()
    codes = exits(pods, keys)
    check(codes == {k: 2 for k in keys}, "every pod is refused with exit 2", codes)
    for key in keys:
        check("the run has no token" in pods.log(key) and "FLOWRUN_TOKEN_FILE" in pods.log(key),
              f"{key}: says why, with the fix", pods.log(key))
        check(not os.path.exists(pods.path(key, "work", ".flowrun")), f"{key}: no run was started", key)
    check(pods.leftovers() == [], "nothing left running in any pod", pods.leftovers())
