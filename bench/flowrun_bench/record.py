"""A case's record: what it measured, as JSON. A case fills Launchers (one per row of its table) with the
figures of each run; its record keeps those runs, sums them up into the figures the report shows (medians,
ranges, ratios, in the report's units) and says under which conditions they were taken. The renderer reads
the figures alone, so a record whose runs were not kept still renders."""

import json
import statistics
from pathlib import Path

FORMAT = 1  # a record's "format": raised when a key changes meaning


def stat(values):
    """{median, min, max} of values, or None when there are none."""
    values = list(values)
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summary(launcher, key, scale=1.0):
    """stat() of one figure of a row's runs, divided by scale (1e6: ns to ms)."""
    return stat(s[key] / scale for s in launcher.samples if key in s)


def median(launcher, key, scale=1.0):
    values = [s[key] / scale for s in launcher.samples if key in s]
    return statistics.median(values) if values else None


def ratio(a, b):
    return a / b if a and b else None


def row(launcher, **figures):
    """A row's part of the record: whether it ran, its command, its runs, the runs that did not count and its
    figures (with `counted`, the runs they are taken from)."""
    return {"available": launcher.available, "why_not": launcher.why_not, "command": launcher.command,
            "runs": launcher.samples, "failures": launcher.failures,
            "figures": {"counted": len(launcher.samples), **figures}}


def record(case, conditions, options, rows, figures=None, spec=""):
    """One case's record: its rows, its own figures (ratios and the like), the options and conditions of the run
    and the spec template it ran (bench/*.yaml, as it was)."""
    return {"format": FORMAT, "case": case, "conditions": conditions, "options": options, "spec": spec,
            "rows": rows, "figures": figures or {}, "remarks": []}


def write(directory, rec):
    """Writes rec as DIRECTORY/<case>.json, replacing the case's earlier record."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{rec['case']}.json"
    path.write_text(json.dumps(rec, indent=1, ensure_ascii=False) + "\n")
    return path


def read_all(directory):
    """{case: record} of every record in directory ({} when there is none)."""
    records = {}
    for path in sorted(Path(directory).glob("*.json")):
        rec = json.loads(path.read_text())
        if rec.get("format") != FORMAT:
            raise ValueError(f"{path}: format {rec.get('format')}, not {FORMAT}")
        records[rec["case"]] = rec
    return records
