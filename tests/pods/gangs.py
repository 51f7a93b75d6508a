"""The pods of the platforms that start a gang without a manifest of flowrun's: each node a pod with
the names and variables that platform gives (../shared facts, checked against each one's source):

  trainjob    Kubeflow Trainer v2 TrainJob on its JobSet: pods <trainjob>-node-0-<i> (one Indexed Job
              whose completions are the nodes), subdomain <trainjob>; PET_NNODES, PET_NPROC_PER_NODE,
              PET_NODE_RANK (the completion index), PET_MASTER_ADDR=<trainjob>-node-0-0.<trainjob>,
              PET_MASTER_PORT=29500 (pkg/runtime/framework/plugins/torch/torch.go), and
              JOB_COMPLETION_INDEX; FLOWRUN_JOBSET_NAME only when asked (jobset_name=True).
  pytorchjob  Kubeflow PyTorchJob (training-operator v1): pods <job>-master-0 and <job>-worker-<i>, each
              with a headless Service of its name; MASTER_ADDR=<job>-master-0, MASTER_PORT=23456,
              RANK (master 0, worker i is i+1), WORLD_SIZE = the pods, PYTHONUNBUFFERED=0
              (pkg/controller.v1/pytorch/envvar.go); pet=True adds what recent operators set:
              PET_NNODES, PET_NODE_RANK, PET_NPROC_PER_NODE, and WORLD_SIZE then counts processes.
  aws_batch   AWS Batch multi-node parallel job: AWS_BATCH_JOB_ID (<id>#<node>), AWS_BATCH_JOB_NODE_INDEX,
              AWS_BATCH_JOB_NUM_NODES, AWS_BATCH_JOB_MAIN_NODE_INDEX, and on every node but the main
              one AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS; host names ip-A-B-C-D, no DNS for others.
  skypilot    SkyPilot num_nodes: SKYPILOT_NODE_RANK, SKYPILOT_NUM_NODES, SKYPILOT_NODE_IPS (one address
              a line, the head's first), SKYPILOT_NUM_GPUS_PER_NODE, SKYPILOT_TASK_ID; no DNS for others.

Each platform's variables come after the kubernetes Service's (for the Kubernetes ones) and before
what the test adds. Values that need the pods' addresses are filled by `fill(pods, ips)`.
"""
import random

from kube import INDEX_ANNOTATION, JOBSET, Pod, dns_names, pod_suffix, service_names, uid

PLATFORMS = ("trainjob", "pytorchjob", "aws_batch", "skypilot")


def gang_pods(platform, name, nodes, argv, working_dir, seed=0, nproc="auto", gpus=0, pet=False,
              jobset_name=False, master_port=None):
    """nodes pods of platform, each running argv in working_dir; name is the TrainJob's, the
    PyTorchJob's, the Batch job's or the SkyPilot cluster's."""
    if platform not in PLATFORMS:
        raise ValueError(f"no platform {platform!r}; one of {', '.join(PLATFORMS)}")
    if nodes < 1:
        raise ValueError(f"a gang needs a node at least, not {nodes}")
    rng = random.Random(seed)
    pods = []
    for i in range(nodes):
        pod = Pod(name="", hostname="", subdomain="", index=i, labels={}, annotations={}, command=list(argv),
                  args=[], working_dir=working_dir, env=[], env_from=[], volumes={}, mounts=[], uid=uid(rng))
        if platform == "trainjob":
            trainjob(pod, name, nodes, nproc, jobset_name, rng)
        elif platform == "pytorchjob":
            pytorchjob(pod, name, nodes, nproc, pet, master_port or 23456)
        elif platform == "aws_batch":
            pod.name = pod.key = f"{name}-node-{i}"
            pod.aws_job_id = "%08x-%04x-4%03x-8%03x-%012x" % (rng.getrandbits(32), rng.getrandbits(16),
                                                            rng.getrandbits(12), rng.getrandbits(12),
                                                            rng.getrandbits(48))
        else:
            pod.name = pod.hostname = f"{name}-{i}"
        pod.platform, pod.gpus = platform, gpus
        pod.key = pod.key or pod.hostname
        pods.append(pod)
    return pods


def trainjob(pod, name, nodes, nproc, jobset_name, rng):
    i, job = pod.index, f"{name}-node-0"
    pod.hostname, pod.subdomain = f"{job}-{i}", name
    pod.name = f"{pod.hostname}-{pod_suffix(rng)}"
    marks = {JOBSET + "jobset-name": name, JOBSET + "replicatedjob-name": "node", JOBSET + "job-index": "0",
             JOBSET + "replicatedjob-replicas": "1", JOBSET + "restart-attempt": "0"}
    pod.labels = {**marks, "batch.kubernetes.io/job-name": job, "job-name": job, INDEX_ANNOTATION: str(i),
                  "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}
    pod.annotations = {**marks, INDEX_ANNOTATION: str(i)}
    index_ref = {"fieldRef": {"fieldPath": f"metadata.annotations['{INDEX_ANNOTATION}']"}}
    pod.env = [{"name": "PET_NNODES", "value": str(nodes)}, {"name": "PET_NPROC_PER_NODE", "value": str(nproc)},
               {"name": "PET_NODE_RANK", "valueFrom": index_ref},
               {"name": "PET_MASTER_ADDR", "value": f"{name}-node-0-0.{name}"},
               {"name": "PET_MASTER_PORT", "value": "29500"}]
    if jobset_name:
        pod.env.append({"name": "FLOWRUN_JOBSET_NAME",
                        "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{JOBSET}jobset-name']"}}})
    pod.env.append({"name": "JOB_COMPLETION_INDEX", "valueFrom": index_ref})
    pod.dns_names = dns_names(pod.hostname, name)


def pytorchjob(pod, name, nodes, nproc, pet, port):
    i = pod.index
    pod.hostname = pod.name = f"{name}-master-0" if i == 0 else f"{name}-worker-{i - 1}"
    kind = "master" if i == 0 else "worker"
    pod.labels = {"training.kubeflow.org/job-name": name, "training.kubeflow.org/replica-type": kind,
                  "training.kubeflow.org/replica-index": str(0 if i == 0 else i - 1),
                  "training.kubeflow.org/operator-name": "pytorchjob-controller"}
    if i == 0:
        pod.labels["training.kubeflow.org/job-role"] = "master"
    per_node = int(nproc) if str(nproc).isdigit() else 1
    pod.env = [{"name": "PYTHONUNBUFFERED", "value": "0"}, {"name": "MASTER_PORT", "value": str(port)},
               {"name": "MASTER_ADDR", "value": f"{name}-master-0"},
               {"name": "WORLD_SIZE", "value": str(nodes * per_node if pet else nodes)},
               {"name": "RANK", "value": str(i)}]
    if pet:
        pod.env += [{"name": "PET_NPROC_PER_NODE", "value": str(nproc)},
                    {"name": "PET_NODE_RANK", "value": str(i)}, {"name": "PET_NNODES", "value": str(nodes)}]
    pod.dns_names = service_names(pod.hostname)


def fill(pods, ips):
    """The variables that name the gang's addresses (AWS Batch's main node, SkyPilot's list); ips[i]
    is pods[i]'s address."""
    n = len(pods)
    for pod, ip in zip(pods, ips):
        if pod.platform == "aws_batch":
            pod.env = [{"name": "AWS_BATCH_JOB_ID", "value": f"{pods[0].aws_job_id}#{pod.index}"},
                       {"name": "AWS_BATCH_JOB_ATTEMPT", "value": "1"},
                       {"name": "AWS_BATCH_JOB_NODE_INDEX", "value": str(pod.index)},
                       {"name": "AWS_BATCH_JOB_NUM_NODES", "value": str(n)},
                       {"name": "AWS_BATCH_JOB_MAIN_NODE_INDEX", "value": "0"}]
            if pod.index != 0:
                pod.env.append({"name": "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS", "value": ips[0]})
            # An EC2 host's name; the pod is still called <job>-node-<i> here (its key).
            pod.hostname = "ip-" + ip.replace(".", "-")
        elif pod.platform == "skypilot":
            pod.env = [{"name": "SKYPILOT_NODE_RANK", "value": str(pod.index)},
                       {"name": "SKYPILOT_NUM_NODES", "value": str(n)},
                       {"name": "SKYPILOT_NODE_IPS", "value": "\n".join(ips)},
                       {"name": "SKYPILOT_NUM_GPUS_PER_NODE", "value": str(pod.gpus)},
                       {"name": "SKYPILOT_TASK_ID", "value": f"sky-2026-12-05-00-00-00-000000_{pods[0].name}_1"}]
