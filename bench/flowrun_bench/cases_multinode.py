"""The multi-node cases, every node this host: the head is a real `flowrun` on a manual-engine spec listening
on 127.0.0.1, and the agents connect to it over loopback, as `flowrun agent` processes or as
bench/rdzv_clients. (e) the rendezvous of thousands of agents, (f) 256 real agents, (g) the result gather,
(h) the notice of a SIGKILLed agent, (l) a lost agent among thousands and its spare."""

import json
import os
import shutil
import signal
import subprocess
import time

from . import record
from .common import (BENCH_SRC, BIN, TORCH_PYTHON, W, Head, Launcher, agent_env, free_port, fresh, iso_ns, kv_line,
                     made, made_ok, mn_launcher, rotate, run_quiet, show, spec_from, tail, tmpfs_scratch, wait_or_kill)
from .record import median, ratio, summary

# Figures measured on this machine by the issue that asked for the multi-node cases, quoted beside ours where a
# rerun would take too long (torchrun 1.13, c10d rendezvous, agents on loopback).
TORCHRUN_C10D_8_AGENTS_S = 6.3
TORCHRUN_LOST_NODE_S = 90


def case_rendezvous(args, work, launchers):
    shm = W.shm = tmpfs_scratch()
    roots = {}  # where each row's run directories go
    try:
        for n in args.rdzv_nodes:
            spec = spec_from("nodes.yaml", work / f"e-{n}.yaml", NODES=n)
            rows = {f"disk-{n}": mn_launcher(launchers, f"disk-{n}", "flowrun"),
                    f"bare-{n}": mn_launcher(launchers, f"bare-{n}", "floor")}
            roots[f"disk-{n}"] = made_ok(work / f"e-disk-{n}")
            if shm:
                rows[f"tmpfs-{n}"] = mn_launcher(launchers, f"tmpfs-{n}", "flowrun")
                roots[f"tmpfs-{n}"] = made_ok(shm / f"e-{n}")
            else:
                rows[f"tmpfs-{n}"] = launchers[f"tmpfs-{n}"] = Launcher(f"tmpfs-{n}", False, "no tmpfs at /dev/shm")
            order = [k for k in rows if rows[k].available]
            for i in range(-1, args.mn_runs):
                for key in rotate(order, max(i, 0)):
                    row = rows[key]
                    if key.startswith("bare"):
                        cmd = [str(W.rdzv_clients), "--nodes", str(n), "--bare"]
                        row.command = show(cmd)
                        r = run_quiet(cmd, timeout=300)
                        got = kv_line(r.stdout, "nodes")
                        if r.returncode != 0 or got is None:
                            row.failures.append(f"run {i}: exit {r.returncode}: {r.stdout[-400:]}")
                            continue
                    else:
                        # Run directories stay until every case is measured: on some file systems (this host's
                        # ext4) deleting thousands of files takes long and slows down creating the next ones.
                        got, failure = rendezvous_once(n, spec, roots[key] / f"run{i + 1}", work, row)
                        if failure:
                            row.failures.append(f"run {i}: {failure}")
                            continue
                    if i >= 0:
                        row.samples.append(got)
    finally:
        # The run directories on disk go with the scratch directory, after the last case.
        if shm:
            shutil.rmtree(shm, ignore_errors=True)


def clients_against_head(clients, first_key, spec, run_dir, work, row, name):
    """A head on `spec` and, once it prints its agent command, bench/rdzv_clients `clients` against it: (the
    clients' key=value line that starts with `first_key`, the head's end, None), or (None, None, why)."""
    head = Head(spec, run_dir, work, name)
    row.command = show(head.cmd) + " & " + show(clients + ["--endpoint", "127.0.0.1:PORT", "--token-file",
                                                           str(run_dir / "work" / "agent.token")])
    if (why := head.without_agent()) is not None:
        return None, None, why
    r = run_quiet(clients + ["--endpoint", head.option("--rdzv-endpoint"), "--token-file",
                             head.option("--token-file")], timeout=300)
    if r.returncode != 0:
        head.stop()
    ended = head.finish()
    got = kv_line(r.stdout, first_key)
    if r.returncode != 0 or got is None or ended is None or ended.get("exit") != 0:
        return None, None, (f"rdzv_clients exit {r.returncode}: {r.stdout[-400:]}; head {ended}: "
                            f"{head.console.tail()}")
    return got, ended, None


def rendezvous_once(n, spec, run_dir, work, row):
    got, ended, failure = clients_against_head([str(W.rdzv_clients), "--nodes", str(n)], "nodes", spec, run_dir,
                                               work, row, "e-head")
    if failure:
        return None, failure
    got["head_wall_ns"] = ended["wall_ns"]
    got["head_maxrss_kib"] = ended["maxrss_kib"]
    return got, None


def case_spare(args, work, launchers):
    """(l): N agents and a spare (rdzv_clients --spares 1 --lose N/2) hold their first ranks; node rank N/2's
    agent then closes its connection. Rows: the run directory on disk and on tmpfs."""
    n = args.spare_nodes
    spec = spec_from("spare.yaml", work / f"l-{n}.yaml", NODES=n)
    shm = tmpfs_scratch()
    roots = {"disk": made_ok(work / "l-disk")}
    rows = {"disk": mn_launcher(launchers, "spare-disk", "flowrun")}
    if shm:
        roots["tmpfs"] = made_ok(shm / "l")
        rows["tmpfs"] = mn_launcher(launchers, "spare-tmpfs", "flowrun")
    else:
        rows["tmpfs"] = launchers["spare-tmpfs"] = Launcher("spare-tmpfs", False, "no tmpfs at /dev/shm")
    order = [k for k in rows if rows[k].available]
    try:
        for i in range(-1, args.mn_runs):
            for key in rotate(order, max(i, 0)):
                got, failure = spare_once(n, spec, roots[key] / f"run{i + 1}", work, rows[key])
                if failure:
                    rows[key].failures.append(f"run {i}: {failure}")
                elif i >= 0:
                    rows[key].samples.append(got)
    finally:
        if shm:
            shutil.rmtree(shm, ignore_errors=True)


def spare_once(n, spec, run_dir, work, row):
    clients = [str(W.rdzv_clients), "--nodes", str(n), "--spares", "1", "--lose", str(n // 2)]
    got, _, failure = clients_against_head(clients, "noticed_ns", spec, run_dir, work, row, "l-head")
    return got, failure


def case_agents(args, work, launchers):
    env = agent_env(work)
    rows = {}
    for n in sorted({8, args.agents}):
        rows[f"flowrun-{n}"] = (mn_launcher(launchers, f"flowrun-{n}", "flowrun"), n)
    rows["torchrun-8"] = (mn_launcher(launchers, "torchrun-8", "torchrun"), 8)
    order = [k for k in rows if rows[k][0].available]
    for i in range(-1, args.mn_runs):
        for key in rotate(order, max(i, 0)):
            row, n = rows[key]
            if key.startswith("torchrun"):
                if i >= args.torchrun_agent_runs:
                    continue
                got, failure = torchrun_agents_once(n, work, row, i)
            else:
                got, failure = agents_once(n, work, row, env)
            if failure:
                row.failures.append(f"run {i}: {failure}")
                continue
            if i >= 0:
                row.samples.append(got)


def agents_once(n, work, row, env):
    spec = spec_from("nodes.yaml", work / f"f-{n}.yaml", NODES=n)
    run_dir = fresh(work / f"f-{n}" / "run")
    head = Head(spec, run_dir, work, "f-head")
    row.command = show(head.cmd) + " & " + show([str(BIN / "spawn"), str(n)] + Head.agent_argv(run_dir))
    if (why := head.without_agent()) is not None:
        return None, why
    agents = subprocess.Popen([str(BIN / "spawn"), str(n)] + head.agent, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, cwd=work, env=env)
    succeeded, _ = head.console.wait_for(r"^flowrun: step 'work' succeeded", 120)
    joined, _ = head.console.wait_for(r"^flowrun: step 'work': \d+ nodes joined", 0)
    if succeeded is None:
        head.stop()
    ended = head.finish()
    try:
        _, agents_err = agents.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        agents.kill()
        _, agents_err = agents.communicate()
    if succeeded is None or joined is None or ended is None or ended.get("exit") != 0 or agents.returncode != 0:
        return None, f"head {ended}: {head.console.tail()}; agents exit {agents.returncode}: {agents_err[-300:]}"
    fresh(run_dir)
    return {"success_ns": (succeeded - head.t0) * 1e9, "joined_ns": (joined - head.t0) * 1e9,
            "wall_ns": ended["wall_ns"], "maxrss_kib": ended["maxrss_kib"]}, None


def torchrun_agents_once(n, work, row, i):
    port = free_port()
    cmd = [TORCH_PYTHON, str(BENCH_SRC / "torchrun_py311.py"), "--nnodes", str(n), "--nproc_per_node", "1",
           "--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{port}", "--rdzv_id", f"bench-{i + 1}",
           "--monitor_interval", "0.1", "--no_python", "/bin/true"]
    row.command = f"{n} x " + show(cmd).replace(f":{port}", ":PORT").replace(f"bench-{i + 1}", "ID")
    logs = [work / f"f-torchrun-{k}.stderr" for k in range(n)]
    t0 = time.monotonic()
    procs = [subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(log, "w"), stdin=subprocess.DEVNULL,
                              cwd=work) for log in logs]
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=180))
        except subprocess.TimeoutExpired:
            p.kill()
            codes.append(p.wait())
    wall = time.monotonic() - t0
    if any(codes):
        return None, f"exit codes {codes}: {tail(logs[0], 3)}"
    return {"wall_ns": wall * 1e9}, None


def case_gather(args, work, launchers):
    per_rank = args.gather_bytes // 4
    spec = spec_from("gather.yaml", work / "gather.yaml", BYTES=per_rank)
    env = agent_env(work)
    flowrun = mn_launcher(launchers, "gather", "flowrun")
    floor = mn_launcher(launchers, "tcpcopy", "floor")
    # The floor's files, written once, as the ranks write theirs (and likewise still in the page cache).
    sources = made_ok(work / "g-src")
    files = []
    for k in range(4):
        path = sources / f"blob{k}"
        with open(path, "wb") as f:
            left = per_rank
            while left > 0:
                f.write(bytes(min(left, 1 << 20)))
                left -= min(left, 1 << 20)
        files.append(str(path))
    rows = {"flowrun": flowrun, "floor": floor}
    order = [k for k in rows if rows[k].available]
    for i in range(-1, args.mn_slow_runs):
        for key in rotate(order, max(i, 0)):
            row = rows[key]
            if key == "floor":
                dest = made(fresh(work / "g-copy"))
                cmd = [str(BIN / "tcpcopy"), str(dest)] + files
                row.command = show(cmd)
                r = run_quiet(cmd, timeout=300)
                got = kv_line(r.stdout, "bytes")
                fresh(dest)
                if r.returncode != 0 or got is None:
                    row.failures.append(f"run {i}: exit {r.returncode}: {r.stdout[-400:]}")
                    continue
            else:
                got, failure = gather_once(per_rank, spec, work, row, env)
                if failure:
                    row.failures.append(f"run {i}: {failure}")
                    continue
            if i >= 0:
                row.samples.append(got)
    fresh(sources)


def gather_once(per_rank, spec, work, row, env):
    run_dir = fresh(work / "g-flowrun" / "run")
    head = Head(spec, run_dir, work, "g-head")
    row.command = show(head.cmd) + " & " + show([str(BIN / "spawn"), "4"] + Head.agent_argv(run_dir))
    if (why := head.without_agent()) is not None:
        return None, why
    agents = subprocess.Popen([str(BIN / "spawn"), "4"] + head.agent, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, cwd=work, env=env)
    succeeded, _ = head.console.wait_for(r"^flowrun: step 'work' succeeded", 300)
    if succeeded is None:
        head.stop()
    ended = head.finish()
    _, agents_err = agents.communicate(timeout=120)
    if succeeded is None or ended is None or ended.get("exit") != 0 or agents.returncode != 0:
        return None, f"head {ended}: {head.console.tail()}; agents exit {agents.returncode}: {agents_err[-300:]}"
    result = json.loads((run_dir / "work" / "results.json").read_text())
    attempt = result["attempts"][-1]
    sizes = [(run_dir / "work" / f"rank{r}" / "out" / "blob").stat().st_size for r in range(4)]
    if sizes != [per_rank] * 4:
        return None, f"the head got {sizes} bytes from the ranks, not {per_rank} each"
    last_exit = max(iso_ns(w["end"]) for w in attempt["workers"])
    got = {"upload_ns": iso_ns(attempt["end"]) - last_exit, "wall_ns": ended["wall_ns"],
           "bytes": sum(sizes), "head_cpu_ns": ended["cpu_ns"]}
    fresh(run_dir)
    return got, None


def sleepers(arg):
    """Pids of the processes whose command line is exactly `sleep ARG`."""
    want = b"sleep\0" + arg.encode() + b"\0"
    pids = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                    if f.read() == want:
                        pids.append(int(entry.name))
            except OSError:
                pass
    return pids


def case_lost(args, work, launchers):
    row = mn_launcher(launchers, "lost", "flowrun")
    env = agent_env(work)
    if not row.available:
        return
    for i in range(-1, args.mn_runs):
        got, failure = lost_once(work, row, env, i)
        if failure:
            row.failures.append(f"run {i}: {failure}")
            continue
        if i >= 0:
            row.samples.append(got)


def lost_once(work, row, env, i):
    # A duration no other process sleeps, so the workers can be found in /proc.
    seconds = f"60.{i + 1:02d}{os.getpid() % 10000:04d}"
    spec = spec_from("lost.yaml", work / "h-lost.yaml", SECONDS=seconds)
    run_dir = fresh(work / "h-flowrun" / "run")
    head = Head(spec, run_dir, work, "h-head")
    row.command = show(head.cmd) + " & 2 x " + show(Head.agent_argv(run_dir))
    if (why := head.without_agent()) is not None:
        return None, why
    agents = [subprocess.Popen(head.agent, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               stdin=subprocess.DEVNULL, cwd=work, env=env) for _ in range(2)]
    deadline = time.monotonic() + 30
    while len(sleepers(seconds)) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    running = len(sleepers(seconds))
    killed_real = time.time_ns()
    killed = time.monotonic()
    os.kill(agents[1].pid, signal.SIGKILL)
    noticed, m = head.console.wait_for(r"\(node rank (\d+) of 2\) lost: its agent's connection closed", 30)
    if noticed is None:
        head.stop()
    ended = head.finish(60)
    deadline = time.monotonic() + 10
    while sleepers(seconds) and time.monotonic() < deadline:
        time.sleep(0.005)
    gone = time.monotonic()
    left = len(sleepers(seconds))
    for a in agents:
        wait_or_kill(a, 30)
    if running != 4 or noticed is None or ended is None or ended.get("exit") != 1 or left:
        return None, (f"{running} of 4 workers ran before the kill, {left} left after; head {ended}: "
                      f"{head.console.tail()}")
    fresh(run_dir)
    return {"notice_ns": (noticed - killed) * 1e9, "exit_ns": ended["end_realtime_ns"] - killed_real,
            "gone_ns": (gone - killed) * 1e9, "node_rank": int(m.group(1))}, None



def record_rendezvous(L, by_case):
    """(e): for each number of agents, when the last welcome, assign, start and bye arrived, against the
    floor's start."""
    rows = {}
    for key, launcher in L.items():
        if not key.startswith(("disk-", "tmpfs-", "bare-")):
            continue
        floor = L.get(f"bare-{key.split('-')[1]}")
        start = median(launcher, "start_ns")
        rss = median(launcher, "head_maxrss_kib", 1024)
        figures = {"welcome_ms": median(launcher, "welcome_ns", 1e6), "assign_ms": median(launcher, "assign_ns", 1e6),
                   "start_ms": summary(launcher, "start_ns", 1e6), "total_ms": median(launcher, "total_ns", 1e6),
                   "times_floor": ratio(start, median(floor, "start_ns") if floor else None), "head_rss_mib": rss}
        if not key.startswith("bare-") and launcher.samples:
            # From the last assign to the last start: the agents' ready, then the head creating every rank's
            # directory and log files and sending start.
            figures["gap_ms"] = record.stat(s["start_ns"] - s["assign_ns"] for s in launcher.samples)["median"] / 1e6
        rows[key] = record.row(launcher, **figures)
    # Each agent dials from its own loopback address (127.1.0.1 + i), as agents on N hosts would.
    return rows, {"own_addresses": True}


def record_spare(L, by_case):
    """(l): from the lost agent's close to the first stop, the spare's assign and start, the last start."""
    rows = {}
    for key in ("spare-disk", "spare-tmpfs"):
        launcher = L[key]
        rows[key] = record.row(launcher, **{f"{name}_ms": summary(launcher, f"{name}_ns", 1e6)
                                            for name in ("noticed", "spare_assign", "spare_start", "restarted")})
    return rows, {}


def record_agents(L, by_case):
    """(f): N real agents and 8, to their nodes joined and the step's success; torchrun's 8 agents."""
    rows = {}
    for key, launcher in L.items():
        if key.startswith("flowrun-"):
            rows[key] = record.row(launcher, agents=int(key.split("-")[1]), joined_s=median(launcher, "joined_ns", 1e9),
                                   success_s=summary(launcher, "success_ns", 1e9),
                                   wall_s=median(launcher, "wall_ns", 1e9),
                                   rss_mib=median(launcher, "maxrss_kib", 1024))
        elif key.startswith("torchrun-"):
            rows[key] = record.row(launcher, agents=8, wall_s=summary(launcher, "wall_ns", 1e9))
    return rows, {"torchrun_issue_s": TORCHRUN_C10D_8_AGENTS_S}


def record_gather(L, by_case):
    """(g): flowrun's upload (last rank's exit to the step's end) against a plain copy of the same bytes."""
    rows = {}
    for name, key in (("gather", "upload_ns"), ("tcpcopy", "wall_ns")):
        launcher = L[name]
        for s in launcher.samples:
            s["gbps"] = s["bytes"] / (s[key] / 1e9) / 1e9
        figures = {"time_s": summary(launcher, key, 1e9), "gbps": median(launcher, "gbps")}
        if name == "gather":
            figures.update(wall_s=median(launcher, "wall_ns", 1e9), head_cpu_s=median(launcher, "head_cpu_ns", 1e9))
        rows[name] = record.row(launcher, **figures)
    flow, floor = L["gather"], L["tcpcopy"]
    fraction = ratio(median(floor, "wall_ns"), median(flow, "upload_ns")) if flow.samples and floor.samples else None
    return rows, {"fraction": fraction}


def record_lost(L, by_case):
    """(h): from the kill to the head's line, its exit and the last worker gone."""
    launcher = L["lost"]
    rows = {"lost": record.row(launcher, notice_ms=summary(launcher, "notice_ns", 1e6),
                               exit_ms=summary(launcher, "exit_ns", 1e6), gone_ms=summary(launcher, "gone_ns", 1e6),
                               node_ranks=sorted({s["node_rank"] for s in launcher.samples}))}
    return rows, {"torchrun_issue_s": TORCHRUN_LOST_NODE_S}
