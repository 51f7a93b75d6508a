"""Case (p): a gang's start, in emulated pods (tests/pods/podsim.py: a network, UTS, PID and mount namespace
each, no shared workdir). `flowrun manifest` writes the Kubernetes objects of bench/gang.yaml for N pods; podsim
starts the pods in a random order (its seed), a random delay apart, each running the manifest's command verbatim.
The figure: from the last pod's start to the last rank's start (each rank prints CLOCK_MONOTONIC as it starts,
the clock podsim stamps each pod's start with), i.e. what the gang adds once every pod is up. Needs root and
network namespaces (skipped, saying why, without)."""

import random
import re
import shutil
import subprocess
import sys

from . import record
from .common import BENCH_SRC, ROOT, W, made_ok, mn_launcher, show
from .record import summary

PODS = 4
RANK_LINE = re.compile(r"rank (\d+) starts at ([0-9.]+)")


def podsim():
    sys.path.insert(0, str(ROOT / "tests" / "pods"))
    import podsim as module  # noqa: E402 (tests/pods is not a package of the bench)
    return module


def case_gang(args, work, launchers):
    row = mn_launcher(launchers, "gang", "flowrun")
    sim = podsim()
    why = sim.unavailable()
    if why:
        row.available, row.why_not = False, why
        return
    image = made_ok(work / "p-image")
    shutil.copy(BENCH_SRC / "gang.yaml", image / "gang.yaml")
    (image / "rank.py").write_text("import os, time\n"
                                   "print('rank', os.environ['RANK'], 'starts at', time.monotonic(), flush=True)\n")
    flowrun = str(W.flowrun)
    manifest = subprocess.run([flowrun, "manifest", "gang.yaml", "--image", "bench", "--workdir", "/workspace"],
                              capture_output=True, text=True, cwd=image)
    if manifest.returncode != 0:
        row.failures.append(f"flowrun manifest: {manifest.stderr[-400:]}")
        return
    text = manifest.stdout
    row.command = show([flowrun, "manifest", "gang.yaml", "--image", "bench", "--workdir", "/workspace"]) + \
        f" | tests/pods/podsim.py up - ({PODS} pods, started in a random order)"
    for i in range(-1, args.mn_runs):
        seed = random.randrange(1 << 30)
        got, failure = gang_once(sim, flowrun, text, image, seed)
        if failure:
            row.failures.append(f"run {i} (seed {seed}): {failure}")
            continue
        if i >= 0:
            row.samples.append(got)


def gang_once(sim, flowrun, manifest, image, seed):
    pods = sim.Pods(flowrun, seed=seed, delay=0.3)
    try:
        keys = pods.add_manifest(manifest, str(image))
        pods.start()
        codes = {k: pods.wait(k, timeout=120) for k in keys}
        if any(codes.values()):
            return None, f"exit codes {codes}: {pods.log(keys[0])[-400:]}"
        starts = [float(t) for _, t in RANK_LINE.findall(pods.log(keys[0]))]
        if len(starts) != len(keys):
            return None, f"{len(starts)} rank lines, not {len(keys)}: {pods.log(keys[0])[-400:]}"
        last_pod = max(pods.rec[k]["at"] for k in keys)  # when the kubelet started it
        return {"ready_ns": (max(starts) - last_pod) * 1e9, "pods": len(keys)}, None
    finally:
        pods.down()


def record_gang(L, by_case):
    """(p): the last pod's start to the last rank's start."""
    launcher = L["gang"]
    return {"gang": record.row(launcher, ready_s=summary(launcher, "ready_ns", 1e9))}, {"pods": PODS}
