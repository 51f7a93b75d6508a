#!/usr/bin/env python3
"""Peak memory of the head and the agents while a multi-node step floods them (docs/benchmarks.md).

  bench/output_flood.py [--flowrun PATH] [--bytes N] [--runs N] [--cases devnull,frozen,slow,upload]

Every node is this host: the head is `flowrun SPEC` with `cluster: {engine: manual, address: 127.0.0.1}`,
and two `flowrun agent` processes connect to it with the command and token file it prints. Cases:

  devnull  2 ranks, one per node, each write --bytes to stdout; the head's stdout is /dev/null
  frozen   the same, and the head is stopped (SIGSTOP) for --freeze seconds once the output flows
  slow     the same, the head's stdout a pipe that this script reads at --console-rate MB/s at most
  upload   rank 0 leaves --upload-bytes of random bytes in FLOWRUN_OUTPUT_DIR (collect: all); the head is
           stopped for --freeze seconds while the file arrives

Peak memory is VmHWM from /proc/PID/status (the kernel's record of the process's peak resident set),
read every 5 ms while each process runs; the figure is the largest over the runs. Every byte is checked:
each rank records the size and CRC-32 of what it wrote, and the script compares them with the head's
stdout.log of the rank (or the uploaded file). Prints a Markdown table.
"""

import argparse
import json
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from flowrun_testlib import BLOB_RANK, FLOOD_RANK, PeakMemory, file_crc  # noqa: E402


def clean_env():
    return {k: v for k, v in os.environ.items() if not k.startswith(("FLOWRUN_", "SLURM_"))}


def run_once(args, case, work):
    """One run of `case`; returns ({process: peak MiB}, wall seconds, failure or None)."""
    flowrun = os.path.abspath(args.flowrun)
    upload = case == "upload"
    size = args.upload_bytes if upload else args.bytes
    rank_argv = [sys.executable, "-c", BLOB_RANK, str(size), "0"] if upload else \
        [sys.executable, "-c", FLOOD_RANK, str(size)]
    spec = work / "spec.yaml"
    spec.write_text(
        "name: flood\ncluster: {engine: manual, address: 127.0.0.1}\nsteps:\n  - name: train\n"
        f"    run: {json.dumps(rank_argv)}\n"
        + ("    collect: all\n" if upload else "") + "    parallel: {cpus: 2, nodes: 2}\n")
    run_dir = work / "run"
    err_path = work / "head.err"
    with open(err_path, "w") as err:
        t0 = time.monotonic()
        head = subprocess.Popen([flowrun, str(spec), "--run-dir", str(run_dir)], cwd=work, env=clean_env(),
                                stdin=subprocess.DEVNULL, stderr=err,
                                stdout=subprocess.PIPE if case == "slow" else subprocess.DEVNULL)
    command = None
    while command is None and head.poll() is None:
        m = re.search(r"^flowrun:   (.* agent --rdzv-endpoint .*)$", err_path.read_text(), re.M)
        command = shlex.split(m.group(1)) if m else None
        time.sleep(0.01)
    if command is None:
        return None, None, "the head printed no agent command: " + err_path.read_text()[-500:]
    agents = [subprocess.Popen(command, cwd=work, env=dict(clean_env(), TMPDIR=str(work)),
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL) for _ in range(2)]
    procs = {"head": head, "agent 0": agents[0], "agent 1": agents[1]}
    memory = PeakMemory(procs)
    if case == "slow":
        def drain_console():
            per_read = 256 * 1024
            pause = per_read / (args.console_rate * 1e6)
            while head.stdout.read(per_read):
                time.sleep(pause)
        threading.Thread(target=drain_console, daemon=True).start()
    if case in ("frozen", "upload"):
        watched = run_dir / "train" / "rank0" / ("out/blob" if upload else "stdout.log")
        while head.poll() is None and not (watched.exists() and watched.stat().st_size >= size // 8):
            time.sleep(0.005)
        if head.poll() is None:
            head.send_signal(signal.SIGSTOP)
            time.sleep(args.freeze)
            head.send_signal(signal.SIGCONT)
    rc = head.wait()
    codes = [a.wait() for a in agents]
    wall = time.monotonic() - t0
    peak = memory.stop()
    if rc != 0 or codes != [0, 0]:
        return peak, wall, f"head exit {rc}, agents {codes}: {err_path.read_text()[-800:]}"
    ranks = [0] if upload else [0, 1]
    for r in ranks:
        sent = (work / f"sent.{r}").read_text().split()
        path = run_dir / "train" / ("outputs/rank0/blob" if upload else f"rank{r}/stdout.log")
        got = file_crc(path)
        if (int(sent[0]), sent[1]) != got or got[0] != size:
            return peak, wall, f"rank {r} wrote {sent}, the head has {got}"
    return peak, wall, None


CASES = {
    "devnull": "2 ranks x {gib} to stdout, the head's console /dev/null",
    "frozen": "the same, the head stopped (SIGSTOP) for {freeze:g} s midway",
    "slow": "the same, the head's console a pipe read at {rate:g} MB/s",
    "upload": "{upload} collected output of rank 0, the head stopped for {freeze:g} s midway",
}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--flowrun", default=str(ROOT / "build" / "release" / "flowrun"))
    p.add_argument("--bytes", type=int, default=1 << 30, help="bytes each rank writes to stdout (default 1 GiB)")
    p.add_argument("--upload-bytes", type=int, default=200 << 20, help="the upload case's file (default 200 MiB)")
    p.add_argument("--freeze", type=float, default=3.0, help="seconds the head is stopped (default 3)")
    p.add_argument("--console-rate", type=float, default=64.0, help="the slow console's MB/s (default 64)")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--cases", default="devnull,frozen,slow,upload")
    args = p.parse_args()
    cases = [c for c in args.cases.split(",") if c]
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        sys.exit(f"output_flood.py: unknown case {', '.join(unknown)}; the cases are {', '.join(CASES)}")
    version = subprocess.run([args.flowrun, "--version"], capture_output=True, text=True).stdout.strip()
    print(f"{version} ({args.flowrun}), {args.runs} runs per case\n")
    print("| case | head | agent 0 | agent 1 | wall, median | bytes checked |")
    print("| --- | --- | --- | --- | --- | --- |")
    for case in cases:
        peaks, walls, failures = [], [], []
        for _ in range(args.runs):
            with tempfile.TemporaryDirectory(prefix="flowrun-flood-") as tmp:
                peak, wall, failure = run_once(args, case, Path(tmp))
            if failure:
                failures.append(failure)
            else:
                peaks.append(peak)
                walls.append(wall)
        what = CASES[case].format(gib=f"{args.bytes / 2**30:g} GiB", upload=f"{args.upload_bytes / 2**20:g} MiB",
                                  freeze=args.freeze, rate=args.console_rate)
        if not peaks:
            print(f"| {what} | no successful run: {failures[0][:300]} | | | | |")
            continue
        cells = [f"{max(pk[name] for pk in peaks):.1f} MiB" for name in ("head", "agent 0", "agent 1")]
        print(f"| {what} | " + " | ".join(cells) + f" | {statistics.median(walls):.1f} s | "
              f"{len(peaks)} of {args.runs} runs whole" + (f"; failed: {failures[0][:200]}" if failures else "")
              + " |", flush=True)


if __name__ == "__main__":
    main()
