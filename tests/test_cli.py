"""End-to-end tests of the flowrun command line: exit codes, error text,
options in every position, the environment variables it reads.

  python3 -m pytest tests/test_cli.py [--flowrun PATH] [-k NAME]
"""
import json
import os
import re
import shutil

import pytest

from flowrun_testlib import clean_env, run

pytestmark = pytest.mark.cli

TOO_MANY = """name: big
steps:
  - name: train
    run: python3 train.py
    parallel:
      gpus: 16
"""


@pytest.fixture
def fr(flowrun, scratch):
    """flowrun ARGS, run to its end in the scratch directory (or cwd), in a clean environment."""
    def run_flowrun(*args, env=None, cwd=scratch):
        return run([flowrun, *args], cwd=cwd, env=clean_env(**(env or {})))
    return run_flowrun


@pytest.fixture
def quickstart(repo_root):
    return os.path.join(repo_root, "specs", "examples", "quickstart.yaml")


def test_hostname(fr, check, quickstart):
    r = fr("plan", quickstart, "--fake-gpus", "1", env={"FLOWRUN_HOSTNAME": ""})
    check(f"This host: {os.uname().nodename}, 1 GPUs" in r.stdout or f"This host: {os.uname().nodename}, " in r.stdout,
            "without FLOWRUN_HOSTNAME the host is named by gethostname()", r.stdout)


def test_version(fr, check, repo_root):
    with open(os.path.join(repo_root, "lib", "protocol", "include", "flowrun", "protocol.h")) as f:
        protocol = re.search(r"kProtocolVersion = (\d+);", f.read()).group(1)
    for args in (["--version"], ["run", "--version"]):
        r = fr(*args)
        check(r.returncode == 0 and re.fullmatch(rf"flowrun 0\.1\.0 \(commit ([\w.-]+), protocol {protocol}\)\n", r.stdout),
              f"{' '.join(args)}: the version, the commit and the protocol", r.stdout + r.stderr)


# Every --help, and the width none of their lines may pass (lib/cli/commands.h, kHelpWidth).
HELPS = ["", "run", "init", "resume", "doctor", "runs", "logs", "status", "validate", "plan", "gpus", "agent",
         "manifest"]


def test_help_width(fr, check):
    for sub in HELPS:
        r = fr(*([sub] if sub else []), "--help")
        wide = [line for line in r.stdout.splitlines() if len(line) > 100]
        check(r.returncode == 0 and r.stdout and not wide, f"flowrun {sub + ' ' if sub else ''}--help: at most 100 columns",
              "\n".join(wide) or r.stdout + r.stderr)


def test_mistyped_command(fr, check, scratch):
    for args, word, meant in ((["rnu", "train.py"], "rnu", "run"), (["stauts", "latest"], "stauts", "status"),
                              (["--cpus", "2", "vaildate", "x.yaml"], "vaildate", "validate")):
        r = fr(*args, "--summary-json", "summary.json")
        with open(os.path.join(scratch, "summary.json")) as f:
            summary = json.load(f)
        check(r.returncode == 2 and r.stderr.startswith(
            f"flowrun: error: unknown command '{word}'; did you mean '{meant}'?\n"),
            f"flowrun {' '.join(args)}: did you mean '{meant}'", r.stderr)
        check(summary["state"] == "usage_error" and summary["error"].startswith(f"unknown command '{word}'"),
              f"flowrun {' '.join(args)}: the summary says so", json.dumps(summary))
    # A file of that name, or a word that names a spec, is a spec.
    open(os.path.join(scratch, "rnu"), "w").close()
    for word in ("rnu", "rnu.yaml", "./stauts"):
        r = fr(word)
        check(r.returncode == 2 and "did you mean" not in r.stderr, f"flowrun {word}: read as a spec", r.stderr)


def test_help(fr, check):
    r = fr("--help")
    check(r.returncode == 0 and all(w in r.stdout for w in ("validate", "plan", "gpus", "Examples:",
                                                               "--fake-gpus", "Exit codes")),
            "--help lists subcommands, examples and exit codes", r.stdout)
    r = fr("plan", "--help")
    check(r.returncode == 0 and "--json" in r.stdout and "--env" in r.stdout, "plan --help", r.stdout)


def test_no_arguments(fr, check):
    r = fr()
    check(r.returncode == 2 and r.stderr.startswith("flowrun: error: no spec given\n"), "no arguments",
            r.stderr)


def test_unknown_option(fr, check):
    r = fr("--frobnicate")
    check(r.returncode == 2 and r.stderr.startswith("flowrun: error: ") and "--help" in r.stderr,
            "unknown option: exit 2 and a pointer to --help", r.stderr)


def test_plan_without_spec(fr, check):
    r = fr("plan")
    check(r.returncode == 2 and "spec" in r.stderr, "plan without a spec: exit 2", r.stderr)


def test_unreadable_spec(fr, check):
    r = fr("validate", "missing.yaml")
    check(r.returncode == 2 and r.stderr.startswith("missing.yaml: ") and r.stdout == "",
            "unreadable spec: exit 2, named", r.stderr)


def test_validate_ok(fr, check, quickstart):
    r = fr("validate", quickstart)
    check(r.returncode == 0 and r.stdout.endswith(
        ": ok: 3 steps: prepare, train (parallel), evaluate (join of train)\n"), "validate ok", r.stdout)


def test_refused_plan(fr, check, scratch):
    with open(os.path.join(scratch, "big.yaml"), "w") as f:
        f.write(TOO_MANY)
    r = fr("plan", "big.yaml", "--fake-gpus", "8")
    check(r.returncode == 2 and r.stdout == "" and r.stderr == (
        "big.yaml:6:13: steps.train.parallel.gpus: gpus: 16 asks for more GPUs than host-a has "
        "(8 GPUs: NVIDIA H200 x8) and the spec has no cluster: section to fan out to; ask for at most 8, "
        "or add a cluster: section (docs/spec.md#cluster)\n"),
        "a refused plan: exit 2 and FILE:LINE:COL", r.stderr)


def test_global_option_position(fr, check):
    for args in (["--fake-gpus", "3", "gpus"], ["gpus", "--fake-gpus", "3"]):
        r = fr(*args)
        check(r.returncode == 0 and ": 3 GPUs (NVIDIA H200 x3), simulated" in r.stdout,
                f"global option position: {' '.join(args)}", r.stdout + r.stderr)


def test_fake_gpus(fr, check):
    r = fr("gpus", env={"FLOWRUN_FAKE_GPUS": "2"})
    check(r.returncode == 0 and ": 2 GPUs (NVIDIA H200 x2)" in r.stdout, "FLOWRUN_FAKE_GPUS", r.stdout)
    r = fr("gpus", "--fake-gpus", "1", env={"FLOWRUN_FAKE_GPUS": "2"})
    check(": 1 GPUs" in r.stdout or ": 1 GPU" in r.stdout, "--fake-gpus wins over FLOWRUN_FAKE_GPUS",
            r.stdout)
    r = fr("gpus", env={"FLOWRUN_FAKE_GPUS": "eight"})
    check(r.returncode == 2 and r.stderr == (
        "flowrun: error: FLOWRUN_FAKE_GPUS='eight': expected a whole number of simulated GPUs, "
        "e.g. FLOWRUN_FAKE_GPUS=8\n"), "bad FLOWRUN_FAKE_GPUS", r.stderr)
    r = fr("gpus", "--fake-gpus", "-1")
    check(r.returncode == 2, "--fake-gpus out of range", r.stderr)


def test_gpus_json_order(fr, check):
    r = fr("gpus", "--json", env={"CUDA_VISIBLE_DEVICES": "1,0", "FLOWRUN_FAKE_GPUS": "4"})
    inventory = json.loads(r.stdout)
    check([g["select_token"] for g in inventory["gpus"]] == ["1", "0"]
            and inventory["selected_by"] == "CUDA_VISIBLE_DEVICES" and inventory["system_count"] == 4,
            "gpus --json honours CUDA_VISIBLE_DEVICES order", r.stdout)


def test_no_driver(fr, check, quickstart):
    if shutil.which("nvidia-smi") is not None:
        pytest.skip("this host has an NVIDIA driver")
    r = fr("gpus")
    check(r.returncode == 0 and ": no GPUs (" in r.stdout and "libnvidia-ml.so.1" in r.stdout,
            "real probe on a host without a driver says why", r.stdout + r.stderr)
    r = fr("plan", quickstart)
    check(r.returncode == 2 and "--cpus N" in r.stderr and "cpus: N" in r.stderr,
            "no GPU and no cpus: refused with how to run on CPU workers", r.stderr)


def test_cpus(fr, check, quickstart):
    r = fr("plan", quickstart, "--cpus", "2")
    check(r.returncode == 0 and "parallel, 2 workers" in r.stdout and "CUDA_VISIBLE_DEVICES is empty" in r.stdout,
            "--cpus plans CPU workers", r.stdout + r.stderr)


def test_plan_json(fr, check, quickstart):
    r = fr("plan", quickstart, "--fake-gpus", "4", "--json", "--run-id", "fixed-id", "--run-dir", "/tmp/rd")
    plan = json.loads(r.stdout)
    train = [s for s in plan["steps"] if s["name"] == "train"][0]
    env3 = train["ranks"][3]["env"]
    check(plan["run_id"] == "fixed-id" and plan["run_dir"] == "/tmp/rd" and train["world_size"] == 4
            and env3["RANK"] == "3" and env3["TORCHELASTIC_RUN_ID"] == "fixed-id"
            and env3["FLOWRUN_OUTPUT_DIR"] == "/tmp/rd/train/rank3/out"
            and env3["TORCHELASTIC_ERROR_FILE"] == "/tmp/rd/train/rank3/error.json",
            "plan --json: --run-id, --run-dir and every rank's env", r.stdout[:2000])


def test_env_shows_inherited(fr, check, quickstart, repo_root):
    fr("plan", quickstart, "--fake-gpus", "2", env={"OMP_NUM_THREADS": "6"}, cwd=repo_root)
    r2 = fr("plan", quickstart, "--fake-gpus", "2", "--env", env={"OMP_NUM_THREADS": "6"}, cwd=repo_root)
    check("OMP_NUM_THREADS=6" in r2.stdout and "RANK=1" in r2.stdout, "--env shows the inherited OMP_NUM_THREADS",
            r2.stdout)


def test_run_flow(fr, check, scratch):
    flow = os.path.join(scratch, "hello.yaml")
    with open(flow, "w") as f:
        f.write("steps:\n  - name: train\n    shell: true\n"
                "    run: 'echo hello $RANK of $WORLD_SIZE; echo \"$@\" > /dev/null'\n"
                "    parallel: {}\n")
    run_dir = os.path.join(scratch, "run")
    r = fr(flow, "--fake-gpus", "2", "--run-dir", run_dir)
    check(r.returncode == 0 and "[train r0] hello 0 of 2\n" in r.stdout
            and "[train r1] hello 1 of 2\n" in r.stdout
            and os.path.exists(os.path.join(run_dir, "train", "results.json"))
            and "flowrun: step 'train' succeeded" in r.stderr,
            "flowrun SPEC runs the flow: one prefixed line per rank, results.json written",
            r.stdout + r.stderr)
