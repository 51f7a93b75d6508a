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
