"""The slow rank, case (t): 2 real gloo DDP ranks (tests/e2e/torch/slow_rank.py, Debian's torch) on this host.
What sampling every rank's stack costs the job (the same job with forensics' sample off and at its default,
run in turn), and how soon flowrun names a rank slowed by 30%, on one node and on 2 agents of this host."""

import json
import os
import re
import subprocess
import time

from . import record
from .cases_forensics import find_py_spy
from .common import (ROOT, TORCH_PYTHON, W, agent_env, fresh, made_ok, mn_launcher, run_quiet, short, show, spec_from,
                     start_head, wait_or_kill)
from .record import summary

SCRIPT = ROOT / "tests" / "e2e" / "torch" / "slow_rank.py"
SLOW_RANK = 1
SLOWDOWN = 0.3
NAME_TIMEOUT_S = 180  # a run that names no rank by then is stopped and does not count
OFF = "forensics: {sample: off}"
SAMPLED = "# no forensics key: the default sampling"
LOOP_LINE = r"(\d+) steps, ([\d.]+) ms a step before the slowdown, ([\d.]+) s in all"
SLOW_LINE = r"^flowrun: train: rank (\d+)(?: \(([^)]+)\))? is the slow rank: .*; its hottest frame is (.+)$"


def torch_ready():
    r = run_quiet([TORCH_PYTHON, "-c", "import torch.distributed as d; assert d.is_available()"])
    return r.returncode == 0


def case_slow_rank(args, work, launchers):
    rows = {key: mn_launcher(launchers, key, "flowrun") for key in ("off", "sampled", "named", "named_nodes")}
    py_spy = find_py_spy()
    why = ("no py-spy: scripts/test --phase deps installs it in build/py-spy" if py_spy is None else
           None if torch_ready() else f"no torch.distributed in {TORCH_PYTHON}")
    if why:
        for row in rows.values():
            row.available, row.why_not = False, why
        return
    rows["sampled"].py_spy = f"{run_quiet([py_spy, '--version']).stdout.strip()} (`{short(py_spy)}`)"
    env = dict(os.environ, FLOWRUN_PY_SPY=py_spy)
    env.pop("PYTHONPATH", None)
    cost(args, work, rows, env)
    stop = work / "t-stop"
    run_args = f'"--slow-rank", "{SLOW_RANK}", "--slowdown", "{SLOWDOWN}", "--stop", "{stop}"'
    for key, template, runs in (("named", "slow_rank.yaml", args.name_runs),
                                ("named_nodes", "slow_rank_nodes.yaml", args.name_nodes_runs)):
        spec = spec_from(template, work / f"t-{key}.yaml", PYTHON=TORCH_PYTHON, SCRIPT=SCRIPT, ARGS=run_args,
                         FORENSICS=SAMPLED)
        if runs == 0:
            rows[key].available, rows[key].why_not = False, "not run this time"
        for i in range(runs):
            got, failure = named_once(spec, fresh(work / f"t-{key}" / "run"), work, rows[key], env, stop,
                                      nodes=key == "named_nodes")
            if failure:
                rows[key].failures.append(f"run {i}: {failure}")
            else:
                rows[key].samples.append(got)


def cost(args, work, rows, env):
    """The same job without a slow rank, with sampling off and at its default in turn (off first), after one
    uncounted run of each."""
    run_args = f'"--max-steps", "{args.cost_steps}"'
    specs = {key: spec_from("slow_rank.yaml", work / f"t-{key}.yaml", PYTHON=TORCH_PYTHON, SCRIPT=SCRIPT,
                            ARGS=run_args, FORENSICS=OFF if key == "off" else SAMPLED) for key in ("off", "sampled")}
    for i in range(-1, args.cost_runs):
        for key in ("off", "sampled"):
            got, failure = cost_once(specs[key], fresh(work / f"t-{key}" / "run"), work, rows[key], env)
            if failure:
                rows[key].failures.append(f"run {i}: {failure}")
            elif i >= 0:
                rows[key].samples.append(dict(got, run=i))


def cost_once(spec, run_dir, work, row, env):
    """One job to its end: ({loop_s, ...}, None), or (None, what went wrong)."""
    cmd = [str(W.flowrun), "--run-dir", str(run_dir), str(spec)]
    row.command = f"FLOWRUN_PY_SPY={short(env['FLOWRUN_PY_SPY'])} " + show(cmd)
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, cwd=work,
                           text=True, errors="replace", env=env, timeout=600)
    except subprocess.TimeoutExpired:
        return None, "no end within 600 s"
    m = re.search(LOOP_LINE, r.stdout)
    if r.returncode != 0 or m is None:
        return None, f"exit {r.returncode}, rank 0's line seen: {m is not None}: " + r.stderr[-600:]
    shares = wait_shares(run_dir)
    named = re.search(SLOW_LINE, r.stderr, re.M) is not None or bool(shares and shares.get("slow"))
    return {"loop_s": float(m.group(3)), "steps": int(m.group(1)), "step_ms": float(m.group(2)), "named": named,
            "samples": [rank["samples"] for rank in shares["ranks"]] if shares else []}, None


def wait_shares(run_dir):
    try:
        return json.loads((run_dir / "train" / "results.json").read_text())["wait_shares"]
    except (OSError, ValueError, KeyError):
        return None


def named_once(spec, run_dir, work, row, env, stop, nodes):
    """One job with rank SLOW_RANK slowed, stopped once flowrun names a rank: ({named_s, ...}, None), or (None,
    what went wrong). The time is from flowrun's start to the line's arrival on its stderr."""
    stop.unlink(missing_ok=True)
    cmd = [str(W.flowrun), "--run-dir", str(run_dir), str(spec)]
    row.command = f"FLOWRUN_PY_SPY={short(env['FLOWRUN_PY_SPY'])} " + show(cmd)
    if nodes:
        env = dict(agent_env(work), FLOWRUN_PY_SPY=env["FLOWRUN_PY_SPY"])
        env.pop("PYTHONPATH", None)
    started = time.monotonic()
    head, console, agents = start_head(cmd, work, env, row, 2 if nodes else 0)
    named, m = console.wait_for(SLOW_LINE, NAME_TIMEOUT_S)
    made_ok(stop.parent)
    stop.touch()
    rc = wait_or_kill(head, 120)
    console.join()
    for a in agents:
        wait_or_kill(a, 30)
    if named is None or rc != 0:
        return None, f"exit {rc}, a rank named: {named is not None}: " + console.tail(3)
    shares = wait_shares(run_dir)
    slow = (shares or {}).get("slow") or {}
    if int(m.group(1)) != SLOW_RANK or slow.get("ranks") != [SLOW_RANK]:
        final = ", ".join(f"rank {r['rank']} {r['waits']} of {r['samples']}" for r in (shares or {}).get("ranks", []))
        return None, (f"the line names rank {m.group(1)}, results.json's wait_shares.slow names "
                      f"{slow.get('ranks') or 'no rank'} (its final samples waiting: {final}); the line: {m.group(0)}")
    return {"named_s": named - started, "frame": m.group(3), "line": m.group(0),
            "slow_share": slow.get("slow_share"), "others_share": slow.get("others_share"),
            "samples": [rank["samples"] for rank in shares["ranks"]]}, None


def record_slow_rank(L, by_case):
    """(t): the loop's time with and without sampling and their ratio; the time to name the slowed rank."""
    off, on = L["off"], L["sampled"]
    rows = {
        "off": record.row(off, loop_s=summary(off, "loop_s")),
        "sampled": record.row(on, loop_s=summary(on, "loop_s"), named=sum(s["named"] for s in on.samples),
                              samples=record.stat(n for s in on.samples for n in s["samples"])),
    }
    for key in ("named", "named_nodes"):
        row = L[key]
        rows[key] = record.row(row, named_s=summary(row, "named_s"),
                               frames=sorted({s["frame"] for s in row.samples}),
                               line=row.samples[-1]["line"] if row.samples else None)
    medians = [record.median(off, "loop_s"), record.median(on, "loop_s")]
    by_run = {s["run"]: s["loop_s"] for s in off.samples}
    pairs = [s["loop_s"] / by_run[s["run"]] - 1 for s in on.samples if s["run"] in by_run]
    figures = {"cost": medians[1] / medians[0] - 1 if all(medians) else None,
               "pair_cost": record.stat(pairs), "py_spy": getattr(on, "py_spy", ""),
               "step_ms": record.stat(s["step_ms"] for s in off.samples + on.samples),
               "slow_rank": SLOW_RANK, "slowdown": SLOWDOWN, "name_timeout_s": NAME_TIMEOUT_S}
    return rows, figures
