#!/usr/bin/env python3
"""Pods on one Linux machine: the pods of a Kubernetes manifest (an Indexed Job or a JobSet, with
its Secret and headless Service), or a gang of Kubeflow TrainJob, PyTorchJob, AWS Batch or SkyPilot
nodes, each a host of its own, for flowrun's end-to-end tests of gangs (tests/e2e/pods/).

  podsim.py [--dir DIR] up MANIFEST --image DIR --flowrun PATH [--seed N] [--delay S] [--env K=V]...
  podsim.py [--dir DIR] gang PLATFORM N --image DIR --workdir PATH --flowrun PATH [...] -- ARGV...
  podsim.py [--dir DIR] status | logs POD | exec POD CMD... | kill POD [--grace S] | wait POD
  podsim.py [--dir DIR] down       remove everything; says what was left (exit 1 if anything)

Needs root, network namespaces, iproute2 (ip) and util-linux (nsenter, unshare). All state lives in
DIR (--dir, else $FLOWRUN_PODS_DIR, else /run/flowrun-test-pods); `down` is safe to run any time,
also after a crash.

What each pod is (POD below is its host name, which names it here):
  network  the network namespace frp-podS with eth0 at 10.201.0.(10+S) (S its slot, in the order the
           pods were added), a port of the bridge frp-br, which holds 10.201.0.1 (the node, its
           status.hostIP). Pods reach each other on any port; nothing else is routed.
  host     its own UTS namespace with the pod's host name (<job>-<index>, JobSet
           <jobset>-<rjob>-<job>-<index>); its own PID namespace, where the container's command is
           PID 1 (SIGTERM reaches it only if it handles SIGTERM, as in a container without an init).
  files    its own mount namespace over the host's file system, with these private: /tmp, /var/tmp,
           /root, /dev/shm, a copy of the image directory at the container's workingDir (so that no
           workdir is shared: what one pod writes there no other sees), /etc/hosts (the kubelet's
           lines, then every running pod's names as the cluster's DNS answers them, rewritten in place
           as pods come and go), /etc/hostname, /etc/resolv.conf, and each volume: a Secret's or
           ConfigMap's keys as files with the defaultMode (Kubernetes' ..data layout), read-only;
           an emptyDir. The rest of the file system is the host's.
  env      exactly what the Job controller and the kubelet give: PATH (a directory holding `flowrun`,
           a link to the binary under test, ahead of an image's PATH), HOSTNAME, the kubernetes
           Service's variables, the container's env in order (values, $(VAR), the downward API's
           fields, secretKeyRef, configMapKeyRef, envFrom), JOB_COMPLETION_INDEX, HOME=/root; then
           what the test adds. Nothing of the caller's environment.
  command  the container's command and args, verbatim (no shell unless the command is one), in its
           workingDir; stdout and stderr to DIR/pods/POD/log (what `kubectl logs` shows).

Pods start in an order shuffled by the seed, with a random delay (0..--delay s) before each but the
first; the harness's own log (DIR/podsim.log, and the caller's output) says the seed, the order and
when each pod started. `kill` is the pod deleted: SIGTERM to its PID 1, SIGKILL to all its processes
after the grace (terminationGracePeriodSeconds, or --grace), then its network is removed (its address
is gone; its names leave the other pods' hosts files). `wait` gives the exit code as Kubernetes shows
it (128+N for a signal). The same from Python: Pods (tests/e2e/pods/conftest.py's fixture).
"""
import argparse
import copy
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gangs  # noqa: E402
import kube  # noqa: E402

NET = "10.201.0"
BRIDGE, NS_PREFIX, VETH_PREFIX = "frp-br", "frp-pod", "frp-v"
FIRST_HOST, MAX_PODS = 10, 240
DEFAULT_DIR = os.environ.get("FLOWRUN_PODS_DIR", "/run/flowrun-test-pods")
PODINIT = os.path.join(HERE, "podinit.py")
PYTHON = "/usr/bin/python3"
TOOLS_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


class PodsError(Exception):
    pass


def start_order(keys, seed, delay):
    """The order the pods start in and the delay before each, drawn from seed alone."""
    rng = random.Random(seed)
    order = list(keys)
    rng.shuffle(order)
    return order, [0.0] + [round(rng.uniform(0, delay), 3) for _ in order[1:]]


def unavailable():
    """'' when this process may make pods here, else why not (the tests skip, saying it)."""
    if os.geteuid() != 0:
        return "podsim's pods need root (network namespaces, mounts)"
    for tool, package in (("ip", "iproute2"), ("nsenter", "util-linux"), ("unshare", "util-linux")):
        if not shutil.which(tool, path=TOOLS_PATH):
            return f"podsim's pods need {tool} (apt-get install {package})"
    try:
        p = subprocess.run(["unshare", "--net", "--uts", "--mount", "--pid", "--fork", "true"], capture_output=True,
                           text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"namespaces are not available here (unshare: {e})"
    if p.returncode != 0:
        return f"namespaces are not available here (unshare --net --uts --mount --pid: {p.stderr.strip()})"
    name = f"frp-probe-{os.getpid()}"
    p = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if p.returncode != 0:
        return f"network namespaces are not available here (ip netns add: {p.stderr.strip()})"
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return ""


def sh(*argv, check=True):
    p = subprocess.run(argv, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise PodsError(f"{' '.join(argv)}: {p.stderr.strip() or f'exit {p.returncode}'}")
    return p.stdout


def ns_inode(pid, kind="net"):
    try:
        link = os.readlink(f"/proc/{pid}/ns/{kind}")
    except OSError:
        return None
    return int(link[link.index("[") + 1:-1])


def processes(inodes):
    """{pid: inode} of every process whose network namespace is one of inodes."""
    found = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            ino = ns_inode(name)
            if ino in inodes:
                found[int(name)] = ino
    return found


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:100]
    except OSError:
        return "?"


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def pod_netns():
    return [line.split()[0] for line in sh("ip", "netns", "list", check=False).splitlines()
            if line.startswith(NS_PREFIX)]


def pod_links():
    names = []
    for line in sh("ip", "-o", "link", "show", check=False).splitlines():
        name = line.split(": ")[1].split("@")[0]
        if name == BRIDGE or re.fullmatch(VETH_PREFIX + r"\d+", name):
            names.append(name)
    return names


def kill_all(pids, wait=5.0):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    deadline = time.monotonic() + wait
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.02)


class Pods:
    """The pods of one test: add them (add_manifest, add_gang), start them, then wait, kill, look."""

    def __init__(self, flowrun, state_dir=DEFAULT_DIR, seed=None, delay=0.3, log=None):
        self.dir, self.flowrun = state_dir, os.path.abspath(flowrun) if flowrun else ""
        self.seed = seed if seed is not None else random.randrange(1000000)
        self.delay = delay
        self.pods, self.rec = {}, {}  # key -> kube.Pod, key -> what runs it
        self.order, self.keys = [], []
        self._say = log or (lambda line: print(line, flush=True))
        self._lock = threading.RLock()
        self._thread, self._stop = None, threading.Event()
        self._t0 = time.monotonic()
        self._owned = False

    # --- the pods ------------------------------------------------------------------

    def add_manifest(self, text, image, env=None, pod_env=None):
        """The manifest's pods, each with a copy of image at its workingDir; env (all) and pod_env
        (key -> env) are added after the container's own. Returns their keys (host names)."""
        return self._add(kube.pods_from_manifest(text, self.seed), image, None, env, pod_env)

    def add_gang(self, platform, nodes, argv, image, working_dir="/workspace", name="train", env=None,
                 pod_env=None, secret=None, **options):
        """nodes pods of platform (gangs.PLATFORMS) running argv; secret=(mount path, {key: text}, mode)
        mounts a Secret's keys there as in a Kubernetes pod."""
        pods = gangs.gang_pods(platform, name, nodes, argv, working_dir, seed=self.seed, **options)
        return self._add(pods, image, pods, env, pod_env, secret)

    def _add(self, pods, image, gang, env, pod_env, secret=None):
        with self._lock:
            for pod in pods:
                if pod.key in self.pods:
                    raise PodsError(f"a pod named {pod.key} was added already")
            first = max((r["slot"] for r in self.rec.values()), default=0) + 1
            slots = [first + i for i in range(len(pods))]
            if slots[-1] > MAX_PODS:
                raise PodsError(f"podsim runs at most {MAX_PODS} pods")
            ips = [f"{NET}.{FIRST_HOST + s}" for s in slots]
            if gang:
                gangs.fill(gang, ips)
            for pod, slot, ip in zip(pods, slots, ips):
                if image and not pod.working_dir:
                    raise PodsError(f"pod {pod.key}: the container has no workingDir to put the image at")
                if secret:
                    path, keys, mode = secret
                    pod.volumes["flowrun-secret"] = kube.Volume(
                        "flowrun-secret", "secret", {k: (str(v).encode(), mode) for k, v in keys.items()})
                    pod.mounts.append(kube.Mount("flowrun-secret", path, True))
                for name, value in list((env or {}).items()) + list(((pod_env or {}).get(pod.key) or {}).items()):
                    pod.env.append({"name": name, "value": str(value)})
                self.pods[pod.key] = pod
                self.rec[pod.key] = {"slot": slot, "ip": ip, "state": "added", "image": image,
                                     "ns": f"{NS_PREFIX}{slot}", "veth": f"{VETH_PREFIX}{slot}",
                                     "started": threading.Event()}
                self.keys.append(pod.key)
            return [p.key for p in pods]

    def ip(self, key):
        return self.rec[key]["ip"]

    def pod(self, key):
        return self.pods[key]

    def path(self, key, *parts):
        return os.path.join(self.dir, "pods", key, *parts)

    # --- starting ------------------------------------------------------------------

    def start(self, background=False):
        """Starts every pod not started yet, in the seed's order, with its delays; background: in a
        thread (wait() and wait_line() then wait for a pod's start too)."""
        with self._lock:
            self._up()
            keys = [k for k in self.keys if self.rec[k]["state"] == "added"]
            order, delays = start_order(keys, self.seed, self.delay)
            self.order += order
            self.say(f"seed {self.seed}: start order {' '.join(order)}; delays "
                     f"{' '.join(f'{d:.2f}' for d in delays)} s")
        if background:
            self._thread = threading.Thread(target=self._start_all, args=(order, delays), daemon=True)
            self._thread.start()
        else:
            self._start_all(order, delays)

    def _start_all(self, order, delays):
        for key, delay in zip(order, delays):
            if self._stop.wait(delay):  # a start delay (what a scheduler's spread is), never a test's wait
                return
            with self._lock:
                if self.rec[key]["state"] == "added":
                    try:
                        self._start(key)
                    except Exception as e:  # noqa: BLE001 (a thread: say it, and the waits see it)
                        self.rec[key]["state"], self.rec[key]["error"] = "failed", str(e)
                        self.say(f"{key}: could not start: {e}")
                self.rec[key]["started"].set()

    def _up(self):
        if self._owned:
            return
        owner = os.path.join(self.dir, "owner")
        private = [p for p in ("/tmp", "/var/tmp", "/root") if (self.dir + "/").startswith(p + "/")]
        if private or not os.path.isabs(self.dir):
            where = private[0] if private else "a relative path"
            raise PodsError(f"the state directory {self.dir} must be an absolute path the pods see, not under "
                            f"{where}: each pod has its own /tmp, /var/tmp and /root")
        if os.path.exists(self.dir):
            raise PodsError(f"pods are up already ({self.dir} exists); run {__file__} --dir {self.dir} down first")
        used = sh("ip", "-o", "-4", "addr", "show", "to", f"{NET}.0/24", check=False).strip()
        if used:
            raise PodsError(f"{NET}.0/24 is in use here already ({used.split()[1]}); remove it first")
        os.makedirs(os.path.join(self.dir, "bin"))
        os.chmod(self.dir, 0o755)
        with open(owner, "w") as f:
            f.write(f"{os.getpid()}\n")
        self._owned = True
        if self.flowrun:
            os.symlink(self.flowrun, os.path.join(self.dir, "bin", "flowrun"))
        sh("ip", "link", "add", BRIDGE, "type", "bridge")
        sh("ip", "addr", "add", f"{NET}.1/24", "dev", BRIDGE)
        sh("ip", "link", "set", BRIDGE, "up")

    def _start(self, key):
        pod, r = self.pods[key], self.rec[key]
        d = self.path(key)
        for sub, mode in (("tmp", 0o1777), ("var-tmp", 0o1777), ("root", 0o700), ("volumes", 0o755)):
            os.makedirs(os.path.join(d, sub))
            os.chmod(os.path.join(d, sub), mode)
        env = pod.environment(r["ip"], os.path.join(self.dir, "bin"))
        argv = pod.argv(env)
        mounts = [(os.path.join(d, "tmp"), "/tmp"), (os.path.join(d, "var-tmp"), "/var/tmp"),
                  (os.path.join(d, "root"), "/root")]
        if r["image"]:
            shutil.copytree(r["image"], os.path.join(d, "work"), symlinks=True)
            mounts.append((os.path.join(d, "work"), pod.working_dir))
        self._write(os.path.join(d, "hosts"), kube.hosts_file(pod, r["ip"], []))
        self._write(os.path.join(d, "hostname"), pod.hostname + "\n")
        self._write(os.path.join(d, "resolv.conf"), kube.resolv_conf(pod.namespace))
        mounts.append((os.path.join(d, "hosts"), "/etc/hosts"))
        if os.path.exists("/etc/hostname"):
            mounts.append((os.path.join(d, "hostname"), "/etc/hostname"))
        mounts.append((os.path.join(d, "resolv.conf"), "/etc/resolv.conf"))
        read_only = set()
        for m in pod.mounts:
            source = self._volume(d, pod.volumes[m.volume], m)
            mounts.append((source, m.path))
            if m.read_only or pod.volumes[m.volume].kind != "emptyDir":
                read_only.add(m.path)
        for i, (source, target) in enumerate(mounts):
            self._mount_point(target, os.path.isdir(source), mounts[:i])
        with open(os.path.join(d, "pod.json"), "w") as f:
            json.dump({"hostname": pod.hostname, "cwd": pod.working_dir or "/", "argv": argv, "env": env,
                       "mounts": [(s, t, t in read_only) for s, t in mounts]}, f, indent=1)
        self._network(key)
        log = open(os.path.join(d, "log"), "ab")
        # The kubelet's part: run the pod, then keep its exit code (128+N for a signal, as sh says it).
        kubelet = ["sh", "-c", '"$@"; echo $? >"$0"', os.path.join(d, "exit"), "nsenter", f"--net=/run/netns/{r['ns']}",
                   "unshare", "--uts", "--mount", "--pid", "--fork", "--mount-proc", "--kill-child", "--",
                   PYTHON, "-I", PODINIT, os.path.join(d, "pod.json")]
        r["proc"] = subprocess.Popen(kubelet, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True, env={"PATH": TOOLS_PATH}, cwd="/")
        log.close()
        r["state"], r["at"] = "running", time.monotonic()
        self._record(key, kubelet=r["proc"].pid)
        self.say(f"started {key} ({r['ip']}, pod {pod.name})")
        self._publish()

    def _volume(self, d, volume, mount):
        """The directory (or file, for a subPath) a volume's mount binds, made as the kubelet would."""
        root = os.path.join(d, "volumes", volume.name)
        if not os.path.exists(root):
            os.makedirs(root)
            if volume.kind != "emptyDir":
                write_volume(root, volume.files)
        if not mount.sub_path:
            return root
        if volume.kind == "emptyDir":
            os.makedirs(os.path.join(root, mount.sub_path), exist_ok=True)
            return os.path.join(root, mount.sub_path)
        return os.path.realpath(os.path.join(root, mount.sub_path))

    def _mount_point(self, target, is_dir, earlier):
        """Makes target, where a mount goes: beneath an earlier mount's source when it lies inside that
        mount (a workingDir under /tmp), else on the host, noted in DIR/made for `down` to remove."""
        for source, where in reversed(earlier):
            if target.startswith(where.rstrip("/") + "/") and os.path.isdir(source):
                inside = os.path.join(source, os.path.relpath(target, where))
                if not os.path.exists(inside):
                    os.makedirs(inside if is_dir else os.path.dirname(inside), exist_ok=True)
                    if not is_dir:
                        open(inside, "a").close()
                return
        if os.path.lexists(target):
            return
        made, parent = [], os.path.dirname(target)
        while not os.path.exists(parent):
            made.append(parent)
            parent = os.path.dirname(parent)
        for p in reversed(made):
            os.mkdir(p)
        if is_dir:
            os.mkdir(target)
        else:
            open(target, "a").close()
        with open(os.path.join(self.dir, "made"), "a") as f:
            f.writelines(p + "\n" for p in list(reversed(made)) + [target])

    def _network(self, key):
        r = self.rec[key]
        ns, veth = r["ns"], r["veth"]
        sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        sh("ip", "link", "set", veth, "master", BRIDGE, "up")
        sh("ip", "-n", ns, "addr", "add", f"{r['ip']}/24", "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        r["inode"] = os.stat(f"/run/netns/{ns}").st_ino

    def _publish(self):
        """Every running pod's hosts file: its own lines and the names of every running pod. Written in
        place: each is bind-mounted, so a new file would not be seen."""
        live = [k for k in self.keys if self.rec[k]["state"] == "running"]
        others = [(self.rec[k]["ip"], self.pods[k].dns_names) for k in live]
        for k in live:
            with open(self.path(k, "hosts"), "r+") as f:
                f.write(kube.hosts_file(self.pods[k], self.rec[k]["ip"], others))
                f.truncate()

    def _record(self, key, **more):
        r = self.rec[key]
        pod = self.pods[key]
        keep = {k: r.get(k) for k in ("slot", "ip", "ns", "veth", "inode", "state")}
        keep.update(key=key, grace=pod.grace, hostname=pod.hostname, subdomain=pod.subdomain,
                    dns_names=pod.dns_names, **more)
        self._write(self.path(key, "record.json"), json.dumps(keep))

    @staticmethod
    def _write(path, text):
        with open(path, "w") as f:
            f.write(text)

    def say(self, what):
        line = f"podsim: +{time.monotonic() - self._t0:.2f} s {what}"
        self._say(line)
        if self._owned:
            with open(os.path.join(self.dir, "podsim.log"), "a") as f:
                f.write(line + "\n")

    # --- watching ------------------------------------------------------------------

    def _wait_started(self, key, timeout):
        r = self.rec[key]
        if r["state"] == "added" and not r["started"].wait(timeout):
            raise TimeoutError(f"pod {key} did not start within {timeout} s")
        if r["state"] == "failed":
            raise PodsError(f"pod {key} could not start: {r['error']}")

    def wait(self, key, timeout=None):
        """The pod's exit code once it has exited (None for a pod deleted before it started)."""
        start = time.monotonic()
        self._wait_started(key, timeout)
        r = self.rec[key]
        if "proc" not in r:
            return r.get("exit")
        left = None if timeout is None else max(0.0, timeout - (time.monotonic() - start))
        try:
            r["proc"].wait(left)
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"pod {key} still runs after {timeout} s; its log ends:\n{self.log(key)[-3000:]}")
        return self.exit_code(key)

    def exit_code(self, key):
        try:
            with open(self.path(key, "exit")) as f:
                return int(f.read())
        except (OSError, ValueError):
            return None

    def running(self, key):
        r = self.rec[key]
        return r["state"] == "running" and r["proc"].poll() is None

    def log(self, key):
        try:
            with open(self.path(key, "log"), errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def wait_line(self, key, pattern, timeout):
        """The first match of pattern in the pod's log, waiting for it; TimeoutError with the log if
        none comes within timeout s or the pod exits without one."""
        regex, deadline = re.compile(pattern, re.M), time.monotonic() + timeout
        self._wait_started(key, timeout)
        while True:
            done = not self.running(key)
            m = regex.search(self.log(key))
            if m:
                return m
            if done or time.monotonic() > deadline:
                why = "exited" if done else f"ran {timeout} s"
                raise TimeoutError(f"pod {key} {why} without a line matching {pattern!r}; its log:\n"
                                   f"{self.log(key)[-3000:]}")
            time.sleep(0.02)

    def pids(self, key):
        """The host's pids of every process in the pod."""
        ino = self.rec[key].get("inode")
        return sorted(processes({ino})) if ino else []

    def pid1(self, key):
        """The host's pid of the pod's PID 1 (its container's command), or None."""
        for pid in self.pids(key):
            try:
                with open(f"/proc/{pid}/status") as f:
                    nspid = next((line.split()[1:] for line in f if line.startswith("NSpid:")), [])
            except OSError:
                continue
            if len(nspid) > 1 and nspid[-1] == "1":
                return pid
        return None

    def exec(self, key, argv, timeout=60):
        """argv run in the pod as `kubectl exec` runs it: its namespaces, working directory and env."""
        pid = self.pid1(key)
        if pid is None:
            raise PodsError(f"pod {key} is not running")
        with open(self.path(key, "pod.json")) as f:
            env = json.load(f)["env"]
        return subprocess.run(["nsenter", "-t", str(pid), "-n", "-u", "-m", "-p", "-w", "--", *argv],
                              capture_output=True, text=True, env=env, timeout=timeout)

    def leftovers(self):
        """'pid (pod): command' for every process still in a pod's namespaces."""
        inodes = {r["inode"]: k for k, r in self.rec.items() if r.get("inode")}
        return [f"{pid} ({inodes[ino]}): {cmdline(pid)}" for pid, ino in sorted(processes(inodes).items())]

    # --- ending --------------------------------------------------------------------

    def kill(self, key, grace=None):
        """The pod deleted: SIGTERM to its PID 1, SIGKILL to all of it after the grace, its network
        removed. Returns its exit code (None if it had not started)."""
        with self._lock:
            r, pod = self.rec[key], self.pods[key]
            grace = pod.grace if grace is None else grace
            if r["state"] == "added":
                r["state"] = "deleted"
                r["started"].set()
                self.say(f"deleted {key} before it started")
                return None
            if r["state"] != "running":
                return self.exit_code(key)
            r["state"] = "deleting"
            pid = self.pid1(key)
        # The grace is waited without the lock: the other pods go on starting meanwhile.
        self.say(f"deleting {key}: SIGTERM to its PID 1 (pid {pid}), SIGKILL after {grace:g} s")
        if pid:
            try:
                os.kill(pid, signal.SIGTERM)
            except OSError:
                pass
        try:
            r["proc"].wait(grace)
        except subprocess.TimeoutExpired:
            kill_all(self.pids(key))
            r["proc"].wait(10)
        with self._lock:
            kill_all(self.pids(key))
            r["state"] = "deleted"
            self._remove_network(key)
            self._record(key)
            self._publish()
            code = self.exit_code(key)
            self.say(f"deleted {key}: exit {code}")
            return code

    def recreate(self, key):
        """The pod made again once it has ended or was deleted, as the Job controller replaces a failed
        pod of an index: the same host name, index and environment, a new name and address, a fresh
        copy of the image; started at once. The old one's files stay in DIR/pods/POD#N (its log is what
        `kubectl logs --previous` shows)."""
        with self._lock:
            r = self.rec[key]
            if r["state"] == "added" or self.running(key):
                raise PodsError(f"pod {key} has not ended; kill it (or wait for it) first")
            if r["state"] == "running":  # it exited: its network goes with it
                kill_all(self.pids(key))
                self._remove_network(key)
                r["state"] = "exited"
                self._record(key)
            old = f"{key}#{sum(1 for k in self.rec if k.startswith(key + '#')) + 1}"
            os.rename(self.path(key), self.path(old))
            self.rec[old], self.pods[old] = r, self.pods[key]
            pod = copy.deepcopy(self.pods[key])
            pod.name = f"{pod.name.rsplit('-', 1)[0]}-{kube.pod_suffix(random.Random(f'{self.seed}/{old}'))}"
            slot = max(x["slot"] for x in self.rec.values()) + 1
            if slot > MAX_PODS:
                raise PodsError(f"podsim runs at most {MAX_PODS} pods")
            self.pods[key] = pod
            self.rec[key] = {**{k: r[k] for k in ("image",)}, "slot": slot, "ip": f"{NET}.{FIRST_HOST + slot}",
                             "state": "added", "ns": f"{NS_PREFIX}{slot}", "veth": f"{VETH_PREFIX}{slot}",
                             "started": threading.Event()}
            self._start(key)
            self.rec[key]["started"].set()

    def _remove_network(self, key):
        r = self.rec[key]
        if not self.pids(key):
            sh("ip", "link", "del", r["veth"], check=False)
            sh("ip", "netns", "del", r["ns"], check=False)

    def down(self):
        """Everything removed (processes, network, mount points, DIR); what was left, as lines."""
        self._stop.set()
        if self._thread:
            self._thread.join(30)
        self._owned = False
        return down(self.dir, self._say)


def write_volume(root, files):
    """A Secret's or ConfigMap's files as the kubelet's atomic writer lays them out: the files in a
    timestamped directory, `..data` a link to it, and each key a link through `..data`."""
    stamp = time.strftime("..%Y_%m_%d_%H_%M_%S.") + f"{time.time_ns() % 1000000000:09d}"
    for path, (data, mode) in files.items():
        full = os.path.join(root, stamp, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as f:
            f.write(data)
        os.chmod(full, mode)
    os.makedirs(os.path.join(root, stamp), exist_ok=True)
    os.chmod(os.path.join(root, stamp), 0o755)
    os.symlink(stamp, os.path.join(root, "..data"))
    for top in sorted({p.split("/")[0] for p in files}):
        os.symlink(os.path.join("..data", top), os.path.join(root, top))
    os.chmod(root, 0o1777)


def owner(state_dir=DEFAULT_DIR):
    """The pid of the live process whose pods state_dir holds, or None (none, or it is gone)."""
    try:
        with open(os.path.join(state_dir, "owner")) as f:
            pid = int(f.read())
    except (OSError, ValueError):
        return None
    return pid if alive(pid) else None


def stale(state_dir=DEFAULT_DIR):
    """What pods left here (their state directory, namespaces, links), as after a crash; [] if none."""
    return ([state_dir] if os.path.exists(state_dir) else []) + pod_netns() + pod_links()


def down(state_dir=DEFAULT_DIR, say=print):
    """Ends every process in a pod's network namespace, removes the namespaces, links, the mount points
    made on the host and state_dir; returns what is still there (empty when nothing is)."""
    t0 = time.monotonic()
    inodes = {}
    for ns in pod_netns():
        try:
            inodes[os.stat(f"/run/netns/{ns}").st_ino] = ns
        except OSError:
            pass
    pids = list(processes(inodes))
    kill_all(pids)
    for ns in pod_netns():
        sh("ip", "netns", "del", ns, check=False)
    for link in pod_links():
        if link != BRIDGE:
            sh("ip", "link", "del", link, check=False)
    sh("ip", "link", "del", BRIDGE, check=False)
    made = os.path.join(state_dir, "made")
    if os.path.exists(made):
        with open(made) as f:
            for p in reversed([line.rstrip("\n") for line in f if line.strip()]):
                try:
                    os.rmdir(p) if os.path.isdir(p) else (os.path.getsize(p) == 0 and os.unlink(p))
                except OSError:
                    pass
                if os.path.lexists(p):
                    say(f"podsim: down: {p} was made for the pods and is not empty now; left there")
    shutil.rmtree(state_dir, ignore_errors=True)
    left = [f"process {p}: {cmdline(p)}" for p in pids if alive(p)]
    left += [f"network namespace {ns}" for ns in pod_netns()] + [f"link {name}" for name in pod_links()]
    if os.path.exists(state_dir):
        left.append(f"directory {state_dir}")
    say(f"podsim: down: {len(pids)} processes ended, {len(inodes)} pods removed in {time.monotonic() - t0:.2f} s"
        + (f"; LEFT: {'; '.join(left)}" if left else "; nothing left"))
    return left


# --- the command line -------------------------------------------------------------------


def attached(state_dir):
    """The pods a podsim.py command started, from their records in state_dir."""
    pods = Pods(None, state_dir, log=print)
    pods._owned = os.path.isdir(state_dir)
    root = os.path.join(state_dir, "pods")
    for key in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        with open(os.path.join(root, key, "record.json")) as f:
            rec = json.load(f)
        rec["started"] = threading.Event()
        rec["started"].set()
        pods.rec[key], pods.pods[key] = rec, kube.Pod(key, rec["hostname"], rec["subdomain"], 0, {}, {}, [], [],
                                                      "", [], [], {}, [], grace=rec["grace"],
                                                      dns_names=rec["dns_names"], key=key)
        pods.keys.append(key)
        if rec["state"] == "running":
            rec["proc"] = Kubelet(rec["kubelet"], pods.path(key, "exit"))
    return pods


class Kubelet:
    """A pod's kubelet process that another podsim.py started: its exit code from its exit file."""

    def __init__(self, pid, exit_file):
        self.pid, self.exit_file = pid, exit_file

    def poll(self):
        return 0 if os.path.exists(self.exit_file) or not alive(self.pid) else None

    def wait(self, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired("kubelet", timeout)
            time.sleep(0.05)
        return 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="podsim.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", default=DEFAULT_DIR)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("up", "gang"):
        p = sub.add_parser(name)
        if name == "up":
            p.add_argument("manifest")
        else:
            p.add_argument("platform", choices=gangs.PLATFORMS)
            p.add_argument("nodes", type=int)
            p.add_argument("--workdir", default="/workspace")
            p.add_argument("argv", nargs="+")
        p.add_argument("--image", required=True)
        p.add_argument("--flowrun", required=True)
        p.add_argument("--seed", type=int)
        p.add_argument("--delay", type=float, default=0.3)
        p.add_argument("--env", action="append", default=[], metavar="K=V")
    sub.add_parser("status")
    sub.add_parser("down")
    for name in ("logs", "wait"):
        sub.add_parser(name).add_argument("pod")
    p = sub.add_parser("kill")
    p.add_argument("pod")
    p.add_argument("--grace", type=float)
    p = sub.add_parser("exec")
    p.add_argument("pod")
    p.add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if os.geteuid() != 0 and args.command not in ("logs", "status"):
        sys.exit("podsim.py: needs root (network namespaces, mounts); run it as root")
    try:
        return run(args)
    except (PodsError, kube.ManifestError, TimeoutError) as e:
        sys.exit(f"podsim.py: {e}")


def run(args):
    if args.command in ("up", "gang"):
        pods = Pods(args.flowrun, args.dir, args.seed, args.delay)
        env = dict(kv.split("=", 1) for kv in args.env)
        if args.command == "up":
            with open(args.manifest) as f:
                pods.add_manifest(f.read(), os.path.abspath(args.image), env)
        else:
            pods.add_gang(args.platform, args.nodes, args.argv, os.path.abspath(args.image), args.workdir, env=env)
        try:
            pods.start()
        except Exception:
            if pods._owned:  # not when refused: those are another command's pods
                pods.down()
            raise
        for key in pods.keys:
            print(f"  {key} {pods.ip(key)}")
        return 0
    if args.command == "down":
        return 1 if down(args.dir) else 0
    pods = attached(args.dir)
    if args.command == "status":
        for key in pods.keys:
            r = pods.rec[key]
            code = pods.exit_code(key)
            state = r["state"] if code is None else f"exited {code}"
            print(f"{key:30} {r['ip']:15} {state}")
        return 0
    if args.pod not in pods.rec:
        sys.exit(f"podsim.py: no pod {args.pod!r} in {args.dir}; these are: {' '.join(pods.keys) or 'none'}")
    if args.command == "logs":
        print(pods.log(args.pod), end="")
    elif args.command == "wait":
        return pods.wait(args.pod)
    elif args.command == "kill":
        print(f"exit {pods.kill(args.pod, args.grace)}")
    elif args.command == "exec":
        p = pods.exec(args.pod, args.argv)
        print(p.stdout, end="")
        print(p.stderr, end="", file=sys.stderr)
        return p.returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
