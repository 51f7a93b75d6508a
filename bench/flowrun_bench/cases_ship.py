"""Case (s): shipping a step's inputs to agents that do not share the head's workdir (cluster.shared_workdir:
false). The head is a real `flowrun` on bench/ship.yaml, run as another host (FLOWRUN_HOSTNAME) so that each of
the 4 `flowrun agent` processes of this host gets the inputs; the floor, bench/shipcopy.py, copies the same
files from one process over 4 loopback TCP streams into 4 receiving processes."""

import os
import subprocess
import sys

from . import record
from .common import BENCH_SRC, BIN, Head, agent_env, fresh, kv_line, made, made_ok, mn_launcher, rotate, run_quiet, show
from .record import median, ratio, summary

FILES = 8  # the inputs: FILES files of random bytes, ship_bytes in all


def case_ship(args, work, launchers):
    per_file = args.ship_bytes // FILES
    home = made_ok(work / "s")
    spec = home / "ship.yaml"
    spec.write_text((BENCH_SRC / "ship.yaml").read_text().replace("@FILES@", str(FILES))
                    .replace("@BYTES@", str(per_file)))
    data = made_ok(home / "data")
    files = []
    for k in range(FILES):
        path = data / f"input{k}.bin"
        with open(path, "wb") as f:
            left = per_file
            while left > 0:
                f.write(os.urandom(min(left, 1 << 20)))
                left -= min(left, 1 << 20)
        files.append(str(path))
    env = agent_env(work)
    rows = {"flowrun": mn_launcher(launchers, "ship", "flowrun"), "floor": mn_launcher(launchers, "shipcopy", "floor")}
    order = [k for k in rows if rows[k].available]
    for i in range(-1, args.mn_slow_runs):
        for key in rotate(order, max(i, 0)):
            row = rows[key]
            if key == "floor":
                dest = made(fresh(work / "s-copy"))
                cmd = [sys.executable, str(BENCH_SRC / "shipcopy.py"), "4", str(dest)] + files
                row.command = show(cmd)
                r = run_quiet(cmd, timeout=600)
                got = kv_line(r.stdout, "bytes")
                fresh(dest)
                if r.returncode != 0 or got is None:
                    row.failures.append(f"run {i}: exit {r.returncode}: {r.stdout[-400:]}")
                    continue
            else:
                got, failure = ship_once(spec, home, row, env)
                if failure:
                    row.failures.append(f"run {i}: {failure}")
                    continue
            if i >= 0:
                row.samples.append(got)


def ship_once(spec, home, row, env):
    run_dir = fresh(home / "run")
    head = Head(spec, run_dir, home, "s-head", env=dict(os.environ, FLOWRUN_HOSTNAME="bench-head"))
    row.command = ("FLOWRUN_HOSTNAME=bench-head " + show(head.cmd) + " & " +
                   show([str(BIN / "spawn"), "4"] + Head.agent_argv(run_dir)))
    if (why := head.without_agent()) is not None:
        return None, why
    agents = subprocess.Popen([str(BIN / "spawn"), "4"] + head.agent, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, cwd=home, env=env)
    first, _ = head.console.wait_for(r"^flowrun: step 'work': node\d+ \(.*\) does not share the workdir", 300)
    started, _ = head.console.wait_for(r"^flowrun: step 'work': 4 nodes joined", 600)
    succeeded, _ = head.console.wait_for(r"^flowrun: step 'work' succeeded", 300)
    if succeeded is None:
        head.stop()
    ended = head.finish()
    _, agents_err = agents.communicate(timeout=120)
    shipping = [line for _, line in head.console.lines if "does not share the workdir" in line]
    fresh(run_dir)
    if None in (first, started, succeeded) or ended is None or ended.get("exit") != 0 or agents.returncode != 0:
        return None, f"head {ended}: {head.console.tail()}; agents exit {agents.returncode}: {agents_err[-300:]}"
    if len(shipping) != 4:
        return None, f"the head shipped to {len(shipping)} nodes, not 4: {shipping}"
    total = 4 * sum(os.path.getsize(f) for f in sorted((home / "data").iterdir()))
    return {"ship_ns": (started - first) * 1e9, "bytes": total, "wall_ns": ended["wall_ns"],
            "head_cpu_ns": ended["cpu_ns"]}, None


def record_ship(L, by_case):
    """(s): flowrun's shipment (the first node's shipping line to every node's start) against a plain copy."""
    rows = {}
    for name, key in (("ship", "ship_ns"), ("shipcopy", "wall_ns")):
        launcher = L[name]
        for s in launcher.samples:
            s["gbps"] = s["bytes"] / (s[key] / 1e9) / 1e9
        figures = {"time_s": summary(launcher, key, 1e9), "gbps": median(launcher, "gbps")}
        if name == "ship":
            figures.update(wall_s=median(launcher, "wall_ns", 1e9), head_cpu_s=median(launcher, "head_cpu_ns", 1e9))
        rows[name] = record.row(launcher, **figures)
    flow, floor = L["ship"], L["shipcopy"]
    fraction = ratio(median(floor, "wall_ns"), median(flow, "ship_ns")) if flow.samples and floor.samples else None
    return rows, {"fraction": fraction}
