"""The cases on one node, 8 workers everywhere: (a) start-up, (b) teardown, (c) the launcher's peak memory and
(d) log forwarding, each of flowrun against torchrun and a C floor."""

import os
import re
import subprocess

from . import record
from .common import (BIN, W, WORKERS, Launcher, finish, fresh, made, parse_kv, rotate, show, spec_from, tail, timeit,
                     torchrun_cmd)
from .record import median, ratio, summary


# Where run `i` of a case keeps its run directory. Each run has its own, and they all stay until the bench's
# scratch directory goes, as a user's runs stay: on ext4 without a journal (this host's disk), a file made
# within minutes of thousands deleted costs more the more were deleted (the inode allocator passes over every
# recently deleted inode), which deleting each run's directory before the next would measure instead.
def run_dir(d, i):
    return d / f"run{i + 1}"


def case_startup(args, work, launchers, memory=False):
    tag = "c" if memory else "a"
    spec = spec_from("true.yaml", work / "true.yaml")
    runs = {
        "flowrun": lambda d, i: [str(W.flowrun), "--run-dir", str(run_dir(d, i)), str(spec)],
        "torchrun": lambda d, i: torchrun_cmd(["/bin/true"]),
        "floor": lambda d, i: [str(BIN / "spawn"), str(WORKERS), "/bin/true"],
    }
    if not memory:
        # The floor that also keeps a run's record as flowrun does (each rank's directory, log files and end
        # record; the run's record), in a run directory of its own as flowrun's is.
        runs["floor_files"] = lambda d, i: [str(BIN / "spawn"), "-t", str(made(run_dir(d, i))), str(WORKERS),
                                            "/bin/true"]
    if memory:
        runs["worker"] = lambda d, i: ["/bin/true"]
    order = [n for n in runs if launchers[n].available]
    for i in range(-1, args.runs):  # run -1 warms the caches and is not counted
        for name in rotate(order, max(i, 0)):
            d = work / f"{tag}-{name}"
            d.mkdir(exist_ok=True)
            cmd = runs[name](d, i)
            proc, res = timeit(cmd, d, "run", 120, memory=memory)
            got = finish(proc, res)
            launcher = launchers[name]
            launcher.command = show(cmd)
            if got is None or got.get("exit") != 0 or got.get("timed_out"):
                launcher.failures.append(f"run {i}: {got}\n{tail(d / 'run.stderr')}")
                continue
            if i >= 0:
                launcher.samples.append(got)


# flowrun's lines that say how many of the workers' lines the console did not show.
NOT_SHOWN = (re.compile(r"^flowrun: (?:  |step 'work': )the console did not keep up: (\d+) lines? ", re.M),
             re.compile(r"^flowrun: (\d+) lines? of the workers' output not shown here", re.M))


def stopped_reader(work, spec, lines):
    """(d), a reader that stops: flowrun's stdout is a pipe nobody reads until flowrun has exited. With
    --console-wait 1 the ranks wait a second, then go on with their lines counted; every line is shown (what
    the pipe holds) or counted."""
    launcher = Launcher("stopped")
    d = work / "d-stopped"
    d.mkdir(exist_ok=True)
    cmd = [str(W.flowrun), "--console-wait", "1", "--run-dir", str(fresh(d / "run")), str(spec)]
    launcher.command = show(cmd) + " | (sleep until it exits)"
    proc, res = timeit(cmd, d, "run", 900, stdout=subprocess.PIPE)
    proc.wait()  # nothing read until it has exited
    shown = proc.stdout.read().count(b"\n")
    proc.stdout.close()
    got = parse_kv(res.read_text()) if res.exists() else None
    err = (d / "run.stderr").read_text(errors="replace")
    counted = sum(int(n) for pattern in NOT_SHOWN for n in pattern.findall(err))
    if got is None or got.get("exit") != 0:
        launcher.failures.append(f"{got}\n{tail(d / 'run.stderr')}")
    else:
        got.update(shown=shown, counted=counted, lines=lines)
        launcher.samples.append(got)
    fresh(d / "run")
    return launcher


def case_teardown(args, work, launchers):
    stamp = work / "b-stamp"
    spec = spec_from("teardown.yaml", work / "teardown.yaml", BIN=BIN, STAMP=stamp)
    runs = {
        "flowrun": lambda d, i: [str(W.flowrun), "--run-dir", str(run_dir(d, i)), str(spec)],
        "torchrun": lambda d, i: torchrun_cmd([str(BIN / "failer"), str(stamp)]),
    }
    order = [n for n in runs if launchers[n].available]
    for i in range(-1, args.runs):
        for name in rotate(order, max(i, 0)):
            d = work / f"b-{name}"
            d.mkdir(exist_ok=True)
            stamp.unlink(missing_ok=True)
            cmd = runs[name](d, i)
            proc, res = timeit(cmd, d, "run", 120)
            got = finish(proc, res)
            launcher = launchers[name]
            launcher.command = show(cmd)
            if got is None or got.get("timed_out") or not stamp.exists():
                launcher.failures.append(f"run {i}: {got}, stamp written: {stamp.exists()}\n{tail(d / 'run.stderr')}")
                continue
            got["teardown_ns"] = got["end_realtime_ns"] - int(stamp.read_text())
            if i >= 0:
                launcher.samples.append(got)


def case_logs(args, work, launchers):
    per_rank = args.log_bytes // WORKERS
    small = args.torchrun_log_bytes // WORKERS
    spec = spec_from("logs.yaml", work / "logs.yaml", BIN=BIN, BYTES=per_rank)
    producer = str(BIN / "producer")
    runs = {
        "flowrun": (lambda d: [str(W.flowrun), "--run-dir", str(fresh(d / "run")), str(spec)], "flowrun:work",
                    per_rank),
        # The console unfolded: what folding like lines costs when no line is alike (every line is unique).
        "flowrun_nofold": (lambda d: [str(W.flowrun), "--no-fold", "--run-dir", str(fresh(d / "run")), str(spec)],
                           "flowrun:work", per_rank),
        "torchrun": (lambda d: torchrun_cmd(["--tee", "3", producer, str(small)]), "torchrun", small),
        "floor": (lambda d: [str(BIN / "forward"), str(WORKERS), producer, str(per_rank)], "none", per_rank),
        "floor_tee": (lambda d: [str(BIN / "forward"), "-t", str(made(fresh(d / "run"))), str(WORKERS), producer,
                                 str(per_rank)], "none", per_rank),
    }
    order = [n for n in runs if launchers[n].available]
    for i in range(-1, args.slow_runs):
        for name in rotate(order, max(i, 0)):
            make, fmt, rank_bytes = runs[name]
            lines = rank_bytes // 100
            d = work / f"d-{name}"
            d.mkdir(exist_ok=True)
            cmd = make(d)
            # The previous run's 2 GB of log files written back first: else the launcher after one that wrote
            # them (floor_tee before flowrun, in every rotation) pays for their writeback.
            os.sync()
            proc, res = timeit(cmd, d, "run", 900, stdout=subprocess.PIPE)
            reader_cmd = [str(BIN / "reader"), fmt, str(WORKERS), str(lines), str(d / "reader.out")]
            reader = subprocess.Popen(reader_cmd, stdin=proc.stdout, stderr=open(d / "reader.stderr", "w"))
            proc.stdout.close()
            got = finish(proc, res)
            reader.wait()
            launcher = launchers[name]
            launcher.command = show(cmd) + " | " + show(reader_cmd[:-1])
            checked = parse_kv((d / "reader.out").read_text()) if (d / "reader.out").exists() else None
            if got is None or got.get("exit") != 0 or got.get("timed_out") or checked is None:
                launcher.failures.append(f"run {i}: {got} {checked}\n{tail(d / 'run.stderr')}")
                fresh(d / "run")
                continue
            got.update(checked)
            got["payload"] = rank_bytes // 100 * 100 * WORKERS
            if name.startswith("flowrun"):
                logs = sorted((d / "run").glob("work/rank*/stdout.log"))
                got["log_files"] = len(logs)
                got["log_bytes"] = sum(p.stat().st_size for p in logs)
            if i >= 0:
                launcher.samples.append(got)
            fresh(d / "run")
    if launchers["flowrun"].available:
        launchers["stopped"] = stopped_reader(work, spec, per_rank // 100 * WORKERS)


def record_startup(L, by_case):
    """(a): wall time of each launcher; how many times flowrun's it is."""
    rows = {n: record.row(L[n], wall_ms=summary(L[n], "wall_ns", 1e6))
            for n in ("flowrun", "torchrun", "floor", "floor_files")}
    fl = median(L["flowrun"], "wall_ns")
    return rows, {"torchrun_ratio": ratio(median(L["torchrun"], "wall_ns"), fl),
                  "floor_ratio": ratio(fl, median(L["floor"], "wall_ns")),
                  "files_floor_ratio": ratio(fl, median(L["floor_files"], "wall_ns")),
                  "files_cost_ratio": ratio(median(L["floor_files"], "wall_ns"), median(L["floor"], "wall_ns"))}


def record_teardown(L, by_case):
    """(b): from rank 1's exit to the launcher's, and the whole run."""
    rows = {n: record.row(L[n], teardown_ms=summary(L[n], "teardown_ns", 1e6), wall_ms=summary(L[n], "wall_ns", 1e6),
                          exit_codes=sorted({s.get("exit", -1) for s in L[n].samples}))
            for n in ("flowrun", "torchrun")}
    return rows, {"torchrun_ratio": ratio(median(L["torchrun"], "teardown_ns"), median(L["flowrun"], "teardown_ns"))}


def record_memory(L, by_case):
    """(c): each process's ru_maxrss, and VmHWM as sampled."""
    rows = {n: record.row(L[n], maxrss_mib=summary(L[n], "maxrss_kib", 1024), hwm_mib=median(L[n], "hwm_kib", 1024))
            for n in ("flowrun", "torchrun", "floor", "worker")}
    return rows, {"torchrun_ratio": ratio(median(L["torchrun"], "maxrss_kib"), median(L["flowrun"], "maxrss_kib"))}


def record_logs(L, by_case):
    """(d): each launcher's rate and what it cost; flowrun's rate against the floors and torchrun."""
    rows = {}
    for n in ("flowrun", "flowrun_nofold", "torchrun", "floor", "floor_tee"):
        launcher = L[n]
        for s in launcher.samples:
            s["gbps"] = s["payload"] / (s["wall_ns"] / 1e9) / 1e9
        figures = {}
        if launcher.samples:
            figures = {"volume_mb": launcher.samples[0]["payload"] / 1e6, "gbps": summary(launcher, "gbps"),
                       "cpu_s": median(launcher, "cpu_ns", 1e9), "rss_mib": median(launcher, "maxrss_kib", 1024),
                       "lines": median(launcher, "ok"),
                       **{k: sum(s[k] for s in launcher.samples) for k in ("torn", "lost", "dup")}}
        rows[n] = record.row(launcher, **figures)
    fr, tr = L["flowrun"], L["torchrun"]
    figures = {}
    if fr.samples:
        figures["floor_fraction"] = ratio(median(fr, "gbps"), median(L["floor"], "gbps"))
        figures["damaged"] = sum(s["torn"] + s["lost"] + s["dup"] for s in fr.samples)
        figures["logs_whole"] = all(s.get("log_files") == WORKERS and s.get("log_bytes") == s["payload"]
                                    for s in fr.samples)
        figures["tee_fraction"] = ratio(median(fr, "gbps"), median(L["floor_tee"], "gbps"))
        if L["flowrun_nofold"].samples:
            figures["fold_fraction"] = ratio(median(fr, "gbps"), median(L["flowrun_nofold"], "gbps"))
        stopped = L.get("stopped")
        if stopped is not None and stopped.samples:
            s = stopped.samples[0]
            figures["stopped"] = {"exit": s["exit"], "wall_s": s["wall_ns"] / 1e9, "shown": s["shown"],
                                  "counted": s["counted"], "lines": s["lines"], "command": stopped.command}
        elif stopped is not None:
            figures["stopped"] = {"failed": "; ".join(stopped.failures)[:2000]}
        if tr.samples:
            figures["torchrun_ratio"] = ratio(median(fr, "gbps"), median(tr, "gbps"))
            # torchrun's rate without its start-up, taken from case (a) of the same run.
            started = by_case.get("a", {}).get("torchrun")
            up = median(started, "wall_ns") if started else None
            wall = median(tr, "wall_ns")
            if up and wall > up:
                figures["torchrun_startup_s"] = up / 1e9
                figures["torchrun_net_gbps"] = tr.samples[0]["payload"] / ((wall - up) / 1e9) / 1e9
    return rows, figures
