"""End-to-end tests of `flowrun SPEC`: the real binary starts real worker
processes (tests/e2e/helpers/worker.py), and the tests check what they saw
(their environment, signals, files) and what flowrun reported (exit code,
console, results.json, the run directory).

  python3 -m pytest tests/e2e/test_launcher.py [--flowrun PATH] [--sanitized] [-k NAME]

--sanitized: the binary is built with a sanitizer: timing slack is tripled
and the memory bound of the long-line test is not checked (the sanitizer's
own memory dwarfs it); everything else is checked the same way.
"""
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import threading
import time

import pytest

from flowrun_testlib import clean_env, temp_dir
from flowrun_testlib.launcher import PY, WORKER, Launcher, argv_yaml, proc_name, processes_with, py_spy, q, \
    res_culprit, wait_for

pytestmark = pytest.mark.launcher
REAPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "helpers", "reaper.py")

TORCHRUN_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                 "ROLE_NAME", "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
                 "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_USE_AGENT_STORE",
                 "TORCHELASTIC_ERROR_FILE", "FLOWRUN_RUN_ID", "FLOWRUN_STEP", "FLOWRUN_NODES", "FLOWRUN_NODE_RANK",
                 "FLOWRUN_RUN_DIR", "FLOWRUN_OUTPUT_DIR")
# The report's line of where the live ranks were before flowrun stopped them
# (without py-spy here: the kernel's states): the stopped rank 1 in do_signal_stop.
STOPPED_RANK_1 = r"flowrun:   [^\n]*\brank 1 is in do_signal_stop \(state T[^)\n]*\)[^\n]*\n"
# After a failure: the victims 0, 2, 3 named there, then in the stacks' line.
STOPPED_RANKS_STACKS = re.compile(r"^flowrun:   stopped by flowrun: ranks 0, 2, 3\n"
                                  r"flowrun:   (?:ranks? [0-9, ]+(?: \(\d of 3\))? (?:is|are) in [^\n]*(?:; |$))+\n", re.M)
PREFIX = re.compile(r"^\[([A-Za-z0-9_-]+)(?: r(\d+))?\] ")


class TestLauncher(Launcher):
    # --- 1. the worker environment ----------------------------------------

    def test_environment(self):
        d, spec, run_dir = self.workspace("environment", f"""name: envcheck
steps:
  - name: train
    run: {argv_yaml("env")}
    parallel:
      gpus: all
    collect: all
  - name: pair
    run: {argv_yaml("env")}
    parallel:
      gpus: [1, 3]
      visible_devices: process
    collect: all
""")
        r = self.flowrun_run("environment", spec, run_dir, "--fake-gpus", "8")
        if not self.check(r.rc == 0, "environment: the flow succeeds", r.detail()):
            return
        m = re.search(r"^flowrun: run (\S+): 2 steps; logs and results in (.*)$", r.stderr, re.M)
        self.check(m is not None and m.group(2) == run_dir, "environment: flowrun names the run and its directory",
                   r.stderr)
        run_id = m.group(1) if m else "?"
        envs = []
        for rank in range(8):
            path = os.path.join(run_dir, "train", "outputs", f"rank{rank}", "env.json")
            self.check(os.path.isfile(path),
                       f"environment: collect: all puts rank {rank}'s dump in outputs/rank{rank}/", path)
            if os.path.isfile(path):
                with open(path) as f:
                    envs.append(json.load(f)["env"])
        self.check(len(envs) == 8 and not os.path.exists(os.path.join(run_dir, "train", "outputs", "rank8")),
                   "environment: --fake-gpus 8 with gpus: all starts 8 workers", str(len(envs)))
        if len(envs) != 8:
            return
        missing = sorted({v for e in envs for v in TORCHRUN_VARS if v not in e})
        self.check(not missing, "environment: every torchrun and FLOWRUN_ variable is set", " ".join(missing))
        if missing:
            return
        self.check(sorted(int(e["RANK"]) for e in envs) == list(range(8)), "environment: RANK 0..7, each once",
                   str([e["RANK"] for e in envs]))
        self.check(all(e["LOCAL_RANK"] == e["RANK"] == e["ROLE_RANK"] and e["GROUP_RANK"] == "0" for e in envs),
                   "environment: LOCAL_RANK = ROLE_RANK = RANK on one node, GROUP_RANK 0",
                   str([(e["RANK"], e["LOCAL_RANK"], e["ROLE_RANK"]) for e in envs]))
        self.check(all(e["WORLD_SIZE"] == e["LOCAL_WORLD_SIZE"] == e["ROLE_WORLD_SIZE"] == "8"
                       and e["GROUP_WORLD_SIZE"] == "1" for e in envs),
                   "environment: WORLD_SIZE=8 everywhere, one node")
        ids = {e["FLOWRUN_RUN_ID"] for e in envs} | {e["TORCHELASTIC_RUN_ID"] for e in envs}
        self.check(ids == {run_id}, "environment: one run id everywhere, TORCHELASTIC_RUN_ID = FLOWRUN_RUN_ID",
                   f"{ids} vs {run_id}")
        ports = {e["MASTER_PORT"] for e in envs}
        self.check(len(ports) == 1 and next(iter(ports)).isdigit() and 1024 <= int(next(iter(ports))) < 65536,
                   "environment: MASTER_PORT identical across ranks and a port number", str(ports))
        self.check(all(e["MASTER_ADDR"] == "127.0.0.1" and e["TORCHELASTIC_RESTART_COUNT"] == "0"
                       and e["TORCHELASTIC_MAX_RESTARTS"] == "0" for e in envs),
                   "environment: MASTER_ADDR=127.0.0.1, no restarts yet")
        results = r.results("train")
        self.check(str(results["attempts"][0]["master_port"]) == next(iter(ports)),
                   "environment: results.json records the MASTER_PORT the workers got",
                   f"{results['attempts'][0]['master_port']} vs {ports}")
        self.check(all(e["FLOWRUN_OUTPUT_DIR"] == os.path.join(run_dir, "train", f"rank{e['RANK']}", "out")
                       and e["TORCHELASTIC_ERROR_FILE"] == os.path.join(run_dir, "train", f"rank{e['RANK']}",
                                                                         "error.json")
                       and e["FLOWRUN_RUN_DIR"] == run_dir and e["FLOWRUN_STEP"] == "train" for e in envs),
                   "environment: FLOWRUN_OUTPUT_DIR, TORCHELASTIC_ERROR_FILE and FLOWRUN_RUN_DIR in the run directory",
                   json.dumps({k: envs[0][k] for k in ("FLOWRUN_OUTPUT_DIR", "TORCHELASTIC_ERROR_FILE")}))
        self.check(all("CUDA_VISIBLE_DEVICES" not in e for e in envs),
                   "environment: gpus: all on every GPU leaves CUDA_VISIBLE_DEVICES as it was (unset)",
                   str([e.get("CUDA_VISIBLE_DEVICES") for e in envs]))

        # What the workers got is what `flowrun plan --json` says they get.
        p = subprocess.run([self.flowrun, "plan", spec, "--fake-gpus", "8", "--json", "--run-id", run_id,
                            "--run-dir", run_dir], capture_output=True, text=True, env=clean_env(), timeout=60)
        plan = json.loads(p.stdout)
        for step in plan["steps"]:
            for rank in step["ranks"]:
                path = os.path.join(run_dir, step["name"], "outputs", f"rank{rank['rank']}", "env.json")
                if not os.path.isfile(path):
                    self.check(False, f"environment: {step['name']} rank {rank['rank']} dumped its environment", path)
                    continue
                with open(path) as f:
                    got = json.load(f)["env"]
                wrong = {k: (v, got.get(k)) for k, v in rank["env"].items() if k != "MASTER_PORT" and got.get(k) != v}
                self.check(not wrong, f"environment: {step['name']} rank {rank['rank']} got the planned environment",
                           json.dumps(wrong))
        pair = [json.load(open(os.path.join(run_dir, "pair", "outputs", f"rank{k}", "env.json")))["env"]
                for k in range(2)]
        self.check([e.get("CUDA_VISIBLE_DEVICES") for e in pair] == ["1", "3"],
                   "environment: gpus: [1, 3] with visible_devices: process shows each worker its own GPU",
                   str([e.get("CUDA_VISIBLE_DEVICES") for e in pair]))
        self.check(pair[0]["MASTER_PORT"] == pair[1]["MASTER_PORT"] != next(iter(ports)),
                   "environment: each launch gets its own MASTER_PORT",
                   f"{pair[0]['MASTER_PORT']} {pair[1]['MASTER_PORT']} {ports}")

    def test_relative_run_dir(self):
        # A relative --run-dir is relative to where flowrun is started, for
        # flowrun and for the workers alike (they run in the spec's workdir).
        d, spec, _ = self.workspace("relative_run_dir", f"""name: rel
steps:
  - name: train
    run: {argv_yaml("env")}
    parallel:
      cpus: 2
""")
        cwd = os.path.join(d, "elsewhere")
        os.makedirs(cwd)
        r = self.flowrun_run("relative run dir", spec, "rel-run", cwd=cwd)
        run_dir = os.path.join(cwd, "rel-run")
        dump = os.path.join(run_dir, "train", "outputs", "env.json")
        self.check(r.rc == 0 and os.path.isfile(dump),
                   "relative --run-dir: rank 0's FLOWRUN_OUTPUT_DIR file is gathered into <cwd>/rel-run",
                   r.detail() + "\nfiles under the spec's directory: " +
                   " ".join(sorted(os.path.relpath(os.path.join(a, n), d) for a, _, ns in os.walk(d) for n in ns)))
        if os.path.isfile(dump):
            env = json.load(open(dump))["env"]
            self.check(env["FLOWRUN_OUTPUT_DIR"] == os.path.join(run_dir, "train", "rank0", "out"),
                       "relative --run-dir: workers get absolute paths", env["FLOWRUN_OUTPUT_DIR"])

    # --- 2. a failing rank ------------------------------------------------

    def test_culprit(self):
        ready = os.path.join(self.scratch, "culprit-ready")
        os.makedirs(ready)
        stamp = os.path.join(self.scratch, "culprit-stamp")
        d, spec, run_dir = self.workspace("culprit", f"""name: culprit
steps:
  - name: train
    run: {argv_yaml("fail", "--rank", "1", "--code", "3", "--ready", ready, "--stamp", stamp)}
    parallel:
      cpus: 4
""")
        r = self.flowrun_run("culprit", spec, run_dir)
        ended = time.time()
        self.check(r.rc == 3, "culprit: flowrun exits with the culprit's code (3)", r.detail())
        res = r.results("train")
        roles = {w["rank"]: w["role"] for w in res["ranks"]}
        self.check(res["outcome"] == "failed" and res["culprit_rank"] == 1 and res["exit_code"] == 3
                   and roles == {0: "victim", 1: "culprit", 2: "victim", 3: "victim"},
                   "culprit: results.json names rank 1 culprit and the others victims", json.dumps(res)[:3000])
        w1 = [w for w in res["ranks"] if w["rank"] == 1][0]
        self.check(w1["status"] == "exited" and w1["exit_code"] == 3 and w1["shell_code"] == 3,
                   "culprit: results.json has the culprit's exit code", json.dumps(w1))
        victims = [w for w in res["ranks"] if w["rank"] != 1]
        self.check(all(w["status"] == "signaled" and w["signal"] == "SIGTERM" for w in victims),
                   "culprit: the victims ended by flowrun's SIGTERM", json.dumps(victims)[:2000])
        rd = run_dir
        head = re.search(r"^flowrun: step 'train' failed: rank 1 exited with code 3 after [0-9.]+ s \(pid (\d+)\)$",
                         r.stderr, re.M)
        self.check(head is not None and int(head.group(1)) == w1["pid"],
                   "culprit: the report's headline names rank 1, its code and pid", r.stderr)
        expected_tail = re.compile(rf"^flowrun:   last \d+ lines of its stderr \({re.escape(rd)}/train/rank1/"
                                   r"stderr\.log\):\n    Traceback \(most recent call last\):\n", re.M)
        self.check(expected_tail.search(r.stderr) is not None and "\n    ValueError: boom from rank 1\n" in r.stderr
                   and STOPPED_RANKS_STACKS.search(r.stderr) is not None and f"\nflowrun:   logs: {rd}/train\n" in r.stderr,
                   "culprit: the report shows the culprit's stderr tail with its traceback, the victims and the logs",
                   r.stderr)
        self.check(r.stderr.rstrip("\n").splitlines()[-1].startswith(
            "flowrun: run culprit-") and "failed after" in r.stderr and "(exit code 3): failed 'train'" in r.stderr,
                   "culprit: the last line sums up the run", r.stderr)
        self.check("[train r1] ValueError: boom from rank 1\n" in r.stderr,
                   "culprit: the culprit's stderr reached flowrun's stderr, prefixed", r.stderr)
        if os.path.exists(stamp):
            after = ended - float(open(stamp).read())
            self.check(after < 2.0 * self.slack, "culprit: workers that die on SIGTERM end the run at once, "
                       "not after the 10 s grace", f"{after:.2f} s after the culprit")

    def test_grace(self):
        ready = os.path.join(self.scratch, "grace-ready")
        os.makedirs(ready)
        stamp = os.path.join(self.scratch, "grace-stamp")
        d, spec, run_dir = self.workspace("grace", f"""name: grace
steps:
  - name: train
    run: {argv_yaml("fail", "--rank", "2", "--code", "5", "--ready", ready, "--stamp", stamp, "--ignore-term")}
    parallel:
      cpus: 4
""")
        r = self.flowrun_run("grace", spec, run_dir, "--grace", "2")
        ended = time.time()
        self.check(r.rc == 5, "grace: exit code 5 from rank 2", r.detail())
        res = r.results("train")
        victims = [w for w in res["ranks"] if w["rank"] != 2]
        self.check(res["culprit_rank"] == 2 and all(w["role"] == "victim" and w["signal"] == "SIGKILL"
                                                    for w in victims),
                   "grace: workers that ignore SIGTERM are SIGKILLed and reported as victims",
                   json.dumps(res["ranks"])[:2000])
        self.check(all(w["teardown"] == "killed" for w in victims) and res["ranks"][2]["teardown"] is None
                   and "\nflowrun:   stopped by flowrun: ranks 0, 1, 3\n"
                       "flowrun:   killed, SIGTERM did not end them in time: ranks 0, 1, 3\n" in r.stderr,
                   "grace: results.json and the report say SIGKILL ended them", r.detail())
        if self.check(os.path.exists(stamp), "grace: the culprit wrote its time"):
            after = ended - float(open(stamp).read())
            self.check(1.9 <= after <= 2 + 1.5 * self.slack,
                       "grace: flowrun ends within --grace 2 plus slack after the culprit, not before the grace",
                       f"{after:.2f} s")

    def test_signaled(self):
        d, spec, run_dir = self.workspace("signaled", f"""name: signaled
steps:
  - name: train
    run: {argv_yaml("kill-self", "--rank", "1")}
    parallel:
      cpus: 3
""")
        r = self.flowrun_run("signaled", spec, run_dir)
        self.check(r.rc == 137, "signaled: a culprit killed by SIGKILL makes flowrun exit 128+9", r.detail())
        res = r.results("train")
        w1 = [w for w in res["ranks"] if w["rank"] == 1][0]
        self.check(res["culprit_rank"] == 1 and w1["status"] == "signaled" and w1["signal"] == "SIGKILL"
                   and w1["shell_code"] == 137, "signaled: results.json: rank 1 culprit, SIGKILL",
                   json.dumps(res["ranks"])[:1500])
        self.check(re.search(r"^flowrun: step 'train' failed: rank 1 was killed by signal 9 \(SIGKILL\) after ",
                             r.stderr, re.M) is not None
                   and "flowrun:   flowrun did not send that SIGKILL; it often comes from the kernel's "
                       "out-of-memory killer (peak memory: " in r.stderr,
                   "signaled: the report names the signal and points at the OOM killer", r.stderr)

    def test_error_file(self):
        d, spec, run_dir = self.workspace("error_file", f"""name: recorded
steps:
  - name: train
    run: {argv_yaml("error-file", "--rank", "0")}
    parallel:
      cpus: 2
""")
        r = self.flowrun_run("error file", spec, run_dir)
        err_file = os.path.join(run_dir, "train", "rank0", "error.json")
        self.check(r.rc == 1 and res_culprit(r) == 0, "error file: rank 0 is the culprit, exit 1", r.detail())
        self.check(f"flowrun:   its stderr was empty ({run_dir}/train/rank0/stderr.log)\n"
                   f"flowrun:   traceback from its error file ({err_file}):\n"
                   "    Traceback (most recent call last):\n" in r.stderr
                   and "\n    RuntimeError: recorded failure of rank 0\n" in r.stderr,
                   "error file: the report shows the traceback torch's @record wrote", r.stderr)

    def test_leftovers(self):
        d, spec, run_dir = self.workspace("leftovers", f"""name: leftovers
steps:
  - name: train
    run: {argv_yaml("leave-behind")}
    parallel:
      cpus: 2
  - name: next
    run: {argv_yaml("argv", "next")}
""")
        run_id = "leftovers-e2e-1"
        r = self.flowrun_run("leftovers", spec, run_dir, "--run-id", run_id)
        left = processes_with(f"FLOWRUN_RUN_ID={run_id}")
        self.check(r.rc == 0 and not left,
                   "leftovers: a detached process a worker left behind is stopped with the step",
                   " ".join(f"{x}:{proc_name(x)}" for x in left) + "\n" + r.detail())
        notes = r.results("train")["notes"]
        pids = sorted(int(m) for m in re.findall(r"left (\d+) behind", r.stdout))
        self.check(len(pids) == 2 and any(n.startswith("stopped 2 processes left behind by the step's workers: ")
                                          and all(f"{p} (sleep)" in n for p in pids) for n in notes),
                   "leftovers: results.json notes which processes were stopped", f"{pids} {notes}")
        self.check(re.search(r"^flowrun: step 'train': stopped 2 processes left behind by the step's workers: ",
                             r.stderr, re.M) is not None, "leftovers: flowrun says so on the console", r.stderr)
        self.check("[next] [\"next\"]" in r.stdout, "leftovers: the next step still runs", r.detail())
        for x in left:
            os.kill(x, signal.SIGKILL)

    # --- 4. signals to flowrun --------------------------------------------

    def _shell_flow(self, name):
        return self.workspace(name, """name: sig
steps:
  - name: tree
    shell: true
    run: |
      setsid sleep 300 &
      sleep 300 &
      echo started
      wait
""")

    def _wait_started(self, p, run_dir, run_id, count):
        log = os.path.join(run_dir, "tree", "stdout.log")

        def started():
            if p.poll() is not None:
                return True
            try:
                ok = "started" in open(log).read()
            except OSError:
                return False
            return ok and len(processes_with(f"FLOWRUN_RUN_ID={run_id}")) >= count
        wait_for(started, 20 * self.slack)
        return processes_with(f"FLOWRUN_RUN_ID={run_id}")

    def test_sigint(self):
        d, spec, run_dir = self._shell_flow("sigint")
        run_id = "sigint-e2e-1"
        start = time.monotonic()
        p = self.start(spec, run_dir, "--run-id", run_id, "--grace", "5")
        before = self._wait_started(p, run_dir, run_id, 3)
        self.check(len(before) >= 3, "sigint: sh, both sleeps carry the run id before the signal",
                   " ".join(f"{x}:{proc_name(x)}" for x in before))
        p.send_signal(signal.SIGINT)
        r = self.finish("sigint", p, run_dir, start)
        left = processes_with(f"FLOWRUN_RUN_ID={run_id}")
        self.check(r.rc == 130, "sigint: flowrun exits 130", r.detail())
        self.check(not left, "sigint: no process carrying the run id is left (setsid grandchild included)",
                   " ".join(f"{x}:{proc_name(x)}" for x in left))
        self.check("flowrun: SIGINT received: stopping step 'tree'" in r.stderr
                   and "flowrun: step 'tree' was interrupted" in r.stderr,
                   "sigint: flowrun says it was interrupted", r.stderr)
        res = r.results("tree")
        self.check(res["outcome"] == "interrupted" and res["exit_code"] == 130 and res["culprit_rank"] is None,
                   "sigint: results.json outcome interrupted, exit code 130", json.dumps(res)[:1500])
        for x in left:
            os.kill(x, signal.SIGKILL)

    def test_sigterm(self):
        d, spec, run_dir = self.workspace("sigterm", f"""name: term
steps:
  - name: train
    run: {argv_yaml("sleep", "300")}
    parallel:
      cpus: 2
  - name: after
    run: {argv_yaml("argv", "never")}
""")
        run_id = "sigterm-e2e-1"
        start = time.monotonic()
        p = self.start(spec, run_dir, "--run-id", run_id)
        wait_for(lambda: len(processes_with(f"FLOWRUN_RUN_ID={run_id}")) >= 2 or p.poll() is not None,
                 20 * self.slack)
        p.send_signal(signal.SIGTERM)
        r = self.finish("sigterm", p, run_dir, start)
        self.check(r.rc == 143 and not processes_with(f"FLOWRUN_RUN_ID={run_id}"),
                   "sigterm: flowrun exits 143 and stops its workers", r.detail())
        self.check(not os.path.exists(os.path.join(run_dir, "after", "stdout.log")) and "[after]" not in r.stdout,
                   "sigterm: the steps after an interrupt do not run", r.detail())

    @pytest.mark.parametrize("sig, options, tail", [
        pytest.param(signal.SIGINT, [], "; press Ctrl-C again to kill at once", id="SIGINT"),
        pytest.param(signal.SIGTERM, [], "; a second SIGTERM does not shorten the grace, a SIGINT kills at once",
                     id="SIGTERM"),
        pytest.param(signal.SIGHUP, [], "; a second SIGHUP does not shorten the grace, a SIGINT kills at once",
                     id="SIGHUP"),
        pytest.param(signal.SIGTERM, ["--signals-to-handle", "SIGTERM"], "", id="SIGTERM-only-SIGTERM-handled"),
    ])
    def test_stop_line_per_signal(self, sig, options, tail):
        """The stop line tells the signal's sender what a second signal does (docs/cli.md#signals):
        only a SIGINT kills at once, so only a Ctrl-C is told to press Ctrl-C again; a SIGTERM's or a
        SIGHUP's sender is told that a second one leaves the grace as it is; nothing is promised of a
        SIGINT that --signals-to-handle leaves out."""
        d, spec, run_dir = self.workspace("stop_line", f"""name: line
steps:
  - name: train
    run: {argv_yaml("sleep", "300")}
    parallel:
      cpus: 2
""")
        name = signal.Signals(sig).name
        run_id = f"stop-line-e2e-{name}-{len(options)}"
        label = f"stop line: {name} {' '.join(options)}".strip()
        start = time.monotonic()
        own = ["--run-dir", run_dir, "--run-id", run_id, "--grace", "7"]
        # --signals-to-handle is flowrun run's (torchrun's option), which takes a spec too.
        argv = [self.flowrun, "run", *options, *own, spec] if options else [self.flowrun, spec, *own]
        p = subprocess.Popen(argv, cwd=d, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             start_new_session=True)
        wait_for(lambda: len(processes_with(f"FLOWRUN_RUN_ID={run_id}")) >= 2 or p.poll() is not None,
                 20 * self.slack)
        p.send_signal(sig)
        r = self.finish(label, p, run_dir, start)
        want = f"flowrun: {name} received: stopping step 'train' (SIGTERM, then SIGKILL after 7 s{tail})"
        lines = [line for line in r.stderr.splitlines() if "received: stopping" in line]
        self.check(lines == [want] and r.rc == 128 + sig, f"{label}: exit {128 + sig}, the stop line says what a "
                   "second signal does", f"want {want!r}\n{r.detail()}")

    def test_sigkill(self):
        d, spec, run_dir = self._shell_flow("sigkill")
        run_id = "sigkill-e2e-1"
        p = self.start(spec, run_dir, "--run-id", run_id, stdout=subprocess.DEVNULL)
        before = self._wait_started(p, run_dir, run_id, 3)
        self.check(len(before) >= 3, "sigkill: sh, both sleeps carry the run id before the signal",
                   " ".join(f"{x}:{proc_name(x)}" for x in before))
        p.kill()
        p.wait(timeout=10)
        killed = time.monotonic()
        gone = wait_for(lambda: not processes_with(f"FLOWRUN_RUN_ID={run_id}"), 2.0 * self.slack)
        left = processes_with(f"FLOWRUN_RUN_ID={run_id}")
        self.check(gone, "sigkill: the guardian kills every process carrying the run id within 2 s",
                   f"after {time.monotonic() - killed:.2f} s: " + " ".join(f"{x}:{proc_name(x)}" for x in left))
        p.stderr.close()
        for x in left:
            os.kill(x, signal.SIGKILL)

    @pytest.mark.parametrize("ending", ["succeeds", "fails", "leaves-a-daemon", "sigint"])
    def test_nothing_outlives_flowrun(self, ending):
        """Once flowrun has exited, nothing it started runs, not even its own guardian: an engine that ends a
        node's processes with its task (Slurm's cgroups) or a script that unmounts or removes the directory
        next would otherwise race what is left. flowrun runs under tests/e2e/helpers/reaper.py, a child
        subreaper: every process flowrun leaves, running or exited and not reaped, is handed to it before it
        learns of flowrun's exit, so the list it reports is whole, with no waiting."""
        rank = {"succeeds": "true", "fails": '[ "$RANK" = 1 ] && exit 3; exec sleep 300',
                "leaves-a-daemon": "setsid sleep 300 </dev/null >/dev/null 2>&1 &",
                "sigint": 'touch "ready.$RANK"; exec sleep 300'}[ending]
        d, spec, run_dir = self.workspace(f"outlives-{ending}", f"""name: outlives
steps:
  - name: work
    shell: true
    run: {q(rank)}
    parallel:
      cpus: 2
  - name: after
    join: work
    run: [true]
""")
        report = os.path.join(d, "left.json")
        p = subprocess.Popen([PY, REAPER, report, "--", *self.argv(spec, run_dir, "--grace", "5")], cwd=d,
                             env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        start = time.monotonic()
        if ending == "sigint":
            wait_for(lambda: p.poll() is not None or all(os.path.exists(os.path.join(d, f"ready.{r}"))
                                                         for r in (0, 1)), 20 * self.slack)
            p.send_signal(signal.SIGINT)  # the reaper passes it on to flowrun
        r = self.finish(f"outlives: {ending}", p, run_dir, start)
        want = {"succeeds": 0, "fails": 3, "leaves-a-daemon": 0, "sigint": 130}[ending]
        with open(report) as f:
            left = json.load(f)
        self.check(r.rc == want and left == [], f"outlives: {ending}: flowrun exits {want} and leaves no process, "
                   "its guardian included", f"left: {left}\n{r.detail()}")

    def test_second_sigint(self):
        ready = os.path.join(self.scratch, "second-ready")
        os.makedirs(ready)
        d, spec, run_dir = self.workspace("second_sigint", f"""name: twice
steps:
  - name: train
    run: {argv_yaml("sleep", "300", "--ignore-term", "--ready", ready)}
    parallel:
      cpus: 2
""")
        run_id = "second-sigint-e2e-1"
        start = time.monotonic()
        p = self.start(spec, run_dir, "--run-id", run_id, "--grace", "60")
        wait_for(lambda: len(os.listdir(ready)) >= 2 or p.poll() is not None, 20 * self.slack)
        p.send_signal(signal.SIGINT)
        time.sleep(0.3)
        still = p.poll() is None
        second = time.monotonic()
        p.send_signal(signal.SIGINT)
        r = self.finish("second sigint", p, run_dir, start)
        took = time.monotonic() - second
        self.check(still, "second sigint: workers that ignore SIGTERM keep flowrun waiting after one SIGINT",
                   r.detail())
        self.check(r.rc == 130 and took < 2 * self.slack,
                   "second sigint: a second SIGINT kills at once (not after the 60 s grace), exit 130",
                   f"{took:.2f} s after it\n" + r.detail())
        self.check("flowrun: SIGINT again: killing step 'train' now" in r.stderr, "second sigint: flowrun says so",
                   r.stderr)
        self.check(not processes_with(f"FLOWRUN_RUN_ID={run_id}"), "second sigint: nothing is left")
        res = r.results("train")
        self.check(res["outcome"] == "interrupted" and all(w["signal"] == "SIGKILL" for w in res["ranks"]),
                   "second sigint: results.json says interrupted, the workers SIGKILLed", json.dumps(res)[:1500])

    # --- 5. restarts ------------------------------------------------------

    @pytest.mark.parametrize("max_restarts, want_rc, want_outcomes, report", [
        pytest.param(2, 0, ["failed", "failed", "succeeded"], [], id="max_restarts_2-succeeds"),
        pytest.param(1, 3, ["failed", "failed"], ["failed after 1 restart: rank", "before restart 1: rank"],
                     id="max_restarts_1-fails"),
    ])
    def test_restarts(self, max_restarts, want_rc, want_outcomes, report):
        """Each rank fails until its third attempt (--need 2) with exit code 3."""
        d, spec, run_dir = self.workspace(f"restarts{max_restarts}", f"""name: restarts
steps:
  - name: train
    run: {argv_yaml("restart", "--need", "2", "--code", "3")}
    parallel:
      cpus: 2
      max_restarts: {max_restarts}
""")
        r = self.flowrun_run(f"restarts {max_restarts}", spec, run_dir)
        label = f"restarts: max_restarts: {max_restarts}"
        self.check(r.rc == want_rc, f"{label}: exit {want_rc}", r.detail())
        res = r.results("train")
        attempts = res["attempts"]
        self.check([a["restart_count"] for a in attempts] == list(range(max_restarts + 1))
                   and [a["outcome"] for a in attempts] == want_outcomes and res["restarts"] == max_restarts,
                   f"{label}: results.json shows every attempt with its TORCHELASTIC_RESTART_COUNT",
                   json.dumps([(a["restart_count"], a["outcome"], a["culprit_rank"]) for a in attempts]))
        self.check(all(a["culprit_rank"] in (0, 1) for a in attempts if a["outcome"] == "failed"),
                   f"{label}: each failed attempt has a culprit")
        for k in range(1, max_restarts + 1):
            self.check(f"restarting all 2 workers (restart {k} of {max_restarts})" in r.stderr,
                       f"{label}: flowrun announces restart {k}", r.stderr)
        # The logs hold the last attempt's output.
        last = attempts[-1]["restart_count"]
        self.check(f"attempt {last} of at most {max_restarts} restarts" in r.read("train", "rank0", "stdout.log")
                   or attempts[-1]["outcome"] == "failed",
                   f"{label}: workers see TORCHELASTIC_MAX_RESTARTS={max_restarts}", r.detail())
        for line in report:
            self.check(line in r.stderr, f"{label}: the report tells each attempt ({line!r})", r.stderr)

    # --- 5b. the restart policy: which failures restart, and progress ----

    def policy_run(self, name, ways, policy, max_restarts=2):
        """Rank 1 of 2 ends each attempt as `ways` says (worker.py policy); returns the Run."""
        restart = f"      restart: {policy}\n" if policy is not None else ""
        d, spec, run_dir = self.workspace(name, f"""name: {name}
steps:
  - name: train
    run: {argv_yaml("policy", "--ways", ways)}
    parallel:
      cpus: 2
      max_restarts: {max_restarts}
{restart}""")
        return self.flowrun_run(name, spec, run_dir)

    def attempts_said(self, r):
        """[(cause, restarted, restart_reason)] of results.json's attempts."""
        return [(a["cause"], a["restarted"], a["restart_reason"]) for a in r.results("train")["attempts"]]

    def test_restart_policy_exception_not_restarted(self):
        r = self.policy_run("policy_exception", "raise", "{causes: [signal, exit_code]}")
        label = "restart policy, an exception"
        self.check(r.rc == 1, f"{label}: exit 1, no restart", r.detail())
        said = re.search(r"^flowrun:   not restarting: rank 1 raised ValueError: boom \(worker\.py:\d+\), and "
                         r"restart\.causes leaves out exception$", r.stderr, re.M)
        self.check(said is not None, f"{label}: the report says why it gave up", r.stderr)
        attempts = r.results("train")["attempts"]
        self.check(len(attempts) == 1 and attempts[0]["cause"] == "exception" and not attempts[0]["restarted"]
                   and attempts[0]["exception"]["type"] == "ValueError"
                   and attempts[0]["exception"]["message"] == "boom"
                   and attempts[0]["exception"]["file"] == WORKER
                   and attempts[0]["restart_reason"].endswith("and restart.causes leaves out exception"),
                   f"{label}: results.json records the cause, the exception and the decision",
                   json.dumps(attempts[0])[:1500])

    @pytest.mark.parametrize("ways, policy, max_restarts, want_rc, said, attempts", [
        pytest.param("kill:9,ok", "{causes: [signal, exit_code]}", 2, 0, [
            "flowrun: step 'train' failed (rank 1 was killed by signal 9 (SIGKILL)); restarting all 2 workers "
            "(restart 1 of 2): a signal restarts\n"],
            [("signal", True, "a signal restarts"), (None, False, None)], id="signal_restarted"),
        pytest.param("exit:75,exit:3", "{causes: [signal], exit_codes: [75]}", 2, 3, [
            "(restart 1 of 2): exit code 75 is in restart.exit_codes\n",
            "flowrun:   not restarting: rank 1 exited with code 3, which restart.exit_codes (75) leaves out\n"],
            [("exit_code", True, "exit code 75 is in restart.exit_codes"),
             ("exit_code", False, "rank 1 exited with code 3, which restart.exit_codes (75) leaves out")],
            id="exit_codes"),
        # The file written restarts, the file left alone stops the loop.
        pytest.param("exit:3+touch,exit:3", "{progress_file: progress.txt}", 3, 3, [
            "flowrun:   not restarting: progress_file progress.txt did not change during attempt 1: no progress\n"],
            [("exit_code", True, "an exit code restarts"),
             ("exit_code", False, "progress_file progress.txt did not change during attempt 1: no progress")],
            id="progress_file"),
    ])
    def test_restart_policy(self, request, ways, policy, max_restarts, want_rc, said, attempts):
        """Rank 1 of 2 ends each attempt as `ways` says; restart: `policy` decides, and the console,
        the report and results.json say why."""
        case = request.node.callspec.id
        r = self.policy_run(f"policy_{case}", ways, policy, max_restarts)
        label = f"restart policy, {case}"
        self.check(r.rc == want_rc, f"{label}: exit {want_rc}", r.detail())
        for line in said:
            self.check(line in r.stderr, f"{label}: the console and the report say why ({line.strip()!r})",
                       r.stderr)
        self.check(self.attempts_said(r) == attempts, f"{label}: results.json's attempts",
                   json.dumps(self.attempts_said(r)))

    def test_restart_policy_same_exception(self):
        r = self.policy_run("policy_same", "raise", "{}", 3)
        label = "restart policy, the same exception twice"
        attempts = self.attempts_said(r)
        self.check(r.rc == 1 and len(attempts) == 2 and attempts[0][:2] == ("exception", True)
                   and re.fullmatch(r"rank 1 raised ValueError: boom \(worker\.py:\d+\) again, as in attempt 0: no "
                                    r"progress", attempts[1][2] or "") is not None,
                   f"{label}: one restart, then no progress", json.dumps(attempts) + "\n" + r.detail())
        # Without restart:, torchrun's rule: every failure restarts, the same exception too.
        r = self.policy_run("policy_torchrun", "raise", None, 2)
        attempts = self.attempts_said(r)
        self.check(r.rc == 1 and [a[1] for a in attempts] == [True, True, False]
                   and attempts[0][2] == "every failure restarts"
                   and attempts[2][2] == "its 2 restarts (max_restarts) have run",
                   f"{label}: without restart:, every attempt restarts until max_restarts",
                   json.dumps(attempts) + "\n" + r.detail())

    # --- 6. timeouts ------------------------------------------------------

    def test_timeouts(self):
        d, spec, run_dir = self.workspace("timeout", f"""name: timeouts
steps:
  - name: nap
    run: {argv_yaml("sleep", "60")}
    timeout: 1
""")
        r = self.flowrun_run("timeout", spec, run_dir)
        self.check(r.rc == 124 and r.elapsed < 1 + 1.5 * self.slack,
                   "timeout: timeout: 1 on a sleeping step exits 124 within about a second", r.detail())
        self.check(re.search(r"^flowrun: step 'nap' timed out after 1s; flowrun stopped it \(pid \d+\)$", r.stderr,
                             re.M) is not None, "timeout: the report says it timed out", r.stderr)
        res = r.results("nap")
        self.check(res["outcome"] == "timed_out" and res["exit_code"] == 124 and res["timeout_ms"] == 1000,
                   "timeout: results.json outcome timed_out, timeout_ms 1000", json.dumps(res)[:1500])

        ready = os.path.join(self.scratch, "timeout-ready")
        os.makedirs(ready)
        d, spec, run_dir = self.workspace("timeout_parallel", f"""name: timeouts
steps:
  - name: train
    run: {argv_yaml("sleep", "60", "--ignore-term", "--ready", ready)}
    timeout: 1.5s
    parallel:
      cpus: 2
""")
        launched = time.time()
        r = self.flowrun_run("timeout parallel", spec, run_dir, "--grace", "1")
        self.check(r.rc == 124 and r.elapsed < 2.5 + 1.5 * self.slack,
                   "timeout: a parallel step ends within timeout + grace", r.detail())
        # On a busy machine a worker may not have started ignoring SIGTERM by
        # the time the step times out; when both had, the grace was needed.
        marks = [os.path.join(ready, f"ready.{k}") for k in range(2)]
        if all(os.path.exists(m) and os.path.getmtime(m) < launched + 1.2 for m in marks):
            self.check(r.elapsed >= 2.4 and all(w["signal"] == "SIGKILL" for w in r.results("train")["ranks"]),
                       "timeout: workers that ignore SIGTERM are SIGKILLed after the grace", r.detail())
        self.check("flowrun: step 'train' timed out after 1.5s; flowrun stopped ranks 0, 1\n" in r.stderr,
                   "timeout: the report names the stopped ranks", r.stderr)
        res = r.results("train")
        self.check(res["outcome"] == "timed_out" and res["culprit_rank"] is None
                   and all(w["role"] == "victim" for w in res["ranks"]),
                   "timeout: no culprit, every rank a victim", json.dumps(res["ranks"])[:1500])

    # --- 6b. hangs: stall_timeout, and a timeout names the ranks that look hung

    def no_process_left(self, label, run_id):
        left = wait_for(lambda: not processes_with(f"FLOWRUN_RUN_ID={run_id}"), 5 * self.slack) or \
            processes_with(f"FLOWRUN_RUN_ID={run_id}")
        self.check(left is True, f"{label}: no process of the run is left",
                   "" if left is True else ", ".join(f"{p} ({proc_name(p)})" for p in left))

    def test_stacks_py_spy_too_slow(self):
        # A py-spy that never ends (FLOWRUN_PY_SPY): flowrun waits its 3 s for the
        # stacks, kills it, records both stacks as missing and stops the ranks.
        fake = os.path.join(self.scratch, "slow-py-spy")
        sleep = f"sleep 61.{os.getpid()}"  # the fake's command line once it has exec'ed, unique
        with open(fake, "w") as f:
            f.write(f"#!/bin/sh\nexec {sleep}\n")
        os.chmod(fake, 0o755)
        run_id = f"slowspy-{os.getpid()}"
        d, spec, run_dir = self.workspace("slowspy", """name: slowspy
steps:
  - name: train
    run: sleep 60
    stall_timeout: 1
    parallel:
      cpus: 2
""")
        r = self.flowrun_run("slow py-spy", spec, run_dir, "--run-id", run_id, env={"FLOWRUN_PY_SPY": fake})
        self.check(r.rc == 124 and 4.0 <= r.elapsed < 4 + 1.5 * self.slack,
                   "slow py-spy: the stall stops the step once the 3 s for the stacks are up", r.detail())
        stacks = r.results("train")["stacks"]
        self.check(stacks == {"source": "py-spy", "groups": [
            {"ranks": [0, 1], "where": None, "missing": "py-spy did not finish within 3 s"}]},
            "slow py-spy: results.json: both stacks missing, and why", json.dumps(stacks))
        self.check("flowrun:   ranks 0, 1: no stack (py-spy did not finish within 3 s)\n" in r.stderr,
                   "slow py-spy: the report says so", r.stderr)
        with open(os.path.join(run_dir, "train", "rank1", "stack.txt")) as f:
            text = f.read()
        self.check(text == "(no stack: py-spy did not finish within 3 s)\n", "slow py-spy: rank 1's stack.txt says why",
                   text)
        left = subprocess.run(["pgrep", "-f", sleep], capture_output=True, text=True).stdout.split()
        self.check(not left, "slow py-spy: the py-spy processes were killed", " ".join(left))
        self.no_process_left("slow py-spy", run_id)

    def test_sampler_runs_on_idle_cpu(self):
        # The slow-rank sampler's py-spy runs under SCHED_IDLE (nice 19 where the kernel refuses it), set before
        # its exec: only on CPU time the ranks leave idle. The py-spy (FLOWRUN_PY_SPY) records how it was
        # scheduled; once it has been run four times it lets the ranks end.
        log, stop = os.path.join(self.scratch, "spy.log"), os.path.join(self.scratch, "spy.stop")
        fake = os.path.join(self.scratch, "recording-py-spy")
        with open(fake, "w") as f:
            f.write(f"""#!/bin/sh
policy=$(chrt -p $$ | sed -n 's/.*scheduling policy: //p')
echo "$policy $(ps -o ni= -p $$ | tr -d ' ') $*" >> {shlex.quote(log)}
[ "$(wc -l < {shlex.quote(log)})" -ge 4 ] && : > {shlex.quote(stop)}
printf 'Thread %s (idle): "MainThread"\n    wait (rank.py:1)\n' $$
""")
        os.chmod(fake, 0o755)
        rank = f"import os, time\nwhile not os.path.exists({stop!r}):\n    time.sleep(0.02)\n"
        d, spec, run_dir = self.workspace("idlespy", f"""name: idlespy
steps:
  - name: train
    run: [{", ".join(q(w) for w in (PY, "-c", rank))}]
    forensics: {{sample: 0.2s}}
    parallel:
      cpus: 2
""")
        r = self.flowrun_run("idle py-spy", spec, run_dir, env={"FLOWRUN_PY_SPY": fake})
        self.check(r.rc == 0, "idle py-spy: the step ends once the ranks have been sampled", r.detail())
        with open(log) as f:
            calls = [line.split(" ", 2) for line in f.read().splitlines()]
        # ps shows no nice for SCHED_IDLE ("-").
        idle_allowed = subprocess.run(["chrt", "--idle", "0", "true"], capture_output=True).returncode == 0
        want = ["SCHED_IDLE", "-"] if idle_allowed else ["SCHED_OTHER", "19"]
        self.check(len(calls) >= 4 and all(c[:2] == want and c[2].startswith("dump --nonblocking ") for c in calls),
                   f"idle py-spy: every sample's py-spy ran as {want[0]}{'' if idle_allowed else ', nice 19'}",
                   json.dumps(calls))

    def test_stacks_as_an_ordinary_user(self):
        """py-spy takes the ranks' stacks for a user without CAP_SYS_PTRACE: nobody when this runs as root
        (runuser), else this user. py-spy is a sibling of the rank it attaches to: both are flowrun's children.
        Without Yama (no /proc/sys/kernel/yama/ptrace_scope, as on the machine this test was written on) and
        under its ptrace_scope 0, the kernel lets a process trace another of its own user that is dumpable, as a
        rank is. Under ptrace_scope 1 only an ancestor may, or the tracer a process names and its descendants:
        each rank names flowrun (PR_SET_PTRACER), so py-spy, flowrun's child, may attach. ptrace_scope 2 and 3
        let no ordinary user attach: skipped."""
        scope_file = "/proc/sys/kernel/yama/ptrace_scope"
        scope = None
        if os.path.exists(scope_file):
            with open(scope_file) as f:
                scope = f.read().strip()
            if scope not in ("0", "1"):
                pytest.skip(f"kernel.yama.ptrace_scope is {scope}: no ordinary user may attach")
        found = py_spy()
        if found is None:
            pytest.skip("no py-spy (FLOWRUN_PY_SPY, build/py-spy from scripts/test --phase deps, or PATH)")
        prefix, user = [], "this user"
        if os.geteuid() == 0:
            if shutil.which("runuser") is None:
                pytest.skip("root without runuser: cannot run flowrun as a user without CAP_SYS_PTRACE")
            prefix, user = ["runuser", "-u", "nobody", "--"], "nobody"
            for path in (self.flowrun, found):
                if subprocess.run(prefix + ["test", "-x", path]).returncode != 0:
                    pytest.skip(f"nobody cannot run {path}: its directories must be open to other users")
        else:
            with open("/proc/self/status") as f:
                caps = int(re.search(r"^CapEff:\s*([0-9a-f]+)$", f.read(), re.M).group(1), 16)
            if caps & (1 << 19):
                pytest.skip("this user has CAP_SYS_PTRACE and is not root: no user without it to run as")
        # As /tmp is: nobody makes the run directory, no one may swap it.
        with temp_dir("flowrun-ptrace-", mode=0o1777) as d:
            spec = os.path.join(d, "spec.yaml")
            with open(spec, "w") as f:
                f.write("name: ptrace\nsteps:\n  - name: train\n    run: \"python3 -c 'while True: pass'\"\n"
                        "    stall_timeout: 1\n    parallel:\n      cpus: 2\n")
            os.chmod(spec, 0o644)
            run_dir = os.path.join(d, "run")
            env = clean_env(FLOWRUN_PY_SPY=found, HOME=d)
            p = subprocess.run(prefix + [self.flowrun, spec, "--run-dir", run_dir], cwd=d, env=env,
                               capture_output=True, text=True, timeout=60)
            try:
                owner = os.stat(run_dir).st_uid
                with open(os.path.join(run_dir, "train", "results.json")) as f:
                    stacks = json.load(f)["stacks"]
                texts = []
                for r in range(2):
                    with open(os.path.join(run_dir, "train", f"rank{r}", "stack.txt")) as f:
                        texts.append(f.read())
            except (OSError, ValueError) as e:
                owner, stacks, texts = None, str(e), []
        where = "no Yama" if scope is None else f"ptrace_scope {scope}"
        self.check(owner == (65534 if prefix else os.geteuid()), f"ptrace: flowrun ran as {user}",
                   f"run directory owner {owner}")
        self.check(p.returncode == 124 and isinstance(stacks, dict) and stacks["source"] == "py-spy"
                   and sorted(r for g in stacks["groups"] for r in g["ranks"]) == [0, 1]
                   and all((g["where"] or "").startswith("<module> (<string>:") for g in stacks["groups"]),
                   f"ptrace: py-spy took both ranks' stacks as {user} ({where})",
                   f"{json.dumps(stacks)}\n{p.stderr[-3000:]}")
        self.check(len(texts) == 2 and all(t.startswith("Process ") and "\nThread " in t for t in texts),
                   "ptrace: each rank's stack.txt holds py-spy's dump", "\n".join(texts))

    @pytest.mark.parametrize("forensics, stops, within, stacks, unsaid", [
        # The py-spy that never ends (FLOWRUN_PY_SPY) is killed after 1 s, not 3.
        pytest.param("{timeout: 1s}", "once its 1 s for the stacks is up", (2.0, 2.0),
                     {"source": "py-spy", "groups": [{"ranks": [0, 1], "where": None,
                                                      "missing": "py-spy did not finish within 1 s"}]}, [],
                     id="timeout"),
        # No py-spy at all: the ranks are stopped at once.
        pytest.param("off", "at once", (0.0, 1.0), None, ["py-spy", "no stack"], id="off"),
    ])
    def test_forensics_stacks(self, request, forensics, stops, within, stacks, unsaid):
        label = f"forensics {request.node.callspec.id}"
        fake = os.path.join(self.scratch, "slow-py-spy-forensics")
        sleep = f"sleep 62.{os.getpid()}"
        with open(fake, "w") as f:
            f.write(f"#!/bin/sh\nexec {sleep}\n")
        os.chmod(fake, 0o755)
        d, spec, run_dir = self.workspace(label.replace(" ", "_"), f"""name: forensics
steps:
  - name: train
    run: sleep 60
    stall_timeout: 1
    forensics: {forensics}
    parallel:
      cpus: 2
""")
        r = self.flowrun_run(label, spec, run_dir, env={"FLOWRUN_PY_SPY": fake})
        self.check(r.rc == 124 and within[0] <= r.elapsed < within[1] + 1.5 * self.slack,
                   f"{label}: the stall stops the step {stops}", r.detail())
        got = r.results("train")["stacks"]
        self.check(got == stacks, f"{label}: results.json's stacks", json.dumps(got))
        for words in unsaid:
            self.check(words not in r.stderr, f"{label}: no word of the stacks ({words!r})", r.stderr)
        left = subprocess.run(["pgrep", "-f", sleep], capture_output=True, text=True).stdout.split()
        self.check(not left, f"{label}: no py-spy is left", " ".join(left))

    def test_forensics_nccl(self):
        # forensics: nccl: each rank gets the flight recorder's variables and "dumps" as
        # ProcessGroupNCCL's watchdog does on a timeout, to $TORCH_NCCL_DEBUG_INFO_TEMP_FILE$RANK;
        # then rank 1 fails, in both attempts (max_restarts: 1).
        ready = os.path.join(self.scratch, "nccl-ready")
        script = ('env | grep -E "^(TORCH_)?NCCL_" | sort > "$TORCH_NCCL_DEBUG_INFO_TEMP_FILE$RANK"; '
                  'd="$0/$TORCHELASTIC_RESTART_COUNT"; mkdir -p "$d"; touch "$d/$RANK"; '
                  'if [ "$RANK" = 1 ]; then while [ "$(ls "$d" | wc -l)" -lt 2 ]; do sleep 0.02; done; exit 3; fi; '
                  'exec sleep 30')
        d, spec, run_dir = self.workspace("nccl", f"""name: nccl
steps:
  - name: train
    run: {json.dumps(["/bin/sh", "-c", script, ready])}
    forensics: nccl
    parallel:
      cpus: 2
      max_restarts: 1
""")
        r = self.flowrun_run("nccl", spec, run_dir)
        self.check(r.rc == 3, "nccl: the step fails with rank 1's code", r.detail())
        train = os.path.join(run_dir, "train")
        for rank in (0, 1):
            for attempt, path in [(0, f"rank{rank}/attempt0/nccl_trace_rank_{rank}"),
                                  (1, f"rank{rank}/nccl_trace_attempt1_rank_{rank}")]:
                prefix = os.path.join(train, f"rank{rank}", "nccl_trace_rank_" if attempt == 0 else
                                      "nccl_trace_attempt1_rank_")
                want = ["NCCL_ASYNC_ERROR_HANDLING=3", "TORCH_NCCL_ASYNC_ERROR_HANDLING=3",
                        f"TORCH_NCCL_DEBUG_INFO_TEMP_FILE={prefix}", "TORCH_NCCL_DUMP_ON_TIMEOUT=1",
                        "TORCH_NCCL_TRACE_BUFFER_SIZE=2000"]
                got = r.read("train", *path.split("/")).splitlines() if os.path.isfile(os.path.join(train, path)) \
                    else None
                self.check(got == want, f"nccl: rank {rank}'s dump of attempt {attempt} is {path}, made with "
                           "the flight recorder's variables", str(got))
        res = r.results("train")
        self.check([w["nccl_trace"] for w in res["ranks"]] ==
                   [os.path.join(train, f"rank{k}", f"nccl_trace_attempt1_rank_{k}") for k in (0, 1)]
                   and [w["nccl_trace"] for w in res["attempts"][0]["workers"]] ==
                   [os.path.join(train, f"rank{k}", "attempt0", f"nccl_trace_rank_{k}") for k in (0, 1)],
                   "nccl: results.json names each attempt's dumps, the first one's kept in attempt0/",
                   json.dumps(res["attempts"])[:3000])
        line = (f"flowrun:   NCCL flight recorder dumps of ranks 0, 1: {train}/rank*/nccl_trace_attempt1_rank_*; "
                "read them with: python -m torch.distributed.flight_recorder.fr_trace -p nccl_trace_attempt1_rank_ "
                f"{train}\n")
        self.check(line in r.stderr, "nccl: the report names the dumps and fr_trace's command", r.stderr)

    def test_stall_timeout(self):
        # Rank 1 stops itself (SIGSTOP) and rank 2 sleeps, both without a word;
        # rank 0 writes a line every 0.1 s. The grace is long: only the SIGCONT
        # that follows the SIGTERM ends the stopped rank in time.
        run_id = f"stall-{os.getpid()}"
        d, spec, run_dir = self.workspace("stall", f"""name: stall
steps:
  - name: train
    run: {argv_yaml("hang", "--stop", "1", "--silent", "2")}
    stall_timeout: 2
    parallel:
      cpus: 3
  - name: check
    join: train
    run: {argv_yaml("argv", "joined")}
""")
        r = self.flowrun_run("stall", spec, run_dir, "--grace", "20", "--run-id", run_id)
        self.check(r.rc == 124, "stall: a stall exits 124, as a timeout does", r.detail())
        self.check(2.0 <= r.elapsed < 2 + 1.5 * self.slack,
                   "stall: the step ends right after stall_timeout (the stopped rank got its SIGTERM, not the "
                   "SIGKILL after the 20 s grace)", r.detail())
        # Both silent since the start: named together, at 2 s plus the stall check's delay.
        line = re.compile(r"^flowrun: step 'train' stalled: rank 1 \(stopped\) wrote nothing for ([0-9]\.[0-9]) s, "
                          r"rank 2 for \1 s \(stall_timeout: 2s\); stopping the step$", re.M)
        said = line.findall(r.stderr)
        self.check(len(said) == 1 and 2.0 <= float(said[0]) < 2 + 0.5 * self.slack,
                   "stall: one console line names both silent ranks, how long, and that rank 1 is stopped", r.stderr)
        report = re.compile(r"^flowrun: step 'train' stalled: rank 1 \(stopped\) wrote nothing for ([0-9]\.[0-9]) s, "
                            r"rank 2 for \1 s \(stall_timeout: 2s\); flowrun stopped ranks 0-2\n"
                            + STOPPED_RANK_1 + rf"flowrun:   logs: {re.escape(run_dir)}/train\n"
                            r"flowrun: a retry may help \(timeout\): a rank wrote nothing for the step's "
                            r"stall_timeout \(a hang\): .*\n"
                            r"flowrun: step 'check' skipped: it needs 'train', which did not succeed\n"
                            rf"flowrun: the run as one page: {re.escape(run_dir)}/report.html\n"
                            rf"flowrun: run {re.escape(run_id)} failed after [0-9.]+ s \(exit code 124\): failed "
                            r"'train'; not run 'check'\n\Z", re.M)
        self.check(report.search(r.stderr) is not None,
                   "stall: the report names the stalled ranks, the join does not run", r.stderr)
        res = r.results("train")
        ranks = res["ranks"]
        self.check(res["outcome"] == "stalled" and res["exit_code"] == 124 and res["stall_timeout_ms"] == 2000
                   and res["timeout_ms"] is None and res["culprit_rank"] is None,
                   "stall: results.json: outcome stalled, exit code 124, stall_timeout_ms", json.dumps(res)[:1500])
        self.check([(w["stalled"], w["suspended"]) for w in ranks] == [(False, False), (True, True), (True, False)]
                   and ranks[0]["silent_ms"] < 1000
                   and all(2000 <= w["silent_ms"] < 2000 + 500 * self.slack for w in ranks[1:]),
                   "stall: results.json marks ranks 1 and 2 stalled with their silence, rank 1 stopped",
                   json.dumps(ranks)[:3000])
        self.check(all(w["role"] == "victim" and w["signal"] == "SIGTERM" for w in ranks),
                   "stall: every rank was stopped by SIGTERM", json.dumps(ranks)[:3000])
        self.check("[train r0] rank 0 beat 0\n" in r.stdout and "[check]" not in r.stdout,
                   "stall: rank 0's lines reach the console; the join never ran", r.stdout[-2000:])
        self.no_process_left("stall", run_id)

    def test_timeout_names_hung_ranks(self):
        run_id = f"hung-{os.getpid()}"
        d, spec, run_dir = self.workspace("timeout_hung", f"""name: hung
steps:
  - name: train
    run: {argv_yaml("hang", "--stop", "1", "--say")}
    timeout: 3
    parallel:
      cpus: 2
""")
        r = self.flowrun_run("timeout hung", spec, run_dir, "--grace", "20", "--run-id", run_id)
        self.check(r.rc == 124 and 3.0 <= r.elapsed < 3 + 1.5 * self.slack,
                   "timeout hung: exit 124 right after the timeout (the stopped rank got its SIGTERM)", r.detail())
        # Rank 1 wrote its line as it started (how long after the step's start depends on
        # the machine's load); rank 0 wrote one a moment ago.
        expected = re.compile(r"^flowrun: step 'train' timed out after 3s; flowrun stopped ranks 0, 1\n"
                              r"flowrun:   rank 1 \(stopped\) wrote nothing for the last [0-9]\.[0-9] s\n"
                              + STOPPED_RANK_1 + rf"flowrun:   logs: {re.escape(run_dir)}/train\n", re.M)
        self.check(expected.search(r.stderr) is not None,
                   "timeout hung: the report names the stopped rank and how long it was silent, not rank 0",
                   r.stderr)
        ranks = r.results("train")["ranks"]
        self.check(r.results("train")["outcome"] == "timed_out"
                   and [(w["suspended"], w["stalled"], w["signal"]) for w in ranks] ==
                   [(False, False, "SIGTERM"), (True, False, "SIGTERM")]
                   and ranks[0]["silent_ms"] < 1000 and 3000 - 1000 * self.slack <= ranks[1]["silent_ms"]
                   <= 3000 + 100 * self.slack,
                   "timeout hung: results.json: rank 1 suspended, with its silence; both ended by SIGTERM",
                   json.dumps(ranks)[:3000])
        self.check("[train r1] rank 1 stops itself\n" in r.stdout, "timeout hung: rank 1's line was shown",
                   r.stdout[-2000:])
        self.no_process_left("timeout hung", run_id)

    # --- 6c. the run directory's disk is full ------------------------------

    def check_not_claimed(self, label, r, run_dir):
        """results.json and run.json, where they could be written, do not say the step succeeded."""
        path = os.path.join(r.run_dir, "train", "results.json")
        if os.path.exists(path):
            self.check(r.results("train")["outcome"] == "failed", f"{label}: results.json says the step failed",
                       r.read("train", "results.json")[:1500])
        else:
            self.check(f"flowrun: error: step 'train': cannot write results.json in {run_dir}/train: No space "
                       "left on device; its results are not recorded (free space there, then: flowrun resume "
                       f"{run_dir})\n" in r.stderr,
                       f"{label}: without room for results.json flowrun says it is missing", r.stderr)
        if os.path.exists(os.path.join(r.run_dir, "run.json")):
            run = json.loads(r.read("run.json"))
            self.check(run["steps"]["train"] != "succeeded" and run["steps"]["check"] != "succeeded"
                       and run["exit_code"] != 0, f"{label}: run.json claims no success", json.dumps(run))

    def test_disk_full_logs(self):
        run_id = f"full-{os.getpid()}"
        d, spec, run_dir = self.workspace("disk_full_logs", f"""name: full
steps:
  - name: train
    run: {argv_yaml("flood", "2000", "--forever")}
    parallel:
      cpus: 2
  - name: check
    join: train
    run: {argv_yaml("argv", "joined")}
""")
        r = self.tmpfs_run("disk full (logs)", spec, run_dir, "4m", "--run-id", run_id, "--grace", "5")
        if r is None:
            return
        label = "disk full (logs)"
        self.check(r.rc == 1, f"{label}: flowrun exits 1", r.detail())
        said = re.findall(rf"^flowrun: error: step 'train': cannot write rank ([01])'s (stdout)\.log in "
                          rf"{re.escape(run_dir)}/train/rank\1: No space left on device; stopping the step "
                          rf"\(free space there, then: flowrun resume {re.escape(run_dir)}\)$", r.stderr, re.M)
        self.check(len(said) == 1 and r.stderr.count("cannot write rank") == 2,
                   f"{label}: flowrun says once which log it cannot write, and stops the step", r.stderr)
        if said:
            rank = said[0][0]
            self.check(f"flowrun: step 'train' failed: cannot write rank {rank}'s stdout.log in {run_dir}/train/"
                       f"rank{rank}: No space left on device\nflowrun:   stopped by flowrun: ranks 0, 1\n"
                       in r.stderr, f"{label}: the report's headline says why the step failed", r.stderr)
        self.check("flowrun: step 'check' skipped: it needs 'train', which did not succeed\n" in r.stderr
                   and "[check]" not in r.stdout, f"{label}: the join never runs", r.detail())
        self.check(re.search(r"failed after [0-9.]+ s \(exit code 1\): failed 'train'; not run 'check'\n\Z",
                             r.stderr) is not None, f"{label}: the last line sums up the run", r.stderr[-1000:])
        # The console showed every line whole (but a rank's last, which SIGTERM
        # may have cut), and more of them than the logs hold.
        lines = r.stdout.split("\n")[:-1]
        bad = [x for x in lines if not re.match(r"\[train r[01]\] ", x)]
        for k in (0, 1):
            mine = [x[len(f"[train r{k}] "):] for x in lines if x.startswith(f"[train r{k}] ")]
            bad += [x for x in mine[:-1] if not re.fullmatch(rf"rank {k} line \d+ x*", x)]
            if mine and not (re.fullmatch(rf"rank {k} line \d+( x*)?", mine[-1])
                             or f"rank {k} line ".startswith(mine[-1])):
                bad.append(mine[-1])
        self.check(not bad, f"{label}: every console line is whole and prefixed", "\n".join(bad[:5]))
        shown = {k: sum(1 for x in lines if x.startswith(f"[train r{k}] ")) for k in (0, 1)}
        logged = {k: r.read("train", f"rank{k}", "stdout.log").count("\n") for k in (0, 1)}
        self.check(all(shown[k] >= logged[k] for k in (0, 1)) and any(shown[k] > logged[k] for k in (0, 1)),
                   f"{label}: the console kept showing the ranks' output after the logs stopped",
                   f"shown {shown}, logged {logged}")
        self.check_not_claimed(label, r, run_dir)
        self.no_process_left(label, run_id)

    def test_disk_full_outputs(self):
        run_id = f"fullout-{os.getpid()}"
        d, spec, run_dir = self.workspace("disk_full_outputs", f"""name: fullout
steps:
  - name: train
    shell: true
    run: head -c 3145728 /dev/zero > "big-$RANK.bin"
    outputs: [big-*.bin]
    collect: all
    parallel:
      cpus: 2
  - name: check
    join: train
    run: {argv_yaml("argv", "joined")}
""")
        r = self.tmpfs_run("disk full (outputs)", spec, run_dir, "4m", "--run-id", run_id)
        if r is None:
            return
        label = "disk full (outputs)"
        self.check(r.rc == 1, f"{label}: flowrun exits 1", r.detail())
        said = re.compile(rf"^flowrun: error: step 'train': cannot gather its outputs: cannot copy "
                          rf"{re.escape(d)}/big-([01])\.bin to {re.escape(run_dir)}/train/outputs/big-\1\.bin: No "
                          rf"space left on device; the step counts as failed \(free space there, then: flowrun "
                          rf"resume {re.escape(run_dir)}\)$", re.M)
        self.check(len(said.findall(r.stderr)) == 1, f"{label}: flowrun says which output it cannot gather",
                   r.stderr)
        self.check("flowrun: step 'check' skipped: it needs 'train', which did not succeed\n" in r.stderr
                   and "[check]" not in r.stdout and "succeeded in" not in r.stderr,
                   f"{label}: the step does not succeed and the join never runs", r.detail())
        res_path = os.path.join(r.run_dir, "train", "results.json")
        if self.check(os.path.exists(res_path), f"{label}: results.json is written (the partial copy was removed)",
                      r.detail()):
            res = r.results("train")
            self.check(res["outcome"] == "failed" and res["exit_code"] == 1
                       and any(n.startswith("cannot gather the outputs: cannot copy ") for n in res["notes"]),
                       f"{label}: results.json says failed, and why", json.dumps(res)[:2000])
        self.check_not_claimed(label, r, run_dir)
        self.no_process_left(label, run_id)

    # --- 7. concurrent flowruns -------------------------------------------

    def test_concurrent(self):
        runs = []
        listening = os.path.join(self.scratch, "concurrent-listening")
        os.makedirs(listening)  # every rank 0 holds its MASTER_PORT until all ten do: the runs overlap
        for k in range(10):
            d, spec, run_dir = self.workspace(f"concurrent{k}", f"""name: store
steps:
  - name: train
    run: {argv_yaml("store", "--together", listening, "10")}
    parallel:
      cpus: 2
""")
            runs.append((spec, run_dir))
        results = [None] * len(runs)

        def one(k):
            spec, run_dir = runs[k]
            results[k] = self.flowrun_run(f"concurrent {k}", spec, run_dir, timeout=120)
        threads = [threading.Thread(target=one, args=(k,)) for k in range(len(runs))]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        failed = [k for k, r in enumerate(results) if r is None or r.rc != 0]
        self.check(not failed, "concurrent: ten flowruns whose rank 0 listens on MASTER_PORT all succeed",
                   "\n".join(results[k].detail() if results[k] else f"run {k} raised" for k in failed[:2]))
        ports = [r.results("train")["attempts"][0]["master_port"] for r in results if r and r.rc == 0]
        self.check(len(set(ports)) == len(ports), "concurrent: each run had its own MASTER_PORT", str(ports))

    # --- 8. a 100 MB line -------------------------------------------------

    def test_long_line(self):
        mib = 100
        d, spec, run_dir = self.workspace("long_line", f"""name: big
steps:
  - name: big
    run: {argv_yaml("bigline", str(mib), "--hold", "1")}
    parallel:
      cpus: 1
""")
        console = os.path.join(d, "console.out")
        hwm = [0]
        start = time.monotonic()
        with open(console, "wb") as out:
            p = self.start(spec, run_dir, stdout=out)
            while p.poll() is None:
                try:
                    with open(f"/proc/{p.pid}/status") as f:
                        for line in f:
                            if line.startswith("VmHWM:"):
                                hwm[0] = max(hwm[0], int(line.split()[1]))
                except OSError:
                    pass
                time.sleep(0.05)
            r = self.finish("long line", p, run_dir, start)
        self.check(r.rc == 0, "long line: the step succeeds", r.detail())
        if not self.sanitized:
            self.check(0 < hwm[0] < 30 * 1024, "long line: flowrun's peak RSS stays under 30 MiB",
                       f"VmHWM {hwm[0]} KiB")
        log = os.path.join(run_dir, "big", "rank0", "stdout.log")
        size = os.path.getsize(log) if os.path.exists(log) else -1
        intact = size == mib << 20
        if intact:
            pattern = b"0123456789abcdef" * 65536
            with open(log, "rb") as f:
                while intact:
                    chunk = f.read(len(pattern))
                    if not chunk:
                        break
                    intact = chunk == pattern
        self.check(intact, "long line: stdout.log holds all 100 MiB, byte for byte", f"size {size}")
        # On the console the line is cut into prefixed pieces; together they are the line.
        mark = "\u21aa ".encode()
        total, pieces, bad = 0, 0, []
        with open(console, "rb") as f:
            for n, line in enumerate(f):
                if not line.startswith(b"[big r0] "):
                    bad.append(line[:80])
                    continue
                body = line[len(b"[big r0] "):].rstrip(b"\n")
                if n > 0:
                    if not body.startswith(mark):
                        bad.append(line[:80])
                    body = body[len(mark):]
                total += len(body)
                pieces += 1
        self.check(not bad and total == mib << 20 and pieces > 1,
                   "long line: the console shows it as prefixed pieces marked as continued, nothing lost",
                   f"{pieces} pieces, {total} bytes, bad: {bad[:3]}")
        os.unlink(console)
        shutil.rmtree(run_dir, ignore_errors=True)

    # --- 9. outputs and the join ------------------------------------------

    @pytest.mark.parametrize("collect, want, kept", [
        pytest.param("rank0", ["ckpt/model.pt", "private/rank0.txt"],
                     ("private/rank0.txt", "private file of rank 0\n"), id="rank0"),
        pytest.param("all", ["ckpt/model.pt"] + [f"rank{k}/private/rank{k}.txt" for k in range(3)],
                     ("rank2/private/rank2.txt", "private file of rank 2\n"), id="all"),
    ])
    def test_outputs(self, collect, want, kept):
        d, spec, run_dir = self.workspace(f"outputs_{collect}", f"""name: outs
steps:
  - name: train
    run: {argv_yaml("outputs")}
    parallel:
      cpus: 3
    outputs: ["ckpt/*.pt"]
    collect: {collect}
  - name: check
    join: train
    shell: true
    run: |
      cat ${{steps.train.outputs}}/ckpt/model.pt
      cd "$FLOWRUN_INPUTS" && find . -type f | sort
""")
        r = self.flowrun_run(f"outputs {collect}", spec, run_dir)
        outputs = os.path.join(run_dir, "train", "outputs")
        files = sorted(os.path.relpath(os.path.join(a, n), outputs) for a, _, ns in os.walk(outputs) for n in ns)
        self.check(r.rc == 0 and files == want,
                   f"outputs: collect: {collect} gathers the glob match and the right FLOWRUN_OUTPUT_DIR files",
                   f"{files}\n{r.detail()}")
        self.check("[check] weights of rank 0\n" in r.stdout
                   and "".join(f"[check] ./{w}\n" for w in want) in r.stdout,
                   f"outputs: collect: {collect}: the join reads them at ${{steps.train.outputs}}", r.stdout)
        if files == want:
            self.check(open(os.path.join(outputs, kept[0])).read() == kept[1],
                       "outputs: a rank's file keeps its content")
        self.check(not os.path.exists(os.path.join(outputs, "metrics")),
                   "outputs: files outside the globs and FLOWRUN_OUTPUT_DIR are not gathered", str(files))

    def test_outputs_stale(self):
        # A stale output: there before the step, not written by it.
        d, spec, run_dir = self.workspace("outputs_stale", f"""name: stale
steps:
  - name: train
    run: {argv_yaml("outputs")}
    parallel:
      cpus: 2
    outputs: ["ckpt/*.pt", "old/result.bin"]
  - name: check
    join: train
    run: {argv_yaml("argv", "never")}
""")
        os.makedirs(os.path.join(d, "old"))
        old = os.path.join(d, "old", "result.bin")
        with open(old, "w") as f:
            f.write("from an earlier run\n")
        os.utime(old, (time.time() - 3600, time.time() - 3600))
        r = self.flowrun_run("outputs stale", spec, run_dir)
        self.check(r.rc == 1, "outputs: a declared output that is stale makes flowrun exit 1", r.detail())
        self.check(f"step 'train': output 'old/result.bin' matches no file written during the step in {d}. "
                   f"A file there predates the step and is not collected: {old} (written " in r.stderr
                   and "flowrun: step 'train': its workers succeeded, but its outputs are incomplete:\n" in r.stderr,
                   "outputs: the message names the stale file", r.stderr)
        self.check("[check]" not in r.stdout and "step 'check' skipped: it needs 'train', which did not succeed"
                   in r.stderr, "outputs: the join does not run", r.detail())
        res = r.results("train")
        self.check(res["outcome"] == "failed" and res["exit_code"] == 1
                   and any("old/result.bin" in n for n in res["notes"]),
                   "outputs: results.json says failed, exit code 1, and why", json.dumps(res)[:1500])

    # --- 10. logs ---------------------------------------------------------

    def test_flood(self):
        n = 20000
        d, spec, run_dir = self.workspace("flood", f"""name: flood
steps:
  - name: flood
    run: {argv_yaml("flood", str(n), "--no-newline")}
    parallel:
      cpus: 4
""")
        r = self.flowrun_run("flood", spec, run_dir)
        self.check(r.rc == 0, "flood: the step succeeds", r.detail())
        seen, bad = {k: 0 for k in range(4)}, []
        line_re = re.compile(r"^\[flood r(\d)\] rank (\d) line (\d+) (x*)$")
        for line in r.stdout.split("\n")[:-1]:
            m = line_re.match(line)
            if not m or m.group(1) != m.group(2) or int(m.group(3)) != seen.get(int(m.group(1)), -1) \
                    or len(m.group(4)) != int(m.group(3)) % 173:
                bad.append(line[:120])
                continue
            seen[int(m.group(1))] += 1
        self.check(not bad and all(v == n for v in seen.values()) and r.stdout.endswith("\n"),
                   "flood: 4 ranks x 20000 lines: every console line whole, prefixed, in order, none lost",
                   f"{seen} bad: {bad[:5]}")
        self.check(all(f"[flood r{k}] rank {k} line {n - 1} " in r.stdout for k in range(4)),
                   "flood: a last line without a newline is shown")
        for k in range(4):
            text = r.read("flood", f"rank{k}", "stdout.log")
            want = "\n".join(f"rank {k} line {i} " + "x" * (i % 173) for i in range(n))
            self.check(text == want, f"flood: rank {k}'s stdout.log is exactly what it wrote", text[-200:])

    def flood_into(self, name, n, reader, *options):
        """4 ranks write `n` lines each into flowrun's stdout, a pipe that `reader(pipe)` reads (it returns
        what it read); returns (exit code, what was read, stderr)."""
        d, spec, run_dir = self.workspace(name, f"""name: {name}
steps:
  - name: flood
    run: {argv_yaml("flood", str(n))}
    parallel:
      cpus: 4
""")
        with open(os.path.join(d, "err"), "wb") as err_file:
            p = subprocess.Popen(self.argv(spec, run_dir, *options), cwd=d, env=clean_env(),
                                 stdout=subprocess.PIPE, stderr=err_file, start_new_session=True)
            out = reader(p)
            rc = p.wait(timeout=60)
            p.stdout.close()
        with open(os.path.join(d, "err"), errors="replace") as f:
            err = f.read()
        self.sanitizer_check(name, err)
        return rc, out.decode(errors="replace"), err

    def test_console_slow_reader(self):
        """A reader slower than the ranks that keeps reading (a CI log collector, a checking reader) gets every
        line: past the backlog the ranks wait for it, as they would writing to that pipe themselves."""
        n = 40000  # 4 ranks x 40000 lines, about 15 MB: past the pipe (1 MiB) and the backlog (4 MiB)

        def slow(p):  # takes 8 KiB at a time, with a pause after each
            chunks = []
            while chunk := os.read(p.stdout.fileno(), 8192):
                chunks.append(chunk)
                time.sleep(0.0005)
            return b"".join(chunks)

        rc, out, err = self.flood_into("console_slow", n, slow)
        shown = {k: 0 for k in range(4)}
        for line in out.split("\n")[:-1]:
            m = re.match(r"^\[flood r(\d)\] rank (\d) line (\d+) x*$", line)
            if m and m.group(1) == m.group(2) and int(m.group(3)) == shown[int(m.group(1))]:
                shown[int(m.group(1))] += 1
        self.check(rc == 0 and shown == {k: n for k in range(4)} and "not shown here" not in err,
                   f"console slow: a reader that keeps reading, slower than 4 ranks write, gets all {n} lines of "
                   "each, in order, none dropped", f"exit {rc}; shown {shown}; {len(out)} bytes\n{err[-800:]}")

    def test_console_stopped_reader(self):
        """A reader that reads nothing until flowrun has exited holds the ranks for --console-wait only; the step
        succeeds, and every line is shown (what the pipe held) or counted on the console."""
        n = 40000

        def after_exit(p):  # nothing read until flowrun has exited
            p.wait(timeout=60)
            return p.stdout.read()

        rc, out, err = self.flood_into("console_stopped", n, after_exit, "--console-wait", "0.2")
        shown = out.count("\n")
        told = re.findall(r"^flowrun: step 'flood': the console did not keep up: (\d+) lines? of the workers' "
                          r"output were not shown \(the log files have them\)$", err, re.M)
        after = re.findall(r"^flowrun: (\d+) lines? of the workers' output not shown here", err, re.M)
        self.check(rc == 0 and len(told) == 1 and shown + sum(int(x) for x in told + after) == 4 * n,
                   f"console stopped: the step succeeds, and each of the {4 * n} lines is shown or counted once on "
                   "the console", f"exit {rc}; shown {shown}, told {told}, after {after}\n{err[-800:]}")

    FOLD_SPEC = """name: {name}
steps:
  - name: train
    run: ["sh", "-c", "echo hello from every rank; echo I am rank $RANK; echo bye from every rank; echo oops >&2"]
    parallel:
      cpus: 4
    logs: {{fold: {fold}}}
"""

    def test_fold(self):
        """A line every rank prints is shown once with their ranks; a line one rank prints looks as it always did;
        each rank's lines keep their order; the log files keep every rank's lines. A wait of 60s: the lines wait
        for the ranks, never for a time, so nothing here depends on how fast the ranks run."""
        d, spec, run_dir = self.workspace("fold", self.FOLD_SPEC.format(name="fold", fold="60s"))
        r = self.flowrun_run("fold", spec, run_dir)
        self.check(r.rc == 0, "fold: the step succeeds", r.detail())
        lines = r.stdout.splitlines()
        self.check(lines.count("[train r0-3] hello from every rank") == 1
                   and lines.count("[train r0-3] bye from every rank") == 1
                   and not any(re.match(r"\[train r\d\] (hello|bye)", line) for line in lines),
                   "fold: a line all 4 ranks print is shown once, tagged r0-3", r.stdout)
        for k in range(4):
            own = [line for line in lines if line.startswith(f"[train r{k}] ") or line.startswith("[train r0-3] ")]
            self.check(own == ["[train r0-3] hello from every rank", f"[train r{k}] I am rank {k}",
                               "[train r0-3] bye from every rank"],
                       f"fold: rank {k}'s own line keeps its prefix and its place between the folded ones", r.stdout)
            self.check(r.read("train", f"rank{k}", "stdout.log") ==
                       f"hello from every rank\nI am rank {k}\nbye from every rank\n",
                       f"fold: rank {k}'s stdout.log has its lines as it wrote them")
        self.check(r.stderr.count("[train r0-3] oops") == 1, "fold: stderr's lines are folded too", r.stderr)

    def test_no_fold(self):
        """--no-fold, and logs: {fold: false}, show every rank's lines apart."""
        for name, fold, options in (("nofold_option", "60s", ("--no-fold",)), ("nofold_spec", "false", ())):
            d, spec, run_dir = self.workspace(name, self.FOLD_SPEC.format(name=name, fold=fold))
            r = self.flowrun_run(name, spec, run_dir, *options)
            lines = r.stdout.splitlines()
            self.check(r.rc == 0 and all(lines.count(f"[train r{k}] hello from every rank") == 1 for k in range(4))
                       and not any(line.startswith("[train r0-3]") for line in lines),
                       f"{name}: every rank's line is shown apart", r.detail())

    def test_console_reader_lags(self):
        """The console's reader takes nothing until flowrun has said its last line: what is still waiting
        then (more than the pipe holds) reaches it before flowrun exits, every line, none dropped unsaid."""
        n = 12000
        d, spec, run_dir = self.workspace("console_lag", f"""name: lag
steps:
  - name: flood
    run: {argv_yaml("flood", str(n))}
    parallel:
      cpus: 2
""")
        p = self.start(spec, run_dir)
        err = b""
        while b"succeeded: 1 step in " not in err and b"failed after " not in err:
            line = p.stderr.readline()
            if not line:
                break
            err += line
        out = p.stdout.read().decode(errors="replace")  # only now
        r = self.finish("console lag", p, run_dir, time.monotonic())
        err = err.decode(errors="replace") + r.stderr
        self.check(r.rc == 0, "console lag: the step succeeds", err)
        shown = {k: sum(1 for x in out.split("\n") if x.startswith(f"[flood r{k}] rank {k} line ")) for k in (0, 1)}
        self.check(shown == {0: n, 1: n} and "not shown here" not in err,
                   f"console lag: all {n} lines of each rank reach a console that read nothing until the end",
                   f"shown {shown}; {len(out)} bytes\n{err[-600:]}")

    def test_console_ranks(self):
        d, spec, run_dir = self.workspace("console_ranks", f"""name: ranks
steps:
  - name: train
    run: {argv_yaml("flood", "500")}
    parallel:
      cpus: 4
""")
        r = self.flowrun_run("--ranks 0", spec, run_dir, "--ranks", "0")
        prefixes = {PREFIX.match(line).group(0) if PREFIX.match(line) else line[:20] for line in
                    r.stdout.splitlines()}
        self.check(r.rc == 0 and prefixes == {"[train r0] "}, "--ranks 0: only rank 0 on the console",
                   f"{prefixes}\n{r.detail()}")
        for k in range(4):
            text = r.read("train", f"rank{k}", "stdout.log")
            self.check(text.count("\n") == 500 and text.startswith(f"rank {k} line 0 "),
                       f"--ranks 0: rank {k}'s log file is complete", text[:200])

    def test_spec_console_ranks(self):
        d, spec, run_dir = self.workspace("spec_console_ranks", f"""name: ranks
steps:
  - name: train
    run: {argv_yaml("argv", "hello")}
    parallel:
      cpus: 4
    logs:
      console: [1, 3]
""")
        r = self.flowrun_run("logs: console", spec, run_dir)
        self.check(r.rc == 0 and r.stdout.splitlines() == ['[train r1,3] ["hello"]'],
                   "logs: {console: [1, 3]} shows ranks 1 and 3 (their like lines folded)", r.detail())
        r = self.flowrun_run("logs: console with --ranks", spec, run_dir + "-all", "--ranks", "0-2", "--no-fold")
        self.check(r.rc == 0 and sorted(r.stdout.splitlines()) == [f'[train r{k}] ["hello"]' for k in range(3)],
                   "--ranks 0-2 overrides the spec's logs: console", r.detail())
        r = self.flowrun_run("bad --ranks", spec, run_dir + "-bad", "--ranks", "two")
        self.check(r.rc == 2 and "--ranks 'two': expected 'all' or ranks such as 0, 0,2 or 0-3,6" in r.stderr,
                   "--ranks two is a usage error", r.detail())

    def test_progress(self):
        d, spec, run_dir = self.workspace("progress", f"""name: bar
steps:
  - name: bar
    run: {argv_yaml("progress", "100")}
    parallel:
      cpus: 1
""")
        r = self.flowrun_run("progress", spec, run_dir)
        err = [line for line in r.stderr.split("\n") if line.startswith("[bar r0] ")]
        self.check(r.rc == 0 and "\r" not in r.stderr and "\r" not in r.stdout,
                   "progress: no carriage return reaches the console", repr(r.stderr[-500:]))
        self.check(err and err[-1] == "[bar r0] 100%|##########|" and len(err) <= 3,
                   "progress: 100 redraws show as a few lines ending in the final state", "\n".join(err))
        self.check(r.stdout == "[bar r0] done\n", "progress: stdout stays separate", r.stdout)
        raw = r.read("bar", "rank0", "stderr.log")
        self.check(raw.count("\r") == 101, "progress: the log file keeps the raw bytes", repr(raw[:200]))

    COLOR_SPEC = f"""name: colors
steps:
  - name: hello
    run: {argv_yaml("argv", "hi")}
    parallel:
      cpus: 2
"""

    @pytest.mark.parametrize("label, options, env, want", [
        pytest.param("a terminal", [], {}, True, id="terminal"),
        pytest.param("a terminal with NO_COLOR", [], {"NO_COLOR": "1"}, False, id="terminal-NO_COLOR"),
        pytest.param("a terminal with --color never", ["--color", "never"], {}, False, id="terminal-color-never"),
    ])
    def test_color_terminal(self, label, options, env, want):
        d, spec, run_dir = self.workspace("color", self.COLOR_SPEC)
        rc, shown = self.run_pty(spec, run_dir, *options, env=env)
        has = b"\x1b[" in shown
        self.check(rc == 0 and has == want and b'hi"]' in shown,
                   f"color: {label}: escape codes {'shown' if want else 'absent'}", repr(shown[:600]))

    def test_color(self):
        d, spec, run_dir = self.workspace("color", self.COLOR_SPEC)
        r = self.flowrun_run("color always", spec, f"{run_dir}-always", "--color", "always", "--no-fold")
        self.check(r.rc == 0 and re.search(r"^\x1b\[36m\[hello r0\]\x1b\[0m \[\"hi\"\]$", r.stdout, re.M)
                   and re.search(r"^\x1b\[33m\[hello r1\]\x1b\[0m \[\"hi\"\]$", r.stdout, re.M),
                   "color: --color always colours the prefix on a pipe, each rank its own", repr(r.stdout))
        r = self.flowrun_run("color always folded", spec, f"{run_dir}-folded", "--color", "always")
        self.check(r.rc == 0 and r.stdout == '\x1b[94m[hello r0-1]\x1b[0m ["hi"]\n',
                   "color: a folded line's tag is coloured as a plain step's", repr(r.stdout))
        r = self.flowrun_run("color auto pipe", spec, f"{run_dir}-pipe")
        self.check(r.rc == 0 and "\x1b" not in r.stdout + r.stderr, "color: a pipe gets no escape codes",
                   repr(r.stdout))

    # --- 11. the flow -----------------------------------------------------

    def test_args(self):
        d, spec, run_dir = self.workspace("args", f"""name: args
steps:
  - name: listed
    run: {argv_yaml("argv", "first", "${args}", "last")}
  - name: script
    shell: true
    run: {q(PY + " " + WORKER + " argv ${args}")}
  - name: ranks
    run: {argv_yaml("argv", "${args}")}
    parallel:
      cpus: 2
""")
        args = ["--lr", "0.1", "two words", "$HOME", "*"]
        r = self.flowrun_run("args", spec, run_dir, "--", *args)
        out = r.stdout.splitlines()
        self.check(r.rc == 0 and f"[listed] {json.dumps(['first', *args, 'last'])}" in out,
                   "args: -- ARGS replace ${args} word for word", r.detail())
        self.check(f"[script] {json.dumps(args)}" in out, "args: in a shell: true script, quoted", r.detail())
        self.check(f"[ranks r0-1] {json.dumps(args)}" in out, "args: every rank gets them", r.detail())
        r = self.flowrun_run("no args", spec, run_dir + "-none")
        self.check(r.rc == 0 and '[listed] ["first", "last"]' in r.stdout.splitlines(),
                   "args: without -- ${args} disappears", r.detail())

    def test_order(self):
        order = os.path.join(self.scratch, "order.txt")
        d, spec, run_dir = self.workspace("order", f"""name: order
steps:
  - name: third
    needs: second
    shell: true
    run: echo third >> {order}
  - name: first
    needs: []
    shell: true
    run: echo first >> {order}
  - name: second
    needs: first
    shell: true
    run: sleep 0.2; echo second >> {order}
""")
        r = self.flowrun_run("order", spec, run_dir)
        got = open(order).read().split() if os.path.exists(order) else []
        self.check(r.rc == 0 and got == ["first", "second", "third"], "order: steps run in dependency order",
                   f"{got}\n{r.detail()}")

    def test_skip(self):
        marks = os.path.join(self.scratch, "skip-marks")
        os.makedirs(marks)
        d, spec, run_dir = self.workspace("skip", f"""name: skip
steps:
  - name: bad
    shell: true
    run: echo failing >&2; exit 5
  - name: after_bad
    shell: true
    run: touch {marks}/after_bad
  - name: later
    needs: after_bad
    shell: true
    run: touch {marks}/later
  - name: independent
    needs: []
    shell: true
    run: touch {marks}/independent
""")
        r = self.flowrun_run("skip", spec, run_dir)
        self.check(r.rc == 5, "skip: flowrun exits with the failed step's code", r.detail())
        self.check(sorted(os.listdir(marks)) == ["independent"],
                   "skip: the failed step's dependents are skipped, an independent step still runs",
                   f"{os.listdir(marks)}\n{r.detail()}")
        self.check("flowrun: step 'after_bad' skipped: it needs 'bad', which did not succeed\n" in r.stderr
                   and "flowrun: step 'later' skipped: it needs 'after_bad', which did not succeed\n" in r.stderr,
                   "skip: flowrun says which steps were skipped and why", r.stderr)
        self.check(re.search(r"^flowrun: step 'bad' failed: exited with code 5 after [0-9.]+ s \(pid \d+\)$",
                             r.stderr, re.M) is not None and "\n    failing\n" in r.stderr,
                   "skip: the plain step's report shows its code and stderr", r.stderr)
        self.check("failed 'bad'; not run 'after_bad', 'later'; succeeded 'independent'" in r.stderr,
                   "skip: the summary lists failed, not run and succeeded steps", r.stderr)

    def test_join_inputs(self):
        d, spec, run_dir = self.workspace("join_inputs", f"""name: joined
steps:
  - name: train
    run: {argv_yaml("outputs")}
    parallel:
      cpus: 2
    outputs: ckpt/model.pt
  - name: evaluate
    join: train
    run: {argv_yaml("argv", "${steps.train.outputs}")}
    env:
      SHOW: x
  - name: report
    shell: true
    run: echo "inputs=$FLOWRUN_INPUTS"; echo "outputs=${{steps.train.outputs}}"
""")
        r = self.flowrun_run("join inputs", spec, run_dir)
        outputs = os.path.join(run_dir, "train", "outputs")
        self.check(r.rc == 0 and f"[evaluate] {json.dumps([outputs])}" in r.stdout.splitlines(),
                   "join: ${steps.train.outputs} is <run-dir>/train/outputs", r.detail())
        self.check(f"[report] outputs={outputs}" in r.stdout.splitlines(),
                   "join: a later step sees ${steps.train.outputs} too", r.detail())
        self.check(os.path.isfile(os.path.join(os.path.dirname(outputs), "results.json"))
                   and os.path.isfile(os.path.join(outputs, "ckpt", "model.pt")),
                   "join: results.json sits beside the outputs directory")
        d2, spec2, run_dir2 = self.workspace("join_env", f"""name: joined
steps:
  - name: train
    run: {argv_yaml("outputs")}
    parallel:
      cpus: 2
  - name: evaluate
    join: train
    shell: true
    run: echo "inputs=$FLOWRUN_INPUTS"
""")
        r = self.flowrun_run("join env", spec2, run_dir2)
        self.check(r.rc == 0 and f"[evaluate] inputs={os.path.join(run_dir2, 'train', 'outputs')}"
                   in r.stdout.splitlines(), "join: FLOWRUN_INPUTS is the joined step's outputs directory",
                   r.detail())

    def test_run_dir(self):
        d, spec, run_dir = self.workspace("run_dir", f"""name: layout
steps:
  - name: prep
    run: {argv_yaml("argv", "prepared")}
  - name: train
    run: {argv_yaml("argv", "trained")}
    parallel:
      cpus: 2
""")
        r = self.flowrun_run("run dir", spec, run_dir)
        self.check(r.rc == 0 and r.read("spec.yaml") == open(spec).read(), "run dir: spec.yaml is the spec as run",
                   r.detail())
        plan = json.loads(r.read("plan.json"))
        self.check(plan["run_dir"] == run_dir and [s["name"] for s in plan["steps"]] == ["prep", "train"],
                   "run dir: plan.json is the plan", json.dumps(plan)[:500])
        self.check(r.read("prep", "stdout.log") == '["prepared"]\n' and r.read("train", "rank1", "stdout.log")
                   == '["trained"]\n' and r.read("train", "rank0", "stderr.log") == "",
                   "run dir: plain steps log to <step>/, ranks to <step>/rank<R>/")
        res = r.results("prep")
        self.check(res["format"] == 1 and res["step"] == "prep" and res["parallel"] is False
                   and res["outcome"] == "succeeded" and res["ranks"][0]["rank"] is None
                   and res["attempts"][0]["master_port"] == 0,
                   "run dir: a plain step's results.json", json.dumps(res)[:800])
        self.check(r.stdout == '[prep] ["prepared"]\n[train r0-1] ["trained"]\n',
                   "run dir: the console shows every line once, prefixed, the ranks' like lines folded", r.stdout)

    def test_spawn_failure(self):
        d, spec, run_dir = self.workspace("spawn_failure", """name: missing
steps:
  - name: train
    run: no-such-program-xyz --flag
    parallel:
      cpus: 2
""")
        r = self.flowrun_run("spawn failure", spec, run_dir)
        self.check(r.rc == 127 and "no-such-program-xyz" in r.stderr,
                   "spawn failure: a command that is not found exits 127 and is named", r.detail())
        res = r.results("train")
        self.check(res["culprit_rank"] == 0 and res["ranks"][0]["status"] == "spawn_failed",
                   "spawn failure: results.json says rank 0 could not start", json.dumps(res["ranks"])[:800])

    def test_one_node_loads_no_crypto(self):
        # libcrypto is for the connections between nodes; a run on one node does not load it (nor pay for
        # its relocations). Each rank reads its parent's (flowrun's) mappings while flowrun waits for it.
        d, spec, run_dir = self.workspace("no_crypto", """name: nocrypto
steps:
  - name: train
    run: sh -c 'grep -c libcrypto /proc/$PPID/maps; grep -c "libc[.-]" /proc/$PPID/maps'
    parallel:
      cpus: 2
""")
        r = self.flowrun_run("no crypto", spec, run_dir)
        counts = []
        for i in range(2):
            with open(os.path.join(run_dir, "train", f"rank{i}", "stdout.log")) as f:
                counts.append(f.read().split())
        self.check(r.rc == 0 and all(c[:1] == ["0"] and len(c) == 2 and int(c[1]) > 0 for c in counts),
                   "a run on one node maps no libcrypto (and the ranks could read flowrun's mappings: libc is there)",
                   f"{counts}\n{r.detail()}")

    def test_spec_error(self):
        d, spec, run_dir = self.workspace("spec_error", """name: bad
steps:
  - name: train
    run: python3 train.py
    parallel:
      gpu: 2
""")
        r = self.flowrun_run("spec error", spec, run_dir)
        self.check(r.rc == 2 and "steps.train.parallel: unknown key 'gpu'; did you mean 'gpus'?" in r.stderr
                   and not os.path.exists(run_dir), "spec error: exit 2, nothing runs, no run directory",
                   r.detail())
