"""End-to-end tests of `flowrun SPEC` in a Slurm job that was requeued, without Slurm: the test
sets what Slurm sets (SLURM_JOB_ID, the same each time, and SLURM_RESTART_COUNT, one higher
after each requeue) and kills flowrun as a preemption or a node failure would (SIGTERM, SIGKILL)
while the parallel step's ranks wait on a file the test makes. Every step appends a line to
counter.txt, each rank with its TORCHELASTIC_RESTART_COUNT, so a test knows exactly what ran.

  python3 -m pytest tests/e2e/test_requeue.py [--flowrun PATH] [--sanitized] [-k NAME]
"""
import collections
import json
import os
import re
import signal
import subprocess
import time

import pytest

from flowrun_testlib import clean_env
from flowrun_testlib.launcher import run_named
from flowrun_testlib.suite import E2E

pytestmark = pytest.mark.resume

JOB = "4242"

# prepare -> train (2 CPU ranks, max_restarts 1; in attempt 0 rank 1 fails once rank 0 has
# counted itself; every later attempt waits for `go`) -> evaluate (the join).
FLOW = """name: requeue-demo
steps:
  - name: prepare
    shell: true
    run: echo prepare >> counter.txt
  - name: train
    shell: true
    run: |
      echo "train r$RANK c$TORCHELASTIC_RESTART_COUNT" >> counter.txt
      if test "$TORCHELASTIC_RESTART_COUNT" = 0 && test "$RANK" = 1; then
        for i in $(seq 500); do grep -qx "train r0 c0" counter.txt && break; sleep 0.02; done
        exit 3
      fi
      touch "started-$RANK-$TORCHELASTIC_RESTART_COUNT"
      while ! test -f go; do sleep 0.02; done
      echo "weights of rank $RANK" > "$FLOWRUN_OUTPUT_DIR/w.txt"
    parallel: {cpus: 2, max_restarts: 1}
    collect: all
  - name: evaluate
    join: train
    shell: true
    run: |
      echo evaluate >> counter.txt
      cat ${steps.train.outputs}/rank0/w.txt ${steps.train.outputs}/rank1/w.txt
"""


class TestRequeue(E2E):
    def equal(self, expected, actual, label):
        return self.check(expected == actual, label, f"expected: {expected!r}\nactual:   {actual!r}")

    def workspace(self, name):
        d = os.path.join(self.scratch, name)
        os.makedirs(d)
        with open(os.path.join(d, "flow.yaml"), "w") as f:
            f.write(FLOW)
        return d

    @staticmethod
    def slurm(restart_count=None):
        """What Slurm sets in the batch script of job JOB: SLURM_RESTART_COUNT only once requeued."""
        env = clean_env(SLURM_JOB_ID=JOB, SLURM_JOB_NODELIST="host-a", SLURM_JOB_NUM_NODES="1")
        if restart_count is not None:
            env["SLURM_RESTART_COUNT"] = str(restart_count)
        return env

    def call(self, label, d, env, *options):
        return run_named(self, label, ["flow.yaml", *options], d, env)

    def stopped_run(self, label, d, env, count, sig, *options):
        """flowrun started in the job and given `sig` once both ranks of train's attempt
        `count` wait for `go`; returns its run directory once its workers are gone."""
        p = subprocess.Popen([self.flowrun, "flow.yaml", *options], cwd=d, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            deadline = time.monotonic() + 30 * self.slack
            while time.monotonic() < deadline and p.poll() is None and not all(
                    os.path.exists(os.path.join(d, f"started-{rank}-{count}")) for rank in (0, 1)):
                time.sleep(0.02)
            if not self.check(p.poll() is None, f"{label}: train's attempt {count} is waiting", p.stderr.read()
                              if p.poll() is not None else ""):
                return None, ""
            os.kill(p.pid, sig)
            _, err = p.communicate(timeout=30 * self.slack)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        m = re.search(r"^flowrun: run (\S+): \d+ steps?; logs and results in (.*)$", err, re.M)
        if not self.check(m is not None, f"{label}: the run started", err):
            return None, err
        run_id, run_dir = m.group(1), m.group(2)
        # After SIGKILL the guardian stops train's workers; wait until they are gone.
        deadline = time.monotonic() + 20 * self.slack
        while time.monotonic() < deadline and self.live_workers(run_id):
            time.sleep(0.05)
        return run_dir, err

    @staticmethod
    def live_workers(run_id):
        found = []
        needle = f"FLOWRUN_RUN_ID={run_id}".encode()
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/environ", "rb") as f:
                    if needle in f.read().split(b"\0"):
                        found.append(int(name))
            except OSError:
                continue
        return found

    @staticmethod
    def counter(d):
        with open(os.path.join(d, "counter.txt")) as f:
            return collections.Counter(f.read().split("\n")[:-1])

    @staticmethod
    def read_json(*parts):
        with open(os.path.join(*parts)) as f:
            return json.load(f)

    # --- killed, requeued, stopped, requeued again ------------------------------------------

    def test_requeued_twice(self):
        d = self.workspace("twice")
        # The job's first run: train fails once (restart 1), then the node dies (SIGKILL).
        a_dir, _ = self.stopped_run("first", d, self.slurm(), 1, signal.SIGKILL)
        if a_dir is None:
            return
        a = os.path.basename(a_dir)
        record = self.read_json(a_dir, "run.json")
        self.equal(("running", {"job_id": JOB, "restart_count": 0}, {"train": 2}),
                   (record["state"], record["slurm"], record["attempts_started"]),
                   "first: run.json records the job and train's 2 attempts, and that flowrun never ended")

        # Requeued: train restarts at 2, and is stopped (a preemption's SIGTERM).
        b_dir, err = self.stopped_run("second", d, self.slurm(1), 2, signal.SIGTERM)
        if b_dir is None:
            return
        b = os.path.basename(b_dir)
        self.check(f"flowrun: resuming run {a}: Slurm job {JOB} was requeued (SLURM_RESTART_COUNT=1); kept "
                   f"'prepare'; 'train' restarts at TORCHELASTIC_RESTART_COUNT=2" in err.splitlines(),
                   "second: the console says which run resumes, why, what is kept and where train restarts", err)
        self.check(f"flowrun: step 'train' runs (it did not finish in run {a})" in err.splitlines(),
                   "second: train did not finish in the killed run", err)
        record = self.read_json(b_dir, "run.json")
        self.equal(({"run_id": a, "run_dir": a_dir, "by": "requeue"}, {"job_id": JOB, "restart_count": 1},
                    {"train": 3}, "reused"),
                   (record["resumed_from"], record["slurm"], record["attempts_started"], record["steps"]["prepare"]),
                   "second: run.json: resumed by a requeue, the job, train's attempts counted on")
        results = self.read_json(b_dir, "train", "results.json")
        self.equal(("interrupted", [2], {"run_id": a, "run_dir": a_dir, "restart_count": 2}),
                   (results["outcome"], [x["restart_count"] for x in results["attempts"]], results["continued_from"]),
                   "second: train's results.json: its attempt continues the first run's count")

        # Requeued again: train restarts at 3 and succeeds; the join gets its outputs.
        open(os.path.join(d, "go"), "w").close()
        r = self.call("third", d, self.slurm(2))
        if not self.check(r.rc == 0, "third: the run succeeds", r.detail()):
            return
        self.equal(collections.Counter({"prepare": 1, "train r0 c0": 1, "train r1 c0": 1, "train r0 c1": 1,
                                        "train r1 c1": 1, "train r0 c2": 1, "train r1 c2": 1, "train r0 c3": 1,
                                        "train r1 c3": 1, "evaluate": 1}),
                   self.counter(d), "third: prepare ran once; each attempt of train had the next restart count")
        lines = r.lines()
        self.equal([f"flowrun: resuming run {b}: Slurm job {JOB} was requeued (SLURM_RESTART_COUNT=2); kept "
                    f"'prepare'; 'train' restarts at TORCHELASTIC_RESTART_COUNT=3",
                    f"flowrun: run {r.run_id}: 3 steps; logs and results in {d}/.flowrun/runs/{r.run_id}"],
                   lines[:2], "third: the console's first lines")
        self.check(f"flowrun: step 'train' runs (it was interrupted in run {b})" in lines and
                   lines[2].startswith(f"flowrun: step 'prepare' reused from run {b} (succeeded at ") and
                   lines[2].endswith(f" in run {a})"), "third: prepare is still the first run's", "\n".join(lines))
        self.equal(["weights of rank 0", "weights of rank 1"],
                   [line[len("[evaluate] "):] for line in r.stdout.splitlines() if line.startswith("[evaluate] ")],
                   "third: the join gets train's outputs")
        record = r.json("run.json")
        self.equal(({"run_id": b, "run_dir": b_dir, "by": "requeue"}, {"train": 4}, 0),
                   (record["resumed_from"], record["attempts_started"], record["exit_code"]),
                   "third: run.json")
        self.equal({"run_id": b, "run_dir": b_dir, "restart_count": 3},
                   r.json("train", "results.json")["continued_from"], "third: results.json's continued_from")

        # Requeued once more, after the run succeeded: nothing runs, and the job succeeds.
        again = self.call("fourth", d, self.slurm(3))
        self.equal((0, [f"flowrun: Slurm job {JOB} was requeued (SLURM_RESTART_COUNT=3): run {r.run_id} "
                        f"({r.run_dir}) of this spec succeeded already; nothing to run"]),
                   (again.rc, again.lines()), "fourth: a run that succeeded is not run again")
        self.equal(1, self.counter(d)["evaluate"], "fourth: nothing ran")

    # --- the opt-out, no requeue, and a run still in progress ----------------------------------

    def test_fresh_and_opt_out(self):
        d = self.workspace("fresh")
        a_dir, _ = self.stopped_run("first", d, self.slurm(), 1, signal.SIGTERM)
        if a_dir is None:
            return
        open(os.path.join(d, "go"), "w").close()
        for label, env, options in (("SLURM_RESTART_COUNT=0", self.slurm(0), ()),
                                    ("no SLURM_RESTART_COUNT", self.slurm(), ()),
                                    ("not in Slurm", clean_env(), ()),
                                    ("--no-requeue-resume", self.slurm(1), ("--no-requeue-resume",))):
            before = self.counter(d)
            r = self.call(label, d, env, *options)
            self.check(r.rc == 0 and r.run_id and r.json("run.json")["resumed_from"] is None,
                       f"{label}: a new run from the start", r.detail())
            self.equal(collections.Counter({"prepare": 1, "train r0 c0": 1, "train r1 c0": 1, "train r0 c1": 1,
                                            "train r1 c1": 1, "evaluate": 1}),
                       self.counter(d) - before, f"{label}: every step ran; train's count started at 0")
            if options:
                self.equal(f"flowrun: Slurm job {JOB} was requeued (SLURM_RESTART_COUNT=1); --no-requeue-resume: "
                           f"starting afresh", r.lines()[0], f"{label}: says so")

    def test_in_progress(self):
        d = self.workspace("progress")
        p = subprocess.Popen([self.flowrun, "flow.yaml"], cwd=d, env=self.slurm(), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            deadline = time.monotonic() + 30 * self.slack
            while time.monotonic() < deadline and p.poll() is None and not all(
                    os.path.exists(os.path.join(d, f"started-{rank}-1")) for rank in (0, 1)):
                time.sleep(0.02)
            runs = [x for x in os.listdir(os.path.join(d, ".flowrun", "runs")) if x != "latest"]
            if not self.check(len(runs) == 1 and p.poll() is None, "in progress: the run waits", str(runs)):
                return
            r = self.call("in progress", d, self.slurm(1))
            self.equal((2, f"flowrun: error: Slurm job {JOB} was requeued (SLURM_RESTART_COUNT=1), but its run "
                           f"{runs[0]} is still in progress (flowrun pid {p.pid} on host-a); flowrun does not run "
                           f"it twice: stop that flowrun first, or start afresh with --no-requeue-resume\n"),
                       (r.rc, r.stderr), "in progress: refused, naming the flowrun that runs it")
        finally:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.wait(timeout=30 * self.slack)
        self.equal(1, self.counter(d)["prepare"], "in progress: the refused run ran nothing")

    def test_run_id(self):
        """A --run-id (or --run-dir) on the job's command line names the first run; each requeue's
        run gets it with -requeueN."""
        d = self.workspace("run_id")
        a_dir, _ = self.stopped_run("first", d, self.slurm(), 1, signal.SIGTERM, "--run-id", "exp")
        if a_dir is None:
            return
        open(os.path.join(d, "go"), "w").close()
        r = self.call("requeued", d, self.slurm(1), "--run-id", "exp")
        self.equal((0, "exp-requeue1", {"run_id": "exp", "run_dir": a_dir, "by": "requeue"}),
                   (r.rc, r.run_id, r.json("run.json")["resumed_from"] if r.run_id else None),
                   "run id: the requeued run is exp-requeue1 and resumes exp")
        self.equal(1, self.counter(d)["prepare"], "run id: prepare ran once")
