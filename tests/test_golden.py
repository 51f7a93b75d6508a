"""Golden tests of `flowrun plan`: text and JSON for every spec in
specs/examples/, plus the cases in tests/golden/CASES, against a simulated
8-GPU host. Host names, run ids and the repo path are normalised.

  python3 -m pytest tests/test_golden.py [--flowrun PATH] [-k NAME]   compare
  python3 -m pytest tests/test_golden.py --update                    rewrite the golden files (review the diff!)
"""
import json
import os
import shlex

import pytest

from flowrun_testlib import clean_env, diff, normalise, run
from flowrun_testlib.suite import path_of

pytestmark = pytest.mark.golden

ROOT = os.path.dirname(path_of())
GOLDEN_DIR = path_of("golden")


def cases(root):
    examples = os.path.join(root, "specs", "examples")
    for name in sorted(os.listdir(examples)):
        if name.endswith(".yaml"):
            stem = name[:-5]
            spec = f"specs/examples/{name}"
            yield f"{stem}.txt", {}, ["plan", spec, "--fake-gpus", "8"]
            yield f"{stem}.json", {}, ["plan", spec, "--fake-gpus", "8", "--json"]
    # Extra cases: "NAME: [VAR=VALUE ...] ARGS" a line.
    with open(os.path.join(root, "tests", "golden", "CASES")) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, _, rest = line.partition(":")
            words = shlex.split(rest)
            env = {}
            while words and "=" in words[0] and not words[0].startswith("-"):
                key, _, value = words.pop(0).partition("=")
                env[key] = value
            yield name.strip(), env, words


CASES = list(cases(ROOT))


@pytest.mark.parametrize("name, env, args", CASES, ids=[name for name, _, _ in CASES])
def test_golden(name, env, args, flowrun, repo_root, check, request):
    result = run([flowrun] + args, cwd=repo_root, env=clean_env(**env))
    shown = " ".join([f"{k}={v}" for k, v in env.items()] + ["flowrun"] + args)
    actual = f"$ {shown}\nexit {result.returncode}\n" + normalise(result.stdout + result.stderr, repo_root)
    path = os.path.join(GOLDEN_DIR, name)
    if request.config.getoption("update"):
        with open(path, "w") as f:
            f.write(actual)
        pytest.skip(f"rewrote {path}")
    if name.endswith(".json") and result.returncode == 0 and args[0] == "plan":
        try:
            plan = json.loads(result.stdout)
            for step in plan["steps"]:
                if step["kind"] == "parallel":
                    check(step["world_size"] == len(step["ranks"]) == sum(n["procs"] for n in step["nodes"]),
                          f"{name}: world_size, ranks and nodes agree")
        except (ValueError, KeyError) as e:  # not JSON, or not a plan
            check(False, f"{name}: JSON output", str(e))
    expected = open(path).read() if os.path.exists(path) else ""
    check(expected == actual, name, diff(expected, actual) if expected else f"missing golden file {path}")


def test_every_golden_file_has_a_case(check):
    seen = {name for name, _, _ in CASES}
    for stray in sorted(set(os.listdir(GOLDEN_DIR)) - seen - {"CASES"}):
        check(False, f"{stray}: golden file without a case")
    check(bool(seen), f"{GOLDEN_DIR}: there are cases", str(os.listdir(GOLDEN_DIR)))
