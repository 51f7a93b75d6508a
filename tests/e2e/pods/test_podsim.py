"""podsim's own tests (tests/pods/podsim.py): what each pod is, checked from inside the pods by
image/probe.py (host name, DNS names, reach on any port, the environment with the downward API's
fields, the Secret's file and mode, a working directory no other pod sees, PID 1, flowrun on PATH),
a deleted pod, the platforms without a manifest, the command line and its `down` after a crash, and
the manifests it refuses. A few seconds each.

  python3 -m pytest tests/e2e/pods/test_podsim.py [--flowrun build/dev/flowrun] [-k NAME]
"""
import json
import os
import re
import subprocess
import sys

import pytest

import kube
import podsim

IMAGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "image")  # what each pod gets at its workingDir

pytestmark = [pytest.mark.pods]

PORT = 23999  # any port: pods reach each other on every one
TOKEN = "tok-3f9a0c"
LIMIT = 60


def indexed_job(name="probe", nodes=3, service=None, selector=None, command=None, args=None, grace=5):
    """The objects `flowrun manifest` writes, with the probe as the container: a Secret <name>-token,
    a headless Service, an Indexed Job with subdomain, the downward API's fields and the token
    mounted read-only with mode 0400."""
    service = service or name
    names = ",".join(f"{name}-{i}.{service}" for i in range(nodes))
    command = command or ["/usr/bin/python3", "probe.py"]
    args = args if args is not None else ["--names", names]
    return f"""\
apiVersion: v1
kind: Secret
metadata: {{name: {name}-token}}
type: Opaque
stringData: {{token: {TOKEN}}}
---
apiVersion: v1
kind: Service
metadata: {{name: {service}}}
spec:
  clusterIP: None
  selector: {json.dumps(selector or {"job-name": name})}
---
apiVersion: batch/v1
kind: Job
metadata: {{name: {name}}}
spec:
  completionMode: Indexed
  completions: {nodes}
  parallelism: {nodes}
  backoffLimit: 0
  template:
    metadata:
      labels: {{app.kubernetes.io/name: flowrun}}
    spec:
      subdomain: {service}
      restartPolicy: Never
      terminationGracePeriodSeconds: {grace}
      containers:
      - name: flowrun
        image: flowrun:test
        command: {json.dumps(command)}
        args: {json.dumps(args)}
        workingDir: /workspace
        env:
        - {{name: FLOWRUN_GANG_NODES, value: "{nodes}"}}
        - {{name: FLOWRUN_GANG_HEAD, value: {name}-0.{service}}}
        - {{name: FLOWRUN_TOKEN_FILE, value: /etc/flowrun/token}}
        - name: POD_NAME
          valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}
        - name: POD_IP
          valueFrom: {{fieldRef: {{fieldPath: status.podIP}}}}
        - name: APP
          valueFrom: {{fieldRef: {{fieldPath: "metadata.labels['app.kubernetes.io/name']"}}}}
        - {{name: HEAD_ENDPOINT, value: "$(FLOWRUN_GANG_HEAD):{PORT}"}}
        volumeMounts:
        - {{name: token, mountPath: /etc/flowrun, readOnly: true}}
      volumes:
      - name: token
        secret: {{secretName: {name}-token, defaultMode: 0400}}
"""


def jobset(name="js", rjob="workers", nodes=2, command=None):
    return f"""\
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {{name: {name}}}
spec:
  network: {{enableDNSHostnames: true}}
  replicatedJobs:
  - name: {rjob}
    replicas: 1
    template:
      spec:
        completionMode: Indexed
        completions: {nodes}
        parallelism: {nodes}
        template:
          spec:
            restartPolicy: Never
            terminationGracePeriodSeconds: 1
            containers:
            - name: flowrun
              image: flowrun:test
              command: {json.dumps(command)}
              workingDir: /workspace
              env:
              - name: FLOWRUN_JOBSET_NAME
                valueFrom: {{fieldRef: {{fieldPath: "metadata.labels['jobset.sigs.k8s.io/jobset-name']"}}}}
"""


def probe(pods, key):
    """The probe's report from the pod's log."""
    m = pods.wait_line(key, r"^PROBE (.*)$", LIMIT)
    return json.loads(m.group(1))


def start_lines(pods):
    with open(os.path.join(pods.dir, "podsim.log")) as f:
        return re.findall(r"started (\S+) \(", f.read())


# --- a manifest's pods, from inside -----------------------------------------------------------


@pytest.mark.root
def test_indexed_job_pods(pods, flowrun, check):
    keys = pods.add_manifest(indexed_job(), IMAGE, pod_env={"probe-2": {"PROBE_EXIT": "7"}})
    check(keys == ["probe-0", "probe-1", "probe-2"], "the pods are <job>-<index>", keys)
    # Index 0 listens; the others dial it by its DNS name, whenever each starts.
    for key in keys:
        pod = pods.pod(key)
        pod.args += ["--listen", str(PORT), "--peers", "2"] if key == "probe-0" else ["--connect",
                                                                                     "$(HEAD_ENDPOINT)"]
    pods.start()
    seen = {key: probe(pods, key) for key in keys}
    codes = {key: pods.wait(key, LIMIT) for key in keys}
    check(codes == {"probe-0": 0, "probe-1": 0, "probe-2": 7}, "each pod's exit code (PROBE_EXIT added to probe-2)",
          codes)
    order, _ = podsim.start_order(keys, pods.seed, pods.delay)
    check(start_lines(pods) == order == pods.order, "the pods started in the seed's order",
          f"seed {pods.seed}: {start_lines(pods)} vs {order}")
    ips = {key: pods.ip(key) for key in keys}
    check(len(set(ips.values())) == 3, "each pod has an address of its own", ips)
    for i, key in enumerate(keys):
        got, pod = seen[key], pods.pod(key)
        env = got["env"]
        check(got["hostname"] == key, f"{key}: host name", got["hostname"])
        check(got["pid"] == 1 and len(got["procs"]) == 1, f"{key}: the command is PID 1 and alone in its PIDs",
              got["procs"])
        check(got["cwd"] == "/workspace", f"{key}: runs in workingDir", got["cwd"])
        check(got["flowrun"] == os.path.realpath(flowrun), f"{key}: PATH's flowrun is the build", got["flowrun"])
        want = {"PATH", "HOSTNAME", "HOME", "JOB_COMPLETION_INDEX", "FLOWRUN_GANG_NODES", "FLOWRUN_GANG_HEAD",
                "FLOWRUN_TOKEN_FILE", "POD_NAME", "POD_IP", "APP", "HEAD_ENDPOINT"} | set(kube.service_links())
        if key == "probe-2":
            want.add("PROBE_EXIT")
        check(set(env) == want, f"{key}: exactly the kubelet's variables", sorted(set(env) ^ want))
        check(env.get("JOB_COMPLETION_INDEX") == str(i) and env.get("HOSTNAME") == key and env.get("HOME") == "/root",
              f"{key}: JOB_COMPLETION_INDEX, HOSTNAME, HOME", env)
        check(env.get("POD_NAME") == pod.name and re.fullmatch(rf"{key}-[a-z0-9]{{5}}", pod.name),
              f"{key}: metadata.name through the downward API", env.get("POD_NAME"))
        check(env.get("POD_IP") == ips[key] and env.get("APP") == "flowrun", f"{key}: status.podIP and a label",
              env)
        check(env.get("HEAD_ENDPOINT") == f"probe-0.probe:{PORT}", f"{key}: $(VAR) expanded", env)
        check(env.get("PATH", "").startswith(os.path.join(pods.dir, "bin") + ":"), f"{key}: flowrun's directory first",
              env.get("PATH"))
        names = {f"{k}.probe": ips[k] for k in keys}
        check(got["resolved"] == names, f"{key}: every pod's DNS name resolves to its address", got["resolved"])
        secret = got["secret"] or {}
        check(secret.get("text") == TOKEN and secret.get("mode") == "0o400" and secret.get("link"),
              f"{key}: the Secret's key as a file of mode 0400 (a link through ..data)", secret)
        check(secret.get("writable") == "Read-only file system" and "..data" in secret.get("dir", []),
              f"{key}: the Secret's volume is read-only, in Kubernetes' layout", secret)
        check(got["markers"] == {".": [f"marker-{key}"], "/tmp": [f"marker-{key}"]},
              f"{key}: its workdir and /tmp hold its own marker alone", got["markers"])
    check(seen["probe-0"].get("peers") == {k: ips[k] for k in keys[1:]},
          "the head pod was reached on an arbitrary port by each other pod, from its address",
          seen["probe-0"].get("peers"))
    check(all(seen[k].get("reply") == f"hello {k} from probe-0" for k in keys[1:]), "each pod had the head's answer",
          {k: seen[k].get("reply") for k in keys[1:]})
    with open(pods.path("probe-1", "hosts")) as f:
        hosts = f.read()
    check(f"{ips['probe-1']}\tprobe-1.probe.default.svc.cluster.local\tprobe-1" in hosts,
          "the kubelet's own line in the pod's hosts file", hosts)
    check(pods.leftovers() == [], "nothing left running in any pod", pods.leftovers())


@pytest.mark.root
def test_flowrun_runs_in_a_pod(run_manifest, flowrun, check):
    pods = run_manifest(indexed_job(nodes=2, command=["flowrun"], args=["--version"]), IMAGE, background=True)
    for key in ("probe-1", "probe-0"):  # whichever starts first
        check(pods.wait(key, LIMIT) == 0, f"{key}: flowrun --version, found on PATH, exits 0", pods.log(key))
        check(re.match(r"flowrun \d+\.\d+\.\d+ ", pods.log(key)), f"{key}: its log is flowrun's", pods.log(key))
    check(pods.leftovers() == [], "nothing left running in any pod", pods.leftovers())


@pytest.mark.root
def test_a_service_that_selects_no_pod_publishes_no_names(pods, check):
    keys = pods.add_manifest(indexed_job(nodes=1, selector={"job-name": "other"}, args=[]), IMAGE)
    pods.start()
    got = probe(pods, keys[0])
    check(pods.pod(keys[0]).dns_names == [], "no DNS names for a pod its Service does not select",
          pods.pod(keys[0]).dns_names)
    check(got["hostname"] == "probe-0", "the pod runs all the same", got["hostname"])
    check(pods.wait(keys[0], LIMIT) == 0, "its exit code", pods.log(keys[0]))


# --- a pod deleted ----------------------------------------------------------------------------


@pytest.mark.root
def test_a_deleted_pod_leaves_nothing(pods, check):
    # Pod 0: a shell as PID 1 (SIGTERM is ignored, as in a container without an init) with a child
    # and a grandchild in a session of its own; pod 1: the probe, which exits 42 on SIGTERM.
    shell = ("sleep 1000 & (setsid sleep 1001 &); echo ready; wait")
    keys = pods.add_manifest(jobset(command=["sh", "-c", shell]), IMAGE)
    check(keys == ["js-workers-0-0", "js-workers-0-1"], "a JobSet's pods are <jobset>-<rjob>-<job>-<index>", keys)
    pods.pod(keys[1]).command = ["/usr/bin/python3", "probe.py", "--names", "js-workers-0-0.js", "--wait-term"]
    pods.start()
    pods.wait_line(keys[0], "^ready$", LIMIT)
    pods.wait_line(keys[1], "^waiting for SIGTERM$", LIMIT)
    got = probe(pods, keys[1])
    check(got["env"].get("FLOWRUN_JOBSET_NAME") == "js", "the JobSet's name from its label", got["env"])
    check(got["resolved"] == {"js-workers-0-0.js": pods.ip(keys[0])}, "the JobSet's Service names its pods",
          got["resolved"])
    check(len(pods.pids(keys[0])) >= 4, "pod 0 runs its shell, two sleeps (and unshare)", pods.pids(keys[0]))
    code = pods.kill(keys[0], grace=1)
    check(code == 137, "a PID 1 that ignores SIGTERM is killed after the grace: 128+9", code)
    check(f"{podsim.NS_PREFIX}{pods.rec[keys[0]]['slot']}" not in podsim.pod_netns(), "its network namespace is gone",
          podsim.pod_netns())
    check(pods.rec[keys[0]]["veth"] not in podsim.pod_links(), "its port of the bridge is gone", podsim.pod_links())
    hosts = pods.exec(keys[1], ["cat", "/etc/hosts"]).stdout
    check("js-workers-0-1.js" in hosts and "js-workers-0-0.js" not in hosts,
          "its names left the other pod's hosts file", hosts)
    check([line for line in pods.leftovers() if f"({keys[0]})" in line] == [], "nothing of it runs",
          pods.leftovers())
    check(pods.kill(keys[1], grace=30) == 42, "SIGTERM reaches a PID 1 that handles it", pods.log(keys[1]))
    check(pods.leftovers() == [], "nothing left running in any pod", pods.leftovers())


@pytest.mark.root
def test_a_pod_made_again(pods, check):
    # As the Job controller replaces a failed pod of an index: a new address, a fresh image copy.
    keys = pods.add_manifest(indexed_job(nodes=2, args=["--names", "probe-0.probe,probe-1.probe"]), IMAGE)
    pods.start()
    first = probe(pods, keys[0])
    check([pods.wait(k, LIMIT) for k in keys] == [0, 0], "both ran", [pods.log(k) for k in keys])
    old_ip, old_name = pods.ip(keys[0]), pods.pod(keys[0]).name
    pods.recreate(keys[0])
    again = probe(pods, keys[0])
    check(pods.ip(keys[0]) != old_ip and pods.pod(keys[0]).name != old_name, "a new address and name",
          (old_ip, pods.ip(keys[0]), old_name, pods.pod(keys[0]).name))
    check(again["hostname"] == keys[0] and again["env"]["JOB_COMPLETION_INDEX"] == "0", "the same host name and index",
          again["env"])
    check(again["resolved"]["probe-0.probe"] == pods.ip(keys[0]) and first["resolved"]["probe-0.probe"] == old_ip,
          "its name resolves to the new address", again["resolved"])
    check(again["markers"]["."] == ["marker-probe-0"], "a fresh copy of the image", again["markers"])
    check("PROBE " in pods.log(keys[0] + "#1") and pods.wait(keys[0], LIMIT) == 0, "the old log is kept",
          pods.log(keys[0] + "#1"))
    check(pods.leftovers() == [], "nothing left running in any pod", pods.leftovers())


# --- the platforms without a manifest ---------------------------------------------------------

PLATFORM_VARS = {
    "trainjob": ({"PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT",
                  "JOB_COMPLETION_INDEX"} | set(kube.service_links()), "PET_MASTER_ADDR"),
    "pytorchjob": ({"PYTHONUNBUFFERED", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK"}
                   | set(kube.service_links()), "MASTER_ADDR"),
    "aws_batch": ({"AWS_BATCH_JOB_ID", "AWS_BATCH_JOB_ATTEMPT", "AWS_BATCH_JOB_NODE_INDEX", "AWS_BATCH_JOB_NUM_NODES",
                   "AWS_BATCH_JOB_MAIN_NODE_INDEX"} | set(kube.service_links()), None),
    "skypilot": ({"SKYPILOT_NODE_RANK", "SKYPILOT_NUM_NODES", "SKYPILOT_NODE_IPS", "SKYPILOT_NUM_GPUS_PER_NODE",
                  "SKYPILOT_TASK_ID"} | set(kube.service_links()), None),
}
HEAD_KEY = {"trainjob": "train-node-0-0", "pytorchjob": "train-master-0", "aws_batch": "train-node-0",
            "skypilot": "train-0"}


@pytest.mark.root
@pytest.mark.parametrize("platform", podsim.gangs.PLATFORMS)
def test_platform_pods(pods, check, platform):
    keys = pods.add_gang(platform, 3, ["/usr/bin/python3", "probe.py"], IMAGE, gpus=2,
                         env={"FLOWRUN_TOKEN": TOKEN})
    head = HEAD_KEY[platform]
    check(keys[0] == head, "node 0 is the platform's head", keys)
    for key in keys:
        var = PLATFORM_VARS[platform][1]
        if var:  # the head's name as the platform gives it, resolved in each pod
            pods.pod(key).args = ["--names", f"$({var})"]
    pods.start()
    ips = [pods.ip(k) for k in keys]
    for i, key in enumerate(keys):
        got = probe(pods, key)
        env = got["env"]
        want = PLATFORM_VARS[platform][0] | {"PATH", "HOSTNAME", "HOME", "FLOWRUN_TOKEN"}
        if platform == "aws_batch" and i:
            want.add("AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS")
        check(set(env) == want, f"{key}: exactly the platform's variables", sorted(set(env) ^ want))
        check(got["hostname"] == env.get("HOSTNAME") == pods.pod(key).hostname, f"{key}: its host name",
              got["hostname"])
        if platform == "trainjob":
            pet = [env.get(f"PET_{k}") for k in ("NODE_RANK", "NNODES", "MASTER_ADDR", "MASTER_PORT")]
            check(pet == [str(i), "3", "train-node-0-0.train", "29500"], f"{key}: PET_*", env)
        elif platform == "pytorchjob":
            check((env.get("RANK"), env.get("WORLD_SIZE"), env.get("MASTER_ADDR"), env.get("MASTER_PORT"))
                  == (str(i), "3", "train-master-0", "23456"), f"{key}: RANK, WORLD_SIZE in pods, MASTER_*", env)
        elif platform == "aws_batch":
            check((env.get("AWS_BATCH_JOB_NODE_INDEX"), env.get("AWS_BATCH_JOB_NUM_NODES"),
                   env.get("AWS_BATCH_JOB_MAIN_NODE_INDEX"), env.get("AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS"))
                  == (str(i), "3", "0", ips[0] if i else None), f"{key}: AWS_BATCH_JOB_*", env)
            check(re.fullmatch(rf"[0-9a-f-]{{36}}#{i}", env.get("AWS_BATCH_JOB_ID", "")), f"{key}: the node's job id",
                  env.get("AWS_BATCH_JOB_ID"))
        else:
            check((env.get("SKYPILOT_NODE_RANK"), env.get("SKYPILOT_NUM_NODES"), env.get("SKYPILOT_NODE_IPS"),
                   env.get("SKYPILOT_NUM_GPUS_PER_NODE")) == (str(i), "3", "\n".join(ips), "2"),
                  f"{key}: SKYPILOT_*", env)
        if PLATFORM_VARS[platform][1]:
            check(list(got["resolved"].values()) == [ips[0]], f"{key}: the head's name resolves to node 0",
                  got["resolved"])
        check(pods.wait(key, LIMIT) == 0, f"{key}: exit 0", pods.log(key))
    check(pods.leftovers() == [], "nothing left running in any pod", pods.leftovers())


@pytest.mark.root
def test_pytorchjob_with_pet_and_a_mounted_token(pods, check):
    keys = pods.add_gang("pytorchjob", 2, ["/usr/bin/python3", "probe.py"], IMAGE, pet=True, nproc=4,
                         env={"FLOWRUN_TOKEN_FILE": "/etc/flowrun/token"}, secret=("/etc/flowrun", {"token": TOKEN},
                                                                                    0o400))
    pods.start()
    got = probe(pods, keys[1])
    env = got["env"]
    check((env.get("RANK"), env.get("PET_NODE_RANK"), env.get("PET_NNODES"), env.get("PET_NPROC_PER_NODE"),
           env.get("WORLD_SIZE")) == ("1", "1", "2", "4", "8"), "a recent operator's PET_* and WORLD_SIZE in processes",
          env)
    check((got["secret"] or {}).get("text") == TOKEN and got["secret"]["mode"] == "0o400", "the token's file",
          got["secret"])
    check([pods.wait(k, LIMIT) for k in keys] == [0, 0], "exit 0", [pods.log(k) for k in keys])


# --- the command line, and down after a crash -------------------------------------------------


@pytest.mark.root
def test_command_line_and_down(pods_unavailable, flowrun, scratch, check):
    if pods_unavailable:
        pytest.skip(pods_unavailable)
    state = f"/run/flowrun-test-pods-cli-{os.getpid()}"  # not under /tmp: each pod has its own
    manifest = os.path.join(scratch, "m.yaml")
    with open(manifest, "w") as f:
        f.write(indexed_job(name="cli", nodes=2, command=["sh", "-c", "echo up; exec sleep 1000"], args=[]))
    tool = [sys.executable, os.path.join(os.path.dirname(kube.__file__), "podsim.py"), "--dir", state]

    def run(*argv):
        return subprocess.run(tool + list(argv), capture_output=True, text=True, timeout=LIMIT)

    try:
        up = run("up", manifest, "--image", IMAGE, "--flowrun", flowrun, "--seed", "5", "--delay", "0")
        check(up.returncode == 0 and "cli-1 10.201.0.12" in up.stdout, "up starts the pods and lists them",
              up.stdout + up.stderr)
        again = run("up", manifest, "--image", IMAGE, "--flowrun", flowrun)
        check(again.returncode == 1 and "down first" in again.stderr, "a second up is refused", again.stderr)
        hostname = run("exec", "cli-0", "hostname")
        check(hostname.stdout.strip() == "cli-0", "exec runs in the pod", hostname.stdout + hostname.stderr)
        status = run("status")
        check(re.search(r"cli-1 +10\.201\.0\.12 +running", status.stdout), "status", status.stdout)
        # The command that started the pods is gone, as after a crash: down still finds everything.
        down = run("down")
        check(down.returncode == 0 and "nothing left" in down.stdout, "down removes everything", down.stdout)
        check(not os.path.exists(state) and not os.path.exists("/workspace") and not os.path.exists("/etc/flowrun"),
              "the state and the mount points made on the host are gone", state)
        check(podsim.pod_netns() == [] and podsim.pod_links() == [], "no namespace or link left",
              podsim.pod_netns() + podsim.pod_links())
    finally:
        podsim.down(state)


# --- what needs no root -----------------------------------------------------------------------


def test_start_order_follows_the_seed(check):
    keys = [f"p-{i}" for i in range(8)]
    a, delays = podsim.start_order(keys, 1, 0.5)
    check(podsim.start_order(keys, 1, 0.5) == (a, delays), "the same seed, the same order and delays", a)
    check(a != keys and sorted(a) == keys, "an order shuffled", a)
    check(len({tuple(podsim.start_order(keys, s, 0.5)[0]) for s in range(5)}) > 1, "another seed, another order", a)
    check(delays[0] == 0 and all(0 <= d <= 0.5 for d in delays), "a delay before each but the first", delays)


def test_jobset_replicas_and_no_dns_hostnames(check):
    text = jobset(nodes=2, command=["true"]).replace("replicas: 1", "replicas: 2")
    pods = kube.pods_from_manifest(text)
    check([p.hostname for p in pods] == ["js-workers-0-0", "js-workers-0-1", "js-workers-1-0", "js-workers-1-1"],
          "each replica an Indexed Job <jobset>-<rjob>-<replica>", [p.hostname for p in pods])
    last = pods[3]
    env = last.environment("10.201.0.14", "/bin")
    check((env["JOB_COMPLETION_INDEX"], last.labels[kube.JOBSET + "job-index"],
           last.labels[kube.JOBSET + "job-global-index"]) == ("1", "1", "1"), "the index within its Job, the Job's",
          last.labels)
    check(last.subdomain == "js" and last.dns_names[-1] == "js-workers-1-1.js", "the JobSet's own Service names it",
          last.dns_names)
    off = kube.pods_from_manifest(text.replace("enableDNSHostnames: true", "enableDNSHostnames: false"))
    check(all(p.subdomain == "" and p.dns_names == [] for p in off), "no names without enableDNSHostnames",
          [p.dns_names for p in off])


def test_env_expansion():
    env = {"A": "x", "B": "$(A)"}
    assert kube.expand("$(A)-$(B)-$(C)-$$(A)-$", env) == "x-$(A)-$(C)-$(A)-$"


@pytest.mark.parametrize("change,error", [
    (("completionMode: Indexed", "completionMode: NonIndexed"), "Job probe: spec.completionMode is 'NonIndexed'"),
    (("parallelism: 2", "parallelism: 1"), "Job probe: spec.parallelism 1 < completions 2"),
    (("secretName: probe-token", "secretName: nope"), "volume 'token' names secret 'nope', which the manifest lacks"),
    (("secret: {secretName: probe-token, defaultMode: 0400}", "hostPath: {path: /x}"),
     "volume 'token' is hostPath: podsim mounts secret, configMap and emptyDir volumes"),
    (('command: ["/usr/bin/python3", "probe.py"]', "command: []"), "container 'flowrun' has no command"),
    (("fieldPath: status.podIP", "fieldPath: status.phase"), "env POD_IP: fieldPath 'status.phase' is not one"),
])
def test_refused_manifests(change, error):
    text = indexed_job(nodes=2).replace(*change)
    with pytest.raises(kube.ManifestError) as e:
        for pod in kube.pods_from_manifest(text):
            pod.environment("10.201.0.11", "/bin")
    assert error in str(e.value)
