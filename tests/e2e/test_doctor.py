"""End-to-end tests of `flowrun doctor` on a machine without a GPU: the real
binary, its check child (`flowrun doctor --check-child`, started from
/proc/self/exe) and its reports, with stand-ins for the NVIDIA libraries
(tests/fixtures/gpu/fake_*.cpp, built next to the unit tests): NVML as
libnvidia-ml.so.1 on LD_LIBRARY_PATH, the CUDA runtime and NCCL named by
FLOWRUN_CUDART_LIBRARY and FLOWRUN_NCCL_LIBRARY.

  python3 -m pytest tests/e2e/test_doctor.py [--flowrun PATH] [--fake-gpu-libs DIR] [-k NAME]

Skipped when the binary was built without GPU support.
"""
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import time

import pytest

from flowrun_testlib import AGENT_CLOSED, clean_env, run

pytestmark = pytest.mark.doctor

HOST = socket.gethostname()
AGENT_COMMAND = re.compile(r"^flowrun:   (.* agent --rdzv-endpoint .*)$", re.M)


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


@pytest.fixture
def base(fake_gpu_libs, scratch):
    """The environment of every doctor run: the stand-ins, an HGX board of 8 GPUs, the test's mark."""
    os.symlink(os.path.join(fake_gpu_libs, "libflowrun_fake_nvml.so"), os.path.join(scratch, "libnvidia-ml.so.1"))
    return {
        "LD_LIBRARY_PATH": scratch,
        "FLOWRUN_CUDART_LIBRARY": os.path.join(fake_gpu_libs, "libflowrun_fake_cudart.so"),
        "FLOWRUN_NCCL_LIBRARY": os.path.join(fake_gpu_libs, "libflowrun_fake_nccl.so"),
        "FAKE_NVML_SCENARIO": "hgx",
        "FAKE_CUDA_DEVICES": "8",
        "DOCTOR_TEST_MARK": scratch,
    }


@pytest.fixture
def doctor(flowrun, scratch, base):
    """doctor(*args, **env): flowrun doctor ARGS run to its end (an env value of None unsets it).
    Skips the test when the binary was built without GPU support."""
    def run_doctor(*args, **env):
        merged = dict(base)
        merged.update(env)
        environment = clean_env(**{k: v for k, v in merged.items() if v is not None})
        for k in [k for k, v in merged.items() if v is None]:
            environment.pop(k, None)
        return run([flowrun, "doctor", *args], cwd=scratch, env=environment)

    probe = run_doctor("--fake-gpus", "1")
    if "built without GPU support" in probe.stdout.splitlines()[0]:
        pytest.skip("this flowrun was built without GPU support")
    return run_doctor


def test_hgx_nvlink_down(doctor, check, scratch):
    r = doctor("--sizes", "8:64K")
    lines = r.stdout.splitlines()
    check(r.returncode == 1, "an HGX board with an NVLink down: exit 1", r.stdout + r.stderr)
    check(lines[0] == "flowrun doctor: host-a, 8 GPUs (NVIDIA H100 80GB HBM3 x8)", "the first line", lines[0])
    check("  GPU6  NV17  NV17  NV17  NV17  NV17  NV17  X     NV17" in lines, "the topology row of GPU 6",
            r.stdout)
    check("  FAIL  links       NVLinks down: most pairs have NV18, but 0-6 NV17, 1-6 NV17, 2-6 NV17, 3-6 NV17, "
            "4-6 NV17, 5-6 NV17 and 1 more" in lines, "the links check names the pairs", r.stdout)
    check("  ok    all-reduce  14 sizes from 8 B to 64 KiB on 8 GPUs, every sum correct" in lines,
            "the all-reduce ran in the check child, every sum checked", r.stdout + r.stderr)
    check(sum(line.endswith("  0  RING/SIMPLE") for line in lines) == 14,
            "each size shows NCCL's algorithm, from its debug file", r.stdout)
    check(r.stderr == "", "nothing on stderr", r.stderr)


def test_four_gpus_healthy(doctor, check, scratch):
    r = doctor("--sizes", "8:64K", CUDA_VISIBLE_DEVICES="0,1,2,3", FAKE_CUDA_DEVICES="4")
    check(r.returncode == 0 and r.stdout.endswith("\nVerdict: healthy.\n"),
            "four GPUs whose NVLinks are all up: healthy", r.stdout + r.stderr)
    check("  ok    links       every pair NV18 (NVLink 4) through NVSwitch\n" in r.stdout,
            "selected by CUDA_VISIBLE_DEVICES, their links only", r.stdout)


def test_hung_collective(doctor, check, scratch):
    start = time.monotonic()
    r = doctor("--sizes", "8:4K", "--timeout", "1", FAKE_NCCL="hang")
    took = time.monotonic() - start
    check(r.returncode == 1 and "  FAIL  all-reduce  NCCL all-reduce hung: the all-reduce of 1 KiB did not "
            "finish within 1 s; flowrun aborted NCCL\n" in r.stdout, "a hung collective is aborted and said",
            r.stdout + r.stderr)
    check(took < 10, f"the hang is reported within the limit ({took:.1f} s)")
    check("NCCL: fake: a collective that never finishes\n" in r.stdout, "NCCL's WARN lines are shown", r.stdout)


def test_init_hang(doctor, check, scratch):
    start = time.monotonic()
    r = doctor("--sizes", "8:4K", "--timeout", "1", FAKE_NCCL="init-hang")
    took = time.monotonic() - start
    check(r.returncode == 1 and "NCCL all-reduce hung: no progress for 2 s while setting up NCCL communicators "
            "(ncclCommInitAll), inside a call that does not return; the check ended itself\n" in r.stdout,
            "a set-up that never returns ends the check child", r.stdout + r.stderr)
    check(took < 10, f"... within the limit and its grace ({took:.1f} s)")
    check(marked_processes(scratch) == [], "no check child is left behind")


def test_json_and_facts(doctor, check, scratch):
    r = doctor("--sizes", "8:64K", "--json")
    report = json.loads(r.stdout)
    check(r.returncode == 1 and report["exit_code"] == 1 and not report["healthy"], "--json: the verdict",
            r.stdout[-500:])
    check([row["bytes"] for row in report["allreduce"]] == [8 << i for i in range(14)], "--json: the sizes",
            json.dumps(report["allreduce"])[:500])
    with open(os.path.join(scratch, "facts.json"), "w") as f:
        f.write(r.stdout)
    text = doctor("--sizes", "8:64K")
    again = doctor("--facts", "facts.json")
    times = lambda out: [line for line in out.splitlines() if not line.rstrip().endswith("RING/SIMPLE")]
    check(again.returncode == 1 and times(again.stdout) == times(text.stdout),
            "--facts of a --json report gives the same report (timings aside)", again.stdout + again.stderr)


def test_missing_nccl(doctor, check, scratch):
    r = doctor(FLOWRUN_NCCL_LIBRARY="/nonexistent/libnccl.so.2", FAKE_NVML_SCENARIO="bridges",
               FAKE_CUDA_DEVICES="4")
    check(r.returncode == 1 and "  FAIL  nccl        NCCL not found: /nonexistent/libnccl.so.2: cannot open shared "
            "object file: No such file or directory (tried /nonexistent/libnccl.so.2)\n" in r.stdout and
            "  skip  all-reduce  not run: NCCL was not found\n" in r.stdout, "a missing NCCL, said plainly",
            r.stdout + r.stderr)


def test_no_nccl(doctor, check, scratch):
    r = doctor("--no-nccl", FAKE_NVML_SCENARIO="bridges", FAKE_CUDA_DEVICES="4")
    check(r.returncode == 0 and "  skip  all-reduce  not run: --no-nccl\n" in r.stdout and
            "  warn  pcie        PCIe lanes missing: GPU 3 runs x8 of its x16\n" in r.stdout,
            "--no-nccl: the libraries only; a narrow PCIe link is a warning", r.stdout + r.stderr)


def test_bad_sizes(doctor, check, scratch):
    r = doctor("--sizes", "1G:8")
    check(r.returncode == 2 and r.stderr == "flowrun: error: --sizes 1G:8: MIN is larger than MAX; expected "
            "MIN:MAX or MIN:MAX:FACTOR, e.g. --sizes 8:1G or 1M:1G:4\n", "a bad --sizes: exit 2", r.stderr)


def test_preflight(doctor, check, scratch, flowrun, base):
    # preflight: true on a parallel step: the check runs before the workers, and a failure refuses the step.
    with open(os.path.join(scratch, "pf.yaml"), "w") as f:
        f.write("steps:\n  - name: train\n    run: [touch, ran]\n    parallel: {gpus: 2, preflight: true}\n")

    def flow(**env):
        merged = {**base, **env}
        return run([flowrun, "pf.yaml"], cwd=scratch, env=clean_env(**merged), timeout=300)

    r = flow(FAKE_NCCL="wrong")
    check(r.returncode == 1 and "  FAIL  all-reduce  wrong sums at 1 MiB" in r.stdout + r.stderr and
            "flowrun:   the preflight check of its GPUs failed (the report above); fix what it names, or set "
            "preflight: false" in r.stderr, "preflight: wrong sums refuse the step with the doctor's report",
            r.stdout + r.stderr)
    check(not os.path.exists(os.path.join(scratch, "ran")), "preflight: no worker started after a failed check")
    # Two NVLink 4 GPUs behind NVSwitch: the stand-in's host-memory "all-reduce" is far below their ceiling
    # (judged at 256 MiB, or where the sweep stopped when the stand-in is slower still, under a sanitizer).
    r = flow()
    check(r.returncode == 1 and not os.path.exists(os.path.join(scratch, "ran")) and
            re.search(r"^  FAIL  bandwidth   (large-message bus bandwidth [0-9.]+ GB/s is [0-9]+% of the 370 GB/s "
                      r"ceiling for NVLink 4 through NVSwitch .*, below the 85% \(314\.5 GB/s\) a healthy node "
                      r"reaches|the sweep stopped at [0-9]+ MiB, too slow to go on: bus bandwidth [0-9.]+ GB/s "
                      r"there, against the 370 GB/s ceiling for NVLink 4 through NVSwitch .*)$",
                      r.stdout + r.stderr, re.M),
            "preflight: a bandwidth far below the links' ceiling refuses the step (the links probed for it)",
            r.stdout + r.stderr)
    # GPUs on two CPU sockets: no ceiling is known, the check passes with the figure shown.
    r = flow(FAKE_NVML_SCENARIO="bridges", CUDA_VISIBLE_DEVICES="0,2", FAKE_CUDA_DEVICES="2")
    check(r.returncode == 0 and os.path.exists(os.path.join(scratch, "ran")) and
            "flowrun: step 'train': preflight: checking NCCL on this host's GPUs 0,2" in r.stdout + r.stderr,
            "preflight: a passing check, then the workers run", r.stdout + r.stderr)
    passed = re.search(r"^flowrun: step 'train': preflight passed: [2-5] sizes from 1 MiB to [0-9]+ MiB on 2 GPUs, "
                       r"every sum correct; .*bus bandwidth [0-9.]+ GB/s.*, not judged: the GPUs span CPU sockets "
                       r"\(SYS\).* \(report: (\S+/train/preflight\.txt)\)$", r.stderr, re.M)
    check(bool(passed) and read(passed.group(1)).startswith("flowrun doctor: host-a, 2 GPUs"),
            "preflight: the verdict in one line, the whole report kept in the step's directory", r.stderr)


# preflight: true on a two-node step (engine: manual, both agents on this host): the head hands node 0's
# NCCL id to node 1, both check children join one communicator of 4 ranks on the stand-in libraries.
PREFLIGHT_SPEC = ("cluster:\n  engine: manual\n  address: 127.0.0.1\n  heartbeat_timeout: 2\n"
                  "steps:\n  - name: train\n    run: [/bin/sh, -c, 'touch ran.$RANK']\n"
                  "    parallel: {gpus: 4, nodes: 2, preflight: true}\n")


@pytest.fixture
def two_nodes(doctor, flowrun, scratch, base, check):
    def two_nodes(name, node1_env, node0_env=None, during=None, head_args=()):
        """Runs the step with agents whose environments add node0_env and node1_env; returns (rc, head's
        stderr, workdir, [agent stderr])."""
        d = os.path.join(scratch, name)
        os.makedirs(d)
        with open(os.path.join(d, "spec.yaml"), "w") as f:
            f.write(PREFLIGHT_SPEC)
        # Each stand-in GPU has 1032 MiB free unless a test says otherwise: sizes up to 4 MiB fit.
        env = clean_env(**{**base, "CUDA_VISIBLE_DEVICES": "0,1", "FAKE_CUDA_DEVICES": "2", "TMPDIR": d,
                           "FAKE_CUDA_FREE_MIB": "1032"})
        err_path = os.path.join(d, "head.err")
        with open(err_path, "w") as err:
            head = subprocess.Popen([flowrun, "spec.yaml", "--grace", "2", *head_args], cwd=d, env=env,
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                    start_new_session=True)
        agents = []
        try:
            deadline = time.monotonic() + 30
            while not AGENT_COMMAND.search(read(err_path)) and head.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            m = AGENT_COMMAND.search(read(err_path))
            if not check(m is not None, f"{name}: the head prints the agent command", read(err_path)):
                return None, read(err_path), d, []
            argv = shlex.split(m.group(1))
            for i, extra in enumerate((node0_env or {}, node1_env)):
                agent_env = {**env, **extra}
                agent_env.pop("FLOWRUN_HOSTNAME", None)
                with open(os.path.join(d, f"agent{i}.err"), "w") as err:
                    agents.append(subprocess.Popen([*argv, "--node-rank", str(i)], cwd=d, env=agent_env,
                                                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                                   start_new_session=True))
            if during:
                during(d, head, agents)
            rc = head.wait(timeout=120)
            for a in agents:
                a.wait(timeout=30)
            return rc, read(err_path), d, [read(os.path.join(d, f"agent{i}.err")) for i in range(len(agents))]
        finally:
            for p in [head, *agents]:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()

    return two_nodes


def ran(d):
    return sorted(n for n in os.listdir(d) if n.startswith("ran."))


def test_preflight_across_nodes(two_nodes, check, scratch):
    # Node 0's GPUs fit 8 MiB, node 1's 4 MiB: every node runs the sizes that fit on all (1 MiB and 4 MiB).
    rc, err, d, agent_err = two_nodes("across", {}, {"FAKE_CUDA_FREE_MIB": "1040"})
    check(rc == 0 and ran(d) == ["ran.0", "ran.1", "ran.2", "ran.3"], "across nodes: the check passes, then the "
            "ranks run", err)
    check(f"flowrun: step 'train': preflight: checking NCCL across 2 nodes, 4 GPUs ({HOST} GPUs 0,1; {HOST} GPUs "
            "0,1)\n" in err, "across nodes: the head says what it checks", err)
    passed = re.search(r"^flowrun: step 'train': preflight passed: 2 sizes from 1 MiB to 4 MiB on 4 GPUs across 2 "
                       r"nodes, every sum correct; sizes above 8 MiB left out: GPU 0 has 1040 MiB free; sizes above 4 "
                       r"MiB left out: another node's GPUs have less free memory; sizes above 4 MiB left out: GPU 0 "
                       r"has 1032 MiB free \(report: (\S+/train/preflight\.txt)\)$", err, re.M)
    check(bool(passed), "across nodes: one communicator of 4 ranks, every sum exact, the sizes every node could run",
            err)
    report = read(passed.group(1)) if passed else ""
    check(report.startswith(f"flowrun doctor: 2 nodes, 4 GPUs ({HOST}: 2, {HOST}: 2)\n\nNCCL all-reduce across 2 "
                              "nodes: 4 GPUs, float sum, out of place, 2 warmup + 5 timed iterations each; each time is "
                              "the slowest node's\n") and report.endswith("\nVerdict: healthy.\n"),
            "across nodes: the whole report is kept in the step's directory", report)
    check(agent_err == ["", ""], "across nodes: the agents say nothing", "\n".join(agent_err))
    check(not [n for n in os.listdir(d) if n.startswith("fake-nccl-") and os.listdir(os.path.join(d, n))],
            "across nodes: the stand-in NCCL's exchange files are gone", str(os.listdir(d)))


def test_preflight_across_nodes_wrong_sum(two_nodes, check, scratch):
    # A wrong sum at rank 0 (node 0): refused with the report across nodes, no rank runs.
    rc, err, d, _ = two_nodes("wrong", {"FAKE_NCCL": "wrong"}, {"FAKE_NCCL": "wrong"})
    check(rc == 1 and ran(d) == [], "across nodes: a wrong sum refuses the step before any rank runs", err)
    check("\n  FAIL  all-reduce  wrong sums at 1 MiB (1 elements), 4 MiB (1 elements); sizes above 4 MiB left out: GPU 0 "
            "has 1032 MiB free\n" in err and
            "flowrun:   the preflight check of its GPUs across the nodes failed (the report above); fix what it "
            "names, or set preflight: false\n" in err, "across nodes: the report says which sizes were wrong", err)


def test_preflight_across_nodes_no_nccl(two_nodes, check, scratch):
    # Node 1 has no NCCL: its check fails at once; node 0's, waiting for node 1 in ncclCommInitRank, is stopped.
    start = time.monotonic()
    rc, err, d, _ = two_nodes("no-nccl", {"FLOWRUN_NCCL_LIBRARY": "/nonexistent/libnccl.so.2"})
    took = time.monotonic() - start
    check(rc == 1 and ran(d) == [], "across nodes: a node without NCCL refuses the step", err)
    check(f"\n  FAIL  node 1      {HOST}: nccl: NCCL not found: /nonexistent/libnccl.so.2: cannot open shared object "
            "file: No such file or directory (tried /nonexistent/libnccl.so.2)\n" in err,
            "across nodes: the report names the node and what it lacks", err)
    check(f"\n  FAIL  all-reduce  not run across the 2 nodes: on {HOST}: NCCL was not found\n" in err,
            "across nodes: the all-reduce did not run", err)
    check(took < 30, f"across nodes: node 0's waiting check was stopped, not left to time out ({took:.1f} s)")
    # The head and agents have exited; their guardians may take a moment more to see it.
    gone = wait_for_empty(lambda: marked_processes(scratch), 5)
    check(gone, "across nodes: no check child is left behind", str(marked_processes(scratch)))


def test_preflight_across_nodes_simulated(two_nodes, check, scratch):
    # Simulated GPUs (passed on to every agent): nothing to check on any node, and the step runs.
    rc, err, d, _ = two_nodes("simulated", {}, head_args=("--fake-gpus", "2"))
    check(rc == 0 and ran(d) == ["ran.0", "ran.1", "ran.2", "ran.3"] and re.search(
        r"^flowrun: step 'train': preflight not run: simulated GPUs \(--fake-gpus or FLOWRUN_FAKE_GPUS\) \(report: "
        r"\S+/preflight\.txt\)$", err, re.M), "across nodes: simulated GPUs are not checked, and the step runs", err)


def test_preflight_across_nodes_agent_killed(two_nodes, check, scratch):
    # Node 1's agent is killed while its check waits in ncclCommInitRank: the node is lost, nothing is left.
    def kill_node1(d, head, agents):
        wait_until = time.monotonic() + 30
        while "preflight: checking NCCL" not in read(os.path.join(d, "head.err")) and time.monotonic() < wait_until:
            time.sleep(0.05)
        time.sleep(0.5)
        os.kill(agents[1].pid, signal.SIGKILL)

    rc, err, d, _ = two_nodes("agent-killed", {"FAKE_NCCL": "init-hang"}, during=kill_node1)
    check(rc == 1 and ran(d) == [] and re.search(f"lost: {AGENT_CLOSED}", err) is not None,
            "across nodes: an agent killed during the preflight: its node is lost and the step refused", err)
    gone = wait_for_empty(lambda: marked_processes(scratch), 5)
    check(gone, "across nodes: the killed agent's check child and node 0's are gone",
            str(marked_processes(scratch)))


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def wait_for_empty(probe, seconds):
    deadline = time.monotonic() + seconds
    while probe() and time.monotonic() < deadline:
        time.sleep(0.05)
    return not probe()


def test_a_flow_on_cpus_does_not_look_for_gpus(flowrun, doctor, base, scratch, check):
    """A run whose every step runs on CPUs does not load NVML (on a GPU host its start is the driver's, tens
    of milliseconds and more); a run with a step on GPUs does, and `flowrun plan` shows the host's GPUs
    either way. The dynamic loader's own trace (LD_DEBUG=files) says whether the library was loaded."""
    specs = {
        "cpu": "name: on-cpus\nsteps:\n  - name: work\n    run: [/bin/true]\n    parallel:\n      cpus: 2\n",
        "gpu": "name: on-gpus\nsteps:\n  - name: work\n    run: [/bin/true]\n    parallel:\n      gpus: 2\n",
    }
    env = clean_env(**base, LD_DEBUG="files")
    hosts = {}
    for kind, text in specs.items():
        spec = os.path.join(scratch, kind + ".yaml")
        with open(spec, "w") as f:
            f.write(text)
        run_dir = os.path.join(scratch, kind + "-run")
        r = run([flowrun, "--run-dir", run_dir, spec], cwd=scratch, env=env)
        check(r.returncode == 0, f"the {kind} flow runs", r.stdout + r.stderr[-3000:])
        loaded = "libnvidia-ml.so.1" in r.stderr
        check(loaded == (kind == "gpu"), f"the {kind} flow loads NVML: {kind == 'gpu'}", r.stderr[-3000:])
        with open(os.path.join(run_dir, "plan.json")) as f:
            hosts[kind] = json.load(f)["host"]
        shown = run([flowrun, "plan", spec], cwd=scratch, env=clean_env(**base))
        check("This host: host-a, 8 GPUs" in shown.stdout, f"flowrun plan of the {kind} flow shows the GPUs",
              shown.stdout + shown.stderr)
    check(hosts["cpu"] == {"hostname": "host-a", "gpus": None, "summary": "not looked for: every step runs on CPUs"},
          "plan.json of the CPU run: its GPUs not looked for", hosts)
    check(hosts["gpu"]["gpus"] == 8, "plan.json of the GPU run: the host's 8 GPUs", hosts)
