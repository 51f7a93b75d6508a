#!/usr/bin/env python3
"""End-to-end tests of the flowrun command line: exit codes, error text,
options in every position, the environment variables it reads.

  run_cli_tests.py FLOWRUN ROOT
"""
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from testlib import Tally, clean_env, run  # noqa: E402

TOO_MANY = """name: big
steps:
  - name: train
    run: python3 train.py
    parallel:
      gpus: 16
"""


def main():
    flowrun, root = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    t = Tally("cli")
    scratch = tempfile.mkdtemp(prefix="flowrun-cli-")
    quickstart = os.path.join(root, "specs", "examples", "quickstart.yaml")

    def fr(*args, env=None, cwd=scratch):
        return run([flowrun, *args], cwd=cwd, env=clean_env(**(env or {})))

    try:
        r = fr("plan", quickstart, "--fake-gpus", "1", env={"FLOWRUN_HOSTNAME": ""})
        t.check(f"This host: {os.uname().nodename}, 1 GPUs" in r.stdout or f"This host: {os.uname().nodename}, " in r.stdout,
                "without FLOWRUN_HOSTNAME the host is named by gethostname()", r.stdout)

        r = fr("--version")
        t.check(r.returncode == 0 and r.stdout == "flowrun 0.1.0\n", "--version", r.stdout + r.stderr)

        r = fr("--help")
        t.check(r.returncode == 0 and all(w in r.stdout for w in ("validate", "plan", "gpus", "Examples:",
                                                                   "--fake-gpus", "Exit codes")),
                "--help lists subcommands, examples and exit codes", r.stdout)
        r = fr("plan", "--help")
        t.check(r.returncode == 0 and "--json" in r.stdout and "--env" in r.stdout, "plan --help", r.stdout)

        r = fr()
        t.check(r.returncode == 2 and r.stderr.startswith("flowrun: error: no spec given\n"), "no arguments",
                r.stderr)

        r = fr("--frobnicate")
        t.check(r.returncode == 2 and r.stderr.startswith("flowrun: error: ") and "--help" in r.stderr,
                "unknown option: exit 2 and a pointer to --help", r.stderr)

        r = fr("plan")
        t.check(r.returncode == 2 and "spec" in r.stderr, "plan without a spec: exit 2", r.stderr)

        r = fr("validate", "missing.yaml")
        t.check(r.returncode == 2 and r.stderr.startswith("missing.yaml: ") and r.stdout == "",
                "unreadable spec: exit 2, named", r.stderr)

        r = fr("validate", quickstart)
        t.check(r.returncode == 0 and r.stdout.endswith(
            ": ok: 3 steps: prepare, train (parallel), evaluate (join of train)\n"), "validate ok", r.stdout)

        with open(os.path.join(scratch, "big.yaml"), "w") as f:
            f.write(TOO_MANY)
        r = fr("plan", "big.yaml", "--fake-gpus", "8")
        t.check(r.returncode == 2 and r.stdout == "" and r.stderr == (
            "big.yaml:6:13: steps.train.parallel.gpus: gpus: 16 asks for more GPUs than host-a has "
            "(8 GPUs: NVIDIA H200 x8) and the spec has no cluster: section to fan out to; ask for at most 8, "
            "or add a cluster: section (docs/spec.md#cluster)\n"),
            "a refused plan: exit 2 and FILE:LINE:COL", r.stderr)

        for args in (["--fake-gpus", "3", "gpus"], ["gpus", "--fake-gpus", "3"]):
            r = fr(*args)
            t.check(r.returncode == 0 and ": 3 GPUs (NVIDIA H200 x3), simulated" in r.stdout,
                    f"global option position: {' '.join(args)}", r.stdout + r.stderr)

        r = fr("gpus", env={"FLOWRUN_FAKE_GPUS": "2"})
        t.check(r.returncode == 0 and ": 2 GPUs (NVIDIA H200 x2)" in r.stdout, "FLOWRUN_FAKE_GPUS", r.stdout)
        r = fr("gpus", "--fake-gpus", "1", env={"FLOWRUN_FAKE_GPUS": "2"})
        t.check(": 1 GPUs" in r.stdout or ": 1 GPU" in r.stdout, "--fake-gpus wins over FLOWRUN_FAKE_GPUS",
                r.stdout)
        r = fr("gpus", env={"FLOWRUN_FAKE_GPUS": "eight"})
        t.check(r.returncode == 2 and r.stderr == (
            "flowrun: error: FLOWRUN_FAKE_GPUS='eight': expected a whole number of simulated GPUs, "
            "e.g. FLOWRUN_FAKE_GPUS=8\n"), "bad FLOWRUN_FAKE_GPUS", r.stderr)
        r = fr("gpus", "--fake-gpus", "-1")
        t.check(r.returncode == 2, "--fake-gpus out of range", r.stderr)

        r = fr("gpus", "--json", env={"CUDA_VISIBLE_DEVICES": "1,0", "FLOWRUN_FAKE_GPUS": "4"})
        inventory = json.loads(r.stdout)
        t.check([g["select_token"] for g in inventory["gpus"]] == ["1", "0"]
                and inventory["selected_by"] == "CUDA_VISIBLE_DEVICES" and inventory["system_count"] == 4,
                "gpus --json honours CUDA_VISIBLE_DEVICES order", r.stdout)

        if shutil.which("nvidia-smi") is None:
            r = fr("gpus")
            t.check(r.returncode == 0 and ": no GPUs (" in r.stdout and "libnvidia-ml.so.1" in r.stdout,
                    "real probe on a host without a driver says why", r.stdout + r.stderr)
            r = fr("plan", quickstart)
            t.check(r.returncode == 2 and "--cpus N" in r.stderr and "cpus: N" in r.stderr,
                    "no GPU and no cpus: refused with how to run on CPU workers", r.stderr)

        r = fr("plan", quickstart, "--cpus", "2")
        t.check(r.returncode == 0 and "parallel, 2 workers" in r.stdout and "CUDA_VISIBLE_DEVICES is empty" in r.stdout,
                "--cpus plans CPU workers", r.stdout + r.stderr)

        r = fr("plan", quickstart, "--fake-gpus", "4", "--json", "--run-id", "fixed-id", "--run-dir", "/tmp/rd")
        plan = json.loads(r.stdout)
        train = [s for s in plan["steps"] if s["name"] == "train"][0]
        env3 = train["ranks"][3]["env"]
        t.check(plan["run_id"] == "fixed-id" and plan["run_dir"] == "/tmp/rd" and train["world_size"] == 4
                and env3["RANK"] == "3" and env3["TORCHELASTIC_RUN_ID"] == "fixed-id"
                and env3["FLOWRUN_OUTPUT_DIR"] == "/tmp/rd/train/rank3/out"
                and env3["TORCHELASTIC_ERROR_FILE"] == "/tmp/rd/train/rank3/error.json",
                "plan --json: --run-id, --run-dir and every rank's env", r.stdout[:2000])

        r = fr("plan", quickstart, "--fake-gpus", "2", env={"OMP_NUM_THREADS": "6"}, cwd=root)
        r2 = fr("plan", quickstart, "--fake-gpus", "2", "--env", env={"OMP_NUM_THREADS": "6"}, cwd=root)
        t.check("OMP_NUM_THREADS=6" in r2.stdout and "RANK=1" in r2.stdout, "--env shows the inherited OMP_NUM_THREADS",
                r2.stdout)

        flow = os.path.join(scratch, "hello.yaml")
        with open(flow, "w") as f:
            f.write("steps:\n  - name: train\n    shell: true\n"
                    "    run: 'echo hello $RANK of $WORLD_SIZE; echo \"$@\" > /dev/null'\n"
                    "    parallel: {}\n")
        run_dir = os.path.join(scratch, "run")
        r = fr(flow, "--fake-gpus", "2", "--run-dir", run_dir)
        t.check(r.returncode == 0 and "[train r0] hello 0 of 2\n" in r.stdout
                and "[train r1] hello 1 of 2\n" in r.stdout
                and os.path.exists(os.path.join(run_dir, "train", "results.json"))
                and "flowrun: step 'train' succeeded" in r.stderr,
                "flowrun SPEC runs the flow: one prefixed line per rank, results.json written",
                r.stdout + r.stderr)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return t.finish()


if __name__ == "__main__":
    sys.exit(main())
