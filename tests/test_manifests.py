"""flowrun manifest end to end: every manifest it writes, for a table of specs and options, holds
to Kubernetes' own schemas for each version from 1.29 to 1.35 (kubernetes-validate --strict:
no field the schema does not name), read back as YAML 1.1 as kubectl reads it; and its errors.

  python3 -m pytest tests/test_manifests.py [--flowrun PATH] [--kubernetes-validate DIR] [-k NAME]

kubernetes-validate runs in the venv scripts/test's deps phase makes (build/kubernetes-validate,
pinned by scripts/kubernetes-validate.txt), through tests/manifests/validate.py; without it the
schema tests are skipped, saying how to make it. What is validated: the Secret, the Service and
the Indexed Job, each under its Kubernetes schema of each version. The JobSet is a custom
resource kubernetes-validate has no schema for: its own fields are held to
tests/manifests/jobset-v1alpha2.schema.json (written from JobSet's v1alpha2 API types, strict),
whose metadata and replicated job templates are Kubernetes' strict ObjectMeta and
JobTemplateSpec of each version, and each replicated job's template is also validated whole as a
batch/v1 Job. Not validated: what only an API server checks (JobSet's and the Job controller's
webhooks, immutability, quotas), beyond the pods' host names, which are checked here.
"""
import json
import os
import re
import subprocess

import pytest
import yaml

from flowrun_testlib import clean_env, run

pytestmark = pytest.mark.manifests

VERSIONS = [f"1.{minor}" for minor in range(29, 36)]
IMAGE = "ghcr.io/me/train:1"


def spec(name, parallel):
    """A flow NAME: prepare, a parallel step `fit` with PARALLEL (lines under parallel:), its join."""
    return (f"name: {name}\nsteps:\n  - name: prepare\n    run: python3 prepare.py\n"
            f"  - name: fit\n    run: python3 fit.py\n    parallel:\n{parallel}"
            f"    outputs: [result.json]\n  - name: report\n    join: fit\n    run: python3 report.py\n")


# (case, spec text, options after SPEC, the kinds written, the pods, GPUs a pod)
CASES = [
    ("single node", spec("single", "      gpus: all\n"), ["--gpus-per-node", "8"],
     ["Secret", "Service", "Job"], 1, 8),
    ("2 nodes", spec("two", "      nodes: 2\n"), ["--gpus-per-node", "8"], ["Secret", "Service", "Job"], 2, 8),
    ("2 nodes and a spare", spec("spare", "      nodes: 2\n      spare_nodes: 1\n"), ["--gpus-per-node", "4"],
     ["Secret", "Service", "Job"], 3, 4),
    ("elastic 2:4", spec("elastic", "      nodes: \"2:4\"\n      max_restarts: 3\n"), ["--gpus-per-node", "8"],
     ["Secret", "Service", "Job"], 4, 8),
    ("CPU only", spec("cpu", "      nodes: 2\n      cpus: 8\n"), [], ["Secret", "Service", "Job"], 2, 0),
    ("a restart policy", spec("restarts", "      nodes: 2\n      max_restarts: 2\n      restart:\n"
                              "        causes: [signal, exit_code]\n        exit_codes: [2, 75]\n"),
     ["--gpus-per-node", "8"], ["Secret", "Service", "Job"], 2, 8),
    ("--jobset", spec("jobset", "      nodes: 2\n      spare_nodes: 1\n      max_restarts: 1\n"),
     ["--gpus-per-node", "8", "--jobset"], ["Secret", "JobSet"], 3, 8),
    ("--namespace", spec("namespaced", "      nodes: 2\n"), ["--gpus-per-node", "8", "--namespace", "ml"],
     ["Secret", "Service", "Job"], 2, 8),
    ("--queue", spec("queued", "      nodes: 2\n"), ["--gpus-per-node", "8", "--queue", "team-a"],
     ["Secret", "Service", "Job"], 2, 8),
    ("--jobset --queue --namespace", spec("queued-set", "      gpus: 16\n"),
     ["--gpus-per-node", "8", "--jobset", "--queue", "team-a", "--namespace", "ml"], ["Secret", "JobSet"], 2, 8),
    ("--name --workdir", spec("My_Train.v2", "      nodes: 2\n"),
     ["--gpus-per-node", "2", "--name", "mytrain", "--workdir", "/workspace"], ["Secret", "Service", "Job"], 2, 2),
]


@pytest.fixture
def manifest(flowrun, scratch):
    """flowrun manifest for a spec text: (the result, the objects read back as kubectl reads YAML)."""
    def write(text, *options, name="train.yaml"):
        with open(os.path.join(scratch, name), "w") as f:
            f.write(text)
        r = run([flowrun, "manifest", name, "--image", IMAGE, *options], cwd=scratch, env=clean_env())
        objects = [o for o in yaml.safe_load_all(r.stdout) if o is not None] if r.returncode == 0 else []
        return r, objects
    return write


@pytest.fixture(scope="module")
def kubernetes_validate(request):
    """The venv's Python, which has kubernetes-validate."""
    venv = os.path.abspath(request.config.getoption("kubernetes_validate"))
    python = os.path.join(venv, "bin", "python")
    if not os.path.exists(os.path.join(venv, "flowrun-pins.sha256")):
        pytest.skip(f"no kubernetes-validate venv at {venv}; make it with scripts/test --phase deps")
    return python


def validate(python, repo_root, objects):
    """[(label, what, version, validated, error)] of tests/manifests/validate.py for [(label, object)]."""
    request = {"versions": VERSIONS, "objects": [{"label": label, "object": o} for label, o in objects]}
    done = subprocess.run([python, os.path.join(repo_root, "tests", "manifests", "validate.py")],
                          input=json.dumps(request), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def kinds_checked(results):
    """{(label, version): [what, ...]} of the results."""
    seen = {}
    for r in results:
        seen.setdefault((r["label"], r["version"]), []).append(r["what"])
    return seen


def test_every_manifest_holds_to_kubernetes_schemas(manifest, kubernetes_validate, repo_root, check):
    objects = []
    for case, text, options, kinds, pods, gpus in CASES:
        r, written = manifest(text, *options)
        check(r.returncode == 0 and r.stderr == "", f"{case}: written", r.stderr)
        check([o.get("kind") for o in written] == kinds, f"{case}: {', '.join(kinds)}",
              str([o.get("kind") for o in written]))
        objects += [(f"{case}: {o.get('kind')} {o['metadata']['name']}", o) for o in written]
    results = validate(kubernetes_validate, repo_root, objects)
    for r in results:
        check(r["error"] is None and r["validated"] == r["version"],
              f"{r['label']}: {r['what']} under Kubernetes {r['version']} --strict",
              f"validated against {r['validated']}: {r['error']}")
    seen = kinds_checked(results)
    for label, o in objects:
        for version in VERSIONS:
            whats = seen.get((label, version), [])
            want = 2 if o["kind"] == "JobSet" else 1
            check(len(whats) == want, f"{label}: checked under {version}", str(whats))


def test_the_schemas_refuse_what_kubernetes_would(manifest, kubernetes_validate, repo_root, check):
    """A check that cannot fail proves nothing: the same objects, each spoilt once, are refused."""
    _, (_, _, job) = manifest(spec("two", "      nodes: 2\n"), "--gpus-per-node", "8")
    _, (_, jobset) = manifest(spec("set", "      nodes: 2\n"), "--gpus-per-node", "8", "--jobset")

    def spoilt(o, change):
        o = json.loads(json.dumps(o))
        change(o)
        return o

    template = lambda o: o["spec"]["replicatedJobs"][0]["template"]  # noqa: E731
    cases = [
        ("a misspelt Job field", spoilt(job, lambda o: o["spec"].update(completion=2)), "spec"),
        ("a port as text", spoilt(job, lambda o: o["spec"]["template"]["spec"]["containers"][0]["ports"][0]
                                  .update(containerPort="29400")), "containerPort"),
        ("an env value as a number", spoilt(job, lambda o: o["spec"]["template"]["spec"]["containers"][0]["env"][1]
                                            .update(value=3)), "value"),
        ("a misspelt JobSet network field",
         spoilt(jobset, lambda o: o["spec"]["network"].update(enableDNSHostname=True)), "network"),
        ("a failure rule's name with a space",
         spoilt(jobset, lambda o: o["spec"]["failurePolicy"]["rules"][0].update(name="not fixed")), "name"),
        ("a misspelt field of a replicated job's Job",
         spoilt(jobset, lambda o: template(o)["spec"].update(backofLimit=1)), "spec"),
        ("an unknown container field in a replicated job's pods",
         spoilt(jobset, lambda o: template(o)["spec"]["template"]["spec"]["containers"][0].update(gpus=8)),
         "containers"),
        ("a misspelt metadata field of the JobSet",
         spoilt(jobset, lambda o: o["metadata"].update(label={})), "metadata"),
    ]
    results = validate(kubernetes_validate, repo_root, [(what, o) for what, o, _ in cases])
    for what, _, where in cases:
        refused = [r for r in results if r["label"] == what and r["error"]]
        check(len({r["version"] for r in refused}) == len(VERSIONS) and all(where in r["error"] for r in refused),
              f"{what}: refused under every version, at {where}",
              "\n".join(f"{r['version']} {r['what']}: {r['error']}" for r in results if r["label"] == what))
    # A field of a newer Kubernetes is refused by the older schemas only: each version is its own.
    newer = spoilt(job, lambda o: o["spec"].update(managedBy="kueue.x-k8s.io/multikueue"))
    results = validate(kubernetes_validate, repo_root, [("managedBy", newer)])
    check([r["version"] for r in results if r["error"]] == ["1.29"],
          "spec.managedBy (Kubernetes 1.30 on) is refused under 1.29 alone",
          "\n".join(f"{r['version']}: {r['error']}" for r in results))


def test_the_pods(manifest, check):
    """What Kubernetes makes of each manifest that no schema says: the pods' count, host names, GPUs,
    and the fields read back as kubectl reads YAML (1.1: `"3"` a string, `"True"` no boolean)."""
    for case, text, options, kinds, pods, gpus in CASES:
        r, written = manifest(text, *options)
        workload = written[-1]
        is_set = workload["kind"] == "JobSet"
        job = workload["spec"]["replicatedJobs"][0]["template"]["spec"] if is_set else workload["spec"]
        name = workload["metadata"]["name"]
        check(job["completions"] == job["parallelism"] == pods, f"{case}: {pods} pods", str(job["completions"]))
        hosts = [f"{name}-node-0-{i}" if is_set else f"{name}-{i}" for i in range(pods)]
        check(all(re.fullmatch(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?", h) for h in hosts),
              f"{case}: the pods' host names are DNS labels of at most 63 characters", str(hosts))
        container = job["template"]["spec"]["containers"][0]
        env = {e["name"]: e.get("value") for e in container["env"]}
        check(env["FLOWRUN_GANG_NODES"] == str(pods), f"{case}: FLOWRUN_GANG_NODES is the string '{pods}'",
              repr(env["FLOWRUN_GANG_NODES"]))
        check(env["FLOWRUN_GANG_HEAD"] == f"{hosts[0]}.{name}", f"{case}: FLOWRUN_GANG_HEAD is pod 0's DNS name",
              env["FLOWRUN_GANG_HEAD"])
        check(container["command"] == ["flowrun", "train.yaml"] and container["image"] == IMAGE,
              f"{case}: every pod runs flowrun SPEC in the image", str(container))
        limits = container.get("resources", {}).get("limits", {})
        check(limits.get("nvidia.com/gpu", 0) == gpus, f"{case}: nvidia.com/gpu {gpus}", str(limits))
        check(job["podFailurePolicy"]["rules"][0]["onPodConditions"][0]["status"] == "True",
              f"{case}: the DisruptionTarget condition's status is the string True")
        secret = written[0]
        check(re.fullmatch(r"[0-9a-f]{64}", str(secret["stringData"]["token"])) is not None,
              f"{case}: the Secret holds a token of 64 hex digits")
    # A fresh token each time.
    first = manifest(CASES[0][1], "--gpus-per-node", "8")[1][0]["stringData"]["token"]
    second = manifest(CASES[0][1], "--gpus-per-node", "8")[1][0]["stringData"]["token"]
    check(first != second, "each manifest has a token of its own")


def test_errors(manifest, flowrun, scratch, check):
    """Each refusal: exit 2, the line that says what to write, nothing on stdout."""
    two = spec("two", "      nodes: 2\n")
    cases = [
        ("a bad --name", two, ["--gpus-per-node", "8", "--name", "Train_1"],
         "flowrun: error: --name 'Train_1': a Kubernetes name here is a DNS-1035 label: lower-case letters, "
         "digits and '-', starting with a letter and ending with a letter or digit; try --name train-1\n"),
        ("a --name too long for the pods' host names", two, ["--gpus-per-node", "8", "--name", "a" * 62],
         f"flowrun: error: --name '{'a' * 62}' has 62 characters, but each pod's host name is NAME-INDEX (the "
         f"last '{'a' * 62}-1'), which Kubernetes holds to 63 characters; use at most 61, such as --name "
         f"{'a' * 61}\n"),
        ("no GPU count for a GPU step", two, [],
         "flowrun: error: step fit runs on GPUs, and nothing says how many each pod has: pass --gpus-per-node N, "
         "the nvidia.com/gpu of every pod (or give the step cpus: N for CPU workers)\n"),
        ("a spec that names its engine", "name: t\ncluster:\n  engine: slurm\n" + two[len("name: two\n"):],
         ["--gpus-per-node", "8"],
         "train.yaml:2:1: cluster.engine: engine 'slurm' starts the agents with srun, and an engine the spec "
         "names wins over the gang that a Job's pods make, each pod its own node; write engine: gang, or leave "
         "cluster: out (its gpus_per_node as --gpus-per-node)\n"),
        ("a relative --workdir", two, ["--gpus-per-node", "8", "--workdir", "src"],
         "flowrun: error: --workdir 'src': the container's working directory is an absolute path in the image, "
         "such as /workspace\n"),
    ]
    for what, text, options, stderr in cases:
        r, _ = manifest(text, *options)
        check(r.returncode == 2 and r.stdout == "" and r.stderr == stderr, what,
              f"exit {r.returncode}\nstdout: {r.stdout}\nstderr: {r.stderr}")
    with open(os.path.join(scratch, "train.yaml"), "w") as f:
        f.write(two)
    r = run([flowrun, "manifest", "train.yaml", "--gpus-per-node", "8"], cwd=scratch, env=clean_env())
    check(r.returncode == 2 and r.stdout == "" and r.stderr == "flowrun: error: manifest: --image is required\n"
          "Run 'flowrun manifest --help' for usage.\n", "no --image", r.stderr)
    r = run([flowrun, "manifest", "missing.yaml", "--image", IMAGE], cwd=scratch, env=clean_env())
    check(r.returncode == 2 and r.stdout == "" and r.stderr.startswith("missing.yaml"), "a spec that is not there",
          r.stderr)
