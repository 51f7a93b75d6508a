"""flowrun with real PyTorch (Debian's python3-torch, CPU, gloo): a standard
DDP script trains on 2 and 4 workers and its join checks the model; the
example specs/examples/cpu.yaml runs; and a rank that dies while its peers
wait in a collective is named the culprit, 20 times out of 20.

  python3 -m pytest tests/e2e/torch/test_torch.py [--flowrun PATH] [--repeat N] [-k NAME]

Torch is imported with /usr/bin/python3 (the workers find `python3` there:
/usr/bin comes first in their PATH). Without it the tests are skipped.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import time

import pytest

from flowrun_testlib import clean_env
from flowrun_testlib.launcher import SANITIZER_REPORT, py_spy, wait_for
from flowrun_testlib.nodes import Nodes, q
from flowrun_testlib.suite import E2E

pytestmark = pytest.mark.torch

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = "/usr/bin/python3"

def torch_env():
    env = clean_env()
    env["PATH"] = "/usr/bin:/bin:" + env.get("PATH", "")
    env.pop("PYTHONPATH", None)
    env.pop("PYTHONHOME", None)
    return env


def read_text(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def have_torch():
    try:
        p = subprocess.run([PYTHON, "-c", "import torch, torch.distributed as d; assert d.is_available(); "
                            "print(torch.__version__)"], capture_output=True, text=True, env=torch_env(), timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, str(e)
    if p.returncode != 0:
        return None, (p.stderr.strip().splitlines() or ["no output"])[-1]
    return p.stdout.strip(), ""


@pytest.fixture(scope="module", autouse=True)
def torch_version():
    version, why = have_torch()
    if version is None:
        pytest.skip(f"{PYTHON} cannot import torch ({why}); install Debian's python3-torch")
    print(f"torch {version} from {PYTHON}", flush=True)
    return version


class TestTorch(E2E):
    def set_up(self):
        self.repeat = self.config.getoption("repeat")

    def workspace(self, name, spec_text):
        d = os.path.join(self.scratch, name)
        os.makedirs(d)
        with open(os.path.join(d, "spec.yaml"), "w") as f:
            f.write(spec_text)
        return d, os.path.join(d, "spec.yaml"), os.path.join(d, "run")

    def flowrun_run(self, spec, run_dir, *options, timeout=300, env=None):
        start = time.monotonic()
        p = subprocess.run([self.flowrun, spec, "--run-dir", run_dir, *options], cwd=os.path.dirname(spec),
                           env=env or torch_env(), capture_output=True, text=True, timeout=timeout)
        m = SANITIZER_REPORT.search(p.stderr)
        self.check(m is None, "no sanitizer report", p.stderr[max(0, m.start() - 200):][:4000] if m else "")
        detail = f"exit {p.returncode} after {time.monotonic() - start:.1f} s\n--- stdout\n{p.stdout[-3000:]}\n" \
                 f"--- stderr\n{p.stderr[-5000:]}"
        return p.returncode, p.stdout, p.stderr, detail

    def test_ddp(self):
        train = os.path.join(HERE, "ddp_train.py")
        check = os.path.join(HERE, "check_model.py")
        for workers in (2, 4):
            d, spec, run_dir = self.workspace(f"ddp{workers}", f"""name: ddp
steps:
  - name: train
    run: python3 {train} --steps 5
    parallel:
      cpus: {workers}
    outputs: model.pt
  - name: check
    join: train
    run: python3 {check} ${{steps.train.outputs}}/model.pt {workers}
""")
            rc, out, err, detail = self.flowrun_run(spec, run_dir)
            self.check(rc == 0, f"ddp: a standard DDP script trains on {workers} gloo workers", detail)
            self.check(f"[check] model.pt: {workers} workers, 5 steps of SGD, matches the replay\n" in out,
                         f"ddp: the join loads rank 0's model.pt and it matches a replay of {workers} ranks",
                         detail)
            self.check(all(f"[train r{r}] rank {r}/{workers} step 4 loss " in out for r in range(workers)),
                         f"ddp: every one of the {workers} ranks trained", out)

    def test_example(self):
        d = os.path.join(self.scratch, "example")
        shutil.copytree(os.path.join(self.root, "specs", "examples", "scripts"), os.path.join(d, "scripts"))
        shutil.copy(os.path.join(self.root, "specs", "examples", "cpu.yaml"), d)
        p = subprocess.run([PYTHON, "scripts/prepare.py", "--out", "data"], cwd=d, env=torch_env(),
                           capture_output=True, text=True, timeout=120)
        if not self.check(p.returncode == 0, "example: its prepare script", p.stdout + p.stderr):
            return
        rc, out, err, detail = self.flowrun_run(os.path.join(d, "cpu.yaml"), os.path.join(d, "run"), "--cpus", "2")
        m = re.search(r"^\[evaluate\] model: y = (-?[0-9.]+) x \+ (-?[0-9.]+) \(target: y = 3x - 1\)$", out, re.M)
        self.check(rc == 0 and m is not None, "example: flowrun --cpus 2 specs/examples/cpu.yaml runs", detail)
        if m:
            w, b = float(m.group(1)), float(m.group(2))
            self.check(abs(w - 3) < 0.25 and abs(b + 1) < 0.25, "example: the model learned y = 3x - 1",
                         m.group(0))

    def spare_flow(self, name, hold_at, spares):
        """A 2-node DDP step of resume_train.py on this host (agents started here), a join that checks
        model.pt against a replay; returns the started Nodes."""

        train, check = os.path.join(HERE, "resume_train.py"), os.path.join(HERE, "check_model.py")
        run = "[" + ", ".join(q(w) for w in (PYTHON, train, "--steps", "10", "--every", "2", "--checkpoint",
                                             "ckpt.pt", "--hold-at", str(hold_at))) + "]"
        spec = (f"name: {name}\ncluster:\n  engine: manual\n  address: 127.0.0.1\n  heartbeat_timeout: 1\n"
                f"steps:\n  - name: train\n    run: {run}\n    forensics: off\n    parallel:\n      cpus: 2\n"
                f"      nodes: 2\n      spare_nodes: {spares}\n    outputs: model.pt\n"
                f"  - name: check\n    join: train\n    run: {PYTHON} {check} ${{steps.train.outputs}}/model.pt 2\n")
        n = Nodes(self, name, spec, head_env={"PYTHONPATH": None, "PATH": torch_env()["PATH"]})
        self.open.append(n)
        return n

    def test_spare_node_resumes_from_checkpoint(self):
        # Node 1's agent is SIGKILLed, or frozen (a node cut off: its heartbeats stop), once the
        # checkpoint of step 4 of 10 is saved; the spare takes node rank 1 and every rank resumes from
        # the checkpoint. The final weights equal those of an uninterrupted run, bit for bit.
        reference = self.spare_flow("uninterrupted", -1, 0)
        argv = reference.command()
        if not self.check(argv is not None, "spare: the reference run's head prints the agent command",
                          reference.detail()):
            return
        reference.start_agents(argv, count=2, PYTHONPATH=None)
        self.check(reference.finish("uninterrupted", timeout=300) == 0, "spare: the uninterrupted run succeeds",
                   reference.detail())
        for fault in ("SIGKILL", "SIGSTOP"):
            n = self.spare_flow(f"spare-{fault.lower()}", 4, 1)
            argv = n.command()
            if not self.check(argv is not None, f"spare {fault}: the head prints the agent command", n.detail()):
                return
            n.start_agents(argv, count=3, PYTHONPATH=None)
            held = {}

            def all_held():
                for r in (0, 1):
                    path = os.path.join(n.dir, f"held.{r}")
                    if os.path.exists(path):
                        node, agent = open(path).read().split()
                        held[r] = (int(node), int(agent.rsplit("-", 2)[1]))
                return len(held) == 2 or n.head.poll() is not None

            wait_for(all_held, 240)
            if not self.check(len(held) == 2, f"spare {fault}: both ranks reach step 4's checkpoint", n.detail()):
                return
            victim = next(pid for node, pid in held.values() if node == 1)
            os.kill(victim, getattr(signal, fault))
            rc = n.finish(f"spare {fault}", timeout=300)
            if fault == "SIGSTOP":
                os.kill(victim, signal.SIGCONT)  # it finds the head gone and stops its rank
            out, err = n.out("head.out"), n.head_err()
            self.check(rc == 0, f"spare {fault}: the step finishes on the spare and the join passes", n.detail())
            self.check("[check] model.pt: 2 workers, 10 steps of SGD, matches the replay" in out,
                       f"spare {fault}: the join loads the final model, which matches a replay", out[-3000:])
            self.check(all(f"rank {r}: attempt 1 resumes at step 4" in out for r in (0, 1)),
                       f"spare {fault}: both ranks of attempt 1 resume from the checkpoint of step 4", out[-3000:])
            self.check(re.search(r"spare node \S+ takes node rank 1 of lost node \S+ \(0 spares left\)", err)
                       is not None, f"spare {fault}: the head says the spare takes node rank 1", err)
            res = n.results()
            self.check([a["replaced_nodes"] for a in res["attempts"]] ==
                       [[], [{"node_rank": 1, "lost": res["attempts"][0]["workers"][1]["node"],
                              "spare": res["attempts"][1]["workers"][1]["node"]}]] and
                       [a["restart_count"] for a in res["attempts"]] == [0, 1],
                       f"spare {fault}: results.json names the lost node and the spare, attempt by attempt",
                       json.dumps(res["attempts"])[:3000])
            same = subprocess.run(
                [PYTHON, "-c", "import sys, torch; a, b = (torch.load(p)['model'] for p in sys.argv[1:]); "
                 "sys.exit(0 if all(torch.equal(a[k], b[k]) for k in a) and a.keys() == b.keys() else 1)",
                 os.path.join(n.run_dir, "train", "outputs", "model.pt"),
                 os.path.join(reference.run_dir, "train", "outputs", "model.pt")],
                env=torch_env(), capture_output=True, text=True)
            self.check(same.returncode == 0, f"spare {fault}: the final weights equal the uninterrupted run's",
                       same.stderr)
            n.check_nothing_left(f"spare {fault}")

    def test_emergency_checkpoint(self):
        """Drain-aware teardown: a stopped rank's main process gets SIGTERM first and its DataLoader workers
        (same process group) keep running until it has saved; the clean exit is the teardown's success."""
        script = os.path.join(HERE, "dataloader_checkpoint.py")
        ready = os.path.join(self.scratch, "emergency-ready")
        os.makedirs(ready)  # also where the checkpoints go, as to a shared file system
        d, spec, run_dir = self.workspace("emergency", f"""name: emergency
steps:
  - name: train
    run: python3 {script}
    env:
      READY_DIR: {ready}
      CKPT_DIR: {ready}
      FAIL_RANK: "1"
    parallel:
      cpus: 3
""")
        rc, out, err, detail = self.flowrun_run(spec, run_dir, "--grace", "60")
        self.check(rc == 3 and "flowrun: step 'train' failed: rank 1 exited with code 3 after" in err,
                   "emergency: rank 1's exit 3 fails the step", detail)
        saved = [r for r in (0, 2) if f"[train r{r}] rank {r}: saved an emergency checkpoint at step " in out
                 and os.path.exists(os.path.join(ready, f"emergency-{r}.pt"))]
        self.check(saved == [0, 2], "emergency: ranks 0 and 2 took one more batch from their DataLoader's "
                   "workers after SIGTERM, and saved", detail)
        try:
            with open(os.path.join(run_dir, "train", "results.json")) as f:
                ranks = {w["rank"]: w for w in json.load(f)["ranks"]}
        except (OSError, ValueError, KeyError) as e:
            ranks = {"error": str(e)}
        self.check(all(ranks.get(r, {}).get("role") == "victim" and ranks[r].get("teardown") == "exited"
                       and ranks[r].get("exit_code") == 0 for r in (0, 2))
                   and ranks.get(1, {}).get("teardown") is None,
                   "emergency: results.json says the stopped ranks exited by themselves in their grace (teardown: "
                   "exited), and gives the culprit none", json.dumps(ranks)[:2000])
        self.check("killed, SIGTERM did not end them" not in err, "emergency: nobody was killed", detail)

    @pytest.mark.slow
    def test_culprit_in_collective(self):
        script = os.path.join(HERE, "collective_fail.py")
        d, spec, _ = self.workspace("collective", f"""name: collective
steps:
  - name: train
    run: python3 {script}
    parallel:
      cpus: 4
""")
        wrong, start = [], time.monotonic()
        for k in range(self.repeat):
            run_dir = os.path.join(d, f"run{k}")
            rc, out, err, detail = self.flowrun_run(spec, run_dir, "--grace", "3", timeout=120)
            try:
                with open(os.path.join(run_dir, "train", "results.json")) as f:
                    res = json.load(f)
            except (OSError, ValueError) as e:
                res = {"error": str(e)}
            roles = {w["rank"]: w["role"] for w in res.get("ranks", [])}
            ok = (rc == 7 and res.get("culprit_rank") == 2 and roles.get(2) == "culprit"
                  and "flowrun: step 'train' failed: rank 2 exited with code 7 after" in err
                  and all(roles.get(r) in ("victim", "failed_after") for r in (0, 1, 3)))
            if not ok:
                wrong.append(f"run {k}: roles {roles}\n{detail}")
            shutil.rmtree(run_dir, ignore_errors=True)
        self.check(not wrong, f"collective: rank 2 named the culprit with exit code 7, "
                                f"{self.repeat - len(wrong)} of {self.repeat} runs",
                     "\n".join(wrong[:2]))
        print(f"collective: {self.repeat} runs in {time.monotonic() - start:.1f} s", flush=True)


    # rank_stuck.py's loop: py-spy gives its `while` or its `pass` line.
    LOAD_BATCH = re.compile(r"load_batch \(rank_stuck\.py:1[78]\)")

    def stuck_run(self, name, env):
        script = os.path.join(HERE, "rank_stuck.py")
        d, spec, run_dir = self.workspace(name, f"""name: stuck
steps:
  - name: train
    run: python3 {script}
    stall_timeout: 3s
    parallel:
      cpus: 4
""")
        start = time.monotonic()
        rc, out, err, detail = self.flowrun_run(spec, run_dir, "--grace", "3", timeout=120, env=env)
        print(f"{name}: {time.monotonic() - start:.1f} s", flush=True)
        with open(os.path.join(run_dir, "train", "results.json")) as f:
            res = json.load(f)
        stacks = []
        for r in range(4):
            path = os.path.join(run_dir, "train", f"rank{r}", "stack.txt")
            self.check(os.path.isfile(path), f"{name}: rank {r}'s stack.txt", detail)
            with open(path) as f:
                stacks.append(f.read())
        left = subprocess.run(["pgrep", "-f", script], capture_output=True, text=True).stdout.split()
        self.check(not left, f"{name}: no rank left running", " ".join(left))
        self.check(rc == 124 and res["outcome"] == "stalled", f"{name}: the step stalled (exit 124)", detail)
        return res, err, stacks, detail

    def test_stacks_name_the_odd_rank(self):
        found = py_spy()
        if not found:
            pytest.skip("no py-spy (pip install py-spy, or scripts/test --phase deps)")
        env = torch_env()
        env["FLOWRUN_PY_SPY"] = found
        res, err, stacks, detail = self.stuck_run("stacks", env)
        groups = [(g["ranks"], g["where"]) for g in res["stacks"]["groups"]]
        self.check(res["stacks"]["source"] == "py-spy" and len(groups) == 2 and groups[0][0] == [0, 1, 3]
                   and groups[0][1].startswith("all_reduce (rank_stuck.py:")
                   and groups[1][0] == [2] and self.LOAD_BATCH.fullmatch(groups[1][1]) is not None,
                   "results.json's stacks: ranks 0, 1, 3 in all_reduce, rank 2 in load_batch", json.dumps(res["stacks"]))
        self.check(re.search(r"^flowrun:   ranks 0, 1, 3 \(3 of 4\) are in all_reduce \(rank_stuck\.py:\d+\); "
                             r"rank 2 is in load_batch \(rank_stuck\.py:1[78]\)$", err, re.M) is not None,
                   "the report names rank 2 at its file:line and the others in all_reduce", detail)
        self.check(all("Thread " in s for s in stacks) and "load_batch" in stacks[2], "four whole stacks", stacks[2])

    # The slow rank named from the samples of every rank's stack (forensics' sample), the script unchanged.
    SLOW_LINE = re.compile(r"^flowrun: train: rank 1( \((?P<node>[^)]+)\))? is the slow rank: it waits in collectives "
                           r"(?P<slow>\d+)% of the time, the other ranks (?P<others>\d+)%; its hottest frame is "
                           r"(?P<frame>.+)$", re.M)

    def slow_rank_checks(self, label, err, res, detail, node=None):
        m = self.SLOW_LINE.search(err)
        if not self.check(m is not None, f"{label}: flowrun names rank 1 the slow rank", detail):
            return
        self.check(node is None or m.group("node") == node, f"{label}: the line names rank 1's node {node}", m.group(0))
        self.check(int(m.group("slow")) + 15 <= int(m.group("others")), f"{label}: it waits far less than the others",
                   m.group(0))
        shares = res["wait_shares"]
        # A rank is named once it has 20 samples of its own (kMinSharesSamples). The ranks are sampled in turn and
        # a sample py-spy could not take (the rank between two states) is not counted, so when the test stops the
        # run right after the line, the other rank may have fewer.
        self.check(shares is not None and shares["slow"] is not None and shares["slow"]["ranks"] == [1]
                   and [r["rank"] for r in shares["ranks"]] == [0, 1]
                   and all(r["samples"] >= (20 if r["rank"] == 1 else 1) and 0 <= r["waits"] <= r["samples"]
                           for r in shares["ranks"]),
                   f"{label}: results.json keeps every rank's shares and names rank 1", json.dumps(shares)[:2000])
        # Each rank's blocked samples, and where the kernel counts it (schedstat), its main thread's blocked time
        # over the span of its samples; the share is the estimate from both.
        timed = os.path.exists("/proc/self/schedstat")
        self.check(shares is not None and all(
            r["waits"] <= r["idle"] <= r["samples"] and 0 <= r["wait_share"] <= 1
            and (not timed or (r["span_s"] > 0 and 0 <= r["blocked_s"] <= r["span_s"])) for r in shares["ranks"]),
            f"{label}: each rank's blocked samples{' and blocked time' if timed else ''}", json.dumps(shares)[:2000])
        # Where it sleeps shows in its samples, beyond the other rank's. Which of its functions is the hottest
        # depends on this 2-core machine's load as much as on the script (its forward slows when the cores are
        # busy), so the line's frame is checked to be one of its own places in the script; unit tests pin the
        # choice ([wait_shares]).
        def load_batch(rank):
            r = next((r for r in (shares or {}).get("ranks", []) if r["rank"] == rank), None)
            n = sum(f["samples"] for f in r["frames"] if f["frame"].startswith("load_batch (slow_rank.py:")) if r else 0
            return n / r["samples"] if r and r["samples"] else 0
        frames = [f["frame"] for r in (shares or {}).get("ranks", []) if r["rank"] == 1 for f in r["frames"]]
        self.check(shares is not None and shares["slow"] is not None and load_batch(1) > load_batch(0)
                   and shares["slow"]["frame"] in frames and "(slow_rank.py:" in shares["slow"]["frame"]
                   and "(slow_rank.py:" in m.group("frame"),
                   f"{label}: its samples find it in load_batch, where it sleeps, more than the other rank; the "
                   "line names one of its places in the script", json.dumps(shares)[:2000])

    def slow_rank_spec(self, name, extra=""):
        stop = os.path.join(self.scratch, name + ".stop")
        script = os.path.join(HERE, "slow_rank.py")
        # 60% slower: two ranks share this machine's two cores, so a rank that sleeps gives its CPU to the
        # other and slows the step by less than it sleeps (scripts/bench measures 30% on its own).
        return stop, f"{PYTHON} {script} --slow-rank 1 --slowdown 0.6 --stop {stop}", extra

    def test_slow_rank_named(self):
        found = py_spy()
        if not found:
            pytest.skip("no py-spy (pip install py-spy, or scripts/test --phase deps)")
        stop, run, _ = self.slow_rank_spec("slow")
        d, spec, run_dir = self.workspace("slow", f"name: slow\nsteps:\n  - name: train\n    run: {run}\n"
                                                  f"    parallel:\n      cpus: 2\n")
        env = torch_env()
        env["FLOWRUN_PY_SPY"] = found
        err_path = os.path.join(d, "stderr")
        start = time.monotonic()
        with open(err_path, "w") as err_file:
            p = subprocess.Popen([self.flowrun, spec, "--run-dir", run_dir], cwd=d, env=env, stdout=subprocess.PIPE,
                                 stderr=err_file, text=True)
        named = wait_for(lambda: "is the slow rank" in read_text(err_path) or p.poll() is not None, 240, step=0.2)
        print(f"slow rank: named after {time.monotonic() - start:.1f} s from flowrun's start", flush=True)
        status = subprocess.run([self.flowrun, "status", run_dir], env=env, capture_output=True, text=True).stdout
        open(stop, "w").close()
        out, _ = p.communicate(timeout=120)
        err = read_text(err_path)
        detail = f"exit {p.returncode}\n--- stdout\n{out[-2000:]}\n--- stderr\n{err[-4000:]}"
        self.check(named and p.returncode == 0, "slow rank: the step runs until the test stops it, and succeeds", detail)
        with open(os.path.join(run_dir, "train", "results.json")) as f:
            res = json.load(f)
        self.slow_rank_checks("slow rank", err, res, detail)
        self.check(re.search(r"waiting in collectives\n(.*\n){2}", status) is not None
                   and re.search(r"^  train\s+1\s+running\s+.*\s\d+% of \d+$", status, re.M) is not None,
                   "slow rank: flowrun status shows every rank's share while the step runs", status)
        after = subprocess.run([self.flowrun, "status", run_dir], env=env, capture_output=True, text=True).stdout
        self.check(re.search(r"^train: rank 1 is the slow rank: ", after, re.M) is not None,
                   "slow rank: flowrun status names it after the run", after)

    def test_slow_rank_named_across_nodes(self):
        found = py_spy()
        if not found:
            pytest.skip("no py-spy (pip install py-spy, or scripts/test --phase deps)")
        stop, run, _ = self.slow_rank_spec("slow-nodes")
        # One rank a node: no node sees a suspect of its own to sample faster for, so the samples come
        # twice a second.
        spec = (f"name: slownodes\ncluster:\n  engine: manual\n  address: 127.0.0.1\n"
                f"steps:\n  - name: train\n    run: {run}\n    forensics: {{sample: 0.5s}}\n    parallel:\n"
                f"      cpus: 2\n      nodes: 2\n")
        n = Nodes(self, "slow-nodes", spec, head_env={"PYTHONPATH": None, "PATH": torch_env()["PATH"]})
        self.open.append(n)
        argv = n.command()
        if not self.check(argv is not None, "slow rank across nodes: the head prints the agent command", n.detail()):
            return
        start = time.monotonic()
        n.start_agents(argv, count=2, PYTHONPATH=None, FLOWRUN_PY_SPY=found)
        named = wait_for(lambda: "is the slow rank" in n.head_err() or n.head.poll() is not None, 240, step=0.2)
        print(f"slow rank across nodes: named after {time.monotonic() - start:.1f} s from the agents' start",
              flush=True)
        open(stop, "w").close()
        rc = n.finish("slow rank across nodes", timeout=120)
        self.check(named and rc == 0, "slow rank across nodes: the step runs until the test stops it, and succeeds",
                   n.detail())
        res = n.results()
        node = res["ranks"][1]["node"] if len(res["ranks"]) == 2 else None
        self.slow_rank_checks("slow rank across nodes", n.head_err(), res, n.detail(), node=node)
        n.check_nothing_left("slow rank across nodes")

    def test_stacks_without_py_spy(self):
        env = torch_env()
        env["FLOWRUN_PY_SPY"] = os.path.join(self.scratch, "no-such-py-spy")
        res, err, stacks, detail = self.stuck_run("kernel", env)
        said = err.count("flowrun: cannot take the ranks' Python stacks: FLOWRUN_PY_SPY=")
        self.check(said == 1 and "(install it: pip install py-spy)" in err, "the missing py-spy said once, with the "
                   "command that installs it", detail)
        groups = res["stacks"]["groups"]
        self.check(res["stacks"]["source"] == "kernel" and [2] in [g["ranks"] for g in groups]
                   and any(g["ranks"] == [2] and g["where"].startswith("running (state R") for g in groups),
                   "the kernel's states, rank 2 running apart", json.dumps(res["stacks"]))
        self.check(all("kernel: " in s for s in stacks), "four stack.txt with the kernel's words", stacks[0])
