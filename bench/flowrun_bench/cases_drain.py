"""The drain, case (k): 4 ranks on this host, each iterating a real torch DataLoader with 2 worker processes;
rank 1 fails once every rank is in its loop, and the 3 others save an emergency checkpoint on SIGTERM, which
takes one more batch from their DataLoader's workers. The same script and environment under three teardowns:
flowrun's, a process-group SIGTERM to every rank at once with a shared deadline
(bench/group_term_launcher.py), and torchrun's."""

import json
import os
import re
import shutil
import signal
from pathlib import Path

from . import record
from .common import (BENCH_SRC, ROOT, TORCH_PYTHON, W, Launcher, finish, fresh, made, rotate, run_quiet, show,
                     spec_from, tail, timeit)
from .record import summary

DRAIN_RANKS = 4  # bench/drain.yaml's cpus
DRAIN_FAIL_RANK = 1
DRAIN_GRACE_S = 30  # flowrun's --grace, the baseline's deadline; torchrun 1.13's is a fixed 30 s
DRAIN_SCRIPT = ROOT / "tests" / "e2e" / "torch" / "dataloader_checkpoint.py"  # the end-to-end test's rank
DRAIN_LOST = re.compile(r"DataLoader worker \(pid \d+\)[^\n]*")  # torch's words for a worker killed under it
DRAIN_ROWS = ("flowrun", "group", "torchrun")


def drain_python():
    """Why the drain's ranks cannot run here ("" when they can): they need torch's DataLoader."""
    if not Path(TORCH_PYTHON).exists():
        return f"no {TORCH_PYTHON}"
    r = run_quiet([TORCH_PYTHON, "-c", "import torch.utils.data"])
    return "" if r.returncode == 0 else "python3-torch missing: `apt-get install python3-torch`"


def case_drain(args, work, launchers):
    rows = {"flowrun": launchers["flowrun"], "group": Launcher("group"), "torchrun": launchers["torchrun"]}
    launchers["group"] = rows["group"]
    why = drain_python()
    for row in rows.values():
        if why and row.available:
            row.available, row.why_not = False, why
    spec = spec_from("drain.yaml", work / "k-drain.yaml", PYTHON=TORCH_PYTHON, RANK=DRAIN_SCRIPT)
    order = [k for k in DRAIN_ROWS if rows[k].available]
    for i in range(-1, args.drain_runs):  # run -1 warms the caches and is not counted
        for key in rotate(order, max(i, 0)):
            got, failure = drain_once(key, rows[key], spec, work / f"k-{key}" / f"run{i + 1}")
            if failure:
                rows[key].failures.append(f"run {i}: {failure}")
            elif i >= 0:
                rows[key].samples.append(got)
    # Every checkpoint written is read back, all in one process: torch takes seconds to import.
    files = [f for row in rows.values() for s in row.samples for f in s["files"]]
    good = loadable(files) if files else set()
    for row in rows.values():
        for s in row.samples:
            s["saved"] = sum(1 for f in s["files"] if f in good)
            s["all_saved"] = s["saved"] == DRAIN_RANKS - 1


def drain_command(key, spec, run_dir):
    script = str(DRAIN_SCRIPT)
    if key == "flowrun":
        return [str(W.flowrun), "--grace", str(DRAIN_GRACE_S), "--run-dir", str(run_dir), str(spec)]
    if key == "group":
        return [TORCH_PYTHON, str(BENCH_SRC / "group_term_launcher.py"), "--nproc", str(DRAIN_RANKS),
                "--deadline", str(DRAIN_GRACE_S), "--", TORCH_PYTHON, script]
    return [TORCH_PYTHON, str(BENCH_SRC / "torchrun_py311.py"), "--standalone", "--monitor_interval", "0.1",
            "--nproc_per_node", str(DRAIN_RANKS), script]


def drain_once(key, row, spec, d):
    """One run: (figures, None), or (None, what went wrong)."""
    made(fresh(d))
    ready, ckpt, stamp = made(d / "ready"), made(d / "ckpt"), d / "failed"
    env = dict(os.environ, READY_DIR=str(ready), CKPT_DIR=str(ckpt), FAIL_RANK=str(DRAIN_FAIL_RANK),
               FAIL_STAMP=str(stamp))
    cmd = drain_command(key, spec, d / "run")
    row.command = show(cmd).replace(f"/{d.name}/", "/runN/")
    proc, res = timeit(cmd, d, "run", 180, env=env)
    got = finish(proc, res)
    left = leftovers(f"READY_DIR={ready}")
    text = "\n".join(Path(d / f"run.{s}").read_text(errors="replace") for s in ("stdout", "stderr"))
    if got is None or got.get("timed_out") or not stamp.exists():
        return None, f"{got}, rank {DRAIN_FAIL_RANK} failed: {stamp.exists()}: {tail(d / 'run.stderr', 4)}"
    survivors = [r for r in range(DRAIN_RANKS) if r != DRAIN_FAIL_RANK]
    got["drain_ns"] = got["end_realtime_ns"] - int(stamp.read_text())
    got["files"] = [str(ckpt / f"emergency-{r}.pt") for r in survivors if (ckpt / f"emergency-{r}.pt").exists()]
    lost = DRAIN_LOST.findall(text)
    got["lost_line"] = lost[0].strip() if lost else ""
    got["leftovers"] = left
    if key == "flowrun":
        try:
            ranks = {w["rank"]: w for w in json.loads((d / "run" / "work" / "results.json").read_text())["ranks"]}
        except (OSError, ValueError, KeyError):
            ranks = {}
        got["exited"] = sum(1 for r in survivors if ranks.get(r, {}).get("teardown") == "exited")
    shutil.rmtree(d / "run", ignore_errors=True)
    return got, None


def leftovers(mark):
    """How many processes of this run's script outlived the launcher: a rank or one of its DataLoader workers
    (forked, with the rank's command line), that is a process running dataloader_checkpoint.py with `mark`, the run's
    own READY_DIR, in its environment; flowrun's guardian, which ends just after flowrun, is none of them. They
    are killed, so that the next run starts alone."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            argv = Path(entry.path, "cmdline").read_bytes().split(b"\0")
            environ = Path(entry.path, "environ").read_bytes().split(b"\0") if str(DRAIN_SCRIPT).encode() in argv \
                else []
        except OSError:
            continue
        if mark.encode() in environ:
            found.append(int(entry.name))
    for pid in found:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return len(found)


def loadable(files):
    """The checkpoints among files that torch.load reads back as a rank saved them: a step and a batch of 4."""
    code = ("import sys, torch\n"
            "for p in sys.argv[1:]:\n"
            "    try:\n"
            "        c = torch.load(p)\n"
            "        ok = isinstance(c['step'], int) and tuple(c['batch'].shape) == (4, 1)\n"
            "    except Exception:\n"
            "        ok = False\n"
            "    print(int(ok), p)\n")
    r = run_quiet([TORCH_PYTHON, "-c", code] + files)
    return {line[2:] for line in r.stdout.splitlines() if line.startswith("1 ")}



def record_drain(L, by_case):
    """(k): in how many runs every survivor's checkpoint was written and loads, and the failure to the exit."""
    survivors = DRAIN_RANKS - 1
    rows = {}
    for key in DRAIN_ROWS:
        launcher = L[key]
        s = launcher.samples
        figures = {"all_saved": sum(1 for x in s if x["all_saved"]), "saved": sum(x["saved"] for x in s),
                   "drain_ms": summary(launcher, "drain_ns", 1e6),
                   "exit_codes": sorted({x.get("exit", x.get("signal", -1)) for x in s}),
                   "lost_line": next((x["lost_line"] for x in s if x["lost_line"]), ""),
                   "leftovers": sum(x["leftovers"] for x in s)}
        if key == "flowrun":
            # results.json's teardown: exited for every stopped rank.
            figures["exited"] = sum(1 for x in s if x.get("exited") == survivors)
        rows[key] = record.row(launcher, **figures)
    return rows, {"ranks": DRAIN_RANKS, "fail_rank": DRAIN_FAIL_RANK, "grace_s": DRAIN_GRACE_S}
