"""Lightning and fastai scripts, unchanged, under flowrun on this host (CPU
workers, gloo), in the venv scripts/venv makes:

- lightning: specs/examples/lightning (train.py with Trainer(accelerator="cpu",
  devices=2, strategy="ddp")) trains on 2 workers; Lightning takes flowrun's
  processes as a torchelastic launcher's (TorchElasticEnvironment,
  creates_processes_externally, no process of its own), and the join loads
  rank 0's checkpoint with LightningModule.load_from_checkpoint;
- lightning_mismatch: the same script with devices=3 on 2 workers, under
  Lightning 2.1 (the venv's lightning2/), fails with Lightning's own error,
  and flowrun's report adds the one line that says which numbers match;
- fastai: specs/examples/fastai trains one CPU worker and its join loads the model;
- fastai_env: every rank of a 2-worker step reads the WORLD_SIZE and RANK
  fastai expects (num_distrib(), rank_distrib()).

  python3 -m pytest tests/e2e/frameworks/test_frameworks.py [--flowrun PATH] [--venv DIR] [-k NAME]

DIR defaults to build/venv. Without it (scripts/venv makes it) the tests
are skipped.
"""
import json
import os
import re
import shutil
import subprocess
import time

import pytest

from flowrun_testlib import clean_env
from flowrun_testlib.suite import E2E

pytestmark = pytest.mark.frameworks

HERE = os.path.dirname(os.path.abspath(__file__))
LIGHTNING_RANK = re.compile(r"^\[train r(\d)\] rank (\d)/(\d+): (\w+), creates_processes_externally=(\w+), "
                            r"child processes=(\d+), loss (\d+\.\d+)$", re.M)
MODEL = re.compile(r"^\[evaluate\] model: y = (-?\d+\.\d+) x \+ (-?\d+\.\d+) \(target: y = 3x - 1\)", re.M)


def venv_env(venv):
    """The environment of a shell that activated the venv: its python3 comes first."""
    env = clean_env()
    env["PATH"] = os.path.join(venv, "bin") + ":/usr/bin:/bin"
    env["VIRTUAL_ENV"] = venv
    for name in ("PYTHONPATH", "PYTHONHOME"):
        env.pop(name, None)
    return env


class TestFrameworks(E2E):
    @pytest.fixture(autouse=True)
    def _venv(self, venv):
        self.venv = venv

    def example(self, name, files):
        """A copy of specs/examples/NAME's files in a fresh directory."""
        d = os.path.join(self.scratch, name)
        os.makedirs(d)
        for f in files:
            shutil.copy(os.path.join(self.root, "specs", "examples", name.split("_")[0], f), d)
        return d

    def run(self, spec, *options, timeout=300):
        d = os.path.dirname(spec)
        start = time.monotonic()
        p = subprocess.run([self.flowrun, spec, "--run-dir", os.path.join(d, "run"), *options], cwd=d,
                           env=venv_env(self.venv), capture_output=True, text=True, timeout=timeout)
        detail = f"exit {p.returncode} after {time.monotonic() - start:.1f} s\n--- stdout\n{p.stdout[-4000:]}\n" \
                 f"--- stderr\n{p.stderr[-6000:]}"
        return p, detail

    def check_model(self, out, what, detail):
        m = MODEL.search(out)
        if self.check(m is not None, f"{what}: the join loads the model and prints it", detail):
            w, b = float(m.group(1)), float(m.group(2))
            self.check(abs(w - 3) < 0.1 and abs(b + 1) < 0.1, f"{what}: the model learned y = 3x - 1", m.group(0))

    def test_lightning(self):
        d = self.example("lightning", ["train.py", "evaluate.py", "lightning.yaml"])
        p, detail = self.run(os.path.join(d, "lightning.yaml"))
        self.check(p.returncode == 0, "lightning: flowrun lightning.yaml succeeds", detail)
        ranks = LIGHTNING_RANK.findall(p.stdout)
        self.check(sorted((r[0], r[1], r[2]) for r in ranks) == [("0", "0", "2"), ("1", "1", "2")],
                     "lightning: each of the 2 workers is one Lightning rank of 2", detail)
        for prefix, rank, _, env, external, children, loss in ranks:
            self.check(env == "TorchElasticEnvironment", f"lightning: rank {rank} uses TorchElasticEnvironment",
                         env)
            self.check(external == "True", f"lightning: rank {rank}: creates_processes_externally", external)
            self.check(children == "0", f"lightning: rank {rank} started no process of its own", children)
            self.check(float(loss) < 0.01, f"lightning: rank {rank} trained (loss {loss})", loss)
        # Lightning's own log (on stderr) says the same.
        self.check("[train r0] All distributed processes registered. Starting with 2 processes\n" in p.stderr
                     and all(f"[train r{r}] Initializing distributed: GLOBAL_RANK: {r}, MEMBER: {r + 1}/2\n"
                             in p.stderr for r in (0, 1)),
                     "lightning: Lightning's process group is the 2 workers", detail)
        self.check_model(p.stdout, "lightning", detail)
        with open(os.path.join(d, "run", "train", "results.json")) as f:
            results = json.load(f)
        self.check([w["rank"] for w in results["ranks"]] == [0, 1],
                     "lightning: flowrun started exactly 2 workers", json.dumps(results["ranks"])[:2000])

    def test_lightning_mismatch(self):
        d = self.example("lightning_mismatch", ["train.py", "evaluate.py", "lightning.yaml"])
        spec = os.path.join(d, "lightning.yaml")
        with open(spec) as f:
            text = f.read()
        # devices=3 on 2 workers, with Lightning 2.1 (1.9 does not check).
        text = text.replace("--devices 2", "--devices 3").replace(
            "\nsteps:\n", f"\nenv:\n  PYTHONPATH: {json.dumps(self.lightning2)}\nsteps:\n")
        # The check that the spec took it: a spec with an env: of its own would be left as it was.
        self.check(f"PYTHONPATH: {json.dumps(self.lightning2)}" in text and text.count("\nenv:") == 1,
                     "lightning_mismatch: the spec gets Lightning 2.1's PYTHONPATH", text)
        with open(spec, "w") as f:
            f.write(text)
        p, detail = self.run(spec)
        self.check(p.returncode == 1, "lightning_mismatch: the step fails with Lightning's exit code 1", detail)
        error = ("    ValueError: You set `devices=3` and `num_nodes=1` in Lightning, but the product (3 * 1) "
                 "does not match the world size (2).\n")
        hint = ("flowrun:   Lightning's Trainer(devices=3, num_nodes=1) must multiply to this step's 2 workers "
                "(1 node x 2 per node): set devices=2, num_nodes=1, or change the step's parallel: to run 3 "
                "workers (1 node x 3 per node)\n")
        self.check(error + hint in p.stderr,
                     "lightning_mismatch: the report shows Lightning's error, then flowrun's line", detail)
        self.check(p.stderr.count("flowrun:   Lightning's Trainer(") == 1,
                     "lightning_mismatch: flowrun's line is there once", detail)
        self.check("/lightning2/pytorch_lightning/" in p.stderr,
                     "lightning_mismatch: the error came from Lightning 2.1", detail)

    def test_fastai(self):
        d = self.example("fastai", ["train.py", "evaluate.py", "fastai.yaml"])
        p, detail = self.run(os.path.join(d, "fastai.yaml"))
        self.check(p.returncode == 0, "fastai: flowrun fastai.yaml succeeds", detail)
        m = re.search(r"^\[train r0\] rank 0 of 1: valid loss (\d+\.\d+)$", p.stdout, re.M)
        self.check(m is not None and float(m.group(1)) < 0.01,
                     "fastai: the worker trained, and fastai saw WORLD_SIZE=1, RANK=0", detail)
        self.check_model(p.stdout, "fastai", detail)

    def test_fastai_env(self):
        d = os.path.join(self.scratch, "fastai_env")
        os.makedirs(d)
        spec = os.path.join(d, "env.yaml")
        with open(spec, "w") as f:
            f.write(f"""name: fastai-env
steps:
  - name: env
    run: python3 {os.path.join(HERE, "fastai_env.py")}
    parallel:
      cpus: 2
""")
        p, detail = self.run(spec)
        self.check(p.returncode == 0, "fastai_env: the 2-worker step succeeds", detail)
        for r in (0, 1):
            line = f"[env r{r}] rank {r}: num_distrib()=2 rank_distrib()={r} WORLD_SIZE=2 distrib_ctx=True\n"
            self.check(line in p.stdout, f"fastai_env: rank {r} reads WORLD_SIZE=2 and RANK={r}", detail)

    @property
    def lightning2(self):
        return os.path.join(self.venv, "lightning2")

