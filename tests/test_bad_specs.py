"""`flowrun validate NAME.yaml` on every spec in tests/specs/bad.

Each NAME.yaml must fail validation: exit code 2, and stderr exactly equal to
NAME.err (one diagnostic per line, as the user sees it). The command runs with
the directory as its working directory, so diagnostics name the file as `NAME.yaml`.

  python3 -m pytest tests/test_bad_specs.py [--flowrun PATH] [-k NAME]
  python3 -m pytest tests/test_bad_specs.py --update   rewrite each NAME.err (review the diff!)
"""
import difflib
import pathlib
import subprocess

import pytest

from flowrun_testlib.suite import path_of

pytestmark = pytest.mark.bad_specs

DIRECTORY = pathlib.Path(path_of("specs", "bad"))
SPECS = sorted(DIRECTORY.glob("*.yaml"))


@pytest.mark.parametrize("spec", SPECS, ids=[spec.stem for spec in SPECS])
def test_bad_spec(spec, flowrun, request):
    expected_file = spec.with_suffix(".err")
    try:
        result = subprocess.run([flowrun, "validate", spec.name], cwd=DIRECTORY, capture_output=True, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{spec.name}: flowrun validate did not finish in 30 s", pytrace=False)
    stderr = result.stderr.decode("utf-8", errors="replace")
    if request.config.getoption("update"):
        expected_file.write_text(stderr)
    if not expected_file.exists():
        pytest.fail(f"{spec.name}: missing {expected_file.name} (the expected stderr)", pytrace=False)
    expected = expected_file.read_text()
    problems = []
    if result.returncode != 2:
        problems.append(f"exit code {result.returncode}, expected 2")
    if stderr != expected:
        diff = difflib.unified_diff(expected.splitlines(keepends=True), stderr.splitlines(keepends=True),
                                    fromfile=expected_file.name, tofile="stderr")
        problems.append("stderr differs:\n" + "".join(diff).rstrip("\n"))
    if problems:
        if result.stdout:
            problems.append("stdout was:\n" + result.stdout.decode("utf-8", errors="replace").rstrip("\n"))
        pytest.fail(f"{spec.name}: " + "\n".join(problems), pytrace=False)


def test_every_error_file_has_its_spec():
    assert SPECS, f"no *.yaml in {DIRECTORY}"
    orphans = [f.name for f in sorted(DIRECTORY.glob("*.err")) if not f.with_suffix(".yaml").exists()]
    assert not orphans, f"error files without a spec next to them: {orphans}"
