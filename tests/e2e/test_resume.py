"""End-to-end tests of `flowrun resume RUN`: real flows of small shell steps
run by the real binary, a failure, then a resume. Every step appends a line
to counter.txt in its workdir, so a test knows exactly which steps ran in
which run; the run directories (run.json, results.json, outputs/) and the
console are checked with exact expectations.

  python3 -m pytest tests/e2e/test_resume.py [--flowrun PATH] [--sanitized] [-k NAME]

--sanitized: the binary is built with a sanitizer; waits get more slack and
every stderr is checked for a sanitizer report (as always).
"""
import collections
import json
import os
import shutil
import signal
import subprocess
import time

import pytest

from flowrun_testlib import clean_env
from flowrun_testlib.launcher import run_named
from flowrun_testlib.suite import E2E

pytestmark = pytest.mark.resume

# prepare -> train (2 ranks; rank 1 fails with 3 until train.ok exists, once
# rank 0 has counted itself: failing first could stop rank 0 before it did) ->
# evaluate (the join; fails with 4 until evaluate.ok exists). Each step
# appends to counter.txt; train leaves one private file per rank and one
# node-shared file per rank; evaluate shows what it was given.
FLOW = """name: resume-demo
steps:
  - name: prepare
    shell: true
    run: echo prepare >> counter.txt
  - name: train
    shell: true
    run: |
      wait_r0() { for i in $(seq 500); do grep -qx "train r0" counter.txt && return; sleep 0.02; done; }
      echo "train r$RANK" >> counter.txt
      test "$RANK" != 1 || test -f train.ok || { wait_r0; exit 3; }
      echo "weights of rank $RANK" > "$FLOWRUN_OUTPUT_DIR/w.txt"
      echo "model of rank $RANK" > "model-$RANK.txt"
    parallel: {}
    outputs: ["model-*.txt"]
    collect: all
  - name: evaluate
    join: train
    shell: true
    run: |
      echo evaluate >> counter.txt
      echo "$FLOWRUN_INPUTS" > inputs.txt
      cat ${steps.train.outputs}/rank0/w.txt ${steps.train.outputs}/rank1/w.txt ${steps.train.outputs}/model-*.txt
      echo args: ${args}
      test -f evaluate.ok || exit 4
"""


class TestResume(E2E):
    def equal(self, expected, actual, label):
        return self.check(expected == actual, label, f"expected: {expected!r}\nactual:   {actual!r}")

    def workspace(self, name, spec_text=FLOW, train_ok=True):
        """A directory with flow.yaml (and train.ok, unless train is to fail)."""
        d = os.path.join(self.scratch, name)
        os.makedirs(d)
        with open(os.path.join(d, "flow.yaml"), "w") as f:
            f.write(spec_text)
        if train_ok:
            self.touch(d, "train.ok")
        return d

    def call(self, label, cwd, *argv, timeout=60):
        return run_named(self, label, list(argv), cwd, clean_env(), timeout)

    def first_run(self, label, d, *options, rc=4):
        """The flow on 2 simulated GPUs; by default evaluate fails (exit 4)."""
        r = self.call(label, d, "flow.yaml", "--fake-gpus", "2", *options)
        self.check(r.rc == rc and r.run_id is not None, f"{label}: the first run exits {rc}", r.detail())
        return r

    @staticmethod
    def counter(d):
        """How many times each step (train: each rank) ran so far."""
        with open(os.path.join(d, "counter.txt")) as f:
            return collections.Counter(f.read().split("\n")[:-1])

    @staticmethod
    def touch(d, name):
        open(os.path.join(d, name), "w").close()

    @staticmethod
    def end_of(run, step):
        return run.json(step, "results.json")["end"]

    # --- the join failed: only the join runs again ---------------------------

    def test_join_failed(self):
        d = self.workspace("join")
        first = self.first_run("join", d, "--", "--lr", "0.1")
        if first.run_id is None:
            return
        self.equal(collections.Counter({"prepare": 1, "train r0": 1, "train r1": 1, "evaluate": 1}),
                   self.counter(d), "join: the first run ran every step once")
        old = first.json("run.json")
        self.equal(("finished", 4, {"prepare": "succeeded", "train": "succeeded", "evaluate": "failed"},
                    ["--lr", "0.1"], 2, None, os.path.join(d, "flow.yaml")),
                   (old["state"], old["exit_code"], old["steps"], old["args"], old["fake_gpus"], old["resumed_from"],
                    old["spec"]),
                   "join: run.json records the spec, args, --fake-gpus and how each step ended")

        self.touch(d, "evaluate.ok")
        r = self.call("join resume", d, "resume", first.run_id)
        if not self.check(r.rc == 0 and r.run_id not in (None, first.run_id),
                          "join: the resume is a new run that succeeds", r.detail()):
            return
        self.equal(collections.Counter({"prepare": 1, "train r0": 1, "train r1": 1, "evaluate": 2}),
                   self.counter(d), "join: prepare and train did not run again, evaluate did")
        a, b = first.run_id, r.run_id
        self.equal([
            f"flowrun: spec {d}/flow.yaml (the file as it is now)",
            f"flowrun: resuming run {a} ({first.run_dir}) with its --fake-gpus 2 -- --lr 0.1",
            f"flowrun: run {b}: 3 steps; logs and results in {d}/.flowrun/runs/{b}",
            f"flowrun: step 'prepare' reused from run {a} (succeeded at {self.end_of(first, 'prepare')})",
            f"flowrun: step 'train' reused from run {a} (succeeded at {self.end_of(first, 'train')}; 4 output files)",
            f"flowrun: step 'evaluate' runs (it failed in run {a})",
            "flowrun: step 'evaluate' succeeded in <t>",
            f"flowrun: run {b} succeeded: 3 steps in <t> (2 reused from run {a})",
        ], r.lines(), "join: the console says what was reused and why evaluate runs")
        self.equal(["weights of rank 0", "weights of rank 1", "model of rank 0", "model of rank 1",
                    "args: --lr 0.1"],
                   [line[len("[evaluate] "):] for line in r.stdout.splitlines() if line.startswith("[evaluate] ")],
                   "join: evaluate sees train's gathered outputs and the first run's ${args}")
        with open(os.path.join(d, "inputs.txt")) as f:
            self.equal(os.path.join(r.run_dir, "train", "outputs") + "\n", f.read(),
                       "join: FLOWRUN_INPUTS is the new run's train/outputs")
        for rel in ("rank0/w.txt", "rank1/w.txt", "model-0.txt", "model-1.txt"):
            old_file = os.path.join(first.run_dir, "train", "outputs", rel)
            new_file = os.path.join(r.run_dir, "train", "outputs", rel)
            self.check(os.path.isfile(new_file) and os.stat(new_file).st_ino == os.stat(old_file).st_ino,
                       f"join: outputs/{rel} is a hard link of the first run's file", new_file)
        new = r.json("run.json")
        self.equal(("finished", 0, {"prepare": "reused", "train": "reused", "evaluate": "succeeded"},
                    {"run_id": a, "run_dir": first.run_dir, "by": "resume"}, ["--lr", "0.1"]),
                   (new["state"], new["exit_code"], new["steps"], new["resumed_from"], new["args"]),
                   "join: the new run.json records resumed_from and which steps were reused")
        train_old, train_new = first.json("train", "results.json"), r.json("train", "results.json")
        self.equal({**train_old, "reused_from": {"run_id": a, "run_dir": first.run_dir}}, train_new,
                   "join: train's results.json is the first run's, marked reused_from")
        self.check(list(train_new)[-1] == "reused_from" and "reused_from" not in train_old,
                   "join: the mark is the last key, and the first run's file is untouched", json.dumps(train_new)[:300])
        self.equal("succeeded", r.json("evaluate", "results.json")["outcome"], "join: evaluate's own results")
        self.check(not os.path.exists(os.path.join(r.run_dir, "train", "rank0")),
                   "join: a reused step has no logs of its own in the new run (its results.json names the old ones)")

    # --- a parallel step failed: it runs again, and the join after it -------

    def test_parallel_failed(self):
        d = self.workspace("parallel", train_ok=False)
        self.touch(d, "evaluate.ok")
        first = self.first_run("parallel", d, rc=3)
        if first.run_id is None:
            return
        self.equal(collections.Counter({"prepare": 1, "train r0": 1, "train r1": 1}), self.counter(d),
                   "parallel: evaluate did not run after train failed")
        self.equal({"prepare": "succeeded", "train": "failed", "evaluate": "skipped"},
                   first.json("run.json")["steps"], "parallel: run.json says evaluate was skipped")
        self.touch(d, "train.ok")
        r = self.call("parallel resume", d, "resume", first.run_dir)
        if not self.check(r.rc == 0, "parallel: the resume succeeds", r.detail()):
            return
        self.equal(collections.Counter({"prepare": 1, "train r0": 2, "train r1": 2, "evaluate": 1}),
                   self.counter(d), "parallel: prepare ran once, train twice, evaluate once")
        a = first.run_id
        lines = r.lines()
        self.equal([f"flowrun: step 'prepare' reused from run {a} (succeeded at {self.end_of(first, 'prepare')})",
                    f"flowrun: step 'train' runs (it failed in run {a})"], lines[3:5],
                   "parallel: prepare reused, train runs because it failed")
        self.check(f"flowrun: step 'evaluate' runs (it did not run in run {a})" in lines,
                   "parallel: evaluate runs because it did not run", "\n".join(lines))
        self.equal({"prepare": "reused", "train": "succeeded", "evaluate": "succeeded"}, r.json("run.json")["steps"],
                   "parallel: the new run.json")
        self.check("reused_from" not in r.json("train", "results.json"),
                   "parallel: train's results.json in the new run is its own")

    # --- --from STEP ----------------------------------------------------------

    def test_from(self):
        d = self.workspace("from")
        first = self.first_run("from", d)
        if first.run_id is None:
            return
        a = first.run_id
        r = self.call("from: unknown", d, "resume", a, "--from", "trian")
        self.equal((2, f"flowrun: error: --from trian: no step named 'trian' in {d}/flow.yaml; did you mean "
                       f"'train'?\nIts steps: prepare, train, evaluate\n"),
                   (r.rc, r.stderr.split("\n", 1)[1]), "from: an unknown step is refused, with the list of steps")
        self.equal(collections.Counter({"prepare": 1, "train r0": 1, "train r1": 1, "evaluate": 1}),
                   self.counter(d), "from: the refused resume ran nothing")

        self.touch(d, "evaluate.ok")
        r = self.call("from train", d, "resume", a, "--from", "train")
        if not self.check(r.rc == 0, "from: the resume succeeds", r.detail()):
            return
        self.equal(collections.Counter({"prepare": 1, "train r0": 2, "train r1": 2, "evaluate": 2}),
                   self.counter(d), "from: train and evaluate ran again, prepare did not")
        lines = r.lines()
        self.check("flowrun: step 'train' runs (--from train)" in lines and
                   f"flowrun: step 'evaluate' runs (it failed in run {a})" in lines and
                   lines[3].startswith(f"flowrun: step 'prepare' reused from run {a} "),
                   "from: the console says why each step runs", "\n".join(lines))

        # A run that succeeded: nothing to resume, unless --from says what to run.
        b, from_train = r.run_id, r
        r = self.call("from: nothing", d, "resume", b)
        self.equal((2, [f"flowrun: spec {d}/flow.yaml (the file as it is now)",
                        f"flowrun: error: nothing to resume: run {b} succeeded, and no step changed since; to run "
                        f"steps again, name the first of them: flowrun resume {b} --from STEP (steps: prepare, train, "
                        f"evaluate)"]),
                   (r.rc, r.lines()), "from: resuming a run that succeeded is refused and suggests --from")
        r = self.call("from evaluate", d, "resume", b, "--from", "evaluate")
        self.equal((0, [
            f"flowrun: step 'prepare' reused from run {b} (succeeded at {self.end_of(first, 'prepare')} in run {a})",
            f"flowrun: step 'train' reused from run {b} (succeeded at {self.end_of(from_train, 'train')}; "
            f"4 output files)",
            "flowrun: step 'evaluate' runs (--from evaluate)"]), (r.rc, r.lines()[3:6]),
            "from: --from evaluate on a run that succeeded reuses the rest, naming the run that ran each step")
        self.equal(collections.Counter({"prepare": 1, "train r0": 2, "train r1": 2, "evaluate": 3}),
                   self.counter(d), "from: only evaluate ran")
        r = self.call("from train again", d, "resume", b, "--from", "train")
        self.equal((0, ["flowrun: step 'train' runs (--from train)",
                        "flowrun: step 'evaluate' runs (it needs 'train', which runs)"]),
                   (r.rc, [line for line in r.lines() if " runs (" in line]),
                   "from: a step that succeeded runs again when a step it needs runs")
        self.equal(collections.Counter({"prepare": 1, "train r0": 3, "train r1": 3, "evaluate": 4}),
                   self.counter(d), "from: --from train ran train and evaluate")

    # --- an edited step runs again ----------------------------------------------

    def test_edited(self):
        d = self.workspace("edited")
        first = self.first_run("edited", d, "--", "x")
        if first.run_id is None:
            return
        a = first.run_id
        with open(os.path.join(d, "flow.yaml")) as f:
            text = f.read()
        # Moved lines and a changed timeout are no change; an env added to train is.
        edited = text.replace("name: resume-demo\n", "name: resume-demo\n\n# edited\n").replace(
            "    parallel: {}\n", "    parallel: {}\n    timeout: 1h\n    env: {SEED: \"1\"}\n")
        with open(os.path.join(d, "flow.yaml"), "w") as f:
            f.write(edited)
        self.touch(d, "evaluate.ok")
        r = self.call("edited resume", d, "resume", a)
        if not self.check(r.rc == 0, "edited: the resume succeeds", r.detail()):
            return
        self.equal(collections.Counter({"prepare": 1, "train r0": 2, "train r1": 2, "evaluate": 2}),
                   self.counter(d), "edited: train (edited) and evaluate ran again, prepare did not")
        self.equal([f"flowrun: step 'prepare' reused from run {a} (succeeded at {self.end_of(first, 'prepare')})",
                    f"flowrun: step 'train' runs (its env changed since run {a})"], r.lines()[3:5],
                   "edited: the console names what changed")
        with open(os.path.join(r.run_dir, "spec.yaml")) as f:
            self.equal(edited, f.read(), "edited: the new run saved the edited spec")

        # ${args}: evaluate uses them, so new ones after -- make it run again.
        b = r.run_id
        r = self.call("edited args", d, "resume", b, "--", "y")
        self.equal((0, f"flowrun: step 'evaluate' runs (its ${{args}} changed since run {b})"),
                   (r.rc, r.lines()[5] if len(r.lines()) > 5 else r.detail()),
                   "edited: new arguments after -- re-run the step that uses ${args}")
        self.check("[evaluate] args: y" in r.stdout.splitlines(), "edited: evaluate got the new arguments", r.stdout)
        self.equal(["y"], r.json("run.json")["args"], "edited: run.json records the new arguments")

    # --- what cannot be resumed --------------------------------------------------

    def test_refusals(self):
        d = self.workspace("refusals")
        first = self.first_run("refusals", d)
        if first.run_id is None:
            return
        runs = os.path.join(d, ".flowrun", "runs")
        sub = os.path.join(d, "sub")
        os.makedirs(sub)
        missing = "resume-demo-20200101-000000-abcdef"

        r = self.call("unknown id", sub, "resume", missing)
        self.equal((2, f"flowrun: error: no run '{missing}' in {sub}/.flowrun/runs nor in .flowrun/runs of a "
                       f"directory above it\nGive the run directory instead (flowrun printed it: 'logs and results "
                       f"in DIR'): flowrun resume DIR\n"),
                   (r.rc, r.stderr), "refusals: an unknown run id says where flowrun looked")
        typo = first.run_id[:-1] + ("0" if first.run_id[-1] != "0" else "1")
        r = self.call("typo id", d, "resume", typo)
        self.check(r.rc == 2 and f"; did you mean '{first.run_id}' (in {runs})?" in r.stderr,
                   "refusals: a misspelt run id gets a suggestion", r.detail())
        r = self.call("id from a subdirectory", sub, "resume", first.run_id, "--from", "nope")
        self.check(r.rc == 2 and "--from nope: no step named 'nope'" in r.stderr,
                   "refusals: a run id is found in .flowrun/runs of a directory above", r.detail())
        r = self.call("missing dir", d, "resume", "./nowhere")
        self.equal((2, f"flowrun: error: no run directory {d}/nowhere\n"), (r.rc, r.stderr),
                   "refusals: a run directory that does not exist")
        r = self.call("not a run dir", d, "resume", sub)
        self.equal((2, f"flowrun: error: {sub} is not a flowrun run directory: it has no run.json\n"),
                   (r.rc, r.stderr), "refusals: a directory that is not a run directory")

        older = os.path.join(runs, "resume-demo-20200101-000000-000000")
        os.makedirs(older)
        shutil.copy(os.path.join(first.run_dir, "spec.yaml"), older)
        r = self.call("older", d, "resume", os.path.basename(older))
        self.equal((2, f"flowrun: error: {older} was written by an older flowrun, which did not record run.json; "
                       f"it cannot be resumed (run the spec again instead)\n"),
                   (r.rc, r.stderr), "refusals: a run directory of an older flowrun")

        newer = os.path.join(runs, "resume-demo-20200101-000000-111111")
        shutil.copytree(first.run_dir, newer)
        with open(os.path.join(newer, "run.json")) as f:
            record = json.load(f)
        record["format"] = 2
        with open(os.path.join(newer, "run.json"), "w") as f:
            json.dump(record, f)
        r = self.call("newer", d, "resume", newer)
        self.equal((2, f"flowrun: error: {newer}/run.json: written by a newer flowrun (run format 2; this flowrun "
                       f"reads format 1); resume it with the flowrun that ran it\n"),
                   (r.rc, r.stderr), "refusals: a run directory of a newer format")
        r = self.call("bad option", d, "resume", first.run_id, "--bogus")
        self.equal((2, "flowrun: error: unknown option '--bogus'\nRun 'flowrun resume --help' for usage.\n"),
                   (r.rc, r.stderr), "refusals: an unknown option")
        r = self.call("no run", d, "resume")
        self.check(r.rc == 2 and "run is required" in r.stderr, "refusals: RUN is required", r.detail())
        self.equal(collections.Counter({"prepare": 1, "train r0": 1, "train r1": 1, "evaluate": 1}),
                   self.counter(d), "refusals: nothing ran")

    # --- a run in progress, then killed -----------------------------------------

    def test_in_progress(self):
        spec = FLOW.replace('test "$RANK" != 1 || test -f train.ok || { wait_r0; exit 3; }',
                            'touch "started-$RANK"; while ! test -f train.ok; do sleep 0.02; done')
        d = self.workspace("progress", spec, train_ok=False)
        p = subprocess.Popen([self.flowrun, "flow.yaml", "--fake-gpus", "2"], cwd=d, env=clean_env(),
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        try:
            deadline = time.monotonic() + 20 * self.slack
            while time.monotonic() < deadline and not all(
                    os.path.exists(os.path.join(d, f"started-{rank}")) for rank in (0, 1)):
                time.sleep(0.02)
            runs = [r for r in os.listdir(os.path.join(d, ".flowrun", "runs")) if r != "latest"]
            if not self.check(len(runs) == 1, "in progress: the run has started", str(runs)):
                return
            run_id = runs[0]
            r = self.call("in progress", d, "resume", run_id)
            self.equal((2, f"flowrun: error: run {run_id} is still in progress (flowrun pid {p.pid} on host-a); "
                           f"resume it once it has ended\n"),
                       (r.rc, r.stderr), "in progress: a live run is refused")
            # SIGKILL leaves run.json saying "running"; the lock tells it ended.
            os.kill(p.pid, signal.SIGKILL)
            p.wait(timeout=10)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            p.stderr.close()
        run_dir = os.path.join(d, ".flowrun", "runs", run_id)
        with open(os.path.join(run_dir, "run.json")) as f:
            record = json.load(f)
        self.equal(("running", "running"), (record["state"], record["steps"]["train"]),
                   "in progress: a killed run's run.json still says running")
        # The guardian stops train's workers; wait until they are gone.
        deadline = time.monotonic() + 20 * self.slack
        while time.monotonic() < deadline and self.live_workers(run_id):
            time.sleep(0.05)
        self.touch(d, "train.ok")
        self.touch(d, "evaluate.ok")
        r = self.call("killed resume", d, "resume", run_id)
        self.check(r.rc == 0, "in progress: a killed run can be resumed", r.detail())
        self.equal(collections.Counter({"prepare": 1, "train r0": 2, "train r1": 2, "evaluate": 1}),
                   self.counter(d), "in progress: prepare is reused; train, killed while it ran, runs again")
        self.check(f"flowrun: step 'train' runs (it did not finish in run {run_id})" in r.lines(),
                   "in progress: a step that was running when flowrun was killed ran again", "\n".join(r.lines()))

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

    # --- resuming a resumed run -------------------------------------------------

    def test_resume_resumed(self):
        d = self.workspace("twice")
        first = self.first_run("twice", d, "--", "a b")
        if first.run_id is None:
            return
        second = self.call("twice: second", d, "resume", first.run_id, "--cpus", "3")
        self.check(second.rc == 4 and second.run_id, "twice: the second run fails in evaluate again", second.detail())
        if not second.run_id:
            return
        self.equal(3, second.json("run.json")["cpus"], "twice: run.json records --cpus")
        # The spec file is gone: the copy saved with the second run is used.
        os.remove(os.path.join(d, "flow.yaml"))
        self.touch(d, "evaluate.ok")
        third = self.call("twice: third", d, "resume", second.run_id)
        if not self.check(third.rc == 0, "twice: resuming the resumed run succeeds", third.detail()):
            return
        a, b = first.run_id, second.run_id
        self.equal(collections.Counter({"prepare": 1, "train r0": 1, "train r1": 1, "evaluate": 3}),
                   self.counter(d), "twice: prepare and train ran once over three runs")
        self.equal([
            f"flowrun: spec {second.run_dir}/spec.yaml, the copy saved with run {b} ({d}/flow.yaml no longer exists)",
            f"flowrun: resuming run {b} ({second.run_dir}) with its --fake-gpus 2 --cpus 3 -- 'a b'",
            f"flowrun: step 'prepare' reused from run {b} (succeeded at {self.end_of(first, 'prepare')} in run {a})",
            f"flowrun: step 'train' reused from run {b} (succeeded at {self.end_of(first, 'train')} in run {a}; "
            f"4 output files)",
            f"flowrun: step 'evaluate' runs (it failed in run {b})"],
            third.lines()[:2] + third.lines()[3:6], "twice: the console names both runs")
        self.check("[evaluate] args: a b" in third.stdout.splitlines(),
                   "twice: ${args} carry over two resumes", third.stdout)
        self.equal({"run_id": a, "run_dir": first.run_dir}, third.json("train", "results.json")["reused_from"],
                   "twice: reused_from names the run that ran the step")
        self.equal({"run_id": b, "run_dir": second.run_dir, "by": "resume"}, third.json("run.json")["resumed_from"],
                   "twice: run.json names the run resumed")
        self.equal(f"{d}/flow.yaml", third.json("run.json")["spec"],
                   "twice: run.json still names the original spec file")
        new_file = os.path.join(third.run_dir, "train", "outputs", "rank1", "w.txt")
        self.check(os.path.isfile(new_file) and os.stat(new_file).st_ino == os.stat(
            os.path.join(first.run_dir, "train", "outputs", "rank1", "w.txt")).st_ino,
            "twice: the outputs are still the first run's files", new_file)

    # --- --python is recorded and counts as a change -----------------------------

    def test_python(self):
        spec = """name: py
steps:
  - name: which
    run: python3 -c "import sys; open('counter.txt', 'a').write(sys.executable + '\\n')"
  - name: check
    run: test -f check.ok
"""
        d = self.workspace("python", spec)
        first = self.call("python", d, "flow.yaml")
        if not self.check(first.rc == 1 and first.run_id, "python: the first run fails in check", first.detail()):
            return
        r = self.call("python resume", d, "resume", first.run_id, "--python", "/usr/bin/python3")
        self.equal((1, f"flowrun: step 'which' runs (its run changed since run {first.run_id})"),
                   (r.rc, r.lines()[3] if len(r.lines()) > 3 else r.detail()),
                   "python: a new --python runs the python steps again")
        self.equal("/usr/bin/python3", r.json("run.json")["python"] if r.run_id else None,
                   "python: run.json records --python")
        self.touch(d, "check.ok")
        again = self.call("python again", d, "resume", r.run_id or "?")
        self.check(again.rc == 0 and len(again.lines()) > 3 and
                   again.lines()[3].startswith(f"flowrun: step 'which' reused from run {r.run_id} "),
                   "python: resuming that run without --python uses its --python, so nothing changed",
                   again.detail())
        with open(os.path.join(d, "counter.txt")) as f:
            ran = f.read().splitlines()
        self.check(len(ran) == 2 and ran[1] == "/usr/bin/python3" and ran[0] != ran[1],
                   "python: 'which' ran twice, the second time with --python", str(ran))
