"""What a record says about the run that made it: the machine, the commit and the versions measured, when, and
the load around it."""

import datetime
import os
import platform
import re
import shlex
import socket
import tempfile
from pathlib import Path

from .common import ROOT, TORCH_PYTHON, W, log, run_quiet, spec_from

SOURCES = ["apps", "lib", "include", "CMakeLists.txt", "cmake"]


def machine_facts():
    def first(cmd):
        try:
            return run_quiet(cmd).stdout.strip().splitlines()[0]
        except (OSError, IndexError):
            return "unknown"

    model = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    os_name = "unknown"
    if Path("/etc/os-release").exists():
        m = re.search(r'^PRETTY_NAME="?([^"\n]*)', Path("/etc/os-release").read_text(), re.M)
        os_name = m.group(1) if m else os_name
    mem_kib = int(re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text()).group(1))
    return {
        "cpus": f"{os.cpu_count()} ({model})",
        "memory": f"{mem_kib / 1024 / 1024:.1f} GiB",
        "os": f"{os_name}, Linux {platform.release()}",
        "compiler": first(["c++", "--version"]),
        "flowrun": first([str(W.flowrun), "--version"]),
    }


def git_facts(rev):
    """The commit measured, the last commit that changed flowrun's sources up to it ("hash subject"), and the
    uncommitted source files built with it (none with --commit)."""
    commit = rev or run_quiet(["git", "-C", str(ROOT), "rev-parse", "HEAD"]).stdout.strip()
    last = run_quiet(["git", "-C", str(ROOT), "log", "-1", "--format=%h %s", commit, "--"] + SOURCES).stdout.strip()
    if rev:
        return commit, last, []
    dirty = run_quiet(["git", "-C", str(ROOT), "status", "--porcelain", "--"] + SOURCES).stdout.split("\n")
    return commit, last, [line[3:] for line in dirty if line.strip()]



def torch_facts(no_torchrun):
    """(torch usable, why not, how the report names it): Debian's python3-torch run by /usr/bin/python3."""
    if no_torchrun:
        return False, "--no-torchrun", "not measured"
    r = None
    if Path(TORCH_PYTHON).exists():
        r = run_quiet([TORCH_PYTHON, "-c", "import torch; print(torch.__version__)"])
    if r is not None and r.returncode == 0:
        py = run_quiet([TORCH_PYTHON, "--version"]).stdout.strip()
        return True, "", f"torch {r.stdout.strip()} (Debian python3-torch), {py}, through `bench/torchrun_py311.py`"
    why = "python3-torch missing"
    return False, why, f"not measured ({why}: `apt-get install python3-torch`)"


def flowrun_launches():
    """(True, "") when this flowrun runs `bench/true.yaml`; it might still stop after showing the plan."""
    with tempfile.TemporaryDirectory(prefix="flowrun-bench-probe-") as tmp:
        spec = spec_from("true.yaml", Path(tmp) / "true.yaml")
        r = run_quiet([str(W.flowrun), "--run-dir", str(Path(tmp) / "run"), str(spec)], cwd=tmp)
        if r.returncode == 0:
            return True, ""
        last = (r.stdout.strip().splitlines() or ["no output"])[-1]
        how = f"exit {r.returncode}" if r.returncode > 0 else f"killed by signal {-r.returncode}"
        why = f"this flowrun did not run `bench/true.yaml`: {how}, last line '{last}'"
        log(f"flowrun not measured: {why}")
        return False, why


def load_average():
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def now_utc():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def invocation(argv):
    """The command line that made a record, as the report quotes it: scripts/bench and its options, less
    where the report and the records went."""
    words, skip = [], False
    for word in argv:
        if skip:
            skip = False
        elif word in ("--out", "--results"):
            skip = True
        elif not word.startswith(("--out=", "--results=")):
            words.append(word)
    return " ".join(["scripts/bench"] + [shlex.quote(w) for w in words])


def conditions(args, torch_version, started, loads, facts, git):
    """The conditions of one run of scripts/bench, as each record of it keeps them."""
    commit, subject, dirty = git
    return {"started": started, "load_before": loads[0], "load_after": loads[1], "host": socket.gethostname(),
            **facts, "commit": commit, "sources_changed": subject, "dirty": dirty, "exact": bool(args.commit),
            "torchrun": torch_version, "note": args.note, "invocation": invocation(args.argv)}
