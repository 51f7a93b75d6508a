"""Case (r), recovery from a lost node: 2 nodes and a waiting third on this host, real gloo ranks (Debian's
torch); node 1's agent and rank are SIGKILLed; time to every rank of the new attempt started, for flowrun with
spare_nodes: 1 (with and without forensics) and for torchrun's elastic agents (c10d, --max_restarts 1)."""

import os
import re
import subprocess
import time
from pathlib import Path

from . import record
from .common import (BENCH_SRC, TORCH_PYTHON, Head, agent_env, free_port, fresh, kill_tree, made_ok, mn_launcher,
                     rotate, show, spec_from, tail)
from .record import median, summary


def stamps(d):
    """The recovery worker's start stamps in d: [(time, rank, parent pid, agent pid or None, pid)]."""
    found = []
    for entry in os.scandir(d):
        m = re.fullmatch(r"start\.(\d+)", entry.name)
        if not m:
            continue
        words = Path(entry.path).read_text().split()
        agent = None if words[3] == "-" else int(words[3].rsplit("-", 2)[1])
        found.append((float(words[0]), int(words[1]), int(words[2]), agent, int(m.group(1))))
    return found


def wait_stamps(d, after, timeout):
    """Once ranks 0 and 1 have each started after `after` (a time.time()), the later of their first
    starts; None when the wait runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        first = {}
        for t, rank, _, _, _ in stamps(d):
            if t > after:
                first[rank] = min(t, first.get(rank, t))
        if len(first) == 2:
            return max(first.values())
        time.sleep(0.01)
    return None


def case_recovery(args, work, launchers):
    rows = {"flowrun": mn_launcher(launchers, "recovery", "flowrun"),
            "flowrun-noforensics": mn_launcher(launchers, "recovery-noforensics", "flowrun"),
            "torchrun": mn_launcher(launchers, "recovery-torchrun", "torchrun")}
    order = [k for k in rows if rows[k].available]
    env = agent_env(work)
    for i in range(-1, args.recovery_runs):
        for key in rotate(order, max(i, 0)):
            row = rows[key]
            d = fresh(work / f"r-{key}")
            made_ok(d)
            if key == "torchrun":
                got, failure = torchrun_recovery_once(d, row, i)
            else:
                got, failure = flowrun_recovery_once(d, row, env, key == "flowrun")
            if failure:
                row.failures.append(f"run {i}: {failure}")
                continue
            if i >= 0:
                row.samples.append(got)


def flowrun_recovery_once(d, row, env, forensics):
    spec = spec_from("recovery.yaml", d / "recovery.yaml", PYTHON=TORCH_PYTHON,
                     WORKER=str(BENCH_SRC / "recovery_worker.py"), DIR=str(d),
                     FORENSICS="{stacks: true}" if forensics else "off")
    run_dir = d / "run"
    head = Head(spec, run_dir, d, "r-head")
    row.command = show(head.cmd) + " & 3 x " + show(Head.agent_argv(run_dir))
    if (why := head.without_agent()) is not None:
        return None, why
    agents = [subprocess.Popen(head.agent, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               stdin=subprocess.DEVNULL, cwd=d, env=env) for _ in range(3)]
    spare, _ = head.console.wait_for(r"spare node \S+ joined", 60)
    started = wait_stamps(d, 0, 120)
    failure = None
    recovered = None
    if spare is None or started is None:
        failure = "the ranks or the spare did not start: " + head.console.tail()
    else:
        time.sleep(0.5)  # a few all-reduces: the ranks are in their loop
        victim = next(s for s in stamps(d) if s[1] == 1)
        fault = time.time()
        kill_tree([victim[3], victim[4]])
        recovered = wait_stamps(d, fault, 120)
        if recovered is None:
            failure = "no new attempt started: " + head.console.tail()
    (d / "stop").touch()
    ended = head.finish(120)
    for a in agents:
        try:
            a.wait(30)
        except subprocess.TimeoutExpired:
            kill_tree([a.pid])
            a.wait()
    if failure is None and (ended is None or ended.get("exit") != 0):
        failure = f"head {ended}: {head.console.tail()}"
    if failure:
        return None, failure
    return {"recover_ns": (recovered - fault) * 1e9}, None


def torchrun_recovery_once(d, row, i):
    port = free_port()
    cmd = [TORCH_PYTHON, str(BENCH_SRC / "torchrun_py311.py"), "--nnodes", "2", "--nproc_per_node", "1",
           "--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{port}", "--rdzv_id", f"recovery-{i + 1}",
           "--max_restarts", "1", "--monitor_interval", "0.1", str(BENCH_SRC / "recovery_worker.py"), str(d)]
    row.command = "3 x " + show(cmd).replace(f":{port}", ":PORT").replace(f"recovery-{i + 1}", "ID")
    agents = []
    for k in range(3):
        agents.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(d / f"agent{k}.log", "w"),
                                       stdin=subprocess.DEVNULL, cwd=d))
        if k == 1:
            wait_stamps(d, 0, 120)  # the third agent comes once the first two run: it waits
    failure = None
    if wait_stamps(d, 0, 1) is None:
        failure = "the ranks did not start: " + tail(d / "agent0.log", 3)
    else:
        time.sleep(0.5)
        victim = next(s for s in stamps(d) if s[1] == 1)
        fault = time.time()
        kill_tree([victim[2], victim[4]])  # its agent (the worker's parent) and the worker
        recovered = wait_stamps(d, fault, 120)
        if recovered is None:
            failure = "no new attempt started within 120 s: " + tail(d / "agent0.log", 3)
    (d / "stop").touch()
    for a in agents:
        try:
            a.wait(30)
        except subprocess.TimeoutExpired:
            kill_tree([a.pid])
            a.wait()
    if failure:
        return None, failure
    return {"recover_ns": (recovered - fault) * 1e9}, None



def record_recovery(L, by_case):
    """(r): from the kill to both ranks of the new attempt started; how often torchrun lost its c10d store."""
    rows = {k: record.row(L[k], recover_s=summary(L[k], "recover_ns", 1e9))
            for k in ("recovery", "recovery-noforensics", "recovery-torchrun")}
    fr, tr = L["recovery"], L["recovery-torchrun"]
    figures = {"torchrun_ratio": median(tr, "recover_ns") / median(fr, "recover_ns")
               if fr.samples and tr.samples else None}
    if tr.available:
        counted = [f for f in tr.failures if not f.startswith("run -1")]
        figures["torchrun_counted"] = len(tr.samples) + len(counted)
        # The lost node's agent hosted the c10d store: the others stop instead of recovering.
        figures["torchrun_stranded"] = sum(1 for f in counted if "RendezvousConnectionError" in f)
    return rows, figures
