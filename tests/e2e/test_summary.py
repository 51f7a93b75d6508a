"""End-to-end tests of flowrun's output for CI: the run summary (`--json` on stdout,
`--summary-json FILE`) of `flowrun SPEC`, `flowrun run` and `flowrun resume`, parsed after a
success, a failing rank, a usage error, a worker that exits 2, SIGTERM mid-run and a resume;
`flowrun validate --json`; and the "format" key of every JSON document flowrun writes.
Small shell steps on simulated GPUs; a few seconds in all.

  python3 -m pytest tests/e2e/test_summary.py [--flowrun PATH] [--sanitized] [-k NAME]
"""
import glob
import json
import os
import signal
import subprocess
import time

import pytest

from flowrun_testlib import clean_env
from flowrun_testlib.launcher import SANITIZER_REPORT
from flowrun_testlib.suite import E2E, path_of

pytestmark = pytest.mark.summary

# prepare -> train (2 ranks; rank 1 exits with $TRAIN_CODE unless it is 0) -> evaluate (the join).
FLOW = """name: ci
steps:
  - name: prepare
    shell: true
    run: echo prepared
  - name: train
    shell: true
    run: |
      echo "rank $RANK says hello"
      if [ "$RANK" = 1 ] && [ "${TRAIN_CODE:-0}" != 0 ]; then echo "rank 1 broke" >&2; exit $TRAIN_CODE; fi
      echo "w$RANK" > "$FLOWRUN_OUTPUT_DIR/w.txt"
    parallel: {}
  - name: evaluate
    join: train
    shell: true
    run: cat ${steps.train.outputs}/w.txt
"""

# One step that says it started, then waits to be stopped.
SLOW = """name: slow
steps:
  - name: wait
    shell: true
    run: |
      touch started
      exec sleep 60
"""


class Result:
    def __init__(self, rc, stdout, stderr, summary_path=None):
        self.rc, self.stdout, self.stderr = rc, stdout, stderr
        self.file = None
        if summary_path and os.path.exists(summary_path):
            with open(summary_path) as f:
                self.file = json.load(f)

    def stdout_json(self):
        try:
            return json.loads(self.stdout)
        except ValueError:
            return None

    def detail(self):
        return f"exit {self.rc}\n--- stdout\n{self.stdout[-3000:]}\n--- stderr\n{self.stderr[-4000:]}"


class TestSummary(E2E):
    def workspace(self, name, text=FLOW):
        d = os.path.join(self.scratch, name)
        os.makedirs(d)
        with open(os.path.join(d, "flow.yaml"), "w") as f:
            f.write(text)
        return d

    def call(self, label, cwd, *argv, env=None, summary="summary.json"):
        p = subprocess.run([self.flowrun, *argv], cwd=cwd, env=env or clean_env(), capture_output=True,
                           text=True, timeout=60 * self.slack)
        m = SANITIZER_REPORT.search(p.stderr)
        self.check(m is None, f"{label}: no sanitizer report", p.stderr[max(0, m.start() - 200):][:4000] if m else "")
        return Result(p.returncode, p.stdout, p.stderr, os.path.join(cwd, summary) if summary else None)

    def both(self, label, r):
        """The summary on stdout (--json) and in the file (--summary-json): the same document."""
        doc = r.stdout_json()
        self.check(doc is not None and doc == r.file, f"{label}: stdout is the summary, as in the file",
                   r.detail())
        return r.file or doc or {}

    def equal(self, expected, actual, label, detail=""):
        return self.check(expected == actual, label, f"expected: {expected!r}\nactual:   {actual!r}\n{detail}")

    # --- success -------------------------------------------------------------

    def test_success(self):
        d = self.workspace("ok")
        r = self.call("ok", d, "flow.yaml", "--fake-gpus", "2", "--json", "--summary-json", "summary.json")
        s = self.both("ok", r)
        self.equal(0, r.rc, "ok: exit 0", r.detail())
        self.equal(("flowrun.summary/1", "ci", "succeeded", 0, None, None),
                   (s.get("format"), s.get("flow"), s.get("state"), s.get("exit_code"), s.get("culprit"),
                    s.get("error")), "ok: format, flow, state, exit code, no culprit")
        self.equal([("prepare", "succeeded", "succeeded", 0, 1), ("train", "succeeded", "succeeded", 0, 1),
                    ("evaluate", "succeeded", "succeeded", 0, 1)],
                   [(x["name"], x["state"], x["outcome"], x["exit_code"], x["attempts"]) for x in s.get("steps", [])],
                   "ok: every step's outcome")
        run_dir = s.get("run_dir") or ""
        self.check(os.path.isfile(os.path.join(run_dir, "run.json")) and os.path.basename(run_dir) == s.get("run_id"),
                   "ok: run_dir is the run's directory, named by its run id", run_dir)
        self.check("rank 0 says hello" in r.stderr and "hello" not in r.stdout,
                   "ok: with --json the workers' output goes to stderr", r.detail())

    def test_unwritable_summary(self):
        d = self.workspace("unwritable")
        r = self.call("unwritable", d, "flow.yaml", "--fake-gpus", "2", "--summary-json", "no/such/dir/s.json",
                      summary=None)
        self.check(r.rc == 1 and "flowrun: error: cannot write the summary no/such/dir/s.json: " in r.stderr,
                   "unwritable: a run that succeeded but whose summary cannot be written exits 1", r.detail())

    # --- a failing rank ----------------------------------------------------------

    def test_failing_rank(self):
        d = self.workspace("fail")
        r = self.call("fail", d, "flow.yaml", "--fake-gpus", "2", "--summary-json", "summary.json",
                      env=clean_env(TRAIN_CODE="3"))
        s = r.file or {}
        self.equal(3, r.rc, "fail: exit 3, the culprit's code", r.detail())
        self.check(r.stdout_json() is None and "rank 0 says hello" in r.stdout,
                   "fail: without --json stdout is the console as always", r.detail())
        self.equal(("failed", 3), (s.get("state"), s.get("exit_code")), "fail: state and exit code")
        steps = {x["name"]: x for x in s.get("steps", [])}
        self.equal(("failed", "failed", 3, [1]),
                   tuple(steps.get("train", {}).get(k) for k in ("state", "outcome", "exit_code", "failed_ranks")),
                   "fail: train failed, rank 1 failed")
        self.equal(("skipped", None), (steps.get("evaluate", {}).get("state"), steps.get("evaluate", {}).get("outcome")),
                   "fail: evaluate was skipped")
        c = s.get("culprit") or {}
        self.equal(("train", "failed", 3, 1, "exited", 3, None, 3),
                   tuple(c.get(k) for k in ("step", "outcome", "step_exit_code", "rank", "status", "exit_code",
                                            "signal", "shell_code")), "fail: the culprit is train's rank 1")
        log = c.get("stderr_log") or ""
        self.check(log == os.path.join(s.get("run_dir", ""), "train", "rank1", "stderr.log") and os.path.isfile(log)
                   and "rank 1 broke" in open(log).read(), "fail: the culprit's stderr.log holds what it said", log)

    # --- a usage error, and a worker that exits 2 ---------------------------------

    def test_usage_error(self):
        d = self.workspace("usage")
        r = self.call("usage", d, "flow.yaml", "--bogus", "--json", "--summary-json", "summary.json")
        s = self.both("usage", r)
        self.equal((2, "usage_error", 2, None, None, [], None),
                   (r.rc, s.get("state"), s.get("exit_code"), s.get("run_id"), s.get("culprit"), s.get("steps"),
                    s.get("run_dir")), "usage: exit 2, state usage_error, no run", r.detail())
        self.check("unknown option '--bogus'" in (s.get("error") or "") and "unknown option '--bogus'" in r.stderr,
                   "usage: the error, in the summary and on stderr", r.detail())
        with open(os.path.join(d, "bad.yaml"), "w") as f:
            f.write("name: bad\nsteps:\n  - name: a\n    rn: true\n")
        r = self.call("bad spec", d, "bad.yaml", "--summary-json=summary.json")
        s = r.file or {}
        self.equal((2, "usage_error", None), (r.rc, s.get("state"), s.get("run_id")),
                   "bad spec: a spec error is a usage error too", r.detail())
        self.check("bad.yaml:4:5" in (s.get("error") or ""), "bad spec: the summary's error names the place",
                   json.dumps(s))
        r = self.call("plan", d, "plan", "flow.yaml", "--fake-gpus", "2", "--summary-json", "summary.json",
                      summary=None)
        self.check(r.rc == 2 and "--summary-json: only a run has a summary" in r.stderr,
                   "plan: --summary-json is refused, not ignored", r.detail())
        # The same exit code from a worker: the summary tells them apart.
        r = self.call("worker 2", d, "flow.yaml", "--fake-gpus", "2", "--summary-json", "summary.json",
                      env=clean_env(TRAIN_CODE="2"))
        s = r.file or {}
        c = s.get("culprit") or {}
        self.equal((2, "failed", "train", 1, 2),
                   (r.rc, s.get("state"), c.get("step"), c.get("rank"), c.get("exit_code")),
                   "worker 2: exit 2 too, but state failed and the culprit exited 2", r.detail())

    # --- SIGTERM mid-run -------------------------------------------------------

    def test_sigterm(self):
        d = self.workspace("term", SLOW)
        p = subprocess.Popen([self.flowrun, "flow.yaml", "--grace", "5", "--json", "--summary-json", "summary.json"],
                             cwd=d, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 30 * self.slack
        while not os.path.exists(os.path.join(d, "started")) and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=60 * self.slack)
        r = Result(p.returncode, out, err, os.path.join(d, "summary.json"))
        s = self.both("term", r)
        self.equal((143, "interrupted", 143), (r.rc, s.get("state"), s.get("exit_code")),
                   "term: exit 143, state interrupted", r.detail())
        self.equal([("wait", "failed", "interrupted")],
                   [(x["name"], x["state"], x["outcome"]) for x in s.get("steps", [])],
                   "term: the step was interrupted")
        c = s.get("culprit") or {}
        self.equal(("wait", "interrupted", None), (c.get("step"), c.get("outcome"), c.get("exit_code")),
                   "term: the stopped step, with no culprit rank")

    def start_on_fifo(self, name, argv):
        """`flowrun flow.yaml ARGV` in a fresh directory where flow.yaml is a FIFO nobody has written yet; returns
        (the directory, the process, the FIFO's write end once flowrun has opened it to read, or None)."""
        d = os.path.join(self.scratch, f"early-{name}")
        os.makedirs(d)
        fifo = os.path.join(d, "flow.yaml")
        os.mkfifo(fifo)
        p = subprocess.Popen([self.flowrun, "flow.yaml", *argv], cwd=d, env=clean_env(), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        # Opening the write end succeeds once flowrun has opened the spec to read it.
        writer, deadline = None, time.monotonic() + 30 * self.slack
        while writer is None and p.poll() is None and time.monotonic() < deadline:
            try:
                writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                time.sleep(0.01)
        return d, p, writer

    @pytest.mark.parametrize("sig, argv", [
        pytest.param(signal.SIGTERM, ["--json", "--summary-json", "summary.json"], id="SIGTERM-json-summary-json"),
        pytest.param(signal.SIGINT, ["--summary-json", "summary.json"], id="SIGINT-summary-json"),
        pytest.param(signal.SIGHUP, ["--json"], id="SIGHUP-json"),
    ])
    def test_signal_before_the_run(self, sig, argv):
        """A stop signal before the run holds them (here: the spec is a FIFO nobody has written yet)."""
        name = signal.Signals(sig).name
        d, p, writer = self.start_on_fifo(name, argv)
        try:
            if not self.check(writer is not None, f"{name}: flowrun reads the spec", ""):
                return
            p.send_signal(sig)
            out, err = p.communicate(timeout=60 * self.slack)
        finally:
            if writer is not None:
                os.close(writer)
            if p.poll() is None:
                p.kill()
                p.communicate()
        r = Result(p.returncode, out, err, os.path.join(d, "summary.json"))
        docs = [doc for doc in (r.file, r.stdout_json() if "--json" in argv else None) if doc is not None]
        self.equal(len(argv) - (1 if "--summary-json" in argv else 0), len(docs),
                   f"{name}: a summary wherever one was asked for", r.detail())
        for doc in docs:
            self.equal((128 + sig, "interrupted", 128 + sig, None,
                        f"interrupted by {name} before the run started"),
                       (r.rc, doc.get("state"), doc.get("exit_code"), doc.get("run_id"), doc.get("error")),
                       f"{name}: exit {128 + sig}, state interrupted, no run", r.detail())

    @pytest.mark.parametrize("sig", [signal.SIGUSR1, signal.SIGUSR2], ids=lambda sig: signal.Signals(sig).name)
    def test_usr_signal_before_the_run(self, sig):
        """SIGUSR1 and SIGUSR2 before any worker runs (a Slurm --signal notice while flowrun reads its spec)
        neither end flowrun nor stop the run: flowrun says nobody was there to take it, and runs the flow.
        The spec is a FIFO, read once: the run keeps what was read as its spec.yaml (a second read hung)."""
        name = signal.Signals(sig).name
        d, p, writer = self.start_on_fifo(name, ["--json"])
        try:
            if not self.check(writer is not None, f"{name}: flowrun reads the spec", ""):
                return
            p.send_signal(sig)
            os.set_blocking(writer, True)
            os.write(writer, b"name: early\nsteps:\n  - name: hello\n    run: echo hello\n")
            os.close(writer)
            writer = None
            out, err = p.communicate(timeout=60 * self.slack)
        finally:
            if writer is not None:
                os.close(writer)
            if p.poll() is None:
                p.kill()
                p.communicate()
        r = Result(p.returncode, out, err, None)
        doc = r.stdout_json() or {}
        self.equal((0, "succeeded"), (r.rc, doc.get("state")), f"{name}: the run goes on and succeeds",
                   r.detail())
        self.check(f"flowrun: {name} received before any worker started: no worker to pass it on to" in err
                   and "[hello] hello" in err, f"{name}: flowrun says nobody took it, then runs the step",
                   r.detail())
        saved = glob.glob(os.path.join(d, ".flowrun", "runs", "early-*", "spec.yaml"))
        self.check(len(saved) == 1 and open(saved[0]).read().startswith("name: early\n"),
                   f"{name}: the run's spec.yaml is the text flowrun read", str(saved))

    # --- resume ----------------------------------------------------------------

    def test_resume(self):
        d = self.workspace("resume")
        first = self.call("resume first", d, "flow.yaml", "--fake-gpus", "2", "--summary-json", "first.json",
                          env=clean_env(TRAIN_CODE="5"), summary="first.json")
        old = first.file or {}
        self.equal((5, "failed"), (first.rc, old.get("state")), "resume: the first run fails", first.detail())
        if not old.get("run_id"):
            return
        r = self.call("resume", d, "resume", old["run_id"], "--json", "--summary-json", "summary.json")
        s = self.both("resume", r)
        self.equal((0, "succeeded", old["run_id"]), (r.rc, s.get("state"), s.get("resumed_from")),
                   "resume: the new run succeeds and names the run it resumed", r.detail())
        self.check(s.get("run_id") not in (None, old["run_id"]), "resume: a run of its own", json.dumps(s))
        self.equal([("prepare", "reused"), ("train", "succeeded"), ("evaluate", "succeeded")],
                   [(x["name"], x["state"]) for x in s.get("steps", [])], "resume: prepare reused, the rest ran")
        r = self.call("resume usage", d, "resume", "--json", "--bogus", summary=None)
        self.equal((2, "usage_error"), (r.rc, (r.stdout_json() or {}).get("state")),
                   "resume: a usage error has its summary", r.detail())

    # --- flowrun run -------------------------------------------------------------

    def test_flowrun_run(self):
        d = self.workspace("run")
        r = self.call("run", d, "run", "--fake-gpus", "0", "--cpus", "2", "--json", "--summary-json",
                      "summary.json", "--no-python", "/bin/sh", "-c",
                      'echo "rank $RANK"; test "$RANK" != 1 || { echo no >&2; exit 6; }', "--json")
        s = self.both("run", r)
        c = s.get("culprit") or {}
        self.equal((6, "failed", 1, 6), (r.rc, s.get("state"), c.get("rank"), c.get("exit_code")),
                   "run: exit 6, rank 1 the culprit", r.detail())
        self.check(os.path.isfile(c.get("stderr_log") or ""), "run: the culprit's stderr.log", json.dumps(c))
        r = self.call("run usage", d, "run", "--json", "--nproc-per-node", "2", "--bogus", "x.py", summary=None)
        self.equal((2, "usage_error"), (r.rc, (r.stdout_json() or {}).get("state")),
                   "run: a usage error has its summary", r.detail())
        # After the script, --json is the script's.
        r = self.call("run script's", d, "run", "--fake-gpus", "0", "--cpus", "1", "--no-python", "/bin/echo",
                      "--json", summary=None)
        self.check(r.rc == 0 and r.stdout_json() is None and "--json" in r.stdout,
                   "run: --json after the program is the program's", r.detail())

    # --- validate --json ----------------------------------------------------------

    def test_validate_json(self):
        d = self.workspace("validate")
        r = self.call("valid", d, "validate", "flow.yaml", "--json", summary=None)
        v = r.stdout_json() or {}
        self.equal((0, "flowrun.validate/1", True, ["prepare", "train", "evaluate"], [], []),
                   (r.rc, v.get("format"), v.get("valid"), v.get("steps"), v.get("errors"), v.get("warnings")),
                   "validate: a valid spec", r.detail())
        with open(os.path.join(d, "bad.yaml"), "w") as f:
            f.write("name: bad\nsteps:\n  - name: train\n    run: x\n    parallel:\n      gpu: 2\n")
        r = self.call("invalid", d, "validate", "bad.yaml", "--json", summary=None)
        v = r.stdout_json() or {}
        errors = v.get("errors") or [{}]
        self.equal((2, False, "bad.yaml", 6, 7, "steps.train.parallel"),
                   (r.rc, v.get("valid"), errors[0].get("file"), errors[0].get("line"), errors[0].get("column"),
                    errors[0].get("path")), "validate: the finding with file, line and column", r.detail())
        self.check("unknown key 'gpu'" in errors[0].get("message", "") and errors[0].get("text", "") in r.stderr,
                   "validate: the message, and the same line on stderr", r.detail())

    # --- the format key -------------------------------------------------------------

    def test_every_document_has_format(self):
        d = self.workspace("format")
        r = self.call("format", d, "flow.yaml", "--fake-gpus", "2", "--summary-json", "summary.json",
                      env=clean_env(TRAIN_CODE="4"))
        s = r.file or {}
        run_dir = s.get("run_dir") or ""
        docs = {"summary.json": s}
        for root, _, files in os.walk(run_dir):
            for name in files:
                # error.json is the worker's (TORCHELASTIC_ERROR_FILE), outputs/ the steps'.
                if name.endswith(".json") and name != "error.json" and "/outputs" not in root:
                    with open(os.path.join(root, name)) as f:
                        docs[os.path.relpath(os.path.join(root, name), run_dir)] = json.load(f)
        self.check({"run.json", "plan.json", "prepare/results.json", "train/results.json"} <= set(docs),
                   "format: the run wrote its documents", sorted(docs))
        for argv in (["plan", "flow.yaml", "--fake-gpus", "2", "--json"], ["gpus", "--fake-gpus", "2", "--json"],
                     # A facts file of an older flowrun has no "format": it is read all the same.
                     ["doctor", "--facts", path_of("fixtures", "gpu", "h200x1.json"), "--json"]):
            out = self.call(" ".join(argv[:1]), d, *argv, summary=None)
            try:
                docs["flowrun " + argv[0]] = json.loads(out.stdout)
            except ValueError:
                self.check(False, f"format: flowrun {argv[0]} prints JSON", out.detail())
        missing = [name for name, doc in docs.items() if "format" not in doc or list(doc)[0] != "format"]
        self.equal([], missing, "format: every document's first key is format")
        self.equal({"summary.json": "flowrun.summary/1", "run.json": 1, "plan.json": "flowrun.plan/1",
                    "flowrun plan": "flowrun.plan/1", "flowrun gpus": "flowrun.gpus/1",
                    "flowrun doctor": "flowrun.doctor/1"},
                   {k: docs[k].get("format") for k in ("summary.json", "run.json", "plan.json", "flowrun plan",
                                                          "flowrun gpus", "flowrun doctor") if k in docs},
                   "format: the formats")

    # --- retry or not --------------------------------------------------------

    def test_retry_classes(self):
        """failure_class and retry_may_help in the summary and results.json, and the console's line."""
        cases = [  # (label, rank 1's command, class, may help)
            ("start-up", "python3 -c 'import no_such_module_anywhere'", "repeats", False),
            ("connection", "python3 -c 'raise ConnectionResetError(104, \"Connection reset by peer\")'",
             "infrastructure", True),
            ("once", "exit 3", "failure", True),
        ]
        for label, command, klass, may_help in cases:
            d = self.workspace(f"retry-{label}", FLOW.replace('exit $TRAIN_CODE', command + '; exit $?'))
            r = self.call(label, d, "flow.yaml", "--fake-gpus", "2", "--summary-json", "summary.json",
                          env=clean_env(TRAIN_CODE="1"))
            s = r.file or {}
            with open(os.path.join(s.get("run_dir") or d, "train", "results.json")) as f:
                res = json.load(f)
            said = "may help" if may_help else "will not help"
            self.check(r.rc != 0 and s.get("failure_class") == klass and s.get("retry_may_help") is may_help
                       and res.get("failure_class") == klass and res.get("retry_may_help") is may_help
                       and s.get("retry_why") == res.get("retry_why")
                       and f"flowrun: a retry {said} ({klass}): {res.get('retry_why')}\n" in r.stderr,
                       f"retry: {label}: class {klass}, retry_may_help {may_help}, in the summary, results.json "
                       "and on the console", f"{json.dumps(s, indent=1)[:1500]}\n{r.detail()}")
            st = self.call(f"{label} status", d, "status", s.get("run_dir") or "latest", summary=None)
            # The failed run wrote its page as it ended: status names the file, and how to write it anew.
            page = (f"page: {s.get('run_dir')}/report.html (flowrun report {s.get('run_id')} writes it anew)\n")
            self.check(st.rc == 0 and st.stdout.endswith(f"a retry {said} ({klass}): {res.get('retry_why')}\n" + page)
                       and (s.get("report") or {}).get("exists") is True,
                       f"retry: {label}: flowrun status ends with it, then the run's page, which the failed run wrote",
                       st.detail())
        r = self.call("usage", self.workspace("retry-usage"), "no-such.yaml", "--summary-json", "summary.json")
        s = r.file or {}
        self.check(r.rc == 2 and s.get("failure_class") == "usage" and s.get("retry_may_help") is False,
                   "retry: a usage error will not be helped by a retry", r.detail())

    def sbatch(self, script, d, job_id, restarts, **variables):
        """The batch script as Slurm would run it in `d` for job `job_id` (requeued `restarts` times, or never),
        with a stand-in scontrol that notes its calls; returns (the process, the calls so far)."""
        bin_dir = os.path.join(d, "bin")
        log = os.path.join(d, "scontrol.log")
        if not os.path.exists(bin_dir):
            os.makedirs(bin_dir)
            with open(os.path.join(bin_dir, "scontrol"), "w") as f:
                f.write('#!/bin/sh\necho "$@" >> "$SCONTROL_LOG"\n')
            os.chmod(os.path.join(bin_dir, "scontrol"), 0o755)
        env = clean_env(FLOWRUN=self.flowrun, FLOWRUN_FAKE_GPUS="2", SCONTROL_LOG=log, SLURM_JOB_ID=job_id,
                        SLURM_JOB_NODELIST="host-a", SLURM_JOB_NUM_NODES="1",
                        **({"SLURM_RESTART_COUNT": restarts} if restarts else {}), **variables)
        env["PATH"] = bin_dir + os.pathsep + env["PATH"]
        p = subprocess.run(["bash", script, "flow.yaml"], cwd=d, env=env, capture_output=True, text=True,
                           timeout=60 * self.slack)
        with open(log) if os.path.exists(log) else open(os.devnull) as f:
            return p, f.read()

    def test_requeue_script(self):
        """specs/examples/slurm/requeue.sbatch requeues the job (a fake scontrol says so) only when the summary
        says a retry may help, and at most MAX_REQUEUES times."""
        script = path_of("..", "specs", "examples", "slurm", "requeue.sbatch")
        cases = [  # (label, rank 1's command, SLURM_RESTART_COUNT, requeued)
            ("repeats", "python3 -c 'import no_such_module_anywhere'", None, False),
            ("may help", "python3 -c 'raise ConnectionResetError(104, \"Connection reset by peer\")'", None, True),
            ("may help, requeued 3 times", "python3 -c 'raise BrokenPipeError(32, \"Broken pipe\")'", "3", False),
        ]
        for label, command, restarts, requeued in cases:
            d = self.workspace(f"sbatch-{label.replace(' ', '-').replace(',', '')}",
                               FLOW.replace('exit $TRAIN_CODE', command + '; exit $?'))
            p, calls = self.sbatch(script, d, "4242", restarts, TRAIN_CODE="1")
            self.check(p.returncode == 1 and calls == ("requeue 4242\n" if requeued else "")
                       and ("requeueing: " in p.stderr) == requeued,
                       f"requeue script: {label}: {'requeued' if requeued else 'not requeued'}, exit 1",
                       f"exit {p.returncode}; scontrol: {calls!r}\n{p.stderr[-2500:]}")

    def test_requeue_script_stops_a_repeating_failure(self):
        """The batch script requeues a first failure (it may not repeat); requeued, flowrun resumes the job's run,
        the same rank fails the same way, and the script does not requeue it again."""
        script = path_of("..", "specs", "examples", "slurm", "requeue.sbatch")
        d = self.workspace("sbatch-twice")
        said = []
        for restarts in (None, "1"):
            p, calls = self.sbatch(script, d, "4343", restarts, TRAIN_CODE="3")
            with open(os.path.join(d, "flowrun-summary.4343.json")) as f:
                s = json.load(f)
            said.append((p.returncode, s.get("failure_class"), s.get("retry_may_help"), s.get("resumed_from"),
                         p.stderr[-1500:]))
        (rc1, class1, help1, _, err1), (rc2, class2, help2, resumed2, err2) = said
        self.check(rc1 == 3 and class1 == "failure" and help1 is True and rc2 == 3 and class2 == "repeats"
                   and help2 is False and resumed2 is not None and calls == "requeue 4343\n"
                   and "the same way in all 2 attempts (1 in the run this one continues)" in err2,
                   "requeue script: a first failure is requeued; the same failure after the requeue is not",
                   f"scontrol: {calls!r}\n{said}")
