"""Measures flowrun against torchrun and against a C floor, and writes docs/benchmarks.md.

  scripts/bench                      every case, default run counts, writes docs/benchmarks.md
  scripts/bench --runs 5 --slow-runs 2 --log-bytes 200000000 --out /tmp/b.md   a quicker look
  scripts/bench --cases a,c          only some cases
  scripts/bench --only multinode     only the multi-node cases (e to h, l, s, p and r)
  scripts/bench --only forensics     only the hang forensics (i and j), in about 2 minutes
  scripts/bench --only drain         only the drain (k), in a few minutes (--drain-runs 3: about a minute)
  scripts/bench --only slow          only the slow rank (t), in about 10 minutes
  scripts/bench --commit HEAD        measure flowrun exactly as committed (not the working tree)
  scripts/bench --render-only        no measuring: docs/benchmarks.md again from the records in bench/results

Cases on one node (8 workers everywhere):
  a  start-up: 8 workers of /bin/true, end to end; floor: fork/exec 8 /bin/true and wait (bench/spawn.c)
  b  teardown: rank 1 exits 3 at once, the other 7 sleep 60 s; time from rank 1's exit to the launcher's exit
  c  peak RSS of the launcher process itself, 8 workers of /bin/true
  d  log forwarding: 8 ranks write 100-byte lines through the launcher into a reader that checks every
     line; floor: a plain poll(2) forwarder in C (bench/forward.c)
Multi-node cases (the control plane; every node is this host, on loopback, engine: manual):
  e  rendezvous of 256 to 16384 agents: bench/rdzv_clients.cpp speaks the protocol for N agents from one
     process against a real head; floor: the same clients against a bare server (rdzv_clients --bare); the
     curve of time and the head's memory against agents
  f  256 real `flowrun agent` processes against one head, a /bin/true worker each; beside it 8 agents, and
     torchrun's c10d rendezvous with 8 agents
  g  result gather: 4 agents upload 256 MiB each (collect: all); floor: 4 plain TCP streams (bench/tcpcopy.c)
  h  notice of a SIGKILLed agent: time from kill -9 to the head's "lost" line
  l  a lost agent among thousands: 4096 agents and a spare (bench/rdzv_clients.cpp) hold their ranks; one
     agent's connection closes; time to the head's stop, the spare's assign and start, the last start
  s  shipping inputs: 1 GiB (8 files of random bytes) from the head to each of 4 agents that do not share its
     workdir (shared_workdir: false); floor: one process copying them over 4 plain TCP streams (bench/shipcopy.py)
  r  recovery from a lost node: 2 nodes and a waiting third, real gloo ranks (Debian's torch); node 1's agent
     and rank are SIGKILLed; time to every rank of the new attempt started: flowrun with spare_nodes: 1
     (with and without forensics) against torchrun's elastic agents (c10d, --nnodes 2, --max_restarts 1)
Hang forensics (py-spy: FLOWRUN_PY_SPY, build/py-spy from scripts/test --phase deps, or PATH):
  i  8 Python ranks on this host hang, one in a loop and 7 in a gloo all_reduce (Debian's torch; without it a
     plain Python wait): time from the stall line to the grouped report, every rank's py-spy stack present
  j  the same 8 ranks on 4 agents of this host, 2 each (engine: manual)
The slow rank (Debian's torch, on CPUs; py-spy as for the hang forensics):
  t  2 gloo DDP ranks (tests/e2e/torch/slow_rank.py) on this host: the training loop's time with forensics'
     sample off and at its default, run in turn (the sampler's cost); then with rank 1 slowed by 30%, the time
     from flowrun's start to its line naming rank 1, on one node and on 2 agents of this host (1 rank each)
Drain (Debian's torch, on CPUs):
  k  4 ranks of a real torch DataLoader (num_workers=2, tests/e2e/torch/dataloader_checkpoint.py) that save an
     emergency checkpoint on SIGTERM after one more batch; rank 1 fails once all are in their loop: in how many
     runs every surviving rank's checkpoint was written (and loads), and the time from the failure to the
     launcher's exit, for flowrun (drain-aware teardown), a baseline that sends SIGTERM to every rank's process
     group at once with a shared deadline (bench/group_term_launcher.py) and torchrun

It builds a release flowrun in build/release (cmake -DFLOWRUN_BENCH=ON, ninja; bench/rdzv_clients with it)
and the C helpers of bench/ in build/bench (cc), runs flowrun, torchrun and the floor interleaved, and
reports medians (the hang forensics and the slow rank: medians and maxima). torchrun is Debian's python3-torch run by
/usr/bin/python3 through bench/torchrun_py311.py; without torch it is reported as not measured.

Each case writes its record, RESULTS/<case>.json: every run's figures, the medians and ratios the report shows,
and the conditions (machine, commit, versions, load, the command line). RESULTS is bench/results for
docs/benchmarks.md and OUT's name without .md plus .results for another --out (or --results DIR). The report
is then rendered from every record in RESULTS, so a case not run keeps its last record; so are the parts
measured otherwise, kept there as written: output_flood.md (memory under an output flood, measured by
bench/output_flood.py) and outputs.md (gathering outputs). Not part of scripts/test.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import (cases_drain, cases_forensics, cases_gang, cases_multinode, cases_node, cases_recovery, cases_ship,
               cases_slow, record, render)
from .build import build, export_commit
from .common import ROOT, Launcher, W, die, log, run_quiet
from .conditions import conditions, flowrun_launches, git_facts, load_average, machine_facts, now_utc, torch_facts

OUT = ROOT / "docs" / "benchmarks.md"
RESULTS = ROOT / "bench" / "results"


def forensics(nodes):
    return lambda args, work, launchers: cases_forensics.case_forensics(args, work, launchers, nodes=nodes)


# Each case: how it measures (filling a Launcher per row), how its record sums the runs up, and the spec
# templates it runs (kept in the record as they were).
CASES = {
    "a": (cases_node.case_startup, cases_node.record_startup, ["true.yaml"]),
    "b": (cases_node.case_teardown, cases_node.record_teardown, ["teardown.yaml"]),
    "c": (lambda args, work, launchers: cases_node.case_startup(args, work, launchers, memory=True),
          cases_node.record_memory, ["true.yaml"]),
    "d": (cases_node.case_logs, cases_node.record_logs, ["logs.yaml"]),
    "e": (cases_multinode.case_rendezvous, cases_multinode.record_rendezvous, ["nodes.yaml"]),
    "f": (cases_multinode.case_agents, cases_multinode.record_agents, ["nodes.yaml"]),
    "g": (cases_multinode.case_gather, cases_multinode.record_gather, ["gather.yaml"]),
    "h": (cases_multinode.case_lost, cases_multinode.record_lost, ["lost.yaml"]),
    "l": (cases_multinode.case_spare, cases_multinode.record_spare, ["spare.yaml"]),
    "s": (cases_ship.case_ship, cases_ship.record_ship, ["ship.yaml"]),
    "p": (cases_gang.case_gang, cases_gang.record_gang, ["gang.yaml"]),
    "r": (cases_recovery.case_recovery, cases_recovery.record_recovery, ["recovery.yaml"]),
    "i": (forensics(False), cases_forensics.record_forensics, ["stall.yaml"]),
    "j": (forensics(True), cases_forensics.record_forensics, ["stall_nodes.yaml"]),
    "k": (cases_drain.case_drain, cases_drain.record_drain, ["drain.yaml"]),
    "t": (cases_slow.case_slow_rank, cases_slow.record_slow_rank, ["slow_rank.yaml", "slow_rank_nodes.yaml"]),
}
ALL_CASES = (render.NODE_CASES + render.MULTINODE_CASES + render.FORENSICS_CASES + render.SLOW_CASES
             + render.DRAIN_CASES)
# The options a record keeps: what shaped its runs, and the part's command line in the report.
OPTIONS = ("runs", "slow_runs", "log_bytes", "torchrun_log_bytes", "mn_runs", "mn_slow_runs", "torchrun_agent_runs",
           "forensics_runs", "drain_runs", "rdzv_nodes", "spare_nodes", "agents", "recovery_runs", "gather_bytes",
           "ship_bytes", "cost_runs", "cost_steps", "name_runs", "name_nodes_runs")


def parse(argv):
    p = argparse.ArgumentParser(prog="scripts/bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=20, help="counted runs of cases a, b, c (default 20)")
    p.add_argument("--slow-runs", type=int, default=5, help="counted runs of case d (default 5)")
    p.add_argument("--log-bytes", type=int, default=2_000_000_000, help="case d volume for flowrun and the floor")
    p.add_argument("--torchrun-log-bytes", type=int, default=50_000_000, help="case d volume for torchrun")
    p.add_argument("--cases", default="a,b,c,d,e,f,g,h,l,s,p,r,i,j,t,k",
                   help="comma-separated subset of a,b,c,d,e,f,g,h,l,s,p,r,i,j,t,k")
    p.add_argument("--only", choices=["node", "multinode", "forensics", "slow", "drain"],
                   help="only the single-node cases (a to d), only the multi-node ones (e to h, l, s, p, r), only the hang "
                   "forensics (i, j), only the slow rank (t) or only the drain (k)")
    p.add_argument("--mn-runs", type=int, default=5, help="counted runs of cases e, f (flowrun) and h (default 5)")
    p.add_argument("--mn-slow-runs", type=int, default=3,
                   help="counted runs of case g (default 3)")
    p.add_argument("--torchrun-agent-runs", type=int, default=2,
                   help="counted runs of torchrun's 8 agents in case f (default 2; each takes several seconds)")
    p.add_argument("--forensics-runs", type=int, default=5, help="counted runs of cases i and j (default 5)")
    p.add_argument("--cost-runs", type=int, default=5,
                   help="case t: counted runs with sampling off and with it on, each (default 5)")
    p.add_argument("--cost-steps", type=int, default=2500,
                   help="case t: the training steps of each of those runs (default 2500, about 25 s here)")
    p.add_argument("--name-runs", type=int, default=3, help="case t: runs with a slow rank on one node (default 3)")
    p.add_argument("--name-nodes-runs", type=int, default=3,
                   help="case t: runs with a slow rank across 2 agents (default 3; 0: not measured)")
    p.add_argument("--drain-runs", type=int, default=10,
                   help="counted runs of case k for each launcher (default 10)")
    p.add_argument("--rdzv-nodes", default="256,1024,4096,16384",
                   help="case e: the numbers of agents (default 256,1024,4096,16384)")
    p.add_argument("--spare-nodes", type=int, default=4096,
                   help="case l: the agents that hold a seat, beside the spare (default 4096)")
    p.add_argument("--agents", type=int, default=256, help="case f: the number of flowrun agents (default 256)")
    p.add_argument("--recovery-runs", type=int, default=3,
                   help="counted runs of case r for each launcher (default 3; torchrun's take 15 s or more)")
    p.add_argument("--gather-bytes", type=int, default=1 << 30,
                   help="case g: the bytes all 4 ranks write together (default 1 GiB)")
    p.add_argument("--ship-bytes", type=int, default=1 << 30,
                   help="case s: the inputs each of the 4 agents gets (default 1 GiB)")
    p.add_argument("--out", default=str(OUT), help="the report to write")
    p.add_argument("--results", metavar="DIR",
                   help="where the records go and the report is rendered from (default: bench/results for "
                   "docs/benchmarks.md, else OUT's name without .md plus .results)")
    p.add_argument("--render-only", nargs="?", const="", metavar="DIR",
                   help="measure nothing: write the report from the records in DIR (default: as --results)")
    p.add_argument("--skip-build", action="store_true", help="use the flowrun already built")
    p.add_argument("--commit", metavar="REV",
                   help="measure flowrun as committed in REV (built from `git archive` in build/bench/release) "
                   "instead of the working tree in build/release")
    p.add_argument("--no-torchrun", action="store_true", help="do not run torchrun")
    p.add_argument("--note", default="", help="a remark on the run's conditions for the report's 'run' row "
                   "(other work on the machine, ...)")
    args = p.parse_args(argv)
    args.argv = argv
    out = Path(args.out).resolve()
    if args.results is None:
        args.results = str(RESULTS if out == OUT else out.with_suffix(".results"))
    if args.render_only == "":
        args.render_only = args.results
    cases = [c for c in args.cases.split(",") if c]
    if any(len(c) != 1 or c not in ALL_CASES for c in cases):
        die(f"--cases takes letters among a,b,c,d,e,f,g,h,l,s,p,r,i,j,t,k, not '{args.cases}'")
    if args.only:
        keep = {"node": render.NODE_CASES, "multinode": render.MULTINODE_CASES, "forensics": render.FORENSICS_CASES,
                "slow": render.SLOW_CASES, "drain": render.DRAIN_CASES}[args.only]
        cases = [c for c in cases if c in keep]
    args.case_list = cases
    try:
        args.rdzv_nodes = [int(n) for n in args.rdzv_nodes.split(",") if n]
    except ValueError:
        die(f"--rdzv-nodes takes numbers separated by commas, not '{args.rdzv_nodes}'")
    return args


def measure(args, flowrun_ok, flowrun_why, torch_ok, torch_why):
    """Runs each case asked for in a scratch directory: {case: {row name: Launcher}}."""
    W.work = Path(tempfile.mkdtemp(prefix="flowrun-bench-"))
    by_case = {}
    try:
        for case in args.case_list:
            launchers = {
                "flowrun": Launcher("flowrun", flowrun_ok, flowrun_why),
                "torchrun": Launcher("torchrun", torch_ok, torch_why),
                "floor": Launcher("floor"),
                "floor_tee": Launcher("floor_tee"),
                "floor_files": Launcher("floor_files"),
                "flowrun_nofold": Launcher("flowrun_nofold", flowrun_ok, flowrun_why),
                "worker": Launcher("worker"),
            }
            # What the case before wrote (case e: hundreds of thousands of files) is written back first: its
            # writeback would otherwise run under the next case's disk writes (case g's gather).
            os.sync()
            log(f"case ({case})")
            case_started = time.monotonic()
            CASES[case][0](args, W.work, launchers)
            by_case[case] = launchers
            log(f"case ({case}) took {time.monotonic() - case_started:.0f} s")
    finally:
        # Case (e) leaves a few hundred thousand files in the scratch directory; deleting them can take a
        # minute, so it happens in the background once every case is measured.
        subprocess.Popen(["rm", "-rf", "--", str(W.work)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
        log(f"removing {W.work} in the background")
    return by_case


def main(argv=None):
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.render_only is not None:
        render.write(args.render_only, args.out)
        log(f"wrote {args.out} from the records in {args.render_only}")
        return
    multinode = any(c in render.MULTINODE_CASES for c in args.case_list)
    if args.commit:
        r = run_quiet(["git", "-C", str(ROOT), "rev-parse", "--verify", args.commit + "^{commit}"])
        if r.returncode != 0:
            die(f"--commit {args.commit}: not a commit")
        args.commit = r.stdout.strip()
        build(args.skip_build, *export_commit(args.commit, args.skip_build), clients=multinode)
    else:
        build(args.skip_build, ROOT, ROOT / "build" / "release", clients=multinode)

    torch_ok, torch_why, torch_version = torch_facts(args.no_torchrun)
    flowrun_ok, flowrun_why = flowrun_launches()
    started = now_utc()
    load_before = load_average()
    by_case = measure(args, flowrun_ok, flowrun_why, torch_ok, torch_why)
    load_after = load_average()

    cond = conditions(args, torch_version, started, (load_before, load_after), machine_facts(), git_facts(args.commit))
    options = {key: getattr(args, key) for key in OPTIONS}
    for case, launchers in by_case.items():
        _, summed, templates = CASES[case]
        rows, figures = summed(launchers, by_case)
        spec = "".join((ROOT / "bench" / t).read_text() for t in templates)
        path = record.write(args.results, record.record(case, cond, options, rows, figures, spec))
        log(f"wrote {path}")
    render.write(args.results, args.out)
    log(f"wrote {args.out}")
