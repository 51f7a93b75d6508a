#!/usr/bin/env python3
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

--cluster runs the ```console cluster blocks instead, and only those, on the
head of a 2-node test cluster (tests/cluster/cluster.sh: real Slurm and sshd in
network namespaces) that it brings up and always down. The scratch directory is
in /var/tmp, which every node shares (each node has its own /tmp), and holds a
copy of the binary. What a real cluster has and the test cluster lacks comes
from the environment, not from the commands shown: SLURM_CONF names the test
cluster's Slurm, FLOWRUN_FAKE_GPUS=2 stands for the 2 GPUs of each node (Slurm's
Gres says gpu:2), and `ssh` reads the test cluster's ssh config, as
~/.ssh/config would. Host names are the cluster's: head, node1, node2; the
scratch directory shows as /shared/me/flowrun. Needs
root; exits 125 (skipped) without root or network namespaces.

  run_doc_examples.py FLOWRUN ROOT [--only FILE]...            check
  run_doc_examples.py FLOWRUN ROOT --cluster [--only FILE]...  the cluster blocks
  run_doc_examples.py FLOWRUN ROOT --update                    rewrite the console outputs
                      that do not match from real runs (review the diff!)
"""
import argparse
import functools
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testlib import Tally, clean_env, diff, normalise  # noqa: E402

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

    def scratch(self):
        """A new scratch directory with the binary, Python and the repository's examples."""
        d = tempfile.mkdtemp(prefix="flowrun-doc-", dir="/var/tmp" if self.cluster else None)
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
        return d

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


def check_document(path, ctx, tally, update=False):
    text = open(path).read()
    found = list(FENCE.finditer(text))
    blocks = [(m.group(1).split(), m.group(2), text[:m.start()].count("\n") + 1) for m in found]
    rewritten = {}
    scratch = ctx.scratch()
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
            tally.check(p.returncode == 0, f"{label}: example spec must be valid", p.stdout + p.stderr)
            return
        if not tally.check(following is not None and following[0][:1] == ["text"],
                           f"{label}: a ```yaml bad block must be followed by a ```text block"):
            return
        tally.check(p.returncode == 2 and p.stderr == following[1], f"{label}: diagnostics of the bad example",
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
                    tally.check(False, f"{label}: # from: {source}", f"cannot read it: {e}")
                    continue
                shown = body[len(first) + 1:]
                tally.check(shown == wanted, f"{label}: the block shows {source} as it is",
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
                    tally.check(update or ok, f"{label}: $ {command}", detail)
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
        shutil.rmtree(scratch, ignore_errors=True)
    if cluster_blocks and not ctx.cluster:
        print(f"{where}: {cluster_blocks} ```console cluster blocks are run by --cluster "
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


class Cluster:
    """The test cluster (tests/cluster/cluster.sh), brought up and down here."""

    def __init__(self, root):
        self.script = os.path.join(root, "tests", "cluster", "cluster.sh")
        self.env, self.is_up = {}, False

    def up(self):
        p = subprocess.run([self.script, "up", str(CLUSTER_NODES)], capture_output=True, text=True, timeout=180)
        print(p.stdout + p.stderr, end="", flush=True)
        if p.returncode != 0:
            return False
        self.is_up = True
        out = subprocess.run([self.script, "env"], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            k, _, v = line.removeprefix("export ").partition("=")
            self.env[k] = shlex.split(v)[0] if v else ""
        self.ssh_config = self.env["FLOWRUN_CLUSTER_SSH_CONFIG"]
        return True

    def down(self):
        p = subprocess.run([self.script, "down"], capture_output=True, text=True, timeout=120)
        print(p.stdout + p.stderr, end="", flush=True)
        self.is_up = False
        return p.returncode


def cluster_unavailable():
    """'' when this process may make the test cluster's namespaces, else why not."""
    if os.geteuid() != 0:
        return "the test cluster needs root (network namespaces, mounts, Slurm and sshd daemons)"
    try:
        p = subprocess.run(["unshare", "--net", "--uts", "--mount", "true"], capture_output=True, text=True,
                           timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unshare: {e}"
    if p.returncode != 0:
        return f"network namespaces are not available here (unshare: {p.stderr.strip() or p.returncode})"
    return ""


def main():
    parser = argparse.ArgumentParser(description="Checks the examples in README.md and docs/*.md.")
    parser.add_argument("flowrun")
    parser.add_argument("root")
    parser.add_argument("--update", action="store_true", help="rewrite console outputs that do not match")
    parser.add_argument("--cluster", action="store_true", help="run the ```console cluster blocks")
    parser.add_argument("--only", action="append", default=[], help="this document only (repeatable)")
    a = parser.parse_args()
    flowrun, root = os.path.abspath(a.flowrun), os.path.abspath(a.root)
    docs = [os.path.join(root, "README.md")] + sorted(
        os.path.join(root, "docs", name) for name in os.listdir(os.path.join(root, "docs")) if name.endswith(".md"))
    docs = [d for d in docs if os.path.exists(d)]
    if a.only:
        wanted = {os.path.abspath(p) for p in a.only}
        docs = [d for d in docs if d in wanted]
        if len(docs) != len(wanted):
            print(f"--only: not a document checked here: {', '.join(sorted(wanted - set(docs)))}")
            return 2
    tally = Tally("docs cluster" if a.cluster else "docs")
    if not a.cluster:
        ctx = Context(flowrun, root)
        for path in docs:
            check_document(path, ctx, tally, a.update)
        return tally.finish()

    why = cluster_unavailable()
    if why:
        print(f"SKIP: {why}")
        return 125
    docs = [d for d in docs if re.search(r"^```console[^\n]*\bcluster\b", open(d).read(), re.M)]

    def interrupted(signum, frame):
        raise KeyboardInterrupt(signal.Signals(signum).name)
    signal.signal(signal.SIGINT, interrupted)
    signal.signal(signal.SIGTERM, interrupted)
    cluster, down_rc = Cluster(root), 0
    try:
        if tally.check(cluster.up(), "the test cluster comes up", "cluster.sh up failed (above)"):
            ctx = Context(flowrun, root, cluster)
            for path in docs:
                check_document(path, ctx, tally, a.update)
    except KeyboardInterrupt as e:
        tally.check(False, f"interrupted ({e or 'Ctrl-C'}): bringing the cluster down")
    finally:
        if cluster.is_up:
            down_rc = cluster.down()
    tally.check(down_rc == 0, "the test cluster comes down with nothing left", f"cluster.sh down: exit {down_rc}")
    return tally.finish()


if __name__ == "__main__":
    sys.exit(main())
