#!/usr/bin/env python3
"""Checks every example in README.md and docs/*.md against the real binary.

Fenced blocks, in document order, per file:
  ```yaml        a complete spec; must pass `flowrun validate`. Saved as the
                 file its first line names (`# file: NAME`), else spec.yaml,
                 in a scratch directory shared by the document's examples.
  ```yaml bad    a complete spec that must fail validation with exit 2; the
                 next block must be ```text with the exact diagnostics.
  ```console     `$ COMMAND` lines run with bash in that scratch directory
                 (`flowrun` is the binary under test); the lines after each,
                 up to the next `$ `, are its expected stdout+stderr. A line
                 `...` matches any number of lines. Host names and run ids are
                 normalised (the host shows as host-a).
Other blocks (```text, ```bash, ```sh, ```python) are prose and not run.

  run_doc_examples.py FLOWRUN ROOT            check
  run_doc_examples.py FLOWRUN ROOT --update   rewrite console outputs from real runs (review the diff!)
"""
import os
import re
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from testlib import Tally, clean_env, diff, normalise, run  # noqa: E402

FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```\s*$", re.S | re.M)


def matches(expected, actual):
    """Line match where a '...' line in `expected` stands for any lines."""
    exp, act = expected.splitlines(), actual.splitlines()

    def go(i, j):
        if i == len(exp):
            return j == len(act)
        if exp[i] == "...":
            return any(go(i + 1, k) for k in range(j, len(act) + 1))
        return j < len(act) and exp[i] == act[j] and go(i + 1, j + 1)

    return go(0, 0)


def check_document(path, flowrun, tally, update=False):
    text = open(path).read()
    matches_ = list(FENCE.finditer(text))
    blocks = [(m.group(1).strip(), m.group(2), text[:m.start()].count("\n") + 1) for m in matches_]
    rewritten = {}
    scratch = tempfile.mkdtemp(prefix="flowrun-doc-")
    bindir = os.path.join(scratch, ".bin")
    os.makedirs(bindir)
    os.symlink(os.path.abspath(flowrun), os.path.join(bindir, "flowrun"))
    env = clean_env(PATH=bindir + os.pathsep + os.environ.get("PATH", ""))
    where = os.path.relpath(path)
    try:
        for index, (info, body, line) in enumerate(blocks):
            label = f"{where}:{line}"
            if info in ("yaml", "yaml bad"):
                first = body.splitlines()[0] if body else ""
                name = first[len("# file:"):].strip() if first.startswith("# file:") else "spec.yaml"
                with open(os.path.join(scratch, name), "w") as f:
                    f.write(body)
                result = run([flowrun, "validate", name], cwd=scratch, env=env)
                if info == "yaml":
                    tally.check(result.returncode == 0, f"{label}: example spec must be valid",
                                result.stdout + result.stderr)
                    continue
                following = blocks[index + 1] if index + 1 < len(blocks) else None
                if not tally.check(following is not None and following[0] == "text",
                                   f"{label}: a ```yaml bad block must be followed by a ```text block"):
                    continue
                tally.check(result.returncode == 2 and result.stderr == following[1],
                            f"{label}: diagnostics of the bad example",
                            f"exit {result.returncode}\n" + diff(following[1], result.stderr))
            elif info == "console":
                commands, current = [], None
                for body_line in body.splitlines():
                    if body_line.startswith("$ "):
                        current = [body_line[2:], []]
                        commands.append(current)
                    elif current is not None:
                        current[1].append(body_line)
                new_body = ""
                for command, expected_lines in commands:
                    result = run(["bash", "-c", command], cwd=scratch, env=env)
                    actual = normalise(result.stdout + result.stderr, scratch)
                    new_body += f"$ {command}\n{actual}"
                    expected = normalise("\n".join(expected_lines) + ("\n" if expected_lines else ""), scratch)
                    tally.check(update or matches(expected, actual), f"{label}: $ {command}", diff(expected, actual))
                rewritten[index] = new_body
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if update and rewritten:
        out, last = "", 0
        for index, m in enumerate(matches_):
            if index in rewritten:
                out += text[last:m.start(2)] + rewritten[index]
                last = m.end(2)
        out += text[last:]
        with open(path, "w") as f:
            f.write(out)


def main():
    flowrun, root = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    update = "--update" in sys.argv[3:]
    tally = Tally("docs")
    docs = [os.path.join(root, "README.md")] + sorted(
        os.path.join(root, "docs", name) for name in os.listdir(os.path.join(root, "docs")) if name.endswith(".md"))
    for path in docs:
        if os.path.exists(path):
            check_document(path, flowrun, tally, update)
    return tally.finish()


if __name__ == "__main__":
    sys.exit(main())
