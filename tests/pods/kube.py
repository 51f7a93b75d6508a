"""The pods a Kubernetes manifest makes, as the Job controller, the JobSet controller and the kubelet
would make them: their names, labels, annotations, host names, DNS names, environment, command and
volumes. Pure: no process, file or socket; podsim.py runs what this describes.

  pods = pods_from_manifest(text)       # [Pod] in the manifest's order
  env = pod.environment(ip, flowrun_bin)  # the container's environment, as the kubelet gives it

What it reads: Secrets and ConfigMaps (data, stringData, binaryData), Services (a headless one,
`clusterIP: None`, publishes the DNS names of the pods its selector selects), Indexed Jobs (batch/v1,
`completionMode: Indexed`) and JobSets (jobset.x-k8s.io/v1alpha2, each replicatedJob an Indexed
Job). What it refuses, each with the object and the key: a Job that is not Indexed, parallelism
below completions (the later indexes start only as others finish), init containers, more than one
container, a container without `command` (podsim's image has no ENTRYPOINT), volumes other than
secret, configMap and emptyDir, and a reference to a Secret, ConfigMap or key the manifest lacks.
"""
import base64
import dataclasses
import hashlib
import random
import re

import yaml

NAMESPACE = "default"
CLUSTER_DOMAIN = "cluster.local"
# The kubernetes Service every pod is told of (service links), and the cluster's DNS server.
API_SERVER = "10.96.0.1"
DNS_SERVER = "10.96.0.10"
# What an image's ENV PATH usually is (Debian's and the Docker Official Images').
IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
HOST_IP = "10.201.0.1"
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
JOBSET = "jobset.sigs.k8s.io/"


class ManifestError(Exception):
    """A manifest podsim cannot run; the message names the object and the key."""


@dataclasses.dataclass
class Volume:
    """A volume as the pod sees it: `files` (path -> (bytes, mode)) for a secret or configMap,
    none for an emptyDir (a private directory)."""
    name: str
    kind: str  # secret, configMap, emptyDir
    files: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Mount:
    volume: str
    path: str
    read_only: bool = False
    sub_path: str = ""


@dataclasses.dataclass
class Pod:
    """One pod: what the controllers put in its metadata and spec, and the container's parts."""
    name: str  # metadata.name: <job>-<index>-<5 letters> as the Job controller names it
    hostname: str  # spec.hostname: <job>-<index>
    subdomain: str  # spec.subdomain, '' for none
    index: int  # the completion index (or the rank, for the platforms without one)
    labels: dict
    annotations: dict
    command: list
    args: list
    working_dir: str
    env: list  # the container's env entries as written (name, value or valueFrom), and what is added
    env_from: list
    volumes: dict  # name -> Volume
    mounts: list  # [Mount]
    grace: float = 30.0  # terminationGracePeriodSeconds
    namespace: str = NAMESPACE
    uid: str = ""
    # What resolves to this pod's address in every pod: the headless Service's names for it.
    dns_names: list = dataclasses.field(default_factory=list)
    # Objects of the manifest that env entries may name (secretKeyRef, configMapKeyRef, envFrom).
    objects: dict = dataclasses.field(default_factory=dict)
    # What podsim calls the pod: its host name, but where a platform names the host by its address.
    key: str = ""

    def __post_init__(self):
        self.key = self.key or self.hostname

    def fqdn(self):
        """The first name of the pod's own line in its hosts file, as the kubelet writes it."""
        if self.subdomain:
            return f"{self.hostname}.{self.subdomain}.{self.namespace}.svc.{CLUSTER_DOMAIN}"
        return ""

    def environment(self, ip, bin_dir):
        """The container's environment: the image's PATH (bin_dir, where flowrun is, first), the
        runtime's HOSTNAME, the kubernetes Service's variables, then the container's env in order
        (each `$(NAME)` expanded from those before it, as the kubelet does), then HOME."""
        env = {"PATH": f"{bin_dir}:{IMAGE_PATH}", "HOSTNAME": self.hostname}
        env.update(service_links())
        for source in self.env_from:
            env.update(self._env_from(source))
        for entry in self.env:
            name = entry["name"]
            if "valueFrom" in entry:
                value = self._value_from(name, entry["valueFrom"], ip)
                if value is None:
                    continue
            else:
                value = expand(str(entry.get("value", "")), env)
            env[name] = value
        env.setdefault("HOME", "/root")
        return env

    def argv(self, env):
        """command + args, `$(NAME)` expanded from the environment (the kubelet does it)."""
        return [expand(str(a), env) for a in self.command + self.args]

    def _value_from(self, name, source, ip):
        where = f"pod {self.hostname}: env {name}"
        if "fieldRef" in source:
            return self.field(source["fieldRef"].get("fieldPath", ""), ip, where)
        for key, kind in (("secretKeyRef", "Secret"), ("configMapKeyRef", "ConfigMap")):
            if key in source:
                ref = source[key]
                data = self.objects.get((kind, ref.get("name")))
                if data is None or ref.get("key") not in data:
                    if ref.get("optional"):
                        return None
                    raise ManifestError(f"{where}: {key} names {kind} {ref.get('name')!r} key {ref.get('key')!r}, "
                                        f"which the manifest lacks; add it or mark the reference optional")
                return data[ref["key"]].decode(errors="replace")
        raise ManifestError(f"{where}: valueFrom {sorted(source)} is not emulated; use fieldRef, secretKeyRef "
                            f"or configMapKeyRef")

    def field(self, path, ip, where="downward API"):
        """A downward-API fieldPath's value for this pod ('' for a label or annotation it lacks)."""
        m = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
        if m:
            return (self.labels if m.group(1) == "labels" else self.annotations).get(m.group(2), "")
        simple = {"metadata.name": self.name, "metadata.namespace": self.namespace, "metadata.uid": self.uid,
                  "spec.nodeName": "podsim", "spec.serviceAccountName": "default", "status.hostIP": HOST_IP,
                  "status.hostIPs": HOST_IP, "status.podIP": ip, "status.podIPs": ip}
        if path not in simple:
            raise ManifestError(f"{where}: fieldPath {path!r} is not one the downward API gives "
                                f"({', '.join(simple)}, metadata.labels['KEY'], metadata.annotations['KEY'])")
        return simple[path]

    def _env_from(self, source):
        for key, kind in (("secretRef", "Secret"), ("configMapRef", "ConfigMap")):
            if key in source:
                ref = source[key]
                data = self.objects.get((kind, ref.get("name")))
                if data is None:
                    if ref.get("optional"):
                        return {}
                    raise ManifestError(f"pod {self.hostname}: envFrom {key} names {kind} {ref.get('name')!r}, "
                                        f"which the manifest lacks")
                prefix = source.get("prefix", "")
                return {prefix + k: v.decode(errors="replace") for k, v in data.items()}
        raise ManifestError(f"pod {self.hostname}: envFrom {sorted(source)}: expected secretRef or configMapRef")


def service_links():
    """What every pod's environment says of the kubernetes Service (headless Services give none)."""
    tcp = f"tcp://{API_SERVER}:443"
    return {"KUBERNETES_SERVICE_HOST": API_SERVER, "KUBERNETES_SERVICE_PORT": "443",
            "KUBERNETES_SERVICE_PORT_HTTPS": "443", "KUBERNETES_PORT": tcp, "KUBERNETES_PORT_443_TCP": tcp,
            "KUBERNETES_PORT_443_TCP_PROTO": "tcp", "KUBERNETES_PORT_443_TCP_PORT": "443",
            "KUBERNETES_PORT_443_TCP_ADDR": API_SERVER}


def expand(text, env):
    """The kubelet's `$(NAME)`: the value of NAME where it is defined, else left as written; `$$` is `$`."""
    out, i = [], 0
    while i < len(text):
        if text.startswith("$$", i):
            out.append("$")
            i += 2
            continue
        if text.startswith("$(", i):
            j = text.find(")", i + 2)
            if j != -1:
                name = text[i + 2:j]
                out.append(env[name] if name in env else text[i:j + 1])
                i = j + 1
                continue
        out.append(text[i])
        i += 1
    return "".join(out)


def pod_suffix(rng):
    """Five characters as Kubernetes' generateName draws them."""
    return "".join(rng.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))


def hosts_file(pod, ip, others):
    """A pod's /etc/hosts: the kubelet's lines (its own name), then a line per name that the
    cluster's DNS would answer for another pod (others: [(ip, names)])."""
    lines = ["# Kubernetes-managed hosts file.", "127.0.0.1\tlocalhost",
             "::1\tlocalhost ip6-localhost ip6-loopback", "fe00::0\tip6-localnet", "fe00::0\tip6-mcastprefix"]
    own = [n for n in (pod.fqdn(), pod.hostname) if n]
    lines.append(f"{ip}\t" + "\t".join(own))
    lines.append("# podsim: what the cluster's DNS answers (pods of a headless Service, Services)")
    lines.extend(f"{addr}\t" + " ".join(names) for addr, names in others if names)
    return "\n".join(lines) + "\n"


def resolv_conf(namespace=NAMESPACE):
    return (f"search {namespace}.svc.{CLUSTER_DOMAIN} svc.{CLUSTER_DOMAIN} {CLUSTER_DOMAIN}\n"
            f"nameserver {DNS_SERVER}\noptions ndots:5\n")


def dns_names(hostname, subdomain, namespace=NAMESPACE):
    """The names the cluster's DNS answers for a pod of a headless Service: `<hostname>.<subdomain>`
    and its longer forms (a hosts file has no search list, so each is written out)."""
    base = f"{hostname}.{subdomain}.{namespace}"
    return [f"{base}.svc.{CLUSTER_DOMAIN}", f"{base}.svc", base, f"{hostname}.{subdomain}"]


def service_names(service, namespace=NAMESPACE):
    """The names of a Service of its own (a PyTorchJob's `<job>-master-0`)."""
    base = f"{service}.{namespace}"
    return [f"{base}.svc.{CLUSTER_DOMAIN}", f"{base}.svc", base, service]


# --- the manifest ------------------------------------------------------------------


def pods_from_manifest(text, seed=0):
    """Every pod the manifest's Indexed Jobs and JobSets make, in order; seed draws the names' suffixes
    and uids."""
    try:
        docs = [d for d in yaml.safe_load_all(text) if d]
    except yaml.YAMLError as e:
        raise ManifestError(f"the manifest is not YAML: {e}") from e
    rng = random.Random(seed)
    objects, services, workloads = {}, {}, []
    for doc in docs:
        if not isinstance(doc, dict) or "kind" not in doc:
            raise ManifestError(f"a document without kind: {str(doc)[:80]}")
        kind, name = doc["kind"], (doc.get("metadata") or {}).get("name", "")
        if kind in ("Secret", "ConfigMap"):
            objects[(kind, name)] = object_data(doc)
        elif kind == "Service":
            services[name] = doc.get("spec") or {}
        elif (kind, doc.get("apiVersion")) in (("Job", "batch/v1"), ("JobSet", "jobset.x-k8s.io/v1alpha2")):
            workloads.append(doc)
        elif kind not in ("Namespace", "ServiceAccount", "LocalQueue"):
            raise ManifestError(f"{kind} {name}: podsim runs Secrets, ConfigMaps, Services, Indexed Jobs "
                                f"(batch/v1) and JobSets (jobset.x-k8s.io/v1alpha2), not {doc.get('apiVersion')} "
                                f"{kind}")
    pods = []
    for doc in workloads:
        name = doc["metadata"]["name"]
        if doc["kind"] == "Job":
            pods += job_pods(name, doc.get("spec") or {}, {}, f"Job {name}", rng, objects)
        else:
            pods += jobset_pods(name, doc.get("spec") or {}, rng, objects, services)
    publish(pods, services)
    return pods


def object_data(doc):
    """A Secret's or ConfigMap's keys as bytes."""
    data = {}
    for k, v in (doc.get("data") or {}).items():
        data[k] = base64.b64decode(v) if doc["kind"] == "Secret" else str(v).encode()
    for k, v in (doc.get("binaryData") or {}).items():
        data[k] = base64.b64decode(v)
    for k, v in (doc.get("stringData") or {}).items():
        data[k] = str(v).encode()
    return data


def job_pods(job, spec, extra, where, rng, objects):
    """An Indexed Job's pods: extra holds the labels, annotations and subdomain a JobSet adds."""
    if spec.get("completionMode") != "Indexed":
        raise ManifestError(f"{where}: spec.completionMode is {spec.get('completionMode', 'NonIndexed')!r}: "
                            f"its pods would have no index and no host name; podsim runs Indexed Jobs")
    completions = int(spec.get("completions", 1))
    parallelism = int(spec.get("parallelism", 1))
    if parallelism < completions:
        raise ManifestError(f"{where}: spec.parallelism {parallelism} < completions {completions}: the later "
                            f"indexes would start only as earlier ones finish; podsim starts them all at once")
    template = spec.get("template") or {}
    meta, pspec = template.get("metadata") or {}, template.get("spec") or {}
    container = only_container(pspec, where)
    volumes = pod_volumes(pspec.get("volumes") or [], objects, where)
    mounts = [Mount(m["name"], m["mountPath"], bool(m.get("readOnly")), m.get("subPath", ""))
              for m in container.get("volumeMounts") or []]
    for m in mounts:
        if m.volume not in volumes:
            raise ManifestError(f"{where}: volumeMounts names volume {m.volume!r}, which spec.volumes lacks")
    controller_uid = uid(rng)
    pods = []
    for index in range(completions):
        labels = dict(meta.get("labels") or {})
        labels.update({"batch.kubernetes.io/controller-uid": controller_uid, "batch.kubernetes.io/job-name": job,
                       "controller-uid": controller_uid, "job-name": job, INDEX_ANNOTATION: str(index)})
        labels.update(extra.get("labels", {}))
        annotations = dict(meta.get("annotations") or {})
        annotations[INDEX_ANNOTATION] = str(index)
        annotations.update(extra.get("annotations", {}))
        env = list(container.get("env") or [])
        # The Job controller adds JOB_COMPLETION_INDEX to every container, from the annotation.
        if not any(e.get("name") == "JOB_COMPLETION_INDEX" for e in env):
            env.append({"name": "JOB_COMPLETION_INDEX",
                        "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{INDEX_ANNOTATION}']"}}})
        hostname = pspec.get("hostname") or f"{job}-{index}"
        pods.append(Pod(name=f"{job}-{index}-{pod_suffix(rng)}", hostname=hostname,
                        subdomain=extra.get("subdomain", pspec.get("subdomain", "")), index=index, labels=labels,
                        annotations=annotations, command=list(container.get("command") or []),
                        args=list(container.get("args") or []), working_dir=container.get("workingDir", ""),
                        env=env, env_from=list(container.get("envFrom") or []), volumes=volumes, mounts=mounts,
                        grace=float(pspec.get("terminationGracePeriodSeconds", 30)), uid=uid(rng),
                        objects=objects))
    return pods


def jobset_pods(name, spec, rng, objects, services):
    """A JobSet's pods: each replicatedJob's replicas are Indexed Jobs `<jobset>-<rjob>-<i>`, and the
    JobSet makes the headless Service its subdomain names (network.enableDNSHostnames, default true)."""
    network = spec.get("network") or {}
    subdomain = ""
    if network.get("enableDNSHostnames", True):
        subdomain = network.get("subdomain") or name
        services.setdefault(subdomain, {"clusterIP": "None", "selector": {JOBSET + "jobset-name": name},
                                        "publishNotReadyAddresses": network.get("publishNotReadyAddresses", True)})
    pods, global_index, jobset_uid = [], 0, uid(rng)
    for rjob in spec.get("replicatedJobs") or []:
        rname, replicas = rjob["name"], int(rjob.get("replicas", 1))
        for j in range(replicas):
            job = f"{name}-{rname}-{j}"
            marks = {JOBSET + "jobset-name": name, JOBSET + "jobset-uid": jobset_uid,
                     JOBSET + "replicatedjob-name": rname,
                     JOBSET + "replicatedjob-replicas": str(replicas), JOBSET + "job-index": str(j),
                     JOBSET + "job-global-index": str(global_index), JOBSET + "restart-attempt": "0",
                     JOBSET + "job-key": hashlib.sha1(f"{NAMESPACE}/{job}".encode()).hexdigest()}
            extra = {"labels": marks, "annotations": marks}
            if subdomain:
                extra["subdomain"] = subdomain
            pods += job_pods(job, (rjob.get("template") or {}).get("spec") or {}, extra,
                             f"JobSet {name} replicatedJob {rname}", rng, objects)
            global_index += 1
    return pods


def only_container(pspec, where):
    if pspec.get("initContainers"):
        raise ManifestError(f"{where}: spec.template.spec.initContainers: podsim runs one container a pod")
    containers = pspec.get("containers") or []
    if len(containers) != 1:
        raise ManifestError(f"{where}: spec.template.spec.containers has {len(containers)}; podsim runs exactly one")
    container = containers[0]
    if not container.get("command"):
        raise ManifestError(f"{where}: container {container.get('name')!r} has no command: podsim's image has no "
                            f"ENTRYPOINT, so the manifest must say what to run")
    return container


def pod_volumes(specs, objects, where):
    volumes = {}
    for v in specs:
        name = v.get("name", "")
        if "secret" in v or "configMap" in v:
            kind = "secret" if "secret" in v else "configMap"
            src = v[kind]
            ref = src.get("secretName") if kind == "secret" else src.get("name")
            data = objects.get(("Secret" if kind == "secret" else "ConfigMap", ref))
            if data is None:
                if src.get("optional"):
                    volumes[name] = Volume(name, kind)
                    continue
                raise ManifestError(f"{where}: volume {name!r} names {kind} {ref!r}, which the manifest lacks")
            mode = int(src.get("defaultMode", 0o644))
            items = src.get("items") or [{"key": k, "path": k} for k in sorted(data)]
            files = {}
            for item in items:
                if item["key"] not in data:
                    raise ManifestError(f"{where}: volume {name!r}: {kind} {ref!r} has no key {item['key']!r}")
                files[item["path"]] = (data[item["key"]], int(item.get("mode", mode)))
            volumes[name] = Volume(name, kind, files)
        elif "emptyDir" in v:
            volumes[name] = Volume(name, "emptyDir")
        else:
            kinds = sorted(k for k in v if k != "name")
            raise ManifestError(f"{where}: volume {name!r} is {', '.join(kinds)}: podsim mounts secret, configMap "
                                f"and emptyDir volumes")
    return volumes


def publish(pods, services):
    """Each pod's DNS names: those of the headless Service named by its subdomain, when that Service
    selects it (as the endpoints controller would publish them)."""
    for pod in pods:
        svc = services.get(pod.subdomain) if pod.subdomain else None
        if svc is None or str(svc.get("clusterIP")) != "None":
            continue
        selector = svc.get("selector") or {}
        if selector and all(pod.labels.get(k) == str(v) for k, v in selector.items()):
            pod.dns_names = dns_names(pod.hostname, pod.subdomain, pod.namespace)


def uid(rng):
    h = "%032x" % rng.getrandbits(128)
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
