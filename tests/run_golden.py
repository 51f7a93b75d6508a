#!/usr/bin/env python3
"""Golden tests of `flowrun plan`: text and JSON for every spec in
specs/examples/, plus the cases in tests/golden/CASES, against a simulated
8-GPU host. Host names, run ids and the repo path are normalised.

  run_golden.py FLOWRUN ROOT            compare
  run_golden.py FLOWRUN ROOT --update   rewrite the golden files (review the diff!)
"""
import json
import os
import shlex
import sys

sys.path.insert(0, os.path.dirname(__file__))
from testlib import Tally, clean_env, diff, normalise, run  # noqa: E402


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


def main():
    flowrun, root = sys.argv[1], os.path.abspath(sys.argv[2])
    update = "--update" in sys.argv[3:]
    golden_dir = os.path.join(root, "tests", "golden")
    tally = Tally("golden")
    seen = set()
    for name, env, args in cases(root):
        seen.add(name)
        result = run([flowrun] + args, cwd=root, env=clean_env(**env))
        shown = " ".join([f"{k}={v}" for k, v in env.items()] + ["flowrun"] + args)
        actual = f"$ {shown}\nexit {result.returncode}\n" + normalise(result.stdout + result.stderr, root)
        path = os.path.join(golden_dir, name)
        if update:
            with open(path, "w") as f:
                f.write(actual)
            continue
        if name.endswith(".json") and result.returncode == 0 and args[0] == "plan":
            try:
                plan = json.loads(result.stdout)
                for step in plan["steps"]:
                    if step["kind"] == "parallel":
                        tally.check(step["world_size"] == len(step["ranks"]) == sum(n["procs"] for n in step["nodes"]),
                                    f"{name}: world_size, ranks and nodes agree")
            except (ValueError, KeyError) as e:  # not JSON, or not a plan
                tally.check(False, f"{name}: JSON output", str(e))
        expected = open(path).read() if os.path.exists(path) else ""
        tally.check(expected == actual, name, diff(expected, actual) if expected else f"missing golden file {path}")
    if not update:
        for stray in sorted(set(os.listdir(golden_dir)) - seen - {"CASES"}):
            tally.check(False, f"{stray}: golden file without a case")
        return tally.finish()
    print(f"rewrote {len(seen)} golden files in {golden_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
