"""pytest's setup of flowrun's end-to-end tests: they drive the real binary.

  python3 -m pytest tests/e2e/test_launcher.py [--flowrun build/dev/flowrun] [--sanitized] [-k NAME] [-v]

Options: --flowrun (the binary under test, default build/dev/flowrun), --sanitized (it is built
with a sanitizer: timing bounds are tripled and memory bounds are not checked), --fake-gpu-libs
(the stand-in NVIDIA libraries of the doctor's tests), --venv (the Lightning and fastai venv),
--kubernetes-validate (the venv with kubernetes-validate, for flowrun manifest's objects),
--fault-table (write the measured faults table there), --update (rewrite the golden files, the
bad specs' errors and the docs' console output from real runs: review the diff),
--cluster-examples (the docs' examples that need a cluster), --repeat (runs of the torch suite's
culprit test), --keep (keep the multi-node scratch directory), --installed and --package (the
installed package test_installed.py checks), --test-timeout (seconds each test may take; tripled
with --sanitized and for a test marked slow).

Each ctest entry selects its tests by marker (`-m launcher`), one marker per entry. A test states
its facts with the `check` fixture (flowrun_testlib/checks.py): every failed label and its detail
fail it at its end. When every selected test was skipped (no torch, no GPU support, no root), the
run exits 125, which ctest reads as skipped; nothing collected exits 5, a failure. With
FLOWRUN_JUNIT_DIR set, each run writes JUnit XML there (NAME.xml, NAME the -m marker)."""
import faulthandler
import os
import re
import shutil
import signal
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from flowrun_testlib.checks import Checks  # noqa: E402

MARKERS = {
    # one per ctest entry (tests/CMakeLists.txt) and scripts/test phase
    "bad_specs": "tests/specs/bad: each bad spec's exact error",
    "golden": "tests/golden: plans and the console compared with the stored ones",
    "docs": "the examples in README.md and docs/*.md, run",
    "doctor": "flowrun doctor on the stand-in NVIDIA libraries",
    "cli": "the command line: options, init, errors",
    "install": "the manual page and shell completions cover flowrun --help",
    "installed": "the installed .deb or wheel (scripts/test's package and wheel phases; test_installed.py)",
    "schema": "specs/schema accepts every example spec",
    "bench": "scripts/bench's renderer: docs/benchmarks.md from bench/results",
    "manifests": "flowrun manifest's Kubernetes objects against Kubernetes' schemas, 1.29 to 1.35",
    "launcher": "flowrun SPEC with real worker processes",
    "torch": "real PyTorch flows on CPU workers",
    "nodes_local": "multi-node steps on one host over 127.0.0.1",
    "gang_local": "a gang's nodes as processes of one host, with a platform's variables",
    "node_checks": "the node checks before a multi-node step, on the stand-in NVML with faults",
    "run_report": "flowrun report's page of real runs, opened in headless chromium",
    "faults": "fault injection, each fault a row of docs/reliability.md",
    "torchrun": "flowrun run (torchrun's command line) and flowrun init",
    "resume": "flowrun resume",
    "summary": "the run summary for CI (--json, --summary-json), validate --json, format keys",
    "runs": "flowrun runs, logs and status; .flowrun/runs/latest",
    "frameworks": "Lightning and fastai scripts in build/venv",
    "multinode": "multi-node runs on the test cluster (tests/cluster/cluster.sh)",
    "pods": "gangs of emulated pods: Kubernetes, AWS Batch, SkyPilot (tests/pods/podsim.py)",
    # what a test needs
    "root": "needs root (skipped without it)",
    "cluster": "needs the test cluster: root and network namespaces",
    "slow": "takes minutes (its time limit is tripled)",
    "deb": "only for an installed .deb (test_installed.py --package FILE.deb)",
    "wheel": "only for an installed wheel (test_installed.py --package FILE.whl)",
}


def pytest_addoption(parser):
    group = parser.getgroup("flowrun")
    group.addoption("--flowrun", default=os.path.join(ROOT, "build", "dev", "flowrun"),
                    help="the flowrun binary under test (default: build/dev/flowrun)")
    group.addoption("--sanitized", action="store_true",
                    help="the binary is built with a sanitizer: timing bounds are tripled")
    group.addoption("--fake-gpu-libs", default=os.path.join(ROOT, "build", "dev", "tests"),
                    help="the directory of libflowrun_fake_{nvml,cudart,nccl}.so (doctor)")
    group.addoption("--venv", default=os.path.join(ROOT, "build", "venv"),
                    help="the Lightning and fastai venv that scripts/venv makes (frameworks)")
    group.addoption("--kubernetes-validate", default=os.path.join(ROOT, "build", "kubernetes-validate"),
                    help="the venv with kubernetes-validate that scripts/test's deps phase makes (manifests)")
    group.addoption("--fault-table", help="write the measured faults table (Markdown) here")
    group.addoption("--cluster-examples", action="store_true",
                    help="run the docs' examples that need a cluster (on one made for them) instead of the others")
    group.addoption("--repeat", type=int, default=20,
                    help="runs of the torch suite's culprit-in-a-collective test (default 20)")
    group.addoption("--keep", action="store_true",
                    help="keep the multi-node tests' scratch directory (in /var/tmp) to look at")
    group.addoption("--update", action="store_true",
                    help="rewrite the expected files (golden plans, bad specs' errors, the docs' console "
                         "output) from real runs")
    group.addoption("--installed", metavar="PREFIX",
                    help="where the package under test is installed: /usr for the .deb, the venv for the wheel "
                         "(test_installed.py)")
    group.addoption("--package", metavar="FILE",
                    help="the .deb or .whl installed at --installed: its kind and version (test_installed.py)")
    group.addoption("--test-timeout", type=float, default=300.0,
                    help="seconds a test may take, tripled with --sanitized and for a slow one (default 300)")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    for name, what in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {what}")
    junit_dir = os.environ.get("FLOWRUN_JUNIT_DIR")
    if junit_dir and not config.option.xmlpath:
        name = config.option.markexpr if re.fullmatch(r"\w+", config.option.markexpr or "") else f"pytest-{os.getpid()}"
        os.makedirs(junit_dir, exist_ok=True)
        config.option.xmlpath = os.path.join(junit_dir, f"{name}.xml")
    config._flowrun = {"passed": 0, "ran": 0, "checks": 0, "failed_checks": 0, "used_checks": False}


# --- fixtures ----------------------------------------------------------------------


@pytest.fixture(scope="session")
def repo_root():
    return ROOT


@pytest.fixture(scope="session")
def flowrun(request):
    path = os.path.abspath(request.config.getoption("flowrun"))
    if not os.access(path, os.X_OK):
        pytest.fail(f"no flowrun binary at {path} (build it, or pass --flowrun PATH)", pytrace=False)
    return path


@pytest.fixture(scope="session")
def sanitized(request):
    return request.config.getoption("sanitized")


@pytest.fixture(scope="session")
def slack(sanitized):
    """What timing bounds are multiplied by: 3 for a sanitizer build."""
    return 3.0 if sanitized else 1.0


@pytest.fixture
def scratch(tmp_path):
    """A directory of the test's own, removed after it (floods leave gigabytes)."""
    yield str(tmp_path)
    shutil.rmtree(tmp_path, ignore_errors=True)


@pytest.fixture
def check(request):
    """check(ok, label, detail=""): a soft check; every failed one fails the test at its end."""
    checks = Checks()
    request.node._flowrun_checks = checks
    request.config._flowrun["used_checks"] = True
    return checks


@pytest.fixture(scope="session")
def fake_gpu_libs(request):
    return os.path.abspath(request.config.getoption("fake_gpu_libs"))


@pytest.fixture(scope="session")
def venv(request):
    path = os.path.abspath(request.config.getoption("venv"))
    if not os.path.exists(os.path.join(path, "flowrun-constraints.sha256")):
        pytest.skip(f"no frameworks venv at {path}; make it with scripts/venv (the deps phase of scripts/test)")
    return path


# --- outcomes: soft checks, timeouts, skips ----------------------------------------


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    checks = getattr(item, "_flowrun_checks", None)
    if report.when != "call":
        return
    stats = item.config._flowrun
    if checks is not None:
        stats["checks"] += checks.passed
        stats["failed_checks"] += len(checks.failed)
        if checks.failed:
            text = checks.report()
            if report.failed:  # it raised after failed checks: show both
                text += f"\n\n{report.longreprtext}"
            report.outcome, report.longrepr = "failed", text
    if not report.skipped:
        stats["ran"] += 1
    stats.setdefault("times", []).append((item.nodeid, report.outcome, report.duration))
    if report.passed:
        stats["passed"] += 1


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    """Each test's time limit, by pytest-timeout where it is installed (python3-pytest-timeout),
    by SIGALRM here otherwise; either way a stuck test fails with every thread's traceback."""
    if item.config.pluginmanager.hasplugin("timeout"):
        yield
        return
    limit = _time_limit(item)

    def expired(signum, frame):
        faulthandler.dump_traceback(all_threads=True)
        pytest.fail(f"the test ran past its {limit:.0f} s", pytrace=False)

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _time_limit(item):
    """--test-timeout, tripled for a sanitizer build and again for a test marked slow."""
    config = item.config
    return (config.getoption("test_timeout") * (3.0 if config.getoption("sanitized") else 1.0)
            * (3.0 if item.get_closest_marker("slow") else 1.0))


def pytest_collection_modifyitems(config, items):
    if config.pluginmanager.hasplugin("timeout") and config.getoption("timeout", None) is None:
        for item in items:
            if item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(_time_limit(item)))


def pytest_terminal_summary(terminalreporter, config):
    stats = config._flowrun
    if stats["used_checks"]:
        terminalreporter.write_line(f"checks: {stats['checks']} passed, {stats['failed_checks']} failed")
    for nodeid, outcome, seconds in stats.get("times", []):
        terminalreporter.write_line(f"{nodeid}: {'ok' if outcome == 'passed' else outcome.upper()} ({seconds:.1f} s)")
    from flowrun_testlib import tables
    for title, text in tables.TABLES.items():
        terminalreporter.write_line(f"{title}:\n{text}")


def pytest_sessionfinish(session, exitstatus):
    stats = session.config._flowrun
    if session.config.option.collectonly:
        return
    if exitstatus == 0 and session.testscollected and not stats["ran"]:
        print("\nflowrun tests: every selected test was skipped (exit 125)")
        session.exitstatus = 125
    elif exitstatus == 0 and stats["used_checks"] and stats["ran"] and not stats["checks"]:
        print("\nflowrun tests: the tests ran but not one check passed")
        session.exitstatus = 1
