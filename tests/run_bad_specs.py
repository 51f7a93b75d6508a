#!/usr/bin/env python3
"""Runs `flowrun validate NAME.yaml` on every spec in a directory of bad specs.

Usage: run_bad_specs.py FLOWRUN_BIN DIR [--update]

Each NAME.yaml must fail validation: exit code 2, and stderr exactly equal to
NAME.err (one diagnostic per line, as the user sees it). The command runs with
DIR as its working directory, so diagnostics name the file as `NAME.yaml`.
--update rewrites each NAME.err from the actual output; review the diff before
committing it.
"""
import difflib
import pathlib
import subprocess
import sys


def main(argv):
    args = [a for a in argv[1:] if a != "--update"]
    update = "--update" in argv[1:]
    if len(args) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    binary = str(pathlib.Path(args[0]).resolve())
    directory = pathlib.Path(args[1])
    specs = sorted(directory.glob("*.yaml"))
    if not specs:
        print(f"no *.yaml in {directory}", file=sys.stderr)
        return 1
    passed, failed = 0, []

    for orphan in sorted(directory.glob("*.err")):
        if not orphan.with_suffix(".yaml").exists():
            print(f"FAIL {orphan.name}: no {orphan.stem}.yaml next to it")
            failed.append(orphan.name)

    for spec in specs:
        expected_file = spec.with_suffix(".err")
        try:
            result = subprocess.run([binary, "validate", spec.name], cwd=directory, capture_output=True,
                                    timeout=30)
        except subprocess.TimeoutExpired:
            print(f"FAIL {spec.name}: flowrun validate did not finish in 30 s")
            failed.append(spec.name)
            continue
        stderr = result.stderr.decode("utf-8", errors="replace")
        if update:
            expected_file.write_text(stderr)
        if not expected_file.exists():
            print(f"FAIL {spec.name}: missing {expected_file.name} (the expected stderr)")
            failed.append(spec.name)
            continue
        expected = expected_file.read_text()
        problems = []
        if result.returncode != 2:
            problems.append(f"exit code {result.returncode}, expected 2")
        if stderr != expected:
            diff = difflib.unified_diff(expected.splitlines(keepends=True), stderr.splitlines(keepends=True),
                                        fromfile=expected_file.name, tofile="stderr")
            problems.append("stderr differs:\n" + "".join(diff).rstrip("\n"))
        if problems:
            print(f"FAIL {spec.name}: " + "\n".join(problems))
            if result.stdout:
                print("stdout was:\n" + result.stdout.decode("utf-8", errors="replace").rstrip("\n"))
            failed.append(spec.name)
        else:
            passed += 1

    print(f"{passed} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
