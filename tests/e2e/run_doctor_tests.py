#!/usr/bin/env python3
"""End-to-end tests of `flowrun doctor` on a machine without a GPU: the real
binary, its check child (`flowrun doctor --check-child`, started from
/proc/self/exe) and its reports, with stand-ins for the NVIDIA libraries
(tests/fixtures/gpu/fake_*.cpp, built next to the unit tests): NVML as
libnvidia-ml.so.1 on LD_LIBRARY_PATH, the CUDA runtime and NCCL named by
FLOWRUN_CUDART_LIBRARY and FLOWRUN_NCCL_LIBRARY.

  run_doctor_tests.py FLOWRUN FAKES_DIR

Exits 125 (skipped) when the binary was built without GPU support.
"""
import json
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from testlib import Tally, clean_env, run  # noqa: E402


def marked_processes(mark):
    """Processes whose environment carries DOCTOR_TEST_MARK=mark."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if f"DOCTOR_TEST_MARK={mark}".encode() in f.read().split(b"\0"):
                    found.append(int(pid))
        except OSError:
            pass
    return found


def main():
    flowrun, fakes = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    scratch = tempfile.mkdtemp(prefix="flowrun-doctor-")
    os.symlink(os.path.join(fakes, "libflowrun_fake_nvml.so"), os.path.join(scratch, "libnvidia-ml.so.1"))
    base = {
        "LD_LIBRARY_PATH": scratch,
        "FLOWRUN_CUDART_LIBRARY": os.path.join(fakes, "libflowrun_fake_cudart.so"),
        "FLOWRUN_NCCL_LIBRARY": os.path.join(fakes, "libflowrun_fake_nccl.so"),
        "FAKE_NVML_SCENARIO": "hgx",
        "FAKE_CUDA_DEVICES": "8",
        "DOCTOR_TEST_MARK": scratch,
    }

    def doctor(*args, **env):
        merged = dict(base)
        merged.update(env)
        environment = clean_env(**{k: v for k, v in merged.items() if v is not None})
        for k in [k for k, v in merged.items() if v is None]:
            environment.pop(k, None)
        return run([flowrun, "doctor", *args], cwd=scratch, env=environment)

    probe = doctor("--fake-gpus", "1")
    if "built without GPU support" in probe.stdout.splitlines()[0]:
        print("SKIP: this flowrun was built without GPU support")
        shutil.rmtree(scratch, ignore_errors=True)
        return 125

    t = Tally("doctor")
    try:
        r = doctor("--sizes", "8:64K")
        lines = r.stdout.splitlines()
        t.check(r.returncode == 1, "an HGX board with an NVLink down: exit 1", r.stdout + r.stderr)
        t.check(lines[0] == "flowrun doctor: host-a, 8 GPUs (NVIDIA H100 80GB HBM3 x8)", "the first line", lines[0])
        t.check("  GPU6  NV17  NV17  NV17  NV17  NV17  NV17  X     NV17" in lines, "the topology row of GPU 6",
                r.stdout)
        t.check("  FAIL  links       NVLinks down: most pairs have NV18, but 0-6 NV17, 1-6 NV17, 2-6 NV17, 3-6 NV17, "
                "4-6 NV17, 5-6 NV17 and 1 more" in lines, "the links check names the pairs", r.stdout)
        t.check("  ok    all-reduce  14 sizes from 8 B to 64 KiB on 8 GPUs, every sum correct" in lines,
                "the all-reduce ran in the check child, every sum checked", r.stdout + r.stderr)
        t.check(sum(line.endswith("  0  RING/SIMPLE") for line in lines) == 14,
                "each size shows NCCL's algorithm, from its debug file", r.stdout)
        t.check(r.stderr == "", "nothing on stderr", r.stderr)

        r = doctor("--sizes", "8:64K", CUDA_VISIBLE_DEVICES="0,1,2,3", FAKE_CUDA_DEVICES="4")
        t.check(r.returncode == 0 and r.stdout.endswith("\nVerdict: healthy.\n"),
                "four GPUs whose NVLinks are all up: healthy", r.stdout + r.stderr)
        t.check("  ok    links       every pair NV18 (NVLink 4) through NVSwitch\n" in r.stdout,
                "selected by CUDA_VISIBLE_DEVICES, their links only", r.stdout)

        start = time.monotonic()
        r = doctor("--sizes", "8:4K", "--timeout", "1", FAKE_NCCL="hang")
        took = time.monotonic() - start
        t.check(r.returncode == 1 and "  FAIL  all-reduce  NCCL all-reduce hung: the all-reduce of 1 KiB did not "
                "finish within 1 s; flowrun aborted NCCL\n" in r.stdout, "a hung collective is aborted and said",
                r.stdout + r.stderr)
        t.check(took < 10, f"the hang is reported within the limit ({took:.1f} s)")
        t.check("NCCL: fake: a collective that never finishes\n" in r.stdout, "NCCL's WARN lines are shown", r.stdout)

        start = time.monotonic()
        r = doctor("--sizes", "8:4K", "--timeout", "1", FAKE_NCCL="init-hang")
        took = time.monotonic() - start
        t.check(r.returncode == 1 and "NCCL all-reduce hung: no progress for 2 s while setting up NCCL communicators "
                "(ncclCommInitAll), inside a call that does not return; the check ended itself\n" in r.stdout,
                "a set-up that never returns ends the check child", r.stdout + r.stderr)
        t.check(took < 10, f"... within the limit and its grace ({took:.1f} s)")
        t.check(marked_processes(scratch) == [], "no check child is left behind")

        r = doctor("--sizes", "8:64K", "--json")
        report = json.loads(r.stdout)
        t.check(r.returncode == 1 and report["exit_code"] == 1 and not report["healthy"], "--json: the verdict",
                r.stdout[-500:])
        t.check([row["bytes"] for row in report["allreduce"]] == [8 << i for i in range(14)], "--json: the sizes",
                json.dumps(report["allreduce"])[:500])
        with open(os.path.join(scratch, "facts.json"), "w") as f:
            f.write(r.stdout)
        text = doctor("--sizes", "8:64K")
        again = doctor("--facts", "facts.json")
        times = lambda out: [line for line in out.splitlines() if not line.rstrip().endswith("RING/SIMPLE")]
        t.check(again.returncode == 1 and times(again.stdout) == times(text.stdout),
                "--facts of a --json report gives the same report (timings aside)", again.stdout + again.stderr)

        r = doctor(FLOWRUN_NCCL_LIBRARY="/nonexistent/libnccl.so.2", FAKE_NVML_SCENARIO="bridges",
                   FAKE_CUDA_DEVICES="4")
        t.check(r.returncode == 1 and "  FAIL  nccl        NCCL not found: /nonexistent/libnccl.so.2: cannot open shared "
                "object file: No such file or directory (tried /nonexistent/libnccl.so.2)\n" in r.stdout and
                "  skip  all-reduce  not run: NCCL was not found\n" in r.stdout, "a missing NCCL, said plainly",
                r.stdout + r.stderr)

        r = doctor("--no-nccl", FAKE_NVML_SCENARIO="bridges", FAKE_CUDA_DEVICES="4")
        t.check(r.returncode == 0 and "  skip  all-reduce  not run: --no-nccl\n" in r.stdout and
                "  warn  pcie        PCIe lanes missing: GPU 3 runs x8 of its x16\n" in r.stdout,
                "--no-nccl: the libraries only; a narrow PCIe link is a warning", r.stdout + r.stderr)

        r = doctor("--sizes", "1G:8")
        t.check(r.returncode == 2 and r.stderr == "flowrun: error: --sizes 1G:8: MIN is larger than MAX; expected "
                "MIN:MAX or MIN:MAX:FACTOR, e.g. --sizes 8:1G or 1M:1G:4\n", "a bad --sizes: exit 2", r.stderr)

        # preflight: true on a parallel step: the check runs before the workers, and a failure refuses the step.
        with open(os.path.join(scratch, "pf.yaml"), "w") as f:
            f.write("steps:\n  - name: train\n    run: [touch, ran]\n    parallel: {gpus: 2, preflight: true}\n")

        def flow(**env):
            merged = {**base, **env}
            return run([flowrun, "pf.yaml"], cwd=scratch, env=clean_env(**merged), timeout=300)

        r = flow(FAKE_NCCL="wrong")
        t.check(r.returncode == 1 and "  FAIL  all-reduce  wrong sums at 1 MiB" in r.stdout + r.stderr and
                "flowrun:   the preflight check of its GPUs failed (the report above); fix what it names, or set "
                "preflight: false" in r.stderr, "preflight: wrong sums refuse the step with the doctor's report",
                r.stdout + r.stderr)
        t.check(not os.path.exists(os.path.join(scratch, "ran")), "preflight: no worker started after a failed check")
        r = flow()
        t.check(r.returncode == 0 and os.path.exists(os.path.join(scratch, "ran")) and
                "flowrun: step 'train': preflight: checking NCCL on this host's GPUs 0,1" in r.stdout + r.stderr,
                "preflight: a passing check, then the workers run", r.stdout + r.stderr)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return t.finish()


if __name__ == "__main__":
    sys.exit(main())
