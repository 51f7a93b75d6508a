"""Hang forensics, cases (i) and (j): a step whose 8 ranks hang, one spinning in a Python loop and the others
waiting for it. stall_timeout finds them silent; flowrun takes every live rank's stack with py-spy before it
signals any, stops the ranks and prints the stacks grouped. On one host (i) flowrun runs py-spy itself; across
nodes (j) each agent runs it on its own ranks and the head groups what they send."""

import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

from . import record
from .common import (BENCH_SRC, ROOT, TORCH_PYTHON, W, WORKERS, agent_env, fresh, mn_launcher, run_quiet, short,
                     show, spec_from, start_head, wait_or_kill)
from .record import summary

ODD_RANK = 5  # on node 2 of 4 in case (j)
STALL_TIMEOUT = "3s"
STALL_LINE = r"^flowrun: step 'work' stalled: .*; stopping the step$"
STACKS_LINE = r"^flowrun:   ranks? [0-9]"  # the grouped report's line


def find_py_spy():
    """The py-spy flowrun is given (FLOWRUN_PY_SPY): the environment's, build/py-spy's, or PATH's; None without."""
    for path in (os.environ.get("FLOWRUN_PY_SPY"), str(ROOT / "build" / "py-spy" / "bin" / "py-spy"),
                 shutil.which("py-spy")):
        if path and os.access(path, os.X_OK):
            return os.path.abspath(path)
    return None


def stall_ranks():
    """(python, mode) of the hung ranks: Debian's torch with a gloo all_reduce, or a plain Python wait."""
    if Path(TORCH_PYTHON).exists():
        r = run_quiet([TORCH_PYTHON, "-c", "import torch.distributed as d; assert d.is_available()"])
        if r.returncode == 0:
            return TORCH_PYTHON, "torch"
    return sys.executable, "plain"


def case_forensics(args, work, launchers, nodes):
    tag = "j" if nodes else "i"
    row = mn_launcher(launchers, "stacks", "flowrun")
    py_spy = find_py_spy()
    if py_spy is None:
        row.available, row.why_not = False, "no py-spy: scripts/test --phase deps installs it in build/py-spy"
    python, mode = stall_ranks()
    row.mode = mode
    if not row.available:
        return
    version = run_quiet([py_spy, "--version"]).stdout.strip()
    row.py_spy = f"{version} (`{short(py_spy)}`, through `FLOWRUN_PY_SPY`)"
    spec = spec_from("stall_nodes.yaml" if nodes else "stall.yaml", work / f"{tag}-stall.yaml", PYTHON=python,
                     RANK=BENCH_SRC / "stall_rank.py", MODE=mode, ODD=ODD_RANK, STALL=STALL_TIMEOUT)
    env = agent_env(work) if nodes else dict(os.environ)
    env["FLOWRUN_PY_SPY"] = py_spy
    for i in range(-1, args.forensics_runs):
        got, failure = forensics_once(spec, fresh(work / f"{tag}-flowrun" / "run"), work, row, env, nodes)
        if failure:
            row.failures.append(f"run {i}: {failure}")
            continue
        if i >= 0:
            row.samples.append(got)


def forensics_once(spec, run_dir, work, row, env, nodes):
    """One hung step: (figures, None), or (None, what went wrong)."""
    wall_at_zero = time.time_ns() - time.monotonic_ns()  # stack.txt's times onto time.monotonic()
    cmd = [str(W.flowrun), "--run-dir", str(run_dir), str(spec)]
    row.command = f"FLOWRUN_PY_SPY={short(env['FLOWRUN_PY_SPY'])} " + show(cmd)
    head, console, agents = start_head(cmd, work, env, row, 4 if nodes else 0)
    detected, _ = console.wait_for(STALL_LINE, 180)
    reported, _ = console.wait_for(STACKS_LINE, 60) if detected else (None, None)
    if reported is None:
        head.terminate()
    rc = wait_or_kill(head, 120)
    console.join()
    for a in agents:
        wait_or_kill(a, 30)
    if detected is None or reported is None or rc != 124:
        return None, f"exit {rc}, stall line seen: {detected is not None}, report seen: {reported is not None}: " \
            + console.tail()
    wrong = stacks_wrong(run_dir)
    if wrong:
        return None, wrong + ": " + console.tail(3)
    files = [run_dir / "work" / f"rank{r}" / "stack.txt" for r in range(WORKERS)]
    last_stack = max(f.stat().st_mtime_ns for f in files) - wall_at_zero
    got = {"report_ns": (reported - detected) * 1e9, "stacks_ns": last_stack - detected * 1e9,
           "line": next(line for _, line in console.lines if re.search(STACKS_LINE, line))}
    fresh(run_dir)
    return got, None


def stacks_wrong(run_dir):
    """What is wrong with the run's stacks ("" when nothing): results.json groups rank ODD_RANK apart from the 7
    others, all by py-spy, and every rank's stack.txt holds py-spy's dump."""
    try:
        stacks = json.loads((run_dir / "work" / "results.json").read_text())["stacks"]
    except (OSError, ValueError, KeyError) as e:
        return f"no stacks in results.json: {e}"
    groups = [(g["ranks"], g["missing"]) for g in (stacks or {}).get("groups", [])]
    others = [r for r in range(WORKERS) if r != ODD_RANK]
    if not stacks or stacks.get("source") != "py-spy" or groups != [(others, None), ([ODD_RANK], None)]:
        return f"results.json's stacks are not 7 ranks and rank {ODD_RANK} apart, by py-spy: {json.dumps(stacks)}"
    for r in range(WORKERS):
        text = (run_dir / "work" / f"rank{r}" / "stack.txt").read_text(errors="replace") \
            if (run_dir / "work" / f"rank{r}" / "stack.txt").exists() else ""
        if not text.startswith("Process ") or "\nThread " not in text:
            return f"rank {r}'s stack.txt is not py-spy's dump: {text[:200]!r}"
    return ""



def record_forensics(L, by_case):
    """(i) or (j): from the stall line to the last stack written and to the grouped report; the report's line."""
    launcher = L["stacks"]
    figures = {"stacks_ms": summary(launcher, "stacks_ns", 1e6), "report_ms": summary(launcher, "report_ns", 1e6)}
    if launcher.samples:
        figures["line"] = launcher.samples[-1]["line"]
    rows = {"stacks": record.row(launcher, **figures)}
    return rows, {"mode": getattr(launcher, "mode", ""), "py_spy": getattr(launcher, "py_spy", ""),
                  "odd_rank": ODD_RANK, "stall_timeout": STALL_TIMEOUT}
