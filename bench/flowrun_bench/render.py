"""docs/benchmarks.md from the records alone: each part of the page (single-node, multi-node, hang forensics,
the slow rank, drain) from the records of its cases, and between them the parts measured otherwise, kept as written
(RESULTS/*.md). Nothing here measures or computes a statistic: the records hold the figures, this file words
them, so the same records always make the same page."""

from pathlib import Path

from . import record

NODE_CASES = "abcd"
MULTINODE_CASES = "efghlspr"
FORENSICS_CASES = "ij"
SLOW_CASES = "t"
DRAIN_CASES = "k"
WORKERS = 8  # every single-node case's workers

# Goals, as stated in the project's plan.
GOAL_STARTUP_RATIO = 80.0
GOAL_TEARDOWN_MS = 20.0
GOAL_TEARDOWN_RATIO = 40.0
GOAL_STARTUP_FLOOR = 2.0  # start-up against the fork/exec floor
GOAL_RSS_MIB = 5.0
GOAL_LOG_FRACTION = 0.85
GOAL_FOLD_FRACTION = 0.90  # the folded console against the unfolded, on lines that never fold
GOAL_RDZV_MS = {1024: 100.0, 4096: 1000.0}  # last start message, from the first connect
GOAL_RDZV_FLOOR = {4096: 1.3, 16384: 1.5}  # the last start against the bare server's, same clients
GOAL_RDZV_HEAD_RSS_MIB = {16384: 256.0}  # the head's peak RSS
GOAL_RDZV_GROWTH = 1.1  # per agent, the largest rendezvous against the least of the smaller: linear, noise aside
GOAL_SPARE_MS = 200.0  # among 4,096 agents, one lost: noticed and its spare seated
GOAL_GATHER_FRACTION = 0.50  # of a plain TCP copy's rate
GOAL_SHIP_FRACTION = 0.50  # shipping inputs, of a plain TCP copy's rate
GOAL_GANG_READY_S = 1.0  # a gang's last pod up to its last rank started
GOAL_STACKS_REPORT_S = 3.0  # the stall line to the grouped report, every rank's stack in
GOAL_RECOVERY_RATIO = 10.0  # torchrun's recovery time over flowrun's with a hot spare
GOAL_SAMPLE_COST = 0.01  # the slow rank's sampler: its cost to the job's throughput
GOAL_NAMED_S = 60.0  # a rank slowed by 30% named, from flowrun's start

# The parts of the page in order: rendered from the records of their cases, or kept as written in the
# records' directory (absent: left out).
KEPT_FLOOD = "output_flood.md"  # memory under an output flood, measured by bench/output_flood.py
KEPT_OUTPUTS = "outputs.md"  # gathering outputs (a reflink or a copy), measured by the one-off command it shows


def cell(command):
    """A command for a Markdown table cell: in code, with its pipes escaped."""
    return "`" + command.replace("|", "\\|") + "`" if command else ""


def verdict(ok):
    return "**met**" if ok else "**not met**"


def spread(figure, fmt):
    """(median, "min – max") of a {median, min, max} figure, formatted; dashes when it has none."""
    if not figure:
        return "—", "—"
    return fmt.format(figure["median"]), f"{fmt.format(figure['min'])} – {fmt.format(figure['max'])}"


def med(row, key):
    """The median of a row's {median, min, max} figure, or None."""
    figure = row["figures"].get(key) if row else None
    return figure["median"] if figure else None


def not_measured(row):
    """Why a row has no figures, or None when it has."""
    if not row["available"]:
        return f"not measured ({row['why_not']})"
    if not row["figures"]["counted"]:
        return "no successful run (see notes)"
    return None


def measured(row):
    return bool(row) and row["figures"]["counted"] > 0


def commit_option(cond):
    return f" --commit {cond['commit'][:12]}" if cond["exact"] else ""


def machine_table(w, cond, extra_rows=()):
    w("| | |\n| --- | --- |")
    w(f"| CPUs | {cond['cpus']} |")
    w(f"| memory | {cond['memory']} |")
    w(f"| system | {cond['os']} |")
    w(f"| compiler | {cond['compiler']} |")
    dirty = cond["dirty"]
    extra = f"; the build also had uncommitted changes in {', '.join(f'`{p}`' for p in dirty)}" if dirty else ""
    how = "the commit's tree exactly (`git archive`)" if cond["exact"] else "the working tree at commit"
    w(f"| flowrun | {cond['flowrun']}, release build (`-DCMAKE_BUILD_TYPE=Release`) of {how} "
      f"`{cond['commit'][:12]}`; its sources last changed in `{cond['sources_changed']}`{extra} |")
    w(f"| torchrun | {cond['torchrun']} |")
    for label, text in extra_rows:
        w(f"| {label} | {text} |")
    note = f"; {cond['note']}" if cond["note"] else ""
    w(f"| run | {cond['started']}, load average {cond['load_before']} before and {cond['load_after']} after{note} |")
    w("")


def case_list(cases):
    """(e) to (h), or (e) and (g), or (e), (f) and (h)."""
    names = [f"({c})" for c in cases]
    if len(cases) > 2 and all(ord(b) == ord(a) + 1 for a, b in zip(cases, cases[1:])):
        return f"{names[0]} to {names[-1]}"
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def apart(w, records, case, only):
    """A paragraph for a case measured in another run than the first case of its part (whose conditions the
    part's machine table shows): when, how and of what it was measured."""
    def run_of(c):
        cond = records[c]["conditions"]
        return cond["started"], cond["invocation"]

    cases = list(records)
    cond = records[case]["conditions"]
    if run_of(case) == run_of(cases[0]):
        return
    others = [c for c in cases if c != case and run_of(c) == run_of(cases[0])]
    if cond["note"]:
        aside = f" ({cond['note']})"
    elif cond["dirty"]:
        aside = f" (the build also had uncommitted changes in {', '.join(f'`{p}`' for p in cond['dirty'])})"
    else:
        aside = ""
    tree = "the tree of commit" if cond["exact"] else "commit"
    w(f"Measured apart from cases {case_list(others)}, on {cond['started']} (load average "
      f"{cond['load_before'].split()[0]} before, {cond['load_after'].split()[0]} after), by "
      f"`{cond['invocation']}`, of a release build of {tree} `{cond['commit'][:7]}`{aside}; the next "
      f"`scripts/bench --only {only}` measures it with the rest.\n")


def remarks(w, rec, after_blank=False):
    """What was written by hand about a record's figures, after its verdicts: it goes with the record, and a
    new record of the case has none."""
    if rec.get("remarks"):
        w("\n".join(rec["remarks"]) + "\n" if after_blank else "\n" + "\n".join(rec["remarks"]))


def spec_block(rec, kind):
    """The spec template the case ran, as the record keeps it: `yaml` when flowrun validate takes it as it is
    (the docs' examples test checks it), `text` when its placeholders make it invalid."""
    return f"```{kind}\n" + rec["spec"] + "```\n"


def failure_notes(w, records, cases, named=True):
    """The runs of each row that did not finish as expected, the first 3 of each."""
    for case in cases:
        if case not in records:
            continue
        for name, row in records[case]["rows"].items():
            for failure in row["failures"][:3]:
                who = f"case ({case}), {name}" if named else f"case ({case})"
                w(f"- {who}: a run did not finish as expected and is not counted: "
                  + failure.replace("\n", " / ")[:600])


def part_records(records, cases):
    """The records of a part's cases, in the part's order."""
    return {c: records[c] for c in cases if c in records}


def render(directory):
    """The whole page from the records and kept parts in directory."""
    from . import render_more, render_multinode, render_node, render_slow

    directory = Path(directory)
    records = record.read_all(directory)
    parts = []
    for make, cases in ((render_node.node_part, NODE_CASES), (render_multinode.multinode_part, MULTINODE_CASES),
                        (KEPT_FLOOD, None), (render_more.forensics_part, FORENSICS_CASES),
                        (render_slow.slow_part, SLOW_CASES), (render_more.drain_part, DRAIN_CASES),
                        (KEPT_OUTPUTS, None)):
        if cases is None:
            kept = directory / make
            if kept.exists():
                parts.append(kept.read_text())
            continue
        mine = part_records(records, cases)
        if mine:
            parts.append(make(mine))
    return "\n".join(part.rstrip("\n") + "\n" for part in parts)


def write(directory, out):
    Path(out).write_text(render(directory))
