"""scripts/bench's renderer (bench/flowrun_bench/render*.py): docs/benchmarks.md is the rendering of the
records in bench/results, and records made here (no measuring) render into the page's tables, verdicts and
notes; a case's runs are summed up into its record's figures.

  python3 -m pytest tests/test_bench_render.py [-k NAME]
"""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from flowrun_bench import cases_node, record, render  # noqa: E402
from flowrun_bench.common import Launcher  # noqa: E402

pytestmark = pytest.mark.bench

CONDITIONS = {"started": "2026-12-01 10:00 UTC", "load_before": "0.50 0.40 0.30", "load_after": "0.60 0.50 0.40",
              "cpus": "2 (a test CPU)", "memory": "8.0 GiB", "os": "a test system", "compiler": "a test compiler",
              "flowrun": "flowrun 0.1.0", "commit": "0123456789abcdef0123", "sources_changed": "0123456 a change",
              "dirty": [], "exact": False, "torchrun": "torch 1.13", "note": "",
              "invocation": "scripts/bench --cases a"}
OPTIONS = {"runs": 20, "slow_runs": 5, "log_bytes": 2_000_000_000, "torchrun_log_bytes": 50_000_000}


def row(command, counted=20, available=True, why_not="", failures=(), **figures):
    return {"available": available, "why_not": why_not, "command": command, "runs": [], "failures": list(failures),
            "figures": {"counted": counted, **figures}}


def ms(median, lo, hi):
    return {"median": median, "min": lo, "max": hi}


def write_record(directory, case, rows, figures, conditions=CONDITIONS, spec="name: x\n"):
    path = os.path.join(directory, f"{case}.json")
    with open(path, "w") as f:
        json.dump(record.record(case, conditions, OPTIONS, rows, figures, spec), f)


@pytest.fixture
def records(scratch):
    """A directory of records: (a) with torchrun missing and a failed run, (b) from another run, and the drain
    (k); the kept flood part beside them."""
    write_record(scratch, "a", {
        "flowrun": row("build/release/flowrun --run-dir $TMP/a/run $TMP/true.yaml", wall_ms=ms(11.56, 9.8, 15.43)),
        "torchrun": row("", counted=0, available=False, why_not="python3-torch missing"),
        "floor": row("build/bench/spawn 8 /bin/true", counted=19, failures=["run 3: exit 1\nkilled"],
                     wall_ms=ms(4.85, 4.09, 6.04)),
    }, {"torchrun_ratio": None, "floor_ratio": 11.56 / 4.85}, spec="name: bench-true\n")
    later = dict(CONDITIONS, started="2026-12-02 11:00 UTC", load_before="1.80 1.00 1.00",
                 load_after="2.97 1.00 1.00", invocation="scripts/bench --cases b --runs 5", commit="fedcba9876543210",
                 dirty=["lib/x.cpp"])
    write_record(scratch, "b", {
        "flowrun": row("flowrun teardown.yaml", counted=5, teardown_ms=ms(6.07, 3.79, 10.18),
                       wall_ms=ms(14.6, 9.7, 21.3), exit_codes=[3]),
        "torchrun": row("torchrun failer", counted=5, teardown_ms=ms(366.97, 337.95, 441.7),
                        wall_ms=ms(1646.6, 1373.7, 2213.5), exit_codes=[1]),
    }, {"torchrun_ratio": 60.4}, conditions=later)
    with open(os.path.join(scratch, render.KEPT_FLOOD), "w") as f:
        f.write("# Multi-node: memory under an output flood\n\nKept as written.\n")
    drain = {"counted": 10, "exit_codes": [3], "lost_line": "", "leftovers": 0}
    with open(os.path.join(scratch, "k.json"), "w") as f:
        json.dump(dict(record.record("k", CONDITIONS, {"drain_runs": 10}, {
            "flowrun": row("flowrun drain", **drain, all_saved=10, saved=30, drain_ms=ms(1631, 904, 2555), exited=10),
            "group": row("group drain", **dict(drain, lost_line="DataLoader worker (pid 1) is killed"), all_saved=0,
                         saved=0, drain_ms=ms(1777, 872, 2102)),
            "torchrun": row("torchrun drain", **dict(drain, exit_codes=[1]), all_saved=10, saved=30,
                            drain_ms=ms(2269, 1299, 3492)),
        }, {"ranks": 4, "fail_rank": 1, "grace_s": 30}, "name: bench-drain\n")), f)
    return scratch


def test_records_render_the_page_s_lines(records, check):
    page = render.render(records)
    lines = page.split("\n")
    for line in (
            "| flowrun | 11.56 ms | 9.80 – 15.43 ms | 20 "
            "| `build/release/flowrun --run-dir $TMP/a/run $TMP/true.yaml` |",
            "| torchrun | not measured (python3-torch missing) | | |  |",
            "- Ratio to torchrun: not available (goal: at least 80x).",
            "- flowrun takes **2.4x** the floor's time (goal: at most 2x): **not met**.",
            "| flowrun | 6.07 ms | 3.79 – 10.18 ms | 5 | `flowrun teardown.yaml` |",
            "- flowrun tears down in **6.07 ms** (goal: within 20 ms): **met**.",
            "- flowrun is **60x** faster than torchrun (goal: at least 40x): **met**.",
            "Exit codes seen: flowrun [3], torchrun [1] (the failing rank's code is 3).",
            "| run | 2026-12-01 10:00 UTC, load average 0.50 0.40 0.30 before and 0.60 0.50 0.40 after |",
            "- case (a), floor: a run did not finish as expected and is not counted: run 3: exit 1 / killed",
            "| flowrun, drain-aware teardown (`--grace 30`) | **10 of 10 runs** | 30 of 30 | 1631 ms "
            "| 904 – 2555 ms | 3 | 10 | `flowrun drain` |",
            "- The group baseline: checkpoints were lost in 10 of 10 runs (30 of 30); the ranks' stderr says "
            "`DataLoader worker (pid 1) is killed`: the SIGTERM reached the `DataLoader`'s workers with the rank's "
            "main process, and torch raised that in the main process before its last batch came, so the rank saved "
            "nothing.",
            "Kept as written.",
    ):
        check(line in lines, f"the page has the line {line!r}")
    # A case from another run than its part's first says when, how and of what it was measured.
    check("Measured apart from cases (a), on 2026-12-02 11:00 UTC (load average 1.80 before, 2.97 after), by "
          "`scripts/bench --cases b --runs 5`, of a release build of commit `fedcba9` (the build also had "
          "uncommitted changes in `lib/x.cpp`); the next `scripts/bench --only node` measures it with the rest."
          in lines, "case (b) says it was measured apart")
    # The parts in the page's order; a part without records is left out.
    heads = [line for line in lines if line.startswith("# ")]
    check(heads == ["# Benchmarks: flowrun and torchrun side by side", "# Multi-node: memory under an output flood",
                    "# Drain: emergency checkpoints when a peer fails"], "the parts, in order", str(heads))
    check("```yaml\nname: bench-true\n```" in page, "case (a)'s spec as its record keeps it")


def test_render_only_writes_the_page_without_measuring(records, scratch, check):
    out = os.path.join(scratch, "page.md")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "bench"), "--render-only", records, "--out", out],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    check(r.returncode == 0, "scripts/bench --render-only exits 0", r.stdout)
    check(os.path.exists(out) and open(out).read() == render.render(records), "it writes the rendered page")
    check("case (" not in r.stdout and "building" not in r.stdout, "it builds and runs nothing", r.stdout)


def test_the_committed_page_is_the_rendering_of_its_records(check):
    with open(os.path.join(ROOT, "docs", "benchmarks.md")) as f:
        page = f.read()
    rendered = render.render(os.path.join(ROOT, "bench", "results"))
    check(rendered == page, "docs/benchmarks.md is `scripts/bench --render-only`'s output",
          "rerun scripts/bench --render-only, or edit bench/results rather than the page")


def test_a_case_s_runs_make_its_figures(check):
    launchers = {name: Launcher(name) for name in ("flowrun", "torchrun", "floor", "floor_files")}
    for name, walls in (("flowrun", [12, 10, 30]), ("torchrun", [1700, 1500, 2100]), ("floor", [5, 4, 6]),
                        ("floor_files", [7, 6, 8])):
        launchers[name].samples = [{"wall_ns": w * 1_000_000, "exit": 0} for w in walls]
    launchers["floor"].failures = ["run 1: None"]
    rows, figures = cases_node.record_startup(launchers, {})
    check(rows["flowrun"]["figures"] == {"counted": 3, "wall_ms": {"median": 12, "min": 10, "max": 30}},
          "flowrun's wall time: median, min and max in ms", str(rows["flowrun"]["figures"]))
    check(rows["flowrun"]["runs"] == launchers["flowrun"].samples, "the record keeps the runs")
    check(rows["floor"]["failures"] == ["run 1: None"], "and the runs that did not count")
    check(figures["torchrun_ratio"] == 1700 / 12 and figures["floor_ratio"] == 12 / 5, "the ratios of the medians",
          str(figures))
    check(figures["files_floor_ratio"] == 12 / 7 and figures["files_cost_ratio"] == 7 / 5,
          "flowrun against the floor that keeps a run's record, and that record's cost against the bare floor",
          str(figures))
    check(rows["floor_files"]["figures"]["wall_ms"] == {"median": 7, "min": 6, "max": 8}, "that floor's row",
          str(rows["floor_files"]))
    check(json.loads(json.dumps(rows)) == rows, "the record is plain JSON")


def slow_record(directory, cost, named_max, failures=()):
    """Case (t)'s record: the loop's times with sampling off and on, one node's names, no run across nodes."""
    off = {"counted": 5, "loop_s": ms(25.0, 24.1, 27.9)}
    rows = {
        "off": row("flowrun t-off.yaml", **off),
        "sampled": row("flowrun t-sampled.yaml", **dict(off, loop_s=ms(25.0 * (1 + cost), 24.3, 28.8)), named=0,
                       samples=ms(24, 22, 27)),
        "named": row("flowrun t-named.yaml", counted=3, failures=list(failures), named_s=ms(31.2, 29.9, named_max),
                     frames=["load_batch (slow_rank.py:33)"],
                     line="flowrun: train: rank 1 is the slow rank: it waits in collectives 19% of the time, the "
                          "other ranks 54%; its hottest frame is load_batch (slow_rank.py:33)"),
        "named_nodes": row("", counted=0, available=False, why_not="not run this time"),
    }
    figures = {"cost": cost, "pair_cost": ms(cost, -0.04, 0.05), "py_spy": "py-spy 0.3.14", "step_ms": ms(9.5, 8, 11),
               "slow_rank": 1, "slowdown": 0.3, "name_timeout_s": 180}
    with open(os.path.join(directory, "t.json"), "w") as f:
        json.dump(record.record("t", CONDITIONS, {"cost_runs": 5, "cost_steps": 2500, "name_runs": 3,
                                                 "name_nodes_runs": 0}, rows, figures, "name: bench-slow-rank\n"), f)


def test_the_slow_rank_s_part_says_each_goal_as_measured(records, check):
    slow_record(records, 0.004, 44.0)
    lines = render.render(records).split("\n")
    for line in (
            "| `{sample: off}` | 25.00 s | 24.10 – 27.90 s | 5 | `flowrun t-off.yaml` |",
            "- Sampling at the default costs the job **+0.4%** of its loop time (the medians' ratio, sampled over off: "
            "1.004; goal: at most 1%): **met**.",
            "- Run by run, each sampled run against the unsampled one before it: +0.4% in the median, from -4.0% "
            "to +5.0%.",
            "- A rank named the slow rank where none is: in 0 of 5 sampled runs.",
            "| 2 on this host | 31.2 s | **44.0 s** | 3 | `load_batch (slow_rank.py:33)` | `flowrun t-named.yaml` |",
            "- 2 on this host: rank 1 named within **44.0 s** of flowrun's start in each of 3 runs (goal: within "
            "60 s): **met**.",
            "- 2 on 2 agents of this host, 1 each: not measured (not run this time).",
    ):
        check(line in lines, f"the page has the line {line!r}")
    heads = [line for line in lines if line.startswith("# ")]
    check(heads[-2:] == ["# The slow rank: how soon it is named, and what the sampling costs",
                         "# Drain: emergency checkpoints when a peer fails"], "the slow rank's part before the drain",
          str(heads))
    slow_record(records, 0.03, 75.0, failures=["run 2: exit 0, a rank named: False: ..."])
    lines = render.render(records).split("\n")
    for line in (
            "- Sampling at the default costs the job **+3.0%** of its loop time (the medians' ratio, sampled over off: "
            "1.030; goal: at most 1%): **not met**.",
            "- 2 on this host: rank 1 named within **75.0 s** of flowrun's start in each of 3 runs; 1 more runs did not "
            "count (see the notes) (goal: within 60 s): **not met**.",
            "- case (t), named: a run did not finish as expected and is not counted: run 2: exit 0, a rank named: "
            "False: ...",
    ):
        check(line in lines, f"the page has the line {line!r}")


def test_the_slow_rank_s_runs_make_its_figures(check):
    from flowrun_bench import cases_slow

    launchers = {name: Launcher(name) for name in ("off", "sampled", "named", "named_nodes")}
    launchers["off"].samples = [{"loop_s": s, "step_ms": 10.0, "run": i} for i, s in enumerate([20.0, 22.0, 21.0])]
    launchers["sampled"].samples = [{"loop_s": s, "step_ms": 10.0, "run": i, "named": i == 2, "samples": [20, 21]}
                                    for i, s in enumerate([20.2, 22.0, 21.5])]
    launchers["named"].samples = [{"named_s": 30.0, "frame": "load_batch (slow_rank.py:33)", "line": "l"}]
    rows, figures = cases_slow.record_slow_rank(launchers, {})
    check(abs(figures["cost"] - (21.5 / 21.0 - 1)) < 1e-9, "cost: the sampled median over the unsampled, less 1",
          str(figures))
    check(figures["pair_cost"]["min"] == 0 and abs(figures["pair_cost"]["median"] - 0.01) < 1e-9,
          "each sampled run against the unsampled run of the same turn", str(figures))
    check(rows["sampled"]["figures"]["named"] == 1 and rows["sampled"]["figures"]["samples"]["min"] == 20,
          "the sampled runs' names and samples a rank", str(rows["sampled"]["figures"]))
    check(rows["named"]["figures"]["named_s"]["max"] == 30.0 and rows["named_nodes"]["figures"]["counted"] == 0,
          "the time to name, per row", str(rows))
    check(json.loads(json.dumps(rows)) == rows, "the record is plain JSON")
