"""End-to-end tests of `flowrun run` (torchrun's command line) and `flowrun init`:
the real binary runs real worker processes; each worker writes its environment
and argv to a file, and the tests compare them with what a spec gives.

  python3 -m pytest tests/e2e/test_torchrun.py [--flowrun PATH] [--sanitized] [-k NAME]
"""
import json
import os
import re
import shutil
import signal
import subprocess
import time

import pytest

from flowrun_testlib import GAPS_RANK, clean_env
from flowrun_testlib.launcher import processes_with, wait_for
from flowrun_testlib.suite import E2E

pytestmark = pytest.mark.torchrun

# The variables of the contract (../shared/CONTRACT.md, docs/environment.md).
CONTRACT = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_NAME",
            "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
            "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_USE_AGENT_STORE",
            "TORCHELASTIC_ERROR_FILE", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "FLOWRUN_RUN_ID", "FLOWRUN_STEP",
            "FLOWRUN_NODES", "FLOWRUN_NODE_RANK", "FLOWRUN_RUN_DIR", "FLOWRUN_OUTPUT_DIR")

# A worker: writes its environment and argv to env-<RANK>.json in its
# working directory (whole or not at all: a rank stopped by its peer's failure
# may be killed at any moment); fails with code 3 on rank FAIL_RANK while
# TORCHELASTIC_RESTART_COUNT is below FAIL_UNTIL.
WORKER = r'''
import json, os, sys
rank = os.environ.get("RANK", "x")
with open(f"env-{rank}.json.tmp", "w") as f:
    json.dump({"env": {k: v for k, v in os.environ.items()}, "argv": sys.argv, "exe": sys.executable}, f)
os.replace(f"env-{rank}.json.tmp", f"env-{rank}.json")  # whole, even if a SIGTERM comes next
print(f"worker {rank} of {os.environ.get('WORLD_SIZE')} args {sys.argv[1:]}", flush=True)
if rank == os.environ.get("FAIL_RANK") and int(os.environ["TORCHELASTIC_RESTART_COUNT"]) < int(os.environ.get("FAIL_UNTIL", "99")):
    print("failing on purpose", file=sys.stderr, flush=True)
    sys.exit(3)
'''


# A torch worker: an all_reduce of RANK + 1 over gloo, printed with RANK,
# WORLD_SIZE and GROUP_RANK.
ALL_REDUCE = r'''
import os, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.tensor([float(os.environ["RANK"]) + 1])
dist.all_reduce(t)
print(f"rank {os.environ['RANK']} world {os.environ['WORLD_SIZE']} group {os.environ['GROUP_RANK']} "
      f"sum {int(t.item())}", flush=True)
dist.destroy_process_group()
'''


def case(argv, *expected, env=None):
    """A case of a table of command lines, as pytest.param(argv, *expected, env): its id is the
    command line as typed, the variables first."""
    env = env or {}
    return pytest.param(argv, *expected, env, id=" ".join([f"{k}={v}" for k, v in env.items()] + argv))


class TestTorchrun(E2E):
    def set_up(self):
        self.binary = self.flowrun
        # A python3 that is /usr/bin/python3, first on PATH.
        self.seen_env = {}  # rank 0's whole environment, as envs() last read it
        self.bin = os.path.join(self.scratch, "bin")
        os.makedirs(self.bin)
        os.symlink("/usr/bin/python3", os.path.join(self.bin, "python3"))

    def workdir(self, name):
        d = os.path.join(self.scratch, name)
        os.makedirs(d)
        with open(os.path.join(d, "train.py"), "w") as f:
            f.write(WORKER)
        return d

    def env(self, **extra):
        env = clean_env(**extra)
        env["PATH"] = self.bin + ":" + env.get("PATH", "/usr/bin:/bin")
        return env

    def run_flowrun(self, cwd, *argv, env=None, timeout=120):
        p = subprocess.run([self.binary, *argv], cwd=cwd, env=env or self.env(), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=timeout)
        return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")

    def envs(self, d):
        """Per rank: the contract's variables, with the run id, port and paths made comparable."""
        out = {}
        for name in sorted(os.listdir(d)):
            if not re.fullmatch(r"env-\d+\.json", name):
                continue
            with open(os.path.join(d, name)) as f:
                data = json.load(f)
            env = data["env"]
            run_id = env.get("TORCHELASTIC_RUN_ID", "")
            seen = {}
            for k in CONTRACT:
                v = env.get(k)
                if v is not None and run_id:
                    v = v.replace(run_id, "<run-id>")
                if k == "MASTER_PORT":
                    v = "<port>" if v and v.isdigit() else v
                seen[k] = v
            out[int(env["RANK"])] = {"env": seen, "argv": data["argv"][1:], "exe": data["exe"]}
            if env["RANK"] == "0":
                self.seen_env = env
            os.unlink(os.path.join(d, name))
        return out

    def clear_runs(self, d):
        shutil.rmtree(os.path.join(d, ".flowrun"), ignore_errors=True)

    # --- tests --------------------------------------------------------------

    def test_same_contract_as_spec(self):
        """--nproc-per-node 4, --nproc_per_node 4 and --nproc_per_node=4 give the environment of a 4-worker spec."""
        d = self.workdir("contract")
        with open(os.path.join(d, "train.yaml"), "w") as f:
            f.write("steps:\n  - name: train\n    run: python3 train.py --lr 0.1\n    parallel:\n      cpus: 4\n")
        rc, out, err = self.run_flowrun(d, "train.yaml")
        self.check(rc == 0, "spec: exit 0", err)
        want = self.envs(d)
        self.check(sorted(want) == [0, 1, 2, 3], "spec: 4 ranks", str(sorted(want)))
        self.check(want.get(0, {}).get("env", {}).get("WORLD_SIZE") == "4", "spec: WORLD_SIZE=4")
        for spelling in (["--nproc-per-node", "4"], ["--nproc_per_node", "4"], ["--nproc_per_node=4"],
                         ["--nproc-per-node=4"]):
            label = " ".join(spelling)
            rc, out, err = self.run_flowrun(d, "run", *spelling, "train.py", "--lr", "0.1")
            self.check(rc == 0, f"{label}: exit 0", err)
            got = self.envs(d)
            self.check(got == want, f"{label}: every rank's contract and argv equal the spec's",
                       json.dumps({"want": want, "got": got}, indent=1)[:3000])
        # With GPUs: the default is one worker per GPU, as `parallel: {}`.
        with open(os.path.join(d, "gpu.yaml"), "w") as f:
            f.write("steps:\n  - name: train\n    run: python3 train.py\n    parallel: {}\n")
        rc, out, err = self.run_flowrun(d, "gpu.yaml", "--fake-gpus", "4")
        want = self.envs(d)
        self.check(rc == 0 and sorted(want) == [0, 1, 2, 3], "gpu spec: 4 ranks", err)
        rc, out, err = self.run_flowrun(d, "run", "--fake-gpus", "4", "train.py")
        got = self.envs(d)
        self.check(rc == 0 and got == want, "run --fake-gpus 4: the spec's contract, CUDA_VISIBLE_DEVICES included",
                   json.dumps({"want": want, "got": got}, indent=1)[:3000])

    @pytest.mark.parametrize("options, workers, spec_line, env", [
        case(["--nproc-per-node", "2"], 2, "procs_per_node: 2"),
        case(["--nproc-per-node", "3"], 3, "gpus: 3"),
        case(["--nproc-per-node", "gpu"], 8, "parallel: {}"),
        case(["--nproc-per-node", "auto"], 8, "parallel: {}"),
    ])
    def test_gpu_shapes(self, options, workers, spec_line, env):
        """--nproc-per-node against 8 simulated GPUs: dividing counts share GPUs, others take the first N."""
        d = self.workdir("shapes")
        rc, out, err = self.run_flowrun(d, "run", "--fake-gpus", "8", "--dry-run", *options, "train.py",
                                        env=self.env(**env))
        label = " ".join(options)
        self.check(rc == 0, f"{label}: dry run exits 0", err)
        self.check(spec_line in out, f"{label}: the spec says {spec_line}", out)
        self.check(f"WORLD_SIZE={workers}." in out, f"{label}: WORLD_SIZE={workers}", out)
        self.check(not os.path.exists(os.path.join(d, "env-0.json")), "--dry-run runs nothing")

    def test_gpu_values(self):
        """--nproc-per-node's values against 8 simulated GPUs, and none."""
        d = self.workdir("shapes")
        # `--opt=` is an empty value, as argparse reads it; never the next word.
        rc, out, err = self.run_flowrun(d, "run", "--fake-gpus", "8", "--dry-run", "--rdzv_conf=", "--log-dir=",
                                        "--nproc-per-node=2", "train.py")
        self.check(rc == 0 and "train.py" in out and "WORLD_SIZE=2." in out,
                   "--rdzv_conf= --log-dir=: empty values; the script and --nproc-per-node stay theirs", out + err)
        rc, out, err = self.run_flowrun(d, "run", "--fake-gpus", "8", "--nproc-per-node", "9", "train.py")
        self.check(rc == 2, "9 workers on 8 GPUs: exit 2", err)
        self.check("flowrun: error: --nproc-per-node 9: this host has 8 GPUs; ask for at most 8, or use --cpus 9 "
                   "for CPU workers" in err, "9 workers on 8 GPUs: says what to do", err)
        rc, out, err = self.run_flowrun(d, "run", "--fake-gpus", "0", "--nproc-per-node", "gpu", "train.py")
        self.check(rc == 2 and "--nproc-per-node gpu: this host has no GPUs" in err, "gpu without GPUs: refused",
                   err)

    def test_module_program_and_spec(self):
        """-m MODULE, --no-python PROGRAM, -- PROGRAM and a spec path."""
        d = self.workdir("forms")
        os.makedirs(os.path.join(d, "pkg"))
        with open(os.path.join(d, "pkg", "__init__.py"), "w"):
            pass
        shutil.copy(os.path.join(d, "train.py"), os.path.join(d, "pkg", "trainer.py"))
        rc, out, err = self.run_flowrun(d, "run", "--nproc_per_node", "2", "-m", "pkg.trainer", "a", "-m", "b")
        got = self.envs(d)
        self.check(rc == 0 and sorted(got) == [0, 1], "-m: 2 ranks ran", err)
        self.check(got.get(1, {}).get("argv") == ["a", "-m", "b"], "-m: the module's arguments, -m included",
                   str(got.get(1)))
        self.check(got.get(1, {}).get("env", {}).get("FLOWRUN_STEP") == "trainer", "-m: the step is named trainer",
                   str(got.get(1)))
        for form in (["--no-python", "/usr/bin/python3"], ["--", "/usr/bin/python3"]):
            rc, out, err = self.run_flowrun(d, "run", "--nproc-per-node", "2", *form, "train.py", "x")
            got = self.envs(d)
            self.check(rc == 0 and got.get(0, {}).get("argv") == ["x"], f"{form[0]}: runs the program as given",
                       err + str(got))
            self.check(got.get(0, {}).get("env", {}).get("FLOWRUN_STEP") == "python3",
                       f"{form[0]}: the step is named after the program", str(got.get(0)))
        with open(os.path.join(d, "flow.yaml"), "w") as f:
            f.write("steps:\n  - name: train\n    run: python3 train.py ${args}\n    parallel: {cpus: 2}\n")
        rc, out, err = self.run_flowrun(d, "run", "flow.yaml", "--", "p", "q")
        got = self.envs(d)
        self.check(rc == 0 and got.get(1, {}).get("argv") == ["p", "q"], "a spec: runs it, -- ARGS fill ${args}",
                   err + str(got))

    def python_wrapper(self, name):
        """A directory NAME in the scratch space holding `python3`, a wrapper of /usr/bin/python3 that sets
        WRAPPED=1 in the environment it runs in (so a worker tells which python3 started it)."""
        other = os.path.join(self.scratch, name)
        os.makedirs(other)
        wrapper = os.path.join(other, "python3")
        with open(wrapper, "w") as f:
            f.write("#!/bin/sh\nWRAPPED=1 exec /usr/bin/python3 \"$@\"\n")
        os.chmod(wrapper, 0o755)
        return other

    def test_python_choice(self):
        """The python3 first on PATH, or --python."""
        d = self.workdir("python")
        rc, out, err = self.run_flowrun(d, "run", "--nproc-per-node", "1", "train.py")
        got = self.envs(d)
        self.check(rc == 0 and got.get(0, {}).get("exe") in (os.path.join(self.bin, "python3"), "/usr/bin/python3"),
                   "the python3 first on PATH", err + str(got.get(0, {}).get("exe")))
        # A PATH whose python3 is a wrapper that marks the environment.
        other = self.python_wrapper("otherbin")
        wrapper = os.path.join(other, "python3")
        env = self.env()
        env["PATH"] = other + ":" + env["PATH"]
        rc, out, err = self.run_flowrun(d, "run", "--nproc-per-node", "1", "train.py", env=env)
        with open(os.path.join(d, "env-0.json")) as f:
            seen = json.load(f)["env"]
        self.envs(d)
        self.check(rc == 0 and seen.get("WRAPPED") == "1", "a different python3 first on PATH is used", err)
        rc, out, err = self.run_flowrun(d, "run", "--python", wrapper, "--nproc-per-node", "1", "train.py")
        with open(os.path.join(d, "env-0.json")) as f:
            seen = json.load(f)["env"]
        self.envs(d)
        self.check(rc == 0 and seen.get("WRAPPED") == "1", "--python PY is used", err)

    def test_failure_and_restarts(self):
        """A failing worker: its exit code and the report; --max-restarts restarts every worker."""
        d = self.workdir("fail")
        rc, out, err = self.run_flowrun(d, "run", "--nproc-per-node", "2", "--grace", "1", "train.py",
                                    env=self.env(FAIL_RANK="1"))
        self.envs(d)
        self.check(rc == 3, "a worker exiting 3: flowrun exits 3", f"rc={rc}\n{err}")
        self.check("rank 1 exited with code 3" in err, "the report names rank 1 and its code", err)
        self.check("failing on purpose" in err, "the report shows the culprit's stderr", err)
        rc, out, err = self.run_flowrun(d, "run", "--nproc-per-node", "2", "--max_restarts=1", "train.py",
                                    env=self.env(FAIL_RANK="1", FAIL_UNTIL="1"))
        got = self.envs(d)
        self.check(rc == 0, "--max_restarts=1: succeeds on the second attempt", err)
        self.check(got.get(0, {}).get("env", {}).get("TORCHELASTIC_RESTART_COUNT") == "1" and
                   got.get(0, {}).get("env", {}).get("TORCHELASTIC_MAX_RESTARTS") == "1",
                   "--max_restarts=1: TORCHELASTIC_RESTART_COUNT=1 and TORCHELASTIC_MAX_RESTARTS=1",
                   str(got.get(0)))

    def test_logs_and_console(self):
        """--log-dir, --redirects, --local-ranks-filter (local ranks), --tee."""
        d = self.workdir("logs")
        rc, out, err = self.run_flowrun(d, "run", "--nproc-per-node", "2", "--log-dir", "mylogs", "--tee", "3",
                                    "train.py")
        self.envs(d)
        self.check(rc == 0, "--log-dir: exit 0", err)
        runs = os.listdir(os.path.join(d, "mylogs")) if os.path.isdir(os.path.join(d, "mylogs")) else []
        self.check(len(runs) == 1 and os.path.isfile(os.path.join(d, "mylogs", runs[0], "train", "results.json")),
                   "--log-dir: the run directory is under it", str(runs))
        self.check("--tee" not in err, "--tee: no note, it has its effect", err)
        self.check("[train r0] worker 0 of 2" in out and "[train r1] worker 1 of 2" in out,
                   "without --redirects every rank is on the console", out)
        rc, out, err = self.run_flowrun(d, "run", "--nproc-per-node", "2", "--redirects", "3", "train.py")
        self.envs(d)
        self.check(rc == 0 and "worker" not in out, "--redirects 3: no worker output on the console", out)
        logs = []
        for root, _, files in os.walk(os.path.join(d, ".flowrun")):
            logs += [os.path.join(root, f) for f in files if f.endswith("stdout.log")]
        texts = "".join(open(p).read() for p in logs)
        self.check("worker 0 of 2" in texts and "worker 1 of 2" in texts, "--redirects 3: the log files have it",
                   str(logs))
        rc, out, err = self.run_flowrun(d, "run", "--nproc-per-node", "2", "--local-ranks-filter", "1", "train.py")
        self.envs(d)
        self.check(rc == 0 and "worker 1 of 2" in out and "worker 0 of 2" not in out,
                   "--local-ranks-filter 1: only rank 1 on the console", out)

    BOTH = ("import os, sys\nr = os.environ['RANK']\nprint(f'out-{r}', flush=True)\n"
            "print(f'err-{r}', file=sys.stderr, flush=True)\n")

    def streams_workdir(self):
        d = self.workdir("streams")
        with open(os.path.join(d, "both.py"), "w") as f:
            f.write(self.BOTH)
        return d

    @pytest.mark.parametrize("options, want, env", [  # the lines the console shows (its stdout and stderr)
        case(["--log-dir", "logs", "--redirects", "3", "--tee", "3"], {"out-0", "err-0", "out-1", "err-1"}),
        case(["--redirects", "0:1,1:2"], {"err-0", "out-1"}),
        case(["--redirects", "3", "--tee", "0:2,1:1"], {"err-0", "out-1"}),
        case(["--redirects", "1", "--tee", "2", "--local-ranks-filter", "1"], {"err-1"}),
    ])
    def test_redirects_and_tee(self, options, want, env):
        """torchrun's --redirects and --tee per stream and per local rank: a redirected stream is off the console,
        a teed one on it (tee wins when both name it), every rank's log files have both streams."""
        d = self.streams_workdir()
        label = " ".join(options)
        rc, out, err = self.run_flowrun(d, "run", "--nproc-per-node", "2", *options, "both.py", env=self.env(**env))
        shown = set(re.findall(r"^\[both r\d\] ((?:out|err)-\d)$", out + err, re.M))
        self.check(rc == 0 and shown == want, f"{label}: the console shows {sorted(want)}",
                   f"rc={rc} shown={sorted(shown)}\n{out}{err}")
        if "out-0" in want:
            self.check(re.search(r"^\[both r0\] out-0$", out, re.M) is not None,
                       f"{label}: a rank's stdout stays on flowrun's stdout", out)
        root = os.path.join(d, "logs") if "--log-dir" in options else os.path.join(d, ".flowrun", "runs")
        files = {}
        for where, _, names in os.walk(root):
            for name in names:
                if name in ("stdout.log", "stderr.log"):
                    files[os.path.join(os.path.basename(where), name)] = open(os.path.join(where, name)).read()
        self.check(files == {"rank0/stdout.log": "out-0\n", "rank0/stderr.log": "err-0\n",
                             "rank1/stdout.log": "out-1\n", "rank1/stderr.log": "err-1\n"},
                   f"{label}: every rank's log files have both its streams", str(files))

    def test_stream_options_refused_or_without_effect(self):
        d = self.streams_workdir()
        rc, out, err = self.run_flowrun(d, "run", "--duplicate-stdout-filters", "out,err", "both.py")
        self.check(rc == 0 and "flowrun run: --duplicate-stdout-filters has no effect: every rank's stdout is whole "
                   "in its own log file; grep them (grep -h WORD RUN_DIR/STEP/rank*/stdout.log)" in err,
                   "--duplicate-stdout-filters: accepted, with what to do instead", err)
        rc, out, err = self.run_flowrun(d, "run", "--redirects", "0:4", "both.py")
        self.check(rc == 2 and "flowrun: error: --redirects 0:4: expected 0, 1, 2 or 3" in err,
                   "--redirects 0:4: refused, saying what is expected", err)

    def test_virtual_local_rank(self):
        """--virtual-local-rank: every worker sees its own GPU alone, with LOCAL_RANK=0; the rest is the contract."""
        d = self.workdir("virtual")
        rc, out, err = self.run_flowrun(d, "run", "--fake-gpus", "2", "--virtual-local-rank", "train.py")
        got = self.envs(d)
        seen = {r: (e["env"]["LOCAL_RANK"], e["env"]["CUDA_VISIBLE_DEVICES"], e["env"]["LOCAL_WORLD_SIZE"])
                for r, e in got.items()}
        self.check(rc == 0 and seen == {0: ("0", "0", "2"), 1: ("0", "1", "2")},
                   "LOCAL_RANK=0 and CUDA_VISIBLE_DEVICES its own GPU; LOCAL_WORLD_SIZE stays 2", f"{seen}\n{err}")
        rc, out, err = self.run_flowrun(d, "run", "--nnodes", "2", "--node-rank", "1", "--rdzv-endpoint",
                                        "localhost:1", "--virtual-local-rank", "train.py")
        self.check(rc == 2 and "flowrun: error: --virtual-local-rank is not supported with --nnodes above 1 yet" in err,
                   "--virtual-local-rank across nodes: refused before joining", err)
        rc, out, err = self.run_flowrun(d, "init", "--virtual-local-rank", "train.py")
        self.check(rc == 0 and "--virtual-local-rank is not written to the spec (a spec has no key for it); give it "
                   "to flowrun run" in err, "init --virtual-local-rank: says it is not in the spec", err)

    def test_numa_binding(self):
        """--numa-binding node: each worker runs on the CPUs of its GPU's NUMA node, learned from sysfs (a fake one,
        FLOWRUN_FAKE_SYSFS, with the simulated GPUs on two nodes)."""
        allowed = sorted(os.sched_getaffinity(0))
        if len(allowed) < 2:
            pytest.skip("two NUMA nodes are simulated over this process's CPUs; it may use only one")
        d = self.workdir("numa")
        sysfs = os.path.join(self.scratch, "sys")
        nodes = [allowed[:len(allowed) // 2], allowed[len(allowed) // 2:]]
        for gpu, bus in enumerate(("18", "28")):  # the fake GPUs' PCI ids, 00000000:18:00.0 and :28:
            os.makedirs(os.path.join(sysfs, "bus", "pci", "devices", f"0000:{bus}:00.0"))
            with open(os.path.join(sysfs, "bus", "pci", "devices", f"0000:{bus}:00.0", "numa_node"), "w") as f:
                f.write(f"{gpu}\n")
            os.makedirs(os.path.join(sysfs, "devices", "system", "node", f"node{gpu}"))
            with open(os.path.join(sysfs, "devices", "system", "node", f"node{gpu}", "cpulist"), "w") as f:
                f.write(",".join(map(str, nodes[gpu])) + "\n")
        with open(os.path.join(d, "cpus.py"), "w") as f:
            f.write("import os\nprint('cpus', os.environ['RANK'], *sorted(os.sched_getaffinity(0)), flush=True)\n")
        rc, out, err = self.run_flowrun(d, "run", "--fake-gpus", "2", "--numa-binding", "node", "cpus.py",
                                        env=self.env(FLOWRUN_FAKE_SYSFS=sysfs))
        seen = {int(m[0]): list(map(int, m[1].split())) for m in re.findall(r"\] cpus (\d) ([\d ]+)$", out, re.M)}
        self.check(rc == 0 and seen == {0: nodes[0], 1: nodes[1]}, "each worker on its GPU's NUMA node's CPUs",
                   f"want {nodes} seen {seen}\n{out}{err}")
        self.check("flowrun run: --numa-binding node: local rank 1: GPU 1 on NUMA node 1: CPUs" in err,
                   "the console says where each worker is bound", err)
        # exclusive: both GPUs on node 0, whose cores (one thread each here) they split in halves.
        for gpu, bus in enumerate(("18", "28")):
            with open(os.path.join(sysfs, "bus", "pci", "devices", f"0000:{bus}:00.0", "numa_node"), "w") as f:
                f.write("0\n")
        with open(os.path.join(sysfs, "devices", "system", "node", "node0", "cpulist"), "w") as f:
            f.write(",".join(map(str, allowed)) + "\n")
        for cpu in allowed:
            os.makedirs(os.path.join(sysfs, "devices", "system", "cpu", f"cpu{cpu}", "topology"))
            with open(os.path.join(sysfs, "devices", "system", "cpu", f"cpu{cpu}", "topology",
                                   "thread_siblings_list"), "w") as f:
                f.write(f"{cpu}\n")
        rc, out, err = self.run_flowrun(d, "run", "--fake-gpus", "2", "--numa-binding", "exclusive", "cpus.py",
                                        env=self.env(FLOWRUN_FAKE_SYSFS=sysfs))
        seen = {int(m[0]): list(map(int, m[1].split())) for m in re.findall(r"\] cpus (\d) ([\d ]+)$", out, re.M)}
        half = (len(allowed) + 1) // 2  # the lower GPU gets the odd core
        self.check(rc == 0 and seen == {0: allowed[:half], 1: allowed[half:]},
                   "--numa-binding exclusive: the node's cores split between its two GPUs", f"seen {seen}\n{out}{err}")
        empty = os.path.join(self.scratch, "nosys")  # not /sys, where a real device may have that PCI id
        os.makedirs(empty)
        rc, out, err = self.run_flowrun(d, "run", "--fake-gpus", "2", "--numa-binding", "node", "cpus.py",
                                        env=self.env(FLOWRUN_FAKE_SYSFS=empty))
        self.check(rc == 2 and "flowrun: error: --numa-binding node: GPU 0 (00000000:18:00.0): cannot read "
                   f"{empty}/bus/pci/devices/0000:18:00.0/numa_node (the GPU's NUMA node)" in err,
                   "a GPU without a NUMA node in sysfs: refused, naming the file", err)
        rc, out, err = self.run_flowrun(d, "run", "--fake-gpus", "2", "--numa-binding", "core-complex", "cpus.py")
        self.check(rc == 2 and "flowrun: error: --numa-binding core-complex: flowrun does not read the CPUs' cache "
                   "topology" in err, "--numa-binding core-complex: refused, saying why", err)

    @pytest.mark.parametrize("argv, expected, env", [
        # --nproc-per-nod is a prefix, as argparse reads it (test_prefixes_and_environment); a typo is not.
        case(["run", "--nproc-per-mode", "2", "train.py"],
             "flowrun: error: unknown option '--nproc-per-mode'; did you mean --nproc-per-node?"),
        case(["run", "--nnodes", "4:1", "train.py"],
             "flowrun: error: --nnodes 4:1: the minimum is above the maximum; write --nnodes 1:4"),
        case(["run", "--nnodes", "1:4", "train.py"], "flowrun: error: --nnodes 4 needs a way to reach the other nodes"),
        case(["run", "--nnodes", "2", "train.py"], "flowrun: error: --nnodes 2 needs a way to reach the other nodes"),
        case(["run", "--rdzv-backend", "etcd", "train.py"], "flowrun: error: --rdzv-backend etcd:"),
        case(["run", "--signals-to-handle", "SIGTERM,SIGKILL", "train.py"],
             "flowrun: error: --signals-to-handle SIGTERM,SIGKILL: 'SIGKILL': flowrun handles SIGTERM, SIGINT, "
             "SIGHUP and SIGQUIT (stop signals) and forwards SIGUSR1 and SIGUSR2"),
        case(["run", "--nproc-per-node"], "flowrun: error: --nproc-per-node needs a value (N|auto|gpu|cpu)"),
        case(["run", "--nproc-per-node", "2"], "flowrun: error: nothing to run"),
        case(["run", "--standalone", "--nnodes", "2", "train.py"], "flowrun: error: --standalone runs on one node"),
        case(["init", "--dry-run", "train.py"], "flowrun: error: unknown option '--dry-run'"),
        case(["run", "--timeout", "soon", "train.py"],
             "flowrun: error: --timeout: expected a positive duration: seconds (90) or a string like '90s'"),
        case(["run", "--stall-timeout", "-5", "train.py"], "flowrun: error: --stall-timeout: expected a positive"),
        # A spec shapes its own step: options that would are refused, not ignored.
        case(["run", "--nproc-per-node", "4", "--max-restarts", "1", "--timeout", "1h", "flow.yaml"],
             "flowrun: error: flow.yaml is a spec, and a spec shapes its own steps:\n"
             "  --nproc-per-node: write it in the step's parallel: (gpus:, cpus:)\n"
             "  --max-restarts: write it in the step's parallel: (max_restarts:)\n"
             "  --timeout: write it in the step's timeout:\n"),
        case(["run", "--rdzv-endpoint", "h:1", "flow.yaml"],
             "  --rdzv-endpoint: write it in the spec's cluster: (docs/multinode.md)\n"),
        case(["run", "--rdzv-conf", "join_timeout=5", "flow.yaml"],
             "  --rdzv-conf: write it in the spec's cluster: (join_timeout:, docs/multinode.md)\n"),
    ])
    def test_errors(self, argv, expected, env):
        """Bad command lines: exit 2 with what to do."""
        d = self.workdir("errors")
        with open(os.path.join(d, "flow.yaml"), "w") as f:
            f.write("steps:\n  - name: train\n    run: python3 train.py\n    parallel: {cpus: 2}\n")
        rc, out, err = self.run_flowrun(d, *argv, env=self.env(**env))
        self.check(rc == 2, f"{' '.join(argv)}: exit 2", f"rc={rc}\n{err}")
        self.check(expected in err, f"{' '.join(argv)}: says {expected!r}", err)
        self.check(not os.path.exists(os.path.join(d, ".flowrun")), "nothing ran for a bad command line")

    def test_run_help(self):
        d = self.workdir("errors")
        rc, out, err = self.run_flowrun(d, "run", "--help")
        self.check(rc == 0 and "--nproc-per-node N|auto|gpu|cpu" in out and "--rdzv-endpoint" in out,
                   "--help lists torchrun's options", out)

    def test_signals_to_handle(self):
        """--signals-to-handle SIGTERM,SIGINT: flowrun ignores SIGHUP (as nohup) and the step goes on."""
        d = self.workdir("signals")
        script = 'echo "rank $RANK up"; touch ready; while [ ! -e go ]; do sleep 0.05; done'
        p = subprocess.Popen([self.binary, "run", "--signals-to-handle", "SIGTERM,SIGINT", "--cpus", "1",
                              "--no-python", "sh", "-c", script], cwd=d, env=self.env(), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, start_new_session=True)
        deadline = time.monotonic() + 60
        while not os.path.exists(os.path.join(d, "ready")) and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(p.pid, signal.SIGHUP)  # ignored: the kernel drops it before kill() returns
        open(os.path.join(d, "go"), "w").close()
        out, err = p.communicate(timeout=60)
        self.check(p.returncode == 0, "--signals-to-handle SIGTERM,SIGINT: SIGHUP is ignored, the step succeeds",
                   f"rc={p.returncode}\n{err.decode(errors='replace')}")

    def test_timeouts(self):
        """--timeout and --stall-timeout become the step's timeout and stall_timeout."""
        d = self.workdir("timeouts")
        start = time.monotonic()
        rc, out, err = self.run_flowrun(d, "run", "--cpus", "2", "--stall-timeout", "1s", "--grace", "1", "--no-python",
                                    "sh", "-c", 'echo "rank $RANK up"; exec sleep 60')
        took = time.monotonic() - start
        res = self.results(d, "sh")
        self.check(rc == 124 and res.get("outcome") == "stalled" and res.get("stall_timeout_ms") == 1000,
                   "--stall-timeout 1s: silent ranks end the step, exit 124, results.json says stalled",
                   f"rc={rc}\n{err}\n{res}")
        # Both ranks go silent after one line, but a rank that started a little later (a loaded machine, TSan)
        # has not yet been silent for the whole second when the first one trips: the report names the ranks
        # that have, which is rank 0, rank 1 or both, together or each with its own silence. Every rank is
        # stopped either way.
        silence = r"wrote nothing for [0-9.]+ s"
        named = re.search(rf"^flowrun: step 'sh' stalled: (rank [01] {silence}|ranks 0, 1 {silence}|rank 0 {silence}, "
                          r"rank 1 for [0-9.]+ s) \(stall_timeout: 1s\); flowrun stopped ranks 0, 1$",
                          err, re.M)
        self.check(named is not None and took < 20,
                   "--stall-timeout: the report names the silent ranks and stops both, well before the workers' 60 s",
                   f"{took:.1f} s\n{err}")
        self.clear_runs(d)
        rc, out, err = self.run_flowrun(d, "run", "--cpus", "2", "--timeout=1", "--grace", "1", "--no-python",
                                    "sh", "-c", 'while :; do echo tick; sleep 0.2; done')
        res = self.results(d, "sh")
        self.check(rc == 124 and res.get("outcome") == "timed_out" and res.get("timeout_ms") == 1000,
                   "--timeout=1: a step that runs on is stopped, exit 124, results.json says timed_out",
                   f"rc={rc}\n{err}\n{res}")
        self.clear_runs(d)
        rc, out, err = self.run_flowrun(d, "run", "--cpus", "2", "--timeout", "1h", "--stall-timeout", "30m", "train.py")
        self.envs(d)
        self.check(rc == 0, "--timeout 1h --stall-timeout 30m: a step that ends in time succeeds", err)
        rc, out, err = self.run_flowrun(d, "init", "--timeout", "2h", "--stall_timeout=10m", "train.py")
        text = open(os.path.join(d, "train.yaml")).read() if rc == 0 else ""
        self.check('    timeout: "2h"\n    stall_timeout: "10m"\n' in text,
                   "init --timeout --stall_timeout: the spec has the step's timeout and stall_timeout", err + text)

    def test_unbuffered(self):
        """Python workers write unbuffered, as under torchrun's python -u; the caller's PYTHONUNBUFFERED wins."""
        d = self.workdir("unbuffered")
        with open(os.path.join(d, "gaps.py"), "w") as f:
            f.write(GAPS_RANK)
        slack = 3 if self.sanitized else 1
        stall = 2 * slack
        lines = int(1.6 * stall / 0.2)
        rc, out, err = self.run_flowrun(d, "run", "--cpus", "1", "--stall-timeout", f"{stall}s", "gaps.py", str(lines),
                                    "0.2")
        res = self.results(d, "gaps")
        self.check(rc == 0 and res.get("outcome") == "succeeded",
                   f"a print() every 0.2 s for {lines * 0.2:.1f} s under --stall-timeout {stall}s: each line "
                   "arrives as printed, the step succeeds", f"rc={rc}\n{err}\n{res}")
        self.check("".join(f"[gaps r0] line {i}\n" for i in range(lines)) in out,
                   "every line is on the console, in order", out)
        self.clear_runs(d)
        rc, out, err = self.run_flowrun(d, "run", "--cpus", "1", "train.py")
        got = self.envs(d)
        self.check(rc == 0 and got.get(0, {}).get("exe") and self.seen_env.get("PYTHONUNBUFFERED") == "1",
                   "PYTHONUNBUFFERED=1 by default", f"{err}\n{self.seen_env.get('PYTHONUNBUFFERED')!r}")
        rc, out, err = self.run_flowrun(d, "run", "--cpus", "1", "train.py", env=self.env(PYTHONUNBUFFERED=""))
        self.envs(d)
        self.check(rc == 0 and self.seen_env.get("PYTHONUNBUFFERED") == "",
                   "PYTHONUNBUFFERED set (empty) where flowrun starts is kept", repr(self.seen_env.get("PYTHONUNBUFFERED")))

    def test_missing_module(self):
        """A python3 without torch first on PATH: the report names it and says how to choose another."""
        d = self.workdir("missing")
        with open(os.path.join(d, "needs_torch.py"), "w") as f:
            f.write("import torch\n")
        nopkgs = os.path.join(self.scratch, "nopkgs")
        os.makedirs(nopkgs)
        fake = os.path.join(nopkgs, "python3")
        with open(fake, "w") as f:  # Debian's Python without its site-packages: no torch
            f.write("#!/bin/sh\nexec /usr/bin/python3 -S \"$@\"\n")
        os.chmod(fake, 0o755)
        env = self.env()
        env["PATH"] = nopkgs + ":" + env["PATH"]
        rc, out, err = self.run_flowrun(d, "run", "--cpus", "1", "needs_torch.py", env=env)
        want = (f"flowrun:   rank 0 ran {fake} (python3 as found on its PATH), which has no module 'torch': choose "
                "the Python that has it with --python PY (flowrun run, flowrun SPEC) or python: PY in the spec\n")
        self.check(rc == 1 and "ModuleNotFoundError: No module named 'torch'" in err and want in err,
                   "the report names the python3 the rank found on its PATH, and --python", f"rc={rc}\n{err}")
        self.clear_runs(d)
        rc, out, err = self.run_flowrun(d, "run", "--cpus", "1", "--no-python", "sh", "-c", "python3 needs_torch.py",
                                    env=env)
        shown = re.search(r"^flowrun:   rank 0 ran (/\S+/sh), not Python itself; python3 on its PATH is (\S+): if "
                          r"that is the Python without module 'torch', write the full path of the one that has it "
                          r"in the step's run: ", err, re.M)
        self.check(rc == 1 and shown is not None and shown.group(2) == fake,
                   "a shell that starts Python: the report names the shell and the python3 on its PATH", err)
        self.clear_runs(d)

    def results(self, d, step):
        """The one run's results.json for `step` ({} when there is none)."""
        runs = os.path.join(d, ".flowrun", "runs")
        for run in os.listdir(runs) if os.path.isdir(runs) else []:
            try:
                with open(os.path.join(runs, run, step, "results.json")) as f:
                    return json.load(f)
            except (OSError, ValueError):
                pass
        return {}

    def test_init(self):
        """flowrun init writes the spec flowrun run would run; it validates and plans alike."""
        d = self.workdir("init")
        rc, out, err = self.run_flowrun(d, "init", "--nproc_per_node=2", "train.py", "--epochs", "3")
        self.check(rc == 0, "init: exit 0", err)
        self.check(out.startswith("Wrote train.yaml: one parallel step, train"), "init: says what it wrote", out)
        path = os.path.join(d, "train.yaml")
        text = open(path).read() if os.path.exists(path) else ""
        self.check('run: ["python3", "train.py", "--epochs", "3"]' in text and "cpus: 2" in text,
                   "init: the script, its arguments and the worker count", text)
        rc, out, err = self.run_flowrun(d, "validate", "train.yaml")
        self.check(rc == 0, "init: the spec validates", err)
        rc, out, err = self.run_flowrun(d, "train.yaml")
        got = self.envs(d)
        self.check(rc == 0 and sorted(got) == [0, 1] and got[0]["argv"] == ["--epochs", "3"],
                   "init: the spec runs 2 workers with the arguments", err)
        rc, out, err = self.run_flowrun(d, "init", "train.py")
        self.check(rc == 2 and "train.yaml already exists" in err, "init: refuses to overwrite", err)
        rc, out, err = self.run_flowrun(d, "init", "--force", "-o", "train.yaml", "train.py")
        self.check(rc == 0, "init --force: overwrites", err)

    def test_slurm_step_variables(self):
        """Started by srun (or inside sbatch -n 2), the workers do not inherit the step's task variables, which
        Lightning 1.x would take its ranks from; the job's stay."""
        d = self.workdir("slurm")
        step = dict(SLURM_JOB_ID="42", SLURM_JOB_NUM_NODES="1", SLURM_NTASKS="2", SLURM_NPROCS="2",
                    SLURM_PROCID="0", SLURM_LOCALID="0", SLURM_STEP_ID="0", SLURM_STEPID="0", SLURM_TASK_PID="1")
        rc, out, err = self.run_flowrun(d, "run", "--nproc-per-node", "2", "train.py", env=self.env(**step))
        self.check(rc == 0, "under srun: exit 0", err)
        with open(os.path.join(d, "env-1.json")) as f:
            seen = json.load(f)["env"]
        self.envs(d)
        leaked = sorted(k for k in step if k in seen and k not in ("SLURM_JOB_ID", "SLURM_JOB_NUM_NODES"))
        self.check(not leaked, "the step's SLURM_NTASKS, SLURM_PROCID, ... are not passed on", str(leaked))
        self.check(seen.get("SLURM_JOB_ID") == "42" and seen.get("SLURM_JOB_NUM_NODES") == "1",
                   "the job's SLURM_JOB_ID and SLURM_JOB_NUM_NODES are", str({k: seen.get(k) for k in step}))

    def test_resume(self):
        """A failed flowrun run resumes from the spec it saved, with the same options."""
        d = self.workdir("resume")
        rc, out, err = self.run_flowrun(d, "run", "--nproc-per-node", "2", "train.py", "z", env=self.env(FAIL_RANK="1"))
        self.envs(d)
        runs = [r for r in os.listdir(os.path.join(d, ".flowrun", "runs")) if r != "latest"]
        self.check(rc == 3 and len(runs) == 1, "a failing flowrun run exits 3", f"rc={rc} {runs}\n{err}")
        rc, out, err = self.run_flowrun(d, "resume", runs[0] if runs else "none")
        got = self.envs(d)
        self.check(rc == 0 and sorted(got) == [0, 1] and got[1]["argv"] == ["z"],
                   "flowrun resume RUN runs it again: 2 workers, the script's arguments", f"rc={rc}\n{err}")

    def free_port(self):
        import socket
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return sock.getsockname()[1]

    def test_rendezvous_one_host(self):
        """torchrun's static rendezvous, both nodes on this host: node 1 first, a stale token left behind."""
        d = self.workdir("rdzv")
        port = self.free_port()
        common = ["run", "--nnodes", "2", "--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port",
                  str(port), "--role", "trainer", "--rdzv-id", "exp-9"]
        token = os.path.join(d, ".flowrun", "rendezvous", f"127.0.0.1_{port}.token")
        os.makedirs(os.path.dirname(token), mode=0o700)
        with open(token, "w") as f:  # what a SIGKILLed head would leave
            f.write("0" * 64 + "\n")
        os.chmod(token, 0o600)
        env = self.env(FLOWRUN_HOSTNAME="nodeB")
        agent = subprocess.Popen([self.binary, *common, "--node-rank", "1", "train.py", "x"], cwd=d, env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(0.3)
        rc, out, err = self.run_flowrun(d, *common, "--node-rank", "0", "train.py", "x",
                                    env=self.env(FLOWRUN_HOSTNAME="nodeA"))
        a_out, a_err = agent.communicate(timeout=60)
        a_err = a_err.decode(errors="replace")
        self.check(rc == 0, "node 0: exit 0", err)
        with open(os.path.join(d, "env-3.json")) as f:
            remote = json.load(f)["env"]
        self.check(remote.get("ROLE_NAME") == "trainer" and remote.get("TORCHELASTIC_RUN_ID") == "exp-9",
                   "--role and --rdzv-id reach node 1's ranks (ROLE_NAME, TORCHELASTIC_RUN_ID)",
                   str({k: remote.get(k) for k in ("ROLE_NAME", "TORCHELASTIC_RUN_ID")}))
        self.check(agent.returncode == 0, "node 1: exit 0", a_err)
        self.check(f"flowrun run: joining node 0 at 127.0.0.1:{port} as node 1" in a_err, "node 1 says it joins",
                   a_err)
        got = self.envs(d)
        envs = [got.get(r, {}).get("env", {}) for r in range(4)]
        self.check(sorted(got) == [0, 1, 2, 3], "4 ranks ran", str(sorted(got)))
        self.check([e.get("GROUP_RANK") for e in envs] == ["0", "0", "1", "1"], "GROUP_RANK 0,0,1,1",
                   str([e.get("GROUP_RANK") for e in envs]))
        self.check({e.get("WORLD_SIZE") for e in envs} == {"4"} and {e.get("LOCAL_WORLD_SIZE") for e in envs} == {"2"},
                   "WORLD_SIZE 4, LOCAL_WORLD_SIZE 2")
        addrs = {e.get("MASTER_ADDR") for e in envs}
        self.check(len(addrs) == 1 and not next(iter(addrs), "127.").startswith("127."),
                   "one MASTER_ADDR, not a loopback address (node 0 dials this host's interface)", str(addrs))
        self.check("[nodeB train r2] worker 2 of 4 args ['x']" in out and "[nodeA train r0] worker 0 of 4" in out,
                   "node 0's console shows both nodes' ranks", out)
        self.check(not os.path.exists(token), "the token file is gone after the run", token)
        # A failing rank on node 1: both exit non-zero.
        agent = subprocess.Popen([self.binary, *common, "--node-rank", "1", "train.py"], cwd=d,
                                 env=self.env(FAIL_RANK="3"), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        rc, out, err = self.run_flowrun(d, *common, "--node-rank", "0", "--grace", "1", "train.py",
                                    env=self.env(FAIL_RANK="3"))
        agent.communicate(timeout=60)
        self.envs(d)
        self.check(rc == 3 and "rank 3 on" in err and "exited with code 3" in err,
                   "a failing rank on node 1: node 0 exits 3 and names it", f"rc={rc}\n{err}")
        self.check(agent.returncode == 1, "a failing rank on node 1: node 1's flowrun run exits 1",
                   f"rc={agent.returncode}")
        # --local-ranks-filter means local ranks, on every node (as torchrun's on each); --tee and
        # --redirects apply to the other nodes' ranks by their local rank too.
        agent = subprocess.Popen([self.binary, *common, "--node-rank", "1", "train.py"], cwd=d, env=self.env(),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        rc, out, err = self.run_flowrun(d, *common, "--node-rank", "0", "--local-ranks-filter", "1", "train.py")
        agent.communicate(timeout=60)
        self.envs(d)
        shown = sorted(set(re.findall(r"\] worker (\d) of 4", out)))
        self.check(rc == 0 and shown == ["1", "3"], "--local-ranks-filter 1 on 2 nodes: ranks 1 and 3 shown",
                   f"rc={rc} shown={shown}\n{out}{err}")

    def start_copies(self, d, argv, count, mark):
        """`count` copies of one `flowrun run` command, started together: each its own host name, all with
        `mark` in their environment (and so their workers')."""
        return [subprocess.Popen([self.binary, *argv], cwd=d, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 env=self.env(FLOWRUN_HOSTNAME=f"copy{i}", FLOWRUN_TEST_MARK=mark))
                for i in range(count)]

    def rendezvous_without_node_rank(self, nodes, nnodes=None, conf=()):
        """`nodes` identical torchrun commands, without --node-rank, on one host: the first to bind the port is
        node 0, the others join it in turn (a stale token file left behind); a real torch all_reduce (gloo)
        across them sums every rank."""
        have = subprocess.run(["/usr/bin/python3", "-c", "import torch.distributed as d; assert d.is_available()"],
                              capture_output=True, env=self.env())
        if have.returncode != 0:
            pytest.skip("/usr/bin/python3 cannot import torch.distributed (Debian's python3-torch)")
        d = self.workdir(f"rdzv{nodes}" + ("-" + nnodes.replace(":", "-") if nnodes else ""))
        with open(os.path.join(d, "allreduce.py"), "w") as f:
            f.write(ALL_REDUCE)
        port = self.free_port()
        mark = f"rdzv-{nodes}-{os.getpid()}-{port}"
        argv = ["run", "--nnodes", nnodes or str(nodes), "--nproc-per-node", "1", "--rdzv-backend", "c10d",
                "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"job{nodes}", *conf, "allreduce.py"]
        token = os.path.join(d, ".flowrun", "rendezvous", f"127.0.0.1_{port}.token")
        os.makedirs(os.path.dirname(token), mode=0o700)
        with open(token, "w") as f:  # what a SIGKILLed head would leave: a joiner must not read it
            f.write("0" * 64 + "\n")
        os.chmod(token, 0o600)
        copies = self.start_copies(d, argv, nodes, mark)
        ended = [p.communicate(timeout=120) for p in copies]
        label = f"{nodes} copies without --node-rank" + (f", --nnodes {nnodes}" if nnodes else "")
        outs = [o.decode(errors="replace") for o, _ in ended]
        errs = [e.decode(errors="replace") for _, e in ended]
        everything = "\n".join(f"--- copy {i} rc={p.returncode}\n{e}" for i, (p, e) in enumerate(zip(copies, errs)))
        self.check([p.returncode for p in copies] == [0] * nodes, f"{label}: every copy exits 0", everything)
        heads = [i for i, e in enumerate(errs) if "flowrun: this host is node 0; waiting for" in e]
        joiners = [i for i, e in enumerate(errs) if re.search(
            rf"^flowrun run: port {port} of this host is held by flowrun \(pid \d+\); joining node 0 at "
            rf"127\.0\.0\.1:{port} as node \(the next free rank\)", e, re.M)]
        self.check(len(heads) == 1 and sorted(heads + joiners) == list(range(nodes)),
                   f"{label}: one is the head, the others say whose port they found and join it",
                   f"heads {heads} joiners {joiners}\n{everything}")
        seen = [tuple(int(x) for x in m) for m in
                re.findall(r"rank (\d+) world (\d+) group (\d+) sum (\d+)$", "\n".join(outs), re.M)]
        want = [(r, nodes, r, nodes * (nodes + 1) // 2) for r in range(nodes)]
        self.check(sorted(seen) == want, f"{label}: ranks 0..{nodes - 1} once each, GROUP_RANK = RANK, the right sum",
                   f"{sorted(seen)}\n" + "\n".join(outs))
        wait_for(lambda: not processes_with(f"FLOWRUN_TEST_MARK={mark}"), 10 * self.slack)
        left = processes_with(f"FLOWRUN_TEST_MARK={mark}")
        self.check(not left, f"{label}: nothing is left running", str(left))
        self.check(not os.path.exists(token), f"{label}: the token file is gone after the run", token)

    def test_rendezvous_two_without_node_rank(self):
        """Two torchrun commands on one host, neither with --node-rank."""
        self.rendezvous_without_node_rank(2)

    def test_rendezvous_three_without_node_rank(self):
        """Three torchrun commands on one host, none with --node-rank."""
        self.rendezvous_without_node_rank(3)

    def test_rendezvous_elastic_range(self):
        """torchrun's elastic --nnodes 1:2: two commands make WORLD_SIZE 2 at once (MAX joined); one alone
        starts by itself, WORLD_SIZE 1, once --rdzv-conf last_call_timeout passes with MIN there."""
        self.rendezvous_without_node_rank(2, "1:2")
        self.rendezvous_without_node_rank(1, "1:2", ("--rdzv-conf", "last_call_timeout=1"))

    def test_rendezvous_port_held_by_another_program(self):
        """Without --node-rank, a rendezvous port another program listens on: a clear error at once, no wait."""
        import socket
        d = self.workdir("held")
        with socket.socket() as held:
            held.bind(("127.0.0.1", 0))
            held.listen()
            port = held.getsockname()[1]
            rc, out, err = self.run_flowrun(d, "run", "--nnodes", "2", "--nproc-per-node", "1", "--rdzv-endpoint",
                                            f"127.0.0.1:{port}", "train.py", timeout=30)
            with open("/proc/self/comm") as f:
                me = f.read().strip()
        want = (f"flowrun: error: --rdzv-endpoint 127.0.0.1:{port}: port {port} of this host is taken by {me} "
                f"(pid {os.getpid()}), not by a flowrun run to join; choose another port, or stop it\n")
        self.check((rc, err) == (1, want), "a port another program holds: exit 1, naming it", f"rc={rc}\n{err}")
        self.check(not self.envs(d), "no worker ran")
        with socket.socket() as bound:  # bound without SO_REUSEADDR, not listening: nothing to join
            bound.bind(("127.0.0.1", 0))
            port = bound.getsockname()[1]
            rc, out, err = self.run_flowrun(d, "run", "--nnodes", "2", "--nproc-per-node", "1", "--rdzv-endpoint",
                                            f"127.0.0.1:{port}", "train.py", timeout=30)
        want = (f"flowrun: error: --rdzv-endpoint 127.0.0.1:{port}: port {port} of this host is in use by a socket "
                "that does not listen (a connection, or a port held by another program); choose another port\n")
        self.check((rc, err) == (1, want), "a port bound but not listened on: exit 1, saying so", f"rc={rc}\n{err}")

    def test_rendezvous_joiner_before_the_head(self):
        """A node that joins before node 0 exists keeps trying for join_timeout: node 0, started once it said it
        joins (here without --node-rank: it binds the port), takes it in; with no node 0 it gives up."""
        d = self.workdir("early")
        port = self.free_port()
        common = ["run", "--nnodes", "2", "--nproc-per-node", "1", "--rdzv-endpoint", f"127.0.0.1:{port}"]
        joiner = subprocess.Popen([self.binary, *common, "--node-rank", "1", "train.py"], cwd=d, env=self.env(),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        first = joiner.stderr.readline().decode(errors="replace")
        self.check(first.startswith(f"flowrun run: joining node 0 at 127.0.0.1:{port} as node 1"),
                   "the early node says it joins", first)
        rc, out, err = self.run_flowrun(d, *common, "train.py")
        _, j_err = joiner.communicate(timeout=60)
        self.check(rc == 0 and joiner.returncode == 0, "node 0, started later, takes it in: both exit 0",
                   f"rc={rc} {joiner.returncode}\n{err}\n{j_err.decode(errors='replace')}")
        self.check(sorted(self.envs(d)) == [0, 1], "both ranks ran")
        rc, out, err = self.run_flowrun(d, *common, "--node-rank", "1", "--rdzv-conf", "join_timeout=1", "train.py",
                                        timeout=30)
        self.check(rc == 1 and err.endswith(f"flowrun: error: cannot reach the head at 127.0.0.1:{port}: Connection "
                                            "refused\n"),
                   "no node 0 within join_timeout: exit 1, saying so", f"rc={rc}\n{err}")

    # --- torchrun's whole command line ---------------------------------------

    def torchrun_options(self):
        """Every option of the installed torch's torchrun parser, then of tests/data/torchrun_2x_options.txt:
        (spellings, takes a value, argparse's dest, whether torchrun reads PET_<DEST>, choices)."""
        dump = ("import json, torch.distributed.run as run\n"
                "print(json.dumps([[a.option_strings, a.nargs != 0, a.dest, type(a).__name__ in ('env', 'check_env'),"
                " list(a.choices or [])] for a in run.get_args_parser()._actions if a.option_strings]))")
        p = subprocess.run(["/usr/bin/python3", "-c", dump], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=120)
        self.check(p.returncode == 0, "the installed torch lists its torchrun options", p.stderr.decode()[-2000:])
        installed = [tuple(o) for o in json.loads(p.stdout or b"[]")]
        listed = []
        with open(os.path.join(self.root, "tests", "data", "torchrun_2x_options.txt")) as f:
            for line in f:
                words = line.split()
                if not words or words[0].startswith("#"):
                    continue
                spellings, kind = words[:-1], words[-1]
                dest = next(s for s in spellings if s.startswith("--"))[2:].replace("-", "_")
                listed.append((spellings, kind == "value", dest, dest != "help", []))
        return installed, listed

    # A value flowrun accepts on one node for each torchrun option that takes one, by argparse's dest;
    # a new option gets its first choice, else "1".
    SAMPLES = {"nnodes": "1", "nproc_per_node": "2", "rdzv_backend": "c10d", "rdzv_endpoint": "127.0.0.1:29500",
               "rdzv_id": "job-7", "rdzv_conf": "join_timeout=5", "max_restarts": "1", "monitor_interval": "0.5",
               "start_method": "spawn", "event_log_handler": "null", "role": "trainer", "log_dir": "logs",
               "redirects": "3", "tee": "3", "local_ranks_filter": "0", "duplicate_stdout_filters": "loss,acc",
               "duplicate_stderr_filters": "error", "node_rank": "0", "master_addr": "127.0.0.1",
               "master_port": "29500", "local_addr": "127.0.0.1", "logs_specs": "default", "numa_binding": "node",
               "signals_to_handle": "SIGTERM,SIGINT", "shutdown_timeout": "5"}

    def test_every_torchrun_option(self):
        """Every option of torchrun's parser (the installed torch's, and torch 2.x's from the checked-in list), in
        every spelling, is taken by `flowrun run --dry-run`; each one torchrun reads from PET_<DEST> is read from
        there too; and docs/migrating.md's table has every one."""
        d = self.workdir("every-option")
        installed, listed = self.torchrun_options()
        # --numa-binding binds GPU workers: two simulated GPUs, both on NUMA node 0 of a fake sysfs.
        sysfs = os.path.join(self.scratch, "every-option-sys")
        for bus in ("18", "28"):  # the fake GPUs' PCI ids
            os.makedirs(os.path.join(sysfs, "bus", "pci", "devices", f"0000:{bus}:00.0"))
            with open(os.path.join(sysfs, "bus", "pci", "devices", f"0000:{bus}:00.0", "numa_node"), "w") as f:
                f.write("0\n")
        os.makedirs(os.path.join(sysfs, "devices", "system", "node", "node0"))
        with open(os.path.join(sysfs, "devices", "system", "node", "node0", "cpulist"), "w") as f:
            f.write(",".join(map(str, sorted(os.sched_getaffinity(0)))) + "\n")

        def gpus(dest):  # the simulated GPUs an option needs
            return "2" if dest == "numa_binding" else "0"
        failed = []
        for source, options in (("torch " + "installed", installed), ("torch 2.x list", listed)):
            for spellings, takes_value, dest, _, choices in options:
                sample = self.SAMPLES.get(dest, choices[0] if choices else "1")
                for spelling in spellings:
                    given = [spelling, sample] if takes_value else [spelling]
                    rc, out, err = self.run_flowrun(d, "run", "--dry-run", "--fake-gpus", gpus(dest), *given,
                                                    "train.py", env=self.env(FLOWRUN_FAKE_SYSFS=sysfs))
                    if rc != 0:
                        failed.append(f"{source}: {' '.join(given)}: exit {rc}: {err.strip()[:300]}")
        self.check(not failed, "flowrun run takes every torchrun option in every spelling", "\n".join(failed))
        failed = []
        for spellings, takes_value, dest, reads_env, choices in installed + listed:
            if not reads_env:
                continue
            value = self.SAMPLES.get(dest, choices[0] if choices else "1") if takes_value else "1"
            var = "PET_" + dest.upper()
            rc, out, err = self.run_flowrun(d, "run", "--dry-run", "--fake-gpus", gpus(dest), "train.py",
                                            env=self.env(FLOWRUN_FAKE_SYSFS=sysfs, **{var: value}))
            if rc != 0:
                failed.append(f"{var}={value}: exit {rc}: {err.strip()[:300]}")
        self.check(not failed, "flowrun run reads every PET_ variable torchrun reads", "\n".join(failed))
        with open(os.path.join(self.root, "docs", "migrating.md")) as f:
            text = f.read()
        table = re.search(r"^### Every torchrun option\n(.*?)(?=^#)", text, re.M | re.S)
        rows = set()  # the options named in the first column
        for cell in re.findall(r"^\| (.*?) \| ", table.group(1) if table else "", re.M):
            rows.update(re.findall(r"`(-[-\w]+)", cell))
        missing = sorted({next(s for s in spellings if s.startswith("--")).replace("_", "-")
                          for spellings, *_ in installed + listed} - rows)
        self.check(table is not None and not missing,
                   "docs/migrating.md's 'Every torchrun option' table has a row for every torchrun option",
                   f"missing: {missing}")

    @pytest.mark.parametrize("argv, want, env", [  # what the dry run's output has
        case(["--nproc", "3"], "WORLD_SIZE=3."),
        case(["--nproc_per=3"], "WORLD_SIZE=3."),
        case(["--no-py", "--nproc", "2"], 'run: ["train.py"]'),
        case([], "WORLD_SIZE=3.", env={"PET_NPROC_PER_NODE": "3"}),
        case(["--nproc-per-node", "2"], "WORLD_SIZE=2.", env={"PET_NPROC_PER_NODE": "3"}),
        case([], 'run: ["train.py"]', env={"PET_NO_PYTHON": "1", "PET_NPROC_PER_NODE": "2"}),
        case([], 'run: ["train.py"]', env={"PET_NO_PYTHON": "true"}),
        case([], 'run: ["python3", "train.py"]', env={"PET_NO_PYTHON": "0"}),
        case(["--role", "trainer", "--rdzv_id=exp-42"], 'role: "trainer"\n      job_id: "exp-42"\n'),
        case(["--rdzv-id", "exp-42"], "TORCHELASTIC_RUN_ID=exp-42;"),
        case([], 'role: "critic"', env={"PET_ROLE": "critic"}),
        case(["--standalone", "--rdzv-id", "exp-42"], "TORCHELASTIC_RUN_ID=<run-id>;"),
        case(["-r3", "-t=3", "--run-path", "-m"], 'run: ["python3", "train.py"]'),
        case([], 'run: ["/opt/py/bin/python3", "train.py"]', env={"PYTHON_EXEC": "/opt/py/bin/python3"}),
        case(["--python", "/usr/bin/python3"], 'run: ["/usr/bin/python3", "train.py"]',
             env={"PYTHON_EXEC": "/opt/py/bin/python3"}),
        case(["--run-path"], 'run: ["python3", "train.py"]', env={"PYTHON_EXEC": "/opt/py/bin/python3"}),
    ])
    def test_prefixes_and_environment(self, request, argv, want, env):
        """argparse's prefixes, -r3, PET_ defaults under the command line, in dry runs."""
        d = self.workdir("prefixes")
        label = request.node.callspec.id
        rc, out, err = self.run_flowrun(d, "run", "--dry-run", "--fake-gpus", "0", *argv, "train.py",
                                        env=self.env(**env))
        shown = re.sub(r"TORCHELASTIC_RUN_ID=[\w.-]+-\d{8}-\d{6}-\w+;", "TORCHELASTIC_RUN_ID=<run-id>;", out)
        self.check(rc == 0 and want in shown, f"{label}: the dry run has {want!r}", f"rc={rc}\n{err}\n{out}")

    @pytest.mark.parametrize("argv, want, env", [
        case(["--ma", "1"], "flowrun: error: ambiguous option '--ma': it could be --master-addr, --master-port, "
                            "--max-restarts\n"),
        case(["--r", "1"], "flowrun: error: ambiguous option '--r': it could be --rdzv-endpoint, --rdzv-id, "
                           "--rdzv-backend, --rdzv-conf, --redirects, --run-path, --role, --ranks, --run-id, "
                           "--run-dir\n"),
        case([], "flowrun: error: PET_NODE_RANK=x: expected a whole number from 0 to 65535\n",
             env={"PET_NODE_RANK": "x"}),
        case([], "flowrun: error: PET_STANDALONE=yes: expected 1 (set --standalone) or 0, as torchrun reads it; true "
                 "and false work too\n", env={"PET_STANDALONE": "yes"}),
        case(["--start-method", "thread"],
             "flowrun: error: --start-method thread: torchrun's start methods are spawn, fork and forkserver\n"),
        case(["--grace", "1", "--shutdown-timeout", "2"],
             "flowrun: error: --grace and --shutdown-timeout are one setting (seconds between SIGTERM and SIGKILL); "
             "give one\n"),
        case(["--shutdown-timeout", "1.5"],
             "flowrun: error: --shutdown-timeout 1.5: expected a whole number from 0 to 3600\n"),
        case([], "flowrun: error: TORCH_ELASTIC_SHUTDOWN_TIMEOUT=soon: expected a whole number from 0 to 3600\n",
             env={"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "soon"}),
    ])
    def test_prefixes_and_environment_refused(self, request, argv, want, env):
        """What is refused of the command line and its PET_ and TORCH_ELASTIC_ defaults, in dry runs."""
        d = self.workdir("prefixes")
        label = request.node.callspec.id
        rc, out, err = self.run_flowrun(d, "run", "--dry-run", "--fake-gpus", "0", *argv, "train.py",
                                        env=self.env(**env))
        self.check(rc == 2 and want in err, f"{label}: exit 2, {want.strip()!r}", f"rc={rc}\n{err}")

    def test_options_with_no_effect_and_a_spec(self):
        """Options with no effect say so when typed; a spec refuses what would shape its step."""
        d = self.workdir("prefixes")
        rc, out, err = self.run_flowrun(d, "run", "--dry-run", "--fake-gpus", "0", "--tee", "3", "--logs-specs", "x",
                                        "--event-log-handler", "null", "train.py",
                                        env=self.env(PET_MONITOR_INTERVAL="1"))
        self.check(rc == 0 and "flowrun run: --logs-specs has no effect" in err and
                   "flowrun run: --event-log-handler has no effect" in err and "monitor" not in err,
                   "options with no effect say so when typed, not when a PET_ variable gives them", err)
        # A spec shapes its own step: typed, --role and --rdzv-id are refused; from PET_, passed over.
        with open(os.path.join(d, "flow.yaml"), "w") as f:
            f.write("steps:\n  - name: train\n    run: python3 train.py\n    parallel: {cpus: 2}\n")
        rc, out, err = self.run_flowrun(d, "run", "--dry-run", "--role", "x", "--rdzv-id", "y", "flow.yaml")
        self.check(rc == 2 and "  --rdzv-id: write it in the step's parallel: (job_id:)\n" in err and
                   "  --role: write it in the step's parallel: (role:)\n" in err,
                   "a spec with --role and --rdzv-id: refused, with the keys to write", err)
        rc, out, err = self.run_flowrun(d, "run", "--dry-run", "flow.yaml", env=self.env(PET_NPROC_PER_NODE="4"))
        self.check(rc == 0 and "WORLD_SIZE=2." in out and "flowrun run: PET_NPROC_PER_NODE is passed over: flow.yaml "
                   "shapes its own steps (the step's parallel: (gpus:, cpus:))" in err,
                   "a spec with PET_NPROC_PER_NODE in the environment: the spec's 2 workers, and a note", err + out)

    def test_torchrun_environment_and_spellings(self):
        """PET_NPROC_PER_NODE=2 PET_NO_PYTHON=1 runs a shell script on 2 workers; --nproc 2 -r 3 -t 3 --role
        --rdzv-id give torch workers ROLE_NAME and TORCHELASTIC_RUN_ID; PYTHON_EXEC, --python and --run-path
        choose the interpreter."""
        d = self.workdir("pet")
        with open(os.path.join(d, "test_script.sh"), "w") as f:
            f.write('#!/bin/sh\necho "rank $RANK of $WORLD_SIZE"\n')
        os.chmod(os.path.join(d, "test_script.sh"), 0o755)
        rc, out, err = self.run_flowrun(d, "run", "test_script.sh",
                                        env=self.env(PET_NPROC_PER_NODE="2", PET_NO_PYTHON="1"))
        self.check(rc == 0 and "[test_script r0] rank 0 of 2\n" in out and "[test_script r1] rank 1 of 2\n" in out,
                   "PET_NPROC_PER_NODE=2 PET_NO_PYTHON=1: 2 workers run test_script.sh itself", f"rc={rc}\n{err}\n{out}")
        with open(os.path.join(d, "dist.py"), "w") as f:
            f.write(WORKER + "import torch.distributed as dist\ndist.init_process_group('gloo')\n"
                    "t = __import__('torch').ones(1)\ndist.all_reduce(t)\nprint('sum', int(t.item()), flush=True)\n")
        rc, out, err = self.run_flowrun(d, "run", "--nproc", "2", "-r", "3", "-t", "3", "--role", "trainer",
                                        "--rdzv-id", "exp-42", "dist.py")
        got = self.envs(d)
        envs = [got.get(r, {}).get("env", {}) for r in (0, 1)]
        self.check(rc == 0 and sorted(got) == [0, 1], "--nproc 2 -r 3 -t 3: 2 torch workers meet and end", err)
        self.check("[dist r0-1] sum 2\n" in out,
                   "-r 3 -t 3: taken as --redirects 3 --tee 3, and tee wins: the output is shown (both ranks' like "
                   "lines as one)", out)
        self.check([e.get("ROLE_NAME") for e in envs] == ["trainer", "trainer"], "--role trainer: ROLE_NAME=trainer",
                   str(envs))
        # envs() shows rank 0's TORCHELASTIC_RUN_ID as <run-id> wherever it appears; seen_env has it as is.
        self.check([e.get("TORCHELASTIC_RUN_ID") for e in envs] == ["<run-id>", "<run-id>"] and
                   self.seen_env.get("TORCHELASTIC_RUN_ID") == "exp-42" and
                   "exp-42" in self.seen_env.get("FLOWRUN_RUN_ID", "") and
                   self.seen_env.get("FLOWRUN_RUN_ID") != "exp-42",
                   "--rdzv-id exp-42: TORCHELASTIC_RUN_ID=exp-42; FLOWRUN_RUN_ID stays flowrun's run id (made from it)",
                   str(envs) + " " + self.seen_env.get("FLOWRUN_RUN_ID", ""))
        logs = []
        for root, _, files in os.walk(os.path.join(d, ".flowrun")):
            logs += [os.path.join(root, f) for f in files if f == "stdout.log"]
        self.check(sum(open(p).read().count("sum 2\n") for p in logs) == 2, "both ranks' all_reduce gave 2",
                   str(logs))
        rc, out, err = self.run_flowrun(d, "run", "--nproc", "2", "-r", "3", "dist.py")
        self.envs(d)
        self.check(rc == 0 and "worker" not in out and "sum" not in out, "-r 3 alone: no worker output on the console",
                   out)
        other = self.python_wrapper("execbin")
        wrapper = os.path.join(other, "python3")
        for argv, wrapped, label in ((["train.py"], "1", "PYTHON_EXEC runs the workers"),
                                     (["--python", "/usr/bin/python3", "train.py"], None, "--python beats PYTHON_EXEC"),
                                     (["--run-path", "--no-python", os.path.join(d, "train.py")], None,
                                      "--run-path: Python from PATH, over --no-python and PYTHON_EXEC")):
            rc, out, err = self.run_flowrun(d, "run", "--nproc", "1", *argv, env=self.env(PYTHON_EXEC=wrapper))
            self.envs(d)
            self.check(rc == 0 and self.seen_env.get("WRAPPED") == wrapped and
                       self.seen_env.get("ROLE_NAME") == "default", f"{label} (ROLE_NAME=default)",
                       f"rc={rc}\n{err}\nWRAPPED={self.seen_env.get('WRAPPED')}")
