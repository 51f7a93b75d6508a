"""Shared helpers for the end-to-end test runners (run_*.py)."""
import os
import re
import subprocess

# Variables that change what flowrun decides; tests start without them.
_INFLUENTIAL = re.compile(r"^(CUDA_|SLURM_|FLOWRUN_|OMP_NUM_THREADS$|TORCH_NCCL_|NCCL_|NO_COLOR$)")
RUN_ID = re.compile(r"\b[a-z0-9][a-z0-9_-]*-\d{8}-\d{6}-[0-9a-f]{6}\b")


def clean_env(**extra):
    """The environment without variables that steer flowrun, the host named host-a."""
    env = {k: v for k, v in os.environ.items() if not _INFLUENTIAL.match(k)}
    env["FLOWRUN_HOSTNAME"] = "host-a"
    env.update(extra)
    return env


def normalise(text, root=None):
    """Makes output comparable across machines: run id and repo path (the
    host name is fixed by FLOWRUN_HOSTNAME in clean_env)."""
    text = RUN_ID.sub("<run-id>", text)
    if root:
        text = text.replace(os.path.abspath(root), "<root>")
    return text


def run(argv, cwd, env=None, input_text=None, timeout=60):
    return subprocess.run(argv, cwd=cwd, env=env if env is not None else clean_env(), input=input_text,
                           capture_output=True, text=True, timeout=timeout)


class Tally:
    """Counts checks and prints the closing 'N passed, M failed' line."""

    def __init__(self, name):
        self.name, self.passed, self.failed = name, 0, 0

    def check(self, ok, label, detail=""):
        if ok:
            self.passed += 1
        else:
            self.failed += 1
            print(f"FAIL {label}\n{detail}".rstrip())
        return ok

    def finish(self):
        print(f"{self.name}: {self.passed} passed, {self.failed} failed")
        return 1 if self.failed or not self.passed else 0


def diff(expected, actual):
    import difflib
    return "".join(difflib.unified_diff(expected.splitlines(True), actual.splitlines(True), "expected", "actual"))


def run_suite(make_suite, add_arguments=None, after_all=None):
    """The main() of an end-to-end driver:

      DRIVER FLOWRUN ROOT [--sanitized] [--only NAME[,NAME...]] [--list] [the driver's own options]

    make_suite(args) returns the suite (or an exit code: 125 to skip). The suite has
    tests() -> [(name, function)], check(ok, label, detail), t (a Tally) and scratch (a
    directory, removed at the end); close_all(), when it has one, runs after every test.
    Each test runs in its own try, so a crash fails that test only; each prints
    `NAME: ok|FAILED (N s)`. after_all(suite, args) runs after the last test. Returns the
    exit code: 0 when every check passed, 1 otherwise, 2 for an unknown --only name."""
    import argparse
    import shutil
    import time
    import traceback

    parser = argparse.ArgumentParser()
    parser.add_argument("flowrun")
    parser.add_argument("root")
    parser.add_argument("--sanitized", action="store_true",
                        help="the binary is built with a sanitizer: timing margins are wider")
    parser.add_argument("--only", default="", help="comma-separated test names (see --list)")
    parser.add_argument("--list", action="store_true", help="list the tests and exit")
    if add_arguments:
        add_arguments(parser)
    args = parser.parse_args()
    args.flowrun, args.root = os.path.abspath(args.flowrun), os.path.abspath(args.root)
    suite = make_suite(args)
    if isinstance(suite, int):
        return suite
    close_all = getattr(suite, "close_all", lambda: None)
    try:
        tests = suite.tests()
        if args.list:
            print("\n".join(name for name, _ in tests))
            return 0
        only = set(filter(None, args.only.split(",")))
        unknown = only - {name for name, _ in tests}
        if unknown:
            print(f"unknown test: {', '.join(sorted(unknown))} (see --list)")
            return 2
        for name, test in tests:
            if only and name not in only:
                continue
            start, before = time.monotonic(), suite.t.failed
            try:
                test()
            except Exception as e:  # a crash in one test is that test's failure
                suite.check(False, f"{name}: raised {type(e).__name__}: {e}", traceback.format_exc())
            finally:
                close_all()
            status = "ok" if suite.t.failed == before else "FAILED"
            print(f"{name}: {status} ({time.monotonic() - start:.1f} s)", flush=True)
        if after_all:
            after_all(suite, args)
    finally:
        close_all()
        shutil.rmtree(suite.scratch, ignore_errors=True)
    return suite.t.finish()
