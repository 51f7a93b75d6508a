"""Checks every example in README.md and docs/*.md against the real binary.

Fenced blocks, in document order, per file. The first word of the info string
is the block's kind, the words after it are flags.

  ```yaml          a complete spec; must pass `flowrun validate`.
  ```yaml bad      a complete spec that must fail validation with exit 2; the
                   next block must be ```text with the exact diagnostics.
  ```console       `$ COMMAND` lines, run with bash one after another as in one
                   terminal: the working directory, exported variables and exit
                   status (`$?`) carry over to the next command, also into the document's next block
                   (each document starts in its own scratch directory). The lines
                   after each command, up to the next `$ `, are its expected
                   output, stdout and stderr interleaved as a terminal shows them.
                   A line `...` matches any number of lines; `...` inside a line
                   matches any text within that line. Run ids show as <run-id>,
                   the scratch directory as /home/me/flowrun (a clone), this host
                   as host-a.
  ```console torch the commands need PyTorch: skipped, with the reason printed,
                   when /usr/bin/python3 cannot import torch.
  ```console venv  python3 is build/venv/bin/python3 (scripts/venv: Lightning,
                   fastai); skipped, with the reason printed, when there is none.
  ```console ... import=MODULE
                   skipped, with the reason printed, when that python3 cannot
                   import MODULE (a package the environment may lack).
  ```console cluster
                   run only with --cluster, on the head of the test cluster.

Any block whose first line is `# from: PATH` must equal the repository file PATH
byte for byte (the block after that line): scripts and specs shown in a guide
are the real, tested files. A yaml one must also pass `flowrun validate`.
Any block whose first line (or second, after a `#!` line) is `# file: NAME` is
saved as NAME in the console's current directory, executable after a `#!`
line, so that later commands can use it; a yaml one is validated.
Blocks of any other kind (```text, ```sh, ```bash, ```python) are prose and not
run; use them rarely, for what no test can run (a build, a real GPU's output).

The scratch directory holds what a clone offers the examples: copies of the
repository's specs/ and examples/ (when present), and the example scripts of
specs/examples/scripts as scripts/, so that a spec shown beside them can call
`python3 scripts/train.py`. PATH starts with a directory holding `flowrun` (the
binary under test) and `python3` and `python`, which are /usr/bin/python3,
Debian's Python with python3-torch (the first python3 on a developer's PATH may
lack torch; a PyTorch user's has it). `venv` blocks put build/venv/bin first.

--cluster-examples runs the ```console cluster blocks instead, and only those, on the
head of a 2-node test cluster (tests/cluster/cluster.sh: real Slurm and sshd in
network namespaces) that it brings up and always down. The scratch directory is
in /var/tmp, which every node shares (each node has its own /tmp), and holds a
copy of the binary. What a real cluster has and the test cluster lacks comes
from the environment, not from the commands shown: SLURM_CONF names the test
cluster's Slurm, FLOWRUN_FAKE_GPUS=2 stands for the 2 GPUs of each node (Slurm's
Gres says gpu:2), and `ssh` reads the test cluster's ssh config, as
~/.ssh/config would. Host names are the cluster's: head, node1, node2; the
scratch directory shows as /shared/me/flowrun. Needs
root; skipped without root or network namespaces.

One test per document (-k gpu.md: that one only):

  python3 -m pytest tests/test_doc_examples.py [--flowrun PATH] [-k NAME]   check
  python3 -m pytest tests/test_doc_examples.py --cluster-examples           the cluster blocks
  python3 -m pytest tests/test_doc_examples.py --update                     rewrite the console outputs
                    that do not match from real runs (review the diff!)
"""
import contextlib
import functools
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile

import pytest

from flowrun_testlib import clean_env, diff, normalise, temp_dir
from flowrun_testlib.cluster import Cluster, cluster_unavailable, end_on_sigterm
from flowrun_testlib.suite import path_of

pytestmark = pytest.mark.docs
ROOT = os.path.dirname(path_of())

FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```\s*$", re.S | re.M)
DEBIAN_PYTHON = "/usr/bin/python3"
COPIED = ("specs", "examples")  # repository directories the examples may use
COMMAND_TIMEOUT = 300
CLUSTER_NODES = 2
CLUSTER_GPUS = 2
# What steers flowrun, Slurm or Python; commands start without it.
INFLUENTIAL = re.compile(r"^(CUDA_|SLURM_|SBATCH_|SALLOC_|SRUN_|FLOWRUN_|OMP_NUM_THREADS$|TORCH_NCCL_|NCCL_|"
                         r"NO_COLOR$|PYTHONPATH$|PYTHONHOME$|VIRTUAL_ENV$)")

# Runs one `$ COMMAND` line in the state the previous one left: its directory
# ($1/cwd), its exported variables ($1/env) and its exit status ($1/rc, for $?).
SHELL = r"""
state=$1
cd "$(cat "$state/cwd")" || exit 97
. "$state/env"
(exit "$(cat "$state/rc")")
eval "$2"
rc=$?
pwd > "$state/cwd"
export -p > "$state/env"
echo "$rc" > "$state/rc"
exit $rc
"""


def line_matches(expected, actual):
    """One line; `...` inside `expected` stands for any text."""
    if "..." not in expected:
        return expected == actual
    return re.fullmatch(".*".join(re.escape(part) for part in expected.split("...")), actual, re.S) is not None


def matches(expected, actual):
    """Line match where a '...' line in `expected` stands for any lines."""
    exp, act = expected.splitlines(), actual.splitlines()

    @functools.lru_cache(maxsize=None)
    def go(i, j):
        if i == len(exp):
            return j == len(act)
        if exp[i] == "...":
            return any(go(i + 1, k) for k in range(j, len(act) + 1))
        return j < len(act) and line_matches(exp[i], act[j]) and go(i + 1, j + 1)

    return go(0, 0)


def torch_missing():
    """'' when /usr/bin/python3 imports torch, else why not."""
    if not os.access(DEBIAN_PYTHON, os.X_OK):
        return f"{DEBIAN_PYTHON} not found"
    p = subprocess.run([DEBIAN_PYTHON, "-c", "import torch"], capture_output=True, text=True)
    if p.returncode != 0:
        return f"{DEBIAN_PYTHON} cannot import torch (install python3-torch: scripts/test --phase deps)"
    return ""


def parse_console(body):
    commands, current = [], None
    for body_line in body.splitlines():
        if body_line.startswith("$ "):
            current = [body_line[2:], []]
            commands.append(current)
        elif current is not None:
            current[1].append(body_line)
    return commands


def file_name(body):
    """NAME from a `# file: NAME` first line, or second line after `#!`."""
    lines = body.splitlines()[:2]
    for i, line in enumerate(lines):
        if line.startswith("# file:"):
            return line[len("# file:"):].strip()
        if i > 0 or not line.startswith("#!"):
            break
    return None


class Context:
    """Where a document's commands run: this host, or the test cluster's head."""

    def __init__(self, flowrun, root, cluster=None):
        self.flowrun, self.root, self.cluster = flowrun, root, cluster
        self.display = "/shared/me/flowrun" if cluster else "/home/me/flowrun"
        self.venv = os.path.join(root, "build", "venv", "bin")
        self._torch_missing = None
        self._imports = {}

    def skip_reason(self, flags):
        if "torch" in flags:
            if self._torch_missing is None:
                self._torch_missing = torch_missing()
            if self._torch_missing:
                return self._torch_missing
        python = DEBIAN_PYTHON
        if "venv" in flags:
            python = os.path.join(self.venv, "python3")
            if not os.access(python, os.X_OK):
                return f"no {os.path.relpath(python, self.root)} (make it with scripts/venv)"
        for module in (f[len("import="):] for f in flags if f.startswith("import=")):
            if (python, module) not in self._imports:
                p = subprocess.run([python, "-c", f"import {module}"], capture_output=True, text=True)
                self._imports[python, module] = p.returncode == 0
            if not self._imports[python, module]:
                where = os.path.relpath(python, self.root) if python != DEBIAN_PYTHON else python
                return f"{where} cannot import {module}"
        return ""

    @contextlib.contextmanager
    def scratch(self):
        """A new scratch directory with the binary, Python and the repository's examples, removed
        after the block."""
        with temp_dir("flowrun-doc-", parent="/var/tmp" if self.cluster else None) as d:
            bindir = os.path.join(d, ".bin")
            os.makedirs(bindir)
            if self.cluster:
                shutil.copy2(self.flowrun, os.path.join(bindir, "flowrun"))
                with open(os.path.join(bindir, "ssh"), "w") as f:
                    f.write(f"#!/bin/sh\nexec /usr/bin/ssh -F {shlex.quote(self.cluster.ssh_config)} \"$@\"\n")
                os.chmod(os.path.join(bindir, "ssh"), 0o755)
            else:
                os.symlink(self.flowrun, os.path.join(bindir, "flowrun"))
            for name in ("python3", "python"):
                os.symlink(DEBIAN_PYTHON, os.path.join(bindir, name))
            ignore = shutil.ignore_patterns(".flowrun", "__pycache__", "data", "model.pt", "metrics", "summary.txt")
            for name in COPIED:
                if os.path.isdir(os.path.join(self.root, name)):
                    shutil.copytree(os.path.join(self.root, name), os.path.join(d, name), ignore=ignore)
            scripts = os.path.join(self.root, "specs", "examples", "scripts")
            if os.path.isdir(scripts):
                shutil.copytree(scripts, os.path.join(d, "scripts"), ignore=ignore)
            state = os.path.join(d, ".state")
            os.makedirs(state)
            with open(os.path.join(state, "cwd"), "w") as f:
                f.write(d + "\n")
            open(os.path.join(state, "env"), "w").close()
            with open(os.path.join(state, "rc"), "w") as f:
                f.write("0\n")
            yield d

    def env(self, scratch, flags=()):
        bindir = os.path.join(scratch, ".bin")
        if self.cluster:
            env = {k: v for k, v in os.environ.items() if not INFLUENTIAL.match(k)}
            env.update(SLURM_CONF=self.cluster.env["SLURM_CONF"], FLOWRUN_FAKE_GPUS=str(CLUSTER_GPUS))
            env["PATH"] = os.pathsep.join([bindir, "/usr/bin", "/bin", env.get("PATH", "")])
        else:
            env = {k: v for k, v in clean_env().items() if not INFLUENTIAL.match(k) or k == "FLOWRUN_HOSTNAME"}
            env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
        if "venv" in flags:
            env["PATH"] = self.venv + os.pathsep + env["PATH"]
        return env

    def run(self, scratch, command, flags):
        """(exit code or 'timeout', stdout and stderr interleaved)."""
        argv = ["bash", "-c", SHELL, "bash", os.path.join(scratch, ".state"), command]
        if self.cluster:
            argv = [self.cluster.script, "exec", "head", *argv]
        # Output goes to a file, not a pipe: a command may leave a process in
        # the background that holds its stdout, and it ends with the command.
        with tempfile.TemporaryFile() as log:
            p = subprocess.Popen(argv, cwd=scratch, env=self.env(scratch, flags), stdin=subprocess.DEVNULL,
                                 stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                rc = p.wait(timeout=COMMAND_TIMEOUT)
            except subprocess.TimeoutExpired:
                rc = "timeout"
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
            p.wait()
            log.seek(0)
            out = log.read()
        if rc == "timeout":
            out += f"\n<killed after {COMMAND_TIMEOUT} s>\n".encode()
        return rc, out.decode(errors="replace")


def check_document(path, ctx, check, update=False):
    text = open(path).read()
    found = list(FENCE.finditer(text))
    blocks = [(m.group(1).split(), m.group(2), text[:m.start()].count("\n") + 1) for m in found]
    rewritten = {}
    made = contextlib.ExitStack()
    scratch = made.enter_context(ctx.scratch())
    state = os.path.join(scratch, ".state")
    where = os.path.relpath(path, ctx.root)
    cluster_blocks = 0

    def cwd():
        with open(os.path.join(state, "cwd")) as f:
            return f.read().strip()

    def validate(name, label, expect_bad=False, following=None):
        p = subprocess.run([ctx.flowrun, "validate", name], cwd=cwd(), env=ctx.env(scratch), capture_output=True,
                           text=True, timeout=60)
        if not expect_bad:
            check(p.returncode == 0, f"{label}: example spec must be valid", p.stdout + p.stderr)
            return
        if not check(following is not None and following[0][:1] == ["text"],
                           f"{label}: a ```yaml bad block must be followed by a ```text block"):
            return
        check(p.returncode == 2 and p.stderr == following[1], f"{label}: diagnostics of the bad example",
                    f"exit {p.returncode}\n" + diff(following[1], p.stderr))

    try:
        for index, (words, body, line) in enumerate(blocks):
            label = f"{where}:{line}"
            kind, flags = (words[0] if words else ""), words[1:]
            first = body.splitlines()[0] if body else ""
            if first.startswith("# from:"):
                source = first[len("# from:"):].strip()
                try:
                    with open(os.path.join(ctx.root, source), newline="") as f:
                        wanted = f.read()
                except OSError as e:
                    check(False, f"{label}: # from: {source}", f"cannot read it: {e}")
                    continue
                shown = body[len(first) + 1:]
                check(shown == wanted, f"{label}: the block shows {source} as it is",
                            diff(wanted, shown))
                if kind == "yaml":
                    copy = os.path.join(scratch, source)
                    validate(copy if os.path.exists(copy) else os.path.join(ctx.root, source), label)
                continue
            if kind == "console":
                if ("cluster" in flags) != (ctx.cluster is not None):
                    cluster_blocks += "cluster" in flags
                    continue
                reason = ctx.skip_reason(flags)
                if reason:
                    print(f"SKIP {label}: ```{' '.join(words)}: {reason}")
                    continue
                new_body, changed = "", False
                for command, expected_lines in parse_console(body):
                    rc, output = ctx.run(scratch, command, flags)
                    actual = normalise(output).replace(scratch, ctx.display)
                    shown = "\n".join(expected_lines) + ("\n" if expected_lines else "")
                    expected = normalise(shown)
                    ok = matches(expected, actual)
                    detail = diff(expected, actual) + ("" if rc != "timeout" else "(timed out)\n")
                    check(update or ok, f"{label}: $ {command}", detail)
                    new_body += f"$ {command}\n" + (shown if ok else actual)
                    changed |= not ok
                if changed:
                    rewritten[index] = new_body
                continue
            name = file_name(body)
            if name is not None:
                target = os.path.join(cwd(), name)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with open(target, "w") as f:
                    f.write(body)
                if first.startswith("#!"):
                    os.chmod(target, 0o755)
            if kind == "yaml" and not ctx.cluster:
                if name is None:
                    with open(os.path.join(cwd(), "spec.yaml"), "w") as f:
                        f.write(body)
                following = blocks[index + 1] if index + 1 < len(blocks) else None
                validate(name or "spec.yaml", label, expect_bad=flags == ["bad"], following=following)
    finally:
        made.close()
    if cluster_blocks and not ctx.cluster:
        print(f"{where}: {cluster_blocks} ```console cluster blocks are run by --cluster-examples "
              "(scripts/test --phase cluster)")
    if update and rewritten:
        out, last = "", 0
        for index, m in enumerate(found):
            if index in rewritten:
                out += text[last:m.start(2)] + rewritten[index]
                last = m.end(2)
        out += text[last:]
        with open(path, "w") as f:
            f.write(out)


def documents(root, cluster):
    """README.md and docs/*.md; with `cluster`, those that have ```console cluster blocks."""
    docs = [os.path.join(root, "README.md")] + sorted(
        os.path.join(root, "docs", name) for name in os.listdir(os.path.join(root, "docs")) if name.endswith(".md"))
    docs = [d for d in docs if os.path.exists(d)]
    if cluster:
        docs = [d for d in docs if re.search(r"^```console[^\n]*\bcluster\b", open(d).read(), re.M)]
    return docs


def pytest_generate_tests(metafunc):
    if "document" in metafunc.fixturenames:
        docs = documents(ROOT, metafunc.config.getoption("cluster_examples"))
        metafunc.parametrize("document", docs, ids=[os.path.relpath(d, ROOT) for d in docs])


@pytest.fixture(scope="module")
def context(request, flowrun, repo_root):
    """Where the documents' commands run: this host, or (--cluster-examples) the head of a 2-node
    test cluster brought up for them and always brought down after them."""
    if not request.config.getoption("cluster_examples"):
        yield Context(flowrun, repo_root)
        return
    why = cluster_unavailable()
    if why:
        pytest.skip(why)
    end_on_sigterm()
    cluster = Cluster(repo_root, CLUSTER_NODES)
    try:
        if not cluster.up():
            pytest.fail("the test cluster comes up: cluster.sh up failed (above)", pytrace=False)
        yield Context(flowrun, repo_root, cluster)
    finally:
        down_rc = cluster.down() if cluster.is_up else 0
    assert down_rc == 0, f"the test cluster comes down with nothing left: cluster.sh down: exit {down_rc}"


def test_document(document, context, check, request):
    check_document(document, context, check, request.config.getoption("update"))
